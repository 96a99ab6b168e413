//! p4fleet as real pods on a real cluster (`make e2e-cluster` on a local node
//! from hack/cluster.sh, or e2e/kind/run.sh): the chart installed by Helm
//! with locally built images; switches as Deployments + Services (the
//! emulator's bmv2 and Tofino, or a real bmv2 in kind); the samples that
//! target those switches Ready through them, with the entries on the
//! devices; `helm upgrade` to two replicas and leadership moving when the
//! leader pod is deleted (timed); everything done by the operator pod with
//! the chart's ServiceAccount and RBAC; `helm uninstall` leaving no operator
//! objects while the CRDs and resources stay (docs/install.md, CRD policy).
//!
//! Built only with `--features p4fleet-e2e/cluster` (it needs a cluster with
//! the images loaded, so it is not part of `cargo test --workspace`).
//! It owns release `p4fleet` in namespace `p4fleet-system`, namespace
//! `p4fleet-samples` and the p4fleet.dev CRDs of that cluster: whatever an
//! earlier run left of them is removed first. Environment:
//!
//! | variable | default |
//! |---|---|
//! | `P4FLEET_KUBECONFIG` | required: the cluster |
//! | `P4FLEET_E2E_OPERATOR_IMAGE` | `p4fleet.local/p4fleet:e2e` |
//! | `P4FLEET_E2E_EMULATOR_IMAGE` | `p4fleet.local/p4fleet-emulator:e2e` |
//! | `P4FLEET_E2E_PULL_POLICY` | `Never` (images are loaded, never pulled) |
//! | `P4FLEET_E2E_SWITCHES` | `config/emulator/emulated-switches.yaml` |
//! | `P4FLEET_E2E_PROGRAMS` | none; a manifest applied over the samples (kind: p4c's firewall) |

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use p4fleet_crds::{Condition, P4Program, Switch, TableEntrySet, VirtualSwitch, find_condition};
use p4fleet_e2e::{ControlPlane, KUBECONFIG_ENV, output_text, repo_root, wait_for};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const RELEASE: &str = "p4fleet";
const NAMESPACE: &str = "p4fleet-system";
const SAMPLES_NS: &str = "p4fleet-samples";
const LEASE: &str = "p4fleet-leader";
const OPERATOR_SELECTOR: &str = "app.kubernetes.io/name=p4fleet,app.kubernetes.io/instance=p4fleet";
/// The image the committed switch manifests name; replaced by the local one.
const EMULATOR_IMAGE_IN_MANIFESTS: &str = "ghcr.io/p4fleet/p4fleet-emulator:0.1.0";

/// Samples whose Switches the switch pods serve: all of them must be Ready.
const SAMPLES_HERE: [&str; 8] = [
    "switch-bmv2.yaml",
    "switch-tofino.yaml",
    "p4program-firewall.yaml",
    "p4program-firewall-tofino.yaml",
    "virtualswitch-firewall.yaml",
    "virtualswitch-firewall-tofino.yaml",
    "tableentryset-firewall.yaml",
    "tableentryset-from-configmap.yaml",
];
/// Samples for targets without a device service yet (DPDK, FPGA): not applied.
const SAMPLES_ELSEWHERE: [&str; 8] = [
    "switch-dpdk.yaml",
    "p4program-l2crypt.yaml",
    "asyncexternpolicy-l2crypt.yaml",
    "switch-fpga.yaml",
    "asyncexternpolicy-ipsec.yaml",
    "p4program-router-configmap.yaml",
    "virtualswitch-fpga-selector.yaml",
    // Needs a web server with the artifact (e2e/tests/artifact_url.rs).
    "p4program-router-url.yaml",
];

const READY_TIMEOUT: Duration = Duration::from_secs(240);

struct Config {
    operator_repository: String,
    operator_tag: String,
    emulator_image: String,
    pull_policy: String,
    switches: PathBuf,
    programs: Option<PathBuf>,
}

