//! A P4Program's revisions: every content (digest) it had is kept, so a
//! rollback restores the bytes it ran even after the user's ConfigMap was
//! edited in place or deleted.
//!
//! A revision is a ControllerRevision (apps/v1) owned by the program,
//! named after the digest ([`revision_name`]), whose `data` is a
//! [`Manifest`]: the digest, the spec as recorded and where each source's
//! bytes are. The bytes themselves are in immutable ConfigMaps owned by the
//! program ([`part_name`]; gzip where that is smaller), except `url`
//! sources, which are content-addressed already (their sha256) and would
//! not fit: the manifest keeps the pinned URL.
//!
//! This module is pure (names, snapshot and restore, which revision to
//! write, which to prune, which one the fleet runs); [`load`] reads a
//! revision back through `Reads` (VirtualSwitches), [`store`] writes them
//! (the P4Program controller).

pub mod load;
pub mod store;

pub use load::load;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{Read, Write};

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use p4fleet_crds::{P4Program, P4ProgramSpec, RevisionRef, UrlSource};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::artifacts::{self, Resolved, field};

/// Condition type on a P4Program whose content could not be recorded
/// (present once that happened; True again once it was).
pub const REVISION_RECORDED: &str = "RevisionRecorded";
/// Old revisions kept when `spec.revisionHistoryLimit` is not set.
pub const DEFAULT_HISTORY_LIMIT: u32 = 10;
/// Label of every revision and snapshot ConfigMap: the program's name
/// (only when it fits a label value; the owner reference always names it).
pub const PROGRAM_LABEL: &str = "p4fleet.dev/program";
/// Label selecting what p4fleet created (the revision cache's watch).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "p4fleet");
/// Most stored bytes one snapshot ConfigMap carries (the API server takes
/// at most 1 MiB of data per ConfigMap; the rest is headroom).
pub const MAX_PART: usize = 900 * 1024;
/// Longest program part of a name: `-<16 hex>-<part>` must fit in 253.
const MAX_PREFIX: usize = 230;
/// Digits of the digest in a revision's name.
const NAME_DIGITS: usize = 16;

/// The ControllerRevision of `program`'s content `digest`:
/// `<program>-<first 16 digest digits>` (the program part cut and hashed
/// when the whole would be too long).
pub fn revision_name(program: &str, digest: &str) -> String {
    let head = if program.len() <= MAX_PREFIX {
        program.to_string()
    } else {
        let hash = hex::encode(&Sha256::digest(program.as_bytes())[..4]);
        let cut = program[..MAX_PREFIX - 1 - hash.len()].trim_end_matches(['-', '.']);
        format!("{cut}-{hash}")
    };
    let digits: String = digest.chars().take(NAME_DIGITS).collect();
    format!("{head}-{digits}")
}

/// Snapshot ConfigMap `i` of revision `revision`.
pub fn part_name(revision: &str, i: usize) -> String {
    format!("{revision}-{i}")
}

/// What a revision records (its ControllerRevision's `data`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The content's digest ([`Resolved::digest`]).
    pub digest: String,
    /// The spec as recorded (its rollout settings and history limit left
    /// out: they are not content). FPGA resources and Tofino pipes of a
    /// revision loaded from its snapshot come from here.
    pub spec: P4ProgramSpec,
    /// Every source, in field order.
    pub sources: Vec<SourceRecord>,
}

/// Where one source's bytes are kept.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SourceRecord {
    /// The source's field path, e.g. `spec.p4info`.
    pub field: String,
    /// sha256 (hex) of the bytes.
    pub sha256: String,
    /// Length of the bytes.
    pub size: u64,
    pub at: Location,
}

/// A snapshot ConfigMap key, or the pinned URL the bytes came from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Location {
    /// `binaryData[key]` of ConfigMap `name`, gzip-compressed when `gzip`.
    ConfigMap {
        name: String,
        key: String,
        gzip: bool,
    },
    /// Downloaded again (and checked against its sha256) when restored.
    Url(UrlSource),
}

