//! Apply stage: the sync of one target, in two steps so that status can
//! say "Syncing" in between ([`plan_target`], [`write_target`]). Read the
//! table back, infer ownership where the device keeps no tags, plan the
//! difference ([`p4fleet_model::sync::plan`]); write it in two phases (deletes, then
//! modifies and inserts) and tally what the device accepted into an
//! [`Outcome`]. Targets are independent of each other: each sync needs
//! only the shared [`Context`] (device pool, metrics, sync memory), so
//! several may run at once.

use std::collections::{HashMap, HashSet};

use kube::ResourceExt;
use p4fleet_client::{Device, WriteOptions};
use p4fleet_crds::TableEntrySet;
use p4fleet_crds::entry_set::EntryError as StatusEntryError;
use p4fleet_model::entries::{Entry, EntryKey, format_key};
use p4fleet_model::sync::{self, DeviceEntry, Origin, Phase, SyncTally, WriteStats};

use super::MAX_ERRORS;
use super::dereference::Target;
use super::desired::Desired;
use super::memory::{Auto, SyncMemory};
use crate::context::Context;
use crate::convert;

/// A device that could not be used (nothing, or not everything, was attempted).
#[derive(Debug, thiserror::Error)]
#[error("Switch {switch}: {error}")]
pub struct DeviceError {
    pub switch: String,
    #[source]
    pub error: p4fleet_client::Error,
}

/// What the sync of one target achieved.
#[derive(Debug)]
pub struct Outcome {
    pub virtual_switch: String,
    pub switch: String,
    pub tally: SyncTally,
    /// Entries the device refused and conflicts with other sets (at most
    /// [`MAX_ERRORS`]; none when the device failed as a whole).
    pub errors: Vec<StatusEntryError>,
    pub device_error: Option<DeviceError>,
    /// Updates that repaired drift: the desired entries were those of the
    /// previous complete sync, so every change was to the device's side.
    pub drift: u64,
}

/// One target's sync: which set, where, what it desires.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    pub set: &'a TableEntrySet,
    /// The set's `namespace/name`.
    pub set_key: &'a str,
    pub target: &'a Target,
    pub desired: &'a Desired,
    /// False while a required entry source is missing: the entries it held
    /// are unknown, not undesired, so nothing is deleted.
    pub deletes: bool,
}

/// A target read back and planned, not yet written.
pub struct Planned<'a> {
    job: Job<'a>,
    out: Outcome,
    dev: std::sync::Arc<Device>,
    desired: Vec<&'a Entry>,
    on_device: Vec<DeviceEntry>,
    plan: sync::Plan,
    key: super::memory::TargetKey,
}

impl Planned<'_> {
    /// Updates the plan will write.
    pub fn writes(&self) -> usize {
        self.plan.writes()
    }
}

/// Reads one target back and plans its sync. A device that cannot be
/// read is the outcome (`Err`), never an error.
pub async fn plan_target<'a>(ctx: &Context, job: Job<'a>) -> Result<Planned<'a>, Outcome> {
    let Job {
        set,
        set_key,
        target: t,
        desired: d,
        deletes,
    } = job;
    let mut out = Outcome {
        virtual_switch: t.virtual_switch.clone(),
        switch: t.switch.name_any(),
        tally: SyncTally::unsynced(d.len()),
        errors: Vec::new(),
        device_error: None,
        drift: 0,
    };
    let (tag, key) = (tag(set), t.key(set_key));
    let (dev, mut on_device) = match connect_and_read(ctx, t).await {
        Ok(r) => r,
        Err(error) => {
            out.device_error = Some(DeviceError {
                switch: out.switch.clone(),
                error,
            });
            return Err(out);
        }
    };
    // Borrowed from the shared parse: 8 bytes per entry, not a copy.
    let desired = d.refs();
    if !dev.stores_entry_metadata() {
        let before = ctx.sync_memory.owned_keys(&key);
        infer_ownership(&mut on_device, tag, &before, desired.iter().copied());
        let now = d.iter().map(|e| e.key.clone()).collect();
        ctx.sync_memory.remember_owned(&key, now);
    }
    let ownership = convert::ownership(set.spec.ownership);
    let mut plan = sync::plan(&desired, &on_device, ownership, tag);
    if !deletes {
        plan.deletes.clear();
    }
    for &(i, _) in &plan.conflicts {
        let reason = "owned by another TableEntrySet with a different action";
        push_capped(&mut out.errors, d.error(i, reason.into()));
    }
    Ok(Planned {
        job,
        out,
        dev,
        desired,
        on_device,
        plan,
        key,
    })
}

