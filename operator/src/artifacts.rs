//! P4Program artifacts: where each source is (inline, a ConfigMap key or
//! a URL pinned by its sha256: [`fetch`], [`url_source`]), reading them
//! ([`resolve`]), the one place a program's P4Info is parsed
//! ([`Resolved::p4info`], [`p4info`]), and the program's identity derived
//! from its bytes ([`Resolved::digest`], [`cookie`], [`short_digest`]).
//!
//! Sources are keyed by their field path ([`field`]), so every message
//! about one names the field a user has to fix.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use p4fleet_crds::{ArtifactSource, P4ProgramSpec};
use p4fleet_proto::p4info::{self, P4Info};
use sha2::{Digest, Sha256};

use crate::reads::Reads;

pub mod digest_cache;
pub mod fetch;
pub mod url_source;

/// Field paths of a P4Program's sources.
pub mod field {
    pub const P4INFO: &str = "spec.p4info";
    pub const BMV2_JSON: &str = "spec.artifacts.bmv2.json";
    pub const TOFINO_BFRT_JSON: &str = "spec.artifacts.tofino.bfrtJson";
    pub const TOFINO_CONTEXT_JSON: &str = "spec.artifacts.tofino.contextJson";
    pub const TOFINO_BINARY: &str = "spec.artifacts.tofino.binary";
    pub const DPDK_SPEC: &str = "spec.artifacts.dpdk.spec";
    pub const DPDK_CONTEXT: &str = "spec.artifacts.dpdk.context";
    pub const DPDK_BFRT_JSON: &str = "spec.artifacts.dpdk.bfrtJson";
    pub const FPGA_BITSTREAM: &str = "spec.artifacts.fpga.bitstream";

    /// Every field path, P4Info first.
    pub const ALL: [&str; 9] = [
        P4INFO,
        BMV2_JSON,
        TOFINO_BFRT_JSON,
        TOFINO_CONTEXT_JSON,
        TOFINO_BINARY,
        DPDK_SPEC,
        DPDK_CONTEXT,
        DPDK_BFRT_JSON,
        FPGA_BITSTREAM,
    ];

    /// The field path spelled `name` (as a revision's snapshot records it).
    pub fn by_name(name: &str) -> Option<&'static str> {
        ALL.into_iter().find(|f| *f == name)
    }
}

/// Every artifact source of a spec with the field path that names it, P4Info first.
pub fn sources(spec: &P4ProgramSpec) -> Vec<(&'static str, &ArtifactSource)> {
    let a = &spec.artifacts;
    let mut out = vec![(field::P4INFO, &spec.p4info)];
    if let Some(b) = &a.bmv2 {
        out.push((field::BMV2_JSON, &b.json));
    }
    if let Some(t) = &a.tofino {
        out.push((field::TOFINO_BFRT_JSON, &t.bfrt_json));
        if let Some(c) = &t.context_json {
            out.push((field::TOFINO_CONTEXT_JSON, c));
        }
        if let Some(b) = &t.binary {
            out.push((field::TOFINO_BINARY, b));
        }
    }
    if let Some(d) = &a.dpdk {
        out.push((field::DPDK_SPEC, &d.spec));
        if let Some(c) = &d.context {
            out.push((field::DPDK_CONTEXT, c));
        }
        if let Some(b) = &d.bfrt_json {
            out.push((field::DPDK_BFRT_JSON, b));
        }
    }
    if let Some(f) = &a.fpga {
        out.push((field::FPGA_BITSTREAM, &f.bitstream));
    }
    out
}

/// Names of the ConfigMaps a program reads.
pub fn referenced_config_maps(spec: &P4ProgramSpec) -> HashSet<String> {
    sources(spec)
        .into_iter()
        .filter_map(|(_, s)| s.config_map_key_ref.as_ref().map(|r| r.name.clone()))
        .collect()
}

/// Target kinds a program has artifacts for, e.g. `Bmv2,Dpdk` (P4Info only: `P4Info`).
pub fn target_kinds(spec: &P4ProgramSpec) -> String {
    let a = &spec.artifacts;
    let t: Vec<&str> = [
        (a.bmv2.is_some(), "Bmv2"),
        (a.tofino.is_some(), "Tofino"),
        (a.dpdk.is_some(), "Dpdk"),
        (a.fpga.is_some(), "Fpga"),
    ]
    .into_iter()
    .filter_map(|(has, n)| has.then_some(n))
    .collect();
    if t.is_empty() {
        "P4Info".into()
    } else {
        t.join(",")
    }
}

