//! Least privilege, checked against the real kube-apiserver (RBAC
//! authorization): the operator runs under the chart's ServiceAccount and
//! rules (`helm template`, applied as rendered), with a token from the
//! TokenRequest API.
//!
//! - A normal workload (a TLS Switch, P4Program, VirtualSwitch,
//!   TableEntrySet from a ConfigMap, AsyncExternPolicy, Events, the leader
//!   Lease) is reconciled with no Forbidden in the operator's log, cluster
//!   wide and in the namespace-scoped install (`operator.watchNamespace`).
//! - With each rule removed in turn, the operator says which verb and
//!   resource it was refused (the API server's words in its log), instead
//!   of hanging silently. The ConfigMap and ControllerRevision writes are
//!   the program's revision (its snapshot, docs/rollouts.md).
//! - config/rbac equals the chart's default rendering.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use p4fleet_crds::{AsyncExternPolicy, P4Program, Switch, TableEntrySet, VirtualSwitch};
use p4fleet_e2e::certs::{TestCa, Validity};
use p4fleet_e2e::processes::{
    EmulatorProc, Proc, build_binaries as bin, log_file, spawn_tls_emulator,
};
use p4fleet_e2e::{
    ControlPlane, TestNamespace, create_json, delete_switch, firewall_workload, helm_bin,
    output_text, repo_root, wait_for, wait_object_ready,
};
use serde_json::{Value, json};

const V1: &str = "p4fleet.dev/v1alpha1";
const RBAC_KINDS: [&str; 5] = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// The chart's ServiceAccount and RBAC objects as `helm template` renders
/// them for `release` in `ns` with `sets`.
fn render(release: &str, ns: &str, sets: &[&str]) -> Vec<Value> {
    let mut cmd = Command::new(helm_bin());
    cmd.args(["template", release])
        .arg(repo_root().join("charts/p4fleet"))
        .args(["--namespace", ns]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().expect("run helm");
    assert!(out.status.success(), "helm template: {}", output_text(&out));
    yaml_docs(&String::from_utf8(out.stdout).unwrap())
}

fn yaml_docs(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|d| Value::deserialize(d).ok())
        .filter(|v| RBAC_KINDS.contains(&v["kind"].as_str().unwrap_or("")))
        .collect()
}

/// An object without the labels that say who installed it.
fn normalized(mut v: Value) -> Value {
    if let Some(l) = v["metadata"]["labels"].as_object_mut() {
        l.remove("helm.sh/chart");
        l.remove("app.kubernetes.io/managed-by");
    }
    v
}

#[test]
fn config_rbac_equals_the_charts_default_rendering() {
    let mut chart: Vec<Value> = render("p4fleet", "p4fleet-system", &[])
        .into_iter()
        .map(normalized)
        .collect();
    let dir = repo_root().join("config/rbac");
    let kustomization: Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap())
            .unwrap();
    let mut config: Vec<Value> = Vec::new();
    for f in kustomization["resources"].as_array().unwrap() {
        let text = std::fs::read_to_string(dir.join(f.as_str().unwrap())).unwrap();
        config.extend(yaml_docs(&text).into_iter().map(normalized));
    }
    let key = |v: &Value| {
        format!(
            "{}/{}/{}",
            v["kind"], v["metadata"]["namespace"], v["metadata"]["name"]
        )
    };
    chart.sort_by_key(key);
    config.sort_by_key(key);
    assert_eq!(
        chart.iter().map(key).collect::<Vec<_>>(),
        config.iter().map(key).collect::<Vec<_>>(),
        "the same objects"
    );
    for (c, k) in chart.iter().zip(&config) {
        assert_eq!(c, k, "config/rbac differs from the chart for {}", key(c));
    }
}

fn kubectl_apply(cp: &ControlPlane, objs: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objs});
    let out = cp.kubectl_with_stdin(
        ["apply", "-f", "-"],
        serde_json::to_string(&list).unwrap().as_bytes(),
    );
    assert!(out.status.success(), "kubectl apply: {}", output_text(&out));
}

