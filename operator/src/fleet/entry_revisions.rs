//! A TableEntrySet's entry revisions, for a Canary rollout of its entries
//! (docs/rollouts.md, "Rolling out entries"): every content of the
//! entries (the inline entries, the texts of `entriesFrom` and the
//! table's default action) the set rolls out is kept, so a failed gate restores the previous entries on
//! the moved VirtualSwitches even after the user's ConfigMap was edited
//! in place or deleted.
//!
//! A revision is one immutable ConfigMap owned by the set, named after
//! the content's digest ([`config_map_name`]), holding the [`Snapshot`]
//! as gzip JSON, labelled with the set's uid and numbered by a label.
//! Pure: the snapshot, its digest, the ConfigMap and back, the next
//! number; the TableEntrySet controller reads and writes them.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use p4fleet_crds::entry_set::{DefaultAction, TableEntry};
use p4fleet_crds::{
    RolloutPhase, RolloutRevision, RolloutStatus, TableEntrySet, TableEntrySetSpec,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::revisions::{Kept, MANAGED_BY, MAX_PART, gzip, revision_name};
use crate::entry_sources::{DecodeError, SourceText, Sources, Text};

/// Label of a revision ConfigMap: the uid of the set it belongs to (a
/// uid always fits a label value; a set's name may not).
pub const SET_LABEL: &str = "p4fleet.dev/entry-set-uid";
/// Label of a revision ConfigMap: its revision number.
pub const REVISION_LABEL: &str = "p4fleet.dev/entries-revision";
/// Annotation of a revision ConfigMap: the content's digest.
pub const DIGEST_ANNOTATION: &str = "p4fleet.dev/entries-digest";
/// The `binaryData` key holding the snapshot.
const KEY: &str = "entries.json.gz";
/// Old revisions kept when `spec.revisionHistoryLimit` is not set.
pub const DEFAULT_HISTORY_LIMIT: u32 = super::revisions::DEFAULT_HISTORY_LIMIT;

/// The entries of one revision: what a sync builds a target's desired
/// entries from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// `spec.entries`.
    #[serde(default)]
    pub entries: Vec<TableEntry>,
    /// The texts of `spec.entriesFrom`, in order.
    #[serde(default)]
    pub sources: Vec<SnapshotText>,
    /// `spec.defaultAction` (the table's default entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_action: Option<DefaultAction>,
}

/// One text of an entry source as it was read.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotText {
    pub config_map: String,
    pub key: String,
    /// The ConfigMap's resourceVersion then (its parse is shared with a
    /// live read of the same version).
    pub resource_version: String,
    pub text: String,
}

/// Why a revision could not be kept or read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RevisionError {
    #[error("ConfigMap {config_map} key {key:?}: {error}")]
    Source {
        config_map: String,
        key: String,
        error: DecodeError,
    },
    #[error(
        "the entries are {bytes} bytes compressed, more than the {MAX_PART} one revision ConfigMap holds; the change is not rolled out (split the set, or use strategy AllAtOnce)"
    )]
    TooLarge { bytes: usize },
    #[error("revision ConfigMap {config_map} not found (deleted, or pruned)")]
    Missing { config_map: String },
    #[error("revision ConfigMap {config_map} is not a p4fleet entries snapshot: {reason}")]
    Corrupt { config_map: String, reason: String },
}

impl RevisionError {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            RevisionError::Source { .. } => "SourceUnreadable",
            RevisionError::TooLarge { .. } => "RevisionTooLarge",
            RevisionError::Missing { .. } => "RevisionMissing",
            RevisionError::Corrupt { .. } => "RevisionCorrupt",
        }
    }
}