impl Config {
    fn from_env() -> Config {
        let var = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
        let operator = var("P4FLEET_E2E_OPERATOR_IMAGE", "p4fleet.local/p4fleet:e2e");
        let (repo, tag) = operator
            .rsplit_once(':')
            .filter(|(r, _)| !r.is_empty())
            .unwrap_or_else(|| {
                panic!("P4FLEET_E2E_OPERATOR_IMAGE={operator}: want REPOSITORY:TAG")
            });
        Config {
            operator_repository: repo.to_string(),
            operator_tag: tag.to_string(),
            emulator_image: var(
                "P4FLEET_E2E_EMULATOR_IMAGE",
                "p4fleet.local/p4fleet-emulator:e2e",
            ),
            pull_policy: var("P4FLEET_E2E_PULL_POLICY", "Never"),
            switches: std::env::var_os("P4FLEET_E2E_SWITCHES")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo_root().join("config/emulator/emulated-switches.yaml")),
            programs: std::env::var_os("P4FLEET_E2E_PROGRAMS").map(PathBuf::from),
        }
    }
}

/// Step durations, printed at the end (and as they happen).
#[derive(Default)]
struct Timings(Vec<(String, Duration)>);

impl Timings {
    fn record(&mut self, what: &str, d: Duration) {
        say(&format!("{what}: {:.1}s", d.as_secs_f64()));
        self.0.push((what.to_string(), d));
    }
}

/// Progress straight to stderr (libtest captures print macros).
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "cluster-e2e: {line}");
}

fn ok(out: std::process::Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {}", output_text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `helm VERB p4fleet charts/p4fleet -n p4fleet-system ARGS --wait`.
fn helm_chart(cp: &ControlPlane, verb: &str, args: &[&str]) {
    let chart = repo_root().join("charts/p4fleet");
    let mut full = vec![
        verb,
        RELEASE,
        chart.to_str().expect("UTF-8 path"),
        "--namespace",
        NAMESPACE,
    ];
    full.extend(args);
    full.extend(["--wait", "--timeout=5m"]);
    ok(cp.helm(&full), &format!("helm {}", full.join(" ")));
}

/// Waits until Deployment `name` in p4fleet-system has rolled out.
fn rollout_status(cp: &ControlPlane, name: &str) {
    let deployment = format!("deployment/{name}");
    let args = [
        "-n",
        NAMESPACE,
        "rollout",
        "status",
        deployment.as_str(),
        "--timeout=4m",
    ];
    ok(cp.kubectl(args), &format!("kubectl {}", args.join(" ")));
}

fn kubectl_json(cp: &ControlPlane, args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.extend(["-o", "json"]);
    let out = ok(cp.kubectl(&full), &format!("kubectl {}", args.join(" ")));
    serde_json::from_str(&out).expect("kubectl JSON")
}

/// Prints what helps with a failure (pods, operator logs, p4fleet objects).
struct Diagnostics<'a>(&'a ControlPlane);

