//! A P4Program's revisions survive edits in place (issue 34, item 1),
//! against a real kube-apiserver and the operator: the program reads its
//! P4Info and bmv2 JSON from the user's ConfigMap.
//!
//! - The first content is revision 1: a ControllerRevision owned by the
//!   program, its bytes in immutable snapshot ConfigMaps; status and
//!   `kubectl get p4p` name it.
//! - The ConfigMap edited in place: revision 2 appears, and revision 1's
//!   snapshot still holds the old bytes.
//! - The ConfigMap deleted: both snapshots remain, byte for byte.
//! - More contents with `revisionHistoryLimit: 2`: the oldest revisions
//!   and their snapshots are deleted, the newest two old ones kept.
//! - A content seen before is renumbered, not recorded twice.
//! - The program deleted and made again: a history of its own from 1, and
//!   the leftover revision of its content adopted.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams};
use p4fleet_crds::{P4Program, RevisionRef, find_condition};
use p4fleet_e2e::processes::{build_binaries, spawn_operator};
use p4fleet_e2e::{
    ControlPlane, TestNamespace, apply_json, create_json, output_text, repo_root, status_until,
    wait_for,
};
use serde_json::{Value, json};

const V1: &str = "p4fleet.dev/v1alpha1";
const LIMIT: usize = 2;

/// The bmv2 JSON of content `n`: the example's, told apart by a field
/// bmv2 ignores.
fn json_v(n: usize) -> String {
    let text =
        std::fs::read_to_string(repo_root().join("examples/firewall/firewall.json")).unwrap();
    let at = text.find('{').unwrap() + 1;
    format!(
        "{}\"p4fleet_test_version\": {n},{}",
        &text[..at],
        &text[at..]
    )
}

fn p4info() -> String {
    std::fs::read_to_string(repo_root().join("examples/firewall/p4info.txt")).unwrap()
}

/// Writes the user's ConfigMap `fw-src` with content `n`.
async fn source(cms: &Api<ConfigMap>, n: usize) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fw-src"},
        "data": {"p4info.txt": p4info(), "fw.json": json_v(n)}});
    apply_json(cms, cm).await;
}

/// Waits until the program's update revision is `number` (and Ready);
/// returns it.
async fn update_revision(programs: &Api<P4Program>, number: i64) -> RevisionRef {
    let what = format!("update revision {number}");
    status_until(programs, "fw", &what, Duration::from_secs(60), |st| {
        let ready = find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true());
        match &st.update_revision {
            Some(r) if r.revision == number && ready && st.digest.as_ref() == Some(&r.digest) => {
                Ok(r.clone())
            }
            other => Err(format!("{other:?}, ready {ready}")),
        }
    })
    .await
}

/// The program's revisions by number.
async fn revisions(crs: &Api<ControllerRevision>) -> BTreeMap<i64, ControllerRevision> {
    let list = crs
        .list(&kube::api::ListParams::default().labels("p4fleet.dev/program=fw"))
        .await
        .unwrap();
    list.items.into_iter().map(|c| (c.revision, c)).collect()
}

/// The bytes revision `cr` keeps for `field`, read from its snapshot.
async fn snapshot_bytes(cms: &Api<ConfigMap>, cr: &ControllerRevision, field: &str) -> Vec<u8> {
    let data = &cr.data.as_ref().expect("data").0;
    let rec = data["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["field"] == field)
        .unwrap_or_else(|| panic!("{field} in {data}"));
    let at = &rec["at"]["configMap"];
    let cm = cms.get(at["name"].as_str().unwrap()).await.unwrap();
    assert_eq!(cm.immutable, Some(true), "snapshots are immutable");
    let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("P4Program", "fw")
    );
    let stored = &cm.binary_data.as_ref().unwrap()[at["key"].as_str().unwrap()].0;
    if at["gzip"] == Value::Bool(true) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(stored.as_slice())
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        stored.clone()
    }
}

