//! p4fleet as real pods on a real cluster (`make e2e-cluster` on a local node
//! from hack/cluster.sh, or e2e/kind/run.sh): the chart installed by Helm
//! with locally built images; switches as Deployments + Services (the
//! emulator's bmv2, Tofino, DPDK target and FPGA board, or a real bmv2 in
//! kind); every sample in config/samples applied and Ready through them
//! (all but the few named in [`SAMPLES_NOT_APPLIED`], each with its reason),
//! with the entries on the devices; `helm upgrade` to two replicas and
//! leadership moving when the leader pod is deleted (timed); everything done
//! by the operator pod with the chart's ServiceAccount and RBAC; no Warning
//! logged by the operator and no Warning Event from it; `helm uninstall`
//! leaving no operator objects while the CRDs and resources stay
//! (docs/install.md, CRD policy); then docs/install.md's removal of p4fleet
//! without its operator, run as written there, leaving nothing of p4fleet.
//!
//! Every command has a timeout and every wait a deadline; each says what it
//! waits for.
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
//! | `P4FLEET_E2E_NODE_LOCAL` | none; `1`: this process runs on the cluster's node (make e2e-cluster), so the switch Services' ClusterIPs are probed from it before the samples go in |
//! | `P4FLEET_E2E_SKIP_SAMPLES` | none; `FILE=REASON;FILE=REASON`: samples the given switches cannot serve (kind: the real bmv2 has one device id) |

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use p4fleet_crds::{
    AsyncExternPolicy, Condition, P4Program, Switch, TableEntrySet, VirtualSwitch, find_condition,
};
use p4fleet_e2e::{
    ControlPlane, KUBECONFIG_ENV, helm_bin, output_text, repo_root, spawn_feeding, wait_for,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const RELEASE: &str = "p4fleet";
const NAMESPACE: &str = "p4fleet-system";
const SAMPLES_NS: &str = "p4fleet-samples";
const LEASE: &str = "p4fleet-leader";
const OPERATOR_SELECTOR: &str = "app.kubernetes.io/name=p4fleet,app.kubernetes.io/instance=p4fleet";
/// The image the committed switch manifests name; replaced by the local one.
const EMULATOR_IMAGE_IN_MANIFESTS: &str = "ghcr.io/p4fleet/p4fleet-emulator:0.1.0";
const SAMPLES_DIR: &str = "config/samples";

/// The samples this test does not apply, each with the reason. Every other
/// file in config/samples is applied, and every p4fleet object in it must
/// become Ready: a new sample is covered without being listed anywhere,
/// and one that cannot become Ready fails the test until it can or is
/// listed here with its reason. A name here that is not a sample (any
/// more) fails the test too.
const SAMPLES_NOT_APPLIED: [(&str, &str); 4] = [
    (
        "asyncexternpolicy-ipsec.yaml",
        "its P4Program `ipsec` has no artifacts anywhere (no examples/ipsec); \
         asyncexternpolicy-l2crypt.yaml covers AsyncExternPolicy on dpdk-1",
    ),
    (
        "p4program-router-url.yaml",
        "needs a web server holding the artifact, and its sha256 is a placeholder; \
         e2e/tests/artifact_url.rs covers URL artifacts",
    ),
    (
        "tableentryset-l2-learning.yaml",
        "needs VirtualSwitch `l2switch` running a program whose MyIngress.smac is \
         compiled with support_timeout (P4Info NOTIFY_CONTROL): no sample or example \
         has one; e2e/tests/learning_e2e.rs covers it with a patched P4Info",
    ),
    (
        "tableentryset-l2-static-idle.yaml",
        "as tableentryset-l2-learning.yaml: VirtualSwitch `l2switch` with an \
         idle-timeout smac; e2e/tests/learning_e2e.rs covers it",
    ),
];

/// ConfigMaps the samples read and their comments tell users to create:
/// made before the samples are applied.
const SAMPLE_CONFIGMAPS: [(&str, SampleData); 3] = [
    // p4program-l2crypt.yaml: kubectl create configmap l2crypt --from-file=examples/l2crypt/
    ("l2crypt", SampleData::Dir("examples/l2crypt")),
    // p4program-fabric.yaml: kubectl create configmap fabric --from-file=examples/fabric/
    ("fabric", SampleData::Dir("examples/fabric")),
    // p4program-router-configmap.yaml (examples/router/fpga.yaml):
    // p4fleet-emulator fpga-bitstream --bits 2800000 --seed router > router.bit
    // kubectl create configmap router-fpga --from-file=bitstream=router.bit
    (
        "router-fpga",
        SampleData::Bitstream {
            key: "bitstream",
            bits: 2_800_000,
            seed: "router",
        },
    ),
];

enum SampleData {
    /// Every file of a directory, one key each (`--from-file=DIR/`).
    Dir(&'static str),
    /// The emulator's synthetic bitstream (`p4fleet-emulator fpga-bitstream`).
    Bitstream {
        key: &'static str,
        bits: u64,
        seed: &'static str,
    },
}

/// TableEntrySets whose device is checked: the Service of the set's
/// Switch and the device id of its VirtualSwitch's slot. The emulator's
/// counters must hold what the set reports applied.
const ENTRIES_ON_DEVICES: [(&str, &str, u64); 3] = [
    ("firewall-inline", "bmv2-1", 1),
    ("firewall-bulk", "tofino-1", 0),
    // virtualswitch-fabric-replication.yaml: bmv2-1 slot 1, so device 1 + 1.
    ("fabric-l2-counted", "bmv2-1", 2),
];

const READY_TIMEOUT: Duration = Duration::from_secs(240);
/// kubectl calls that return at once.
const QUICK: Duration = Duration::from_secs(60);

struct Config {
    operator_repository: String,
    operator_tag: String,
    emulator_image: String,
    pull_policy: String,
    switches: PathBuf,
    programs: Option<PathBuf>,
    /// Samples this run leaves out, with the reason (`P4FLEET_E2E_SKIP_SAMPLES`).
    skip: Vec<(String, String)>,
    /// This process runs on the cluster's node, so Service ClusterIPs are
    /// reachable from it (`P4FLEET_E2E_NODE_LOCAL=1`, make e2e-cluster).
    node_local: bool,
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
        let skip = var("P4FLEET_E2E_SKIP_SAMPLES", "")
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| match s.split_once('=') {
                Some((f, why)) if !why.trim().is_empty() => {
                    (f.trim().to_string(), why.trim().to_string())
                }
                _ => panic!("P4FLEET_E2E_SKIP_SAMPLES: {s:?} is not FILE=REASON"),
            })
            .collect();
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
            skip,
            node_local: var("P4FLEET_E2E_NODE_LOCAL", "") == "1",
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

fn ok(out: Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {}", output_text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// --- commands, each with a timeout ------------------------------------------------

/// Runs `cmd` in a process group of its own, feeding `stdin` when not
/// empty, for at most `timeout`: then the whole group is killed and the
/// test fails naming `what` and what the command printed.
fn run_bounded(mut cmd: Command, stdin: &[u8], timeout: Duration, what: &str) -> Output {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let mut child = spawn_feeding(&mut cmd, stdin)
        .unwrap_or_else(|e| panic!("{what}: spawn {:?}: {e}", cmd.get_program()));
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if Instant::now() >= deadline {
            // SAFETY: kill(2) on the group this child leads.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let out = Output {
                status: child.wait().expect("wait for killed child"),
                stdout: stdout.join().unwrap_or_default(),
                stderr: stderr.join().unwrap_or_default(),
            };
            panic!(
                "timed out after {}s: {what}\n{}",
                timeout.as_secs(),
                output_text(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

fn drain<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

/// `kubectl ARGS` against the cluster for at most `timeout`, printed first.
fn kubectl(cp: &ControlPlane, args: &[&str], stdin: &[u8], timeout: Duration) -> Output {
    let what = format!("kubectl {}", args.join(" "));
    say(&format!("$ {what}  (timeout {}s)", timeout.as_secs()));
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(cp.kubeconfig_path()).args(args);
    run_bounded(cmd, stdin, timeout, &what)
}

/// [`kubectl`] that must succeed; its stdout.
fn kubectl_ok(cp: &ControlPlane, args: &[&str], timeout: Duration) -> String {
    ok(
        kubectl(cp, args, &[], timeout),
        &format!("kubectl {}", args.join(" ")),
    )
}

fn kubectl_json(cp: &ControlPlane, args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.extend(["-o", "json"]);
    let out = kubectl_ok(cp, &full, QUICK);
    serde_json::from_str(&out).expect("kubectl JSON")
}

/// `helm ARGS` for at most `timeout`, which must succeed.
fn helm_ok(cp: &ControlPlane, args: &[&str], timeout: Duration) -> String {
    let what = format!("helm {}", args.join(" "));
    say(&format!("$ {what}  (timeout {}s)", timeout.as_secs()));
    let mut cmd = Command::new(helm_bin());
    cmd.arg("--kubeconfig").arg(cp.kubeconfig_path()).args(args);
    ok(run_bounded(cmd, &[], timeout, &what), &what)
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
    helm_ok(cp, &full, Duration::from_secs(330));
}

/// Waits until Deployment `name` in p4fleet-system has rolled out.
fn rollout_status(cp: &ControlPlane, name: &str) {
    let deployment = format!("deployment/{name}");
    kubectl_ok(
        cp,
        &[
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            deployment.as_str(),
            "--timeout=4m",
        ],
        Duration::from_secs(270),
    );
}

/// [`wait_for`], saying what it waits for and how long that took; a
/// request that never returns cannot outlast the deadline either.
async fn wait<T, F, Fut>(what: &str, timeout: Duration, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    say(&format!(
        "waiting for {what} (timeout {}s)",
        timeout.as_secs()
    ));
    let start = Instant::now();
    let hard = timeout + Duration::from_secs(30);
    let v = tokio::time::timeout(hard, wait_for(what, timeout, f))
        .await
        .unwrap_or_else(|_| panic!("timed out after {hard:?} waiting for {what}: a request hung"));
    say(&format!(
        "{what}: after {:.1}s",
        start.elapsed().as_secs_f64()
    ));
    v
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
            let mut cmd = Command::new("kubectl");
            cmd.arg("--kubeconfig")
                .arg(cp.kubeconfig_path())
                .args(&args);
            let what = format!("kubectl {}", args.join(" "));
            // A panic in here would abort the process: no run_bounded.
            let out = cmd
                .stdin(Stdio::null())
                .arg("--request-timeout=20s")
                .output();
            match out {
                Ok(out) => say(&format!(
                    "--- {what}\n{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                )),
                Err(e) => say(&format!("--- {what}: {e}")),
            }
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

    let mut files = samples_to_apply(&cfg.skip);
    files.extend(cfg.programs.clone());
    let objects = p4fleet_objects(&files);
    let start = Instant::now();
    remove_leftovers(&cp, &client).await;
    t.record("leftovers of earlier runs removed", start.elapsed());

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
        kubectl(
            &cp,
            &[
                "apply",
                "--server-side",
                "--field-manager=p4fleet-e2e",
                "-f",
                "-",
            ],
            manifest.as_bytes(),
            QUICK,
        ),
        "apply switch Deployments/Services",
    );
    let switch_deployments = names_of_kind(&manifest, "Deployment");
    for d in &switch_deployments {
        rollout_status(&cp, d);
    }
    services_serve(
        &client,
        &names_of_kind(&manifest, "Service"),
        cfg.node_local,
    )
    .await;
    t.record(
        &format!("switch pods Available ({})", switch_deployments.join(", ")),
        start.elapsed(),
    );

    // --- samples Ready through the Services -------------------------------------
    let start = Instant::now();
    kubectl_ok(&cp, &["create", "namespace", SAMPLES_NS], QUICK);
    sample_configmaps(&client).await;
    for f in &files {
        kubectl_ok(
            &cp,
            &[
                "apply",
                "--server-side",
                "--field-manager=p4fleet-e2e",
                "-n",
                SAMPLES_NS,
                "-f",
                &f.to_string_lossy(),
            ],
            QUICK,
        );
    }
    all_ready(&client, &objects).await;
    t.record(
        &format!(
            "samples Ready ({} objects from {} files)",
            objects.len(),
            files.len()
        ),
        start.elapsed(),
    );
    entries_are_on_the_devices(&cp, &client, &switch_deployments, &objects).await;
    operator_pod_did_the_work(&cp, &pods[0].name_any());

    // Every operator pod's log, read while the pod exists (a deleted pod's
    // log goes with it).
    let mut logs = OperatorLogs::default();
    logs.read(&cp, &client).await;

    // --- two replicas, leader deleted -----------------------------------------------
    let start = Instant::now();
    helm_chart(
        &cp,
        "upgrade",
        &["--reuse-values", "--set", "replicaCount=2"],
    );
    t.record("helm upgrade to 2 replicas --wait", start.elapsed());
    let leader = wait("a leader among 2 ready replicas", READY_TIMEOUT, || {
        let client = client.clone();
        async move { leader_among_ready(&client, 2).await }
    })
    .await;
    say(&format!("leader: {leader}"));

    logs.read(&cp, &client).await;
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deleted_at = Instant::now();
    pods_api
        .delete(&leader, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("delete leader pod {leader}: {e}"));
    let new_leader = wait(
        "leadership to move to the other pod",
        Duration::from_secs(60),
        || {
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
        },
    )
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
    wait(
        "firewall-inline Ready at its new generation with 4 entries applied",
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
    logs.read(&cp, &client).await;
    let warning_events = p4fleet_warning_events(&cp);

    // --- helm uninstall ----------------------------------------------------------------
    let start = Instant::now();
    helm_ok(
        &cp,
        &[
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--wait",
            "--timeout=3m",
        ],
        Duration::from_secs(200),
    );
    wait("operator pods gone", Duration::from_secs(120), || {
        let client = client.clone();
        async move {
            let n = all_operator_pods(&client).await.len();
            (n == 0).then_some(()).ok_or(format!("{n} pods left"))
        }
    })
    .await;
    t.record("helm uninstall (pods gone)", start.elapsed());
    nothing_of_the_release_left(&cp, &client).await;
    crds_and_resources_stay(&client, &objects).await;

    // --- p4fleet removed without its operator (docs/install.md) ------------------------
    let start = Instant::now();
    remove_without_operator(&cp);
    nothing_of_p4fleet_left(&client).await;
    t.record(
        "docs/install.md removal without the operator (finalizers, objects, CRDs, Lease)",
        start.elapsed(),
    );
    let start = Instant::now();
    delete_test_namespaces(&cp);
    t.record("test namespaces deleted", start.elapsed());

    // --- nothing logged as a warning ---------------------------------------------------
    // The timings first: they are worth reading whatever the verdict.
    let summary: Vec<String> =
        t.0.iter()
            .map(|(w, d)| format!("  {:>6.1}s  {w}", d.as_secs_f64()))
            .collect();
    say(&format!("timings:\n{}", summary.join("\n")));
    let mut complaints = Vec::new();
    let bad_lines = logs.bad_lines();
    if !bad_lines.is_empty() {
        complaints.push(format!(
            "the operator logged {} warnings, errors or RBAC denials:\n{}",
            bad_lines.len(),
            bad_lines.join("\n")
        ));
    }
    if !warning_events.is_empty() {
        complaints.push(format!(
            "the operator published {} Warning Events:\n{}",
            warning_events.len(),
            warning_events.join("\n")
        ));
    }
    assert!(complaints.is_empty(), "{}", complaints.join("\n"));
    say("no WARN/ERROR line in the operator pods' logs, no Warning Event from p4fleet");
}

// --- the samples -------------------------------------------------------------------

/// The sample files to apply, in the order a user would (Switches,
/// programs, VirtualSwitches, then what runs on them): every file in
/// config/samples but those in [`SAMPLES_NOT_APPLIED`] and the run's
/// `skip`, which must all name samples. Each applied file must hold a
/// p4fleet object (which must then become Ready).
fn samples_to_apply(skip: &[(String, String)]) -> Vec<PathBuf> {
    let dir = repo_root().join(SAMPLES_DIR);
    let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("config/samples")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    let mut excluded = BTreeMap::new();
    let listed = SAMPLES_NOT_APPLIED
        .iter()
        .map(|(f, why)| (f.to_string(), why.to_string()));
    for (file, why) in listed.chain(skip.iter().cloned()) {
        assert!(
            on_disk.contains(&file),
            "{file} is left out of the cluster test ({why}) but is not in {SAMPLES_DIR}: \
             remove it from SAMPLES_NOT_APPLIED / P4FLEET_E2E_SKIP_SAMPLES"
        );
        say(&format!("sample not applied: {file}: {why}"));
        excluded.insert(file, why);
    }
    let mut files: Vec<(u8, PathBuf)> = on_disk
        .iter()
        .filter(|f| !excluded.contains_key(*f))
        .map(|f| {
            let path = dir.join(f);
            let kinds: Vec<String> = p4fleet_objects(std::slice::from_ref(&path))
                .into_iter()
                .map(|(kind, _)| kind)
                .collect();
            assert!(
                !kinds.is_empty(),
                "sample {f} holds no p4fleet object: nothing of it can be checked Ready"
            );
            let rank = kinds
                .iter()
                .map(|k| match k.as_str() {
                    "Switch" => 0,
                    "P4Program" => 1,
                    "VirtualSwitch" => 2,
                    _ => 3,
                })
                .min()
                .unwrap_or(3);
            (rank, path)
        })
        .collect();
    files.sort();
    say(&format!(
        "applying {} of {} samples; each of their p4fleet objects must become Ready",
        files.len(),
        on_disk.len()
    ));
    files.into_iter().map(|(_, p)| p).collect()
}

/// The (kind, name) of every p4fleet object in `files`, once each.
fn p4fleet_objects(files: &[PathBuf]) -> Vec<(String, String)> {
    let mut objects: Vec<(String, String)> = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(f).unwrap_or_else(|e| panic!("read {}: {e}", f.display()));
        for d in serde_yaml::Deserializer::from_str(&text) {
            let doc = <Value as serde::Deserialize>::deserialize(d)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", f.display()));
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
    objects
}

/// The ConfigMaps of [`SAMPLE_CONFIGMAPS`] in the samples' namespace.
async fn sample_configmaps(client: &Client) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), SAMPLES_NS);
    for (name, data) in &SAMPLE_CONFIGMAPS {
        let mut text = BTreeMap::new();
        let mut binary = BTreeMap::new();
        match data {
            SampleData::Dir(dir) => {
                for e in std::fs::read_dir(repo_root().join(dir)).expect("examples dir") {
                    let path = e.expect("entry").path();
                    if !path.is_file() {
                        continue;
                    }
                    let key = path.file_name().unwrap().to_string_lossy().into_owned();
                    let bytes = std::fs::read(&path).expect("read example file");
                    match String::from_utf8(bytes) {
                        Ok(s) => {
                            text.insert(key, s);
                        }
                        Err(e) => {
                            binary.insert(key, ByteString(e.into_bytes()));
                        }
                    }
                }
            }
            SampleData::Bitstream { key, bits, seed } => {
                let bytes = p4fleet_emulator::fpga::bitstream::synthetic(*bits, seed)
                    .expect("synthetic bitstream");
                binary.insert(key.to_string(), ByteString(bytes));
            }
        }
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            data: Some(text),
            binary_data: Some(binary),
            ..Default::default()
        };
        let mut value = serde_json::to_value(&cm).expect("ConfigMap JSON");
        value["apiVersion"] = json!("v1");
        value["kind"] = json!("ConfigMap");
        tokio::time::timeout(
            QUICK,
            api.patch(
                name,
                &PatchParams::apply("p4fleet-e2e"),
                &Patch::Apply(&value),
            ),
        )
        .await
        .unwrap_or_else(|_| panic!("ConfigMap {name}: no answer within {QUICK:?}"))
        .unwrap_or_else(|e| panic!("ConfigMap {name}: {e}"));
        say(&format!("ConfigMap {SAMPLES_NS}/{name} for the samples"));
    }
}

/// Waits until each Service in `services` (namespace p4fleet-system) sends
/// its traffic somewhere: an EndpointSlice of it lists a ready endpoint,
/// and, on the cluster's node (`node_local`), its ClusterIP accepts a TCP
/// connection on every port, i.e. kube-proxy has programmed it. A Switch
/// applied before that would meet a refused connection (a Warning).
async fn services_serve(client: &Client, services: &[String], node_local: bool) {
    let what = format!(
        "Services {} with ready endpoints{}",
        services.join(", "),
        if node_local {
            " and ClusterIPs accepting connections from the node"
        } else {
            ""
        }
    );
    wait(&what, Duration::from_secs(60), || {
        let client = client.clone();
        async move {
            let svcs: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
            let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
            for name in services {
                let lp =
                    ListParams::default().labels(&format!("kubernetes.io/service-name={name}"));
                let ready = slices
                    .list(&lp)
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .iter()
                    .flat_map(|s| &s.endpoints)
                    .any(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true));
                if !ready {
                    return Err(format!("Service {name}: no ready endpoint"));
                }
                if !node_local {
                    continue;
                }
                let svc = svcs.get(name).await.map_err(|e| e.to_string())?;
                let spec = svc.spec.unwrap_or_default();
                let ip = spec.cluster_ip.unwrap_or_default();
                for port in spec.ports.unwrap_or_default() {
                    let addr = format!("{ip}:{}", port.port);
                    match tokio::time::timeout(
                        Duration::from_secs(2),
                        tokio::net::TcpStream::connect(&addr),
                    )
                    .await
                    {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return Err(format!("Service {name} at {addr}: {e}")),
                        Err(_) => {
                            return Err(format!("Service {name} at {addr}: no answer in 2 s"));
                        }
                    }
                }
            }
            Ok(())
        }
    })
    .await;
}

/// Names of the objects of `kind` in a multi-document manifest.
fn names_of_kind(manifest: &str, kind: &str) -> Vec<String> {
    serde_yaml::Deserializer::from_str(manifest)
        .filter_map(|d| <Value as serde::Deserialize>::deserialize(d).ok())
        .filter(|d| d["kind"] == kind)
        .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

// --- removing p4fleet ----------------------------------------------------------------

/// What precedes, in docs/install.md, the block that removes p4fleet once
/// its operator is gone; this test runs that block as it stands there.
const REMOVAL_MARKER: &str = "<!-- e2e/tests/cluster.rs runs the next block -->";

/// The `sh` block right after [`REMOVAL_MARKER`] in docs/install.md.
fn removal_block() -> String {
    let path = repo_root().join("docs/install.md");
    let doc = std::fs::read_to_string(&path).expect("docs/install.md");
    let (_, after) = doc
        .split_once(REMOVAL_MARKER)
        .unwrap_or_else(|| panic!("{} lacks the marker {REMOVAL_MARKER}", path.display()));
    let body = after
        .trim_start()
        .strip_prefix("```sh\n")
        .unwrap_or_else(|| {
            panic!("no ```sh block right after {REMOVAL_MARKER} in docs/install.md")
        });
    let end = body
        .find("\n```")
        .expect("the removal block in docs/install.md is not closed");
    body[..=end].to_string()
}

/// Runs docs/install.md's removal of p4fleet without its operator (every
/// p4fleet finalizer dropped, the CRDs and so every object deleted, the
/// Lease), with bash -euo pipefail: any failing command fails the test.
fn remove_without_operator(cp: &ControlPlane) {
    let script = removal_block();
    let timeout = Duration::from_secs(300);
    say(&format!(
        "running docs/install.md's removal without the operator (timeout {}s):\n{script}",
        timeout.as_secs()
    ));
    let mut cmd = Command::new("bash");
    cmd.args(["-euo", "pipefail", "-c", &script])
        .env("KUBECONFIG", cp.kubeconfig_path())
        .current_dir(repo_root());
    let out = run_bounded(cmd, &[], timeout, "docs/install.md's removal block");
    say(&format!(
        "removal block output:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ));
    ok(out, "docs/install.md's removal block");
}

/// No p4fleet.dev CRD, no p4fleet.dev API group served, no ConfigMap owned
/// by a p4fleet object (the garbage collector removes those once their
/// owners are gone), no leader Lease.
async fn nothing_of_p4fleet_left(client: &Client) {
    wait(
        "nothing of p4fleet left (CRDs, API group, owned ConfigMaps, Lease)",
        Duration::from_secs(120),
        || {
            let client = client.clone();
            async move {
                let mut left = Vec::new();
                let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
                for c in crds
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?
                {
                    if c.spec.group == p4fleet_crds::GROUP {
                        left.push(format!("CRD {}", c.name_any()));
                    }
                }
                let groups = client.list_api_groups().await.map_err(|e| e.to_string())?;
                if groups.groups.iter().any(|g| g.name == p4fleet_crds::GROUP) {
                    left.push(format!("API group {} still served", p4fleet_crds::GROUP));
                }
                let cms: Api<ConfigMap> = Api::all(client.clone());
                for cm in cms
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?
                {
                    let owned = cm.owner_references().iter().any(|o| {
                        o.api_version
                            .starts_with(&format!("{}/", p4fleet_crds::GROUP))
                    });
                    if owned {
                        left.push(format!(
                            "ConfigMap {}/{} owned by a p4fleet object",
                            cm.namespace().unwrap_or_default(),
                            cm.name_any()
                        ));
                    }
                }
                let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
                if leases
                    .get_opt(LEASE)
                    .await
                    .map_err(|e| e.to_string())?
                    .is_some()
                {
                    left.push(format!("Lease {NAMESPACE}/{LEASE}"));
                }
                if left.is_empty() {
                    Ok(())
                } else {
                    Err(left.join(", "))
                }
            }
        },
    )
    .await;
}

fn delete_test_namespaces(cp: &ControlPlane) {
    kubectl_ok(
        cp,
        &[
            "delete",
            "namespace",
            SAMPLES_NS,
            NAMESPACE,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=180s",
        ],
        Duration::from_secs(200),
    );
}

/// Removes what an earlier run (or a failure) left: the release, then
/// p4fleet as docs/install.md removes it without its operator, then the
/// test's namespaces.
async fn remove_leftovers(cp: &ControlPlane, client: &Client) {
    helm_ok(
        cp,
        &[
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--ignore-not-found",
            "--wait",
            "--timeout=3m",
        ],
        Duration::from_secs(200),
    );
    remove_without_operator(cp);
    nothing_of_p4fleet_left(client).await;
    delete_test_namespaces(cp);
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

// --- operator pods ---------------------------------------------------------------------

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

/// The operator pods' logs, each as last read while its pod ran (what a
/// pod logs while it shuts down is not seen).
#[derive(Default)]
struct OperatorLogs(BTreeMap<String, String>);

impl OperatorLogs {
    async fn read(&mut self, cp: &ControlPlane, client: &Client) {
        for pod in operator_pods(client).await {
            let name = pod.name_any();
            let log = kubectl_ok(cp, &["-n", NAMESPACE, "logs", &name, "--tail=-1"], QUICK);
            self.0.insert(name, log);
        }
    }

    /// Every WARN or ERROR line (the chart logs JSON: `"level":"WARN"`;
    /// text: ` WARN `) and every RBAC denial (a 403 shows even where the
    /// resource still becomes Ready, e.g. Events), prefixed with its pod.
    fn bad_lines(&self) -> Vec<String> {
        let level_of = |line: &str| {
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"]
                .into_iter()
                .find(|l| {
                    line.contains(&format!("\"level\":\"{l}\"")) || line.contains(&format!(" {l} "))
                })
        };
        let mut bad = Vec::new();
        for (pod, log) in &self.0 {
            let mut levels: BTreeMap<&str, usize> = BTreeMap::new();
            for line in log.lines() {
                let level = level_of(line);
                *levels.entry(level.unwrap_or("other")).or_default() += 1;
                if matches!(level, Some("WARN" | "ERROR"))
                    || line.contains("forbidden")
                    || line.contains("Forbidden")
                {
                    bad.push(format!("{pod}: {line}"));
                }
            }
            say(&format!("operator pod {pod} logged, by level: {levels:?}"));
        }
        bad
    }
}

/// Warning Events the operator published (any namespace), one line each.
fn p4fleet_warning_events(cp: &ControlPlane) -> Vec<String> {
    let events = kubectl_json(cp, &["get", "events.events.k8s.io", "-A"]);
    events["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|e| e["type"] == "Warning" && e["reportingController"] == "p4fleet")
                .map(|e| {
                    format!(
                        "{} {}/{}: {} {}",
                        e["metadata"]["namespace"].as_str().unwrap_or("-"),
                        e["regarding"]["kind"].as_str().unwrap_or("?"),
                        e["regarding"]["name"].as_str().unwrap_or("?"),
                        e["reason"].as_str().unwrap_or("?"),
                        e["note"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
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
has_conditions!(
    Switch,
    P4Program,
    VirtualSwitch,
    TableEntrySet,
    AsyncExternPolicy
);

/// Waits until every object in `objects` is Ready at its generation; the
/// failure names each one that is not, with its Ready condition.
async fn all_ready(client: &Client, objects: &[(String, String)]) {
    let what = format!("{} p4fleet objects of the samples Ready", objects.len());
    wait(&what, READY_TIMEOUT, || {
        let client = client.clone();
        async move {
            let mut not_ready = Vec::new();
            for (kind, name) in objects {
                if let Err(e) = ready_object(&client, kind, name).await {
                    not_ready.push(format!("{kind}/{e}"));
                }
            }
            if not_ready.is_empty() {
                Ok(())
            } else {
                Err(not_ready.join("; "))
            }
        }
    })
    .await;
}

async fn ready_object(client: &Client, kind: &str, name: &str) -> Result<(), String> {
    let c = client.clone();
    match kind {
        "Switch" => ready_kind(&Api::<Switch>::all(c), name).await,
        "P4Program" => ready_kind(&Api::<P4Program>::namespaced(c, SAMPLES_NS), name).await,
        "VirtualSwitch" => ready_kind(&Api::<VirtualSwitch>::namespaced(c, SAMPLES_NS), name).await,
        "TableEntrySet" => ready_kind(&Api::<TableEntrySet>::namespaced(c, SAMPLES_NS), name).await,
        "AsyncExternPolicy" => {
            ready_kind(&Api::<AsyncExternPolicy>::namespaced(c, SAMPLES_NS), name).await
        }
        other => panic!("sample kind {other} has no Ready check here: add one"),
    }
}

/// Reads the emulators' counters through the API server's service proxy
/// (works on any cluster, no port-forward): the device holds exactly what
/// each TableEntrySet says it applied. Real bmv2 pods have no stats port.
async fn entries_are_on_the_devices(
    cp: &ControlPlane,
    client: &Client,
    deployments: &[String],
    objects: &[(String, String)],
) {
    let sets: Api<TableEntrySet> = Api::namespaced(client.clone(), SAMPLES_NS);
    for (set, service, device) in ENTRIES_ON_DEVICES {
        if !objects.contains(&("TableEntrySet".to_string(), set.to_string())) {
            say(&format!(
                "{set}: not applied in this run; its device is not checked"
            ));
            continue;
        }
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
        let out = kubectl_ok(cp, &["get", "--raw", &path], QUICK);
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

async fn crds_and_resources_stay(client: &Client, objects: &[(String, String)]) {
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
    let applied = objects.iter().filter(|(k, _)| k == "TableEntrySet").count();
    assert_eq!(n, applied, "TableEntrySets after uninstall");
}
