//! Pure sync logic: what to write so a table holds a set's entries, how to
//! split it, what it achieved ([`SyncTally`]) and how to report the rate.
//! No I/O.
//!
//! # Ownership
//!
//! Every entry a TableEntrySet writes carries the set's *tag* in the
//! P4Runtime `metadata` bytes of the table entry ([`set_tag`]: a 64-bit
//! hash of `namespace/name`, encoded by [`tag_metadata`]). The device stores it and returns it on Read, so
//! ownership survives operator restarts and leader changes without any
//! extra state in the cluster:
//!
//! - `Merge` deletes an entry that is on the device and not desired only
//!   if it carries this set's tag (it wrote it earlier). Untagged entries
//!   and entries of other sets are left alone. A desired key that holds a
//!   *different* action under another set's tag is a conflict (reported,
//!   not overwritten), so two Merge sets do not flip-flop an entry.
//! - `Exclusive` deletes every entry of the table that is not desired and
//!   overwrites any entry whose action differs.
//! - An entry already on the device with the desired action counts as
//!   applied whatever its tag: nothing is rewritten just to re-tag it,
//!   which also keeps devices that drop `metadata` from being
//!   rewritten on every resync.
//! - On deletion (finalizer) a set removes the entries tagged with its tag.
//! - Devices that keep no entry metadata (BFRT) get the tags inferred
//!   ([`infer_tags`]): an entry is the set's if the set desired its key at
//!   its previous sync in this process, or it equals a desired entry. After
//!   an operator restart such a set therefore owns only what it desires
//!   now; an entry dropped from the spec while the operator was down stays
//!   (Merge never guesses; Exclusive removes it anyway).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::BuildHasher;

use sha2::{Digest, Sha256};

use crate::entries::{Entry, EntryKey, WriteOp};

mod tally;
pub use tally::{SyncTally, WriteStats};

/// The seed of the fixed-seed hashes ([`desired_digest`], [`duplicates_in`]).
const SEED: u64 = 0x7034_666c_6565_7431;

/// The hasher of the key maps: foldhash, seeded per process.
type KeyMap<'a> = HashMap<&'a EntryKey, usize, foldhash::fast::RandomState>;

fn key_map<'a>(capacity: usize) -> KeyMap<'a> {
    HashMap::with_capacity_and_hasher(capacity, Default::default())
}

/// How a set shares its table with other writers (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Ownership {
    /// Only the set's own entries are changed or removed.
    #[default]
    Merge,
    /// The set owns the table: entries it does not desire are removed.
    Exclusive,
}

/// The ownership tag of a set (never 0, which means "untagged").
pub fn set_tag(namespace: &str, name: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(namespace.as_bytes());
    h.update(b"/");
    h.update(name.as_bytes());
    let d = h.finalize();
    let v = u64::from_be_bytes(d[..8].try_into().expect("8 bytes"));
    v.max(1)
}

/// The tag of the entries a set *learned* from digests (`spec.learn`):
/// derived from the set's own tag and never equal to it, so the set's
/// plan (which deletes what carries its tag and is not desired) does not
/// take them for its own; the set's cleanup removes both.
pub fn learned_tag(tag: u64) -> u64 {
    let t = tag.rotate_left(29) ^ 0x6c65_6172_6e65_6421;
    if t == 0 || t == tag {
        t.wrapping_add(1).max(1)
    } else {
        t
    }
}

/// Prefix of p4fleet's entry metadata: `p4f1` + the tag, big-endian.
const TAG_PREFIX: &[u8; 4] = b"p4f1";

/// The `metadata` bytes that mark an entry as written by the set `tag`.
pub fn tag_metadata(tag: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(12);
    m.extend_from_slice(TAG_PREFIX);
    m.extend_from_slice(&tag.to_be_bytes());
    m
}

/// The tag in an entry's `metadata`; 0 when it is not p4fleet's.
pub fn tag_of(metadata: &[u8]) -> u64 {
    match metadata.strip_prefix(TAG_PREFIX) {
        Some(rest) if rest.len() == 8 => u64::from_be_bytes(rest.try_into().expect("8 bytes")),
        _ => 0,
    }
}