/// The entries `set` desires with the texts `sources`.
pub fn snapshot(set: &TableEntrySet, sources: &Sources) -> Result<Snapshot, RevisionError> {
    let texts = sources
        .texts
        .iter()
        .map(|t| {
            let text = text_of(t)?;
            Ok(SnapshotText {
                config_map: t.config_map.clone(),
                key: t.key.clone(),
                resource_version: t.resource_version.clone(),
                text: text.to_string(),
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Snapshot {
        entries: set.spec.entries.clone(),
        sources: texts,
        default_action: set.spec.default_action.clone(),
    })
}

/// The content's digest (hex sha256): the inline entries and each text
/// with where it came from, not the resourceVersions (a ConfigMap whose
/// labels changed is the same content), and the default action if set.
pub fn digest(s: &Snapshot) -> String {
    let texts = s.sources.iter();
    hash(
        &s.entries,
        texts.map(|t| [&*t.config_map, &*t.key, &*t.text]),
        s.default_action.as_ref(),
    )
}

/// [`digest`] of what `set` desires with `sources`, without copying the
/// texts into a snapshot (a sync takes it whenever the content may have
/// changed).
pub fn digest_of(set: &TableEntrySet, sources: &Sources) -> Result<String, RevisionError> {
    let texts = sources
        .texts
        .iter()
        .map(|t| Ok((t, text_of(t)?)))
        .collect::<Result<Vec<_>, RevisionError>>()?;
    let parts = texts
        .iter()
        .map(|(t, text)| [&*t.config_map, &*t.key, &**text]);
    Ok(hash(
        &set.spec.entries,
        parts,
        set.spec.default_action.as_ref(),
    ))
}

fn text_of(t: &SourceText) -> Result<Arc<str>, RevisionError> {
    t.text.get().map_err(|error| RevisionError::Source {
        config_map: t.config_map.clone(),
        key: t.key.clone(),
        error,
    })
}

fn hash<'a>(
    entries: &[TableEntry],
    texts: impl Iterator<Item = [&'a str; 3]>,
    default_action: Option<&DefaultAction>,
) -> String {
    let mut h = Sha256::new();
    let entries = serde_json::to_vec(entries).expect("entries serialize");
    h.update((entries.len() as u64).to_be_bytes());
    h.update(&entries);
    for parts in texts {
        for part in parts {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
    }
    // Last and only when set: the revisions of sets without one keep the
    // digests they had before default actions were kept.
    if let Some(d) = default_action {
        let d = serde_json::to_vec(d).expect("a default action serializes");
        h.update(b"defaultAction");
        h.update((d.len() as u64).to_be_bytes());
        h.update(&d);
    }
    hex::encode(h.finalize())
}

/// What a sync's content depends on, cheap to compare: the spec's
/// generation and each text's ConfigMap, key and resourceVersion. An
/// unchanged fingerprint has an unchanged digest (no text hashed again).
pub fn fingerprint(set: &TableEntrySet, sources: &Sources) -> String {
    let mut f = format!("{}", set.metadata.generation.unwrap_or(0));
    for t in &sources.texts {
        f.push_str(&format!(
            "|{}/{}@{}",
            t.config_map, t.key, t.resource_version
        ));
    }
    f
}

/// The revision ConfigMap of `set`'s content `digest`.
pub fn config_map_name(set: &str, digest: &str) -> String {
    revision_name(&format!("{set}-entries"), digest)
}

/// The immutable ConfigMap keeping revision `revision` of `set`.
pub fn config_map(
    set: &TableEntrySet,
    revision: i64,
    digest: &str,
    s: &Snapshot,
) -> Result<ConfigMap, RevisionError> {
    let json = serde_json::to_vec(s).expect("a snapshot serializes");
    let bytes = gzip(&json);
    if bytes.len() > MAX_PART {
        return Err(RevisionError::TooLarge { bytes: bytes.len() });
    }
    let labels = BTreeMap::from([
        (SET_LABEL.to_string(), set.uid().unwrap_or_default()),
        (REVISION_LABEL.to_string(), revision.to_string()),
        (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
    ]);
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(&set.name_any(), digest)),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                DIGEST_ANNOTATION.to_string(),
                digest.to_string(),
            )])),
            owner_references: set.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        immutable: Some(true),
        binary_data: Some(BTreeMap::from([(KEY.to_string(), ByteString(bytes))])),
        ..Default::default()
    })
}

/// The revision a ConfigMap keeps, when it is one.
pub fn kept(cm: &ConfigMap) -> Option<Kept> {
    let revision = cm.labels().get(REVISION_LABEL)?.parse().ok()?;
    let digest = cm.annotations().get(DIGEST_ANNOTATION)?.clone();
    Some(Kept {
        name: cm.name_any(),
        revision,
        digest,
        parts: Vec::new(),
    })
}

/// The snapshot a revision ConfigMap keeps, checked against its digest.
pub fn restore(cm: &ConfigMap) -> Result<Snapshot, RevisionError> {
    let config_map = cm.name_any();
    let corrupt = |reason: String| RevisionError::Corrupt {
        config_map: config_map.clone(),
        reason,
    };
    let stored = cm
        .binary_data
        .as_ref()
        .and_then(|d| d.get(KEY))
        .ok_or_else(|| corrupt(format!("no key {KEY}")))?;
    let mut json = Vec::new();
    flate2::read::MultiGzDecoder::new(stored.0.as_slice())
        .read_to_end(&mut json)
        .map_err(|e| corrupt(format!("not valid gzip: {e}")))?;
    let s: Snapshot = serde_json::from_slice(&json).map_err(|e| corrupt(e.to_string()))?;
    match cm.annotations().get(DIGEST_ANNOTATION) {
        Some(d) if *d == digest(&s) => Ok(s),
        _ => Err(corrupt("its content does not match its digest".into())),
    }
}

