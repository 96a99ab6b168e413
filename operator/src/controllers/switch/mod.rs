//! Switch reconciler. Validate the spec ([`validate`], pure); dereference
//! its TLS Secret (watched from then on, `crate::tls_secrets`); apply:
//! connect through the device pool, probe capabilities (kept while the
//! connection, its stream and the spec stay the same, [`probe`]), check
//! the pipeline of every slot with a VirtualSwitch loaded
//! ([`pipelines`]: a lost one brings its VirtualSwitch back
//! at once) and ask whether the device accepts this operator on the device
//! id (only for a valid spec); dereference the VirtualSwitches placed on
//! it; build the status ([`build_status`], pure: Valid, Reachable,
//! Primary, slot usage); update status.

pub mod board;
pub mod drift_probe;
pub mod pipelines;

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use p4fleet_client::{Device, Refusal};
use p4fleet_crds::condition_types::{PRIMARY, REACHABLE, VALID};
use p4fleet_crds::{
    Condition, SlotUse, Switch, SwitchCapabilities, SwitchProtocol, SwitchSpec, SwitchStatus,
    SwitchTarget, VirtualSwitch,
};

use super::{Error, object_key, update_status};
use crate::devices::{Asked, DevicePool};
use crate::reads::Reads;
use crate::status::ready_from;
use crate::tls_secrets::TlsSecretError;

/// What the Switch controller keeps between reconciles.
pub struct Switches {
    /// Healthy Switches' devices, probed between their reconciles.
    pub drift_probes: drift_probe::DriftProbes,
}

impl Switches {
    pub fn new(config: &crate::context::OperatorConfig) -> Switches {
        Switches {
            drift_probes: drift_probe::DriftProbes::new(config.drift),
        }
    }
}

/// The Switch controller's context.
pub type SwitchCtx = super::Ctx<Switches>;

/// How long a capabilities probe may take before the Switch counts as unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the first read of a TLS Secret, and the device's verdict on
/// this operator (arbitration / subscription), may take.
const SETTLE_WAIT: Duration = Duration::from_secs(3);

/// Watches Switches, the VirtualSwitches placed on them (slot usage) and
/// their devices (a lost device is Reachable=False at once).
pub fn controller(ctx: &SwitchCtx) -> Controller<Switch> {
    let c = ctx.caches.switches.controller();
    let c = super::on_device_changes(c, ctx, |sw: &Switch, name| sw.name_any() == name);
    // A drift probe that found a difference ([`drift_probe`]).
    let c = super::on_named(c, ctx.own.drift_probes.subscribe(), |name| {
        Some(ObjectRef::new(name))
    });
    c.watches_shared_stream(
        ctx.caches.virtual_switches.touched(),
        |vs: Arc<VirtualSwitch>| {
            let mut names: Vec<String> = Vec::new();
            if let Some(s) = vs.status.as_ref().and_then(|s| s.switch.clone()) {
                names.push(s);
            }
            if let Some(s) = vs.spec.switch_ref.clone()
                && !names.contains(&s)
            {
                names.push(s);
            }
            names
                .into_iter()
                .map(|n| ObjectRef::<Switch>::new(&n))
                .collect::<Vec<_>>()
        },
    )
}

/// Spec problems the schema cannot express; each names the field.
pub fn validate(spec: &SwitchSpec) -> Vec<String> {
    let mut problems = Vec::new();
    match spec.endpoint.rsplit_once(':') {
        Some((host, port)) => {
            if host.is_empty() {
                problems.push(format!("spec.endpoint {:?} has no host", spec.endpoint));
            }
            match port.parse::<u32>() {
                Ok(p) if (1..=65535).contains(&p) => {}
                _ => problems.push(format!(
                    "spec.endpoint {:?}: port must be 1..65535",
                    spec.endpoint
                )),
            }
        }
        None => problems.push(format!(
            "spec.endpoint {:?} is not host:port",
            spec.endpoint
        )),
    }
    if spec.effective_protocol() == SwitchProtocol::Bfrt && spec.target != SwitchTarget::Tofino {
        problems.push(format!(
            "spec.protocol Bfrt is only spoken by Tofino targets, not {:?}",
            spec.target
        ));
    }
    let mut ids = std::collections::HashSet::new();
    for p in &spec.ports {
        if !ids.insert(p.id) {
            problems.push(format!("spec.ports: port {} is listed twice", p.id));
        }
    }
    problems
}

/// Slots held by VirtualSwitches placed on `switch` (from their status), sorted by slot.
pub fn slots_in_use(switch: &str, vss: &[VirtualSwitch]) -> Vec<SlotUse> {
    let mut out: Vec<SlotUse> = vss
        .iter()
        .filter_map(|vs| {
            let st = vs.status.as_ref()?;
            (st.switch.as_deref() == Some(switch)).then(|| SlotUse {
                slot: st.slot.unwrap_or(0),
                virtual_switch: object_key(vs),
                pipeline_digest: st.loaded_digest.clone(),
            })
        })
        .collect();
    out.sort_by(|a, b| (a.slot, &a.virtual_switch).cmp(&(b.slot, &b.virtual_switch)));
    out
}