impl Drop for Diagnostics<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let cp = self.0;
        for args in [
            vec!["get", "nodes,pods", "-A", "-o", "wide"],
            vec!["-n", NAMESPACE, "describe", "pods"],
            vec![
                "-n",
                NAMESPACE,
                "logs",
                "-l",
                OPERATOR_SELECTOR,
                "--tail=80",
                "--prefix",
            ],
            vec!["get", "p4fleet", "-A", "-o", "wide"],
            vec!["get", "events", "-A", "--sort-by=.lastTimestamp"],
        ] {
            let out = cp.kubectl(&args);
            say(&format!(
                "--- kubectl {}\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
}

#[tokio::test]
async fn chart_installs_as_pods_and_drives_switches() {
    let kubeconfig = std::env::var_os(KUBECONFIG_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!("{KUBECONFIG_ENV} must name the cluster's kubeconfig (make e2e-cluster sets it)")
        });
    let cp = ControlPlane::attach(&kubeconfig)
        .await
        .unwrap_or_else(|e| panic!("attach to {}: {e}", kubeconfig.display()));
    say(&format!("cluster {} ({})", cp.server(), cp.version()));
    let client = cp.client().await;
    let cfg = Config::from_env();
    let _diag = Diagnostics(&cp);
    let mut t = Timings::default();

    samples_are_all_classified();
    remove_leftovers(&cp, &client).await;

    // --- helm install -------------------------------------------------------
    let start = Instant::now();
    helm_chart(
        &cp,
        "install",
        &[
            "--create-namespace",
            "--set",
            &format!("image.repository={}", cfg.operator_repository),
            "--set",
            &format!("image.tag={}", cfg.operator_tag),
            "--set",
            &format!("image.pullPolicy={}", cfg.pull_policy),
        ],
    );
    t.record(
        "helm install --wait (CRDs, RBAC, operator pod Ready)",
        start.elapsed(),
    );
    crds_carry_the_keep_policy(&client).await;
    let pods = operator_pods(&client).await;
    assert_eq!(pods.len(), 1, "one operator pod after install");
    pod_runs_with_chart_identity(&pods[0], &cfg);

    // --- switches as Deployments + Services -----------------------------------
    let start = Instant::now();
    let manifest = std::fs::read_to_string(&cfg.switches)
        .unwrap_or_else(|e| panic!("read {}: {e}", cfg.switches.display()))
        .replace(EMULATOR_IMAGE_IN_MANIFESTS, &cfg.emulator_image)
        .replace(
            "imagePullPolicy: IfNotPresent",
            &format!("imagePullPolicy: {}", cfg.pull_policy),
        );
    ok(
        cp.kubectl_with_stdin(
            [
                "apply",
                "--server-side",
                "--field-manager=p4fleet-e2e",
                "-f",
                "-",
            ],
            manifest.as_bytes(),
        ),
        "apply switch Deployments/Services",
    );
    let switch_deployments = names_of_kind(&manifest, "Deployment");
    for d in &switch_deployments {
        rollout_status(&cp, d);
    }
    t.record("switch pods Available", start.elapsed());

    // --- samples Ready through the Services -------------------------------------
    let start = Instant::now();
    ok(
        cp.kubectl(["create", "namespace", SAMPLES_NS]),
        "create samples namespace",
    );
    let mut files: Vec<PathBuf> = SAMPLES_HERE
        .iter()
        .map(|f| repo_root().join("config/samples").join(f))
        .collect();
    files.extend(cfg.programs.clone());
    for f in &files {
        ok(
            cp.kubectl([
                "apply",
                "--server-side",
                "--field-manager=p4fleet-e2e",
                "-n",
                SAMPLES_NS,
                "-f",
                &f.to_string_lossy(),
            ]),
            &format!("apply {}", f.display()),
        );
    }
    let all_ready = all_samples_ready(&client, &files).await;
    t.record(
        &format!("samples Ready ({all_ready} objects)"),
        start.elapsed(),
    );
    entries_are_on_the_devices(&cp, &client, &switch_deployments).await;
    operator_pod_did_the_work(&cp, &pods[0].name_any());

    // --- two replicas, leader deleted -----------------------------------------------
    let start = Instant::now();
    helm_chart(
        &cp,
        "upgrade",
        &["--reuse-values", "--set", "replicaCount=2"],
    );
    t.record("helm upgrade to 2 replicas --wait", start.elapsed());
    let leader = wait_for("a leader among 2 ready replicas", READY_TIMEOUT, || {
        let client = client.clone();
        async move { leader_among_ready(&client, 2).await }
    })
    .await;
    say(&format!("leader: {leader}"));

    let pods_api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deleted_at = Instant::now();
    pods_api
        .delete(&leader, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("delete leader pod {leader}: {e}"));
    let new_leader = wait_for("leadership to move", Duration::from_secs(60), || {
        let client = client.clone();
        let old = leader.clone();
        async move {
            let holder = lease_holder(&client).await?;
            let pods = operator_pods(&client).await;
            match holder {
                Some(h) if h != old && pods.iter().any(|p| p.name_any() == h) => Ok(h),
                other => Err(format!("holder {other:?}")),
            }
        }
    })
    .await;
    t.record(
        &format!("leadership {leader} -> {new_leader} after deleting the leader"),
        deleted_at.elapsed(),
    );

    // The new leader reconciles: a spec change reaches the device.
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), SAMPLES_NS);
    let changed_at = Instant::now();
    let patch = json!({"spec": {"entries": [
        {"match": {"hdr.ipv4.srcAddr": "10.0.0.1", "hdr.ipv4.dstAddr": "10.0.1.1"}, "action": "allow", "params": {"port": "1"}},
        {"match": {"hdr.ipv4.srcAddr": "10.0.0.1", "hdr.ipv4.dstAddr": "10.0.1.2"}, "action": "allow", "params": {"port": "2"}},
        {"match": {"hdr.ipv4.srcAddr": "10.0.0.66", "hdr.ipv4.dstAddr": "10.0.1.1"}, "action": "drop"},
        {"match": {"hdr.ipv4.srcAddr": "10.0.0.77", "hdr.ipv4.dstAddr": "10.0.1.1"}, "action": "drop"},
    ]}});
    let changed = sets
        .patch(
            "firewall-inline",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("patch firewall-inline");
    let generation = changed.metadata.generation;
    wait_for(
        "firewall-inline Ready at its new generation",
        READY_TIMEOUT,
        || {
            let sets = sets.clone();
            async move {
                let s = sets
                    .get("firewall-inline")
                    .await
                    .map_err(|e| e.to_string())?;
                let st = s.status.clone().ok_or("no status")?;
                ready_at(&st.conditions, st.observed_generation, generation)?;
                (st.applied == 4)
                    .then_some(())
                    .ok_or(format!("applied {}", st.applied))
            }
        },
    )
    .await;
    t.record(
        "new leader applied a TableEntrySet change",
        changed_at.elapsed(),
    );
    operator_pod_did_the_work(&cp, &new_leader);
    // The Deployment replaced the deleted pod.
    rollout_status(&cp, "p4fleet");
    no_forbidden_in_operator_logs(&cp);

    // --- helm uninstall ----------------------------------------------------------------
    let start = Instant::now();
    ok(
        cp.helm([
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--wait",
            "--timeout=3m",
        ]),
        "helm uninstall",
    );
    wait_for("operator pods gone", Duration::from_secs(120), || {
        let client = client.clone();
        async move {
            let n = all_operator_pods(&client).await.len();
            (n == 0).then_some(()).ok_or(format!("{n} pods left"))
        }
    })
    .await;
    t.record("helm uninstall (pods gone)", start.elapsed());
    nothing_of_the_release_left(&cp, &client).await;
    crds_and_resources_stay(&client).await;

    remove_leftovers(&cp, &client).await;
    let summary: Vec<String> =
        t.0.iter()
            .map(|(w, d)| format!("  {:>6.1}s  {w}", d.as_secs_f64()))
            .collect();
    say(&format!("timings:\n{}", summary.join("\n")));
}