/// Why a source could not be read; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    #[error("{field}: ConfigMap {name} not found")]
    ConfigMapNotFound { field: &'static str, name: String },
    #[error("{field}: ConfigMap {name} has no key {key:?}")]
    KeyNotFound {
        field: &'static str,
        name: String,
        key: String,
    },
    #[error("{field}: none of inline, configMapKeyRef or url is set")]
    NoSource { field: &'static str },
    /// A `url` source gave no (matching) bytes.
    #[error("{field}.url: {error}")]
    Url {
        field: &'static str,
        error: url_source::FetchError,
    },
}

impl SourceError {
    /// The condition reason a user acts on.
    pub fn reason(&self) -> &'static str {
        match self {
            SourceError::Url { error, .. } => error.reason(),
            _ => "SourceNotFound",
        }
    }
}

/// Why a program's P4Info is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum P4InfoError {
    /// The source could not be read (a reference problem, not a bad P4Info).
    #[error(transparent)]
    Unreadable(#[from] SourceError),
    /// The sources were resolved without it (a caller's mistake).
    #[error("{}: not resolved", field::P4INFO)]
    NotResolved,
    #[error("{}: cannot parse: {reason}", field::P4INFO)]
    Unparsable { reason: String },
}

/// A program's sources, read: field path → content, or why it could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved(BTreeMap<&'static str, Result<Vec<u8>, SourceError>>);

impl Resolved {
    pub fn insert(&mut self, field: &'static str, value: Result<Vec<u8>, SourceError>) {
        self.0.insert(field, value);
    }

    /// The source at `field`: None when the program has no such source.
    pub fn get(&self, field: &str) -> Option<&Result<Vec<u8>, SourceError>> {
        self.0.get(field)
    }

    /// The sources that could not be read, in field order.
    pub fn problems(&self) -> impl Iterator<Item = &SourceError> {
        self.0.values().filter_map(|r| r.as_ref().err())
    }

    /// The digest of the sources that could be read (see [`digest`]).
    pub fn digest(&self) -> String {
        let parts: Vec<(&str, &[u8])> = self
            .0
            .iter()
            .filter_map(|(k, v)| v.as_ref().ok().map(|b| (*k, b.as_slice())))
            .collect();
        digest(&parts)
    }

    /// The P4Info, parsed from its text format. The one place p4fleet
    /// turns a program's P4Info bytes into a P4Info.
    pub fn p4info(&self) -> Result<P4Info, P4InfoError> {
        Self::parse_p4info(self.p4info_bytes()?)
    }

    /// The P4Info's text as resolved.
    fn p4info_bytes(&self) -> Result<&[u8], P4InfoError> {
        match self.get(field::P4INFO) {
            None => Err(P4InfoError::NotResolved),
            Some(Err(e)) => Err(e.clone().into()),
            Some(Ok(b)) => Ok(b),
        }
    }

    fn parse_p4info(bytes: &[u8]) -> Result<P4Info, P4InfoError> {
        let text = std::str::from_utf8(bytes).map_err(|e| P4InfoError::Unparsable {
            reason: e.to_string(),
        })?;
        p4info::parse_text(text).map_err(|e| P4InfoError::Unparsable {
            reason: e.to_string(),
        })
    }
}

impl FromIterator<(&'static str, Result<Vec<u8>, SourceError>)> for Resolved {
    fn from_iter<I: IntoIterator<Item = (&'static str, Result<Vec<u8>, SourceError>)>>(
        iter: I,
    ) -> Self {
        Resolved(iter.into_iter().collect())
    }
}

/// Reads every source of `spec`, inline or from ConfigMaps in `ns`
/// (`data` first, then `binaryData`).
pub async fn resolve(
    reads: &impl Reads,
    ns: &str,
    spec: &P4ProgramSpec,
) -> Result<Resolved, kube::Error> {
    resolve_sources(reads, ns, sources(spec)).await
}

