//! Where a TableEntrySet's ownership record lives: ConfigMaps in the set's
//! namespace, owned by the set (ownerReference, so garbage collection
//! removes a forgotten one with its set), written by server-side apply
//! with the operator's one field manager.
//!
//! The head ConfigMap [`head_name`] carries the record's digest and chunk
//! count in annotations and the first chunk of the gzip data
//! (`binaryData["keys.gz"]`). A record larger than [`MAX_CHUNK`] continues
//! in ConfigMaps named after its digest (`<head>.<digest>.<i>`), written
//! before the head: a head always names complete chunks, so a crash
//! between writes leaves the previous record whole. Chunks of a replaced
//! record are deleted after the new head is written.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use p4fleet_crds::TableEntrySet;
use sha2::{Digest, Sha256};

use super::record::{Record, RecordError, split};
use crate::status::FIELD_MANAGER;

/// Most gzip bytes one ConfigMap carries (the API server takes at most
/// 1 MiB of data per ConfigMap; the rest is headroom for metadata).
pub const MAX_CHUNK: usize = 900 * 1024;
/// Label of every record ConfigMap. Entry sources never read these, even
/// when a selector matches them.
pub const RECORD_LABEL: &str = "p4fleet.dev/ownership-record";
const SET_ANNOTATION: &str = "p4fleet.dev/table-entry-set";
const DIGEST_ANNOTATION: &str = "p4fleet.dev/record-digest";
const CHUNKS_ANNOTATION: &str = "p4fleet.dev/record-chunks";
const DATA_KEY: &str = "keys.gz";
const PREFIX: &str = "p4fleet-owned.";
/// Head names stay short enough for `.<digest>.<i>` to fit in 253.
const MAX_HEAD: usize = 230;

/// A record as stored: what it says and where it is.
#[derive(Debug, Default)]
pub struct Stored {
    pub record: Record,
    /// Content address of the stored record; None when there is none.
    pub digest: Option<[u8; 32]>,
    /// How many ConfigMaps hold it (head included).
    pub chunks: usize,
    /// Set when the stored record could not be used as it was (damaged or
    /// deleted behind the operator's back): what stands in for it, until
    /// the next write replaces it ([`super::damage`]).
    pub damage: Option<super::Damage>,
}

/// Why a record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("ownership record {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("ownership record {name} is damaged: {reason}")]
    Damaged { name: String, reason: String },
    #[error(
        "ConfigMap {name} exists but is not an ownership record (no {RECORD_LABEL} label); rename it"
    )]
    NameTaken { name: String },
}

impl StoreError {
    fn api(name: &str) -> impl FnOnce(kube::Error) -> StoreError + '_ {
        move |source| StoreError::Api {
            name: name.to_string(),
            source,
        }
    }

    fn damaged(name: &str, reason: impl std::fmt::Display) -> StoreError {
        StoreError::Damaged {
            name: name.to_string(),
            reason: reason.to_string(),
        }
    }
}

/// Whether a ConfigMap with these labels is an ownership record.
pub fn is_record(labels: Option<&BTreeMap<String, String>>) -> bool {
    labels.is_some_and(|l| l.contains_key(RECORD_LABEL))
}

/// The head ConfigMap's name for set `set`: `p4fleet-owned.<set>`, cut and
/// suffixed with a hash of the full name when that would be too long.
pub fn head_name(set: &str) -> String {
    let full = format!("{PREFIX}{set}");
    if full.len() <= MAX_HEAD {
        return full;
    }
    let hash = hex::encode(&Sha256::digest(set.as_bytes())[..8]);
    let keep = MAX_HEAD - PREFIX.len() - 1 - hash.len();
    let cut = set[..keep].trim_end_matches(['-', '.']);
    format!("{PREFIX}{cut}.{hash}")
}

/// The name of chunk `i` (from 1) of the record with `digest`.
pub fn chunk_name(head: &str, digest: &[u8; 32], i: usize) -> String {
    format!("{head}.{}.{i}", hex::encode(&digest[..6]))
}