fn samples_are_all_classified() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(repo_root().join("config/samples"))
        .expect("config/samples")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    let known: BTreeSet<String> = SAMPLES_HERE
        .iter()
        .chain(&SAMPLES_ELSEWHERE)
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        on_disk, known,
        "every sample must be listed in SAMPLES_HERE (Ready in this test) or SAMPLES_ELSEWHERE"
    );
}

/// Names of the objects of `kind` in a multi-document manifest.
fn names_of_kind(manifest: &str, kind: &str) -> Vec<String> {
    serde_yaml::Deserializer::from_str(manifest)
        .filter_map(|d| <Value as serde::Deserialize>::deserialize(d).ok())
        .filter(|d| d["kind"] == kind)
        .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// Removes what an earlier run (or a failure) left: release, namespaces,
/// Switches, CRDs. TableEntrySet finalizers are dropped first, since no
/// operator may be running to honour them.
async fn remove_leftovers(cp: &ControlPlane, client: &Client) {
    let _ = cp.helm([
        "uninstall",
        RELEASE,
        "--namespace",
        NAMESPACE,
        "--ignore-not-found",
        "--wait",
    ]);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let have_crds = crds
        .get_opt("tableentrysets.p4fleet.dev")
        .await
        .ok()
        .flatten()
        .is_some();
    if have_crds {
        let sets: Api<TableEntrySet> = Api::all(client.clone());
        for s in sets
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let api: Api<TableEntrySet> =
                Api::namespaced(client.clone(), &s.namespace().unwrap_or_default());
            let _ = api
                .patch(
                    &s.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await;
        }
    }
    for ns in [SAMPLES_NS, NAMESPACE] {
        let _ = cp.kubectl([
            "delete",
            "namespace",
            ns,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=120s",
        ]);
    }
    // Documented way to remove the CRDs (and so every p4fleet resource).
    let _ = cp.kubectl([
        "delete",
        "--ignore-not-found",
        "--wait=true",
        "-f",
        &repo_root()
            .join("charts/p4fleet/crds/crds.yaml")
            .to_string_lossy(),
    ]);
    let left: Vec<String> = crds
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.spec.group == p4fleet_crds::GROUP)
        .map(|c| c.name_any())
        .collect();
    assert!(left.is_empty(), "p4fleet CRDs left after cleanup: {left:?}");
}