/// The texts of a snapshot as a sync reads sources.
pub fn sources(s: &Snapshot) -> Sources {
    Sources {
        texts: s
            .sources
            .iter()
            .map(|t| SourceText {
                config_map: t.config_map.clone(),
                key: t.key.clone(),
                resource_version: t.resource_version.clone(),
                text: Text::Plain(Arc::from(t.text.as_str())),
            })
            .collect(),
    }
}

/// A set's `spec` as it was with the snapshot's inline entries: what the
/// desired-entries stage builds a revision's entries from (under no
/// generation, so the live set's cached assembly is never taken for it).
pub fn as_of(spec: &TableEntrySetSpec, s: &Snapshot) -> TableEntrySetSpec {
    TableEntrySetSpec {
        entries: s.entries.clone(),
        default_action: s.default_action.clone(),
        ..spec.clone()
    }
}

/// The revision the selected VirtualSwitches run at rest, by the
/// rollout's status: the last one completed, or the one a rollout in
/// progress (or rolled back) started from.
pub fn stable(previous: Option<&RolloutStatus>) -> Option<RolloutRevision> {
    let p = previous?;
    match p.phase {
        RolloutPhase::Completed => Some(p.to.clone()),
        _ => p.from.clone().or_else(|| Some(p.to.clone())),
    }
}