/// Reads the set's record; no head is an empty record.
pub async fn load(client: &Client, ns: &str, set: &str) -> Result<Stored, StoreError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let head = head_name(set);
    let Some(cm) = api.get_opt(&head).await.map_err(StoreError::api(&head))? else {
        return Ok(Stored::default());
    };
    if !is_record(cm.metadata.labels.as_ref()) {
        return Err(StoreError::NameTaken { name: head });
    }
    let ann = cm.annotations();
    let digest: [u8; 32] = ann
        .get(DIGEST_ANNOTATION)
        .and_then(|d| hex::decode(d).ok())
        .and_then(|d| d.try_into().ok())
        .ok_or_else(|| StoreError::damaged(&head, format!("no valid {DIGEST_ANNOTATION}")))?;
    let chunks: usize = ann
        .get(CHUNKS_ANNOTATION)
        .and_then(|n| n.parse().ok())
        .filter(|&n| n >= 1)
        .ok_or_else(|| StoreError::damaged(&head, format!("no valid {CHUNKS_ANNOTATION}")))?;
    let mut data = chunk_data(&cm, &head)?;
    for i in 1..chunks {
        let name = chunk_name(&head, &digest, i);
        let cm = api
            .get_opt(&name)
            .await
            .map_err(StoreError::api(&name))?
            .ok_or_else(|| StoreError::damaged(&head, format!("chunk {name} is missing")))?;
        data.extend_from_slice(&chunk_data(&cm, &name)?);
    }
    let (record, found) =
        Record::decode(&data).map_err(|e: RecordError| StoreError::damaged(&head, e))?;
    if found != digest {
        return Err(StoreError::damaged(
            &head,
            "content does not match its digest",
        ));
    }
    Ok(Stored {
        record,
        digest: Some(digest),
        chunks,
        damage: None,
    })
}

/// The digest annotation of the set's head ConfigMap as stored now (a
/// metadata-only read); None when there is no head.
pub async fn head_digest(
    client: &Client,
    ns: &str,
    set: &str,
) -> Result<Option<String>, StoreError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let head = head_name(set);
    let meta = api
        .get_metadata_opt(&head)
        .await
        .map_err(StoreError::api(&head))?;
    Ok(meta.map(|m| {
        m.annotations()
            .get(DIGEST_ANNOTATION)
            .cloned()
            .unwrap_or_default()
    }))
}

fn chunk_data(cm: &ConfigMap, name: &str) -> Result<Vec<u8>, StoreError> {
    cm.binary_data
        .as_ref()
        .and_then(|d| d.get(DATA_KEY))
        .map(|b| b.0.clone())
        .ok_or_else(|| StoreError::damaged(name, format!("no binaryData {DATA_KEY}")))
}

/// Writes `record` for `set` in place of `prev` (nothing when the content
/// is the same) and returns what is stored now.
pub async fn save(
    client: &Client,
    set: &TableEntrySet,
    prev: &Stored,
    record: Record,
) -> Result<Stored, StoreError> {
    let encoded = record.encode();
    let digest = Record::digest(&encoded);
    if prev.digest == Some(digest) && prev.damage.is_none() {
        return Ok(Stored {
            record,
            digest: Some(digest),
            chunks: prev.chunks,
            damage: None,
        });
    }
    let ns = set.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let head = head_name(&set.name_any());
    let gz = Record::compress(&encoded);
    let parts = split(&gz, MAX_CHUNK);
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    // Continuation chunks first: the head must never name a missing one.
    for (i, part) in parts.iter().enumerate().skip(1) {
        let name = chunk_name(&head, &digest, i);
        let cm = object(set, &name, &digest, None, part);
        api.patch(&name, &apply, &Patch::Apply(&cm))
            .await
            .map_err(StoreError::api(&name))?;
    }
    let cm = object(set, &head, &digest, Some(parts.len()), parts[0]);
    api.patch(&head, &apply, &Patch::Apply(&cm))
        .await
        .map_err(StoreError::api(&head))?;
    if let Some(old) = &prev.digest {
        delete_chunks(&api, &head, old, prev.chunks).await?;
    }
    Ok(Stored {
        record,
        digest: Some(digest),
        chunks: parts.len(),
        damage: None,
    })
}

