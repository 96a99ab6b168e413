//! `p4fleet.externs.v1.ExternRuntime` over the agent's pipeline: the
//! contract the emulator serves (docs/dpdk.md), answered from the real
//! pipeline's counters.

use std::sync::Arc;

use p4fleet_proto::externs::{self as pb, extern_runtime_server::ExternRuntime};
use prost::Message;
use tonic::{Code, Request, Response, Status};

use crate::device::{Device, Loaded};
use crate::externs;
use crate::policy;

#[derive(Clone)]
pub struct ExternRuntimeService {
    device: Arc<Device>,
}

impl ExternRuntimeService {
    pub fn new(device: Arc<Device>) -> ExternRuntimeService {
        ExternRuntimeService { device }
    }

    /// The answer `f` reads from `target`'s loaded pipeline
    /// (`Device::with_loaded`'s errors otherwise).
    fn answer<T>(
        &self,
        target: Option<&pb::Target>,
        f: impl FnOnce(&Loaded) -> T,
    ) -> Result<Response<T>, Status> {
        self.device
            .with_loaded(target, |l, _| Ok(f(l)))
            .map(Response::new)
    }
}

/// A gRPC status carrying `err` in its `google.rpc.Status` details.
fn status_with(code: Code, err: pb::PolicyError) -> Status {
    let details = p4fleet_proto::rpc::Status {
        code: code as i32,
        message: err.message.clone(),
        details: vec![prost_types::Any {
            type_url: pb::POLICY_ERROR_TYPE_URL.to_string(),
            value: err.encode_to_vec(),
        }],
    };
    Status::with_details(code, err.message.clone(), details.encode_to_vec().into())
}

#[tonic::async_trait]
impl ExternRuntime for ExternRuntimeService {
    async fn list_externs(
        &self,
        request: Request<pb::ListExternsRequest>,
    ) -> Result<Response<pb::ListExternsResponse>, Status> {
        let ex = self.device.config.executors();
        self.answer(request.get_ref().target.as_ref(), |l| {
            pb::ListExternsResponse {
                pipeline: l.p4_name.clone(),
                externs: l
                    .pipeline
                    .externs
                    .iter()
                    .map(|name| pb::ExternInfo {
                        name: name.clone(),
                        p4info_id: 0,
                        kind: externs::slot_of(name)
                            .map(|i| externs::EXTERNS[i].1.as_str())
                            .unwrap_or_default()
                            .to_string(),
                        capabilities: Some(policy::capabilities(name, ex)),
                    })
                    .collect(),
            }
        })
    }

    async fn get_policy(
        &self,
        request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        self.answer(request.get_ref().target.as_ref(), |l| {
            pb::GetPolicyResponse {
                externs: l.policy.clone(),
            }
        })
    }

    async fn set_policy(
        &self,
        request: Request<pb::SetPolicyRequest>,
    ) -> Result<Response<pb::SetPolicyResponse>, Status> {
        let req = request.into_inner();
        let device = self.device.clone();
        let applied = tokio::task::spawn_blocking(move || {
            device.set_policy(req.target.as_ref(), &req.externs)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))??;
        match applied {
            Ok(externs) => Ok(Response::new(pb::SetPolicyResponse { externs })),
            Err((code, err)) => Err(status_with(code, err)),
        }
    }

    async fn get_stats(
        &self,
        request: Request<pb::GetStatsRequest>,
    ) -> Result<Response<pb::GetStatsResponse>, Status> {
        Ok(Response::new(
            self.device.stats(request.get_ref().target.as_ref())?,
        ))
    }
}
