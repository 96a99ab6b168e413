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
use p4fleet_crds::entry_set::EntryError as StatusEntryError;
use p4fleet_model::entries::{Entry, EntryKey, format_key};
use p4fleet_model::sync::{self, DeviceEntry, Origin, Phase, SyncTally, WriteStats};

use super::MAX_ERRORS;
use super::SetCtx;
use super::dereference::Target;
use super::desired::Desired;
use super::memory::{Auto, SyncMemory};
use super::read_check::{self, ReadBack};
use super::set::Set;
use crate::convert;
use crate::ownership::Record;

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
    /// On a device without entry metadata: the keys the set owns there
    /// after this sync, for its ownership record (None: nothing to record,
    /// or the target was not written).
    pub owned: Option<HashSet<EntryKey>>,
    /// When the entries the device refused are worth writing again
    /// ([`super::status::retry_after`]; None: only a change or the
    /// regular resync will).
    pub retry: Option<std::time::Duration>,
    /// The content whose P4Info encoded the entries ([`Target::encoded_for`]).
    pub pipeline_digest: Option<String>,
    /// The read-back held exactly the desired entries' bytes
    /// ([`ReadBack::InSync`]): nothing was decoded or written.
    pub byte_equal: bool,
}

impl Outcome {
    /// Target `t`'s, nothing done yet but `tally`.
    pub fn of(t: &Target, tally: SyncTally) -> Outcome {
        Outcome {
            virtual_switch: t.virtual_switch.clone(),
            switch: t.switch.name_any(),
            tally,
            errors: Vec::new(),
            device_error: None,
            drift: 0,
            owned: None,
            retry: None,
            pipeline_digest: t.encoded_for.clone(),
            byte_equal: false,
        }
    }
}

/// One target's sync: which set, where, what it desires.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    pub set: &'a Set<'a>,
    pub target: &'a Target,
    pub desired: &'a Desired,
    /// False while a required entry source is missing: the entries it held
    /// are unknown, not undesired, so nothing is deleted.
    pub deletes: bool,
    /// The set's ownership record (keys it wrote on devices without entry
    /// metadata).
    pub record: &'a Record,
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
    /// On a device without entry metadata: the keys the set owns there now.
    owned: Option<HashSet<EntryKey>>,
}

impl Planned<'_> {
    /// Updates the plan will write.
    pub fn writes(&self) -> usize {
        self.plan.writes()
    }

    /// The keys the set may own once the plan is written, for the record
    /// written before it: those it owns now and those it inserts or
    /// modifies (None on devices that keep entry metadata).
    pub fn owned_at_most(&self) -> Option<HashSet<EntryKey>> {
        let mut keys = self.owned.clone()?;
        let d = self.job.desired;
        keys.extend(self.plan.inserts.iter().map(|&i| d.entry(i).key.clone()));
        keys.extend(self.plan.modifies.iter().map(|&i| d.entry(i).key.clone()));
        Some(keys)
    }

    /// The target's VirtualSwitch.
    pub fn virtual_switch(&self) -> &str {
        &self.job.target.virtual_switch
    }

    /// The planned updates, for `status.plan` ([`super::plan`]).
    pub fn updates(&self) -> super::plan::Updates<'_> {
        super::plan::Updates {
            virtual_switch: &self.job.target.virtual_switch,
            switch: &self.out.switch,
            schema: &self.job.target.schema,
            plan: &self.plan,
            desired: &self.desired,
            on_device: &self.on_device,
        }
    }

    /// The outcome of not writing the plan (`spec.plan`): the entries
    /// the device already holds are applied, those another set holds
    /// failed; the updates not sent are neither (the plan shows them,
    /// and Synced says nothing was written).
    pub fn unwritten(self) -> Outcome {
        let mut out = self.out;
        out.tally.applied = self.plan.unchanged as u64;
        out.tally.failed = self.plan.conflicts.len() as u64;
        out
    }
}

