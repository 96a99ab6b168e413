//! Cleanup stage (`Event::Cleanup` of the finalizer): remove the entries
//! this set owns from every target that still resolves. A target whose
//! VirtualSwitch, program or Switch is gone is skipped. An unreachable
//! device is retried with backoff until [`DELETE_GRACE`] after the
//! deletion request; then the set lets go with a Warning Event (its
//! entries stay on the device), so a dead switch never blocks a namespace
//! deletion for ever.

use std::collections::HashSet;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use p4fleet_crds::TableEntrySet;
use p4fleet_model::entries::EntryKey;
use p4fleet_model::sync;

use super::SetCtx;
use super::apply::{connect_and_read, infer_ownership};
use super::dereference::{Target, dereference};
use super::desired::Desired;
use super::parse;
use super::set::Set;
use crate::controllers::{Error, namespace};
use crate::convert;
use crate::status::EventNote;

/// How long a deleted set keeps trying to remove its entries.
pub const DELETE_GRACE: Duration = Duration::from_secs(120);

/// Why the entries of a deleted set could not be removed from a target.
#[derive(Debug, thiserror::Error)]
pub enum RemovalError {
    #[error(transparent)]
    Device(#[from] p4fleet_client::Error),
    #[error("{count} deletes failed: {first}")]
    Refused { count: usize, first: String },
}

/// A target whose entries stay, and why.
#[derive(Debug, thiserror::Error)]
#[error("{virtual_switch} ({switch}): {error}")]
pub struct RemovalFailure {
    pub virtual_switch: String,
    pub switch: String,
    #[source]
    pub error: RemovalError,
}

/// The targets a cleanup could not clear.
#[derive(Debug)]
pub struct RemovalFailures(pub Vec<RemovalFailure>);

impl std::fmt::Display for RemovalFailures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&all.join("; "))
    }
}

/// Removes the set's entries from every target that resolves; Ok lets the
/// finalizer go.
pub async fn cleanup(ctx: &SetCtx, cr: &TableEntrySet) -> Result<Action, Error> {
    let ns = namespace(cr)?;
    let refs = dereference(&ctx.reads, &ctx.own.entry_sources, &ns, cr).await?;
    let set = Set::of(cr);
    let me = &set.key;
    let desired = parse::per_target(
        &ctx.own.entry_sources,
        &ctx.own.sync_memory.desired,
        me,
        &set,
        &refs.targets,
        &refs.sources,
    )
    .await;
    let record = ctx.own.ownership.get(&ctx.client, cr).await?;
    if let Some(d) = &record.damage {
        // Removes only entries equal to desired ones (the empty record).
        let ev = crate::ownership::damage_event(d, set.spec.ownership);
        ctx.events.publish_to(&set.reference, &ev).await;
    }
    super::digests::cleanup(ctx, &set, &refs.targets).await?;
    super::idle::forget(ctx, &set);
    let mut failures = Vec::new();
    let mut removed = 0;
    for (i, t) in refs.targets.iter().enumerate() {
        let owned = record.record.keys(&t.virtual_switch);
        let removal = match t.profile.is_some() {
            true => super::profiles::remove(ctx, &set, t).await,
            false => remove_entries(ctx, &set, t, desired.of(i), &owned).await,
        };
        match removal {
            Ok(n) => removed += n,
            Err(error) => failures.push(RemovalFailure {
                virtual_switch: t.virtual_switch.clone(),
                switch: t.switch.name_any(),
                error,
            }),
        }
    }
    ctx.own.sync_memory.forget_set(me);
    ctx.own.rechecks.forget(me);
    ctx.retries.forget(&format!("TableEntrySet/{me}"));
    if failures.is_empty() {
        ctx.own.entry_sources.release(me);
        let revisions = super::rollout::revision_key(me);
        ctx.own.entry_sources.release(&revisions);
        ctx.own.rollouts.forget(me);
        ctx.own.ownership.remove(&ctx.client, cr).await?;
        ctx.metrics.forget_entry_set(&ns, &set.name);
        tracing::info!(set = %me, removed, "removed entries of deleted set");
        return Ok(Action::await_change());
    }
    let failures = RemovalFailures(failures);
    if since_deletion(cr) > DELETE_GRACE {
        let note = format!(
            "gave up removing entries after {}s; they stay on: {failures}",
            DELETE_GRACE.as_secs()
        );
        let ev = EventNote::warning("CleanupAbandoned", "Delete", note);
        ctx.events.publish_to(&set.reference, &ev).await;
        ctx.metrics.forget_entry_set(&ns, &set.name);
        return Ok(Action::await_change());
    }
    Err(Error::EntriesNotRemoved(failures))
}