/// The revision of content `digest`: the one the rollout's status or the
/// kept ConfigMaps name, else a new number after every one of them.
pub fn numbered(digest: &str, previous: Option<&RolloutStatus>, kept: &[Kept]) -> (i64, bool) {
    let named = previous
        .into_iter()
        .flat_map(|p| p.from.iter().chain([&p.to]))
        .map(|r| (r.revision, r.digest.as_str()));
    let all = named.chain(kept.iter().map(|k| (k.revision, k.digest.as_str())));
    let mut newest = 0;
    for (n, d) in all {
        if d == digest {
            return (n, false);
        }
        newest = newest.max(n);
    }
    (newest + 1, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::TableEntrySetSpec;

    fn set(lines: &[&str]) -> (TableEntrySet, Sources) {
        let spec: TableEntrySetSpec = serde_json::from_value(serde_json::json!({
            "virtualSwitchSelector": {"matchLabels": {"app": "fw"}}, "table": "t",
            "entries": [{"match": {"a": "1"}, "action": "allow"}]
        }))
        .unwrap();
        let mut s = TableEntrySet::new("fw", spec);
        s.metadata.uid = Some("0b5c".into());
        s.metadata.generation = Some(3);
        let texts = lines
            .iter()
            .enumerate()
            .map(|(i, l)| SourceText {
                config_map: format!("cm{i}"),
                key: "entries".into(),
                resource_version: format!("{}", 10 + i),
                text: Text::plain(l),
            })
            .collect();
        (s, Sources { texts })
    }

    #[test]
    fn a_snapshot_round_trips_through_its_config_map() {
        let (s, src) = set(&["10.0.0.1 allow\n", "10.0.0.2 drop\n"]);
        let snap = snapshot(&s, &src).unwrap();
        let d = digest(&snap);
        let cm = config_map(&s, 4, &d, &snap).unwrap();
        assert_eq!(cm.name_any(), format!("fw-entries-{}", &d[..16]));
        assert_eq!(cm.immutable, Some(true));
        assert_eq!(cm.labels()[SET_LABEL], "0b5c");
        let k = kept(&cm).unwrap();
        assert_eq!((k.revision, k.digest.as_str()), (4, d.as_str()));
        let back = restore(&cm).unwrap();
        assert_eq!(back, snap);
        assert_eq!(sources(&back), src);
        let then = as_of(&s.spec, &back);
        assert_eq!(then.entries.len(), 1);
    }

    #[test]
    fn the_digest_is_the_content_not_where_or_when_it_was_read() {
        let (s, src) = set(&["10.0.0.1 allow\n"]);
        let d = digest(&snapshot(&s, &src).unwrap());
        // Taken of the sources, it is the digest its ConfigMap is checked by.
        assert_eq!(digest_of(&s, &src).unwrap(), d);
        let mut later = src.clone();
        later.texts[0].resource_version = "99".into();
        assert_eq!(digest(&snapshot(&s, &later).unwrap()), d);
        assert_ne!(fingerprint(&s, &later), fingerprint(&s, &src));
        let mut edited = src.clone();
        edited.texts[0].text = Text::plain("10.0.0.1 drop\n");
        assert_ne!(digest(&snapshot(&s, &edited).unwrap()), d);
        let mut moved = src;
        moved.texts[0].config_map = "other".into();
        assert_ne!(digest(&snapshot(&s, &moved).unwrap()), d);
        let mut inline = s.clone();
        inline.spec.entries.clear();
        let (_, src) = set(&["10.0.0.1 allow\n"]);
        assert_ne!(digest(&snapshot(&inline, &src).unwrap()), d);
    }

    #[test]
    fn the_default_action_is_part_of_a_revision() {
        let (s, src) = set(&["10.0.0.1 allow\n"]);
        let plain = snapshot(&s, &src).unwrap();
        // A set without one keeps the snapshot (and digest) it had.
        let json = serde_json::to_string(&plain).unwrap();
        assert!(!json.contains("defaultAction"), "{json}");
        let mut dropping = s.clone();
        dropping.spec.default_action = Some(DefaultAction {
            action: "drop".into(),
            ..Default::default()
        });
        let snap = snapshot(&dropping, &src).unwrap();
        let d = digest(&snap);
        assert_ne!(d, digest(&plain));
        assert_eq!(digest_of(&dropping, &src).unwrap(), d);
        let cm = config_map(&dropping, 2, &d, &snap).unwrap();
        assert_eq!(restore(&cm).unwrap(), snap);
        // A target held on the revision gets its default action back.
        assert_eq!(as_of(&s.spec, &snap).default_action, snap.default_action);
        assert_eq!(as_of(&dropping.spec, &plain).default_action, None);
    }

    #[test]
    fn a_tampered_or_foreign_config_map_is_refused() {
        let (s, src) = set(&["10.0.0.1 allow\n"]);
        let snap = snapshot(&s, &src).unwrap();
        let mut cm = config_map(&s, 1, &digest(&snap), &snap).unwrap();
        cm.annotations_mut()
            .insert(DIGEST_ANNOTATION.into(), "00".repeat(32));
        assert!(matches!(restore(&cm), Err(RevisionError::Corrupt { .. })));
        cm.binary_data = None;
        assert!(matches!(restore(&cm), Err(RevisionError::Corrupt { .. })));
    }

    #[test]
    fn too_large_a_snapshot_is_refused_not_cut() {
        // Random-looking text does not compress below the limit.
        let mut text = String::new();
        let mut x: u64 = 1;
        while text.len() < MAX_PART * 2 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            text.push_str(&format!("{x:016x}\n"));
        }
        let (s, src) = set(&[text.as_str()]);
        let snap = snapshot(&s, &src).unwrap();
        let e = config_map(&s, 1, &digest(&snap), &snap).unwrap_err();
        assert_eq!(e.reason(), "RevisionTooLarge");
    }

    fn rev(n: i64, d: &str) -> RolloutRevision {
        RolloutRevision {
            revision: n,
            digest: d.into(),
        }
    }

    #[test]
    fn revisions_are_numbered_after_every_one_known() {
        let p = RolloutStatus {
            phase: RolloutPhase::Progressing,
            from: Some(rev(2, "b")),
            to: rev(3, "c"),
            ..Default::default()
        };
        let k = |n, d: &str| Kept {
            name: d.into(),
            revision: n,
            digest: d.into(),
            parts: vec![],
        };
        assert_eq!(numbered("b", Some(&p), &[]), (2, false));
        assert_eq!(numbered("a", Some(&p), &[k(1, "a")]), (1, false));
        assert_eq!(numbered("z", Some(&p), &[k(7, "x")]), (8, true));
        assert_eq!(numbered("z", None, &[]), (1, true));
        assert_eq!(stable(Some(&p)), Some(rev(2, "b")));
        let done = RolloutStatus {
            phase: RolloutPhase::Completed,
            ..p.clone()
        };
        assert_eq!(stable(Some(&done)), Some(rev(3, "c")));
        let first = RolloutStatus { from: None, ..p };
        assert_eq!(stable(Some(&first)), Some(rev(3, "c")));
        assert_eq!(stable(None), None);
    }
}