/// Reads only the P4Info of `spec` (for users of a program's tables,
/// which need none of its other artifacts), parsed once per text
/// (`parsed`).
pub async fn p4info(
    reads: &impl Reads,
    parsed: &ParsedP4Infos,
    ns: &str,
    spec: &P4ProgramSpec,
) -> Result<Result<Arc<P4Info>, P4InfoError>, kube::Error> {
    let only = vec![(field::P4INFO, &spec.p4info)];
    Ok(parsed.of(&resolve_sources(reads, ns, only).await?))
}

/// P4Infos parsed from their text, kept by the text's SHA-256: every sync
/// of every set looks up its tables' schemas, and parsing the text each
/// time was 2 % of an idle round's operator CPU at 1,000 Switches
/// (docs/dev/fleet-lab-notes.md). A text that
/// does not parse is not kept (its error is given again).
#[derive(Default)]
pub struct ParsedP4Infos {
    kept: std::sync::Mutex<std::collections::HashMap<[u8; 32], Arc<P4Info>>>,
    /// The P4Info of program revisions read from their snapshots, by
    /// `namespace/program/digest`: a revision is immutable, so one read
    /// serves every later sync.
    revisions: std::sync::Mutex<std::collections::HashMap<String, Arc<P4Info>>>,
}

impl ParsedP4Infos {
    /// Texts kept at most; past it the oldest are not told apart from the
    /// others, all are dropped (programs change rarely).
    const KEEP: usize = 64;

    /// The P4Info of `resolved`, parsed unless its text was parsed before.
    pub fn of(&self, resolved: &Resolved) -> Result<Arc<P4Info>, P4InfoError> {
        let bytes = resolved.p4info_bytes()?;
        let digest: [u8; 32] = Sha256::digest(bytes).into();
        let lock = || self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(info) = lock().get(&digest) {
            return Ok(info.clone());
        }
        let info = Arc::new(Resolved::parse_p4info(bytes)?);
        let mut kept = lock();
        if kept.len() >= Self::KEEP {
            kept.clear();
        }
        kept.insert(digest, info.clone());
        Ok(info)
    }

    /// The P4Info of revision `digest` of program `ns/program`, if read
    /// before ([`ParsedP4Infos::keep_revision`]).
    pub fn of_revision(&self, ns: &str, program: &str, digest: &str) -> Option<Arc<P4Info>> {
        let kept = self.revisions.lock().unwrap_or_else(|e| e.into_inner());
        kept.get(&format!("{ns}/{program}/{digest}")).cloned()
    }

    /// Keeps the P4Info of revision `digest` of program `ns/program`.
    pub fn keep_revision(&self, ns: &str, program: &str, digest: &str, info: Arc<P4Info>) {
        let mut kept = self.revisions.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= Self::KEEP {
            kept.clear();
        }
        kept.insert(format!("{ns}/{program}/{digest}"), info);
    }