/// Deletes the entries of one target that carry (or are inferred to
/// carry) the set's tag; returns how many. NOT_FOUND is success: the
/// entry is already gone.
async fn remove_entries(
    ctx: &SetCtx,
    set: &Set<'_>,
    t: &Target,
    desired: &Desired,
    owned: &HashSet<EntryKey>,
) -> Result<usize, RemovalError> {
    let tag = set.tag;
    let (dev, mut on_device) = connect_and_read(ctx, t).await?;
    if !dev.stores_entry_metadata() {
        infer_ownership(&mut on_device, tag, owned, desired.iter());
    }
    let which = sync::plan_removal(&on_device, tag);
    let ops = sync::delete_ops(&on_device, &which);
    // Deletes of entries read back: a table holds each key once.
    let opts = p4fleet_client::WriteOptions {
        distinct_keys: true,
        ..convert::write_options(&set.spec.write)
    };
    let rep = dev.write_ops(t.slot, &ops, opts).await?;
    let refused: Vec<_> = rep
        .failures
        .iter()
        .filter(|f| f.code() != tonic::Code::NotFound)
        .collect();
    match refused.first() {
        Some(f) => Err(RemovalError::Refused {
            count: refused.len(),
            first: f.message.clone(),
        }),
        None => {
            super::default_action::reset(set, &dev, t).await?;
            Ok(which.len())
        }
    }
}

/// Time since the deletion request (zero if not being deleted).
fn since_deletion(set: &TableEntrySet) -> Duration {
    let Some(t) = &set.metadata.deletion_timestamp else {
        return Duration::ZERO;
    };
    let secs = chrono::Utc::now().timestamp() - t.0.as_second();
    Duration::from_secs(secs.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::entry_set::desired::tests::set;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    #[test]
    fn the_grace_counts_from_the_deletion_request() {
        let mut s = set(vec![]);
        assert_eq!(since_deletion(&s), Duration::ZERO);
        let requested = Timestamp::now() - SignedDuration::from_secs(200);
        s.metadata.deletion_timestamp = Some(Time(requested));
        let since = since_deletion(&s);
        assert!(
            since > DELETE_GRACE && since < Duration::from_secs(300),
            "{since:?}"
        );
        // A clock behind the API server's is no negative time.
        s.metadata.deletion_timestamp =
            Some(Time(Timestamp::now() + SignedDuration::from_secs(60)));
        assert_eq!(since_deletion(&s), Duration::ZERO);
    }

    #[test]
    fn removal_failures_name_each_target() {
        let f = RemovalFailures(vec![
            RemovalFailure {
                virtual_switch: "a".into(),
                switch: "sw1".into(),
                error: RemovalError::Refused {
                    count: 2,
                    first: "busy".into(),
                },
            },
            RemovalFailure {
                virtual_switch: "b".into(),
                switch: "sw2".into(),
                error: p4fleet_client::Error::Unsupported("TLS").into(),
            },
        ]);
        assert_eq!(
            Error::EntriesNotRemoved(f).to_string(),
            "removing entries: a (sw1): 2 deletes failed: busy; b (sw2): TLS is not supported"
        );
    }
}
