//! Leader election with a coordination.k8s.io Lease: only the holder runs
//! the controllers (and so writes to devices).
//!
//! Optimistic concurrency does the locking: every change is a replace with
//! the resourceVersion that was read, so two replicas cannot both win.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// Name of the Lease in the operator's namespace.
pub const LEASE_NAME: &str = "p4fleet-leader";

#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub namespace: String,
    pub identity: String,
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
    /// How often the holder renews (and a candidate retries).
    pub retry_period: Duration,
}

impl LeaderConfig {
    pub fn new(namespace: String, identity: String) -> Self {
        LeaderConfig {
            namespace,
            identity,
            lease_duration: Duration::from_secs(15),
            retry_period: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lease {LEASE_NAME}: {0}")]
    Kube(#[from] kube::Error),
    #[error("lost the lease {LEASE_NAME} to {0}")]
    Lost(String),
}

/// What to do with the current Lease (pure; unit-tested).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No lease exists: create it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free or expired: take it over (counts a transition).
    TakeOver,
    /// Someone else holds a valid lease.
    Wait { holder: String },
}

pub fn decide(lease: Option<&Lease>, identity: &str, now: Timestamp) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.unwrap_or_default();
    if holder == identity {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::TakeOver;
    }
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    let expired = match spec.renew_time.or(spec.acquire_time) {
        Some(MicroTime(t)) => t + duration < now,
        None => true,
    };
    if expired {
        Decision::TakeOver
    } else {
        Decision::Wait { holder }
    }
}

fn spec_for(
    cfg: &LeaderConfig,
    now: Timestamp,
    acquired: Option<MicroTime>,
    transitions: i32,
) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(cfg.lease_duration.as_secs() as i32),
        acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}

/// One election step: Ok(true) when we hold the lease afterwards.
pub async fn try_acquire_or_renew(
    api: &Api<Lease>,
    cfg: &LeaderConfig,
) -> Result<bool, kube::Error> {
    let current = api.get_opt(LEASE_NAME).await?;
    let now = Timestamp::now();
    let res = match decide(current.as_ref(), &cfg.identity, now) {
        Decision::Wait { .. } => return Ok(false),
        Decision::Create => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.into()),
                    ..Default::default()
                },
                spec: Some(spec_for(cfg, now, None, 0)),
            };
            api.create(&PostParams::default(), &lease).await.map(|_| ())
        }
        d @ (Decision::Renew | Decision::TakeOver) => {
            let mut lease = current.expect("decided on an existing lease");
            let old = lease.spec.clone().unwrap_or_default();
            let transitions = old.lease_transitions.unwrap_or(0);
            lease.spec = Some(if d == Decision::Renew {
                spec_for(cfg, now, old.acquire_time, transitions)
            } else {
                spec_for(cfg, now, None, transitions + 1)
            });
            api.replace(LEASE_NAME, &PostParams::default(), &lease)
                .await
                .map(|_| ())
        }
    };
    match res {
        Ok(()) => Ok(true),
        // Someone else changed it between our read and write: they won this round.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Holds the Lease for this process.
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaderConfig,
}

impl Elector {
    pub fn new(client: Client, cfg: LeaderConfig) -> Self {
        Elector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
        }
    }

    /// Waits until this replica holds the lease.
    pub async fn acquire(&self) {
        loop {
            match try_acquire_or_renew(&self.api, &self.cfg).await {
                Ok(true) => {
                    tracing::info!(identity = %self.cfg.identity, lease = LEASE_NAME, "acquired leadership");
                    return;
                }
                Ok(false) => tracing::debug!("lease held by another replica"),
                Err(e) => tracing::warn!(error = %e, "leader election"),
            }
            tokio::time::sleep(self.cfg.retry_period).await;
        }
    }

    /// Renews the lease until it cannot be renewed within the lease
    /// duration; returns why leadership ended.
    pub async fn hold(&self) -> LeaderError {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.cfg.retry_period).await;
            match try_acquire_or_renew(&self.api, &self.cfg).await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => {
                    let holder = self
                        .api
                        .get_opt(LEASE_NAME)
                        .await
                        .ok()
                        .flatten()
                        .and_then(|l| l.spec?.holder_identity)
                        .unwrap_or_default();
                    return LeaderError::Lost(holder);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "renewing the lease");
                    if last_ok.elapsed() > self.cfg.lease_duration {
                        return LeaderError::Kube(e);
                    }
                }
            }
        }
    }

    /// Gives the lease up on clean shutdown so a standby takes over at once.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(LEASE_NAME).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        if let Err(e) = self
            .api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
        {
            tracing::warn!(error = %e, "releasing the lease");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed: Timestamp, secs: i32) -> Lease {
        Lease {
            metadata: Default::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(Into::into),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(secs),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn decisions() {
        let now = Timestamp::now();
        assert_eq!(decide(None, "a", now), Decision::Create);
        assert_eq!(
            decide(Some(&lease(Some("a"), now, 15)), "a", now),
            Decision::Renew
        );
        assert_eq!(
            decide(Some(&lease(Some("b"), now, 15)), "a", now),
            Decision::Wait { holder: "b".into() }
        );
        let old = now - SignedDuration::from_secs(20);
        assert_eq!(
            decide(Some(&lease(Some("b"), old, 15)), "a", now),
            Decision::TakeOver
        );
        assert_eq!(
            decide(Some(&lease(None, now, 15)), "a", now),
            Decision::TakeOver
        );
    }
}
