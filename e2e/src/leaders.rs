//! Operator replicas with leader election (e2e/tests/failover.rs,
//! rollout_leader.rs): short timings, the Lease in the test's namespace,
//! and which replica leads first decided by a Lease written beforehand.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};

use crate::processes::{Proc, log_file};
use crate::{ControlPlane, wait_for};

/// The operator's Lease (`p4fleet::LEASE_NAME`).
pub const LEASE: &str = "p4fleet-leader";

/// An operator replica `name` (its identity) watching namespace `ns`, its
/// Lease there: valid 4 s, renewed every second, given up after 3 s
/// without renewal. Logs to `target/e2e-logs/<log>-<name>-…`.
pub fn replica(bin: &Path, cp: &ControlPlane, ns: &str, log: &str, name: &str) -> Proc {
    let (log, file) = log_file(&format!("{log}-{name}"));
    let mut cmd = Command::new(bin.join("p4fleet"));
    cmd.args([
        "operator",
        "--listen-addr=127.0.0.1:0",
        "--log-level=info,p4fleet=debug",
        "--resync-seconds=30",
        "--leader-election",
        "--lease-duration-seconds=4",
        "--renew-deadline-seconds=3",
        "--retry-period-seconds=1",
        &format!("--watch-namespace={ns}"),
    ])
    .env("KUBECONFIG", cp.kubeconfig_path())
    .env("POD_NAMESPACE", ns)
    .env("POD_NAME", name)
    .stdout(file.try_clone().expect("clone log file"))
    .stderr(file);
    Proc::spawn(cmd, log)
}

/// Writes the Lease naming `holder` (valid 30 s from now) before any
/// replica starts, so that `holder` leads first whatever the start order.
pub async fn promise_lease(leases: &Api<Lease>, holder: &str) {
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": LEASE},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 30,
                 "renewTime": MicroTime(k8s_openapi::jiff::Timestamp::now()),
                 "leaseTransitions": 0}
    }))
    .expect("a Lease");
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create the Lease");
}

/// The Lease's spec, None while it does not exist.
pub async fn lease(leases: &Api<Lease>) -> Option<LeaseSpec> {
    leases.get_opt(LEASE).await.ok().flatten()?.spec
}

/// Waits until `holder` holds the Lease in `term` (its transition count).
pub async fn wait_holder(leases: &Api<Lease>, holder: &str, term: i32, timeout: Duration) {
    wait_for(
        &format!("{holder} holds the lease in term {term}"),
        timeout,
        || async {
            match lease(leases).await {
                Some(s)
                    if s.holder_identity.as_deref() == Some(holder)
                        && s.lease_transitions == Some(term) =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}
