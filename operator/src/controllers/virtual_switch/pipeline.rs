//! The program a VirtualSwitch runs: dereference it ([`ready_program`]:
//! Ready, and its sources still those of its digest, or else its
//! revision's snapshot), build what the
//! Switch loads ([`device_config`], [`tofino_pipeline`], pure) and apply
//! it ([`load`]: P4Runtime with the target's device config and the digest
//! as cookie, or BFRT with the Tofino artifacts).

use std::time::{Duration, Instant};

use kube::ResourceExt;
use p4fleet_client::TofinoPipeline;
use p4fleet_crds::condition_types::{PIPELINE_LOADED, READY};
use p4fleet_crds::{
    Condition, Switch, SwitchProtocol, SwitchTarget, UpdateStrategyType, find_condition,
};
use p4fleet_model::pipeline_config::BfPipelineConfig;
use p4fleet_proto::p4info::P4Info;

use crate::artifacts::{self, Resolved, field};
use crate::context::Context;
use crate::fleet::revisions::{self, RestoreError};
use crate::fleet::rollout;
use crate::loaded_pipelines::PipelineCheck;
use crate::metrics::SwitchLabel;
use crate::reads::Reads;

/// A program ready to be loaded.
#[derive(Debug, Clone)]
pub struct ReadyProgram {
    pub name: String,
    pub digest: String,
    pub p4info: P4Info,
    pub resolved: Resolved,
    /// What one instance occupies on an FPGA board (`spec.artifacts.fpga.resources`).
    pub fpga_resources: std::collections::BTreeMap<String, u64>,
}

/// Why the program cannot be loaded yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    #[error("spec.programRef: P4Program {0} not found")]
    NotFound(String),
    #[error("spec.programRef: P4Program {0} is not Ready")]
    Unready(String),
    /// Its sources changed after it was last reconciled; it will be again,
    /// and that status change brings the VirtualSwitch back.
    #[error("P4Program {0} sources changed; waiting for its new digest")]
    Changing(String),
    /// Its new content is held (it removes tables sets still fill): the
    /// loaded pipeline stays.
    #[error(
        "P4Program {0}: its change is held (see its RolloutHeld condition); the loaded pipeline stays"
    )]
    Held(String),
    /// A URL artifact could not be downloaded or did not match its
    /// digest (the program's own status says so at its next resolve).
    #[error("P4Program {0}: {1}")]
    ArtifactUnavailable(String, String),
    /// Its sources changed and the revision of the content in force
    /// cannot be read back from its snapshot.
    #[error("P4Program {0}: {1}")]
    RevisionUnavailable(String, String),
}

impl NotReady {
    /// The `PipelineLoaded` condition that says so.
    pub fn condition(&self) -> Condition {
        let message = self.to_string();
        match self {
            NotReady::NotFound(_) => {
                Condition::new(PIPELINE_LOADED, false, "ProgramNotFound", message)
            }
            NotReady::Unready(_) => {
                Condition::new(PIPELINE_LOADED, false, "ProgramNotReady", message)
            }
            NotReady::Changing(_) => {
                Condition::unknown(PIPELINE_LOADED, "ProgramChanging", message)
            }
            NotReady::Held(_) => Condition::unknown(PIPELINE_LOADED, "ProgramChangeHeld", message),
            NotReady::ArtifactUnavailable(..) => {
                Condition::new(PIPELINE_LOADED, false, "ArtifactUnavailable", message)
            }
            NotReady::RevisionUnavailable(..) => {
                Condition::new(PIPELINE_LOADED, false, "RevisionUnavailable", message)
            }
        }
    }
}

/// Ready programs kept per `namespace/name`, each with its generation.
type Kept = std::collections::HashMap<String, Vec<(i64, ReadyProgram)>>;

/// Ready programs by `namespace/name`, each with the generation and digest
/// it was resolved for. A VirtualSwitch is reconciled after every status
/// write and device change; without this each reconcile GETs the
/// program's ConfigMaps (a 350 kB bitstream for a P4VBox router), hashes
/// them and parses the P4Info again, and a swap waits behind that. The
/// digest pins the bytes: a hit loads exactly what the P4Program's status
/// names, and a new digest or spec (generation) is a miss.
#[derive(Clone, Default)]
pub struct ProgramCache(std::sync::Arc<std::sync::Mutex<Kept>>);

impl ProgramCache {
    /// Revisions kept per program: during a rollout its VirtualSwitches
    /// run two (the one before and the new one).
    const PER_PROGRAM: usize = 2;