/// Reads one target back and plans its sync. A device that cannot be
/// read is the outcome (`Err`), never an error.
pub async fn plan_target<'a>(
    devices: &crate::devices::DevicePool,
    job: Job<'a>,
) -> Result<Planned<'a>, Outcome> {
    let Job {
        set,
        target: t,
        desired: d,
        deletes,
        record,
    } = job;
    let mut out = Outcome::of(t, SyncTally::unsynced(d.len()));
    let (tag, key) = (set.tag, t.key(&set.key));
    let (dev, read) = match connect_and_check(devices, t, d, tag).await {
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
    let mut on_device = match read {
        ReadBack::Entries(on_device) => on_device,
        // The plan of a device holding exactly the desired entries, tagged
        // ours (read_check), without decoding them.
        ReadBack::InSync => {
            out.byte_equal = true;
            let plan = sync::Plan {
                unchanged: desired.len(),
                ..Default::default()
            };
            return Ok(Planned {
                job,
                out,
                dev,
                desired,
                on_device: Vec::new(),
                plan,
                key,
                owned: None,
            });
        }
    };
    let owned = (!dev.stores_entry_metadata()).then(|| {
        let before = record.keys(&t.virtual_switch);
        infer_ownership(&mut on_device, tag, &before, desired.iter().copied());
        on_device
            .iter()
            .filter(|e| e.tag == tag)
            .map(|e| e.entry.key.clone())
            .collect()
    });
    // What the set learned from digests is not its desired set's to
    // repair (see `super::digests`), whatever its ownership.
    let learned = sync::learned_tag(tag);
    on_device.retain(|e| e.tag != learned);
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
        owned,
    })
}

