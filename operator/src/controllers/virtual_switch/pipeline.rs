//! The program a VirtualSwitch runs: dereference it ([`ready_program`]:
//! Ready, and its sources still those of its digest), build what the
//! Switch loads ([`device_config`], [`tofino_pipeline`], pure) and apply
//! it ([`load`]: P4Runtime with the target's device config and the digest
//! as cookie, or BFRT with the Tofino artifacts).

use std::time::{Duration, Instant};

use kube::ResourceExt;
use p4fleet_client::TofinoPipeline;
use p4fleet_crds::condition_types::{PIPELINE_LOADED, READY};
use p4fleet_crds::{Condition, Switch, SwitchProtocol, SwitchTarget, find_condition};
use p4fleet_proto::p4info::P4Info;

use crate::artifacts::{self, Resolved, field};
use crate::context::Context;
use crate::metrics::SwitchLabel;
use crate::reads::Reads;

/// A program ready to be loaded.
#[derive(Debug, Clone)]
pub struct ReadyProgram {
    pub name: String,
    pub digest: String,
    pub p4info: P4Info,
    pub resolved: Resolved,
}

/// Why the program cannot be loaded yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    #[error("spec.programRef: P4Program {0} not found")]
    NotFound(String),
    #[error("spec.programRef: P4Program {0} is not Ready")]
    NotReady(String),
    /// Its sources changed after it was last reconciled; it will be again,
    /// and that status change brings the VirtualSwitch back.
    #[error("P4Program {0} sources changed; waiting for its new digest")]
    Changing(String),
}

impl NotReady {
    /// The `PipelineLoaded` condition that says so.
    pub fn condition(&self) -> Condition {
        let message = self.to_string();
        match self {
            NotReady::NotFound(_) => {
                Condition::new(PIPELINE_LOADED, false, "ProgramNotFound", message)
            }
            NotReady::NotReady(_) => {
                Condition::new(PIPELINE_LOADED, false, "ProgramNotReady", message)
            }
            NotReady::Changing(_) => {
                Condition::unknown(PIPELINE_LOADED, "ProgramChanging", message)
            }
        }
    }
}

/// The program `ns/name` when it is Ready and its sources still match its digest.
pub async fn ready_program(
    reads: &impl Reads,
    ns: &str,
    name: &str,
) -> Result<Result<ReadyProgram, NotReady>, kube::Error> {
    let Some(p) = reads.program(ns, name).await? else {
        return Ok(Err(NotReady::NotFound(name.into())));
    };
    let st = p.status.clone().unwrap_or_default();
    let ready = find_condition(&st.conditions, READY).is_some_and(|c| c.is_true());
    let (true, Some(digest)) = (ready, st.digest) else {
        return Ok(Err(NotReady::NotReady(name.into())));
    };
    let resolved = artifacts::resolve(reads, ns, &p.spec).await?;
    Ok(match resolved.p4info() {
        Ok(p4info) if resolved.digest() == digest => Ok(ReadyProgram {
            name: name.into(),
            digest,
            p4info,
            resolved,
        }),
        _ => Err(NotReady::Changing(name.into())),
    })
}

/// The device config the target loads: its artifact for the Switch's kind
/// (bmv2 JSON, DPDK spec, FPGA bitstream), empty when the program has none.
pub fn device_config(target: SwitchTarget, resolved: &Resolved) -> Vec<u8> {
    let key = match target {
        SwitchTarget::Bmv2 => field::BMV2_JSON,
        SwitchTarget::Dpdk => field::DPDK_SPEC,
        SwitchTarget::Fpga => field::FPGA_BITSTREAM,
        SwitchTarget::Tofino => field::TOFINO_BINARY,
    };
    resolved
        .get(key)
        .and_then(|r| r.as_ref().ok())
        .cloned()
        .unwrap_or_default()
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

/// Why loading failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    MissingTofinoArtifacts(#[from] TofinoArtifactError),
    #[error(transparent)]
    Device(#[from] p4fleet_client::Error),
}

impl LoadError {
    /// The `PipelineLoaded` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            LoadError::MissingTofinoArtifacts(_) => "MissingTofinoArtifacts",
            LoadError::Device(_) => "LoadFailed",
        }
    }
}

/// Loads `program` into `slot` of `sw` the way its protocol wants.
/// Returns how long the push took, or None when the device already ran
/// it (nothing was pushed).
pub async fn load(
    ctx: &Context,
    sw: &Switch,
    slot: u32,
    program: &ReadyProgram,
) -> Result<Option<Duration>, LoadError> {
    let started = Instant::now();
    let dev = ctx.devices.connect(sw)?;
    let info = &program.p4info;
    let pushed = match sw.spec.effective_protocol() {
        SwitchProtocol::Bfrt => {
            let pipeline = tofino_pipeline(&program.name, &sw.name_any(), &program.resolved)?;
            dev.set_tofino_pipeline(slot, info, &pipeline).await?
        }
        SwitchProtocol::P4Runtime => {
            let config = device_config(sw.spec.target, &program.resolved);
            let cookie = artifacts::cookie(&program.digest);
            dev.set_pipeline(slot, info, config, cookie).await?
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
    Ok(Some(started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reads::fixture::Cluster;
    use p4fleet_crds::P4Program;

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
    fn the_device_config_is_the_targets_artifact_or_empty() {
        let mut r = Resolved::default();
        r.insert(field::BMV2_JSON, Ok(b"{}".to_vec()));
        r.insert(field::FPGA_BITSTREAM, Ok(vec![1, 2]));
        assert_eq!(device_config(SwitchTarget::Bmv2, &r), b"{}");
        assert_eq!(device_config(SwitchTarget::Fpga, &r), [1, 2]);
        assert!(device_config(SwitchTarget::Dpdk, &r).is_empty());
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
        let ok = ready_program(&with(program(true, Some(digest.clone()))), "ns", "fw")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (ok.name.as_str(), ok.digest.as_str()),
            ("fw", digest.as_str())
        );
        assert_eq!(ok.p4info.tables.len(), 1);

        let not =
            |c: Cluster| async move { ready_program(&c, "ns", "fw").await.unwrap().unwrap_err() };
        assert_eq!(
            not(Cluster::default()).await,
            NotReady::NotFound("fw".into())
        );
        assert_eq!(
            not(with(program(false, Some(digest)))).await,
            NotReady::NotReady("fw".into())
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
}