/// A revision's snapshot as it is written: the manifest and the
/// ConfigMaps' `binaryData`.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub manifest: Manifest,
    /// ConfigMap name → key → stored bytes.
    pub parts: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

/// Why a content cannot be snapshotted; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// The caller snapshots only a content whose every source was read.
    #[error("{field}: not resolved")]
    Unresolved { field: &'static str },
    #[error(
        "{field}: {bytes} bytes even compressed, more than one ConfigMap holds ({MAX_PART}); give it as a url source (docs/artifacts.md)"
    )]
    TooLarge { field: &'static str, bytes: usize },
}

impl SnapshotError {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SnapshotError::Unresolved { .. } => "SourcesUnresolved",
            SnapshotError::TooLarge { .. } => "SnapshotTooLarge",
        }
    }
}

/// The snapshot of `spec`'s content as `resolved` read it, for revision
/// `revision`: each source's bytes gzip-compressed unless that is not
/// smaller, packed in field order into ConfigMaps of at most [`MAX_PART`]
/// bytes; `url` sources by reference.
pub fn snapshot(
    revision: &str,
    spec: &P4ProgramSpec,
    resolved: &Resolved,
) -> Result<Snapshot, SnapshotError> {
    let mut parts: Vec<BTreeMap<String, Vec<u8>>> = Vec::new();
    let mut part_bytes = 0usize;
    let mut sources = Vec::new();
    for (field, src) in artifacts::sources(spec) {
        let bytes = match resolved.get(field) {
            Some(Ok(b)) => b,
            _ => return Err(SnapshotError::Unresolved { field }),
        };
        let sha256 = hex::encode(Sha256::digest(bytes));
        let size = bytes.len() as u64;
        if let Some(url) = &src.url {
            sources.push(SourceRecord {
                field: field.into(),
                sha256,
                size,
                at: Location::Url(url.clone()),
            });
            continue;
        }
        let packed = gzip(bytes);
        let (stored, gzip, key) = match packed.len() < bytes.len() {
            true => (packed, true, format!("{field}.gz")),
            false => (bytes.clone(), false, field.to_string()),
        };
        if stored.len() > MAX_PART {
            return Err(SnapshotError::TooLarge {
                field,
                bytes: stored.len(),
            });
        }
        if parts.is_empty() || part_bytes + stored.len() > MAX_PART {
            parts.push(BTreeMap::new());
            part_bytes = 0;
        }
        part_bytes += stored.len();
        let name = part_name(revision, parts.len() - 1);
        parts
            .last_mut()
            .expect("a part")
            .insert(key.clone(), stored);
        sources.push(SourceRecord {
            field: field.into(),
            sha256,
            size,
            at: Location::ConfigMap { name, key, gzip },
        });
    }
    let manifest = Manifest {
        digest: resolved.digest(),
        spec: recorded_spec(spec),
        sources,
    };
    let parts = parts
        .into_iter()
        .enumerate()
        .map(|(i, data)| (part_name(revision, i), data))
        .collect();
    Ok(Snapshot { manifest, parts })
}

/// The spec as a revision records it: its content, without the settings
/// that are not (rollout, history limit).
pub fn recorded_spec(spec: &P4ProgramSpec) -> P4ProgramSpec {
    P4ProgramSpec {
        revision_history_limit: None,
        rollout: None,
        ..spec.clone()
    }
}

pub(crate) fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).expect("writing to a Vec");
    enc.finish().expect("writing to a Vec")
}