/// Why a probe found the device unreachable.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{0}{hint}", hint = spec_hint(.0))]
    Device(#[from] p4fleet_client::Error),
    #[error("no answer from {endpoint} within {after:?}")]
    Timeout { endpoint: String, after: Duration },
    /// The TLS Secret cannot be used, so the device was not dialed.
    #[error(transparent)]
    TlsSecret(#[from] TlsSecretError),
}

impl ProbeError {
    /// The Reachable condition's reason: which TLS failure, or which
    /// problem of the Secret, by variant.
    pub fn reason(&self) -> &'static str {
        use p4fleet_client::Error as E;
        match self {
            ProbeError::TlsSecret(e) => e.reason(),
            ProbeError::Device(E::Tls { failure, .. }) => failure.reason(),
            ProbeError::Device(E::TlsMaterial(_)) => "TlsMaterialInvalid",
            ProbeError::Device(E::Unreachable { cause, .. }) => cause.reason(),
            ProbeError::Device(E::WrongEndpoint(w)) => w.reason(),
            ProbeError::Timeout { .. } => p4fleet_client::ConnectCause::TimedOut.reason(),
            ProbeError::Device(_) => "Unreachable",
        }
    }
}

/// The spec change a wrong endpoint asks for, when it is the protocol:
/// the endpoint serves the other one.
fn spec_hint(e: &p4fleet_client::Error) -> String {
    use p4fleet_client::{Error as E, Found, Protocol};
    let E::WrongEndpoint(w) = e else {
        return String::new();
    };
    match w.found {
        Found::Serves(s) => match s.protocol() {
            Some(Protocol::P4Runtime) => "; set spec.protocol: P4Runtime".into(),
            Some(Protocol::Bfrt) => "; set spec.protocol: Bfrt".into(),
            None => String::new(),
        },
        _ => String::new(),
    }
}

/// Outcome of probing the device.
pub type Probe = Result<p4fleet_client::Capabilities, ProbeError>;

/// The device's verdict on this operator for the Switch's device id
/// (slot 0): accepted, or why not.
pub type Standing = Result<(), p4fleet_client::Error>;

/// The Primary condition from the device's verdict (pure).
pub fn primary_condition(spec: &SwitchSpec, standing: Option<&Standing>) -> Condition {
    use p4fleet_client::Error as E;
    let id = spec.device_id;
    match standing {
        None => Condition::unknown(PRIMARY, "NotProbed", "the device was not reached"),
        Some(Ok(())) => Condition::new(
            PRIMARY,
            true,
            "Primary",
            format!("the device accepts this operator for device id {id}"),
        ),
        Some(Err(E::NotPrimary { refusal, .. })) => {
            let reason = match refusal.as_ref() {
                Refusal::NotPrimary { .. } => "NotPrimary",
                Refusal::UnknownDevice { .. } => "UnknownDeviceId",
                Refusal::Other { .. } => "Refused",
            };
            Condition::new(PRIMARY, false, reason, format!("device id {id}: {refusal}"))
        }
        Some(Err(e)) => Condition::unknown(
            PRIMARY,
            "NoVerdict",
            format!("device id {id}: no answer to arbitration yet: {e}"),
        ),
    }
}