/// An entry read back from a device, with its ownership tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceEntry {
    pub entry: Entry,
    pub tag: u64,
}

/// What one sync has to do. Indices point into the `desired` and `device`
/// slices given to [`plan`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Desired entries missing on the device.
    pub inserts: Vec<usize>,
    /// Desired entries present with another action or idle timeout.
    pub modifies: Vec<usize>,
    /// Device entries to remove.
    pub deletes: Vec<usize>,
    /// Desired entries held by another set with another action (Merge):
    /// `(desired index, other tag)`.
    pub conflicts: Vec<(usize, u64)>,
    /// Desired entries already right.
    pub unchanged: usize,
}

impl Plan {
    /// Updates to write (inserts + modifies + deletes).
    pub fn writes(&self) -> usize {
        self.inserts.len() + self.modifies.len() + self.deletes.len()
    }
}

/// Diffs desired entries (unique keys) against the device's entries of
/// the same table. See the module docs for ownership. `desired` may hold
/// the entries or references to them (no copy of a large set needed).
pub fn plan<E: Borrow<Entry>>(
    desired: &[E],
    device: &[DeviceEntry],
    ownership: Ownership,
    tag: u64,
) -> Plan {
    let mut on_device = key_map(device.len());
    for (i, d) in device.iter().enumerate() {
        on_device.insert(&d.entry.key, i);
    }
    let mut p = Plan::default();
    // Mostly inserts (a first sync) or mostly unchanged: reserving for
    // the inserts spares the doubling copies of a million-entry plan.
    p.inserts
        .reserve(desired.len().saturating_sub(device.len()));
    let mut wanted = vec![false; device.len()];
    for (i, e) in desired.iter().enumerate() {
        let e = e.borrow();
        match on_device.get(&e.key) {
            None => p.inserts.push(i),
            Some(&j) => {
                wanted[j] = true;
                let d = &device[j];
                // The idle timeout is state like the action: a change is
                // a MODIFY (which also restarts the device's idle clock).
                if d.entry.action == e.action && d.entry.idle_timeout_ns == e.idle_timeout_ns {
                    p.unchanged += 1;
                } else if ownership == Ownership::Merge && d.tag != 0 && d.tag != tag {
                    p.conflicts.push((i, d.tag));
                } else {
                    p.modifies.push(i);
                }
            }
        }
    }
    for (j, d) in device.iter().enumerate() {
        if wanted[j] {
            continue;
        }
        if ownership == Ownership::Exclusive || d.tag == tag {
            p.deletes.push(j);
        }
    }
    p
}

/// For devices that keep no entry metadata (BFRT): gives `tag` to the
/// untagged entries this set owns by other evidence, i.e. keys it wrote
/// before (`owned_before`) or entries equal to what it desires now
/// (`matches_desired`), so [`plan`] and [`plan_removal`] work unchanged.
pub fn infer_tags(
    device: &mut [DeviceEntry],
    tag: u64,
    owned_before: impl Fn(&EntryKey) -> bool,
    matches_desired: impl Fn(&DeviceEntry) -> bool,
) {
    for d in device.iter_mut() {
        if d.tag == 0 && (owned_before(&d.entry.key) || matches_desired(d)) {
            d.tag = tag;
        }
    }
}

/// Device entries a deleted set removes: those carrying its tag.
pub fn plan_removal(device: &[DeviceEntry], tag: u64) -> Vec<usize> {
    device
        .iter()
        .enumerate()
        .filter(|(_, d)| d.tag == tag)
        .map(|(j, _)| j)
        .collect()
}

/// Where an update of a write phase came from, for error reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    Insert(usize),
    Modify(usize),
    Delete(usize),
}

