//! `p4fleet rollout status | pause | resume | undo` (issue 34, item 2)
//! against a real kube-apiserver, with no operator: the test writes the
//! program's status (a Canary rollout of revision 2 from revision 1) and
//! its ControllerRevisions itself, runs the built `p4fleet` binary with
//! KUBECONFIG, and reads back what each command changed.
//!
//! - `status` prints the phase, the step and, once rolled back, the failure;
//!   `status --watch` exits 1 on a rollback and 2 on its timeout.
//! - `pause` sets `spec.rollout.paused` and keeps the steps.
//! - `resume` at an indefinite `pause: {}` step clears `paused` and writes
//!   the resume annotation `<revision>/<step>`.
//! - `undo` pins the revision the rollout started from; `--to-revision`
//!   of a revision not kept, a program with nothing before, and a program
//!   that does not exist are refused, naming the program.

use std::process::Output;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use p4fleet_crds::P4Program;
use p4fleet_e2e::{ControlPlane, create_json, output_text};
use serde_json::{Value, json};

const V1: &str = "p4fleet.dev/v1alpha1";
const RESUME: &str = "p4fleet.dev/rollout-resume";

fn digest(n: i64) -> String {
    format!("{n}").repeat(64)
}

fn rev(n: i64) -> Value {
    json!({"revision": n, "digest": digest(n)})
}

fn rev_ref(program: &str, n: i64) -> Value {
    json!({"name": format!("{program}-{}", &digest(n)[..16]), "revision": n, "digest": digest(n)})
}

/// Runs `p4fleet rollout ARGS` against the control plane.
async fn p4fleet(cp: &ControlPlane, args: &[&str]) -> Output {
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = ["rollout"]
            .into_iter()
            .chain(args.iter().map(String::as_str))
            .collect();
        p4fleet_e2e::processes::p4fleet(&kubeconfig, &args)
    })
    .await
    .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// P4Program `name` with a Canary rollout whose step 1 is `pause: {}`.
async fn program(client: &Client, ns: &str, name: &str) -> P4Program {
    let programs: Api<P4Program> = Api::namespaced(client.clone(), ns);
    create_json(
        &programs,
        json!({"apiVersion": V1, "kind": "P4Program", "metadata": {"name": name},
            "spec": {"p4info": {"inline": "pkg_info {}\n"},
                "rollout": {"strategy": "Canary",
                    "steps": [{"switches": 1}, {"pause": {}}, {"percent": 100}]}}}),
    )
    .await;
    programs.get(name).await.unwrap()
}

/// Revision `n` of `p` as the operator keeps it: a ControllerRevision
/// owned by the program, its data a manifest.
async fn keep(client: &Client, p: &P4Program, n: i64) {
    let name = p.name_any();
    create_json(
        &Api::<ControllerRevision>::namespaced(client.clone(), &p.namespace().unwrap()),
        json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": format!("{name}-{}", &digest(n)[..16]),
                "labels": {"app.kubernetes.io/managed-by": "p4fleet", "p4fleet.dev/program": name},
                "ownerReferences": [{"apiVersion": V1, "kind": "P4Program", "name": name,
                    "uid": p.uid().unwrap(), "controller": true}]},
            "revision": n,
            "data": {"digest": digest(n), "spec": {"p4info": {"inline": "pkg_info {}\n"}},
                "sources": []}}),
    )
    .await;
}

/// Writes `rollout` (null for none) as the status, current revision
/// `current`, update revision `update`, observed at the program's
/// generation now.
async fn status(programs: &Api<P4Program>, name: &str, current: i64, update: i64, rollout: Value) {
    let generation = programs.get(name).await.unwrap().metadata.generation;
    programs
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "observedGeneration": generation,
                "currentRevision": rev_ref(name, current),
                "updateRevision": rev_ref(name, update),
                "rollout": rollout}})),
        )
        .await
        .unwrap();
}