    /// How many texts are kept.
    pub fn kept(&self) -> usize {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

async fn resolve_sources(
    reads: &impl Reads,
    ns: &str,
    sources: Vec<(&'static str, &ArtifactSource)>,
) -> Result<Resolved, kube::Error> {
    // One read per ConfigMap, however many sources it holds.
    let mut cms: BTreeMap<String, Option<ConfigMap>> = BTreeMap::new();
    let mut out = Resolved::default();
    for (field, src) in sources {
        let value = match (&src.inline, &src.config_map_key_ref, &src.url) {
            (Some(text), _, _) => Ok(text.clone().into_bytes()),
            (None, None, Some(u)) => reads
                .artifact(ns, u)
                .await?
                .map_err(|error| SourceError::Url { field, error }),
            (None, Some(r), _) => {
                if !cms.contains_key(&r.name) {
                    cms.insert(r.name.clone(), reads.config_map(ns, &r.name).await?);
                }
                match &cms[&r.name] {
                    None => Err(SourceError::ConfigMapNotFound {
                        field,
                        name: r.name.clone(),
                    }),
                    Some(cm) => {
                        config_map_key(cm, &r.key).ok_or_else(|| SourceError::KeyNotFound {
                            field,
                            name: r.name.clone(),
                            key: r.key.clone(),
                        })
                    }
                }
            }
            (None, None, None) => Err(SourceError::NoSource { field }),
        };
        out.insert(field, value);
    }
    Ok(out)
}

fn config_map_key(cm: &ConfigMap, key: &str) -> Option<Vec<u8>> {
    if let Some(v) = cm.data.as_ref().and_then(|d| d.get(key)) {
        return Some(v.clone().into_bytes());
    }
    cm.binary_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
}

/// sha256 (hex) over every source, each framed by its field path and length,
/// so moving bytes between artifacts changes the digest.
pub fn digest(parts: &[(&str, &[u8])]) -> String {
    let mut h = Sha256::new();
    for (field, bytes) in parts {
        h.update((field.len() as u64).to_be_bytes());
        h.update(field.as_bytes());
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    }
    hex::encode(h.finalize())
}

/// The pipeline cookie for a digest: its first 8 bytes, big-endian.
pub fn cookie(digest_hex: &str) -> u64 {
    let mut b = [0u8; 8];
    if let Some(Ok(bytes)) = digest_hex.get(..16).map(hex::decode) {
        b.copy_from_slice(&bytes);
    }
    u64::from_be_bytes(b)
}

/// First 12 hex digits of a digest.
pub fn short_digest(d: &str) -> String {
    d.chars().take(12).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reads::fixture::Cluster;
    use p4fleet_crds::ConfigMapKeyRef;
    use p4fleet_crds::{ProgramArtifacts, TofinoArtifacts};

    const FIREWALL: &str = include_str!("../../examples/firewall/p4info.txt");

    fn from_cm(name: &str, key: &str) -> ArtifactSource {
        ArtifactSource {
            inline: None,
            config_map_key_ref: Some(ConfigMapKeyRef {
                name: name.into(),
                key: key.into(),
            }),
            url: None,
        }
    }

    fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn sources_resolve_inline_and_from_config_maps_naming_the_field() {
        let spec = P4ProgramSpec {
            p4info: from_cm("fw", "p4info.txt"),
            artifacts: ProgramArtifacts {
                tofino: Some(TofinoArtifacts {
                    bfrt_json: from_cm("fw", "bfrt.json"),
                    context_json: Some(from_cm("gone", "context.json")),
                    binary: Some(ArtifactSource {
                        inline: Some("bin".into()),
                        ..Default::default()
                    }),
                    pipes: vec![],
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let cluster = Cluster {
            config_maps: vec![config_map("fw", &[("p4info.txt", FIREWALL)])],
            ..Default::default()
        };
        let r = resolve(&cluster, "ns", &spec).await.unwrap();
        assert!(r.p4info().is_ok());
        assert_eq!(
            r.get(field::TOFINO_BINARY),
            Some(&Ok(b"bin".to_vec())),
            "inline sources need no ConfigMap"
        );
        let problems: Vec<String> = r.problems().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "spec.artifacts.tofino.bfrtJson: ConfigMap fw has no key \"bfrt.json\"",
                "spec.artifacts.tofino.contextJson: ConfigMap gone not found",
            ]
        );
        assert_eq!(
            referenced_config_maps(&spec),
            HashSet::from(["fw".to_string(), "gone".to_string()])
        );
        assert_eq!(target_kinds(&spec), "Tofino");

        // The P4Info alone needs only its own ConfigMap.
        let empty = Cluster::default();
        let parsed = ParsedP4Infos::default();
        assert_eq!(
            p4info(&empty, &parsed, "ns", &spec)
                .await
                .unwrap()
                .unwrap_err(),
            P4InfoError::Unreadable(SourceError::ConfigMapNotFound {
                field: field::P4INFO,
                name: "fw".into()
            })
        );
        // Parsed once per text, then shared.
        let first = p4info(&cluster, &parsed, "ns", &spec).await.unwrap();
        let again = p4info(&cluster, &parsed, "ns", &spec).await.unwrap();
        assert!(Arc::ptr_eq(&first.unwrap(), &again.unwrap()));
        assert_eq!(parsed.kept(), 1);
        // A text that does not parse is not kept.
        let broken: Resolved = [(field::P4INFO, Ok(b"tables { id: ".to_vec()))]
            .into_iter()
            .collect();
        assert!(matches!(
            parsed.of(&broken),
            Err(P4InfoError::Unparsable { .. })
        ));
        assert_eq!(parsed.kept(), 1);
    }

    #[tokio::test]
    async fn url_sources_give_the_digest_of_their_bytes_only_when_they_match() {
        let json = b"{\"program\": \"big\"}".to_vec();
        let sha = hex::encode(Sha256::digest(&json));
        let url = |u: &str, sha: &str| ArtifactSource {
            url: Some(p4fleet_crds::UrlSource {
                url: u.into(),
                sha256: sha.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let spec = |json: ArtifactSource| P4ProgramSpec {
            p4info: ArtifactSource {
                inline: Some(FIREWALL.into()),
                ..Default::default()
            },
            artifacts: ProgramArtifacts {
                bmv2: Some(p4fleet_crds::Bmv2Artifacts { json }),
                ..Default::default()
            },
            ..Default::default()
        };
        let cluster = Cluster {
            artifacts: vec![("https://h/a.json".into(), json.clone())],
            ..Default::default()
        };
        let from_url = resolve(&cluster, "ns", &spec(url("https://h/a.json", &sha)))
            .await
            .unwrap();
        let inline = ArtifactSource {
            inline: Some(String::from_utf8(json.clone()).unwrap()),
            ..Default::default()
        };
        let from_inline = resolve(&cluster, "ns", &spec(inline)).await.unwrap();
        assert_eq!(
            from_url.digest(),
            from_inline.digest(),
            "the same bytes give the same digest, wherever they come from"
        );

        let wrong = "0".repeat(64);
        let r = resolve(&cluster, "ns", &spec(url("https://h/a.json", &wrong)))
            .await
            .unwrap();
        let e = r.problems().next().unwrap();
        assert_eq!(e.reason(), "ArtifactDigestMismatch");
        assert!(
            e.to_string().starts_with(&format!(
                "spec.artifacts.bmv2.json.url: h: digest mismatch: spec says sha256 {wrong}, the downloaded 18 bytes have {sha}"
            )),
            "{e}"
        );
        let r = resolve(&cluster, "ns", &spec(url("https://h/gone.json", &sha)))
            .await
            .unwrap();
        let e = r.problems().next().unwrap();
        assert_eq!(e.reason(), "ArtifactFetchFailed");
        assert_eq!(
            e.to_string(),
            "spec.artifacts.bmv2.json.url: h answered HTTP 404"
        );
        assert!(referenced_config_maps(&spec(url("https://h/a.json", &sha))).is_empty());
    }

    #[test]
    fn p4info_errors_say_what_is_wrong() {
        let mut r = Resolved::default();
        assert_eq!(r.p4info().unwrap_err(), P4InfoError::NotResolved);
        r.insert(field::P4INFO, Ok(vec![0xff, 0xfe]));
        assert!(matches!(r.p4info(), Err(P4InfoError::Unparsable { .. })));
        r.insert(
            field::P4INFO,
            Ok(b"tables { preamble { id: oops } }".to_vec()),
        );
        let e = r.p4info().unwrap_err();
        assert!(
            e.to_string().starts_with("spec.p4info: cannot parse: "),
            "{e}"
        );
        r.insert(
            field::P4INFO,
            Err(SourceError::NoSource {
                field: field::P4INFO,
            }),
        );
        assert_eq!(
            r.p4info().unwrap_err().to_string(),
            "spec.p4info: none of inline, configMapKeyRef or url is set"
        );
    }

    #[test]
    fn digest_frames_parts_and_cookie_takes_its_prefix() {
        let a = digest(&[("spec.p4info", b"ab"), ("x", b"c")]);
        let b = digest(&[("spec.p4info", b"a"), ("x", b"bc")]);
        assert_ne!(a, b);
        assert_eq!(a, digest(&[("spec.p4info", b"ab"), ("x", b"c")]));
        assert_eq!(cookie("0000000000000102ffff"), 0x0102);
        assert_eq!(cookie("zz"), 0);
        assert_eq!(short_digest(&a).len(), 12);

        // Unreadable sources are left out of a Resolved's digest.
        let mut r = Resolved::default();
        r.insert(field::P4INFO, Ok(b"ab".to_vec()));
        r.insert(
            field::BMV2_JSON,
            Err(SourceError::NoSource {
                field: field::BMV2_JSON,
            }),
        );
        assert_eq!(r.digest(), digest(&[("spec.p4info", b"ab")]));
    }
}