/// The pure middle: spec of generation `generation`, probe result and
/// VirtualSwitches in; status out (conditions not yet merged).
pub fn build_status(
    name: &str,
    spec: &SwitchSpec,
    generation: Option<i64>,
    probe: Option<&Probe>,
    standing: Option<&Standing>,
    vss: &[VirtualSwitch],
) -> SwitchStatus {
    let problems = validate(spec);
    let valid = if problems.is_empty() {
        Condition::new(VALID, true, "Valid", "spec is valid")
    } else {
        Condition::new(VALID, false, "InvalidSpec", problems.join("; "))
    };
    let (reachable, capabilities) = match probe {
        None => (
            Condition::unknown(
                REACHABLE,
                "NotProbed",
                "the spec is invalid, so the device was not contacted",
            ),
            None,
        ),
        Some(Ok(caps)) => (
            Condition::new(
                REACHABLE,
                true,
                "Connected",
                format!(
                    "{} {} at {}",
                    caps.protocol, caps.api_version, spec.endpoint
                ),
            ),
            Some(SwitchCapabilities {
                api_version: Some(caps.api_version.clone()),
                bulk_write: caps.bulk_write,
                async_externs: false,
                // Only the board probe (switch_probe) may say so.
                slot_service: false,
                // A BFRT device that reported its pipes runs programs on
                // disjoint pipe sets, one swapped while the others run.
                pipe_sets: caps.pipes.is_some(),
                hot_swap: caps.pipes.is_some_and(|p| p > 1),
                ..Default::default()
            }),
        ),
        Some(Err(e)) => (
            Condition::new(REACHABLE, false, e.reason(), e.to_string()),
            None,
        ),
    };
    let primary = primary_condition(spec, standing);
    let used = slots_in_use(name, vss);
    let distinct: std::collections::BTreeSet<u32> = used.iter().map(|u| u.slot).collect();
    let ready = ready_from(
        &[&valid, &reachable, &primary],
        "Ready",
        "device is reachable and accepts this operator",
    );
    let reported = match probe {
        Some(Ok(caps)) => caps.pipes,
        _ => None,
    };
    let (pipes, pipes_source) = match (reported, spec.pipes) {
        (Some(p), _) => (Some(p), Some("Device".to_string())),
        (None, Some(p)) if spec.effective_protocol() == SwitchProtocol::Bfrt => {
            (Some(p), Some("Spec".to_string()))
        }
        _ => (None, None),
    };
    SwitchStatus {
        observed_generation: generation,
        conditions: vec![valid, reachable, primary, ready],
        capabilities,
        pipes,
        pipes_source,
        slot_summary: Some(format!("{}/{}", distinct.len(), spec.slots)),
        slots_in_use: used,
        ..Default::default()
    }
}

/// Asks the device for its capabilities within [`PROBE_TIMEOUT`].
async fn ask_capabilities(dev: &Device, sw: &Switch) -> Probe {
    let caps = match tokio::time::timeout(PROBE_TIMEOUT, dev.capabilities()).await {
        Ok(res) => res.map_err(ProbeError::from),
        Err(_) => Err(ProbeError::Timeout {
            endpoint: sw.spec.endpoint.clone(),
            after: PROBE_TIMEOUT,
        }),
    };
    match caps {
        Err(ProbeError::Device(e)) if dev.target().tls.is_some() && may_hide_tls_verdict(&e) => {
            Err(ProbeError::Device(tls_verdict(dev).await.unwrap_or(e)))
        }
        other => other,
    }
}

/// Whether `e`, Capabilities' failure on a TLS connection, may hide the
/// device's TLS verdict: a device that refuses our client certificate (or
/// its absence) says so after TLS 1.3's handshake, in an alert as it
/// closes the connection, and a request that meets the closed connection
/// first fails as a broken pipe or a connection closed, the alert unread.
/// A connection never made (refused, no route, no such name, connect
/// timeout) had no handshake to hide, so the stream is not waited for.
fn may_hide_tls_verdict(e: &p4fleet_client::Error) -> bool {
    use p4fleet_client::{ConnectCause as C, Error as E};
    match e {
        // Something answered after the handshake: nothing hidden.
        E::Tls { .. } | E::WrongEndpoint(_) => false,
        E::Unreachable { cause, .. } => {
            !matches!(cause, C::Refused | C::NoRoute | C::Dns | C::TimedOut)
        }
        _ => true,
    }
}

/// The TLS failure the Switch's stream read from the device (its own
/// connection to the same endpoint with the same settings), if it did.
async fn tls_verdict(dev: &Device) -> Option<p4fleet_client::Error> {
    match dev.standing(0, SETTLE_WAIT).await {
        Err(e @ p4fleet_client::Error::Tls { .. }) => Some(e),
        _ => None,
    }
}

/// The Switch probe: connects (once, shared); asks the device for its
/// capabilities; checks the pipeline of every slot with a VirtualSwitch
/// loaded ([`pipelines`]: a lost one brings its
/// VirtualSwitch back at once); asks for the device's verdict on this
/// operator on slot 0 (no RPC while its stream stands).
///
/// The Capabilities answer is kept per connection, device epoch and
/// Switch generation (`DevicePool::capabilities`): it changes only
/// with the device (a restart is a new stream, so a new epoch) or the
/// spec. A kept answer still claims only what this probe confirmed: it
/// stands when one of the pipeline checks was answered, and when none
/// was (no pipeline loaded, or the device did not answer them)
/// Capabilities is asked after all, so an idle probe of a healthy device
/// is one RPC per loaded slot, never zero, and a device that stopped
/// answering is still `Reachable=False` within a probe.
pub async fn probe(devices: &DevicePool, sw: &Switch) -> (Probe, Option<Standing>) {
    // The Secret's own problem, named, rather than the pool's summary.
    if let Err(e) = devices.target(sw) {
        return (Err(e.into()), None);
    }
    let dev = match devices.connect(sw) {
        Ok(d) => d,
        Err(e) => return (Err(e.into()), None),
    };
    let name = sw.name_any();
    // Read before asking: an answer overtaken by a device change is kept
    // under the old epoch, so the next probe asks again.
    let asked = Asked::of(sw, &dev);
    let caps = match devices.capabilities.get(&name, asked) {
        Some(kept) => {
            let checked = pipelines::check(devices, sw, Some(&dev), PROBE_TIMEOUT).await;
            if checked.answered > 0 {
                Ok(kept)
            } else {
                let caps = ask_capabilities(&dev, sw).await;
                if caps.is_err() {
                    devices.capabilities.drop(&name);
                }
                caps
            }
        }
        None => {
            let caps = ask_capabilities(&dev, sw).await;
            if let Ok(c) = &caps {
                devices.capabilities.keep(&name, asked, c.clone());
            }
            let reached = caps.as_ref().ok().map(|_| dev.as_ref());
            pipelines::check(devices, sw, reached, PROBE_TIMEOUT).await;
            caps
        }
    };
    let standing = match caps {
        Ok(_) => Some(dev.standing(0, SETTLE_WAIT).await),
        Err(_) => None,
    };
    (caps, standing)
}

