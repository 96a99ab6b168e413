//! P4Program reconciler: resolve the P4Info and artifacts (inline or
//! ConfigMaps), validate the P4Info and list its tables and actions in
//! status (both [`p4fleet_model::p4info`]), compute the digest.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::{Action, Controller};
use kube::{Api, ResourceExt};
use p4fleet_crds::condition_types::{RESOLVED_REFS, VALID};
use p4fleet_crds::{
    ArtifactSource, Condition, P4Program, P4ProgramSpec, P4ProgramStatus, TableInfo,
};
use p4fleet_model::p4info as model_p4info;
use p4fleet_proto::p4info;
use sha2::{Digest, Sha256};

use super::{Error, referrers, scoped_api, watcher_config, write_status};
use crate::context::Context;
use crate::status::{merge_conditions, now_rfc3339, ready_from};

/// Watches P4Programs and the ConfigMaps they reference.
pub fn controller(ctx: &Context) -> Controller<P4Program> {
    let c = Controller::new(scoped_api::<P4Program>(ctx), watcher_config());
    let store = c.store();
    c.watches(
        scoped_api::<ConfigMap>(ctx),
        watcher_config(),
        referrers(store, |p: &P4Program, cm: &ConfigMap| {
            p.namespace() == cm.namespace()
                && referenced_config_maps(&p.spec).contains(&cm.name_any())
        }),
    )
}

/// Names of the ConfigMaps a program reads.
pub fn referenced_config_maps(spec: &P4ProgramSpec) -> HashSet<String> {
    sources(spec)
        .into_iter()
        .filter_map(|(_, s)| s.config_map_key_ref.as_ref().map(|r| r.name.clone()))
        .collect()
}

/// Every artifact source of a spec with the field path that names it, P4Info first.
pub fn sources(spec: &P4ProgramSpec) -> Vec<(&'static str, &ArtifactSource)> {
    let a = &spec.artifacts;
    let mut out = vec![("spec.p4info", &spec.p4info)];
    if let Some(b) = &a.bmv2 {
        out.push(("spec.artifacts.bmv2.json", &b.json));
    }
    if let Some(t) = &a.tofino {
        out.push(("spec.artifacts.tofino.bfrtJson", &t.bfrt_json));
        if let Some(c) = &t.context_json {
            out.push(("spec.artifacts.tofino.contextJson", c));
        }
        if let Some(b) = &t.binary {
            out.push(("spec.artifacts.tofino.binary", b));
        }
    }
    if let Some(d) = &a.dpdk {
        out.push(("spec.artifacts.dpdk.spec", &d.spec));
        if let Some(c) = &d.context {
            out.push(("spec.artifacts.dpdk.context", c));
        }
    }
    if let Some(f) = &a.fpga {
        out.push(("spec.artifacts.fpga.bitstream", &f.bitstream));
    }
    out
}