/// A kubeconfig like the admin's, but authenticating as ServiceAccount
/// `sa` of `ns` with a token from the TokenRequest API.
fn service_account_kubeconfig(cp: &ControlPlane, ns: &str, sa: &str, dir: &Path) -> PathBuf {
    let out = cp.kubectl(["create", "token", sa, "-n", ns, "--duration", "2h"]);
    assert!(out.status.success(), "create token: {}", output_text(&out));
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let text = std::fs::read_to_string(cp.kubeconfig_path()).unwrap();
    let mut cfg: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    for u in cfg["users"].as_sequence_mut().unwrap() {
        u["user"] = serde_yaml::to_value(json!({ "token": token })).unwrap();
    }
    let path = dir.join(format!("{sa}.kubeconfig"));
    std::fs::write(&path, serde_yaml::to_string(&cfg).unwrap()).unwrap();
    path
}

/// The operator with leader election (its Lease in `ns`) under `kubeconfig`.
fn operator(kubeconfig: &Path, ns: &str, log: &str, extra: &[&str]) -> Proc {
    let (log, file) = log_file(log);
    let mut cmd = Command::new(bin().join("p4fleet"));
    cmd.args([
        "operator",
        "--listen-addr",
        "127.0.0.1:0",
        "--leader-election",
    ])
    .args([
        "--lease-duration-seconds",
        "4",
        "--renew-deadline-seconds",
        "3",
    ])
    .args(["--retry-period-seconds", "1", "--drift-seconds", "3"])
    .args(extra)
    .env("KUBECONFIG", kubeconfig)
    .env("POD_NAMESPACE", ns)
    .env("POD_NAME", "rbac-operator")
    .stdout(file.try_clone().unwrap())
    .stderr(file);
    Proc::spawn(cmd, log)
}

/// Stops the operator so that it releases the Lease.
fn stop(mut op: Proc) {
    op.signal(libc::SIGTERM);
    let _ = op.wait_exit(Duration::from_secs(15));
}

/// An emulator serving TLS with a certificate from a new CA, which also
/// signs the client certificate it requires.
fn tls_emulator(dir: &Path, tag: &str) -> (TestCa, EmulatorProc) {
    let ca = TestCa::new(tag);
    let server = ca.server(&["127.0.0.1"], Validity::Current);
    let emu = spawn_tls_emulator(&bin(), dir, tag, &server, &ca, None, &[]);
    (ca, emu)
}

/// The workload: a TLS Switch (its Secret in `secret_ns`), and in `ns` a
/// program, VirtualSwitch, TableEntrySet from a ConfigMap and an
/// AsyncExternPolicy.
async fn workload(
    client: &Client,
    ns: &str,
    secret_ns: &str,
    sw: &str,
    endpoint: &str,
    ca: &TestCa,
) {
    let client_pair = ca.client();
    Api::<Secret>::namespaced(client.clone(), secret_ns)
        .patch(
            &format!("{sw}-tls"),
            &PatchParams::apply("p4fleet-e2e"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{sw}-tls")},
                "stringData": {"ca.crt": ca.cert_pem, "tls.crt": client_pair.cert_pem,
                    "tls.key": client_pair.key_pem}})),
        )
        .await
        .unwrap();
    create_json(
        &Api::<Switch>::all(client.clone()),
        json!({"apiVersion": V1, "kind": "Switch", "metadata": {"name": sw},
            "spec": {"target": "Bmv2", "endpoint": endpoint, "deviceId": 1,
                "tlsSecretRef": {"namespace": secret_ns, "name": format!("{sw}-tls")}}}),
    )
    .await;
    let entries = "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n\
        10.0.0.1 172.16.0.1 0\n10.0.0.2 172.16.0.1 1\n";
    firewall_workload(client, ns, sw, entries).await;
    create_json(
        &Api::<AsyncExternPolicy>::namespaced(client.clone(), ns),
        json!({"apiVersion": V1, "kind": "AsyncExternPolicy", "metadata": {"name": "crypto"},
            "spec": {"virtualSwitchRef": "fw", "externs": [{"name": "encrypt", "mode": "Sync"}]}}),
    )
    .await;
}

