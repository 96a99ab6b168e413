//! The apply stage: talk to the target's extern runtime
//! (`p4fleet.externs.v1.ExternRuntime`, docs/dpdk.md) on the Switch's
//! endpoint. [`apply`] checks the externs exist (ListExterns), sets the
//! policy only when the effective one differs (SetPolicy), reads it back
//! (GetPolicy) and takes the stats (GetStats); [`restore_defaults`] is the
//! finalizer's: every extern back to Sync.

use std::time::Duration;

use p4fleet_client::Service;
use p4fleet_proto::externs::{self as pb, extern_runtime_client::ExternRuntimeClient};
use tonic::transport::Channel;

use super::desired::{Measured, in_force, missing};
use crate::devices::DevicePool;

/// Where the extern runtime of a VirtualSwitch is: its Switch's target
/// with the VirtualSwitch's device id.
pub type RuntimeTarget = p4fleet_client::Target;

/// The longest [`apply`] or [`restore_defaults`] waits for the target (a
/// stalled target must not hold the reconcile).
const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// What applying found; each becomes status.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// The target has no extern of these names (the spec is wrong for
    /// this program); nothing was set.
    MissingExterns {
        missing: Vec<String>,
        available: Vec<String>,
    },
    /// The target refused the policy (its PolicyError's message).
    Refused(String),
    /// The target could not be asked (unreachable, no pipeline, no extern
    /// runtime).
    Unavailable { code: tonic::Code, message: String },
    /// The policy as the target reports it after applying, and whether it
    /// is the wanted one.
    Reported {
        effective: Vec<pb::ExternPolicy>,
        in_force: bool,
        measured: Option<Measured>,
    },
    /// The endpoint answered, but not as an extern runtime (what it is
    /// instead: another gRPC service, an HTTP server, ...).
    WrongEndpoint(p4fleet_client::WrongEndpoint),
    /// Not asked: the last attempt with the same inputs failed like this
    /// and its backoff is not due ([`crate::retries`]).
    Held(crate::retries::Refusal),
}

impl Applied {
    /// The `Applied` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Applied::MissingExterns { .. } => "ExternNotFound",
            Applied::Refused(_) => "PolicyRefused",
            Applied::Unavailable { .. } => "ExternRuntimeUnavailable",
            Applied::Reported { in_force: true, .. } => "InForce",
            Applied::Reported { .. } => "NotInForce",
            Applied::WrongEndpoint(w) => w.reason(),
            Applied::Held(r) => r.reason,
        }
    }

    /// What failed, as the `Applied` condition shows it; None when the
    /// device reports the policy in force.
    pub fn failure(&self) -> Option<crate::retries::Refusal> {
        let c = super::applied_condition(self);
        (!c.is_true()).then(|| crate::retries::Refusal {
            reason: self.reason(),
            message: c.message,
        })
    }
}

/// The Switch's kept side channel (`DevicePool::side_channel_to`: its
/// keepalive and TLS settings, one connection however often a policy's
/// stats are read).
fn channel(
    devices: &DevicePool,
    switch: &str,
    t: &RuntimeTarget,
) -> Result<Channel, tonic::Status> {
    devices
        .side_channel_to(switch, t)
        .map_err(|e| tonic::Status::unavailable(e.to_string()))
}

fn unavailable(s: tonic::Status) -> Applied {
    Applied::Unavailable {
        code: s.code(),
        message: s.message().to_string(),
    }
}

fn target(t: &RuntimeTarget) -> Option<pb::Target> {
    Some(pb::Target {
        device_id: t.device_id,
        pipeline: String::new(),
    })
}

/// Applies `wanted` on `t` (of Switch `switch`) and reads back what is in
/// force.
pub async fn apply(
    devices: &DevicePool,
    switch: &str,
    t: &RuntimeTarget,
    wanted: &[pb::ExternPolicy],
) -> Applied {
    let ch = match channel(devices, switch, t) {
        Ok(ch) => ch,
        Err(s) => return unavailable(s),
    };
    let c = ExternRuntimeClient::new(ch.clone());
    let applied = tokio::time::timeout(CALL_DEADLINE, apply_now(c, t, wanted))
        .await
        .unwrap_or_else(|_| Applied::Unavailable {
            code: tonic::Code::DeadlineExceeded,
            message: format!("no answer within {} s", CALL_DEADLINE.as_secs()),
        });
    // An endpoint that is not an extern runtime says what it is instead.
    let Applied::Unavailable { code, message } = &applied else {
        return applied;
    };
    let status = tonic::Status::new(*code, message.clone());
    match p4fleet_client::identify(&ch, &t.endpoint, Service::ExternRuntime, &status).await {
        Some(found) => Applied::WrongEndpoint(p4fleet_client::WrongEndpoint {
            endpoint: t.endpoint.clone(),
            expected: Service::ExternRuntime,
            found,
        }),
        None => applied,
    }
}

async fn apply_now(
    mut c: ExternRuntimeClient<Channel>,
    t: &RuntimeTarget,
    wanted: &[pb::ExternPolicy],
) -> Applied {
    let list = match c
        .list_externs(pb::ListExternsRequest { target: target(t) })
        .await
    {
        Ok(r) => r.into_inner(),
        Err(s) => return unavailable(s),
    };
    let absent = missing(wanted, &list.externs);
    if !absent.is_empty() {
        return Applied::MissingExterns {
            missing: absent,
            available: list.externs.into_iter().map(|x| x.name).collect(),
        };
    }
    let current = match c
        .get_policy(pb::GetPolicyRequest { target: target(t) })
        .await
    {
        Ok(r) => r.into_inner().externs,
        Err(s) => return unavailable(s),
    };
    // Set only when it differs: a poll of a steady policy changes nothing
    // on the device.
    if !in_force(wanted, &current) {
        let set = c
            .set_policy(pb::SetPolicyRequest {
                target: target(t),
                externs: wanted.to_vec(),
            })
            .await;
        if let Err(s) = set {
            return match s.code() {
                tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
                    if !s.message().is_empty() =>
                {
                    Applied::Refused(s.message().to_string())
                }
                _ => unavailable(s),
            };
        }
    }
    // Read back: status reports the device's word, not the request.
    let effective = match c
        .get_policy(pb::GetPolicyRequest { target: target(t) })
        .await
    {
        Ok(r) => r.into_inner().externs,
        Err(s) => return unavailable(s),
    };
    let measured = c
        .get_stats(pb::GetStatsRequest { target: target(t) })
        .await
        .ok()
        .map(|r| Measured::from_stats(&r.into_inner()));
    Applied::Reported {
        in_force: in_force(wanted, &effective),
        effective,
        measured,
    }
}

/// Every extern of `t` back to its default (Sync): SetPolicy with none
/// listed. A target without a pipeline or extern runtime has nothing to
/// restore.
pub async fn restore_defaults(
    devices: &DevicePool,
    switch: &str,
    t: &RuntimeTarget,
) -> Result<(), tonic::Status> {
    let mut c = ExternRuntimeClient::new(channel(devices, switch, t)?);
    let call = c.set_policy(pb::SetPolicyRequest {
        target: target(t),
        externs: Vec::new(),
    });
    let answer = tokio::time::timeout(CALL_DEADLINE, call)
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("no answer from the extern runtime"))?;
    match answer {
        Ok(_) => Ok(()),
        Err(s)
            if matches!(
                s.code(),
                tonic::Code::FailedPrecondition
                    | tonic::Code::Unimplemented
                    | tonic::Code::NotFound
            ) =>
        {
            Ok(())
        }
        Err(s) => Err(s),
    }
}