/// The probe's answers without asking the device, when the drift probe
/// (`drift_probe`) confirmed it within `--drift-seconds` on the same
/// connection, device epoch and Switch generation, and the Capabilities
/// answer is kept: the periodic reconcile of a steady Switch then costs no
/// RPC beyond the drift probe's own. Its stream's verdict is still asked
/// (no RPC while it stands).
async fn confirmed_by_drift_probe(
    ctx: &SwitchCtx,
    sw: &Switch,
) -> Option<(Probe, Option<Standing>)> {
    let name = sw.name_any();
    ctx.devices.target(sw).ok()?;
    let dev = ctx.devices.get(&name)?;
    let asked = Asked::of(sw, &dev);
    if !ctx
        .own
        .drift_probes
        .confirmed_within(&name, asked, &dev, ctx.config.drift)
    {
        return None;
    }
    let caps = ctx.devices.capabilities.get(&name, asked)?;
    let standing = dev.standing(0, SETTLE_WAIT).await;
    Some((Ok(caps), Some(standing)))
}

/// The `asyncExterns` capability, asked of the device (its extern
/// runtime), never inferred from the target kind. BFRT endpoints do not
/// serve it. Asked once per device connection: the answer is kept while
/// the device's epoch (`Device::changes`: its stream lost, back, refused)
/// stays the same; a failure to answer is not kept.
async fn probe_async_externs(ctx: &SwitchCtx, sw: &Switch) -> bool {
    if sw.spec.effective_protocol() != p4fleet_crds::SwitchProtocol::P4Runtime {
        return false;
    }
    // The Secret's problem is the Reachable condition's; never plaintext.
    if ctx.devices.target(sw).is_err() {
        return false;
    }
    let name = sw.name_any();
    let epoch = ctx.devices.get(&name).map(|d| *d.changes().borrow());
    if let Some(answer) = epoch.and_then(|e| ctx.devices.externs.get(&name, e)) {
        return answer;
    }
    let Ok(ch) = ctx.devices.side_channel(sw) else {
        return false;
    };
    let answer = crate::fleet::extern_runtime::extern_runtime_answer(ch, sw.spec.device_id).await;
    if let (Some(a), Some(e)) = (answer, epoch) {
        ctx.devices.externs.keep(&name, e, a);
    }
    answer.unwrap_or(false)
}

/// Closes the connection (and its background tasks) and removes the metric
/// series of every Switch that is deleted, including Switches deleted while
/// the watch was down (gone from the cache after a relist). Reads the
/// Switch cache's feed, subscribed now (before the caches start); runs
/// until `shutdown`.
pub fn forget_deleted(
    ctx: Arc<SwitchCtx>,
    shutdown: super::Shutdown,
) -> impl std::future::Future<Output = ()> + Send {
    use crate::cache::Seen;
    use futures::StreamExt;
    let events = ctx.caches.switches.events().take_until(shutdown);
    async move {
        let mut events = std::pin::pin!(events);
        while let Some(seen) = events.next().await {
            match seen {
                Seen::Deleted(sw) => forget(&ctx, &sw.name_any()),
                Seen::Relisted => {
                    let store = ctx.caches.switches.store();
                    for name in ctx.devices.names() {
                        if store.get(&ObjectRef::new(&name)).is_none() {
                            forget(&ctx, &name);
                        }
                    }
                }
                Seen::Applied(_) => {}
            }
        }
    }
}

fn forget(ctx: &SwitchCtx, name: &str) {
    tracing::info!(switch = %name, "Switch deleted: closing its connection");
    ctx.devices.forget(name);
    ctx.own.drift_probes.unhealthy(name);
    ctx.metrics.forget_switch(name);
    ctx.retries.forget(&format!("Switch/{name}"));
}