/// Deletes the set's record (head and chunks); a missing one is fine.
pub async fn delete(client: &Client, ns: &str, set: &str, prev: &Stored) -> Result<(), StoreError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let head = head_name(set);
    if prev.digest.is_none() && prev.damage.is_none() {
        return Ok(());
    }
    // A damaged head is deleted too; chunks it may name are owned by the
    // set and go with it (garbage collection).
    delete_one(&api, &head).await?;
    if let Some(d) = &prev.digest {
        delete_chunks(&api, &head, d, prev.chunks).await?;
    }
    Ok(())
}

async fn delete_chunks(
    api: &Api<ConfigMap>,
    head: &str,
    digest: &[u8; 32],
    chunks: usize,
) -> Result<(), StoreError> {
    for i in 1..chunks {
        delete_one(api, &chunk_name(head, digest, i)).await?;
    }
    Ok(())
}

async fn delete_one(api: &Api<ConfigMap>, name: &str) -> Result<(), StoreError> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(e) => Err(StoreError::api(name)(e)),
    }
}

/// One record ConfigMap: the head (with `chunks`) or a continuation.
fn object(
    set: &TableEntrySet,
    name: &str,
    digest: &[u8; 32],
    chunks: Option<usize>,
    data: &[u8],
) -> ConfigMap {
    let mut annotations = BTreeMap::from([
        (SET_ANNOTATION.to_string(), set.name_any()),
        (DIGEST_ANNOTATION.to_string(), hex::encode(digest)),
    ]);
    if let Some(n) = chunks {
        annotations.insert(CHUNKS_ANNOTATION.to_string(), n.to_string());
    }
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([
                (RECORD_LABEL.to_string(), "v1".to_string()),
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "p4fleet".to_string(),
                ),
            ])),
            annotations: Some(annotations),
            owner_references: set.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            DATA_KEY.to_string(),
            ByteString(data.to_vec()),
        )])),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_for_any_set_name() {
        assert_eq!(head_name("fw"), "p4fleet-owned.fw");
        let long = format!("{}-x", "a".repeat(250));
        let h = head_name(&long);
        assert!(h.len() <= MAX_HEAD, "{}", h.len());
        assert_ne!(h, head_name(&format!("{}-y", "a".repeat(250))));
        // A cut that would end in '-' or '.' is trimmed to stay DNS-valid.
        let dashy = format!(
            "{}{}",
            "a".repeat(MAX_HEAD - PREFIX.len() - 18),
            "-".repeat(40)
        );
        let h = head_name(&dashy);
        assert!(!h.contains("-."), "{h}");
        let c = chunk_name(&h, &[0xab; 32], 12);
        assert!(c.len() <= 253 && c.ends_with(".abababababab.12"), "{c}");
    }

    #[test]
    fn records_are_owned_by_their_set_and_marked() {
        let set: TableEntrySet = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": "fw", "namespace": "ns", "uid": "u-1"},
            "spec": {"virtualSwitchRef": "v", "table": "t"}
        }))
        .unwrap();
        let cm = object(&set, "p4fleet-owned.fw", &[1; 32], Some(2), b"gz");
        assert!(is_record(cm.metadata.labels.as_ref()));
        let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("TableEntrySet", "u-1")
        );
        assert_eq!(cm.annotations()[CHUNKS_ANNOTATION], "2");
        let v = serde_json::to_value(&cm).unwrap();
        assert_eq!(v["kind"], "ConfigMap");
        assert_eq!(v["binaryData"][DATA_KEY], "Z3o=");
        assert!(!is_record(None));
    }
}