/// Why a revision's snapshot does not give its bytes back; the message
/// names the revision and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// No ControllerRevision for the digest (content recorded before
    /// revisions existed, or pruned).
    #[error("P4Program {program} has no revision of content {short}")]
    NotRecorded { program: String, short: String },
    #[error("revision {revision}: its data is not a p4fleet snapshot: {reason}")]
    Manifest { revision: String, reason: String },
    #[error("revision {revision}: snapshot ConfigMap {config_map} not found")]
    PartMissing {
        revision: String,
        config_map: String,
    },
    #[error("revision {revision}: {field}: snapshot ConfigMap {config_map} has no key {key:?}")]
    KeyMissing {
        revision: String,
        field: String,
        config_map: String,
        key: String,
    },
    #[error("revision {revision}: {field}: {reason}")]
    Corrupt {
        revision: String,
        field: String,
        reason: String,
    },
    /// A url source could not be downloaded again (or did not match).
    #[error("revision {revision}: {field}.url: {error}")]
    Url {
        revision: String,
        field: String,
        error: Box<artifacts::url_source::FetchError>,
    },
    #[error("revision {revision}: its bytes have digest {got}, not {want}")]
    DigestMismatch {
        revision: String,
        want: String,
        got: String,
    },
}

/// The manifest of a ControllerRevision, if it is one of p4fleet's.
pub fn manifest(cr: &ControllerRevision) -> Result<Manifest, RestoreError> {
    let revision = cr.name_any();
    let data = cr.data.as_ref().ok_or_else(|| RestoreError::Manifest {
        revision: revision.clone(),
        reason: "no data".into(),
    })?;
    serde_json::from_value(data.0.clone()).map_err(|e| RestoreError::Manifest {
        revision,
        reason: e.to_string(),
    })
}

/// The bytes of one source kept in a snapshot ConfigMap, checked
/// against its sha256 and size.
pub fn restore_source(
    revision: &str,
    rec: &SourceRecord,
    cm: &ConfigMap,
) -> Result<Vec<u8>, RestoreError> {
    let Location::ConfigMap { name, key, gzip } = &rec.at else {
        unreachable!("url sources are downloaded, not read from a ConfigMap");
    };
    let corrupt = |reason: String| RestoreError::Corrupt {
        revision: revision.into(),
        field: rec.field.clone(),
        reason,
    };
    let stored = cm
        .binary_data
        .as_ref()
        .and_then(|d| d.get(key))
        .ok_or_else(|| RestoreError::KeyMissing {
            revision: revision.into(),
            field: rec.field.clone(),
            config_map: name.clone(),
            key: key.clone(),
        })?;
    let bytes = match gzip {
        false => stored.0.clone(),
        true => {
            // Bounded by the recorded size: a damaged or foreign key
            // cannot inflate without end.
            let mut out = Vec::with_capacity(rec.size as usize);
            flate2::read::MultiGzDecoder::new(stored.0.as_slice())
                .take(rec.size + 1)
                .read_to_end(&mut out)
                .map_err(|e| corrupt(format!("not valid gzip: {e}")))?;
            out
        }
    };
    let sha = hex::encode(Sha256::digest(&bytes));
    if bytes.len() as u64 != rec.size || sha != rec.sha256 {
        return Err(corrupt(format!(
            "{} bytes with sha256 {sha}, recorded {} bytes with sha256 {}",
            bytes.len(),
            rec.size,
            rec.sha256
        )));
    }
    Ok(bytes)
}

/// The field path of a record, as [`Resolved`] keys it.
pub fn record_field(revision: &str, rec: &SourceRecord) -> Result<&'static str, RestoreError> {
    field::by_name(&rec.field).ok_or_else(|| RestoreError::Manifest {
        revision: revision.into(),
        reason: format!("unknown source field {:?}", rec.field),
    })
}

/// The labels of a revision and its snapshot ConfigMaps.
fn labels(program: &str) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string())]);
    // A label value has at most 63 characters; the owner reference names
    // the program whatever its length.
    if program.len() <= 63 {
        l.insert(PROGRAM_LABEL.to_string(), program.to_string());
    }
    l
}