pub async fn reconcile(obj: Arc<Switch>, ctx: Arc<SwitchCtx>) -> Result<Action, Error> {
    let name = obj.name_any();
    ctx.devices.track_tls(&ctx.client, &obj, SETTLE_WAIT).await;
    // A device is contacted only for a valid spec.
    // The VirtualSwitches' pipeline checks ride on this probe.
    let (probe, standing) = match validate(&obj.spec).is_empty() {
        true => {
            let (p, s) = match confirmed_by_drift_probe(&ctx, &obj).await {
                Some(kept) => kept,
                None => probe(&ctx.devices, &obj).await,
            };
            (Some(p), s)
        }
        false => (None, None),
    };
    ctx.metrics.switch_seen(&name, matches!(probe, Some(Ok(_))));
    let vss = ctx.reads.virtual_switches_on(&name).await?;
    let generation = obj.metadata.generation;
    let mut new = build_status(
        &name,
        &obj.spec,
        generation,
        probe.as_ref(),
        standing.as_ref(),
        &vss,
    );
    if let Some(caps) = new.capabilities.as_mut() {
        caps.async_externs = probe_async_externs(&ctx, &obj).await;
    }
    let board = match probe {
        Some(_) => board::probe(&ctx.devices, &obj, PROBE_TIMEOUT).await,
        None => None,
    };
    let claims = board::claims_of(&obj);
    board::complete(&mut new, &obj, board.as_ref(), &claims);
    update_status(&ctx, &ctx.all(), obj.as_ref(), &mut new).await?;
    let healthy = matches!((&probe, &standing), (Some(Ok(_)), Some(Ok(()))));
    // A healthy device is probed every `--drift-seconds` outside this
    // reconcile (`drift_probe`), which comes back when an answer differs;
    // its own requeue is only the safety net.
    let dev = ctx.devices.get(&name);
    match (healthy && drift_probe::probed_here(&obj), dev) {
        (true, Some(dev)) => {
            ctx.own
                .drift_probes
                .healthy(&name, Asked::of(&obj, &dev), &dev);
            return Ok(Action::requeue(super::covered(ctx.config.resync, &name)));
        }
        _ => ctx.own.drift_probes.unhealthy(&name),
    }
    let key = format!("Switch/{name}");
    Ok(match (healthy, probe) {
        (true, _) | (_, None) => {
            ctx.retries.succeeded(&key, PROBE);
            Action::requeue(super::spread(ctx.config.drift, &name))
        }
        // Unreachable or refusing: probed again on the backoff (1 s
        // doubling), never less often than a healthy device. A device
        // that comes back brings this reconcile at once (its connection's
        // epoch), whatever the backoff.
        _ => {
            let now = tokio::time::Instant::now();
            let inputs = crate::retries::inputs(&generation);
            let failed = crate::retries::Refusal {
                reason: PROBE,
                message: String::new(),
            };
            let backoff = ctx.retries.failed(&key, PROBE, inputs, now, failed);
            Action::requeue(backoff.min(ctx.config.drift))
        }
    })
}

/// The cause of a Switch's backoff in [`Context::retries`]: its probe.
const PROBE: &str = "probe";

/// A probed device for the probe tests: an emulator's Bmv2 Switch
/// (generation 1) connected through a pool, slot 0 running the firewall
/// P4Info with cookie 7, recorded as VirtualSwitch `ns/a`'s pipeline.
#[cfg(test)]
pub(crate) mod probed {
    use super::*;
    use crate::loaded_pipelines::PipelineCheck;

    pub struct Probed {
        pub running: p4fleet_emulator::RunningEmulator,
        pub sw: Switch,
        pub devices: DevicePool,
        pub dev: Arc<p4fleet_client::Device>,
        pub info: p4fleet_proto::p4info::P4Info,
        pub loaded: PipelineCheck,
    }

    pub async fn device() -> Probed {
        let running = p4fleet_emulator::Emulator::start(Default::default())
            .await
            .unwrap();
        let mut sw = Switch::new(
            "sw",
            serde_json::from_value(serde_json::json!({"target": "Bmv2",
                "endpoint": running.p4runtime_addr().to_string(), "deviceId": 1, "slots": 1}))
            .unwrap(),
        );
        sw.metadata.generation = Some(1);
        let devices = DevicePool::with_election_id(1);
        let dev = devices.connect(&sw).unwrap();
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/firewall/p4info.txt"
        );
        let info =
            p4fleet_proto::p4info::parse_text(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert!(dev.set_pipeline(0, &info, Vec::new(), 7).await.unwrap());
        let loaded = PipelineCheck::Cookie { slot: 0, cookie: 7 };
        devices.pipelines().record("ns/a", "sw", loaded.clone());
        Probed {
            running,
            sw,
            devices,
            dev,
            info,
            loaded,
        }
    }

