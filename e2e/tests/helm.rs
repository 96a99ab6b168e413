//! The Helm chart lints and its rendered manifests pass server-side
//! dry-run; the Grafana dashboard and the PrometheusRule render only when
//! enabled, and use only metrics docs/metrics.md lists.

use std::process::Command;

use serde::Deserialize;

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

fn helm_template(args: &[&str]) -> String {
    let out = Command::new(helm_bin())
        .args(["template", "p4fleet"])
        .arg(repo_root().join("charts/p4fleet"))
        .args(args)
        .output()
        .expect("run helm");
    assert!(out.status.success(), "helm template: {}", output_text(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// The `p4fleet_*` metric names (histogram and counter suffixes removed)
/// a PromQL text uses.
fn metric_names(promql: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (i, _) in promql.match_indices("p4fleet_") {
        let name: String = promql[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(&name);
        names.push(base.to_string());
    }
    names
}

#[test]
fn dashboard_and_alerts_render_when_enabled_with_documented_metrics() {
    let default = helm_template(&[]);
    assert!(!default.contains("kind: PrometheusRule"), "{default}");
    assert!(!default.contains("grafana_dashboard"), "{default}");

    let text = helm_template(&[
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "prometheusRule.minEntriesPerSecond=5000",
    ]);
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(serde_yaml::Value::deserialize)
        .collect::<Result<_, _>>()
        .expect("rendered YAML");
    let of_kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(k) && d["metadata"]["name"].as_str().is_some())
            .filter(|d| k != "ConfigMap" || d["data"]["p4fleet.json"].is_string())
            .unwrap_or_else(|| panic!("no {k} in:\n{text}"))
    };
    let documented = std::fs::read_to_string(repo_root().join("docs/metrics.md")).unwrap();

    let cm = of_kind("ConfigMap");
    assert_eq!(
        cm["metadata"]["labels"]["grafana_dashboard"].as_str(),
        Some("1")
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(cm["data"]["p4fleet.json"].as_str().unwrap()).expect("dashboard JSON");
    let mut exprs = Vec::new();
    for p in dashboard["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(exprs.len() > 10, "{exprs:?}");

    let rule = of_kind("PrometheusRule");
    let rules = rule["spec"]["groups"][0]["rules"].as_sequence().unwrap();
    let alerts: Vec<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    for a in [
        "P4fleetSwitchUnreachable",
        "P4fleetTableEntrySetNotReady",
        "P4fleetSyncRateLow",
    ] {
        assert!(alerts.contains(&a), "{alerts:?}");
    }
    let rate = rules
        .iter()
        .find(|r| r["alert"].as_str() == Some("P4fleetSyncRateLow"))
        .unwrap();
    assert!(rate["expr"].as_str().unwrap().contains("< 5000"));
    exprs.extend(
        rules
            .iter()
            .map(|r| r["expr"].as_str().unwrap().to_string()),
    );

    for e in &exprs {
        let names = metric_names(e);
        for n in names {
            assert!(
                documented.contains(&format!("`{n}`"))
                    || documented.contains(&format!("`{n}_total`")),
                "{n} (in {e}) is not in docs/metrics.md"
            );
        }
    }
}