async fn crds_carry_the_keep_policy(client: &Client) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in p4fleet_crds::all() {
        let name = crd.name_any();
        let got = api
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name} after helm install: {e}"));
        let ann = got.metadata.annotations.clone().unwrap_or_default();
        for (k, v) in p4fleet_crds::CRD_ANNOTATIONS {
            assert_eq!(
                ann.get(k).map(String::as_str),
                Some(v),
                "CRD {name} annotation {k}"
            );
        }
    }
}

/// Operator pods that are not terminating.
async fn operator_pods(client: &Client) -> Vec<Pod> {
    all_operator_pods(client)
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

async fn all_operator_pods(client: &Client) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    api.list(&ListParams::default().labels(OPERATOR_SELECTOR))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// The operator pod runs the local image as the chart's ServiceAccount
/// (whose token is the only credential in it) and as the non-root user.
fn pod_runs_with_chart_identity(pod: &Pod, cfg: &Config) {
    let spec = pod.spec.clone().expect("pod spec");
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some("p4fleet"),
        "operator pod ServiceAccount"
    );
    let c = &spec.containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some(format!("{}:{}", cfg.operator_repository, cfg.operator_tag).as_str())
    );
    let sc = c
        .security_context
        .clone()
        .expect("container securityContext");
    assert_eq!(sc.run_as_user, Some(65532));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
}

fn ready_at(
    conditions: &[Condition],
    observed: Option<i64>,
    generation: Option<i64>,
) -> Result<(), String> {
    if observed != generation {
        return Err(format!(
            "observedGeneration {observed:?}, generation {generation:?}"
        ));
    }
    match find_condition(conditions, "Ready") {
        Some(c) if c.is_true() => Ok(()),
        other => Err(format!("Ready: {other:?}")),
    }
}

async fn ready_kind<K>(api: &Api<K>, name: &str) -> Result<(), String>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + HasConditions,
{
    let obj = api.get(name).await.map_err(|e| format!("{name}: {e}"))?;
    let (conds, observed) = obj.conditions();
    ready_at(&conds, observed, obj.meta().generation).map_err(|e| format!("{name}: {e}"))
}

trait HasConditions {
    fn conditions(&self) -> (Vec<Condition>, Option<i64>);
}

macro_rules! has_conditions {
    ($($t:ty),*) => {$(
        impl HasConditions for $t {
            fn conditions(&self) -> (Vec<Condition>, Option<i64>) {
                self.status
                    .as_ref()
                    .map(|s| (s.conditions.clone(), s.observed_generation))
                    .unwrap_or_default()
            }
        }
    )*};
}
has_conditions!(Switch, P4Program, VirtualSwitch, TableEntrySet);