/// Writes a planned target and tallies what the device accepted.
pub async fn write_target(ctx: &Context, planned: Planned<'_>) -> Outcome {
    let Planned {
        job,
        mut out,
        dev,
        desired,
        on_device,
        plan,
        key,
    } = planned;
    let (set, t, d) = (job.set, job.target, job.desired);
    let tag = tag(set);
    // The ops borrow the desired and read-back entries, and exist one
    // chunk at a time: nothing per entry is cloned or built for the whole
    // sync before the client encodes the requests.
    let metadata = sync::tag_metadata(tag);
    let w = &set.spec.write;
    let tuning = Tuning {
        memory: &ctx.sync_memory,
        switch: &out.switch,
        auto: Auto {
            batch: w.batch_size.is_auto(),
            in_flight: w.max_in_flight.is_auto(),
        },
        base: convert::write_options(w),
    };
    let ops = |c| sync::chunk_ops(&plan, c, &desired, &on_device, &metadata);
    let w = write(&dev, t.slot, &plan, ops, &tuning).await;
    if w.device_error.is_none() {
        for (o, code, msg) in &w.failed {
            let reason = format!("{:?}: {msg}", tonic::Code::from_i32(*code));
            let e = match *o {
                Origin::Insert(i) | Origin::Modify(i) => d.error(i, reason),
                Origin::Delete(j) => StatusEntryError {
                    source: "device".into(),
                    key: Some(format_key(&t.schema, &on_device[j].entry.key)),
                    reason,
                },
            };
            push_capped(&mut out.errors, e);
        }
    }
    out.device_error = w.device_error;
    let failed: Vec<Origin> = w.failed.iter().map(|(o, _, _)| *o).collect();
    out.tally = SyncTally::of(&plan, &failed, w.stats);
    let complete = out.device_error.is_none() && out.tally.applied == out.tally.desired;
    if ctx.sync_memory.record_sync(&key, d.digest, complete) {
        out.drift = out.tally.changes();
    }
    out
}

/// Updates per write call of a sync: enough requests for the pipeline
/// to stay full (a chunk's last requests finish before the next chunk's
/// first is sent), few enough that the ops, request indexes and encoded
/// bulk columns of a million-entry sync are never all held at once.
pub fn chunk_size(opts: WriteOptions) -> usize {
    const MIN: usize = 65_536;
    (opts.batch_size.max(1) * opts.max_in_flight.max(1) * 4).max(MIN)
}

/// What writing the chunks of a plan did.
struct Written {
    stats: WriteStats,
    /// The updates refused or not sent: origin, gRPC code, message.
    failed: Vec<(Origin, i32, String)>,
    device_error: Option<DeviceError>,
}

/// The write settings of a sync: fixed, or tuned per Switch (`Auto`).
struct Tuning<'a> {
    memory: &'a SyncMemory,
    switch: &'a str,
    auto: Auto,
    /// The set's settings, `Auto` ones at their start values.
    base: WriteOptions,
}

impl Tuning<'_> {
    fn start(&self) -> (usize, usize) {
        (self.base.batch_size, self.base.max_in_flight)
    }

    /// The options of the next chunk.
    fn options(&self) -> WriteOptions {
        if !self.auto.any() {
            return self.base;
        }
        let (batch_size, max_in_flight) = self.memory.tuned(self.switch, self.auto, self.start());
        WriteOptions {
            batch_size,
            max_in_flight,
            ..self.base
        }
    }

    fn observe(&self, updates: usize, elapsed: std::time::Duration) {
        if self.auto.any() {
            let start = self.start();
            self.memory
                .observe_write(self.switch, self.auto, start, updates, elapsed);
        }
    }
}

/// Writes the plan chunk by chunk (deletes first, see
/// [`sync::write_chunks`]), each with the settings [`Tuning`] gives then.
/// A device error fails the chunk and the rest of its phase unsent; the
/// modifies and inserts are still tried after failed deletes (each phase
/// whole even if the other failed).
async fn write<'a>(
    dev: &Device,
    slot: u32,
    plan: &sync::Plan,
    ops: impl Fn((sync::Part, std::ops::Range<usize>)) -> Phase<'a>,
    tuning: &Tuning<'_>,
) -> Written {
    let mut w = Written {
        stats: WriteStats::default(),
        failed: Vec::new(),
        device_error: None,
    };
    let mut failed_deletes = false;
    let mut failed_upserts = false;
    let mut chunks = sync::Chunker::default();
    // Metrics are per Write RPC, recorded by the device pool's observer.
    loop {
        let opts = tuning.options();
        let Some(chunk) = chunks.next(plan, chunk_size(opts)) else {
            break;
        };
        let deletes = chunk.0 == sync::Part::Deletes;
        let phase = ops(chunk);
        let failed = if deletes {
            &mut failed_deletes
        } else {
            &mut failed_upserts
        };
        if *failed {
            let unavailable = tonic::Code::Unavailable as i32;
            let why = "not sent: an earlier write of this sync failed";
            for &o in &phase.origins {
                w.failed.push((o, unavailable, why.into()));
            }
            continue;
        }
        match dev.write_ops(slot, &phase.ops, opts).await {
            Ok(rep) => {
                tuning.observe(phase.ops.len(), rep.elapsed);
                for f in &rep.failures {
                    w.failed
                        .push((phase.origins[f.index], f.code, f.message.clone()));
                }
                w.stats.add(WriteStats {
                    requests: rep.requests as u64,
                    elapsed: rep.elapsed,
                    request_latency: rep.total_request_latency,
                });
            }
            Err(error) => {
                let unavailable = tonic::Code::Unavailable as i32;
                for &o in &phase.origins {
                    w.failed.push((o, unavailable, error.to_string()));
                }
                *failed = true;
                let switch = tuning.switch.to_string();
                w.device_error = Some(DeviceError { switch, error });
            }
        }
    }
    w
}

