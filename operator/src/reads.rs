//! What reconcilers read from the cluster, behind one small interface.
//!
//! Every dereference stage reads through [`Reads`], never through an `Api`
//! of its own. [`ApiReads`] answers Switches, VirtualSwitches and
//! P4Programs from the reflector caches the controllers share
//! ([`crate::cache`]: no request, as fresh as the watch) and ConfigMaps with
//! a GET; unit tests answer from memory ([`fixture::Cluster`]). Writes
//! (status, finalizers, slot claims) are not reads and stay with the
//! reconcilers.

use std::future::Future;

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use p4fleet_crds::{P4Program, Switch, UrlSource, VirtualSwitch};

use crate::artifacts::fetch::{self, Fetcher};
use crate::artifacts::url_source::{self, FetchError};
use crate::cache::{Caches, Filing};

/// Lookups of the objects p4fleet's controllers depend on. `Ok(None)` is
/// "does not exist"; `Err` is a failed request (retried with backoff).
pub trait Reads: Send + Sync {
    /// The Switch `name` (cluster-scoped).
    fn switch(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Switch>, kube::Error>> + Send;
    /// Every Switch.
    fn switches(&self) -> impl Future<Output = Result<Vec<Switch>, kube::Error>> + Send;
    /// The P4Program `ns/name`.
    fn program(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<P4Program>, kube::Error>> + Send;
    /// The VirtualSwitch `ns/name`.
    fn virtual_switch(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<VirtualSwitch>, kube::Error>> + Send;
    /// The VirtualSwitches of `ns`, or of every watched namespace when None.
    fn virtual_switches(
        &self,
        ns: Option<&str>,
    ) -> impl Future<Output = Result<Vec<VirtualSwitch>, kube::Error>> + Send;
    /// The VirtualSwitches whose status places them on Switch `switch`
    /// (in every watched namespace).
    fn virtual_switches_on(
        &self,
        switch: &str,
    ) -> impl Future<Output = Result<Vec<VirtualSwitch>, kube::Error>> + Send {
        async move {
            let mut vss = self.virtual_switches(None).await?;
            vss.retain(|v| placed_on(v, switch));
            Ok(vss)
        }
    }
    /// The ControllerRevision `ns/name` (fresh: a GET).
    fn controller_revision(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<ControllerRevision>, kube::Error>> + Send;
    /// The revisions p4fleet keeps of P4Program `ns/program` (cached).
    fn program_revisions(
        &self,
        ns: &str,
        program: &str,
    ) -> impl Future<Output = Result<Vec<ControllerRevision>, kube::Error>> + Send;
    /// The ConfigMap `ns/name`.
    fn config_map(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<ConfigMap>, kube::Error>> + Send;
    /// The entries revisions p4fleet keeps of the TableEntrySet with uid
    /// `set_uid` in `ns` (fresh: a LIST by label).
    fn entry_revisions(
        &self,
        ns: &str,
        set_uid: &str,
    ) -> impl Future<Output = Result<Vec<ConfigMap>, kube::Error>> + Send;
    /// The bytes of the `url` artifact source `src` of a P4Program in
    /// `ns`, only when they match its sha256; `Ok(Err)` says why not.
    fn artifact(
        &self,
        ns: &str,
        src: &UrlSource,
    ) -> impl Future<Output = Result<Result<Vec<u8>, FetchError>, kube::Error>> + Send;
}

/// Whether `vs`'s status places it on Switch `switch`.
pub fn placed_on(vs: &VirtualSwitch, switch: &str) -> bool {
    vs.status.as_ref().and_then(|s| s.switch.as_deref()) == Some(switch)
}

/// [`Reads`] from the shared caches (Switch, VirtualSwitch, P4Program),
/// by GET (ConfigMap) and by download through `fetcher` (URL artifacts).
#[derive(Clone)]
pub struct ApiReads {
    client: kube::Client,
    switches: Store<Switch>,
    virtual_switches: Store<VirtualSwitch>,
    /// VirtualSwitches by the Switch they are placed on.
    placed: Filing<VirtualSwitch>,
    programs: Store<P4Program>,
    /// Revisions by the program that owns them.
    revisions: Filing<ControllerRevision>,
    fetcher: Arc<Fetcher>,
}

impl ApiReads {
    /// Reads from `caches`, whose watches cover the watched namespaces.
    pub fn new(client: kube::Client, caches: &Caches, fetcher: Arc<Fetcher>) -> Self {
        ApiReads {
            client,
            switches: caches.switches.store(),
            virtual_switches: caches.virtual_switches.store(),
            placed: caches.virtual_switches.filing(),
            programs: caches.programs.store(),
            revisions: caches.revisions.filing(),
            fetcher,
        }
    }
}

/// A cached object, cloned out of the store.
fn cached<K: kube::Resource<DynamicType = ()> + Clone>(
    store: &Store<K>,
    key: ObjectRef<K>,
) -> Option<K> {
    store.get(&key).map(|o| K::clone(&o))
}

/// Objects in the API server's LIST order (namespace, name): a store is a
/// hash map, and placement ties and status target lists must not depend
/// on its order.
fn sorted<K: kube::Resource>(mut objs: Vec<K>) -> Vec<K> {
    objs.sort_by(crate::cache::list_order);
    objs
}

impl Reads for ApiReads {
    async fn switch(&self, name: &str) -> Result<Option<Switch>, kube::Error> {
        Ok(cached(&self.switches, ObjectRef::new(name)))
    }

    async fn switches(&self) -> Result<Vec<Switch>, kube::Error> {
        Ok(sorted(
            self.switches
                .state()
                .iter()
                .map(|o| Switch::clone(o))
                .collect(),
        ))
    }

    async fn program(&self, ns: &str, name: &str) -> Result<Option<P4Program>, kube::Error> {
        Ok(cached(&self.programs, ObjectRef::new(name).within(ns)))
    }

    async fn virtual_switch(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<VirtualSwitch>, kube::Error> {
        Ok(cached(
            &self.virtual_switches,
            ObjectRef::new(name).within(ns),
        ))
    }

    async fn virtual_switches(&self, ns: Option<&str>) -> Result<Vec<VirtualSwitch>, kube::Error> {
        // The store holds the watched namespaces only.
        Ok(sorted(
            self.virtual_switches
                .state()
                .iter()
                .filter(|v| ns.is_none() || v.metadata.namespace.as_deref() == ns)
                .map(|v| VirtualSwitch::clone(v))
                .collect(),
        ))
    }

    async fn virtual_switches_on(&self, switch: &str) -> Result<Vec<VirtualSwitch>, kube::Error> {
        // From the index, not a scan of the fleet, and filtered before
        // cloning: a Switch reconcile clones its own VirtualSwitches only.
        Ok(self
            .placed
            .under(switch)
            .iter()
            .filter(|v| placed_on(v, switch))
            .map(|v| VirtualSwitch::clone(v))
            .collect())
    }

    async fn controller_revision(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<ControllerRevision>, kube::Error> {
        // Fresh: a VirtualSwitch asks for the revision of a digest it has
        // just seen in the program's status, written after the revision.
        Api::<ControllerRevision>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
    }

    async fn program_revisions(
        &self,
        ns: &str,
        program: &str,
    ) -> Result<Vec<ControllerRevision>, kube::Error> {
        Ok(self
            .revisions
            .under(&crate::cache::revision_of(ns, program))
            .iter()
            .map(|r| ControllerRevision::clone(r))
            .collect())
    }

    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>, kube::Error> {
        Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
    }

    async fn entry_revisions(
        &self,
        ns: &str,
        set_uid: &str,
    ) -> Result<Vec<ConfigMap>, kube::Error> {
        let label = crate::fleet::entry_revisions::SET_LABEL;
        let lp = kube::api::ListParams::default().labels(&format!("{label}={set_uid}"));
        let list = Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .list(&lp)
            .await?;
        Ok(list.items)
    }

    async fn artifact(
        &self,
        ns: &str,
        src: &UrlSource,
    ) -> Result<Result<Vec<u8>, FetchError>, kube::Error> {
        ApiReads::fetch_artifact(&self.client, &self.fetcher, ns, src).await
    }
}

impl ApiReads {
    /// The bytes of `src` (kept by `fetcher`, or downloaded with the
    /// credentials its Secret in `ns` gives), only when they match its
    /// sha256.
    pub async fn fetch_artifact(
        client: &kube::Client,
        fetcher: &Fetcher,
        ns: &str,
        src: &UrlSource,
    ) -> Result<Result<Vec<u8>, FetchError>, kube::Error> {
        let checked = match url_source::check(src) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        // A kept download needs no Secret read.
        if let Some(hit) = fetcher.cached(&checked.sha256) {
            return Ok(Ok(hit.to_vec()));
        }
        let creds = match fetch::credentials(client, ns, src).await? {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        Ok(fetcher.get(&checked, &creds).await.map(|b| b.to_vec()))
    }
}

/// An in-memory cluster for unit tests of dereference stages.
#[cfg(test)]
pub mod fixture {
    use super::*;
    use kube::ResourceExt;

    /// Objects the tests put in; reads filter them like the API would.
    #[derive(Default)]
    pub struct Cluster {
        pub switches: Vec<Switch>,
        pub programs: Vec<P4Program>,
        pub virtual_switches: Vec<VirtualSwitch>,
        pub config_maps: Vec<ConfigMap>,
        pub revisions: Vec<ControllerRevision>,
        /// URL artifacts by URL (served as a server would: unchecked).
        pub artifacts: Vec<(String, Vec<u8>)>,
    }

    /// The metadata of a test object: its name, namespace and labels.
    pub fn meta(name: &str, ns: Option<&str>, labels: &[(&str, &str)]) -> kube::api::ObjectMeta {
        kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(Into::into),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    /// The spec of a VirtualSwitch running `program`, on `switch` when
    /// given, with nothing else set.
    pub fn vs_spec(program: &str, switch: Option<&str>) -> p4fleet_crds::VirtualSwitchSpec {
        p4fleet_crds::VirtualSwitchSpec {
            program_ref: program.into(),
            switch_ref: switch.map(Into::into),
            switch_selector: None,
            slot: None,
            isolation: None,
            port_map: vec![],
            update_strategy: Default::default(),
            multicast_groups: vec![],
            clone_sessions: vec![],
        }
    }

    fn find<K: kube::Resource + Clone>(objs: &[K], ns: Option<&str>, name: &str) -> Option<K> {
        objs.iter()
            .find(|o| o.meta().namespace.as_deref() == ns && o.name_any() == name)
            .cloned()
    }

    impl Reads for Cluster {
        async fn switch(&self, name: &str) -> Result<Option<Switch>, kube::Error> {
            Ok(find(&self.switches, None, name))
        }

        async fn switches(&self) -> Result<Vec<Switch>, kube::Error> {
            Ok(self.switches.clone())
        }

        async fn program(&self, ns: &str, name: &str) -> Result<Option<P4Program>, kube::Error> {
            Ok(find(&self.programs, Some(ns), name))
        }

        async fn virtual_switch(
            &self,
            ns: &str,
            name: &str,
        ) -> Result<Option<VirtualSwitch>, kube::Error> {
            Ok(find(&self.virtual_switches, Some(ns), name))
        }

        async fn virtual_switches(
            &self,
            ns: Option<&str>,
        ) -> Result<Vec<VirtualSwitch>, kube::Error> {
            Ok(self
                .virtual_switches
                .iter()
                .filter(|v| ns.is_none() || v.namespace().as_deref() == ns)
                .cloned()
                .collect())
        }

        async fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>, kube::Error> {
            Ok(find(&self.config_maps, Some(ns), name))
        }

        async fn entry_revisions(
            &self,
            ns: &str,
            set_uid: &str,
        ) -> Result<Vec<ConfigMap>, kube::Error> {
            let label = crate::fleet::entry_revisions::SET_LABEL;
            Ok(self
                .config_maps
                .iter()
                .filter(|c| c.namespace().as_deref() == Some(ns))
                .filter(|c| c.labels().get(label).map(String::as_str) == Some(set_uid))
                .cloned()
                .collect())
        }

        async fn controller_revision(
            &self,
            ns: &str,
            name: &str,
        ) -> Result<Option<ControllerRevision>, kube::Error> {
            Ok(find(&self.revisions, Some(ns), name))
        }

        async fn program_revisions(
            &self,
            ns: &str,
            program: &str,
        ) -> Result<Vec<ControllerRevision>, kube::Error> {
            Ok(self
                .revisions
                .iter()
                .filter(|r| r.namespace().as_deref() == Some(ns))
                .filter(|r| r.owner_references().iter().any(|o| o.name == program))
                .cloned()
                .collect())
        }

        async fn artifact(
            &self,
            _ns: &str,
            src: &UrlSource,
        ) -> Result<Result<Vec<u8>, FetchError>, kube::Error> {
            let checked = match url_source::check(src) {
                Ok(c) => c,
                Err(e) => return Ok(Err(e)),
            };
            let host = url_source::host(&checked.uri);
            let Some((_, body)) = self.artifacts.iter().find(|(u, _)| *u == src.url) else {
                return Ok(Err(FetchError::Status { host, code: 404 }));
            };
            let received = url_source::Receiver::new(host, u64::MAX, None).and_then(|mut rx| {
                rx.push(body)?;
                rx.finish(&checked.sha256)
            });
            Ok(received)
        }
    }
}
