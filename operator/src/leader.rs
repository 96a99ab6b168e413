//! Leader election with a coordination.k8s.io Lease: only the holder runs
//! the controllers (and so writes to devices).
//!
//! Optimistic concurrency does the locking: every change is a replace with
//! the resourceVersion that was read, so two replicas cannot both win.
//! Timing follows client-go: a candidate counts a lease's expiry from when
//! *it* last saw the record change (its own clock, never the holder's
//! `renewTime`), and the holder gives up when it has not renewed within
//! `renew_deadline`, which is shorter than `lease_duration`, so the old
//! leader has stopped before anyone may take over.
//!
//! Every acquisition by a new process counts a transition, and the count is
//! the [`Term`] of this leadership: the operator derives its device election
//! ids from it (docs/failover.md), so every new leader outranks every
//! previous one on the devices.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

/// Name of the Lease in the operator's namespace.
pub const LEASE_NAME: &str = "p4fleet-leader";

#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub namespace: String,
    pub identity: String,
    /// How long a lease is valid without renewal (written into the Lease).
    pub lease_duration: Duration,
    /// The holder stops leading when it has not renewed for this long;
    /// below `lease_duration` so it stops before a candidate may take over.
    pub renew_deadline: Duration,
    /// How often the holder renews (and a candidate retries).
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry.
    pub fn new(namespace: String, identity: String) -> Self {
        LeaderConfig {
            namespace,
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// The timings must leave a margin: retry < renew deadline < lease.
    pub fn check(&self) -> Result<(), LeaderError> {
        if self.retry_period < self.renew_deadline
            && self.renew_deadline < self.lease_duration
            && self.lease_duration >= Duration::from_secs(1)
        {
            Ok(())
        } else {
            Err(LeaderError::Timing {
                lease: self.lease_duration,
                renew: self.renew_deadline,
                retry: self.retry_period,
            })
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lease {LEASE_NAME}: {0}")]
    Kube(#[from] kube::Error),
    #[error("lost the lease {LEASE_NAME} to {0:?}")]
    Lost(String),
    #[error("could not renew the lease {LEASE_NAME} within the renew deadline {0:?}")]
    Deadline(Duration),
    #[error(
        "leader election timings need retry period ({retry:?}) < renew deadline ({renew:?}) < lease duration ({lease:?})"
    )]
    Timing {
        lease: Duration,
        renew: Duration,
        retry: Duration,
    },
}

/// One leadership: the Lease's transition count when this process acquired
/// it. Strictly greater than the term of every earlier leader of this Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Term(pub u64);

/// What to do with the current Lease (pure; unit-tested).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No lease exists: create it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free or expired (or held under our name by an earlier process of
    /// ours): take it over, counting a transition.
    TakeOver,
    /// Someone else holds a valid lease.
    Wait { holder: String },
}

/// `unchanged_for` is how long this process has seen the lease record
/// unchanged (zero when it just changed or was never seen before);
/// `holding` whether this process already leads (renewal) or is a candidate.
pub fn decide(
    lease: Option<&Lease>,
    identity: &str,
    holding: bool,
    unchanged_for: Duration,
) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.unwrap_or_default();
    if holder == identity {
        // A restarted process under the same name is a new leader: it
        // must get a new term, so it takes over rather than renews.
        return if holding {
            Decision::Renew
        } else {
            Decision::TakeOver
        };
    }
    if holding {
        // Someone else wrote the Lease while we led: our term is over, even
        // if theirs looks expired (taking over again would need a new term,
        // and so a new process).
        return Decision::Wait { holder };
    }
    if holder.is_empty() {
        return Decision::TakeOver;
    }
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(0) as u64);
    if unchanged_for > duration {
        Decision::TakeOver
    } else {
        Decision::Wait { holder }
    }
}