/// Waits until every p4fleet object in `files` is Ready at its generation;
/// returns how many there are.
async fn all_samples_ready(client: &Client, files: &[PathBuf]) -> usize {
    let mut objects: Vec<(String, String)> = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).expect("read sample");
        for d in serde_yaml::Deserializer::from_str(&text) {
            let Ok(doc) = <Value as serde::Deserialize>::deserialize(d) else {
                continue;
            };
            if doc["apiVersion"]
                .as_str()
                .is_some_and(|a| a.starts_with("p4fleet.dev/"))
            {
                let kind = doc["kind"].as_str().unwrap_or_default().to_string();
                let name = doc["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if !objects.contains(&(kind.clone(), name.clone())) {
                    objects.push((kind, name));
                }
            }
        }
    }
    for (kind, name) in &objects {
        let what = format!("{kind}/{name} Ready");
        wait_for(&what, READY_TIMEOUT, || {
            let client = client.clone();
            let (kind, name) = (kind.clone(), name.clone());
            async move {
                match kind.as_str() {
                    "Switch" => ready_kind(&Api::<Switch>::all(client), &name).await,
                    "P4Program" => {
                        ready_kind(&Api::<P4Program>::namespaced(client, SAMPLES_NS), &name).await
                    }
                    "VirtualSwitch" => {
                        ready_kind(&Api::<VirtualSwitch>::namespaced(client, SAMPLES_NS), &name)
                            .await
                    }
                    "TableEntrySet" => {
                        ready_kind(&Api::<TableEntrySet>::namespaced(client, SAMPLES_NS), &name)
                            .await
                    }
                    other => panic!("sample kind {other} has no Ready check here"),
                }
            }
        })
        .await;
    }
    objects.len()
}

/// Reads the emulators' counters through the API server's service proxy
/// (works on any cluster, no port-forward): the device holds exactly what
/// each TableEntrySet says it applied. Real bmv2 pods have no stats port.
async fn entries_are_on_the_devices(cp: &ControlPlane, client: &Client, deployments: &[String]) {
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), SAMPLES_NS);
    // TableEntrySet -> (Service, device id) of its VirtualSwitch's Switch.
    for (set, service, device) in [
        ("firewall-inline", "bmv2-1", 1),
        ("firewall-bulk", "tofino-1", 0),
    ] {
        if !deployments.iter().any(|d| d == service) {
            continue;
        }
        let svc = kubectl_json(cp, &["-n", NAMESPACE, "get", "service", service]);
        let has_stats = svc["spec"]["ports"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["name"] == "stats"));
        if !has_stats {
            say(&format!(
                "{service}: no stats port (a real device); entries checked by status only"
            ));
            continue;
        }
        let applied = sets
            .get(set)
            .await
            .expect("get set")
            .status
            .expect("status")
            .applied;
        let path =
            format!("/api/v1/namespaces/{NAMESPACE}/services/{service}:stats/proxy/stats/{device}");
        let out = ok(
            cp.kubectl(["get", "--raw", &path]),
            &format!("emulator stats via {path}"),
        );
        let stats: Value = serde_json::from_str(&out).expect("stats JSON");
        assert_eq!(
            stats["entries"].as_u64(),
            Some(applied),
            "{service} device {device} holds {} entries; {set} reports {applied} applied",
            stats["entries"]
        );
        assert!(
            stats["pipeline_set"] == true,
            "{service}: no pipeline: {stats}"
        );
        say(&format!(
            "{service} device {device}: {applied} entries, as {set} reports"
        ));
    }
}

/// Events about the samples come from this operator pod (reportingInstance),
/// so they were written with its ServiceAccount token.
fn operator_pod_did_the_work(cp: &ControlPlane, pod: &str) {
    let events = kubectl_json(cp, &["-n", SAMPLES_NS, "get", "events.events.k8s.io"]);
    let by_pod = events["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|e| e["reportingController"] == "p4fleet" && e["reportingInstance"] == pod)
                .count()
        })
        .unwrap_or(0);
    assert!(
        by_pod > 0,
        "no Events in {SAMPLES_NS} reported by operator pod {pod}"
    );
    say(&format!(
        "{by_pod} Events in {SAMPLES_NS} reported by {pod}"
    ));
}