/// The ops of one write phase, borrowing the entries, and where each came
/// from (`origins[i]` is the origin of `ops[i]`).
#[derive(Debug, Clone, Default)]
pub struct Phase<'a> {
    pub ops: Vec<WriteOp<'a>>,
    pub origins: Vec<Origin>,
}

/// The writes of a plan, in two phases: deletes first (so an Exclusive set
/// frees table space before inserting), then modifies and inserts carrying
/// `metadata` (the set's [`tag_metadata`]). Each key appears once, so the
/// ops of one phase may be sent in any order and in parallel. Nothing is
/// cloned: the ops borrow `desired`, `device` and `metadata`.
pub fn write_ops<'a, E: Borrow<Entry>>(
    plan: &Plan,
    desired: &'a [E],
    device: &'a [DeviceEntry],
    metadata: &'a [u8],
) -> (Phase<'a>, Phase<'a>) {
    let deletes = Phase {
        ops: delete_ops(device, &plan.deletes),
        origins: plan.deletes.iter().map(|&j| Origin::Delete(j)).collect(),
    };
    let n = plan.modifies.len() + plan.inserts.len();
    let mut rest = Phase {
        ops: Vec::with_capacity(n),
        origins: Vec::with_capacity(n),
    };
    for &i in &plan.modifies {
        rest.ops
            .push(WriteOp::modify(desired[i].borrow()).with_metadata(metadata));
        rest.origins.push(Origin::Modify(i));
    }
    for &i in &plan.inserts {
        rest.ops
            .push(WriteOp::insert(desired[i].borrow()).with_metadata(metadata));
        rest.origins.push(Origin::Insert(i));
    }
    (deletes, rest)
}

/// Which updates of a plan one write call sends: deletes, modifies or
/// inserts (each key once, so any order and any split is safe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    Deletes,
    Modifies,
    Inserts,
}

/// A plan's writes as `(part, range of that part's indexes)` of at most
/// `max` updates each, deletes first (see [`write_ops`]). Sent one after
/// the other, the ops of a large sync exist a chunk at a time instead of
/// all at once, and a chunk never mixes update types (which the bulk
/// write needs).
pub fn write_chunks(plan: &Plan, max: usize) -> Vec<(Part, std::ops::Range<usize>)> {
    let mut c = Chunker::default();
    std::iter::from_fn(|| c.next(plan, max)).collect()
}

/// [`write_chunks`] one at a time, each of its own size (a tuned batch
/// size changes the chunk size between chunks).
#[derive(Debug, Clone, Default)]
pub struct Chunker {
    part: usize,
    start: usize,
}

impl Chunker {
    /// The next chunk of at most `max` (at least 1) updates, if any is left.
    pub fn next(&mut self, plan: &Plan, max: usize) -> Option<(Part, std::ops::Range<usize>)> {
        const PARTS: [Part; 3] = [Part::Deletes, Part::Modifies, Part::Inserts];
        while let Some(&part) = PARTS.get(self.part) {
            let n = match part {
                Part::Deletes => plan.deletes.len(),
                Part::Modifies => plan.modifies.len(),
                Part::Inserts => plan.inserts.len(),
            };
            if self.start < n {
                let end = (self.start + max.max(1)).min(n);
                let range = self.start..end;
                self.start = end;
                return Some((part, range));
            }
            self.part += 1;
            self.start = 0;
        }
        None
    }
}

/// The ops of one chunk ([`write_chunks`]) of a plan, like [`write_ops`]:
/// borrowed, inserts and modifies carrying `metadata`.
pub fn chunk_ops<'a, E: Borrow<Entry>>(
    plan: &Plan,
    (part, range): (Part, std::ops::Range<usize>),
    desired: &'a [E],
    device: &'a [DeviceEntry],
    metadata: &'a [u8],
) -> Phase<'a> {
    let (indexes, origin): (&[usize], fn(usize) -> Origin) = match part {
        Part::Deletes => (&plan.deletes, Origin::Delete),
        Part::Modifies => (&plan.modifies, Origin::Modify),
        Part::Inserts => (&plan.inserts, Origin::Insert),
    };
    let indexes = &indexes[range];
    let ops = match part {
        Part::Deletes => delete_ops(device, indexes),
        Part::Modifies => indexes
            .iter()
            .map(|&i| WriteOp::modify(desired[i].borrow()).with_metadata(metadata))
            .collect(),
        Part::Inserts => indexes
            .iter()
            .map(|&i| WriteOp::insert(desired[i].borrow()).with_metadata(metadata))
            .collect(),
    };
    Phase {
        ops,
        origins: indexes.iter().map(|&i| origin(i)).collect(),
    }
}

