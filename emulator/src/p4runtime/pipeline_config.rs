//! SetForwardingPipelineConfig on one device: VERIFY, VERIFY_AND_SAVE,
//! COMMIT, VERIFY_AND_COMMIT and RECONCILE_AND_COMMIT over the active and
//! the saved pipeline. Pure logic; the caller holds the device's lock.

use p4fleet_proto::p4runtime::{
    self as p4, set_forwarding_pipeline_config_request::Action as SetAction,
};
use tonic::Status;

use super::pipeline::Pipeline;
use super::schema::Schema;

/// The active pipeline (with its table contents) and the saved one.
#[derive(Default)]
pub(crate) struct PipelineState {
    pub pipeline: Option<Pipeline>,
    /// Saved by VERIFY_AND_SAVE, realized by COMMIT.
    pub saved: Option<(Schema, p4::ForwardingPipelineConfig)>,
    /// RECONCILE_AND_COMMIT is answered UNIMPLEMENTED (a target without
    /// it, so that a client's fallback can be tested).
    pub reconcile_disabled: bool,
    /// What the last RECONCILE_AND_COMMIT kept and dropped.
    pub last_reconcile: Option<super::reconcile::Reconciled>,
}

impl PipelineState {
    pub fn set_pipeline(
        &mut self,
        action: SetAction,
        config: Option<p4::ForwardingPipelineConfig>,
    ) -> Result<(), Status> {
        let verify = |config: Option<p4::ForwardingPipelineConfig>| {
            let config = config.ok_or_else(|| Status::invalid_argument("config is required"))?;
            let p4info = config
                .p4info
                .as_ref()
                .ok_or_else(|| Status::invalid_argument("config has no p4info"))?;
            let schema =
                Schema::from_p4info(p4info).map_err(|e| Status::invalid_argument(e.to_string()))?;
            Ok::<_, Status>((schema, config))
        };
        match action {
            SetAction::Unspecified => {
                return Err(Status::invalid_argument("action is UNSPECIFIED"));
            }
            SetAction::Verify => {
                verify(config)?;
            }
            SetAction::VerifyAndSave => {
                self.saved = Some(verify(config)?);
            }
            SetAction::VerifyAndCommit => {
                let (schema, config) = verify(config)?;
                self.pipeline = Some(Pipeline::new(schema, config));
                self.saved = None;
            }
            SetAction::Commit => {
                if config.is_some() {
                    return Err(Status::invalid_argument(
                        "COMMIT takes no config (it realizes the saved one)",
                    ));
                }
                let (schema, config) = self
                    .saved
                    .take()
                    .ok_or_else(|| Status::failed_precondition("no saved config to commit"))?;
                self.pipeline = Some(Pipeline::new(schema, config));
            }
            SetAction::ReconcileAndCommit => {
                if self.reconcile_disabled {
                    return Err(Status::unimplemented(
                        "RECONCILE_AND_COMMIT is not supported by this target",
                    ));
                }
                let (schema, config) = verify(config)?;
                let mut next = Pipeline::new(schema, config);
                let reconciled = match self.pipeline.take() {
                    Some(mut old) => {
                        // Profiles with members or groups are kept or the
                        // whole change refused (entries point at them).
                        if let Err(e) = super::groups::check_reconcile(&old, &next) {
                            self.pipeline = Some(old);
                            return Err(e);
                        }
                        super::groups::carry_over(&mut old, &mut next);
                        super::reconcile::carry_over(old, &mut next)
                    }
                    None => super::reconcile::Reconciled::default(),
                };
                self.last_reconcile = Some(reconciled);
                self.pipeline = Some(next);
                self.saved = None;
            }
        }
        Ok(())
    }
}
