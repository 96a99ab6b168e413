//! What reconcilers read from the cluster, behind one small interface.
//!
//! Every dereference stage reads through [`Reads`], never through an `Api`
//! of its own. Today [`ApiReads`] answers each call with a GET or a LIST;
//! the reflector caches the controllers keep anyway can answer the same
//! calls without a request, and unit tests answer them from memory
//! ([`fixture::Cluster`]). Writes (status, finalizers) are not reads and
//! stay with the reconcilers.

use std::future::Future;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use p4fleet_crds::{P4Program, Switch, VirtualSwitch};

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
    /// The ConfigMap `ns/name`.
    fn config_map(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<ConfigMap>, kube::Error>> + Send;
}

/// [`Reads`] by API requests.
#[derive(Clone)]
pub struct ApiReads {
    client: kube::Client,
    /// `--watch-namespace`: what "every watched namespace" means.
    watch_namespace: Option<String>,
}

impl ApiReads {
    pub fn new(client: kube::Client, watch_namespace: Option<String>) -> Self {
        ApiReads {
            client,
            watch_namespace,
        }
    }
}

impl Reads for ApiReads {
    async fn switch(&self, name: &str) -> Result<Option<Switch>, kube::Error> {
        Api::<Switch>::all(self.client.clone()).get_opt(name).await
    }

    async fn switches(&self) -> Result<Vec<Switch>, kube::Error> {
        let api = Api::<Switch>::all(self.client.clone());
        Ok(api.list(&Default::default()).await?.items)
    }

    async fn program(&self, ns: &str, name: &str) -> Result<Option<P4Program>, kube::Error> {
        Api::<P4Program>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
    }

    async fn virtual_switch(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<VirtualSwitch>, kube::Error> {
        Api::<VirtualSwitch>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
    }

    async fn virtual_switches(&self, ns: Option<&str>) -> Result<Vec<VirtualSwitch>, kube::Error> {
        let api = match ns.or(self.watch_namespace.as_deref()) {
            Some(ns) => Api::<VirtualSwitch>::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        Ok(api.list(&Default::default()).await?.items)
    }

    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>, kube::Error> {
        Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
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
    }
}
