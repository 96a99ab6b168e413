//! One long-lived device connection per Switch, shared by all reconcilers.
//!
//! [`DevicePool::connect`] maps a Switch onto p4fleet-client's [`Target`]
//! and hands out an `Arc<Device>` per Switch name, reused while the
//! Switch's endpoint, protocol and device id stay the same. Connections are
//! lazy: the gRPC channel reconnects by itself, and the client keeps the
//! arbitration / subscription of each device id open in the background, so
//! a write simply waits until this operator is accepted again.
//!
//! Device changes: each connection's [`Device::changes`] is forwarded,
//! as the Switch's name, to every [`DevicePool::subscribe`]r (the
//! controllers turn it into reconciles of what runs on that Switch), and
//! [`DevicePool::notify`] adds changes the pool cannot see (a pipeline
//! pushed). A device that restarts is so re-pushed at once, not at the
//! next resync.
//!
//! Side services (the FPGA slot service, the extern runtime) share one
//! kept channel per Switch ([`DevicePool::side_channel`]), so a probe every
//! `--drift-seconds` reuses its HTTP/2 connection instead of dialing anew.
//!
//! Answers a device gives about itself (its Capabilities, whether it
//! serves an extern runtime) are kept per Switch with the device epoch
//! they were given at ([`Kept`]); a new connection, a forgotten Switch
//! and (for Capabilities) a pushed pipeline drop them, so the probe asks
//! again only when something changed.
//!
//! Slots: on a Switch, slot `n` is device id `spec.deviceId + n` (the
//! emulator hosts several devices per process, so one endpoint can host
//! several VirtualSwitches).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;
use tonic::transport::Channel;

use kube::ResourceExt;
use p4fleet_client::{
    Capabilities, Device, Error, Identity, Protocol, Target, TlsSettings, WriteRpc,
};
use p4fleet_crds::switch::{Switch, SwitchProtocol};

use crate::loaded_pipelines::LoadedPipelines;
use crate::tls_secrets::{TlsSecretError, TlsSecrets};

/// The client's target of a Switch without its Secret's material: a TLS
/// Switch gets empty TLS settings, which the client refuses
/// ([`p4fleet_client::Error::TlsMaterial`]), never a plaintext connection.
/// What [`DevicePool::side_target`] falls back to when the Secret cannot
/// be used.
pub fn target(sw: &Switch) -> Target {
    let tls = sw
        .spec
        .tls_secret_ref
        .as_ref()
        .map(|_| TlsSettings::default());
    target_with(sw, tls)
}

/// The client's target of a Switch with the TLS settings of its Secret
/// (`None`: plaintext).
pub fn target_with(sw: &Switch, tls: Option<TlsSettings>) -> Target {
    Target {
        endpoint: sw.spec.endpoint.clone(),
        device_id: sw.spec.device_id,
        protocol: match sw.spec.effective_protocol() {
            SwitchProtocol::P4Runtime => Protocol::P4Runtime,
            SwitchProtocol::Bfrt => Protocol::Bfrt,
        },
        tls,
    }
}

/// Connections to devices, keyed by Switch name.
pub struct DevicePool {
    devices: Mutex<HashMap<String, Arc<Device>>>,
    /// The channel to each Switch's side services, with the target it was
    /// made for ([`DevicePool::side_channel`]).
    side: Mutex<HashMap<String, (Target, Channel)>>,
    /// Whether each Switch serves an extern runtime, kept with the device
    /// epoch of the answer.
    pub externs: Kept<u64, bool>,
    /// Each Switch's Capabilities answer, kept with when it was given
    /// (dropped too when a pipeline is pushed: [`DevicePool::notify`]).
    pub capabilities: Kept<Asked, Capabilities>,
    /// What each VirtualSwitch loaded, checked by its Switch's probe.
    pipelines: LoadedPipelines,
    /// Who this replica says it is to devices (`crate::fencing`).
    identity: Mutex<Identity>,
    /// Names of Switches whose device changed (see the module docs).
    changes: broadcast::Sender<String>,
    /// Hears of every Write RPC, with the Switch's name ([`DevicePool::observe_writes`]).
    writes: Mutex<Option<WritesObserver>>,
    /// The TLS Secrets of the Switches (`crate::tls_secrets`).
    tls: Arc<TlsSecrets>,
    /// Hears of every notice (digest list, idle timeout notification) of
    /// any P4Runtime device ([`DevicePool::observe_notices`]).
    notices: Mutex<Option<NoticesObserver>>,
}