    fn get(&self, key: &str, generation: i64, digest: &str) -> Option<ReadyProgram> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key)?
            .iter()
            .find(|(g, p)| *g == generation && p.digest == digest)
            .map(|(_, p)| p.clone())
    }

    /// Keeps `program` (the newest first), or forgets the program's
    /// revision `digest` when None.
    fn put(&self, key: String, generation: i64, digest: &str, program: Option<&ReadyProgram>) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let kept = map.entry(key).or_default();
        kept.retain(|(g, p)| *g == generation && p.digest != digest);
        if let Some(p) = program {
            kept.insert(0, (generation, p.clone()));
            kept.truncate(Self::PER_PROGRAM);
        }
    }
}

/// [`ready_program`] through `cache`: a Ready program whose generation and
/// digest were resolved before is not read again.
pub async fn ready_program_cached(
    reads: &impl Reads,
    cache: &ProgramCache,
    ns: &str,
    name: &str,
    vs: &str,
) -> Result<Result<ReadyProgram, NotReady>, kube::Error> {
    let key = format!("{ns}/{name}");
    let seen = reads.program(ns, name).await?.and_then(|p| {
        let st = p.status.as_ref()?;
        find_condition(&st.conditions, READY).filter(|c| c.is_true())?;
        let digest = rollout::assigned(st, vs)?.to_string();
        Some((p.metadata.generation.unwrap_or(0), digest))
    });
    if let Some((generation, digest)) = &seen
        && let Some(hit) = cache.get(&key, *generation, digest)
    {
        return Ok(Ok(hit));
    }
    let ready = ready_program(reads, ns, name, vs).await?;
    let (generation, digest) = seen.unwrap_or_default();
    cache.put(key, generation, &digest, ready.as_ref().ok());
    Ok(ready)
}

/// The program `ns/name` when it is Ready, at the revision VirtualSwitch
/// `vs` is to run ([`rollout::assigned`]: the content in force, or what a
/// Canary rollout assigns it): from its sources when they give that
/// digest, else from the revision's snapshot.
pub async fn ready_program(
    reads: &impl Reads,
    ns: &str,
    name: &str,
    vs: &str,
) -> Result<Result<ReadyProgram, NotReady>, kube::Error> {
    let Some(p) = reads.program(ns, name).await? else {
        return Ok(Err(NotReady::NotFound(name.into())));
    };
    let st = p.status.clone().unwrap_or_default();
    let ready = find_condition(&st.conditions, READY).is_some_and(|c| c.is_true());
    let assigned = rollout::assigned(&st, vs).map(str::to_string);
    let (true, Some(digest)) = (ready, assigned) else {
        return Ok(Err(NotReady::Unready(name.into())));
    };
    // Held by a removal or by a plan: the content in force is not what
    // the sources give now.
    let holds = [
        crate::fleet::program_hold::ROLLOUT_HELD,
        crate::fleet::program_plan::PLANNED,
    ];
    let held = holds
        .iter()
        .any(|h| find_condition(&st.conditions, h).is_some_and(|c| c.is_true()));
    let resolved = artifacts::resolve(reads, ns, &p.spec).await?;
    let url_problem = resolved
        .problems()
        .find(|e| matches!(e, artifacts::SourceError::Url { .. }));
    if let Some(e) = url_problem.filter(|_| !held) {
        return Ok(Err(NotReady::ArtifactUnavailable(
            name.into(),
            e.to_string(),
        )));
    }
    if let Ok(p4info) = resolved.p4info()
        && resolved.digest() == digest
    {
        return Ok(Ok(ReadyProgram {
            name: name.into(),
            digest,
            p4info,
            resolved,
            fpga_resources: fpga_resources(&p.spec),
        }));
    }
    // The sources no longer give the content in force (edited in place,
    // or a held change): its revision's snapshot does.
    let restored = match revisions::load(reads, ns, name, &digest).await? {
        Ok(r) => r,
        // Recorded before revisions existed: wait for the program.
        Err(RestoreError::NotRecorded { .. }) if held => {
            return Ok(Err(NotReady::Held(name.into())));
        }
        Err(RestoreError::NotRecorded { .. }) => {
            return Ok(Err(NotReady::Changing(name.into())));
        }
        Err(e) => {
            return Ok(Err(NotReady::RevisionUnavailable(
                name.into(),
                e.to_string(),
            )));
        }
    };
    tracing::debug!(namespace = %ns, program = %name, revision = restored.revision,
        snapshot = %restored.name, "content read from its revision's snapshot");
    Ok(match restored.resolved.p4info() {
        Ok(p4info) => Ok(ReadyProgram {
            name: name.into(),
            digest,
            p4info,
            fpga_resources: fpga_resources(&restored.spec),
            resolved: restored.resolved,
        }),
        Err(e) => Err(NotReady::RevisionUnavailable(name.into(), e.to_string())),
    })
}

