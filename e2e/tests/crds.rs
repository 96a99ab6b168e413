//! CRDs against a real kube-apiserver: definitions, committed samples, and the
//! invalid-object corpus (each file must be rejected by the server).

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use p4fleet_e2e::{ControlPlane, TestNamespace, json_subset_mismatch, output_text, repo_root};
use serde_json::Value;

const MIN_SAMPLES: usize = 5;
const MIN_INVALID: usize = 15;

/// (kind, plural, scope, short name)
const EXPECTED: [(&str, &str, &str, &str); 5] = [
    ("Switch", "switches", "Cluster", "sw"),
    ("P4Program", "p4programs", "Namespaced", "p4p"),
    ("VirtualSwitch", "virtualswitches", "Namespaced", "vsw"),
    ("TableEntrySet", "tableentrysets", "Namespaced", "tes"),
    (
        "AsyncExternPolicy",
        "asyncexternpolicies",
        "Namespaced",
        "aep",
    ),
];

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
        .collect();
    files.sort();
    files
}

/// [`yaml_files`] of `dir` (from the repo root), asserting there are at
/// least `min` (`what` names them in the failure).
fn yaml_files_at_least(dir: &str, min: usize, what: &str) -> Vec<PathBuf> {
    let files = yaml_files(&repo_root().join(dir));
    assert!(
        files.len() >= min,
        "expected >= {min} {what} in {dir}, found {}",
        files.len()
    );
    files
}

/// Runs `check` on each of [`yaml_files_at_least`] with the file, its path
/// from the repo root (for messages) and a fresh namespace; asserts that it
/// pushed no failures.
async fn check_each_file(
    dir: &str,
    min: usize,
    what: &str,
    check: impl Fn(&ControlPlane, &str, &Path, &str, &mut Vec<String>),
) {
    let cp = ControlPlane::shared().await;
    let ns = TestNamespace::new(&cp.client().await).await;
    let mut failures = Vec::new();
    for file in yaml_files_at_least(dir, min, what) {
        let display = file.strip_prefix(repo_root()).unwrap_or(&file).display();
        check(cp, ns.name(), &file, &display.to_string(), &mut failures);
    }
    assert!(
        failures.is_empty(),
        "{dir}: failures:\n{}",
        failures.join("\n\n")
    );
}

#[tokio::test]
async fn all_crds_established_with_expected_names() {
    let cp = ControlPlane::shared().await;
    let api: Api<CustomResourceDefinition> = Api::all(cp.client().await);
    let generated: Vec<String> = p4fleet_crds::all()
        .into_iter()
        .map(|c| c.metadata.name.unwrap_or_default())
        .collect();
    assert_eq!(
        generated.len(),
        EXPECTED.len(),
        "p4fleet_crds::all(): {generated:?}"
    );

    for (kind, plural, scope, short) in EXPECTED {
        let name = format!("{plural}.p4fleet.dev");
        assert!(
            generated.contains(&name),
            "{name} not in p4fleet_crds::all()"
        );
        let crd = api
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("get {name}: {e}"));
        let spec = &crd.spec;
        assert_eq!(spec.group, "p4fleet.dev");
        assert_eq!(spec.names.kind, kind);
        assert_eq!(spec.names.plural, plural);
        assert_eq!(spec.scope, scope, "{name} scope");
        assert_eq!(
            spec.names.short_names.as_deref(),
            Some(&[short.to_string()][..]),
            "{name} short names"
        );
        assert!(
            spec.names
                .categories
                .iter()
                .flatten()
                .any(|c| c == "p4fleet"),
            "{name} category p4fleet"
        );
        let v1a1 = spec
            .versions
            .iter()
            .find(|v| v.name == "v1alpha1")
            .unwrap_or_else(|| panic!("{name} has no v1alpha1"));
        assert!(
            v1a1.served && v1a1.storage,
            "{name} v1alpha1 served+storage"
        );
        assert!(
            v1a1.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{name} has a status subresource"
        );
        let conds = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        for ty in ["Established", "NamesAccepted"] {
            assert!(
                conds.iter().any(|c| c.type_ == ty && c.status == "True"),
                "{name} condition {ty} not True: {conds:?}"
            );
        }
        // The short name resolves through discovery, as users will type it.
        let out = cp.kubectl(["get", short, "-A", "-o", "name"]);
        assert!(
            out.status.success(),
            "kubectl get {short}: {}",
            output_text(&out)
        );
    }
}