/// A missing permission shows as a 403 in the operator's log even where a
/// resource still becomes Ready (e.g. Events); none may appear.
fn no_forbidden_in_operator_logs(cp: &ControlPlane) {
    let out = cp.kubectl([
        "-n",
        NAMESPACE,
        "logs",
        "-l",
        OPERATOR_SELECTOR,
        "--tail=-1",
        "--prefix",
    ]);
    let logs = ok(out, "operator logs");
    let forbidden: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("forbidden") || l.contains("Forbidden"))
        .take(5)
        .collect();
    assert!(
        forbidden.is_empty(),
        "operator hit RBAC denials:\n{}",
        forbidden.join("\n")
    );
}

async fn lease_holder(client: &Client) -> Result<Option<String>, String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let lease = leases.get_opt(LEASE).await.map_err(|e| e.to_string())?;
    Ok(lease
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty()))
}

async fn leader_among_ready(client: &Client, want: usize) -> Result<String, String> {
    let pods = operator_pods(client).await;
    let ready: Vec<String> = pods
        .iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .map(|p| p.name_any())
        .collect();
    if ready.len() != want || pods.len() != want {
        return Err(format!("{} pods, {} ready", pods.len(), ready.len()));
    }
    match lease_holder(client).await? {
        Some(h) if ready.contains(&h) => Ok(h),
        other => Err(format!("lease holder {other:?} not among {ready:?}")),
    }
}

async fn nothing_of_the_release_left(cp: &ControlPlane, client: &Client) {
    let selector = "app.kubernetes.io/instance=p4fleet,app.kubernetes.io/managed-by=Helm";
    let namespaced = kubectl_json(
        cp,
        &[
            "-n",
            NAMESPACE,
            "get",
            "deployments,replicasets,pods,services,serviceaccounts,roles,rolebindings,poddisruptionbudgets,configmaps",
            "-l",
            selector,
        ],
    );
    let cluster = kubectl_json(
        cp,
        &["get", "clusterroles,clusterrolebindings", "-l", selector],
    );
    let releases = kubectl_json(
        cp,
        &[
            "-n",
            NAMESPACE,
            "get",
            "secrets",
            "-l",
            "owner=helm,name=p4fleet",
        ],
    );
    for (what, list) in [
        ("namespaced", &namespaced),
        ("cluster-scoped", &cluster),
        ("release secrets", &releases),
    ] {
        let names: Vec<String> = list["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|i| {
                        format!(
                            "{}/{}",
                            i["kind"].as_str().unwrap_or("?"),
                            i["metadata"]["name"].as_str().unwrap_or("?")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            names.is_empty(),
            "{what} objects of the release left after helm uninstall: {names:?}"
        );
    }
    // The Lease is the operator's own object, not Helm's: it stays until the
    // namespace goes (docs/install.md). helm uninstall deletes the RoleBinding
    // while the pods shut down, so the release on SIGTERM may be refused;
    // then the Lease names a pod that is gone and expires after 15 s.
    let holder = lease_holder(client).await.expect("read lease");
    let live: Vec<String> = all_operator_pods(client)
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();
    if let Some(h) = &holder {
        assert!(
            !live.contains(h),
            "Lease {LEASE} held by live pod {h} after uninstall"
        );
    }
    say(&format!(
        "Lease {LEASE} after uninstall: {}",
        holder.map_or("released".to_string(), |h| format!(
            "still names {h} (gone; expires in 15 s)"
        ))
    ));
}

async fn crds_and_resources_stay(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in p4fleet_crds::all() {
        let name = crd.name_any();
        assert!(
            crds.get_opt(&name).await.expect("get CRD").is_some(),
            "CRD {name} deleted by helm uninstall"
        );
    }
    let switches: Api<Switch> = Api::all(client.clone());
    assert!(
        switches
            .get_opt("bmv2-1")
            .await
            .expect("get Switch")
            .is_some(),
        "Switch bmv2-1 gone"
    );
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), SAMPLES_NS);
    let n = sets
        .list(&ListParams::default())
        .await
        .expect("list sets")
        .items
        .len();
    assert_eq!(n, 2, "TableEntrySets after uninstall");
}