/// What one instance of a program with `spec` occupies on an FPGA board.
pub fn fpga_resources(
    spec: &p4fleet_crds::P4ProgramSpec,
) -> std::collections::BTreeMap<String, u64> {
    spec.artifacts
        .fpga
        .as_ref()
        .map(|f| f.resources.clone())
        .unwrap_or_default()
}

/// The device config the target loads: its artifact for the Switch's kind
/// (bmv2 JSON, FPGA bitstream; empty when the program has none), or for
/// Dpdk the packed config infrap4d takes ([`dpdk_device_config`]).
pub fn device_config(
    program: &str,
    switch: &str,
    target: SwitchTarget,
    resolved: &Resolved,
) -> Result<Vec<u8>, DpdkArtifactError> {
    let key = match target {
        SwitchTarget::Bmv2 => field::BMV2_JSON,
        SwitchTarget::Dpdk => return dpdk_device_config(program, switch, resolved),
        SwitchTarget::Fpga => field::FPGA_BITSTREAM,
        SwitchTarget::Tofino => field::TOFINO_BINARY,
    };
    Ok(resolved
        .get(key)
        .and_then(|r| r.as_ref().ok())
        .cloned()
        .unwrap_or_default())
}

/// Why a program cannot be loaded on a Dpdk Switch; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DpdkArtifactError {
    #[error(
        "{field}: P4Program {program} has none, and Switch {switch} (Dpdk, infrap4d) needs it in its pipeline config"
    )]
    Missing {
        field: &'static str,
        program: String,
        switch: String,
    },
    /// The artifact could not be read (the error names the field).
    #[error(transparent)]
    Unreadable(#[from] artifacts::SourceError),
}

/// The `p4_device_config` of a Dpdk Switch: the `.spec`, bfrt.json and
/// context.json packed as infrap4d's `BfPipelineConfig` under the
/// program's name (docs/dpdk.md). All three are required.
pub fn dpdk_device_config(
    program: &str,
    switch: &str,
    resolved: &Resolved,
) -> Result<Vec<u8>, DpdkArtifactError> {
    let required = |key: &'static str| match resolved.get(key) {
        None => Err(DpdkArtifactError::Missing {
            field: key,
            program: program.into(),
            switch: switch.into(),
        }),
        Some(r) => Ok(r.clone()?),
    };
    let spec = required(field::DPDK_SPEC)?;
    let bfrt_json = required(field::DPDK_BFRT_JSON)?;
    let context = required(field::DPDK_CONTEXT)?;
    Ok(BfPipelineConfig::dpdk(program, bfrt_json, context, spec).pack())
}

/// Why a program cannot be loaded on a BFRT Switch; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TofinoArtifactError {
    #[error(
        "{}: P4Program {program} has no Tofino artifacts, which Switch {switch} (Tofino, BFRT) needs",
        field::TOFINO_BFRT_JSON
    )]
    Missing { program: String, switch: String },
    /// The artifact could not be read (the error names the field).
    #[error(transparent)]
    Unreadable(#[from] artifacts::SourceError),
}

/// The Tofino pipeline a BFRT Switch loads: bfrt.json (required),
/// context.json and binary (empty when the program has none), bound under
/// the program's name.
pub fn tofino_pipeline(
    program: &str,
    switch: &str,
    resolved: &Resolved,
) -> Result<TofinoPipeline, TofinoArtifactError> {
    let optional = |key: &str| -> Result<Vec<u8>, TofinoArtifactError> {
        match resolved.get(key) {
            None => Ok(Vec::new()),
            Some(Ok(b)) => Ok(b.clone()),
            Some(Err(e)) => Err(e.clone().into()),
        }
    };
    let bfrt_json = match resolved.get(field::TOFINO_BFRT_JSON) {
        None => {
            return Err(TofinoArtifactError::Missing {
                program: program.into(),
                switch: switch.into(),
            });
        }
        Some(r) => r.clone()?,
    };
    Ok(TofinoPipeline {
        p4_name: program.into(),
        bfrt_json,
        context_json: optional(field::TOFINO_CONTEXT_JSON)?,
        binary: optional(field::TOFINO_BINARY)?,
    })
}