/// Delete ops for device entries (finalizer): keys only.
pub fn delete_ops<'a>(device: &'a [DeviceEntry], which: &[usize]) -> Vec<WriteOp<'a>> {
    which
        .iter()
        .map(|&j| WriteOp::delete(&device[j].entry.key))
        .collect()
}

/// Later occurrences of a key already seen: `(first index, duplicate index)`.
pub fn duplicates<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Vec<(usize, usize)> {
    let entries: Vec<&Entry> = entries.into_iter().collect();
    duplicates_in(entries.len(), |i| entries[i])
}

/// [`duplicates`] of the `n` entries `at(0)`, …, `at(n - 1)`, in order of
/// the duplicate. Each key's 32-bit hash beside its index, sorted: 8
/// bytes per entry, where a map of the keys took about 35 at a million;
/// equal keys end up next to each other (with the rare other key of the
/// same hash, told apart by comparing).
pub fn duplicates_in<'a>(n: usize, at: impl Fn(usize) -> &'a Entry) -> Vec<(usize, usize)> {
    let state = foldhash::fast::FixedState::with_seed(SEED);
    let mut h: Vec<u64> = (0..n)
        .map(|i| (state.hash_one(&at(i).key) >> 32) << 32 | i as u64)
        .collect();
    h.sort_unstable();
    let index = |x: u64| (x & 0xffff_ffff) as usize;
    let mut out = Vec::new();
    let mut firsts: Vec<usize> = Vec::new();
    for run in h.chunk_by(|a, b| a >> 32 == b >> 32) {
        if run.len() == 1 {
            continue;
        }
        // In index order within the run: the first of each key comes first.
        firsts.clear();
        for &x in run {
            let i = index(x);
            match firsts.iter().find(|&&f| at(f).key == at(i).key) {
                Some(&f) => out.push((f, i)),
                None => firsts.push(i),
            }
        }
    }
    out.sort_unstable_by_key(|&(_, dup)| dup);
    out
}

/// Entries per second, rounded: `950/s`, `52.8k/s`, `1.25M/s`.
pub fn format_rate(per_second: f64) -> String {
    let r = per_second.max(0.0);
    if r < 1000.0 {
        format!("{}/s", r.round() as u64)
    } else if r < 1_000_000.0 {
        let k = r / 1000.0;
        if k < 100.0 {
            format!("{:.1}k/s", k)
        } else {
            format!("{}k/s", k.round() as u64)
        }
    } else {
        format!("{:.2}M/s", r / 1_000_000.0)
    }
}