/// Revision 2 rolling out from 1, at step `step`, `phase`.
fn rolling(phase: &str, step: u32) -> Value {
    json!({"phase": phase, "from": rev(1), "to": rev(2), "step": step,
        "stepStartedAt": "2026-01-02T03:04:05Z", "startedAt": "2026-01-02T03:00:00Z",
        "updated": 1, "healthy": 1, "pending": 3, "rolledBack": 0,
        "moved": [{"virtualSwitch": "vs-0", "switch": "edge-1", "step": 0, "state": "Healthy"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_commands_pause_resume_undo_and_report_a_program() {
    let cp = ControlPlane::shared().await;
    let (client, ns) = cp.client_and_namespace().await;
    let programs: Api<P4Program> = Api::namespaced(client.clone(), ns.name());
    let fw = program(&client, ns.name(), "fw").await;
    keep(&client, &fw, 1).await;
    keep(&client, &fw, 2).await;
    // Waiting at steps[1], `pause: {}`.
    status(&programs, "fw", 1, 2, rolling("Paused", 1)).await;

    let out = p4fleet(cp, &["status", "fw", "-n", ns.name()]).await;
    assert!(out.status.success(), "{}", output_text(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("P4Program {}/fw", ns.name())),
        "{text}"
    );
    assert!(text.contains("rollout: Paused"), "{text}");
    assert!(
        text.contains("step 2 of 3: steps[1] pause until resumed"),
        "{text}"
    );
    assert!(text.contains("vs-0 on Switch edge-1: Healthy"), "{text}");

    // pause: spec.rollout.paused, the rest of spec.rollout as it was.
    let out = p4fleet(cp, &["pause", "fw", "-n", ns.name()]).await;
    assert!(out.status.success(), "{}", output_text(&out));
    let p = programs.get("fw").await.unwrap();
    let r = p.spec.rollout.clone().unwrap();
    assert!(r.paused, "{r:?}");
    assert_eq!(r.steps.len(), 3, "{r:?}");
    assert_eq!(p.annotations().get(RESUME), None);

    // resume at the indefinite pause: unpaused, and that step passed.
    let out = p4fleet(cp, &["resume", "fw", "-n", ns.name()]).await;
    assert!(out.status.success(), "{}", output_text(&out));
    let p = programs.get("fw").await.unwrap();
    assert!(!p.spec.rollout.clone().unwrap().paused);
    assert_eq!(p.annotations().get(RESUME).map(String::as_str), Some("2/1"));

    // The canary failed its gate: status names the check, and --watch
    // exits 1 on the rollback.
    let mut failed = rolling("RolledBack", 0);
    failed["failure"] = json!({"check": "EntriesReapplied", "virtualSwitch": "vs-0",
        "switch": "edge-1", "message": "TableEntrySet fw: 3 entries failed"});
    failed["finishedAt"] = json!("2026-01-02T03:05:00Z");
    status(&programs, "fw", 1, 2, failed).await;
    let out = p4fleet(cp, &["status", "fw", "-n", ns.name()]).await;
    assert!(out.status.success(), "{}", output_text(&out));
    let text = stdout(&out);
    assert!(text.contains("rollout: RolledBack"), "{text}");
    assert!(
        text.contains(
            "failure: EntriesReapplied failed on VirtualSwitch vs-0 (Switch edge-1): TableEntrySet fw: 3 entries failed"
        ),
        "{text}"
    );
    let out = p4fleet(
        cp,
        &["status", "fw", "-n", ns.name(), "-w", "--timeout=20s"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    assert!(
        stdout(&out).contains("rollout of revision 2 rolled back: EntriesReapplied"),
        "{}",
        output_text(&out)
    );

    // undo: back to where the rollout started; a revision not kept is refused.
    let out = p4fleet(cp, &["undo", "fw", "-n", ns.name(), "--to-revision=7"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        stderr(&out).contains(&format!(
            "P4Program {}/fw: cannot undo: revision 7 is not kept (kept: 1, 2)",
            ns.name()
        )),
        "{}",
        output_text(&out)
    );
    assert_eq!(
        programs
            .get("fw")
            .await
            .unwrap()
            .spec
            .rollout
            .unwrap()
            .pin_revision,
        None
    );
    let out = p4fleet(cp, &["undo", "fw", "-n", ns.name()]).await;
    assert!(out.status.success(), "{}", output_text(&out));
    let p = programs.get("fw").await.unwrap();
    assert_eq!(p.spec.rollout.unwrap().pin_revision, Some(1));

    // A rollout that does not settle: --watch gives up with exit 2.
    programs
        .patch(
            "fw",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rollout": {"pinRevision": null}}})),
        )
        .await
        .unwrap();
    status(&programs, "fw", 1, 2, rolling("Progressing", 0)).await;
    let out = p4fleet(
        cp,
        &["status", "fw", "-n", ns.name(), "--watch", "--timeout=3s"],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        stderr(&out).contains(&format!(
            "P4Program {}/fw: the rollout did not finish",
            ns.name()
        )),
        "{}",
        output_text(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_refuses_a_program_with_nothing_before_and_a_missing_one() {
    let cp = ControlPlane::shared().await;
    let (client, ns) = cp.client_and_namespace().await;
    let programs: Api<P4Program> = Api::namespaced(client.clone(), ns.name());
    let first = program(&client, ns.name(), "first").await;
    keep(&client, &first, 1).await;
    status(&programs, "first", 1, 1, json!(null)).await;

    let out = p4fleet(cp, &["undo", "first", "-n", ns.name()]).await;
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        stderr(&out).contains(&format!(
            "P4Program {}/first: cannot undo: no revision before revision 1 is kept",
            ns.name()
        )),
        "{}",
        output_text(&out)
    );
    let p = programs.get("first").await.unwrap();
    assert_eq!(p.spec.rollout.unwrap().pin_revision, None, "nothing pinned");

    for cmd in ["status", "pause", "resume", "undo"] {
        let out = p4fleet(cp, &[cmd, "gone", "-n", ns.name()]).await;
        assert_eq!(out.status.code(), Some(2), "{cmd}: {}", output_text(&out));
        assert!(
            stderr(&out).contains(&format!("P4Program {}/gone not found", ns.name())),
            "{cmd}: {}",
            output_text(&out)
        );
    }
    assert!(
        programs.get_opt("gone").await.unwrap().is_none(),
        "no program created"
    );
}