/// What a VirtualSwitch asks of its Switch that the Switch's kind cannot
/// do: reported as a condition, never silently ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error(
        "spec.{field}: Switch {switch} is a {target:?} target; isolation and port maps need an Fpga Switch (slot service)"
    )]
    NeedsSlotService {
        field: &'static str,
        switch: String,
        target: SwitchTarget,
    },
}

/// The first thing `spec` asks that `sw` cannot do, if any.
pub fn unsupported(spec: &p4fleet_crds::VirtualSwitchSpec, sw: &Switch) -> Option<Unsupported> {
    if sw.spec.target == SwitchTarget::Fpga {
        return None;
    }
    let field = if spec.isolation.is_some() {
        "isolation"
    } else if !spec.port_map.is_empty() {
        "portMap"
    } else {
        return None;
    };
    Some(Unsupported::NeedsSlotService {
        field,
        switch: sw.name_any(),
        target: sw.spec.target,
    })
}

/// Why loading failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    #[error(transparent)]
    MissingTofinoArtifacts(#[from] TofinoArtifactError),
    #[error(transparent)]
    MissingDpdkArtifacts(#[from] DpdkArtifactError),
    #[error(transparent)]
    Device(#[from] p4fleet_client::Error),
    /// FPGA boards: the slot service refused or did not confirm the load.
    #[error(transparent)]
    Slot(#[from] super::slot_load::SlotLoadError),
}

impl LoadError {
    /// The failure as the `PipelineLoaded` condition shows it.
    pub fn refusal(&self) -> crate::retries::Refusal {
        crate::retries::Refusal {
            reason: self.reason(),
            message: self.to_string(),
        }
    }

    /// The `PipelineLoaded` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            LoadError::MissingTofinoArtifacts(_) => "MissingTofinoArtifacts",
            LoadError::MissingDpdkArtifacts(_) => "MissingDpdkArtifacts",
            LoadError::Device(_) => "LoadFailed",
            LoadError::Slot(e) => e.reason(),
            LoadError::Unsupported(_) => "UnsupportedOnTarget",
        }
    }
}

/// A push the device confirmed.
#[derive(Debug, Clone, PartialEq)]
pub struct Pushed {
    pub took: Duration,
    /// P4Runtime: how the device treated the entries it held, and how many
    /// it kept (read back before anything was written again).
    pub update: Option<super::hitless::Update>,
}

/// What the Switch probe checks every `--drift-seconds` to tell that
/// `program`, loaded into `claim` on `sw`, still runs there: the
/// comparison the load itself makes before deciding to push (P4Runtime:
/// the cookie; BFRT: program name, bfrt.json and pipes; FPGA: the slot's
/// digest, isolation and port map). None when it cannot be said (then the
/// VirtualSwitch checks itself every `--drift-seconds`). Pure.
pub fn drift_check(
    sw: &Switch,
    claim: &p4fleet_crds::SlotClaim,
    program: &ReadyProgram,
    spec: &p4fleet_crds::VirtualSwitchSpec,
) -> Option<PipelineCheck> {
    let slot = claim.slot;
    if sw.spec.target == SwitchTarget::Fpga {
        return Some(PipelineCheck::Slot {
            slot,
            digest: program.digest.clone(),
            isolation: super::slot_load::isolation(spec).ok()?,
            port_map: super::slot_load::port_map(spec),
        });
    }
    Some(match sw.spec.effective_protocol() {
        SwitchProtocol::Bfrt => {
            let p = tofino_pipeline(&program.name, &sw.name_any(), &program.resolved).ok()?;
            PipelineCheck::Tofino {
                slot,
                sha256: p.sha256(),
                p4_name: p.p4_name,
                pipes: claim.pipes.clone(),
            }
        }
        SwitchProtocol::P4Runtime => PipelineCheck::Cookie {
            slot,
            cookie: artifacts::cookie(&program.digest),
        },
    })
}

/// Loads `program` into `slot` of `sw` the way its protocol wants.
/// Returns how long the push took (and, on P4Runtime, whether the device
/// kept unchanged tables), or None when the device already ran it
/// (nothing was pushed).
pub async fn load(
    ctx: &Context,
    sw: &Switch,
    claim: &p4fleet_crds::SlotClaim,
    program: &ReadyProgram,
    strategy: UpdateStrategyType,
) -> Result<Option<Pushed>, LoadError> {
    let slot = claim.slot;
    let started = Instant::now();
    let dev = ctx.devices.connect(sw)?;
    let info = &program.p4info;
    let (pushed, took, update) = match sw.spec.effective_protocol() {
        SwitchProtocol::Bfrt => {
            let pipeline = tofino_pipeline(&program.name, &sw.name_any(), &program.resolved)?;
            // A pipe set: the whole device's config with this program on
            // its pipes, the others kept (both strategies replace only
            // this program; docs/fpga.md, "Other kinds").
            let pushed = if claim.pipes.is_empty() {
                dev.set_tofino_pipeline(slot, info, &pipeline).await?
            } else {
                dev.set_tofino_pipes(slot, info, &pipeline, &claim.pipes)
                    .await?
            };
            let took = started.elapsed();
            // What the program's tables hold right after the load, read
            // through its own client (on a pipe set the other programs'
            // entries are not its): counted, not assumed empty, since a
            // warm init that reconciles may keep entries.
            let update = match pushed {
                false => None,
                true => {
                    let first = claim.pipes.iter().min().copied();
                    let vs = &claim.virtual_switch;
                    match crate::fleet::slot_claims::program_device(
                        &ctx.devices,
                        sw,
                        slot,
                        first,
                        vs,
                    ) {
                        Ok(own) => Some(super::hitless::observed(&own, slot, info).await),
                        Err(e) => {
                            tracing::warn!(virtual_switch = %vs, error = %e,
                                "could not count the entries kept by a load");
                            Some(super::hitless::Update::uncounted())
                        }
                    }
                }
            };
            (pushed, took, update)
        }
        SwitchProtocol::P4Runtime => {
            let config = device_config(
                &program.name,
                &sw.name_any(),
                sw.spec.target,
                &program.resolved,
            )?;
            let cookie = artifacts::cookie(&program.digest);
            // HotSwap keeps what the target can (RECONCILE_AND_COMMIT);
            // Recreate asks for a fresh program: VERIFY_AND_COMMIT, which
            // clears every table (never a reconcile).
            let reconcile = strategy == UpdateStrategyType::HotSwap;
            let mode = dev
                .push_pipeline(slot, info, config, cookie, reconcile)
                .await?;
            match mode {
                None => (false, started.elapsed(), None),
                Some(mode) => {
                    let took = started.elapsed();
                    (
                        true,
                        took,
                        super::hitless::update(&dev, slot, info, mode).await,
                    )
                }
            }
        }
    };
    // From now on a lost or restarted device is seen at once.
    dev.observe(slot);
    if !pushed {
        return Ok(None);
    }
    // What ran on the old pipeline (TableEntrySets) must be written again.
    ctx.devices.notify(&sw.name_any());
    ctx.metrics
        .pipeline_loads
        .get_or_create(&SwitchLabel {
            switch: sw.name_any(),
        })
        .inc();
    Ok(Some(Pushed { took, update }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reads::fixture::Cluster;
    use p4fleet_crds::P4Program;

    /// Switch s1 of `target`.
    fn switch_s1(target: &str) -> Switch {
        let spec: p4fleet_crds::SwitchSpec =
            serde_json::from_value(serde_json::json!({"target": target, "endpoint": "h:1"}))
                .unwrap();
        Switch::new("s1", spec)
    }

    #[test]
    fn tofino_pipeline_needs_bfrt_json_and_defaults_the_rest() {
        let mut r = Resolved::default();
        r.insert(field::P4INFO, Ok(b"p4info".to_vec()));
        let e = tofino_pipeline("fw", "tofino-1", &r).unwrap_err();
        assert!(matches!(e, TofinoArtifactError::Missing { .. }));
        let msg = e.to_string();
        assert!(msg.starts_with("spec.artifacts.tofino.bfrtJson:"), "{msg}");
        assert!(msg.contains("fw") && msg.contains("tofino-1"), "{msg}");

        r.insert(field::TOFINO_BFRT_JSON, Ok(b"{}".to_vec()));
        let p = tofino_pipeline("fw", "tofino-1", &r).unwrap();
        assert_eq!(p.p4_name, "fw");
        assert_eq!(p.bfrt_json, b"{}");
        assert!(p.context_json.is_empty() && p.binary.is_empty());

        r.insert(field::TOFINO_CONTEXT_JSON, Ok(b"{\"c\":1}".to_vec()));
        r.insert(field::TOFINO_BINARY, Ok(vec![0, 1, 2]));
        let p = tofino_pipeline("fw", "tofino-1", &r).unwrap();
        assert_eq!((p.context_json.len(), p.binary), (7, vec![0, 1, 2]));

        let gone = "spec.artifacts.tofino.binary: ConfigMap fw-bin not found";
        r.insert(
            field::TOFINO_BINARY,
            Err(artifacts::SourceError::ConfigMapNotFound {
                field: field::TOFINO_BINARY,
                name: "fw-bin".into(),
            }),
        );
        assert_eq!(
            tofino_pipeline("fw", "tofino-1", &r)
                .unwrap_err()
                .to_string(),
            gone
        );
    }

    #[test]
    fn the_probes_check_is_what_each_kind_compares_before_a_push() {
        use sha2::Digest;
        let mut resolved = Resolved::default();
        resolved.insert(field::TOFINO_BFRT_JSON, Ok(b"{}".to_vec()));
        let program = ReadyProgram {
            name: "fw".into(),
            digest: "0123456789abcdef".repeat(4),
            p4info: P4Info::default(),
            resolved,
            fpga_resources: Default::default(),
        };
        let spec: p4fleet_crds::VirtualSwitchSpec = serde_json::from_value(serde_json::json!({
            "programRef": "fw", "switchRef": "s1", "isolation": {"vlan": 10},
            "portMap": [{"physical": 1, "virtual": 0}]}))
        .unwrap();
        let claim = p4fleet_crds::SlotClaim {
            slot: 2,
            pipes: vec![0, 1],
            ..Default::default()
        };
        assert_eq!(
            drift_check(&switch_s1("Bmv2"), &claim, &program, &spec),
            Some(PipelineCheck::Cookie {
                slot: 2,
                cookie: 0x0123_4567_89ab_cdef
            })
        );
        assert_eq!(
            drift_check(&switch_s1("Tofino"), &claim, &program, &spec),
            Some(PipelineCheck::Tofino {
                slot: 2,
                p4_name: "fw".into(),
                // No context.json or binary: those of empty ones.
                sha256: p4fleet_client::TofinoSha256 {
                    bfrt_json: sha2::Sha256::digest(b"{}").to_vec(),
                    context_json: sha2::Sha256::digest(b"").to_vec(),
                    binary: sha2::Sha256::digest(b"").to_vec(),
                },
                pipes: vec![0, 1],
            })
        );
        let Some(PipelineCheck::Slot {
            slot,
            digest,
            isolation,
            port_map,
        }) = drift_check(&switch_s1("Fpga"), &claim, &program, &spec)
        else {
            panic!("an FPGA slot is checked through the slot service");
        };
        assert_eq!((slot, digest), (2, program.digest.clone()));
        assert_eq!(isolation.map(|i| i.vlan_id), Some(10));
        assert_eq!(port_map.len(), 1);
        // No bfrt.json: nothing the probe could compare; the VirtualSwitch
        // checks itself.
        let mut bare = program.clone();
        bare.resolved = Resolved::default();
        assert_eq!(
            drift_check(&switch_s1("Tofino"), &claim, &bare, &spec),
            None
        );
    }

    #[test]
    fn isolation_off_an_fpga_is_a_condition_not_a_no_op() {
        let spec = |v: serde_json::Value| -> p4fleet_crds::VirtualSwitchSpec {
            serde_json::from_value(v).unwrap()
        };
        let iso = spec(serde_json::json!({"programRef": "p", "switchRef": "s1",
            "isolation": {"vlan": 10}}));
        let ports = spec(serde_json::json!({"programRef": "p", "switchRef": "s1",
            "portMap": [{"physical": 1, "virtual": 0}]}));
        let plain = spec(serde_json::json!({"programRef": "p", "switchRef": "s1"}));
        assert_eq!(unsupported(&iso, &switch_s1("Fpga")), None);
        assert_eq!(unsupported(&plain, &switch_s1("Bmv2")), None);
        let e = LoadError::from(unsupported(&iso, &switch_s1("Bmv2")).unwrap());
        assert_eq!(e.reason(), "UnsupportedOnTarget");
        assert_eq!(
            e.to_string(),
            "spec.isolation: Switch s1 is a Bmv2 target; isolation and port maps need an Fpga Switch (slot service)"
        );
        let e = unsupported(&ports, &switch_s1("Tofino"))
            .unwrap()
            .to_string();
        assert!(
            e.starts_with("spec.portMap: Switch s1 is a Tofino target"),
            "{e}"
        );
    }

    #[test]
    fn the_device_config_is_the_targets_artifact_or_empty() {
        let mut r = Resolved::default();
        r.insert(field::BMV2_JSON, Ok(b"{}".to_vec()));
        r.insert(field::FPGA_BITSTREAM, Ok(vec![1, 2]));
        let config = |t| device_config("fw", "sw-1", t, &r).unwrap();
        assert_eq!(config(SwitchTarget::Bmv2), b"{}");
        assert_eq!(config(SwitchTarget::Fpga), [1, 2]);
        assert!(config(SwitchTarget::Tofino).is_empty());
    }

    #[test]
    fn a_dpdk_switch_gets_the_packed_config_and_each_missing_part_is_named() {
        let mut r = Resolved::default();
        let missing = |r: &Resolved| {
            device_config("l2crypt", "dpdk-1", SwitchTarget::Dpdk, r)
                .unwrap_err()
                .to_string()
        };
        assert!(missing(&r).starts_with("spec.artifacts.dpdk.spec: P4Program l2crypt has none"));
        r.insert(field::DPDK_SPEC, Ok(b"apply {\n}\n".to_vec()));
        assert!(missing(&r).starts_with("spec.artifacts.dpdk.bfrtJson:"));
        r.insert(field::DPDK_BFRT_JSON, Ok(b"{\"tables\":[]}".to_vec()));
        assert!(missing(&r).starts_with("spec.artifacts.dpdk.context:"));
        assert!(missing(&r).contains("dpdk-1"));
        r.insert(
            field::DPDK_CONTEXT,
            Err(artifacts::SourceError::ConfigMapNotFound {
                field: field::DPDK_CONTEXT,
                name: "ctx".into(),
            }),
        );
        assert_eq!(
            missing(&r),
            "spec.artifacts.dpdk.context: ConfigMap ctx not found"
        );
        r.insert(field::DPDK_CONTEXT, Ok(b"{}".to_vec()));
        let bytes = device_config("l2crypt", "dpdk-1", SwitchTarget::Dpdk, &r).unwrap();
        let back = BfPipelineConfig::unpack_dpdk(&bytes).unwrap();
        assert_eq!(back.p4_name, "l2crypt");
        assert_eq!(back.bfruntime_info, b"{\"tables\":[]}");
        assert_eq!(back.profiles[0].context, b"{}");
        assert_eq!(back.spec(), Some("apply {\n}\n"));
    }

    const FIREWALL: &str = include_str!("../../../../examples/firewall/p4info.txt");

    fn program(ready: bool, digest: Option<String>) -> P4Program {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "fw", "namespace": "ns"},
            "spec": {"p4info": {"inline": FIREWALL}},
            "status": {"digest": digest, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }, "reason": "R"}
            ]}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn only_a_ready_program_whose_sources_match_its_digest_loads() {
        let resolved: Resolved = [(field::P4INFO, Ok(FIREWALL.as_bytes().to_vec()))]
            .into_iter()
            .collect();
        let digest = resolved.digest();
        let with = |p: P4Program| Cluster {
            programs: vec![p],
            ..Default::default()
        };
        let ok = ready_program(&with(program(true, Some(digest.clone()))), "ns", "fw", "v")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (ok.name.as_str(), ok.digest.as_str()),
            ("fw", digest.as_str())
        );
        assert_eq!(ok.p4info.tables.len(), 1);

        let not = |c: Cluster| async move {
            ready_program(&c, "ns", "fw", "v")
                .await
                .unwrap()
                .unwrap_err()
        };
        assert_eq!(
            not(Cluster::default()).await,
            NotReady::NotFound("fw".into())
        );
        assert_eq!(
            not(with(program(false, Some(digest)))).await,
            NotReady::Unready("fw".into())
        );
        let changed = not(with(program(true, Some("0".repeat(64))))).await;
        assert_eq!(changed, NotReady::Changing("fw".into()));
        let c = changed.condition();
        assert_eq!(
            (c.status, c.reason.as_str()),
            (p4fleet_crds::ConditionStatus::Unknown, "ProgramChanging")
        );
        assert_eq!(
            NotReady::NotFound("fw".into()).condition().message,
            "spec.programRef: P4Program fw not found"
        );
    }

    /// The program's P4Info edited in place (a held change, or one its
    /// controller has not seen yet): the content in force comes from its
    /// revision's snapshot, byte for byte; without a revision it waits.
    #[tokio::test]
    async fn edited_sources_load_the_content_in_force_from_its_revision() {
        use crate::fleet::revisions;
        let before: Resolved = [(field::P4INFO, Ok(FIREWALL.as_bytes().to_vec()))]
            .into_iter()
            .collect();
        let digest = before.digest();
        let mut p = program(true, Some(digest.clone()));
        p.metadata.uid = Some("u-1".into());
        p.spec.artifacts.fpga = serde_json::from_value(serde_json::json!({
            "bitstream": {"inline": "b"}, "resources": {"luts": 7}}))
        .unwrap();
        let mut recorded = before.clone();
        recorded.insert(field::FPGA_BITSTREAM, Ok(b"b".to_vec()));
        let digest = recorded.digest();
        let name = revisions::revision_name("fw", &digest);
        let snap = revisions::snapshot(&name, &p.spec, &recorded).unwrap();
        let mut cr = revisions::revision_object(&p, &name, 4, &snap.manifest);
        cr.metadata.namespace = Some("ns".into());
        let parts: Vec<_> = snap
            .parts
            .iter()
            .map(|(n, d)| {
                let mut cm = revisions::part_object(&p, n, d);
                cm.metadata.namespace = Some("ns".into());
                cm
            })
            .collect();
        // Now edited: another P4Info, other FPGA resources; the status
        // still names the recorded digest.
        p.spec.p4info.inline = Some(FIREWALL.replace("firewall", "firewall_v2"));
        p.spec.artifacts.fpga.as_mut().unwrap().resources = [("luts".into(), 9)].into();
        p.status.as_mut().unwrap().digest = Some(digest.clone());
        let cluster = Cluster {
            programs: vec![p.clone()],
            config_maps: parts,
            revisions: vec![cr],
            ..Default::default()
        };
        let got = ready_program(&cluster, "ns", "fw", "v")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.digest, digest);
        assert_eq!(got.resolved, recorded);
        assert_eq!(
            got.p4info.tables[0].preamble.as_ref().unwrap().name,
            "MyIngress.firewall"
        );
        assert_eq!(got.fpga_resources["luts"], 7, "as recorded");

        let unrecorded = Cluster {
            programs: vec![p],
            ..Default::default()
        };
        let e = ready_program(&unrecorded, "ns", "fw", "v")
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(e, NotReady::Changing("fw".into()));
    }

    #[tokio::test]
    async fn the_cache_answers_for_the_same_generation_and_digest_only() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let resolved: Resolved = [(field::P4INFO, Ok(FIREWALL.as_bytes().to_vec()))]
            .into_iter()
            .collect();
        let digest = resolved.digest();
        // The P4Info in a ConfigMap, so that a second resolve would notice
        // it gone.
        let mut p = program(true, Some(digest.clone()));
        p.spec.p4info = serde_json::from_value(
            serde_json::json!({"configMapKeyRef": {"name": "src", "key": "p4info.txt"}}),
        )
        .unwrap();
        p.metadata.generation = Some(1);
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "src", "namespace": "ns"},
            "data": {"p4info.txt": FIREWALL}
        }))
        .unwrap();
        let full = Cluster {
            programs: vec![p.clone()],
            config_maps: vec![cm],
            ..Default::default()
        };
        let without_cm = Cluster {
            programs: vec![p.clone()],
            ..Default::default()
        };
        let cache = ProgramCache::default();
        let get = |c, cache| async move {
            ready_program_cached(c, cache, "ns", "fw", "v")
                .await
                .unwrap()
        };
        assert_eq!(get(&full, &cache).await.unwrap().digest, digest);
        // A hit reads nothing: the ConfigMap may be gone meanwhile.
        assert_eq!(get(&without_cm, &cache).await.unwrap().digest, digest);
        let empty = ProgramCache::default();
        assert!(get(&without_cm, &empty).await.is_err());
        // A new generation (spec edited) is a miss, and a failure forgets.
        p.metadata.generation = Some(2);
        let edited = Cluster {
            programs: vec![p.clone()],
            ..Default::default()
        };
        assert!(get(&edited, &cache).await.is_err());
        p.metadata.generation = Some(1);
        let back = Cluster {
            programs: vec![p],
            ..Default::default()
        };
        assert!(
            get(&back, &cache).await.is_err(),
            "the failure replaced the entry"
        );
    }
}
