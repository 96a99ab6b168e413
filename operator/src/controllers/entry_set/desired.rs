//! Validate and build: the set's inline entries and its parsed ConfigMap
//! texts (the line format, parsed once per text by
//! [`crate::entry_sources`]) assembled into the desired entries of a
//! table schema, each with where it came from, and the bad ones reported
//! with their source. Pure.

use std::sync::Arc;

use p4fleet_crds::TableEntrySetSpec;
use p4fleet_crds::entry_set::EntryError as StatusEntryError;
use p4fleet_model::entries::direct_meter::{self, MeterConfig};
use p4fleet_model::entries::{
    Entry, EntryError, ParseOptions, TableSchema, format_key, parse_inline_with, set_idle_timeout,
};
use p4fleet_model::sync;

use super::MAX_ERRORS;
use super::dereference::Sources;
use crate::entry_sources::ParsedText;
use crate::entry_sources::parsed::{self, excerpt_reason};
use crate::entry_sources::runs::Runs;

/// Where a desired entry came from, rendered lazily for status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Inline(usize),
    /// Line `line` of `Sources::texts[text]`.
    Line {
        text: usize,
        line: u32,
    },
}

/// Where a kept entry lives: entry `at` of `Desired::parts[part]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    part: u32,
    at: u32,
}

/// The kept entries' places: a text's entries are kept in order and
/// mostly all of them, so they are runs of consecutive `(part, at)`, each
/// kept as `part << 32 | at` (an `at` never reaches 2^32).
#[derive(Debug, Clone, Default)]
struct Locs(Runs);

impl Locs {
    #[cfg(test)]
    fn push(&mut self, l: Loc) {
        self.0.push(Self::pack(l));
    }

    /// Part `part`'s entries `0..n`, in order.
    fn push_part(&mut self, part: u32, n: usize) {
        self.0.push_range(Self::pack(Loc { part, at: 0 }), n);
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn get(&self, i: usize) -> Loc {
        Self::unpack(self.0.get(i))
    }

    fn iter(&self) -> impl ExactSizeIterator<Item = Loc> + '_ {
        self.0.iter().map(Self::unpack)
    }

    /// Keeps the entries whose `keep` is true.
    fn retain(&mut self, keep: &[bool]) {
        self.0.retain(keep);
    }

    fn pack(l: Loc) -> u64 {
        (u64::from(l.part) << 32) | u64::from(l.at)
    }

    fn unpack(v: u64) -> Loc {
        Loc {
            part: (v >> 32) as u32,
            at: v as u32,
        }
    }
}

/// The desired entries of one table schema, with their sources and the
/// entries that were skipped.
///
/// The entries are not copied: they stay in the parsed texts the
/// entry-source cache shares between sets and resyncs (`Arc`), and this
/// keeps an index into them. A million desired entries are then held once
/// (bytes per entry: docs/performance.md).
#[derive(Debug, Clone)]
pub struct Desired {
    pub schema: TableSchema,
    /// The inline entries that parsed (part 0, its `lines` are indexes into
    /// `spec.entries`), then `parsed[i]` of `Sources::texts[i]` (part i + 1).
    parts: Vec<Arc<ParsedText>>,
    /// The kept entries in order: inline first, then each text's, without
    /// later duplicates.
    locs: Locs,
    /// The first [`MAX_ERRORS`] skipped entries, with source, key and reason.
    pub errors: Vec<StatusEntryError>,
    /// How many entries were skipped.
    pub invalid: usize,
    /// [`sync::desired_digest`] of the entries, taken once: targets that
    /// share this parse share it too.
    pub digest: [u8; 32],
    /// ConfigMap names and keys, indexed by [`Source::Line`].
    texts: Vec<(String, String)>,
    /// The entries' wire sum with the set's tag, taken at the first
    /// byte-compared read-back ([`super::read_check`]).
    pub(super) wire: std::sync::OnceLock<(u64, p4fleet_client::EntitySum)>,
}

impl Desired {
    /// How many entries are desired.
    pub fn len(&self) -> usize {
        self.locs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.locs.len() == 0
    }

