//! Program changes that keep what they can: RECONCILE_AND_COMMIT first
//! (the target keeps the entries of tables the new P4Info defines as
//! before), VERIFY_AND_COMMIT when the target does not take it. A target
//! that answered RECONCILE_AND_COMMIT with UNIMPLEMENTED (and then took
//! the same config with VERIFY_AND_COMMIT) is remembered per device id and
//! not asked again; INVALID_ARGUMENT only says that this change could not
//! be reconciled (the spec lets a target refuse what it cannot keep), so
//! the next change asks again.

use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{
    ForwardingPipelineConfig, SetForwardingPipelineConfigRequest, forwarding_pipeline_config,
    set_forwarding_pipeline_config_request::Action,
};

use super::P4RuntimeDevice;
use crate::Error;

/// How a pipeline push went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushMode {
    /// Nothing ran before: loaded with VERIFY_AND_COMMIT.
    Loaded,
    /// The target kept the state of the tables that did not change.
    Reconciled,
    /// Every table was cleared (VERIFY_AND_COMMIT); `fallback` is what the
    /// target said to RECONCILE_AND_COMMIT, when it was asked in this push
    /// (None when it had refused it before).
    Replaced { fallback: Option<String> },
}

impl P4RuntimeDevice {
    /// Loads a pipeline into `slot` unless the device already reports
    /// `cookie`; None when nothing was pushed. With `reconcile`, keeps
    /// unchanged tables' state where the target can (RECONCILE_AND_COMMIT
    /// first); without, always VERIFY_AND_COMMIT (every table cleared).
    /// `Loaded` or `Replaced` is what the device ran before, not what a
    /// caller last recorded.
    pub async fn push_pipeline(
        &self,
        slot: u32,
        p4info: &P4Info,
        device_config: Vec<u8>,
        cookie: u64,
        reconcile: bool,
    ) -> Result<Option<PushMode>, Error> {
        let device_id = self.target.device_id(slot);
        self.bulk.set_schema(slot, p4info);
        let running = self.pipeline_cookie(slot).await?;
        if running == Some(cookie) {
            return Ok(None);
        }
        let election_id = self.wait_primary(device_id).await?;
        let request = |action: Action| SetForwardingPipelineConfigRequest {
            device_id,
            election_id: Some(election_id),
            action: action as i32,
            config: Some(ForwardingPipelineConfig {
                p4info: Some(p4info.clone()),
                p4_device_config: device_config.clone(),
                cookie: Some(forwarding_pipeline_config::Cookie { cookie }),
            }),
            ..Default::default()
        };
        let set = |action: Action| {
            let mut client = self.client.clone();
            let req = request(action);
            async move { client.set_forwarding_pipeline_config(req).await }
        };
        let known_unsupported = self
            .no_reconcile
            .lock()
            .expect("no_reconcile lock")
            .contains(&device_id);
        let mut fallback = None;
        let mut unsupported = false;
        if reconcile && running.is_some() && !known_unsupported {
            match set(Action::ReconcileAndCommit).await {
                Ok(_) => return Ok(Some(PushMode::Reconciled)),
                Err(s) if refuses_reconcile(s.code()) => {
                    unsupported = never_reconciles(s.code());
                    fallback = Some(format!("{:?}: {}", s.code(), s.message()));
                }
                Err(s) => return Err(self.rpc_error("SetForwardingPipelineConfig", device_id, s)),
            }
        }
        set(Action::VerifyAndCommit)
            .await
            .map_err(|s| self.rpc_error("SetForwardingPipelineConfig", device_id, s))?;
        if unsupported {
            // The config was fine: it was RECONCILE_AND_COMMIT it refused.
            self.no_reconcile
                .lock()
                .expect("no_reconcile lock")
                .insert(device_id);
        }
        Ok(Some(match running {
            None => PushMode::Loaded,
            Some(_) => PushMode::Replaced { fallback },
        }))
    }
}

/// The answers that mean "this target does not reconcile" (P4Runtime
/// leaves RECONCILE_AND_COMMIT optional): worth a VERIFY_AND_COMMIT.
fn refuses_reconcile(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unimplemented | tonic::Code::InvalidArgument
    )
}

/// The answer that means the target never reconciles (not only this
/// change): remembered, so later changes go straight to VERIFY_AND_COMMIT.
fn never_reconciles(code: tonic::Code) -> bool {
    code == tonic::Code::Unimplemented
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unimplemented_and_invalid_argument_fall_back() {
        assert!(refuses_reconcile(tonic::Code::Unimplemented));
        assert!(refuses_reconcile(tonic::Code::InvalidArgument));
        for c in [
            tonic::Code::Unavailable,
            tonic::Code::PermissionDenied,
            tonic::Code::FailedPrecondition,
        ] {
            assert!(!refuses_reconcile(c), "{c:?}");
        }
    }

    #[test]
    fn only_unimplemented_is_remembered() {
        assert!(never_reconciles(tonic::Code::Unimplemented));
        assert!(!never_reconciles(tonic::Code::InvalidArgument));
    }
}