/// Every object of the workload reconciled: Switch, VirtualSwitch and
/// TableEntrySet Ready, the program and the policy with a status.
async fn reconciled(client: &Client, ns: &str, sw: &str) {
    let t = Duration::from_secs(90);
    wait_object_ready(&Api::<Switch>::all(client.clone()), sw, t).await;
    wait_object_ready(
        &Api::<VirtualSwitch>::namespaced(client.clone(), ns),
        "fw",
        t,
    )
    .await;
    wait_object_ready(
        &Api::<TableEntrySet>::namespaced(client.clone(), ns),
        "fw",
        t,
    )
    .await;
    let programs: Api<P4Program> = Api::namespaced(client.clone(), ns);
    wait_for("P4Program status", t, || async {
        let p = programs.get("firewall").await.map_err(|e| e.to_string())?;
        p.status.map(drop).ok_or("no status".to_string())
    })
    .await;
    let policies: Api<AsyncExternPolicy> = Api::namespaced(client.clone(), ns);
    wait_for("AsyncExternPolicy status", t, || async {
        let p = policies.get("crypto").await.map_err(|e| e.to_string())?;
        p.status.map(drop).ok_or("no status".to_string())
    })
    .await;
}

fn log_text(op: &Proc) -> String {
    std::fs::read_to_string(&op.log).unwrap_or_default()
}

/// Lines of the operator's log saying the API server refused something.
fn forbidden_lines(op: &Proc) -> Vec<String> {
    log_text(op)
        .lines()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .map(str::to_string)
        .collect()
}

/// Asserts that the operator's log has no Forbidden line (`under` says
/// under which rules), then stops it.
fn stop_refused_nothing(op: Proc, under: &str) {
    let refused = forbidden_lines(&op);
    assert!(
        refused.is_empty(),
        "Forbidden {under}:\n{}",
        refused.join("\n")
    );
    stop(op);
}

/// Whether `line` names `resource` as refused (the API server's "cannot
/// VERB resource \"R\"", quoted plainly or escaped in a Debug field).
fn names_refused(line: &str, resource: &str) -> bool {
    line.contains("cannot ")
        && (line.contains(&format!("resource \"{resource}\""))
            || line.contains(&format!("resource \\\"{resource}\\\"")))
}

/// The chart's RBAC objects applied for a release in `ns`, and a
/// kubeconfig for its ServiceAccount.
struct Install {
    objs: Vec<Value>,
    sa: String,
    kubeconfig: PathBuf,
}

impl Install {
    fn new(cp: &ControlPlane, ns: &str, sets: &[&str], dir: &Path) -> Install {
        let objs = render(&format!("p4fleet-{ns}"), ns, sets);
        kubectl_apply(cp, &objs);
        let sa = objs
            .iter()
            .find(|o| o["kind"] == "ServiceAccount")
            .and_then(|o| o["metadata"]["name"].as_str())
            .expect("a ServiceAccount")
            .to_string();
        let kubeconfig = service_account_kubeconfig(cp, ns, &sa, dir);
        Install {
            objs,
            sa,
            kubeconfig,
        }
    }

    async fn remove(&self, cp: &ControlPlane) {
        for o in &self.objs {
            let kind = o["kind"].as_str().unwrap();
            let name = o["metadata"]["name"].as_str().unwrap();
            let mut args = vec!["delete".to_string(), kind.to_string(), name.to_string()];
            if let Some(ns) = o["metadata"]["namespace"].as_str() {
                args.extend(["-n".into(), ns.into()]);
            }
            args.push("--ignore-not-found".into());
            let _ = cp.kubectl(&args);
        }
    }
}