    /// A digest of the kept entries in order: each part's digest (taken
    /// once per parse, see [`ParsedText::digest`]) and which of their
    /// entries are kept. Equal entries give equal digests; a change of
    /// any entry, of the parts or of what is kept gives another.
    fn digest_of_parts(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update((self.parts.len() as u64).to_le_bytes());
        for p in &self.parts {
            h.update(p.digest());
            h.update((p.entries.len() as u64).to_le_bytes());
        }
        for &(first, v) in self.locs.0.runs() {
            h.update(first.to_le_bytes());
            h.update(v.to_le_bytes());
        }
        h.update((self.locs.len() as u64).to_le_bytes());
        h.finalize().into()
    }

    /// Desired entry `i`.
    pub fn entry(&self, i: usize) -> &Entry {
        let l = self.locs.get(i);
        &self.parts[l.part as usize].entries[l.at as usize]
    }

    /// The desired entries in order, borrowed.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Entry> + '_ {
        self.locs
            .iter()
            .map(|l| &self.parts[l.part as usize].entries[l.at as usize])
    }

    /// The desired entries as a slice of references (8 bytes per entry),
    /// for the pure sync functions that index them.
    pub fn refs(&self) -> Vec<&Entry> {
        self.iter().collect()
    }

    /// The desired entries that set a direct meter: `(i, config)` for
    /// entry `i`, in order.
    pub fn meters(&self) -> Vec<(usize, MeterConfig)> {
        if self.parts.iter().all(|p| p.meters.is_empty()) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, l) in self.locs.iter().enumerate() {
            let m = &self.parts[l.part as usize].meters;
            if let Ok(j) = m.binary_search_by_key(&l.at, |(at, _)| *at) {
                out.push((i, m[j].1));
            }
        }
        out
    }

    /// Where entry `i` came from.
    pub fn source(&self, i: usize) -> Source {
        self.source_of(self.locs.get(i))
    }

    fn source_of(&self, l: Loc) -> Source {
        let line = self.parts[l.part as usize].lines.get(l.at as usize) as u32;
        match l.part {
            0 => Source::Inline(line as usize),
            p => Source::Line {
                text: p as usize - 1,
                line,
            },
        }
    }

    /// Where entry `i` came from: `entries[3]` or
    /// `configmap/fw/entries:line 7` (ConfigMap, key, line).
    pub fn label(&self, i: usize) -> String {
        self.source_label(self.source(i))
    }

    /// The key of entry `i` as status shows it.
    pub fn key(&self, i: usize) -> String {
        format_key(&self.schema, &self.entry(i).key)
    }

    /// A status error about entry `i`.
    pub fn error(&self, i: usize, reason: String) -> StatusEntryError {
        StatusEntryError {
            source: self.label(i),
            key: Some(self.key(i)),
            reason,
        }
    }

    fn source_label(&self, s: Source) -> String {
        match s {
            Source::Inline(i) => format!("entries[{i}]"),
            Source::Line { text, line } => {
                let (name, key) = &self.texts[text];
                format!("configmap/{name}/{key}:line {line}")
            }
        }
    }

    fn push_error(&mut self, source: String, key: Option<String>, reason: String) {
        self.invalid += 1;
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(StatusEntryError {
                source,
                key,
                reason: excerpt_reason(&reason),
            });
        }
    }
}

/// The parse options of a set's `spec`.
pub fn options(spec: &TableEntrySetSpec) -> ParseOptions {
    ParseOptions {
        mask_host_bits: spec.mask_host_bits,
    }
}

/// Parses inline entries and ConfigMap texts against one table schema,
/// skipping (and reporting) bad entries and later duplicates. Each text
/// is parsed here; [`assemble`] takes texts parsed already.
pub fn parse(spec: &TableEntrySetSpec, schema: &TableSchema, sources: &Sources) -> Desired {
    let parsed: Vec<Arc<ParsedText>> = sources
        .texts
        .iter()
        .map(|t| {
            Arc::new(match t.text.get() {
                Ok(text) => parsed::parse(schema, options(spec), &text),
                Err(e) => parsed::unreadable(&e),
            })
        })
        .collect();
    assemble(spec, schema, sources, &parsed)
}