    /// gRPC calls of `method` (`P4Runtime/Capabilities`, …) the emulator
    /// received so far.
    pub fn calls(emu: &p4fleet_emulator::RunningEmulator, method: &str) -> u64 {
        let path = format!("/p4.v1.{method}");
        emu.emulator().rpc_counts().get(&path).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_client::TlsFailure;
    use p4fleet_crds::VirtualSwitchStatus;

    #[test]
    fn only_a_made_connection_may_hide_the_tls_verdict() {
        use p4fleet_client::{ConnectCause as C, Error as E};
        let unreachable = |cause| E::Unreachable {
            endpoint: "d:9559".into(),
            device_id: 1,
            cause,
            reason: String::new(),
        };
        // What a request that met the device's close looked like.
        let closed = E::Rpc {
            endpoint: "d:9559".into(),
            rpc: "Capabilities",
            device_id: 1,
            status: Box::new(tonic::Status::unknown("transport error")),
        };
        assert!(may_hide_tls_verdict(&closed));
        assert!(may_hide_tls_verdict(&unreachable(C::Reset)));
        assert!(may_hide_tls_verdict(&unreachable(C::StreamClosed)));
        for never_made in [C::Refused, C::NoRoute, C::Dns, C::TimedOut] {
            assert!(
                !may_hide_tls_verdict(&unreachable(never_made)),
                "{never_made:?}"
            );
        }
        let tls = E::Tls {
            endpoint: "d:9559".into(),
            failure: TlsFailure::UnknownCa,
            detail: String::new(),
        };
        assert!(!may_hide_tls_verdict(&tls), "already named");
        let http = E::WrongEndpoint(p4fleet_client::WrongEndpoint {
            endpoint: "d:9559".into(),
            expected: p4fleet_client::Service::P4Runtime,
            found: p4fleet_client::Found::Http1 { status: 404 },
        });
        assert!(!may_hide_tls_verdict(&http), "it answered");
    }

    /// Real servers of the other protocol: the emulator's BFRT port as a
    /// P4Runtime Switch's endpoint, and its P4Runtime port as a BFRT one's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_switch_at_the_other_protocols_port_says_what_to_set() {
        let running = p4fleet_emulator::Emulator::start(p4fleet_emulator::EmulatorConfig {
            bfrt_addr: Some("127.0.0.1:0".parse().unwrap()),
            ..Default::default()
        })
        .await
        .unwrap();
        let bfrt = running.bfrt_addr().unwrap().to_string();
        let p4rt = running.p4runtime_addr().to_string();
        let devices = DevicePool::with_election_id(1);
        for (target, protocol, endpoint, set) in [
            ("Bmv2", "P4Runtime", &bfrt, "Bfrt"),
            ("Tofino", "Bfrt", &p4rt, "P4Runtime"),
        ] {
            let spec = serde_json::json!({"target": target, "protocol": protocol,
                "endpoint": endpoint, "deviceId": 1});
            let sw = Switch::new(
                &format!("sw-{target}"),
                serde_json::from_value(spec).unwrap(),
            );
            let (p, standing) = probe(&devices, &sw).await;
            assert!(standing.is_none());
            let e = p.expect_err("the other protocol's port");
            println!("{}: {e}", e.reason());
            assert_eq!(e.reason(), "WrongProtocol");
            let m = e.to_string();
            assert!(
                m.starts_with(&format!("{endpoint} answered, but not as a ")),
                "{m}"
            );
            assert!(m.ends_with(&format!("; set spec.protocol: {set}")), "{m}");
        }
        running.shutdown().await.unwrap();
    }

    #[test]
    fn a_wrong_endpoint_is_a_reason_of_its_own_and_says_what_to_set() {
        use p4fleet_client::{Found, Service, WrongEndpoint};
        let s = spec(SwitchTarget::Tofino, "10.0.0.5:50052");
        let wrong = |expected, found| {
            ProbeError::Device(p4fleet_client::Error::WrongEndpoint(WrongEndpoint {
                endpoint: s.endpoint.clone(),
                expected,
                found,
            }))
        };
        let mut reasons = std::collections::HashSet::new();
        for (expected, found, set) in [
            (
                Service::P4Runtime,
                Found::Serves(Service::Bfrt),
                Some("set spec.protocol: Bfrt"),
            ),
            (
                Service::Bfrt,
                Found::Serves(Service::P4Runtime),
                Some("set spec.protocol: P4Runtime"),
            ),
            (Service::P4Runtime, Found::OtherGrpc, None),
            (
                Service::P4Runtime,
                Found::Http {
                    status: 404,
                    content_type: None,
                },
                None,
            ),
            (Service::Bfrt, Found::Http1 { status: 400 }, None),
            (Service::P4Runtime, Found::NotHttp, None),
        ] {
            let reason = found.reason();
            let st = build_status(
                "sw",
                &s,
                Some(1),
                Some(&Err(wrong(expected, found))),
                None,
                &[],
            );
            let reachable = condition(&st, REACHABLE);
            assert!(!reachable.is_true());
            assert_eq!(reachable.reason, reason);
            assert_eq!(condition(&st, "Ready").reason, reason);
            assert!(
                reachable.message.starts_with("10.0.0.5:50052 "),
                "{reachable:?}"
            );
            match set {
                Some(set) => assert!(reachable.message.ends_with(set), "{reachable:?}"),
                None => assert!(
                    !reachable.message.contains("spec.protocol"),
                    "{reachable:?}"
                ),
            }
            reasons.insert(reason);
        }
        assert_eq!(reasons.len(), 5, "WrongProtocol both ways, four others");
    }

