//! Writing revisions (the P4Program controller's apply stage): a new
//! content's snapshot ConfigMaps, then its ControllerRevision (so a
//! revision always names complete snapshots; a crash in between leaves
//! ConfigMaps that the retry finds in place), the number of a content seen
//! again, and the deletion of revisions past the history limit (their
//! ConfigMaps first, so a revision never outlives its bytes).

use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use p4fleet_crds::P4Program;

use super::{Kept, Record, SnapshotError, part_object, record, revision_object, snapshot};
use crate::artifacts::Resolved;
use crate::cache::Cache;
use crate::status::FIELD_MANAGER;

/// How long a write waits for the revision cache to show it, so that the
/// next reconcile numbers the next revision from it.
const CACHE_WAIT: Duration = Duration::from_secs(5);

/// What recording a content did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The content's revision, as it is now.
    pub kept: Kept,
    /// Whether it was written (created, or a content seen again renumbered).
    pub written: bool,
}

/// Records `resolved` (the content `digest` of `program`) as its newest
/// revision among `revisions` (the cached ones). `Ok(Err)`: it cannot be
/// snapshotted (the reason names the field).
pub async fn record_content(
    client: &Client,
    cache: &Cache<ControllerRevision>,
    program: &P4Program,
    resolved: &Resolved,
    revisions: &[Kept],
    digest: &str,
) -> Result<Result<Recorded, SnapshotError>, kube::Error> {
    let ns = program.namespace().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), &ns);
    let (kept, written) = match record(&program.name_any(), revisions, digest) {
        Record::Kept(k) => (k, false),
        Record::Renumber { kept, number } => {
            let patch = serde_json::json!({"revision": number});
            let pp = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            api.patch(&kept.name, &pp, &Patch::Merge(&patch)).await?;
            let r = ObjectRef::new(&kept.name).within(&ns);
            // Until the cache shows the new number, a reconcile would
            // number the next revision from the old one.
            cache.shows(&r, |c| c.revision == number, CACHE_WAIT).await;
            let kept = Kept {
                revision: number,
                ..kept
            };
            (kept, true)
        }
        Record::Create { name, number } => {
            let snap = match snapshot(&name, &program.spec, resolved) {
                Ok(s) => s,
                Err(e) => return Ok(Err(e)),
            };
            let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            for (part, data) in &snap.parts {
                // Content-addressed and immutable: one that exists holds
                // these bytes already (a retry after a crash).
                let part = part_object(program, part, data);
                create_or_adopt(&cms, &pp, &part, program, serde_json::json!({})).await?;
            }
            let cr = revision_object(program, &name, number, &snap.manifest);
            // An adopted revision takes this history's number.
            let number_patch = serde_json::json!({"revision": number});
            create_or_adopt(&api, &pp, &cr, program, number_patch).await?;
            let r = ObjectRef::new(&name).within(&ns);
            cache.shows(&r, |_| true, CACHE_WAIT).await;
            let kept = Kept {
                name,
                revision: number,
                digest: digest.into(),
                parts: snap.parts.keys().cloned().collect(),
            };
            (kept, true)
        }
    };
    Ok(Ok(Recorded { kept, written }))
}

/// Deletes revisions `gone` of namespace `ns`: each one's snapshot
/// ConfigMaps, then the revision (what is gone already is fine).
pub async fn delete(client: &Client, ns: &str, gone: &[&Kept]) -> Result<(), kube::Error> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let crs: Api<ControllerRevision> = Api::namespaced(client.clone(), ns);
    for k in gone {
        for part in &k.parts {
            gone_ok(cms.delete(part, &DeleteParams::default()).await)?;
        }
        gone_ok(crs.delete(&k.name, &DeleteParams::default()).await)?;
        tracing::info!(namespace = %ns, revision = %k.name, number = k.revision,
            "revision past the history limit deleted");
    }
    Ok(())
}

/// Creates `obj` (content-addressed: one of its name holds the same
/// bytes). One that exists is kept; if it belongs to an earlier P4Program
/// of this name (deleted, its leftovers not yet collected), `program`
/// adopts it (merging `also` into the patch), or the garbage collector
/// would take this revision's bytes with the old program's.
async fn create_or_adopt<K>(
    api: &Api<K>,
    pp: &PostParams,
    obj: &K,
    program: &P4Program,
    also: serde_json::Value,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(pp, obj).await {
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        other => return other.map(drop),
    }
    let name = obj.meta().name.clone().unwrap_or_default();
    let Some(existing) = api.get_opt(&name).await? else {
        // Collected meanwhile: the next reconcile creates it.
        return Ok(());
    };
    if owned_by(existing.owner_references(), program) {
        return Ok(());
    }
    let owner = program.controller_owner_ref(&());
    let mut patch = also;
    patch["metadata"] =
        serde_json::json!({"ownerReferences": owner.into_iter().collect::<Vec<_>>()});
    let pp = PatchParams {
        field_manager: pp.field_manager.clone(),
        ..Default::default()
    };
    api.patch(&name, &pp, &Patch::Merge(&patch)).await?;
    tracing::info!(namespace = ?program.namespace(), program = %program.name_any(), object = %name,
        "adopted a revision object left by an earlier P4Program of this name");
    Ok(())
}

/// Whether `owners` has `program` (this object, by uid) as controller.
pub fn owned_by(
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    program: &P4Program,
) -> bool {
    let uid = program.metadata.uid.as_deref();
    owners
        .iter()
        .any(|o| o.controller == Some(true) && uid == Some(o.uid.as_str()))
}

fn gone_ok<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        other => other.map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn only_the_program_itself_by_uid_owns_its_revisions() {
        let mut p: P4Program = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "fw", "namespace": "ns", "uid": "new"},
            "spec": {"p4info": {"configMapKeyRef": {"name": "x", "key": "p4info.txt"}}}
        }))
        .unwrap();
        let owner = |uid: &str, controller| OwnerReference {
            api_version: "p4fleet.dev/v1alpha1".into(),
            kind: "P4Program".into(),
            name: "fw".into(),
            uid: uid.into(),
            controller: Some(controller),
            ..Default::default()
        };
        assert!(owned_by(&[owner("new", true)], &p));
        assert!(!owned_by(&[owner("old", true)], &p), "an earlier fw's");
        assert!(!owned_by(&[owner("new", false)], &p), "not as controller");
        assert!(!owned_by(&[], &p));
        p.metadata.uid = None;
        assert!(!owned_by(&[owner("new", true)], &p));
    }
}