/// Answers devices gave about themselves, per Switch, each with the stamp
/// it was given at: [`Kept::get`] returns it only under the same stamp,
/// so an answer the device may have changed since is asked again.
pub struct Kept<S, T> {
    answers: Mutex<HashMap<String, (S, T)>>,
}

impl<S, T> Default for Kept<S, T> {
    fn default() -> Self {
        Kept {
            answers: Mutex::new(HashMap::new()),
        }
    }
}

impl<S: PartialEq, T: Clone> Kept<S, T> {
    /// Switch `name`'s answer if it was given at `stamp`.
    pub fn get(&self, name: &str, stamp: S) -> Option<T> {
        let kept = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        kept.get(name)
            .filter(|(s, _)| *s == stamp)
            .map(|(_, a)| a.clone())
    }

    /// Keeps `answer`, given at `stamp`, for [`Kept::get`].
    pub fn keep(&self, name: &str, stamp: S, answer: T) {
        let mut kept = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        kept.insert(name.to_string(), (stamp, answer));
    }

    /// Drops Switch `name`'s answer (a new connection, the Switch gone,
    /// or the device not answering since).
    pub fn drop(&self, name: &str) {
        self.answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
    }
}

/// When a device answered a question about itself (its Capabilities, a
/// pipeline check: `crate::loaded_pipelines`): the connection's
/// epoch (`Device::changes`: its stream lost, back, refused) and the
/// Switch's generation (its spec) at the time. An answer kept under
/// another stamp is asked again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asked {
    pub epoch: u64,
    pub generation: Option<i64>,
}

impl Asked {
    /// Now, for `dev`, the pool's connection to `sw`.
    pub fn of(sw: &Switch, dev: &Device) -> Asked {
        Asked {
            epoch: *dev.changes().borrow(),
            generation: sw.metadata.generation,
        }
    }
}