/// The set's ownership tag (see [`p4fleet_model::sync`]).
pub fn tag(set: &TableEntrySet) -> u64 {
    sync::set_tag(
        set.namespace().as_deref().unwrap_or_default(),
        &set.name_any(),
    )
}

fn push_capped(errors: &mut Vec<StatusEntryError>, e: StatusEntryError) {
    if errors.len() < MAX_ERRORS {
        errors.push(e);
    }
}

/// The target's device (connected through the pool) and its table, read back.
pub async fn connect_and_read(
    ctx: &Context,
    t: &Target,
) -> Result<(std::sync::Arc<Device>, Vec<DeviceEntry>), p4fleet_client::Error> {
    let dev = ctx.devices.connect(&t.switch)?;
    let on_device = read_back(&dev, t).await?;
    Ok((dev, on_device))
}

/// Reads a table back and converts it, with ownership tags. Entries the
/// schema cannot read are logged and left out (a sync neither counts nor
/// touches them).
async fn read_back(dev: &Device, t: &Target) -> Result<Vec<DeviceEntry>, p4fleet_client::Error> {
    let raw = dev.read_table(t.slot, t.schema.id).await?;
    let mut out = Vec::with_capacity(raw.len());
    for te in &raw {
        match Entry::from_proto(&t.schema, te) {
            Ok(entry) => out.push(DeviceEntry {
                entry,
                tag: sync::tag_of(&te.metadata),
            }),
            Err(e) => {
                tracing::warn!(table = %t.schema.name, error = %e, "unreadable entry on device")
            }
        }
    }
    Ok(out)
}

/// For devices that keep no entry metadata (BFRT): gives `tag` to the
/// untagged device entries this set owns, for the sync and for cleanup
/// alike. An entry is the set's when its key was desired at the set's
/// previous sync in this process (`owned_before`), or when it *equals* a
/// desired entry: same key and same action.
///
/// Why key and action, not the key alone (which cleanup used to take):
/// in a sync the two give the same plan (a desired key is never deleted,
/// and an untagged entry at a desired key is modified whether or not it is
/// tagged ours), so the predicate only matters at cleanup, where every
/// entry tagged ours is deleted. There, an entry at a desired key holding
/// another action is no evidence this set wrote it (it would hold the
/// set's action): taking it deleted another writer's entry on BFRT that
/// the same set leaves alone on P4Runtime, where tags are real.
pub fn infer_ownership<'a>(
    on_device: &mut [DeviceEntry],
    tag: u64,
    owned_before: &HashSet<EntryKey>,
    desired: impl IntoIterator<Item = &'a Entry>,
) {
    let desired: HashMap<&EntryKey, &Entry> = desired.into_iter().map(|e| (&e.key, e)).collect();
    sync::infer_tags(
        on_device,
        tag,
        |k| owned_before.contains(k),
        |de| {
            desired
                .get(&de.entry.key)
                .is_some_and(|e| e.action == de.entry.action)
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::entry_set::desired::tests::firewall;
    use p4fleet_model::entries::LineParser;

    fn entries(lines: &str) -> Vec<Entry> {
        let schema = firewall();
        let mut p = LineParser::new(&schema);
        format!("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n{lines}")
            .lines()
            .filter_map(|l| p.parse_line(l).unwrap())
            .collect()
    }

    #[test]
    fn ownership_is_inferred_from_equal_entries_and_earlier_keys_only() {
        let desired = entries("#! action allow\n10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.3 1\n");
        let device = entries(
            "#! action allow\n10.0.0.1 10.0.0.2 1\n#! action drop\n10.0.0.1 10.0.0.3\n10.0.0.9 10.0.0.9\n10.0.0.8 10.0.0.8\n",
        );
        let mut on_device: Vec<DeviceEntry> = device
            .into_iter()
            .map(|entry| DeviceEntry { entry, tag: 0 })
            .collect();
        // Tagged by another set: never re-tagged.
        on_device[3].tag = 9;
        let before = HashSet::from([
            on_device[2].entry.key.clone(),
            on_device[3].entry.key.clone(),
        ]);
        infer_ownership(&mut on_device, 7, &before, &desired);
        let tags: Vec<u64> = on_device.iter().map(|d| d.tag).collect();
        // Equal to a desired entry; desired key with another action (not
        // ours); written at an earlier sync; another set's.
        assert_eq!(tags, [7, 0, 7, 9]);
        // So a deleted set removes what it wrote, not the other action.
        assert_eq!(sync::plan_removal(&on_device, 7), [0, 2]);
    }
}