/// The snapshot ConfigMaps revision `cr` names.
fn parts(cr: &ControllerRevision) -> Vec<String> {
    let data = &cr.data.as_ref().unwrap().0;
    let mut names: Vec<String> = data["sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["at"]["configMap"]["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisions_keep_the_bytes_through_edits_and_deletion_and_are_bounded() {
    let cp = ControlPlane::shared().await;
    let client: Client = cp.client().await;
    let _op = spawn_operator(
        &build_binaries(),
        cp.kubeconfig_path(),
        "revisions-operator",
        &[],
    );
    let ns = TestNamespace::new(&client).await;
    let programs: Api<P4Program> = Api::namespaced(client.clone(), ns.name());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    let crs: Api<ControllerRevision> = Api::namespaced(client.clone(), ns.name());
    source(&cms, 1).await;
    let program = json!({"apiVersion": V1, "kind": "P4Program", "metadata": {"name": "fw"},
        "spec": {"p4info": {"configMapKeyRef": {"name": "fw-src", "key": "p4info.txt"}},
            "artifacts": {"bmv2": {"json": {"configMapKeyRef": {"name": "fw-src", "key": "fw.json"}}}},
            "revisionHistoryLimit": LIMIT}});
    create_json(&programs, program.clone()).await;

    // Revision 1: recorded, owned by the program, named in status and by kubectl.
    let r1 = update_revision(&programs, 1).await;
    let p = programs.get("fw").await.unwrap();
    assert_eq!(
        p.status.as_ref().unwrap().current_revision.as_ref(),
        Some(&r1)
    );
    let cr1 = crs.get(&r1.name).await.unwrap();
    assert_eq!(cr1.revision, 1);
    let owner = &cr1.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.uid, p.metadata.uid.clone().unwrap());
    assert_eq!(owner.controller, Some(true));
    assert_eq!(
        snapshot_bytes(&cms, &cr1, "spec.artifacts.bmv2.json").await,
        json_v(1).into_bytes()
    );
    assert_eq!(
        snapshot_bytes(&cms, &cr1, "spec.p4info").await,
        p4info().into_bytes()
    );
    let out = cp.kubectl(["get", "p4p", "fw", "-n", ns.name()]);
    assert!(out.status.success(), "{}", output_text(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().next().unwrap_or_default();
    assert!(
        header.contains("CURRENT") && header.contains("UPDATED"),
        "{text}"
    );

    // Edited in place: revision 2, and revision 1 still holds the old bytes.
    source(&cms, 2).await;
    let r2 = update_revision(&programs, 2).await;
    assert_ne!(r2.digest, r1.digest);
    let kept = revisions(&crs).await;
    assert_eq!(kept.keys().copied().collect::<Vec<_>>(), [1, 2]);
    assert_eq!(
        snapshot_bytes(&cms, &kept[&1], "spec.artifacts.bmv2.json").await,
        json_v(1).into_bytes(),
        "revision 1 keeps the bytes it recorded"
    );
    assert_eq!(
        snapshot_bytes(&cms, &kept[&2], "spec.artifacts.bmv2.json").await,
        json_v(2).into_bytes()
    );

    // The user's ConfigMap deleted: the program is not Ready, the
    // snapshots stay.
    cms.delete("fw-src", &DeleteParams::default())
        .await
        .unwrap();
    let what = "the program to miss its source";
    status_until(&programs, "fw", what, Duration::from_secs(60), |st| {
        find_condition(&st.conditions, "ResolvedRefs")
            .filter(|c| !c.is_true())
            .map(drop)
            .ok_or(format!("{:?}", st.conditions))
    })
    .await;
    let p = programs.get("fw").await.unwrap();
    assert_eq!(
        p.status.unwrap().update_revision,
        Some(r2.clone()),
        "an unresolved content records nothing and forgets nothing"
    );
    let kept = revisions(&crs).await;
    assert_eq!(kept.len(), 2);
    for (n, cr) in &kept {
        assert_eq!(
            snapshot_bytes(&cms, cr, "spec.artifacts.bmv2.json").await,
            json_v(*n as usize).into_bytes()
        );
    }

    // Three more contents with a history limit of 2: revisions 1 and 2
    // and their snapshots are deleted, 3 and 4 kept besides 5.
    let first_parts: Vec<String> = kept.values().flat_map(parts).collect();
    for n in 3..=5 {
        source(&cms, n).await;
        update_revision(&programs, n as i64).await;
    }
    let kept = wait_for("the history pruned", Duration::from_secs(30), || async {
        let kept = revisions(&crs).await;
        let numbers: Vec<i64> = kept.keys().copied().collect();
        (numbers == [3, 4, 5])
            .then_some(kept)
            .ok_or(format!("revisions {numbers:?}"))
    })
    .await;
    assert_eq!(kept.len(), LIMIT + 1);
    for name in &first_parts {
        assert!(
            cms.get_opt(name).await.unwrap().is_none(),
            "snapshot {name} of a pruned revision is gone"
        );
    }
    for cr in kept.values() {
        for name in parts(cr) {
            assert!(cms.get_opt(&name).await.unwrap().is_some(), "{name}");
        }
    }

    // Back to content 3: its revision is renumbered 6, nothing recorded twice.
    let r3 = kept[&3].metadata.name.clone().unwrap();
    source(&cms, 3).await;
    let r6 = update_revision(&programs, 6).await;
    assert_eq!(r6.name, r3);
    let kept = revisions(&crs).await;
    assert_eq!(kept.keys().copied().collect::<Vec<_>>(), [4, 5, 6]);

    // The program deleted and made again before its leftovers are
    // collected (no garbage collector runs here): the new one's history
    // starts at 1, and it adopts the revision of the content it has (or
    // the collector would delete it with the old program's).
    let old_uid = programs.get("fw").await.unwrap().metadata.uid.unwrap();
    programs
        .delete("fw", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("fw deleted", Duration::from_secs(30), || async {
        match programs.get_opt("fw").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
    create_json(&programs, program).await;
    let r1 = update_revision(&programs, 1).await;
    assert_eq!(r1.name, r3, "the content's revision, adopted");
    let new_uid = programs.get("fw").await.unwrap().metadata.uid.unwrap();
    assert_ne!(new_uid, old_uid);
    let owned = |owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]| {
        owners
            .iter()
            .any(|o| o.uid == new_uid && o.controller == Some(true))
    };
    let cr = crs.get(&r3).await.unwrap();
    assert_eq!(cr.revision, 1);
    assert!(owned(
        cr.metadata.owner_references.as_deref().unwrap_or_default()
    ));
    for name in parts(&cr) {
        let cm = cms.get(&name).await.unwrap();
        assert!(
            owned(cm.metadata.owner_references.as_deref().unwrap_or_default()),
            "snapshot {name} adopted"
        );
    }
    let st = programs.get("fw").await.unwrap().status.unwrap();
    assert_eq!(
        st.current_revision.map(|r| r.revision),
        Some(1),
        "the old program's revisions 4 and 5 are not this one's history"
    );

    ns.delete(&client).await.unwrap();
}