/// Whether ServiceAccount `sa` of `ns` may do what `rule` grants (its first
/// verb on its first resource), asked of the API server.
fn can_i(cp: &ControlPlane, ns: &str, sa: &str, rule: &Value, rule_ns: &str) -> bool {
    let verb = rule["verbs"][0].as_str().unwrap();
    let group = rule["apiGroups"][0].as_str().unwrap();
    let (res, sub) = match rule["resources"][0].as_str().unwrap().split_once('/') {
        Some((r, s)) => (r.to_string(), Some(s.to_string())),
        None => (rule["resources"][0].as_str().unwrap().to_string(), None),
    };
    let res = if group.is_empty() {
        res
    } else {
        format!("{res}.{group}")
    };
    let mut args = vec![
        "auth".to_string(),
        "can-i".into(),
        verb.into(),
        res,
        format!("--as=system:serviceaccount:{ns}:{sa}"),
        "-n".into(),
        rule_ns.into(),
    ];
    if let Some(sub) = sub {
        args.push(format!("--subresource={sub}"));
    }
    cp.kubectl(&args).status.success()
}

/// Waits until the API server's authorizer agrees that `rule` is
/// (`granted`) or is not in force.
async fn authorizer_sees(
    cp: &ControlPlane,
    ns: &str,
    sa: &str,
    rule: &Value,
    rule_ns: &str,
    granted: bool,
) {
    wait_for(
        "the authorizer to see the rule change",
        Duration::from_secs(30),
        || async {
            (can_i(cp, ns, sa, rule, rule_ns) == granted)
                .then_some(())
                .ok_or(format!("can-i still {}", !granted))
        },
    )
    .await;
}

/// Removes the status of every workload object, so that a new operator
/// must write them all again (and publish Events for the new conditions).
async fn clear_status(client: &Client, ns: &str, sw: &str) {
    async fn clear<K>(api: Api<K>, name: &str)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": null})),
        )
        .await
        .unwrap();
    }
    clear(Api::<Switch>::all(client.clone()), sw).await;
    clear(Api::<P4Program>::namespaced(client.clone(), ns), "firewall").await;
    clear(Api::<VirtualSwitch>::namespaced(client.clone(), ns), "fw").await;
    clear(Api::<TableEntrySet>::namespaced(client.clone(), ns), "fw").await;
    clear(
        Api::<AsyncExternPolicy>::namespaced(client.clone(), ns),
        "crypto",
    )
    .await;
}

/// Deletes the program's revisions and their snapshot ConfigMaps, so
/// that a new operator must record its content again (the writes of the
/// ConfigMap and ControllerRevision rules).
fn forget_revisions(cp: &ControlPlane, ns: &str) {
    let out = cp.kubectl([
        "delete",
        "controllerrevisions,configmaps",
        "-l",
        "p4fleet.dev/program=firewall",
        "-n",
        ns,
    ]);
    assert!(out.status.success(), "{}", output_text(&out));
}

/// Both installs in one test: a cluster-wide operator would also
/// reconcile the other install's objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_needs_exactly_the_charts_rules() {
    cluster_wide().await;
    namespace_scoped().await;
}