/// A digest of a desired entry list (order-sensitive), to tell a resync of
/// the same desired state (repairs count as drift) from a spec change.
pub fn desired_digest<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> [u8; 32] {
    // A fixed-seed foldhash per entry into SHA-256: stable within a
    // process, which is all the in-memory comparison needs.
    let state = foldhash::fast::FixedState::with_seed(SEED);
    let mut h = Sha256::new();
    for e in entries {
        h.update(state.hash_one(e).to_le_bytes());
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entries::parse_text;
    use p4fleet_proto::p4runtime::{entity, update};

    use crate::fixtures::firewall;

    const HDR: &str = "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n";

    fn fw(lines: &str) -> Vec<Entry> {
        parse_text(&firewall(), &format!("{HDR}{lines}")).unwrap()
    }

    fn dev(entries: Vec<Entry>, tag: u64) -> Vec<DeviceEntry> {
        entries
            .into_iter()
            .map(|entry| DeviceEntry { entry, tag })
            .collect()
    }

    #[test]
    fn tag_is_stable_and_nonzero() {
        assert_eq!(set_tag("ns", "a"), set_tag("ns", "a"));
        assert_ne!(set_tag("ns", "a"), set_tag("ns", "b"));
        assert_ne!(set_tag("ns", "a"), 0);
        assert_eq!(tag_of(&tag_metadata(42)), 42);
        assert_eq!(tag_of(b"other"), 0);
        for t in [1, 42, u64::MAX, set_tag("ns", "learner")] {
            assert!(![0, t].contains(&learned_tag(t)), "{t}");
        }
    }

    #[test]
    fn a_different_idle_timeout_is_a_modify_an_equal_one_nothing() {
        let me = set_tag("ns", "a");
        let mut desired = fw("10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.3 2\n");
        desired[0].idle_timeout_ns = 30_000_000_000;
        desired[1].idle_timeout_ns = 30_000_000_000;
        let mut device = dev(desired.clone(), me);
        device[1].entry.idle_timeout_ns = 0;
        let p = plan(&desired, &device, Ownership::Merge, me);
        assert_eq!((p.unchanged, p.modifies.clone()), (1, vec![1]));
    }

    #[test]
    fn rates() {
        assert_eq!(format_rate(950.4), "950/s");
        assert_eq!(format_rate(52_832.0), "52.8k/s");
        assert_eq!(format_rate(152_832.0), "153k/s");
        assert_eq!(format_rate(1_250_000.0), "1.25M/s");
        assert_eq!(format_rate(-1.0), "0/s");
    }

    #[test]
    fn merge_inserts_modifies_and_deletes_only_its_own() {
        let me = set_tag("ns", "a");
        let other = set_tag("ns", "b");
        let desired = fw(
            "10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.3 2\n10.0.0.1 10.0.0.4 3\n10.0.0.1 10.0.0.9 4\n",
        );
        let mut device = dev(fw("10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.3 7\n"), me);
        // Ours, no longer desired: deleted.
        device.extend(dev(fw("10.0.0.5 10.0.0.5 1\n"), me));
        // Foreign and untagged, not desired: kept.
        device.extend(dev(fw("10.0.0.6 10.0.0.6 1\n"), other));
        device.extend(dev(fw("10.0.0.7 10.0.0.7 1\n"), 0));
        // Another set's entry with another action: conflict.
        device.extend(dev(fw("10.0.0.1 10.0.0.4 9\n"), other));
        // Untagged with the same action: applied as is.
        device.extend(dev(fw("10.0.0.1 10.0.0.9 4\n"), 0));
        let p = plan(&desired, &device, Ownership::Merge, me);
        assert_eq!(p.inserts, Vec::<usize>::new());
        assert_eq!(p.modifies, vec![1]);
        assert_eq!(p.deletes, vec![2]);
        assert_eq!(p.conflicts, vec![(2, other)]);
        assert_eq!(p.unchanged, 2);
        assert_eq!(p.writes(), 2);
        // Every desired entry is in exactly one part of the plan.
        let t = SyncTally::of(&p, &[], WriteStats::default());
        assert_eq!(t.desired, desired.len() as u64);
    }

    #[test]
    fn exclusive_removes_everything_else_and_overwrites() {
        let me = set_tag("ns", "a");
        let desired = fw("10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.4 3\n10.0.0.8 10.0.0.8 1\n");
        let mut device = dev(fw("10.0.0.1 10.0.0.2 1\n"), me);
        device.extend(dev(fw("10.0.0.6 10.0.0.6 1\n"), 5));
        device.extend(dev(fw("10.0.0.7 10.0.0.7 1\n"), 0));
        device.extend(dev(fw("10.0.0.1 10.0.0.4 9\n"), 5));
        let p = plan(&desired, &device, Ownership::Exclusive, me);
        assert_eq!(p.inserts, vec![2]);
        assert_eq!(p.modifies, vec![1]);
        assert_eq!(p.deletes, vec![1, 2]);
        assert!(p.conflicts.is_empty());
        let md = tag_metadata(me);
        let (dels, rest) = write_ops(&p, &desired, &device, &md);
        assert_eq!(dels.ops.len(), 2);
        assert_eq!(dels.origins, vec![Origin::Delete(1), Origin::Delete(2)]);
        assert_eq!(rest.origins, vec![Origin::Modify(1), Origin::Insert(2)]);
        let ups = rest.ops;
        let Some(entity::Entity::TableEntry(t)) = ups[1].to_update().entity.and_then(|e| e.entity)
        else {
            panic!("table entry expected")
        };
        assert_eq!(tag_of(&t.metadata), me);
        assert_eq!(ups[1].ty(), update::Type::Insert);
    }

    #[test]
    fn ops_borrow_the_entries_in_plan_order() {
        let me = set_tag("ns", "a");
        let desired = fw("10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.4 3\n10.0.0.8 10.0.0.8 1\n");
        let mut device = dev(fw("10.0.0.1 10.0.0.2 1\n"), me);
        device.extend(dev(fw("10.0.0.6 10.0.0.6 1\n"), 5));
        device.extend(dev(fw("10.0.0.1 10.0.0.4 9\n"), 5));
        let p = plan(&desired, &device, Ownership::Exclusive, me);
        let md = tag_metadata(me);
        let (dels, rest) = write_ops(&p, &desired, &device, &md);
        assert_eq!(dels.origins, vec![Origin::Delete(1)]);
        let d = dels.ops[0];
        assert_eq!(d.ty(), update::Type::Delete);
        assert!(std::ptr::eq(d.key(), &device[1].entry.key));
        assert!(d.action().is_none() && d.metadata().is_empty());
        assert_eq!(rest.origins, vec![Origin::Modify(1), Origin::Insert(2)]);
        let types: Vec<_> = rest.ops.iter().map(|o| o.ty()).collect();
        assert_eq!(types, [update::Type::Modify, update::Type::Insert]);
        for (op, i) in rest.ops.iter().zip([1, 2]) {
            assert!(std::ptr::eq(op.key(), &desired[i].key));
            assert!(std::ptr::eq(op.action().unwrap(), &desired[i].action));
            assert_eq!(tag_of(op.metadata()), me);
        }
        assert_eq!(delete_ops(&device, &[2, 0]).len(), 2);
        assert!(std::ptr::eq(
            delete_ops(&device, &[2])[0].key(),
            &device[2].entry.key
        ));
    }

    #[test]
    fn chunks_cover_the_plan_once_in_phase_order_without_mixing_types() {
        let me = set_tag("ns", "a");
        let desired = fw(
            "10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.4 3\n10.0.0.8 10.0.0.8 1\n10.0.0.9 10.0.0.9 1\n10.0.0.10 10.0.0.9 1\n",
        );
        let mut device = dev(fw("10.0.0.1 10.0.0.2 1\n"), me);
        device.extend(dev(fw("10.0.0.6 10.0.0.6 1\n10.0.0.7 10.0.0.7 1\n"), 5));
        device.extend(dev(fw("10.0.0.1 10.0.0.4 9\n"), 5));
        let p = plan(&desired, &device, Ownership::Exclusive, me);
        assert_eq!(
            (p.deletes.len(), p.modifies.len(), p.inserts.len()),
            (2, 1, 3)
        );
        let chunks = write_chunks(&p, 2);
        assert_eq!(
            chunks,
            [
                (Part::Deletes, 0..2),
                (Part::Modifies, 0..1),
                (Part::Inserts, 0..2),
                (Part::Inserts, 2..3),
            ]
        );
        let md = tag_metadata(me);
        let (dels, rest) = write_ops(&p, &desired, &device, &md);
        let mut origins = Vec::new();
        let mut ops = Vec::new();
        for c in chunks {
            let ph = chunk_ops(&p, c, &desired, &device, &md);
            assert_eq!(ph.ops.len(), ph.origins.len());
            let ty = ph.ops[0].ty();
            assert!(ph.ops.iter().all(|o| o.ty() == ty), "one type per chunk");
            origins.extend(ph.origins);
            ops.extend(ph.ops);
        }
        let whole: Vec<Origin> = dels.origins.iter().chain(&rest.origins).copied().collect();
        assert_eq!(origins, whole);
        let whole_ops: Vec<WriteOp> = dels.ops.into_iter().chain(rest.ops).collect();
        assert_eq!(ops, whole_ops);
        assert!(write_chunks(&Plan::default(), 10).is_empty());
        assert_eq!(
            write_chunks(&p, 0).len(),
            6,
            "at least one update per chunk"
        );
    }

    #[test]
    fn idle_resync_plans_nothing() {
        let me = set_tag("ns", "a");
        let desired = fw("10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.3 2\n");
        let device = dev(desired.clone(), me);
        for o in [Ownership::Merge, Ownership::Exclusive] {
            let p = plan(&desired, &device, o, me);
            assert_eq!(p.writes(), 0);
            assert_eq!(p.unchanged, 2);
        }
    }

    #[test]
    fn removal_takes_only_tagged_entries() {
        let me = set_tag("ns", "a");
        let mut device = dev(fw("10.0.0.1 10.0.0.2 1\n"), me);
        device.extend(dev(fw("10.0.0.6 10.0.0.6 1\n"), 0));
        assert_eq!(plan_removal(&device, me), vec![0]);
        assert_eq!(delete_ops(&device, &[0]).len(), 1);
    }

    #[test]
    fn finds_duplicates() {
        let mut es = fw("10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.3 2\n");
        es.extend(fw("10.0.0.1 10.0.0.2 5\n"));
        assert_eq!(duplicates(&es), vec![(0, 2)]);
        assert_ne!(desired_digest(&es[..2]), desired_digest(&es));
    }

    #[test]
    fn every_later_copy_names_the_first_in_order_of_the_copies() {
        // A B A C B A, then 300 distinct keys and a fourth A (one text
        // each: a text with a duplicate does not parse).
        let mut es = Vec::new();
        for line in ["1 1 1", "2 2 1", "1 1 2", "3 3 1", "2 2 3", "1 1 4"] {
            let mut f = line.split(' ');
            let (a, b, port) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
            es.extend(fw(&format!("10.0.0.{a} 10.0.0.{b} {port}\n")));
        }
        let more: String = (0..300)
            .map(|i| format!("10.1.{}.{} 10.0.0.9 1\n", i / 250, i % 250))
            .collect();
        es.extend(fw(&more));
        es.extend(fw("10.0.0.1 10.0.0.1 1\n"));
        let want = vec![(0, 2), (1, 4), (0, 5), (0, 306)];
        assert_eq!(duplicates(&es), want);
        assert_eq!(duplicates_in(es.len(), |i| &es[i]), want);
        assert_eq!(duplicates_in(0, |i| &es[i]), vec![]);
    }

    #[test]
    fn inferred_tags_let_merge_delete_what_it_wrote_before() {
        let me = set_tag("ns", "a");
        let before = fw("10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.3 2\n");
        let desired = fw("10.0.0.1 10.0.0.2 1\n");
        let mut device = dev(before.clone(), 0);
        device.extend(dev(fw("10.0.0.7 10.0.0.7 1\n"), 0));
        let prev: std::collections::HashSet<EntryKey> =
            before.iter().map(|e| e.key.clone()).collect();
        infer_tags(&mut device, me, |k| prev.contains(k), |_| false);
        assert_eq!(
            device.iter().map(|d| d.tag).collect::<Vec<_>>(),
            vec![me, me, 0]
        );
        let p = plan(&desired, &device, Ownership::Merge, me);
        assert_eq!((p.deletes.clone(), p.unchanged), (vec![1], 1));
    }
}