/// The desired entries from the inline entries and the parsed texts
/// (`parsed[i]` of `sources.texts[i]`, against `schema`). The parsed
/// texts are shared, not copied.
pub fn assemble(
    spec: &TableEntrySetSpec,
    schema: &TableSchema,
    sources: &Sources,
    parsed: &[Arc<ParsedText>],
) -> Desired {
    let mut d = Desired {
        schema: schema.clone(),
        parts: Vec::with_capacity(parsed.len() + 1),
        locs: Locs::default(),
        errors: Vec::new(),
        invalid: 0,
        digest: [0; 32],
        texts: sources
            .texts
            .iter()
            .map(|t| (t.config_map.clone(), t.key.clone()))
            .collect(),
        wire: Default::default(),
    };
    let mut inline = ParsedText::default();
    for (i, te) in spec.entries.iter().enumerate() {
        let meter = te.meter.map(|m| MeterConfig {
            cir: m.cir,
            cburst: m.cburst,
            pir: m.pir,
            pburst: m.pburst,
        });
        let checked = meter.as_ref().map_or(Ok(()), direct_meter::check);
        match checked.and_then(|()| {
            let mut e = parse_inline_with(
                schema,
                &te.match_,
                &te.action,
                &te.params,
                te.priority,
                options(spec),
            )?;
            if let Some(d) = &te.idle_timeout {
                let ns = p4fleet_model::learn::parse_duration(d)
                    .map_err(|e| EntryError::Syntax(format!("idleTimeout: {e}")))?;
                set_idle_timeout(schema, &mut e, ns)?;
            }
            Ok(e)
        }) {
            Ok(e) => {
                inline.entries.push(e);
                inline.lines.push(i as u64);
                if let Some(m) = meter {
                    inline.meters.push((inline.entries.len() as u32 - 1, m));
                }
            }
            Err(e) => {
                let key = te
                    .match_
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                d.push_error(format!("entries[{i}]"), Some(key), e.to_string());
            }
        }
    }
    d.parts.push(Arc::new(inline));
    d.parts.extend(parsed.iter().cloned());
    for (part, p) in d.parts.iter().enumerate() {
        d.locs.push_part(part as u32, p.entries.len());
    }
    for (ti, p) in parsed.iter().enumerate() {
        for (line, reason) in &p.errors {
            let label = d.source_label(Source::Line {
                text: ti,
                line: *line,
            });
            d.push_error(label, None, reason.clone());
        }
        // Bad lines beyond the ones kept still count.
        d.invalid += p.invalid - p.errors.len();
    }
    drop_duplicates(&mut d);
    d.digest = d.digest_of_parts();
    d
}

/// Keeps the first of entries with equal keys; reports the others.
fn drop_duplicates(d: &mut Desired) {
    let dups = sync::duplicates_in(d.len(), |i| d.entry(i));
    if dups.is_empty() {
        return;
    }
    let mut drop = vec![false; d.locs.len()];
    for &(first, dup) in &dups {
        drop[dup] = true;
        let reason = format!("duplicate entry: same key as {}", d.label(first));
        let (label, key) = (d.label(dup), d.key(dup));
        d.push_error(label, Some(key), reason);
    }
    let keep: Vec<bool> = drop.iter().map(|d| !d).collect();
    d.locs.retain(&keep);
}

/// The desired entries of every target: one parse per distinct schema, so
/// targets running the same program share it.
#[derive(Debug, Clone, Default)]
pub struct PerTarget {
    parses: Vec<Arc<Desired>>,
    /// `parses[of_target[i]]` is target `i`'s.
    of_target: Vec<usize>,
}

impl PerTarget {
    /// Built from one desired per distinct schema and, per target, the
    /// index of its own.
    pub fn from_parts(parses: Vec<Arc<Desired>>, of_target: Vec<usize>) -> PerTarget {
        PerTarget { parses, of_target }
    }

    /// Target `i`'s desired entries.
    pub fn of(&self, i: usize) -> &Desired {
        &self.parses[self.of_target[i]]
    }