async fn cluster_wide() {
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let tmp = tempfile::tempdir().unwrap();
    let ns = TestNamespace::new(&client).await;
    let ns = ns.name().to_string();
    let install = Install::new(cp, &ns, &[], tmp.path());
    let (objs, sa, kubeconfig) = (&install.objs, &install.sa, &install.kubeconfig);
    let (ca, emu) = tls_emulator(tmp.path(), "rbac");
    let sw = format!("{ns}-sw");
    workload(&client, &ns, &ns, &sw, &emu.p4runtime.to_string(), &ca).await;
    let op = operator(kubeconfig, &ns, "rbac-operator", &[]);
    reconciled(&client, &ns, &sw).await;
    // Let the Lease renew and the drift pass run once more.
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop_refused_nothing(op, "under the chart's rules");

    // Each rule removed in turn: the refusal is named in the log.
    let mut checked = 0;
    for (i, obj) in objs.iter().enumerate() {
        let kind = obj["kind"].as_str().unwrap();
        if !matches!(kind, "ClusterRole" | "Role")
            || obj["metadata"]["name"].as_str().unwrap().ends_with("-view")
            || obj["metadata"]["name"].as_str().unwrap().ends_with("-edit")
        {
            continue;
        }
        let rules = obj["rules"].as_array().unwrap().clone();
        let rule_ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or(&ns)
            .to_string();
        for (r, rule) in rules.iter().enumerate() {
            let mut cut = obj.clone();
            cut["rules"].as_array_mut().unwrap().remove(r);
            kubectl_apply(cp, &[cut]);
            authorizer_sees(cp, &ns, sa, rule, &rule_ns, false).await;
            clear_status(&client, &ns, &sw).await;
            forget_revisions(cp, &ns);
            let resources: Vec<String> = rule["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect();
            let op = operator(kubeconfig, &ns, &format!("rbac-cut-{i}-{r}"), &[]);
            let started = Instant::now();
            let named = wait_for(
                &format!("the operator to name a refused {resources:?}"),
                Duration::from_secs(60),
                || async {
                    forbidden_lines(&op)
                        .into_iter()
                        .find(|l| resources.iter().any(|res| names_refused(l, res)))
                        .ok_or_else(|| "not yet".to_string())
                },
            )
            .await;
            eprintln!(
                "without {resources:?} {:?}: named after {:?}: {}",
                rule["verbs"],
                started.elapsed(),
                &named[..named.len().min(300)]
            );
            stop(op);
            kubectl_apply(cp, std::slice::from_ref(obj));
            authorizer_sees(cp, &ns, sa, rule, &rule_ns, true).await;
            checked += 1;
        }
    }
    assert!(checked >= 13, "only {checked} rules checked");
    delete_switch(&client, &sw).await;
    install.remove(cp).await;
    drop(emu);
}

/// The namespace-scoped install: namespaced kinds only in the watched
/// namespace (a Role), nothing namespaced cluster-wide.
async fn namespace_scoped() {
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let tmp = tempfile::tempdir().unwrap();
    let op_ns = TestNamespace::new(&client).await;
    let op_ns = op_ns.name().to_string();
    let team = TestNamespace::new(&client).await;
    let team = team.name().to_string();
    let watch = format!("operator.watchNamespace={team}");
    let install = Install::new(cp, &op_ns, &[&watch], tmp.path());
    // Cluster-wide: only Switches and the aggregated roles.
    for o in install.objs.iter().filter(|o| o["kind"] == "ClusterRole") {
        for rule in o["rules"].as_array().unwrap() {
            for res in rule["resources"].as_array().unwrap() {
                let res = res.as_str().unwrap();
                let aggregated = o["metadata"]["labels"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .any(|k| k.starts_with("rbac.authorization.k8s.io/aggregate-to"));
                assert!(
                    aggregated || res.starts_with("switches"),
                    "cluster-wide {res}"
                );
            }
        }
    }
    let (ca, emu) = tls_emulator(tmp.path(), "team");
    let sw = format!("{team}-sw");
    // The Switch's Secret lives in the operator's namespace (the default
    // rbac.tlsSecretNamespaces), the workload in the team's.
    workload(&client, &team, &op_ns, &sw, &emu.p4runtime.to_string(), &ca).await;
    let op = operator(
        &install.kubeconfig,
        &op_ns,
        "rbac-ns-operator",
        &["--watch-namespace", &team],
    );
    reconciled(&client, &team, &sw).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop_refused_nothing(op, "in namespace mode");
    delete_switch(&client, &sw).await;
    install.remove(cp).await;
    drop(emu);
}