/// Called once per device notice, with its Switch's name.
pub type NoticesObserver = Arc<dyn Fn(&str, NoticeEvent<'_>) + Send + Sync>;

/// What a device's notice stream delivered.
#[derive(Debug, Clone, Copy)]
pub enum NoticeEvent<'a> {
    Notice(&'a p4fleet_client::Notice),
    /// This many notices were lost (the consumer fell behind).
    Lost(u64),
}

/// Called once per Write RPC of any device of the pool, with its Switch's name.
pub type WritesObserver = Arc<dyn Fn(&str, &WriteRpc) + Send + Sync>;

/// Buffered device changes per subscriber; a subscriber that falls further
/// behind is told it lagged (and then reconciles everything).
const CHANGES: usize = 1024;

impl Default for DevicePool {
    fn default() -> Self {
        DevicePool::new()
    }
}

impl DevicePool {
    /// A pool for a replica without leader election
    /// ([`crate::fencing::identity_without_lease`]); a leader sets its
    /// term's identity with [`DevicePool::set_identity`].
    pub fn new() -> Self {
        DevicePool::with_identity(crate::fencing::identity_without_lease())
    }

    /// A pool with an explicit election id (tests, tools).
    pub fn with_election_id(election_id: u64) -> Self {
        DevicePool::with_identity(Identity {
            election_id: u128::from(election_id),
            // BFRT client ids are small integers; keep the low bits of
            // the election id so a newer operator still differs from
            // an old one.
            client_id: (election_id & 0xffff) as u32,
        })
    }

    pub fn with_identity(identity: Identity) -> Self {
        DevicePool {
            devices: Mutex::new(HashMap::new()),
            side: Mutex::new(HashMap::new()),
            externs: Kept::default(),
            capabilities: Kept::default(),
            pipelines: LoadedPipelines::default(),
            changes: broadcast::Sender::new(CHANGES),
            identity: Mutex::new(identity),
            writes: Mutex::new(None),
            tls: Arc::default(),
            notices: Mutex::new(None),
        }
    }

    /// Calls `observer` for every Write RPC of the connections made from
    /// now on (the operator counts them in its metrics).
    pub fn observe_writes(&self, observer: WritesObserver) {
        *self.writes.lock().unwrap_or_else(|e| e.into_inner()) = Some(observer);
    }

    /// Calls `observer` for every digest list and idle timeout
    /// notification of the P4Runtime connections made from now on (the
    /// operator counts them in its metrics; the client acks the lists).
    pub fn observe_notices(&self, observer: NoticesObserver) {
        *self.notices.lock().unwrap_or_else(|e| e.into_inner()) = Some(observer);
    }

    /// The TLS Secrets the Switches use (watched by the Switch controller
    /// through [`DevicePool::track_tls`]).
    pub fn tls(&self) -> &TlsSecrets {
        &self.tls
    }

    /// Watches the TLS Secret of `sw` (if any) and waits up to `timeout`
    /// for its first read; a change of it later is a change of every
    /// Switch using it.
    pub async fn track_tls(
        &self,
        client: &kube::Client,
        sw: &Switch,
        timeout: std::time::Duration,
    ) {
        self.tls.track(client, sw, &self.changes, timeout).await;
    }

    /// The client target of `sw`, with its TLS Secret's settings; the
    /// Secret's problem when it cannot be used.
    pub fn target(&self, sw: &Switch) -> Result<Target, TlsSecretError> {
        Ok(target_with(sw, self.tls.settings(sw)?))
    }

    /// The client target of `sw` for the services beside its device
    /// connection on the same endpoint (the FPGA slot service, the extern
    /// runtime): the same TLS settings from the Switch's Secret. A Secret
    /// that cannot be used (the Switch's `Reachable` condition says why)
    /// gives empty TLS settings, refused before dialing: never plaintext.
    pub fn side_target(&self, sw: &Switch) -> Target {
        self.target(sw).unwrap_or_else(|_| target(sw))
    }

    /// The kept channel to the side services of `sw` (see
    /// [`DevicePool::side_target`]): made lazily on first use, reused while
    /// that target stays the same, dropped by [`DevicePool::forget`]. A
    /// tonic channel reconnects by itself, so a device that restarted is
    /// dialed again on the next call, not on a new channel.
    pub fn side_channel(&self, sw: &Switch) -> Result<Channel, Error> {
        self.side_channel_to(&sw.name_any(), &self.side_target(sw))
    }

    /// [`DevicePool::side_channel`] of Switch `name` for `target`, its side
    /// target with maybe another device id (a VirtualSwitch's slot: the id
    /// travels in each request, so one channel serves every slot).
    pub fn side_channel_to(&self, name: &str, target: &Target) -> Result<Channel, Error> {
        let target = Target {
            device_id: 0,
            ..target.clone()
        };
        let mut side = self.side.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((t, ch)) = side.get(name)
            && t == &target
        {
            return Ok(ch.clone());
        }
        let ch = p4fleet_client::connect_lazy(&target)?;
        side.insert(name.to_string(), (target, ch.clone()));
        Ok(ch)
    }

    /// A client of the FPGA slot service of `sw` on its kept side channel.
    pub fn slot_client(&self, sw: &Switch) -> Result<p4fleet_client::SlotClient, Error> {
        let ch = self.side_channel(sw)?;
        Ok(p4fleet_client::SlotClient::on_channel(
            ch,
            &sw.spec.endpoint,
        ))
    }

    /// The pipelines the VirtualSwitches loaded, which the Switch probe
    /// checks (`crate::loaded_pipelines`).
    pub fn pipelines(&self) -> &LoadedPipelines {
        &self.pipelines
    }

    /// The identity for connections made from now on (set by the leader
    /// before its controllers start, so before the first connection).
    pub fn set_identity(&self, identity: Identity) {
        *self.identity.lock().unwrap_or_else(|e| e.into_inner()) = identity;
    }

    pub fn identity(&self) -> Identity {
        *self.identity.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device for this Switch, connecting (lazily) on first use or when
    /// its endpoint, protocol or device id changed. Does no network I/O;
    /// call [`Device::capabilities`] to probe reachability.
    pub fn connect(&self, sw: &Switch) -> Result<Arc<Device>, Error> {
        let name = sw.name_any();
        let target = self.target(sw).map_err(|e| Error::TlsUnavailable {
            endpoint: sw.spec.endpoint.clone(),
            reason: e.to_string(),
        })?;
        let mut devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = devices.get(&name)
            && d.target() == &target
        {
            return Ok(d.clone());
        }
        let mut dev = Device::connect(target, self.identity())?;
        if let Some(observer) = self
            .writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            let switch = name.clone();
            dev = dev.with_write_observer(Arc::new(move |rpc| observer(&switch, rpc)));
        }
        let dev = Arc::new(dev);
        if let (Device::P4Runtime(p), Some(observer)) = (
            dev.as_ref(),
            self.notices
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        ) {
            tokio::spawn(forward_notices(p.notices(), name.clone(), observer));
        }
        tokio::spawn(forward_changes(
            dev.changes(),
            self.changes.clone(),
            name.clone(),
        ));
        // A new connection (a new device epoch count): ask again.
        self.externs.drop(&name);
        self.capabilities.drop(&name);
        self.pipelines.unconfirm_switch(&name);
        devices.insert(name, dev.clone());
        Ok(dev)
    }

    /// Names of Switches whose device changed, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    /// Tells subscribers that the device of Switch `name` changed in a way
    /// only its caller knows (e.g. a pipeline was pushed).
    pub fn notify(&self, name: &str) {
        // A BFRT device's Capabilities answer lists its programs and pipes:
        // a pushed pipeline may change it.
        self.capabilities.drop(name);
        // No subscriber (tests, tools) is fine.
        let _ = self.changes.send(name.to_string());
    }

    /// The existing device of a Switch, if connected.
    pub fn get(&self, name: &str) -> Option<Arc<Device>> {
        let devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        devices.get(name).cloned()
    }

    /// The Switches with a connection.
    pub fn names(&self) -> Vec<String> {
        let devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        devices.keys().cloned().collect()
    }

    /// Drops the connection of a Switch (deleted or changed) and its use
    /// of a TLS Secret. Background tasks end once the last `Arc<Device>`
    /// is gone.
    pub fn forget(&self, name: &str) {
        let mut devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        devices.remove(name);
        self.side
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        self.pipelines.forget_switch(name);
        self.externs.drop(name);
        self.capabilities.drop(name);
        self.tls.untrack(name);
    }
}

/// Sends `name` on `to` whenever the device's epoch changes; ends with the
/// device.
async fn forward_changes(
    mut epochs: tokio::sync::watch::Receiver<u64>,
    to: broadcast::Sender<String>,
    name: String,
) {
    while epochs.changed().await.is_ok() {
        tracing::debug!(switch = %name, "device changed");
        let _ = to.send(name.clone());
    }
}

/// Hands each notice of one connection to `observer`; ends with the
/// device (its sender goes with it).
async fn forward_notices(
    mut rx: broadcast::Receiver<p4fleet_client::Notice>,
    name: String,
    observer: NoticesObserver,
) {
    loop {
        match rx.recv().await {
            Ok(n) => observer(&name, NoticeEvent::Notice(&n)),
            Err(broadcast::error::RecvError::Lagged(k)) => {
                tracing::warn!(switch = %name, lost = k, "device notices lost: the operator fell behind");
                observer(&name, NoticeEvent::Lost(k));
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::switch::SwitchSpec;

    fn switch(name: &str, spec: serde_json::Value) -> Switch {
        Switch::new(name, serde_json::from_value::<SwitchSpec>(spec).unwrap())
    }

    /// The spec of a Bmv2 Switch at 127.0.0.1:`port`.
    fn bmv2_at(port: u16) -> serde_json::Value {
        serde_json::json!({"target": "Bmv2", "endpoint": format!("127.0.0.1:{port}"),
            "deviceId": 1, "slots": 1})
    }

    #[test]
    fn a_switch_maps_to_its_target() {
        let sw = switch(
            "s",
            serde_json::json!({"target": "Tofino", "endpoint": "h:50052", "deviceId": 3, "slots": 2}),
        );
        assert_eq!(target_with(&sw, None), Target::bfrt("h:50052", 3));
        let sw = switch(
            "s",
            serde_json::json!({"target": "Bmv2", "endpoint": "h:9559", "deviceId": 1, "slots": 1,
                "tlsSecretRef": {"name": "certs", "namespace": "ns"}}),
        );
        let t = target_with(&sw, Some(TlsSettings::default()));
        assert_eq!(t.protocol, Protocol::P4Runtime);
        assert!(t.tls.is_some());
        // Until its Secret was read, a TLS Switch has no target.
        let e = DevicePool::new().target(&sw).unwrap_err();
        assert_eq!(e.reason(), "TlsSecretPending");
        assert_eq!(e.secret, "ns/certs");
    }

    #[tokio::test]
    async fn connections_are_reused_until_the_target_changes() {
        let pool = DevicePool::with_election_id(0x1_0007);
        assert_eq!(pool.identity().client_id, 7);
        let a = pool.connect(&switch("a", bmv2_at(1))).unwrap();
        let again = pool.connect(&switch("a", bmv2_at(1))).unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        let moved = pool.connect(&switch("a", bmv2_at(2))).unwrap();
        assert!(!Arc::ptr_eq(&a, &moved));
        assert!(Arc::ptr_eq(&pool.get("a").unwrap(), &moved));
        pool.forget("a");
        assert!(pool.get("a").is_none());
        let tls = switch(
            "b",
            serde_json::json!({"target": "Bmv2", "endpoint": "h:1", "deviceId": 1, "slots": 1,
                "tlsSecretRef": {"name": "certs", "namespace": "ns"}}),
        );
        assert!(matches!(
            pool.connect(&tls),
            Err(Error::TlsUnavailable { .. })
        ));
    }

    /// A TCP forwarder to `to` that counts the connections it accepted.
    async fn counting_proxy(
        to: std::net::SocketAddr,
    ) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
            }
        });
        (addr, accepted)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn side_services_are_asked_on_one_kept_connection() {
        use crate::fleet::extern_runtime::serves_extern_runtime;
        use std::sync::atomic::Ordering::SeqCst;
        let running = p4fleet_emulator::Emulator::start(Default::default())
            .await
            .unwrap();
        let (endpoint, accepted) = counting_proxy(running.p4runtime_addr()).await;
        let sw = switch(
            "s",
            serde_json::json!({"target": "Bmv2", "endpoint": endpoint, "deviceId": 1, "slots": 1}),
        );
        let pool = DevicePool::with_election_id(1);
        let mut answers = Vec::new();
        for _ in 0..3 {
            answers.push(serves_extern_runtime(pool.side_channel(&sw).unwrap(), 1).await);
        }
        // The board probe's client rides the same channel, and so do an
        // AsyncExternPolicy's reads of its slots' extern runtime (another
        // device id each, in the requests).
        let _ = pool.slot_client(&sw).unwrap().board_info().await;
        for slot in 0..3 {
            let t = Target {
                device_id: 1 + slot,
                ..pool.side_target(&sw)
            };
            let _ = crate::controllers::extern_policy::runtime::apply(&pool, "s", &t, &[]).await;
        }
        assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
        assert_eq!(accepted.load(SeqCst), 1, "seven questions, one connection");

        // What each probe did before: a new lazy channel per question.
        let target = pool.side_target(&sw);
        for _ in 0..3 {
            let ch = p4fleet_client::connect_lazy(&target).unwrap();
            serves_extern_runtime(ch, 1).await;
        }
        assert_eq!(
            accepted.load(SeqCst),
            4,
            "a new channel is a new connection"
        );

        // Forgotten (deleted or changed Switch): the next channel is new.
        pool.forget("s");
        serves_extern_runtime(pool.side_channel(&sw).unwrap(), 1).await;
        assert_eq!(accepted.load(SeqCst), 5);
        running.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn an_extern_runtime_answer_holds_for_its_device_epoch_and_connection() {
        let pool = DevicePool::with_election_id(1);
        pool.connect(&switch("a", bmv2_at(1))).unwrap();
        pool.externs.keep("a", 1, true);
        assert_eq!(pool.externs.get("a", 1), Some(true));
        assert_eq!(pool.externs.get("a", 2), None, "the device changed");
        assert_eq!(pool.externs.get("b", 1), None);
        pool.connect(&switch("a", bmv2_at(1))).unwrap();
        assert_eq!(pool.externs.get("a", 1), Some(true), "same connection");
        pool.connect(&switch("a", bmv2_at(2))).unwrap();
        assert_eq!(pool.externs.get("a", 1), None, "a new connection");
        pool.externs.keep("a", 1, false);
        pool.forget("a");
        assert_eq!(pool.externs.get("a", 1), None);
    }

    #[tokio::test]
    async fn a_capabilities_answer_holds_for_its_connection_epoch_and_spec() {
        let pool = DevicePool::with_election_id(1);
        let caps = Capabilities {
            protocol: "P4Runtime",
            api_version: "1.4.0".into(),
            bulk_write: true,
            pipes: None,
        };
        let at = |epoch, generation| Asked {
            epoch,
            generation: Some(generation),
        };
        pool.connect(&switch("a", bmv2_at(1))).unwrap();
        pool.capabilities.keep("a", at(1, 1), caps.clone());
        assert_eq!(pool.capabilities.get("a", at(1, 1)), Some(caps.clone()));
        assert_eq!(pool.capabilities.get("a", at(2, 1)), None, "stream changed");
        assert_eq!(pool.capabilities.get("a", at(1, 2)), None, "spec changed");
        assert_eq!(pool.capabilities.get("b", at(1, 1)), None);
        pool.connect(&switch("a", bmv2_at(1))).unwrap();
        assert!(
            pool.capabilities.get("a", at(1, 1)).is_some(),
            "same connection"
        );
        pool.connect(&switch("a", bmv2_at(2))).unwrap();
        assert_eq!(
            pool.capabilities.get("a", at(1, 1)),
            None,
            "a new connection"
        );
        pool.capabilities.keep("a", at(1, 1), caps.clone());
        pool.notify("a");
        assert_eq!(
            pool.capabilities.get("a", at(1, 1)),
            None,
            "a pipeline pushed"
        );
        pool.capabilities.keep("a", at(1, 1), caps);
        pool.forget("a");
        assert_eq!(pool.capabilities.get("a", at(1, 1)), None);
    }

    #[tokio::test]
    async fn a_forgotten_switch_ends_its_tasks_and_device_changes_are_named() {
        let pool = DevicePool::with_election_id(1);
        let mut changes = pool.subscribe();
        // Nothing listens there: the session keeps re-connecting.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let spec = serde_json::json!({"target": "Bmv2", "endpoint": format!("127.0.0.1:{port}"),
            "deviceId": 1, "slots": 1});
        let dev = pool.connect(&switch("gone", spec)).unwrap();
        dev.observe(0);
        let mut epochs = dev.changes();
        pool.notify("gone");
        assert_eq!(changes.recv().await.unwrap(), "gone");
        assert_eq!(pool.names(), ["gone"]);
        drop(dev);
        pool.forget("gone");
        assert!(pool.names().is_empty());
        // Its session task is gone with it: the epoch sender is dropped.
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while epochs.changed().await.is_ok() {}
        })
        .await;
        assert!(
            ended.is_ok(),
            "the session of a forgotten Switch still runs"
        );
    }
}