/// The ControllerRevision recording `manifest` as revision `number` of `program`.
pub fn revision_object(
    program: &P4Program,
    name: &str,
    number: i64,
    manifest: &Manifest,
) -> ControllerRevision {
    ControllerRevision {
        metadata: owned_meta(program, name),
        data: Some(RawExtension(
            serde_json::to_value(manifest).expect("a manifest serializes"),
        )),
        revision: number,
    }
}

/// The immutable snapshot ConfigMap `name` holding `data`, owned by `program`.
pub fn part_object(program: &P4Program, name: &str, data: &BTreeMap<String, Vec<u8>>) -> ConfigMap {
    ConfigMap {
        metadata: owned_meta(program, name),
        immutable: Some(true),
        binary_data: Some(
            data.iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// The metadata of `program`'s object `name`: its labels, owned by it.
fn owned_meta(program: &P4Program, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(labels(&program.name_any())),
        owner_references: program.controller_owner_ref(&()).map(|o| vec![o]),
        ..Default::default()
    }
}

/// A revision as kept (read from its ControllerRevision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub name: String,
    pub revision: i64,
    pub digest: String,
    /// Its snapshot ConfigMaps.
    pub parts: Vec<String>,
}

impl Kept {
    /// The revision as status names it.
    pub fn reference(&self) -> RevisionRef {
        RevisionRef {
            name: self.name.clone(),
            revision: self.revision,
            digest: self.digest.clone(),
        }
    }
}

/// The revision `cr` records, when it is a p4fleet snapshot.
pub fn kept(cr: &ControllerRevision) -> Option<Kept> {
    let m = manifest(cr).ok()?;
    let parts: BTreeSet<String> = m
        .sources
        .iter()
        .filter_map(|s| match &s.at {
            Location::ConfigMap { name, .. } => Some(name.clone()),
            Location::Url(_) => None,
        })
        .collect();
    Some(Kept {
        name: cr.name_any(),
        revision: cr.revision,
        digest: m.digest,
        parts: parts.into_iter().collect(),
    })
}

/// What recording the content `digest` takes, given the revisions kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// It is the newest revision already.
    Kept(Kept),
    /// A content seen before: its revision takes the next number again.
    Renumber { kept: Kept, number: i64 },
    /// A new content: a new revision with the next number.
    Create { name: String, number: i64 },
}

/// How to record `digest` of program `program` among `revisions`.
pub fn record(program: &str, revisions: &[Kept], digest: &str) -> Record {
    let newest = revisions.iter().map(|r| r.revision).max().unwrap_or(0);
    match revisions.iter().find(|r| r.digest == digest) {
        Some(k) if k.revision == newest => Record::Kept(k.clone()),
        Some(k) => Record::Renumber {
            kept: k.clone(),
            number: newest + 1,
        },
        None => Record::Create {
            name: revision_name(program, digest),
            number: newest + 1,
        },
    }
}

/// The digests a rollout still needs, never pruned: its `from` and `to`,
/// and the revision `pinned` names among `kept`.
pub fn held_by_rollout<'a>(
    rollout: Option<&'a p4fleet_crds::RolloutStatus>,
    pinned: Option<i64>,
    kept: &'a [Kept],
) -> impl Iterator<Item = &'a str> {
    let own = rollout
        .into_iter()
        .flat_map(|r| r.from.iter().chain([&r.to]))
        .map(|r| r.digest.as_str());
    let pin = kept
        .iter()
        .filter(move |k| Some(k.revision) == pinned)
        .map(|k| k.digest.as_str());
    own.chain(pin)
}

/// The revisions to delete: all but those in use (`in_use`: digests of
/// the update and current revisions and of what VirtualSwitches run) and
/// the newest `limit` of the others. Oldest first.
pub fn prune<'a>(revisions: &'a [Kept], limit: u32, in_use: &HashSet<&str>) -> Vec<&'a Kept> {
    let mut old: Vec<&Kept> = revisions
        .iter()
        .filter(|r| !in_use.contains(r.digest.as_str()))
        .collect();
    old.sort_by_key(|r| std::cmp::Reverse(r.revision));
    let mut gone: Vec<&Kept> = old.into_iter().skip(limit as usize).collect();
    gone.reverse();
    gone
}