/// The lease spec after `decision` (Create, Renew or TakeOver) at `now`.
pub fn next_spec(
    cfg: &LeaderConfig,
    old: Option<&LeaseSpec>,
    decision: &Decision,
    now: Timestamp,
) -> LeaseSpec {
    let transitions = old.and_then(|s| s.lease_transitions).unwrap_or(0);
    let (acquired, transitions) = match decision {
        Decision::Renew => (
            old.and_then(|s| s.acquire_time.clone())
                .unwrap_or(MicroTime(now)),
            transitions,
        ),
        Decision::TakeOver => (MicroTime(now), transitions.saturating_add(1)),
        Decision::Create | Decision::Wait { .. } => (MicroTime(now), 0),
    };
    LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(cfg.lease_duration.as_secs() as i32),
        acquire_time: Some(acquired),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}

/// The term a lease spec written by us stands for.
fn term_of(spec: &LeaseSpec) -> Term {
    Term(spec.lease_transitions.unwrap_or(0).max(0) as u64)
}

/// The lease record as last seen, and since when (this process's clock).
struct Observed {
    resource_version: Option<String>,
    at: Instant,
}

/// Holds the Lease for this process.
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaderConfig,
    observed: Mutex<Option<Observed>>,
}

impl Elector {
    pub fn new(client: Client, cfg: LeaderConfig) -> Result<Self, LeaderError> {
        cfg.check()?;
        Ok(Elector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: Mutex::new(None),
        })
    }

    /// How long the record `lease` has been seen unchanged; remembers it.
    fn unchanged_for(&self, lease: Option<&Lease>) -> Duration {
        let rv = lease.and_then(|l| l.metadata.resource_version.clone());
        let mut observed = self.observed.lock().unwrap_or_else(|e| e.into_inner());
        match observed.as_ref() {
            Some(o) if o.resource_version == rv => o.at.elapsed(),
            _ => {
                *observed = Some(Observed {
                    resource_version: rv,
                    at: Instant::now(),
                });
                Duration::ZERO
            }
        }
    }

    /// One election step: the term when we hold the lease afterwards.
    async fn step(&self, holding: bool) -> Result<Option<Term>, kube::Error> {
        let current = self.api.get_opt(LEASE_NAME).await?;
        let unchanged_for = self.unchanged_for(current.as_ref());
        let decision = decide(current.as_ref(), &self.cfg.identity, holding, unchanged_for);
        if let Decision::Wait { .. } = decision {
            return Ok(None);
        }
        let spec = next_spec(
            &self.cfg,
            current.as_ref().and_then(|l| l.spec.as_ref()),
            &decision,
            Timestamp::now(),
        );
        let term = term_of(&spec);
        let res = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(LEASE_NAME.into()),
                        ..Default::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                lease.spec = Some(spec);
                self.api
                    .replace(LEASE_NAME, &PostParams::default(), &lease)
                    .await
            }
        };
        match res {
            Ok(written) => {
                // Our own write is a change we have seen now.
                self.unchanged_for(Some(&written));
                Ok(Some(term))
            }
            // Someone else changed it between our read and write: they won
            // this round. (409 Conflict on replace, 409 AlreadyExists on create.)
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the lease; returns its term.
    pub async fn acquire(&self) -> Term {
        loop {
            let step = tokio::time::timeout(self.cfg.renew_deadline, self.step(false)).await;
            match step {
                Ok(Ok(Some(term))) => {
                    tracing::info!(identity = %self.cfg.identity, lease = LEASE_NAME, term = term.0, "acquired leadership");
                    return term;
                }
                Ok(Ok(None)) => tracing::debug!("lease held by another replica"),
                Ok(Err(e)) => tracing::warn!(error = %e, "leader election"),
                Err(_) => tracing::warn!("leader election: the API server did not answer in time"),
            }
            tokio::time::sleep(self.cfg.retry_period).await;
        }
    }

    /// Renews the lease every retry period; returns (why leadership ended)
    /// as soon as a renewal fails for another holder, or when no renewal
    /// succeeded within the renew deadline (each attempt is cut off there).
    pub async fn hold(&self) -> LeaderError {
        // Counted from when the last successful renewal was *sent*: the
        // record others see is at least that fresh.
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.cfg.retry_period).await;
            let sent = Instant::now();
            let Some(left) = self.cfg.renew_deadline.checked_sub(renewed.elapsed()) else {
                return LeaderError::Deadline(self.cfg.renew_deadline);
            };
            match tokio::time::timeout(left, self.step(true)).await {
                Ok(Ok(Some(_))) => renewed = sent,
                Ok(Ok(None)) => {
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
                Ok(Err(e)) => tracing::warn!(error = %e, "renewing the lease"),
                Err(_) => return LeaderError::Deadline(self.cfg.renew_deadline),
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

    fn lease(holder: Option<&str>, secs: i32, transitions: i32) -> Lease {
        Lease {
            metadata: Default::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(Into::into),
                renew_time: Some(MicroTime(Timestamp::now())),
                lease_duration_seconds: Some(secs),
                lease_transitions: Some(transitions),
                ..Default::default()
            }),
        }
    }

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn decisions() {
        assert_eq!(decide(None, "a", false, S(0)), Decision::Create);
        let held_by_a = lease(Some("a"), 15, 3);
        assert_eq!(decide(Some(&held_by_a), "a", true, S(0)), Decision::Renew);
        // A new process under the same name starts a new term.
        assert_eq!(
            decide(Some(&held_by_a), "a", false, S(0)),
            Decision::TakeOver
        );
        let held_by_b = lease(Some("b"), 15, 3);
        assert_eq!(
            decide(Some(&held_by_b), "a", false, S(14)),
            Decision::Wait { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&held_by_b), "a", false, S(16)),
            Decision::TakeOver
        );
        assert_eq!(
            decide(Some(&lease(None, 15, 3)), "a", false, S(0)),
            Decision::TakeOver
        );
        // A leader whose Lease was written by another never takes it back
        // under its old term.
        assert_eq!(
            decide(Some(&held_by_b), "a", true, S(60)),
            Decision::Wait { holder: "b".into() }
        );
        assert_eq!(
            decide(Some(&lease(None, 15, 3)), "a", true, S(0)),
            Decision::Wait {
                holder: String::new()
            }
        );
    }

    #[test]
    fn expiry_is_counted_on_the_candidates_clock_not_the_renew_time() {
        // renewTime says "renewed long ago" (a skewed holder clock), but the
        // candidate has only just seen the record: it waits.
        let mut l = lease(Some("b"), 15, 1);
        l.spec.as_mut().unwrap().renew_time = Some(MicroTime(
            Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(3600),
        ));
        assert!(matches!(
            decide(Some(&l), "a", false, S(1)),
            Decision::Wait { .. }
        ));
    }

    #[test]
    fn every_acquisition_gets_a_higher_term() {
        let cfg = LeaderConfig::new("ns".into(), "a".into());
        let now = Timestamp::now();
        let created = next_spec(&cfg, None, &Decision::Create, now);
        assert_eq!(term_of(&created), Term(0));
        let renewed = next_spec(&cfg, Some(&created), &Decision::Renew, now);
        assert_eq!(term_of(&renewed), Term(0));
        assert_eq!(renewed.acquire_time, created.acquire_time);
        let taken = next_spec(&cfg, Some(&renewed), &Decision::TakeOver, now);
        assert_eq!(term_of(&taken), Term(1));
        let again = next_spec(&cfg, Some(&taken), &Decision::TakeOver, now);
        assert!(term_of(&again) > term_of(&taken));
        assert_eq!(again.holder_identity.as_deref(), Some("a"));
    }

    #[test]
    fn timings_need_a_margin() {
        let mut cfg = LeaderConfig::new("ns".into(), "a".into());
        assert!(cfg.check().is_ok());
        cfg.renew_deadline = cfg.lease_duration;
        assert!(matches!(cfg.check(), Err(LeaderError::Timing { .. })));
        cfg.renew_deadline = S(10);
        cfg.retry_period = S(10);
        assert!(cfg.check().is_err());
    }
}