/// Writes a planned target and tallies what the device accepted.
pub async fn write_target(ctx: &SetCtx, planned: Planned<'_>) -> Outcome {
    let owned_at_most = planned.owned_at_most();
    let Planned {
        job,
        mut out,
        dev,
        desired,
        on_device,
        plan,
        key,
        owned,
    } = planned;
    let (set, t, d) = (job.set, job.target, job.desired);
    let tag = set.tag;
    // The ops borrow the desired and read-back entries, and exist one
    // chunk at a time: nothing per entry is cloned or built for the whole
    // sync before the client encodes the requests.
    let metadata = sync::tag_metadata(tag);
    let w = &set.spec.write;
    let tuning = Tuning {
        memory: &ctx.own.sync_memory,
        switch: &out.switch,
        auto: Auto {
            batch: w.batch_size.is_auto(),
            in_flight: w.max_in_flight.is_auto(),
        },
        // A plan holds each key once (sync::plan).
        base: WriteOptions {
            distinct_keys: true,
            ..convert::write_options(w)
        },
    };
    let ops = |c| sync::chunk_ops(&plan, c, &desired, &on_device, &metadata);
    let w = write(&dev, t.slot, &plan, ops, &tuning).await;
    if w.device_error.is_none() {
        out.retry = (w.failed.iter())
            .filter_map(|(_, code, _)| super::status::retry_after(*code))
            .min();
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
    if let (Some(at_most), Some(before)) = (owned_at_most, owned) {
        let device_failed = out.device_error.is_some();
        let after = Owned {
            at_most,
            before: &before,
        };
        out.owned = Some(after.confirmed(&plan, &w.failed, device_failed, &desired, &on_device));
    }
    let failed: Vec<Origin> = w.failed.iter().map(|(o, _, _)| *o).collect();
    out.tally = SyncTally::of(&plan, &failed, w.stats);
    let complete = out.device_error.is_none() && out.tally.applied == out.tally.desired;
    if ctx.own.sync_memory.record_sync(&key, d.digest, complete) {
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

/// What the set owns after writing `plan`, from what it may own at most
/// (owned before, plus every insert and modify). A device that failed as a
/// whole may have applied any part of a request: nothing is taken out.
/// Otherwise a refused insert is not the set's, nor is a refused modify of
/// an entry it did not own, and a delete the device confirmed (or found
/// already gone) is no longer there.
struct Owned<'a> {
    at_most: HashSet<EntryKey>,
    before: &'a HashSet<EntryKey>,
}

impl Owned<'_> {
    fn confirmed(
        self,
        plan: &sync::Plan,
        failed: &[(Origin, i32, String)],
        device_failed: bool,
        desired: &[&Entry],
        on_device: &[DeviceEntry],
    ) -> HashSet<EntryKey> {
        let mut keys = self.at_most;
        if device_failed {
            return keys;
        }
        let mut refused_deletes = HashSet::new();
        for (o, code, _) in failed {
            match *o {
                Origin::Insert(i) => {
                    keys.remove(&desired[i].key);
                }
                Origin::Modify(i) => {
                    if !self.before.contains(&desired[i].key) {
                        keys.remove(&desired[i].key);
                    }
                }
                Origin::Delete(j) if *code != tonic::Code::NotFound as i32 => {
                    refused_deletes.insert(j);
                }
                Origin::Delete(_) => {}
            }
        }
        for &j in &plan.deletes {
            if !refused_deletes.contains(&j) {
                keys.remove(&on_device[j].entry.key);
            }
        }
        keys
    }
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

    /// The options of a sync's chunks.
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
/// [`sync::write_chunks`]), all with the settings [`Tuning`] gives at the
/// start, and tells it how long the whole write took. A device error
/// fails the chunk and the rest of its phase unsent; the modifies and
/// inserts are still tried after failed deletes (each phase whole even if
/// the other failed).
///
/// Auto is measured on whole syncs, not chunks: a sync's first chunk goes
/// to an emptier table than its last (on the emulator, a tenth or more
/// faster), and the time between chunks (building each chunk's ops)
/// grows with their number, which the settings choose; a trial measured
/// on some chunks and compared with others would see neither.
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
    let opts = tuning.options();
    let started = std::time::Instant::now();
    let mut written = 0;
    // Metrics are per Write RPC, recorded by the device pool's observer.
    while let Some(chunk) = chunks.next(plan, chunk_size(opts)) {
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
                written += phase.ops.len();
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
    if w.device_error.is_none() {
        tuning.observe(written, started.elapsed());
    }
    w
}

fn push_capped(errors: &mut Vec<StatusEntryError>, e: StatusEntryError) {
    if errors.len() < MAX_ERRORS {
        errors.push(e);
    }
}

/// The target's device (connected through the pool) and its table, read back.
pub async fn connect_and_read(
    ctx: &SetCtx,
    t: &Target,
) -> Result<(std::sync::Arc<Device>, Vec<DeviceEntry>), p4fleet_client::Error> {
    let dev = t.device(&ctx.devices)?;
    let on_device = read_check::read_back(&dev, t).await?;
    Ok((dev, on_device))
}

/// The target's device (connected through the pool) and its table read
/// back against `desired` ([`read_check`]).
async fn connect_and_check(
    devices: &crate::devices::DevicePool,
    t: &Target,
    desired: &Desired,
    tag: u64,
) -> Result<(std::sync::Arc<Device>, ReadBack), p4fleet_client::Error> {
    let dev = t.device(devices)?;
    let read = read_check::read(&dev, t, desired, tag).await?;
    Ok((dev, read))
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

    #[test]
    fn a_record_keeps_what_the_device_did_not_confirm_gone() {
        let desired = entries(
            "#! action allow\n10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.3 1\n10.0.0.1 10.0.0.4 1\n",
        );
        let device = entries(
            "#! action drop\n10.0.0.1 10.0.0.3\n10.0.0.1 10.0.0.4\n10.0.0.7 10.0.0.7\n10.0.0.8 10.0.0.8\n",
        );
        let tag = 7;
        let on_device: Vec<DeviceEntry> = device
            .into_iter()
            .map(|entry| DeviceEntry { entry, tag })
            .collect();
        // Owned before: .3 (ours, to modify), .7 and .8 (ours, to delete);
        // .4 is another writer's, modified into ours.
        let before: HashSet<EntryKey> = [0, 2, 3]
            .iter()
            .map(|&j| on_device[j].entry.key.clone())
            .collect();
        let plan = sync::Plan {
            inserts: vec![0],
            modifies: vec![1, 2],
            deletes: vec![2, 3],
            ..Default::default()
        };
        let at_most: HashSet<EntryKey> = before
            .iter()
            .cloned()
            .chain(desired.iter().map(|e| e.key.clone()))
            .collect();
        let owned = |failed: &[(Origin, i32, String)], device_failed| {
            let o = Owned {
                at_most: at_most.clone(),
                before: &before,
            };
            let desired: Vec<&Entry> = desired.iter().collect();
            o.confirmed(&plan, failed, device_failed, &desired, &on_device)
        };
        let key = |e: &Entry| e.key.clone();
        // All confirmed: the desired keys, the deleted ones gone.
        let all: HashSet<EntryKey> = desired.iter().map(key).collect();
        assert_eq!(owned(&[], false), all);
        // A refused insert is not ours; a refused modify of our entry stays
        // ours, of another writer's is not; a refused delete stays ours, a
        // delete of what was already gone does not.
        let fail = |o: Origin, c: tonic::Code| (o, c as i32, String::new());
        let failed = [
            fail(Origin::Insert(0), tonic::Code::ResourceExhausted),
            fail(Origin::Modify(1), tonic::Code::Internal),
            fail(Origin::Modify(2), tonic::Code::Internal),
            fail(Origin::Delete(2), tonic::Code::Internal),
            fail(Origin::Delete(3), tonic::Code::NotFound),
        ];
        let want: HashSet<EntryKey> = [key(&desired[1]), key(&on_device[2].entry)].into();
        assert_eq!(owned(&failed, false), want);
        // A device that failed as a whole may have applied anything.
        assert_eq!(owned(&failed, true), at_most);
    }
}