/// Every value in `want` is present and equal in `got` (the server may add
/// defaults; a missing key means the schema pruned a field the sample sets).
#[tokio::test]
async fn samples_apply_and_read_back() {
    let dir = "config/samples";
    check_each_file(
        dir,
        MIN_SAMPLES,
        "samples",
        |cp, ns, file, display, failures| {
            // Cluster-scoped objects (Switch) keep their committed names; server-side
            // apply with --force-conflicts makes re-applying them idempotent.
            let out = cp.kubectl([
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=p4fleet-e2e",
                "-n",
                ns,
                "-f",
                &file.to_string_lossy(),
            ]);
            if !out.status.success() {
                failures.push(format!("{display}: apply failed: {}", output_text(&out)));
                return;
            }
            let raw = std::fs::read_to_string(file).expect("read sample");
            for doc in serde_yaml::Deserializer::from_str(&raw) {
                let doc: Value = match serde::Deserialize::deserialize(doc) {
                    Ok(Value::Null) => continue,
                    Ok(v) => v,
                    Err(e) => {
                        failures.push(format!("{display}: not YAML: {e}"));
                        continue;
                    }
                };
                let api_version = doc["apiVersion"].as_str().unwrap_or_default();
                let kind = doc["kind"].as_str().unwrap_or_default();
                let name = doc["metadata"]["name"].as_str().unwrap_or_default();
                let resource = match api_version.split_once('/') {
                    Some((group, _)) => format!("{}.{group}", kind.to_lowercase()),
                    None => kind.to_lowercase(),
                };
                let out = cp.kubectl(["get", &resource, name, "-n", ns, "-o", "json"]);
                if !out.status.success() {
                    failures.push(format!(
                        "{display}: get {resource}/{name}: {}",
                        output_text(&out)
                    ));
                    continue;
                }
                let got: Value = serde_json::from_slice(&out.stdout).expect("kubectl json");
                if let Some(spec) = doc.get("spec")
                    && let Some(m) = json_subset_mismatch(spec, &got["spec"], "spec")
                {
                    failures.push(format!("{display}: {kind}/{name}: {m}"));
                }
            }
        },
    )
    .await;
}

#[tokio::test]
async fn invalid_objects_are_rejected_by_the_server() {
    let dir = "e2e/testdata/invalid";
    check_each_file(
        dir,
        MIN_INVALID,
        "files",
        |cp, ns, file, display, failures| {
            let raw = std::fs::read_to_string(file).expect("read invalid file");
            let Some(expect) = raw
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# expect:"))
                .map(str::trim)
                .filter(|s| !s.is_empty())
            else {
                failures.push(format!(
                    "{display}: first line must be `# expect: <substring>`"
                ));
                return;
            };
            let out = cp.kubectl([
                "apply",
                "--server-side",
                "--field-manager=p4fleet-e2e",
                "-n",
                ns,
                "-f",
                &file.to_string_lossy(),
            ]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            if out.status.success() {
                failures.push(format!(
                    "{display}: accepted, expected rejection: {}",
                    output_text(&out)
                ));
            } else if !(stderr.contains("Error from server") || stderr.contains(" is invalid")) {
                // kubectl prints API errors as "Error from server ..." or "The <Kind>
                // \"x\" is invalid: ..."; anything else ("error: ...") is kubectl
                // refusing it locally (parse error, unknown kind): not a schema test.
                failures.push(format!(
                    "{display}: not rejected by the API server: {}",
                    output_text(&out)
                ));
            } else if !stderr.contains(expect) {
                failures.push(format!(
                    "{display}: error lacks {expect:?}: {}",
                    output_text(&out)
                ));
            }
        },
    )
    .await;
}

/// The rollout of docs/rollouts.md's example passes the schema's CEL rules
/// (the invalid corpus shows each rule refusing; this shows them letting a
/// real rollout through, pause durations included).
#[tokio::test]
async fn a_canary_rollout_as_documented_is_accepted() {
    let cp = ControlPlane::shared().await;
    let ns = TestNamespace::new(&cp.client().await).await;
    let doc = std::fs::read_to_string(repo_root().join("docs/rollouts.md")).unwrap();
    let start = doc
        .find("```yaml\napiVersion: p4fleet.dev/v1alpha1\nkind: P4Program")
        .unwrap();
    let body = &doc[start + "```yaml\n".len()..];
    let yaml = &body[..body.find("```").unwrap()];
    let out = cp.kubectl_with_stdin(
        [
            "apply",
            "--server-side",
            "--field-manager=p4fleet-e2e",
            "-n",
            ns.name(),
            "-f",
            "-",
        ],
        yaml.as_bytes(),
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let got = cp.kubectl(["get", "p4p", "firewall", "-n", ns.name(), "-o", "json"]);
    let got: Value = serde_json::from_slice(&got.stdout).unwrap();
    let steps = &got["spec"]["rollout"]["steps"];
    assert_eq!(steps.as_array().map(Vec::len), Some(5), "{got}");
    assert_eq!(steps[1]["pause"]["duration"], "5m");
    assert_eq!(
        got["spec"]["rollout"]["analysis"]["minThroughputRatio"],
        0.9
    );
}
