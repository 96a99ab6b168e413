//! The Helm chart lints and its rendered manifests pass server-side dry-run.

use std::process::Command;

use p4fleet_e2e::{ControlPlane, helm_bin, output_text, repo_root};

const NAMESPACE: &str = "p4fleet-system";

#[test]
fn chart_lints() {
    let out = Command::new(helm_bin())
        .args(["lint"])
        .arg(repo_root().join("charts/p4fleet"))
        .output()
        .expect("run helm");
    assert!(out.status.success(), "helm lint: {}", output_text(&out));
}

#[tokio::test]
async fn rendered_chart_passes_server_dry_run() {
    let cp = ControlPlane::shared().await;
    let ns = cp.kubectl(["create", "namespace", NAMESPACE]);
    assert!(
        ns.status.success() || String::from_utf8_lossy(&ns.stderr).contains("AlreadyExists"),
        "create namespace: {}",
        output_text(&ns)
    );

    let rendered = Command::new(helm_bin())
        .args(["template", "p4fleet"])
        .arg(repo_root().join("charts/p4fleet"))
        .args(["--namespace", NAMESPACE])
        .output()
        .expect("run helm");
    assert!(
        rendered.status.success(),
        "helm template: {}",
        output_text(&rendered)
    );
    assert!(
        !rendered.stdout.is_empty(),
        "helm template rendered nothing"
    );

    let out = cp.kubectl_with_stdin(["apply", "--dry-run=server", "-f", "-"], &rendered.stdout);
    assert!(
        out.status.success(),
        "kubectl apply --dry-run=server: {}",
        output_text(&out)
    );
}