    fn spec(target: SwitchTarget, endpoint: &str) -> SwitchSpec {
        serde_json::from_value(serde_json::json!({"target": target, "endpoint": endpoint})).unwrap()
    }

    fn vs(ns: &str, name: &str, switch: &str, slot: u32) -> VirtualSwitch {
        let mut v = VirtualSwitch::new(name, crate::reads::fixture::vs_spec("p", Some(switch)));
        v.metadata.namespace = Some(ns.into());
        v.status = Some(VirtualSwitchStatus {
            switch: Some(switch.into()),
            slot: Some(slot),
            ..Default::default()
        });
        v
    }

    /// What an idle probe asks: a healthy device with a loaded pipeline
    /// answers one RPC per probe (the pipeline check), Capabilities only
    /// when the connection, its stream or the spec changed, or when no
    /// pipeline check reached the device; a device gone is unreachable.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_probe_asks_capabilities_only_when_something_changed() {
        use super::probed::calls;
        let super::probed::Probed {
            running,
            mut sw,
            devices,
            dev,
            loaded,
            ..
        } = super::probed::device().await;
        let probe_ok = |(p, s): (Probe, Option<Standing>)| {
            assert!(p.is_ok(), "{p:?}");
            assert!(matches!(s, Some(Ok(()))), "{s:?}");
        };
        // The first probes ask: a new connection, then its stream accepted
        // (a new epoch).
        probe_ok(probe(&devices, &sw).await);
        probe_ok(probe(&devices, &sw).await);
        let (caps, cookies) = (
            calls(&running, "P4Runtime/Capabilities"),
            calls(&running, "P4Runtime/GetForwardingPipelineConfig"),
        );
        for _ in 0..3 {
            probe_ok(probe(&devices, &sw).await);
        }
        assert_eq!(
            calls(&running, "P4Runtime/Capabilities"),
            caps,
            "nothing changed: the kept answer"
        );
        assert_eq!(
            calls(&running, "P4Runtime/GetForwardingPipelineConfig"),
            cookies + 3,
            "one pipeline check per probe"
        );

        // No pipeline loaded: nothing else reaches the device, so each
        // probe asks Capabilities.
        devices.pipelines().forget_switch("sw");
        probe_ok(probe(&devices, &sw).await);
        probe_ok(probe(&devices, &sw).await);
        assert_eq!(calls(&running, "P4Runtime/Capabilities"), caps + 2);

        // A spec change asks again, once.
        devices.pipelines().record("ns/a", "sw", loaded);
        sw.metadata.generation = Some(2);
        probe_ok(probe(&devices, &sw).await);
        probe_ok(probe(&devices, &sw).await);
        assert_eq!(calls(&running, "P4Runtime/Capabilities"), caps + 3);

