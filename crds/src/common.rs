//! Types shared by several resources: conditions, references, artifact sources.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Condition types every resource reports.
pub mod condition_types {
    /// The resource is fully realised on its targets.
    pub const READY: &str = "Ready";
    /// The spec passed validation against its program and references.
    pub const VALID: &str = "Valid";
    /// The device answered on its endpoint.
    pub const REACHABLE: &str = "Reachable";
    /// The device accepts this operator as the controller of the Switch's
    /// device id (P4Runtime primary, BFRT subscribed).
    pub const PRIMARY: &str = "Primary";
    /// The pipeline is loaded on the device.
    pub const PIPELINE_LOADED: &str = "PipelineLoaded";
    /// A VirtualSwitch was placed on a Switch slot.
    pub const SCHEDULED: &str = "Scheduled";
    /// All desired entries are on every target.
    pub const SYNCED: &str = "Synced";
    /// A reference (program, switch, ConfigMap, Secret) could not be resolved.
    pub const RESOLVED_REFS: &str = "ResolvedRefs";
}

/// A Kubernetes-style condition. The list is a map keyed by `type`, so
/// server-side apply merges conditions written by different reconciles.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition, e.g. Ready.
    #[serde(rename = "type")]
    pub type_: String,
    /// Status of the condition.
    pub status: ConditionStatus,
    /// Machine-readable reason in CamelCase.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable message naming what is wrong and where.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Last time the status changed (RFC 3339).
    pub last_transition_time: Option<String>,
    /// Generation of the spec this condition was computed from.
    pub observed_generation: Option<i64>,
}

/// Status of a condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

impl Condition {
    /// A condition with the given type, status, reason and message.
    pub fn new(type_: &str, ok: bool, reason: &str, message: impl Into<String>) -> Self {
        Condition {
            type_: type_.to_string(),
            status: if ok {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            },
            reason: reason.to_string(),
            message: message.into(),
            last_transition_time: None,
            observed_generation: None,
        }
    }

    /// A condition whose status is not known yet (a prerequisite is
    /// missing), with the reason and message saying which.
    pub fn unknown(type_: &str, reason: &str, message: impl Into<String>) -> Self {
        Condition {
            status: ConditionStatus::Unknown,
            ..Condition::new(type_, false, reason, message)
        }
    }

    /// Whether the condition is True.
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// Finds a condition of the given type.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// A key of a ConfigMap in the resource's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyRef {
    /// Name of the ConfigMap.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the ConfigMap's data (or binaryData for binary artifacts).
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// An artifact given inline, read from a ConfigMap key, or downloaded from
/// a URL pinned by its sha256; exactly one is set.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.inline) ? 1 : 0) + (has(self.configMapKeyRef) ? 1 : 0) + (has(self.url) ? 1 : 0) == 1",
    "message": "exactly one of inline, configMapKeyRef or url must be set"
}]))]
pub struct ArtifactSource {
    /// The artifact's content, inline (text artifacts only).
    pub inline: Option<String>,
    /// A ConfigMap key that holds the artifact (data for text, binaryData for binary).
    pub config_map_key_ref: Option<ConfigMapKeyRef>,
    /// An artifact downloaded over HTTP(S) and accepted only when its
    /// sha256 matches (for artifacts larger than a ConfigMap's 1 MiB).
    pub url: Option<UrlSource>,
}

/// An artifact at an HTTP(S) URL, pinned by the sha256 of its bytes: the
/// operator downloads it, checks the digest and uses nothing else.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UrlSource {
    /// Where the artifact is: an `http://` or `https://` URL (redirects
    /// are followed; headers are sent only to the URL's own host).
    #[schemars(
        length(min = 8, max = 2048),
        regex(pattern = r"^https?://[^\s/]+(/\S*)?$")
    )]
    pub url: String,
    /// The sha256 of the artifact's bytes, 64 lowercase hex digits
    /// (`sha256sum FILE`).
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub sha256: String,
    /// A Secret in the program's namespace whose `ca.crt` holds the PEM
    /// CA certificate(s) an `https://` server must chain to (default: the
    /// system's trust store).
    pub ca_secret_ref: Option<LocalSecretRef>,
    /// A Secret in the program's namespace whose keys are HTTP header
    /// names and values their values, e.g. `Authorization: Bearer TOKEN`.
    pub headers_secret_ref: Option<LocalSecretRef>,
}

/// A Secret in the referring resource's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalSecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A Secret reference; Switch is cluster-scoped, so the namespace is explicit.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the Secret.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
}

/// A label selector (matchLabels only keeps the schema simple and structural).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    /// Labels that must all match.
    #[serde(default)]
    pub match_labels: std::collections::BTreeMap<String, String>,
}

impl Selector {
    /// Whether the given labels satisfy this selector.
    pub fn matches(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// Schema attribute helper: marks `conditions` as a list-map keyed by type.
pub(crate) fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<Condition>>();
    let obj = schema.ensure_object();
    obj.insert("x-kubernetes-list-type".into(), "map".into());
    obj.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}