/// Target kinds a program has artifacts for, e.g. `Bmv2,Dpdk` (P4Info only: `P4Info`).
pub fn targets(spec: &P4ProgramSpec) -> String {
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

/// Resolved sources: field path → content, or why it could not be read.
pub type Resolved = BTreeMap<&'static str, Result<Vec<u8>, String>>;

/// Reads every source of `spec`, inline or from ConfigMaps in `ns`
/// (`data` first, then `binaryData`).
pub async fn resolve(
    client: &kube::Client,
    ns: &str,
    spec: &P4ProgramSpec,
) -> Result<Resolved, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let mut cms: BTreeMap<String, Option<ConfigMap>> = BTreeMap::new();
    let mut out = Resolved::new();
    for (field, src) in sources(spec) {
        let value = match (&src.inline, &src.config_map_key_ref) {
            (Some(text), _) => Ok(text.clone().into_bytes()),
            (None, Some(r)) => {
                if !cms.contains_key(&r.name) {
                    cms.insert(r.name.clone(), api.get_opt(&r.name).await?);
                }
                match &cms[&r.name] {
                    None => Err(format!("{field}: ConfigMap {} not found", r.name)),
                    Some(cm) => config_map_key(cm, &r.key).ok_or_else(|| {
                        format!("{field}: ConfigMap {} has no key {:?}", r.name, r.key)
                    }),
                }
            }
            (None, None) => Err(format!(
                "{field}: neither inline nor configMapKeyRef is set"
            )),
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

/// A table of the model's P4Info summary as status lists it.
fn table_info(t: p4fleet_model::p4info::TableSummary) -> TableInfo {
    TableInfo {
        name: t.name,
        id: t.id,
        size: t.size,
        match_fields: t.match_fields,
        actions: t.actions,
    }
}

/// The pure middle of a reconcile: resolved sources in, status body out
/// (conditions not yet merged with the old ones).
pub fn build_status(spec: &P4ProgramSpec, resolved: &Resolved) -> P4ProgramStatus {
    let mut st = P4ProgramStatus {
        targets: Some(targets(spec)),
        ..Default::default()
    };
    let unresolved: Vec<&str> = resolved
        .values()
        .filter_map(|r| r.as_ref().err().map(String::as_str))
        .collect();
    let refs = if unresolved.is_empty() {
        Condition::new(RESOLVED_REFS, true, "Resolved", "all sources resolved")
    } else {
        Condition::new(
            RESOLVED_REFS,
            false,
            "SourceNotFound",
            unresolved.join("; "),
        )
    };
    let valid = match resolved.get("spec.p4info") {
        Some(Ok(bytes)) => match std::str::from_utf8(bytes)
            .map_err(|e| e.to_string())
            .and_then(|t| p4info::parse_text(t).map_err(|e| e.to_string()))
        {
            Err(e) => Condition::new(
                VALID,
                false,
                "InvalidP4Info",
                format!("spec.p4info: cannot parse: {e}"),
            ),
            Ok(p) => {
                let problems = model_p4info::validate(&p);
                st.tables = model_p4info::tables(&p)
                    .into_iter()
                    .map(table_info)
                    .collect();
                st.table_count = Some(st.tables.len() as u32);
                st.actions = model_p4info::action_names(&p);
                if problems.is_empty() {
                    Condition::new(
                        VALID,
                        true,
                        "Valid",
                        format!("{} tables, {} actions", st.tables.len(), st.actions.len()),
                    )
                } else {
                    Condition::new(
                        VALID,
                        false,
                        "InvalidP4Info",
                        format!(
                            "spec.p4info: {}",
                            problems
                                .iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                                .join("; ")
                        ),
                    )
                }
            }
        },
        _ => Condition::unknown(VALID, "SourcesUnresolved", "spec.p4info could not be read"),
    };
    if refs.is_true() && valid.is_true() {
        let parts: Vec<(&str, &[u8])> = resolved
            .iter()
            .filter_map(|(k, v)| v.as_ref().ok().map(|b| (*k, b.as_slice())))
            .collect();
        let d = digest(&parts);
        st.short_digest = Some(short_digest(&d));
        st.digest = Some(d);
    }
    let ready = ready_from(
        &[&refs, &valid],
        "Ready",
        "program is valid and its sources resolved",
    );
    st.conditions = vec![valid, refs, ready];
    st
}

pub async fn reconcile(obj: Arc<P4Program>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = obj
        .namespace()
        .ok_or(Error::MissingObjectKey("namespace"))?;
    let resolved = resolve(&ctx.client, &ns, &obj.spec).await?;
    let mut new = build_status(&obj.spec, &resolved);
    let old = obj.status.as_ref();
    let old_conditions = old.map(|s| s.conditions.as_slice()).unwrap_or_default();
    new.observed_generation = obj.metadata.generation;
    new.conditions = merge_conditions(
        old_conditions,
        new.conditions,
        obj.metadata.generation,
        &now_rfc3339(),
    );
    let api: Api<P4Program> = Api::namespaced(ctx.client.clone(), &ns);
    let old_digest = old.and_then(|s| s.digest.clone());
    let wrote = write_status(
        &ctx,
        &api,
        obj.as_ref(),
        old,
        &new,
        old_conditions,
        &new.conditions,
    )
    .await?;
    if wrote && new.digest.is_some() && new.digest != old_digest {
        ctx.events
            .publish(
                obj.as_ref(),
                false,
                "DigestChanged",
                "Digest",
                format!(
                    "pipeline digest is now {} ({} tables)",
                    new.short_digest.clone().unwrap_or_default(),
                    new.table_count.unwrap_or(0)
                ),
            )
            .await;
    }
    Ok(Action::requeue(ctx.config.resync))
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::ConfigMapKeyRef;
    use p4fleet_crds::condition_types::READY;

    const FIREWALL: &str = include_str!("../../../examples/firewall/p4info.txt");

    fn spec_inline(text: &str) -> P4ProgramSpec {
        P4ProgramSpec {
            p4info: ArtifactSource {
                inline: Some(text.into()),
                config_map_key_ref: None,
            },
            artifacts: Default::default(),
        }
    }

    fn resolved_of(spec: &P4ProgramSpec) -> Resolved {
        sources(spec)
            .into_iter()
            .map(|(f, s)| {
                (
                    f,
                    s.inline
                        .clone()
                        .map(String::into_bytes)
                        .ok_or_else(|| format!("{f}: missing")),
                )
            })
            .collect()
    }

    #[test]
    fn firewall_is_valid_and_lists_its_table() {
        let spec = spec_inline(FIREWALL);
        let st = build_status(&spec, &resolved_of(&spec));
        assert!(
            st.conditions.iter().all(|c| c.is_true()),
            "{:?}",
            st.conditions
        );
        assert_eq!(st.table_count, Some(1));
        let t = &st.tables[0];
        assert_eq!(t.name, "MyIngress.firewall");
        assert_eq!(t.size, 65536);
        assert_eq!(
            t.match_fields,
            ["hdr.ipv4.srcAddr:exact:32", "hdr.ipv4.dstAddr:exact:32"]
        );
        assert_eq!(t.actions, ["MyIngress.allow", "MyIngress.drop"]);
        assert_eq!(st.digest.as_ref().unwrap().len(), 64);
        assert_eq!(st.short_digest.as_ref().unwrap().len(), 12);
        assert_eq!(st.targets.as_deref(), Some("P4Info"));
    }

    #[test]
    fn unknown_action_ref_and_duplicate_ids_are_named() {
        let bad = FIREWALL
            .replace("id: 29481460\n  }\n  size", "id: 12345\n  }\n  size")
            .replace(
                "id: 27506658\n    name: \"MyIngress.allow\"",
                "id: 49661089\n    name: \"MyIngress.allow\"",
            );
        let p = p4info::parse_text(&bad).unwrap();
        let problems: Vec<String> = model_p4info::validate(&p)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            problems
                .iter()
                .any(|m| m.contains("unknown action id 12345")),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|m| m.contains("id 49661089 is used by both")),
            "{problems:?}"
        );
        let spec = spec_inline(&bad);
        let st = build_status(&spec, &resolved_of(&spec));
        let valid = p4fleet_crds::find_condition(&st.conditions, VALID).unwrap();
        assert!(!valid.is_true());
        assert!(valid.message.starts_with("spec.p4info:"));
        assert!(st.digest.is_none());
        assert!(
            !p4fleet_crds::find_condition(&st.conditions, READY)
                .unwrap()
                .is_true()
        );
    }

    #[test]
    fn unparsable_p4info_is_invalid() {
        let spec = spec_inline("tables { preamble { id: oops } }");
        let st = build_status(&spec, &resolved_of(&spec));
        let valid = p4fleet_crds::find_condition(&st.conditions, VALID).unwrap();
        assert_eq!(valid.reason, "InvalidP4Info");
    }

    #[test]
    fn missing_config_map_is_a_resolved_refs_failure() {
        let spec = P4ProgramSpec {
            p4info: ArtifactSource {
                inline: None,
                config_map_key_ref: Some(ConfigMapKeyRef {
                    name: "fw".into(),
                    key: "p4info.txt".into(),
                }),
            },
            artifacts: Default::default(),
        };
        let mut r = Resolved::new();
        r.insert(
            "spec.p4info",
            Err("spec.p4info: ConfigMap fw not found".into()),
        );
        let st = build_status(&spec, &r);
        let refs = p4fleet_crds::find_condition(&st.conditions, RESOLVED_REFS).unwrap();
        assert!(!refs.is_true());
        assert!(refs.message.contains("ConfigMap fw not found"));
        let ready = p4fleet_crds::find_condition(&st.conditions, READY).unwrap();
        assert_eq!(ready.reason, "SourceNotFound");
        assert_eq!(
            referenced_config_maps(&spec),
            HashSet::from(["fw".to_string()])
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
    }
}