        // The device gone: unreachable, whether or not its stream's end
        // was seen yet, and the kept answer is dropped.
        running.shutdown().await.unwrap();
        let (p, standing) = probe(&devices, &sw).await;
        assert!(p.is_err(), "a device gone is not reachable: {p:?}");
        assert!(standing.is_none());
        let asked = Asked {
            epoch: *dev.changes().borrow(),
            generation: Some(2),
        };
        assert_eq!(devices.capabilities.get("sw", asked), None);
    }

    #[test]
    fn validation_names_fields() {
        assert!(validate(&spec(SwitchTarget::Bmv2, "10.0.0.1:9559")).is_empty());
        let p = validate(&spec(SwitchTarget::Bmv2, "host:70000"));
        assert!(p[0].contains("spec.endpoint"), "{p:?}");
        let mut s = spec(SwitchTarget::Bmv2, "h:9559");
        s.protocol = Some(SwitchProtocol::Bfrt);
        assert!(validate(&s)[0].contains("spec.protocol"));
    }

    #[test]
    fn status_counts_slots_and_reachability() {
        let mut s = spec(SwitchTarget::Fpga, "fpga:50051");
        s.slots = 4;
        let vss = [
            vs("a", "x", "sw1", 2),
            vs("b", "y", "sw1", 0),
            vs("a", "z", "other", 0),
        ];
        let caps = p4fleet_client::Capabilities {
            pipes: None,
            protocol: "P4Runtime",
            api_version: "1.4.0".into(),
            bulk_write: true,
        };
        let st = build_status("sw1", &s, Some(1), Some(&Ok(caps)), Some(&Ok(())), &vss);
        assert_eq!(st.slot_summary.as_deref(), Some("2/4"));
        assert_eq!(st.slots_in_use[0].virtual_switch, "b/y");
        assert_eq!(st.slots_in_use[1].slot, 2);
        assert!(st.conditions.iter().all(|c| c.is_true()));
        let caps = st.capabilities.unwrap();
        assert!(!caps.slot_service, "only the board probe says so");
        assert!(caps.bulk_write);

        let refused = ProbeError::Timeout {
            endpoint: s.endpoint.clone(),
            after: PROBE_TIMEOUT,
        };
        let st = build_status("sw1", &s, Some(1), Some(&Err(refused)), None, &[]);
        let ready = p4fleet_crds::find_condition(&st.conditions, "Ready").unwrap();
        assert_eq!(ready.reason, "ConnectTimeout");
        assert_eq!(st.slot_summary.as_deref(), Some("0/4"));
    }

    fn condition(st: &SwitchStatus, t: &str) -> Condition {
        p4fleet_crds::find_condition(&st.conditions, t)
            .unwrap()
            .clone()
    }

    #[test]
    fn tls_failures_and_secret_problems_are_reasons() {
        let s = spec(SwitchTarget::Bmv2, "10.0.0.1:9559");
        let tls = |failure| {
            ProbeError::Device(p4fleet_client::Error::Tls {
                endpoint: s.endpoint.clone(),
                failure,
                detail: "rustls says".into(),
            })
        };
        let mut reasons = std::collections::HashSet::new();
        for f in [
            TlsFailure::UnknownCa,
            TlsFailure::Expired,
            TlsFailure::WrongName,
            TlsFailure::ClientCertificateRequired,
            TlsFailure::ClientCertificateRejected,
        ] {
            let st = build_status("sw", &s, Some(1), Some(&Err(tls(f))), None, &[]);
            let reachable = condition(&st, REACHABLE);
            assert!(!reachable.is_true());
            assert_eq!(reachable.reason, f.reason());
            assert_eq!(condition(&st, "Ready").reason, f.reason());
            assert!(reachable.message.contains("rustls says"), "{reachable:?}");
            reasons.insert(f.reason());
        }
        assert_eq!(reasons.len(), 5, "each failure has its own reason");
        let secret = ProbeError::TlsSecret(TlsSecretError {
            secret: "ns/sw-tls".into(),
            problem: crate::tls_secrets::SecretProblem::MissingKey("tls.key"),
        });
        let st = build_status("sw", &s, Some(1), Some(&Err(secret)), None, &[]);
        let reachable = condition(&st, REACHABLE);
        assert_eq!(reachable.reason, "TlsSecretKeyMissing");
        assert!(reachable.message.contains("ns/sw-tls") && reachable.message.contains("tls.key"));
    }

    #[test]
    fn a_refusal_names_what_the_device_said() {
        let s = spec(SwitchTarget::Bmv2, "10.0.0.1:9559");
        let caps = || {
            Ok(p4fleet_client::Capabilities {
                pipes: None,
                protocol: "P4Runtime",
                api_version: "1.4.0".into(),
                bulk_write: false,
            })
        };
        let refused = |refusal| {
            Err(p4fleet_client::Error::NotPrimary {
                device_id: 1,
                refusal: Box::new(refusal),
            })
        };
        let other = refused(Refusal::NotPrimary {
            primary_election_id: Some((9u128 << 64) | 4),
            message: "a primary exists; you are a backup".into(),
        });
        let st = build_status("sw", &s, Some(1), Some(&caps()), Some(&other), &[]);
        assert!(condition(&st, REACHABLE).is_true());
        let p = condition(&st, PRIMARY);
        assert_eq!(p.reason, "NotPrimary");
        assert!(p.message.contains("high 9, low 4"), "{}", p.message);
        assert_eq!(condition(&st, "Ready").reason, "NotPrimary");

        let unknown = refused(Refusal::UnknownDevice {
            message: "unknown device id 1".into(),
        });
        let st = build_status("sw", &s, Some(1), Some(&caps()), Some(&unknown), &[]);
        let p = condition(&st, PRIMARY);
        assert_eq!(p.reason, "UnknownDeviceId");
        assert!(p.message.contains("NOT_FOUND"), "{}", p.message);
        assert!(!condition(&st, "Ready").is_true());
    }
}