/// The revision the fleet runs: the update revision once every
/// VirtualSwitch that reports a loaded digest runs it (or none runs the
/// program); until then the current revision as before while some still
/// run it, else the newest revision some run.
pub fn current(
    update: &RevisionRef,
    old: Option<&RevisionRef>,
    loaded: &[&str],
    revisions: &[Kept],
) -> RevisionRef {
    if loaded.iter().all(|d| *d == update.digest) {
        return update.clone();
    }
    if let Some(old) = old.filter(|o| loaded.contains(&o.digest.as_str())) {
        return old.clone();
    }
    revisions
        .iter()
        .filter(|r| r.digest != update.digest && loaded.contains(&r.digest.as_str()))
        .max_by_key(|r| r.revision)
        .map_or_else(|| update.clone(), Kept::reference)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::SourceError;

    const FIREWALL: &str = include_str!("../../../../examples/firewall/p4info.txt");

    fn spec(v: serde_json::Value) -> P4ProgramSpec {
        serde_json::from_value(v).unwrap()
    }

    /// Bytes gzip cannot shrink (xorshift).
    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn kept(name: &str, revision: i64, digest: &str) -> Kept {
        Kept {
            name: name.into(),
            revision,
            digest: digest.into(),
            parts: vec![format!("{name}-0")],
        }
    }

    fn config_map(name: &str, data: &BTreeMap<String, Vec<u8>>) -> ConfigMap {
        let p: P4Program = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "fw", "namespace": "ns", "uid": "u-1"},
            "spec": {"p4info": {"inline": ""}}
        }))
        .unwrap();
        part_object(&p, name, data)
    }

    #[test]
    fn names_are_content_addressed_and_fit_any_program_name() {
        let d = "0123456789abcdef".repeat(4);
        assert_eq!(revision_name("fw", &d), "fw-0123456789abcdef");
        assert_eq!(part_name("fw-0123456789abcdef", 0), "fw-0123456789abcdef-0");
        let long = format!("{}-x", "a".repeat(250));
        let n = revision_name(&long, &d);
        assert!(part_name(&n, 9).len() <= 253, "{}", n.len());
        assert_ne!(n, revision_name(&format!("{}-y", "a".repeat(250)), &d));
        assert!(!n.contains("--"), "{n}");
    }

    #[test]
    fn a_snapshot_keeps_every_sources_bytes_and_gives_them_back() {
        let s = spec(serde_json::json!({
            "p4info": {"configMapKeyRef": {"name": "fw", "key": "p4info.txt"}},
            "artifacts": {"bmv2": {"json": {"inline": "{}"}},
                "fpga": {"bitstream": {"configMapKeyRef": {"name": "bits", "key": "b"}},
                         "resources": {"luts": 10}}},
            "revisionHistoryLimit": 3,
            "rollout": {"strategy": "Canary", "steps": [{"percent": 100}]}
        }));
        // Random-looking bytes do not compress: kept as they are.
        let bitstream = noise(4096, 7);
        let resolved: Resolved = [
            (field::P4INFO, Ok(FIREWALL.as_bytes().to_vec())),
            (field::BMV2_JSON, Ok(b"{}".to_vec())),
            (field::FPGA_BITSTREAM, Ok(bitstream.clone())),
        ]
        .into_iter()
        .collect();
        let snap = snapshot("fw-0123", &s, &resolved).unwrap();
        assert_eq!(snap.manifest.digest, resolved.digest());
        assert_eq!(snap.manifest.spec.revision_history_limit, None);
        assert_eq!(snap.manifest.spec.rollout, None, "not content");
        assert_eq!(
            snap.manifest
                .spec
                .artifacts
                .fpga
                .as_ref()
                .unwrap()
                .resources["luts"],
            10
        );
        assert_eq!(snap.parts.len(), 1);
        let data = &snap.parts["fw-0123-0"];
        assert!(
            data["spec.p4info.gz"].len() < FIREWALL.len() / 2,
            "compressed"
        );
        assert_eq!(
            data["spec.artifacts.fpga.bitstream"], bitstream,
            "not compressed"
        );
        let cm = config_map("fw-0123-0", data);
        assert_eq!(cm.immutable, Some(true));
        let mut back = Resolved::default();
        for rec in &snap.manifest.sources {
            let f = record_field("r", rec).unwrap();
            back.insert(f, Ok(restore_source("r", rec, &cm).unwrap()));
        }
        assert_eq!(back, resolved);
        assert_eq!(back.digest(), snap.manifest.digest);

        // A damaged key is named, never passed on.
        let mut bad = data.clone();
        bad.insert("spec.artifacts.fpga.bitstream".into(), vec![1, 2, 3]);
        let e = restore_source(
            "r",
            &snap.manifest.sources[2],
            &config_map("fw-0123-0", &bad),
        )
        .unwrap_err();
        assert!(
            matches!(&e, RestoreError::Corrupt { field, .. } if field == field::FPGA_BITSTREAM),
            "{e}"
        );
        let mut gone = data.clone();
        gone.remove("spec.p4info.gz");
        let e = restore_source(
            "r",
            &snap.manifest.sources[0],
            &config_map("fw-0123-0", &gone),
        )
        .unwrap_err();
        assert!(matches!(e, RestoreError::KeyMissing { .. }), "{e}");
    }

    #[test]
    fn large_sources_spread_over_parts_and_url_sources_are_kept_by_reference() {
        let s = spec(serde_json::json!({
            "p4info": {"inline": "x"},
            "artifacts": {
                "tofino": {"bfrtJson": {"url": {"url": "https://h/b.json", "sha256": "a".repeat(64)}},
                           "binary": {"configMapKeyRef": {"name": "bin", "key": "tofino.bin"}},
                           "contextJson": {"configMapKeyRef": {"name": "bin", "key": "ctx"}}}}
        }));
        let resolved: Resolved = [
            (field::P4INFO, Ok(b"x".to_vec())),
            (field::TOFINO_BFRT_JSON, Ok(b"{\"big\": true}".to_vec())),
            (field::TOFINO_CONTEXT_JSON, Ok(noise(600 * 1024, 1))),
            (field::TOFINO_BINARY, Ok(noise(600 * 1024, 2))),
        ]
        .into_iter()
        .collect();
        let snap = snapshot("t-1", &s, &resolved).unwrap();
        assert_eq!(snap.parts.len(), 2, "{:?}", snap.parts.keys());
        for data in snap.parts.values() {
            assert!(data.values().map(Vec::len).sum::<usize>() <= MAX_PART);
        }
        let bfrt = snap
            .manifest
            .sources
            .iter()
            .find(|r| r.field == field::TOFINO_BFRT_JSON)
            .unwrap();
        assert!(matches!(&bfrt.at, Location::Url(u) if u.url == "https://h/b.json"));

        let mut huge = resolved.clone();
        huge.insert(field::TOFINO_BINARY, Ok(noise(MAX_PART + 1, 3)));
        assert_eq!(
            snapshot("t-1", &s, &huge).unwrap_err(),
            SnapshotError::TooLarge {
                field: field::TOFINO_BINARY,
                bytes: MAX_PART + 1
            }
        );
        let mut unread = resolved;
        unread.insert(
            field::P4INFO,
            Err(SourceError::NoSource {
                field: field::P4INFO,
            }),
        );
        assert_eq!(
            snapshot("t-1", &s, &unread).unwrap_err().reason(),
            "SourcesUnresolved"
        );
    }

    #[test]
    fn the_revision_object_round_trips_its_manifest() {
        let p: P4Program = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "fw", "namespace": "ns", "uid": "u-1"},
            "spec": {"p4info": {"inline": FIREWALL}}
        }))
        .unwrap();
        let resolved: Resolved = [(field::P4INFO, Ok(FIREWALL.as_bytes().to_vec()))]
            .into_iter()
            .collect();
        let name = revision_name("fw", &resolved.digest());
        let snap = snapshot(&name, &p.spec, &resolved).unwrap();
        let cr = revision_object(&p, &name, 3, &snap.manifest);
        assert_eq!(cr.revision, 3);
        let owner = &cr.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("P4Program", "u-1")
        );
        assert_eq!(cr.labels()[PROGRAM_LABEL], "fw");
        assert_eq!(manifest(&cr).unwrap(), snap.manifest);
        let k = super::kept(&cr).unwrap();
        assert_eq!(k.digest, resolved.digest());
        assert_eq!(k.parts, [format!("{name}-0")]);
        let foreign = ControllerRevision {
            data: Some(RawExtension(serde_json::json!({"spec": {"template": {}}}))),
            ..cr
        };
        assert!(super::kept(&foreign).is_none());
    }

    #[test]
    fn a_new_content_is_the_next_number_and_a_content_seen_before_is_renumbered() {
        let revs = [kept("fw-a", 1, "a"), kept("fw-b", 2, "b")];
        assert_eq!(
            record("fw", &[], &"c".repeat(64)),
            Record::Create {
                name: revision_name("fw", &"c".repeat(64)),
                number: 1
            }
        );
        assert_eq!(record("fw", &revs, "b"), Record::Kept(revs[1].clone()));
        assert_eq!(
            record("fw", &revs, "a"),
            Record::Renumber {
                kept: revs[0].clone(),
                number: 3
            }
        );
        assert!(matches!(
            record("fw", &revs, "c"),
            Record::Create { number: 3, .. }
        ));
    }

    #[test]
    fn pruning_keeps_the_newest_old_revisions_and_every_one_in_use() {
        let revs: Vec<Kept> = (1..=6)
            .map(|i| kept(&format!("fw-{i}"), i, &i.to_string()))
            .collect();
        let names = |g: Vec<&Kept>| g.iter().map(|k| k.name.clone()).collect::<Vec<_>>();
        // 6 is the update revision, 2 still runs on a VirtualSwitch.
        let in_use = HashSet::from(["6", "2"]);
        assert_eq!(names(prune(&revs, 2, &in_use)), ["fw-1", "fw-3"]);
        assert_eq!(names(prune(&revs, 10, &in_use)), Vec::<String>::new());
        assert_eq!(
            names(prune(&revs, 0, &in_use)),
            ["fw-1", "fw-3", "fw-4", "fw-5"]
        );
    }

    #[test]
    fn the_current_revision_follows_what_the_fleet_runs() {
        let revs = [
            kept("fw-a", 1, "a"),
            kept("fw-b", 2, "b"),
            kept("fw-c", 3, "c"),
        ];
        let update = revs[2].reference();
        let old = revs[0].reference();
        // Nothing runs the program, or everything runs the update.
        assert_eq!(current(&update, Some(&old), &[], &revs), update);
        assert_eq!(current(&update, Some(&old), &["c", "c"], &revs), update);
        // A change on its way: the old current stays while some run it.
        assert_eq!(current(&update, Some(&old), &["c", "a"], &revs), old);
        // The old current is gone from the fleet: the newest one still running.
        assert_eq!(
            current(&update, Some(&old), &["c", "b"], &revs),
            revs[1].reference()
        );
        assert_eq!(
            current(&update, None, &["b", "a"], &revs),
            revs[1].reference()
        );
        // Something unrecorded runs: nothing better to name than the update.
        assert_eq!(current(&update, None, &["zz"], &revs), update);
    }
}