    /// Built from the desired entries of groups of targets: each group's
    /// target indices (of `n`) and its desired entries, in that order.
    /// The first group's first parse is the one status reports.
    pub fn gather(n: usize, groups: Vec<(Vec<usize>, PerTarget)>) -> PerTarget {
        let mut parses = Vec::new();
        let mut of_target = vec![0; n];
        for (at, p) in groups {
            let base = parses.len();
            for (j, i) in at.into_iter().enumerate() {
                of_target[i] = base + p.of_target[j];
            }
            parses.extend(p.parses);
        }
        PerTarget { parses, of_target }
    }

    /// The first parse, whose problems status reports (None without targets).
    pub fn first(&self) -> Option<&Desired> {
        self.parses.first().map(|d| &**d)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use p4fleet_crds::TableEntrySet;
    use p4fleet_crds::entry_set::TableEntry as SpecEntry;
    use std::collections::BTreeMap;

    pub use p4fleet_model::fixtures::firewall;

    #[test]
    fn per_target_groups_gather_in_target_order() {
        // Told apart by their `invalid` count.
        let d = |n: usize| {
            let mut d = parse(&set(vec![]).spec, &firewall(), &Default::default());
            d.invalid = n;
            Arc::new(d)
        };
        let now = PerTarget::from_parts(vec![d(1)], vec![0, 0]);
        let kept = PerTarget::from_parts(vec![d(2), d(3)], vec![1, 0]);
        let all = PerTarget::gather(4, vec![(vec![0, 3], now), (vec![2, 1], kept)]);
        let sizes: Vec<usize> = (0..4).map(|i| all.of(i).invalid).collect();
        assert_eq!(sizes, [1, 2, 3, 1]);
        assert_eq!(all.first().map(|d| d.invalid), Some(1));
    }

    /// A target on Switch `s1` (Bmv2), VirtualSwitch `vs`, firewall table.
    pub fn target(const_default: Option<u32>) -> super::super::dereference::Target {
        let sw: p4fleet_crds::SwitchSpec =
            serde_json::from_value(serde_json::json!({"target": "Bmv2", "endpoint": "h:1"}))
                .unwrap();
        super::super::dereference::Target {
            first_pipe: None,
            encoded_for: None,
            program: "fw".into(),
            p4info: Default::default(),
            virtual_switch: "vs".into(),
            switch: p4fleet_crds::Switch::new("s1", sw),
            slot: 0,
            schema: firewall(),
            const_default_action: const_default,
            profile: None,
        }
    }

    pub fn set(entries: Vec<SpecEntry>) -> TableEntrySet {
        let spec: TableEntrySetSpec = serde_json::from_value(serde_json::json!({
            "virtualSwitchRef": "vs", "table": "firewall"
        }))
        .unwrap();
        let mut s = TableEntrySet::new("s", TableEntrySetSpec { entries, ..spec });
        s.metadata.namespace = Some("ns".into());
        s
    }

    pub fn fw(src: &str, dst: &str, action: &str, params: &[(&str, &str)]) -> SpecEntry {
        SpecEntry {
            match_: BTreeMap::from([
                ("hdr.ipv4.srcAddr".to_string(), src.to_string()),
                ("hdr.ipv4.dstAddr".to_string(), dst.to_string()),
            ]),
            action: action.into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            priority: None,
            ..Default::default()
        }
    }

    /// Sources of `(configmap, key, text)`.
    pub fn texts(t: &[(&str, &str, &str)]) -> Sources {
        Sources {
            texts: t
                .iter()
                .map(|(cm, key, text)| crate::entry_sources::SourceText {
                    config_map: cm.to_string(),
                    key: key.to_string(),
                    resource_version: "1".into(),
                    text: (*text).into(),
                })
                .collect(),
        }
    }

    #[test]
    fn kept_entries_are_indexed_by_runs_and_dropping_some_splits_them() {
        let mut l = Locs::default();
        l.push_part(0, 2);
        l.push_part(1, 0);
        l.push_part(2, 100_000);
        l.push(Loc { part: 3, at: 5 });
        l.push(Loc { part: 3, at: 6 });
        l.push(Loc { part: 3, at: 8 });
        assert_eq!((l.len(), l.0.runs().len()), (100_005, 4));
        let all: Vec<Loc> = l.iter().collect();
        assert_eq!(l.iter().len(), all.len());
        assert!(all.iter().enumerate().all(|(i, &x)| l.get(i) == x));
        assert_eq!(all[2], Loc { part: 2, at: 0 });
        assert_eq!(
            all[100_001],
            Loc {
                part: 2,
                at: 99_999
            }
        );
        assert_eq!(all[100_004], Loc { part: 3, at: 8 });
        let mut keep = vec![true; l.len()];
        keep[1] = false;
        keep[50_000] = false;
        l.retain(&keep);
        assert_eq!((l.len(), l.0.runs().len()), (100_003, 5));
        assert_eq!(l.get(1), Loc { part: 2, at: 0 });
        // Kept 49,998 is entry 49,999 overall; entry 50,000 was dropped.
        assert_eq!(
            l.get(49_998),
            Loc {
                part: 2,
                at: 49_997
            }
        );
        assert_eq!(
            l.get(49_999),
            Loc {
                part: 2,
                at: 49_999
            }
        );
        assert_eq!(l.get(100_002), Loc { part: 3, at: 8 });
    }

    #[test]
    fn duplicates_across_config_maps_name_both_places() {
        let header = "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action drop\n";
        let sources = texts(&[
            (
                "fw-a",
                "entries",
                &format!("{header}10.0.0.1 10.0.0.2\n10.0.0.1 10.0.0.3\n"),
            ),
            ("fw-b", "part.gz", &format!("{header}\n10.0.0.1 10.0.0.3\n")),
        ]);
        let d = parse(&set(vec![]).spec, &firewall(), &sources);
        assert_eq!((d.len(), d.invalid), (2, 1));
        assert_eq!(d.errors[0].source, "configmap/fw-b/part.gz:line 4");
        assert_eq!(
            d.errors[0].reason,
            "duplicate entry: same key as configmap/fw-a/entries:line 4"
        );
    }

    #[test]
    fn entries_are_borrowed_from_the_shared_parse_not_copied() {
        let header = "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action drop\n";
        let sources = texts(&[(
            "fw",
            "k",
            &format!("{header}10.0.0.1 10.0.0.2\n10.0.0.1 10.0.0.3\n10.0.0.1 10.0.0.2\n"),
        )]);
        let s = set(vec![fw("10.0.0.9", "10.0.0.9", "allow", &[("port", "1")])]);
        let schema = firewall();
        let text = sources.texts[0].text.get().unwrap();
        let shared = Arc::new(parsed::parse(&schema, options(&s.spec), &text));
        let d = assemble(&s.spec, &schema, &sources, std::slice::from_ref(&shared));
        // Inline first, then the text's lines; the later duplicate dropped.
        assert_eq!(d.len(), 3);
        let srcs: Vec<Source> = (0..d.len()).map(|i| d.source(i)).collect();
        assert_eq!(
            srcs,
            [
                Source::Inline(0),
                Source::Line { text: 0, line: 3 },
                Source::Line { text: 0, line: 4 },
            ]
        );
        assert!(std::ptr::eq(d.entry(1), &shared.entries[0]));
        assert!(std::ptr::eq(d.entry(2), &shared.entries[1]));
        assert_eq!(Arc::strong_count(&shared), 2, "held once more, not copied");
        let refs = d.refs();
        assert!(refs.iter().zip(d.iter()).all(|(a, b)| std::ptr::eq(*a, b)));
        assert_eq!(d.errors[0].source, "configmap/fw/k:line 5");
    }

    #[test]
    fn the_digest_follows_the_kept_entries_not_the_parse() {
        let header = "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action drop\n";
        let schema = firewall();
        let s = set(vec![fw("10.0.0.9", "10.0.0.9", "allow", &[("port", "1")])]);
        let digest = |lines: &[&str]| {
            let sources = texts(
                &lines
                    .iter()
                    .enumerate()
                    .map(|(i, l)| ("fw", ["a", "b"][i], format!("{header}{l}")))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(|(c, k, t)| (*c, *k, t.as_str()))
                    .collect::<Vec<_>>(),
            );
            parse(&s.spec, &schema, &sources).digest
        };
        let base = digest(&["10.0.0.1 10.0.0.2\n10.0.0.3 10.0.0.4\n"]);
        // Parsed again (another Arc, another ParsedText): the same digest.
        assert_eq!(base, digest(&["10.0.0.1 10.0.0.2\n10.0.0.3 10.0.0.4\n"]));
        // Another entry, another order, a line more, another inline entry.
        assert_ne!(base, digest(&["10.0.0.1 10.0.0.2\n10.0.0.3 10.0.0.5\n"]));
        assert_ne!(base, digest(&["10.0.0.3 10.0.0.4\n10.0.0.1 10.0.0.2\n"]));
        assert_ne!(
            base,
            digest(&["10.0.0.1 10.0.0.2\n10.0.0.3 10.0.0.4\n10.0.0.5 10.0.0.6\n"])
        );
        let other_inline = set(vec![fw("10.0.0.9", "10.0.0.9", "allow", &[("port", "2")])]);
        let sources = texts(&[(
            "fw",
            "a",
            &format!("{header}10.0.0.1 10.0.0.2\n10.0.0.3 10.0.0.4\n"),
        )]);
        assert_ne!(base, parse(&other_inline.spec, &schema, &sources).digest);
        // The same kept entries from other texts (one with a duplicate,
        // dropped) count as a change: the digest covers the texts too.
        let with_dup = digest(&[
            "10.0.0.1 10.0.0.2\n",
            "10.0.0.1 10.0.0.2\n10.0.0.3 10.0.0.4\n",
        ]);
        let without = digest(&["10.0.0.1 10.0.0.2\n", "10.0.0.3 10.0.0.4\n"]);
        assert_ne!(with_dup, without);
    }

    #[test]
    fn bad_lines_beyond_the_kept_errors_still_count() {
        let bad: String = (0..25).map(|i| format!("junk{i}\n")).collect();
        let d = parse(&set(vec![]).spec, &firewall(), &texts(&[("fw", "k", &bad)]));
        assert_eq!((d.invalid, d.errors.len()), (25, MAX_ERRORS));
    }

    #[test]
    fn bad_entries_are_reported_with_their_source_and_others_kept() {
        let s = set(vec![
            fw("10.0.0.1", "10.0.0.2", "allow", &[("port", "1")]),
            fw("10.0.0.1", "10.0.0.3", "allow", &[("port", "4096")]),
            fw("10.0.0.1", "10.0.0.4", "jump", &[]),
        ]);
        let sources = texts(&[(
            "fw-1",
            "entries",
            "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n10.0.0.9 10.0.0.9 1\n10.0.0.1 10.0.0.2 3\n10.0.0.300 10.0.0.1 1\n",
        )]);
        let d = parse(&s.spec, &firewall(), &sources);
        assert_eq!(d.len(), 2);
        assert_eq!(d.invalid, 4);
        let srcs: Vec<&str> = d.errors.iter().map(|e| e.source.as_str()).collect();
        assert_eq!(
            srcs,
            [
                "entries[1]",
                "entries[2]",
                "configmap/fw-1/entries:line 5",
                "configmap/fw-1/entries:line 4"
            ]
        );
        assert!(
            d.errors[3].reason.contains("entries[0]"),
            "{:?}",
            d.errors[3]
        );
    }

    #[test]
    fn several_keys_of_a_config_map_are_named_and_errors_capped() {
        let bad: String = (0..15).map(|i| format!("junk{i}\n")).collect();
        let sources = texts(&[
            (
                "fw",
                "a",
                "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action drop\n10.0.0.1 10.0.0.2\n",
            ),
            ("fw", "b", &bad),
        ]);
        let d = parse(&set(vec![]).spec, &firewall(), &sources);
        assert_eq!((d.len(), d.invalid), (1, 15));
        assert_eq!(d.errors.len(), MAX_ERRORS);
        assert_eq!(d.label(0), "configmap/fw/a:line 3");
        assert_eq!(d.errors[0].source, "configmap/fw/b:line 1");
    }
}
