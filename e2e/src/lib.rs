//! Test harness: a real Kubernetes control plane (etcd + kube-apiserver built
//! from hack/kubernetes) per test binary, with the p4fleet CRDs installed.
//!
//! ```no_run
//! # async fn demo() {
//! let cp = p4fleet_e2e::ControlPlane::shared().await;
//! let client = cp.client().await;
//! let ns = p4fleet_e2e::TestNamespace::new(&client).await;
//! let out = cp.kubectl(["get", "switches", "-n", ns.name()]);
//! # }
//! ```
//!
//! Set `P4FLEET_KUBECONFIG=<path>` to run against an existing cluster instead.
//!
//! Tests of one binary run on parallel threads, each `#[tokio::test]` with its
//! own runtime, so the shared state holds no runtime-bound objects (only paths,
//! URL and token); every test builds its own `kube::Client`.

pub mod certs;
pub mod device_read;
pub mod dpdk;
pub mod firewall;
pub mod leaders;
pub mod lie_watch;
pub mod mixed;
pub mod processes;
pub mod rollout;

use std::ffi::OsStr;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};

/// Field manager used for everything the harness applies.
pub const FIELD_MANAGER: &str = "p4fleet-e2e";
/// Env var naming an existing cluster's kubeconfig to attach to.
pub const KUBECONFIG_ENV: &str = "P4FLEET_KUBECONFIG";

const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);
const CRD_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("{0} not found: run hack/install-deps.sh")]
    MissingBinary(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Startup(String),
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("kubernetes API: {}", short_kube_error(.0))]
    Kube(#[from] kube::Error),
}

/// The server's message without kube's Debug dump of the whole Status.
fn short_kube_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HarnessError {
    let what = what.into();
    move |source| HarnessError::Io { what, source }
}

/// Root of the repository (where `bin/`, `config/`, `charts/` live).
pub fn repo_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("e2e crate lives inside the repo")
            .to_path_buf()
    })
}

/// A binary built by hack/install-deps.sh into `$REPO/bin`.
pub fn repo_bin(name: &str) -> Result<PathBuf, HarnessError> {
    let p = repo_root().join("bin").join(name);
    if p.is_file() {
        Ok(p)
    } else {
        Err(HarnessError::MissingBinary(p.display().to_string()))
    }
}

/// The directory of the workspace's binaries (`target/debug` or
/// `target/release`, next to the running test), after building them once
/// per test process with `cargo build --workspace --all-targets`: the
/// workspace's one feature set, so it is a no-op under `cargo test
/// --workspace` (a `-p` build unifies features differently and rebuilds
/// tonic and everything above it). Cargo's progress shows on stderr.
pub fn workspace_binaries() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test exe path");
        // target/<profile>/deps/<test>-<hash>
        let profile_dir = exe
            .parent()
            .and_then(|d| d.parent())
            .expect("target/<profile>")
            .to_path_buf();
        let target_dir = profile_dir.parent().expect("target dir");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = std::process::Command::new(cargo);
        cmd.current_dir(repo_root())
            .args(["build", "--workspace", "--all-targets"])
            .env("CARGO_TARGET_DIR", target_dir);
        // Cargo runs tests with their package's CARGO_MANIFEST_DIR, CARGO_PKG_*
        // ...; passed on, they change build-script inputs (ring reruns on
        // CARGO_MANIFEST_DIR) and rebuild ring, rustls and kube both here and
        // in the next `cargo build` from a shell.
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if [
                "CARGO_MANIFEST_",
                "CARGO_PKG_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
            ]
            .iter()
            .any(|p| k.starts_with(p))
                || k == "CARGO_TARGET_TMPDIR"
                || k == "CARGO_PRIMARY_PACKAGE"
            {
                cmd.env_remove(k.as_ref());
            }
        }
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build");
        assert!(
            status.success(),
            "cargo build --workspace --all-targets failed"
        );
        profile_dir
    })
}

/// A binary from PATH.
pub fn path_bin(name: &str) -> Result<PathBuf, HarnessError> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| HarnessError::MissingBinary(format!("{name} (in PATH)")))
}

/// `bin/helm` (hack/install-deps.sh), else `helm` from PATH (hosted CI
/// runners have one); panics with the install hint when neither exists.
pub fn helm_bin() -> PathBuf {
    repo_bin("helm")
        .or_else(|_| path_bin("helm"))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The cluster tests run against.
#[derive(Debug)]
pub struct ControlPlane {
    kubeconfig: PathBuf,
    server: String,
    version: String,
    /// Some when this process started the cluster (then it is private to it).
    work_dir: Option<PathBuf>,
    /// The kube-apiserver this process started, to restart it.
    apiserver: Option<Apiserver>,
}

/// How a kube-apiserver this process started was run, so
/// [`ControlPlane::restart_apiserver`] can run it again the same way (same
/// port, same etcd, same certificates).
#[derive(Debug)]
struct Apiserver {
    program: PathBuf,
    args: Vec<std::ffi::OsString>,
    log: PathBuf,
    pid: Mutex<u32>,
}

static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

impl ControlPlane {
    /// The control plane of this test binary, started (or attached to via
    /// `P4FLEET_KUBECONFIG`) on first use, with the p4fleet CRDs installed and
    /// Established. Panics with the reason when it cannot be set up.
    pub async fn shared() -> &'static ControlPlane {
        let res = tokio::task::spawn_blocking(|| SHARED.get_or_init(init_shared))
            .await
            .expect("control plane init thread");
        match res {
            Ok(cp) => cp,
            Err(e) => panic!("p4fleet-e2e control plane: {e}"),
        }
    }

    /// Attaches to the cluster of `kubeconfig` as it is: no CRDs installed,
    /// nothing started (for tests that install p4fleet themselves, e.g. with
    /// Helm). Independent of [`ControlPlane::shared`].
    pub async fn attach(kubeconfig: &Path) -> Result<ControlPlane, HarnessError> {
        let client = client_from_kubeconfig(kubeconfig).await?;
        let version = client.apiserver_version().await?.git_version;
        Ok(ControlPlane {
            kubeconfig: kubeconfig.to_path_buf(),
            server: client_from_kubeconfig_url(kubeconfig).await?,
            version,
            work_dir: None,
            apiserver: None,
        })
    }

    /// A control plane of its own (etcd + kube-apiserver started for the
    /// caller, CRDs installed), even with `P4FLEET_KUBECONFIG` set: for
    /// tests that restart the API server or run an operator of their own
    /// (every operator reconciles every cluster-scoped Switch, so two on
    /// one cluster fight over devices). Its processes end with the test
    /// binary.
    pub async fn private() -> ControlPlane {
        let (tx, rx) = mpsc::channel();
        // PDEATHSIG follows the spawning thread: one that lives as long as
        // the process.
        std::thread::spawn(move || {
            let _ = tx.send(setup_owned().map_err(|e| e.to_string()));
            loop {
                std::thread::park();
            }
        });
        tokio::task::spawn_blocking(move || rx.recv())
            .await
            .expect("control plane thread")
            .expect("control plane started")
            .unwrap_or_else(|e| panic!("p4fleet-e2e private control plane: {e}"))
    }

    /// Kills (SIGKILL) the kube-apiserver this process started, waits
    /// `down`, and starts it again with the same flags (same port, same
    /// etcd data); returns once it answers /readyz. Panics for a control
    /// plane this process did not start.
    pub async fn restart_apiserver(&self, down: Duration) {
        let kas = self
            .apiserver
            .as_ref()
            .expect("restart_apiserver: the kube-apiserver was not started by this process");
        let old = *kas.pid.lock().unwrap();
        let child = {
            let mut g = OWNED.lock().unwrap_or_else(|p| p.into_inner());
            let owned = g.as_mut().expect("owned processes");
            let i = owned
                .children
                .iter()
                .position(|c| c.id() == old)
                .expect("the kube-apiserver child");
            owned.children.remove(i)
        };
        let dir = self.work_dir.clone().expect("own work dir");
        let (program, args, log) = (kas.program.clone(), kas.args.clone(), kas.log.clone());
        let new = tokio::task::spawn_blocking(move || {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            std::thread::sleep(down);
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let mut cmd = Command::new(program);
                cmd.args(args);
                let _ = tx.send(spawn_logged(cmd, &log, true));
                loop {
                    std::thread::park();
                }
            });
            let child = rx.recv().expect("spawn thread")?;
            let pid = child.id();
            push_child(&dir, child);
            Ok::<_, HarnessError>(pid)
        })
        .await
        .expect("restart thread")
        .unwrap_or_else(|e| panic!("restarting kube-apiserver: {e}"));
        *kas.pid.lock().unwrap() = new;
        let client = self.client().await;
        wait_ready(&client)
            .await
            .unwrap_or_else(|e| panic!("restarted kube-apiserver: {e}"));
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// API server URL, e.g. `https://127.0.0.1:41234`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Server version as reported by `/version` (e.g. `v1.34.4`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// True when this test binary started the cluster (not `P4FLEET_KUBECONFIG`).
    pub fn is_owned(&self) -> bool {
        self.work_dir.is_some()
    }

    /// A new client bound to the calling test's runtime.
    pub async fn client(&self) -> Client {
        client_from_kubeconfig(&self.kubeconfig)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`client`](Self::client) and a fresh [`TestNamespace`] made with it:
    /// what most tests start with.
    pub async fn client_and_namespace(&self) -> (Client, TestNamespace) {
        let client = self.client().await;
        let ns = TestNamespace::new(&client).await;
        (client, ns)
    }

    /// `kubectl --kubeconfig <this> <args>`; never panics on a non-zero exit.
    pub fn kubectl<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.kubectl_with_stdin(args, &[])
    }

    /// Like [`ControlPlane::kubectl`], feeding `stdin` (e.g. `-f -` manifests).
    pub fn kubectl_with_stdin<I, S>(&self, args: I, stdin: &[u8]) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        if let Some(dir) = &self.work_dir {
            // Private discovery cache: ports are reused across runs.
            cmd.arg("--cache-dir").arg(dir.join("kubectl-cache"));
        }
        cmd.args(args);
        run_with_stdin(cmd, stdin)
    }

    /// `bin/helm --kubeconfig <this> <args>`.
    pub fn helm<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(helm_bin());
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        run_with_stdin(cmd, &[])
    }
}

/// Exit status, stdout and stderr of a finished command, for assertion messages.
pub fn output_text(out: &Output) -> String {
    format!(
        "exit {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Where `got` lacks or differs from something in `want` (objects compared
/// key by key, arrays element by element, numbers by value); None when
/// `want` is a subset of `got`.
pub fn json_subset_mismatch(
    want: &serde_json::Value,
    got: &serde_json::Value,
    path: &str,
) -> Option<String> {
    use serde_json::Value;
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w.iter().find_map(|(k, v)| match g.get(k) {
            Some(gv) => json_subset_mismatch(v, gv, &format!("{path}.{k}")),
            None => Some(format!("{path}.{k} missing after round trip (pruned?)")),
        }),
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => w
            .iter()
            .zip(g)
            .enumerate()
            .find_map(|(i, (a, b))| json_subset_mismatch(a, b, &format!("{path}[{i}]"))),
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => None,
        _ if want == got => None,
        _ => Some(format!("{path}: want {want} != got {got}")),
    }
}

/// In namespace `ns`: P4Program `firewall` (examples/firewall's P4Info),
/// VirtualSwitch `fw` on slot 0 of Switch `switch`, ConfigMap `fw` with
/// `entries` (line format) and TableEntrySet `fw` from it.
pub async fn firewall_workload(client: &Client, ns: &str, switch: &str, entries: &str) {
    use kube::Api;
    use p4fleet_crds::{P4Program, TableEntrySet};
    use serde_json::json;
    let v1 = "p4fleet.dev/v1alpha1";
    let p4info = std::fs::read_to_string(repo_root().join("examples/firewall/p4info.txt"))
        .expect("read the firewall P4Info");
    create_json(
        &Api::<P4Program>::namespaced(client.clone(), ns),
        json!({"apiVersion": v1, "kind": "P4Program", "metadata": {"name": "firewall"},
            "spec": {"p4info": {"inline": p4info}}}),
    )
    .await;
    firewall_virtual_switch(client, ns, switch).await;
    create_json(
        &Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fw"},
            "data": {"entries": entries}}),
    )
    .await;
    create_json(
        &Api::<TableEntrySet>::namespaced(client.clone(), ns),
        json!({"apiVersion": v1, "kind": "TableEntrySet", "metadata": {"name": "fw"},
            "spec": {"virtualSwitchRef": "fw", "table": "MyIngress.firewall",
                "entriesFrom": [{"configMap": "fw"}]}}),
    )
    .await;
}

/// VirtualSwitch `fw` of P4Program `firewall` on slot 0 of Switch `switch`,
/// in namespace `ns`.
pub async fn firewall_virtual_switch(client: &Client, ns: &str, switch: &str) {
    create_json(
        &Api::<p4fleet_crds::VirtualSwitch>::namespaced(client.clone(), ns),
        serde_json::json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
            "metadata": {"name": "fw"},
            "spec": {"programRef": "firewall", "switchRef": switch, "slot": 0}}),
    )
    .await;
}

/// In namespace `ns`: P4Program `program` with the P4Info text `p4info`
/// inline.
pub async fn p4info_program(client: &Client, ns: &str, program: &str, p4info: &str) {
    use p4fleet_crds::P4Program;
    use serde_json::json;
    create_json(
        &Api::<P4Program>::namespaced(client.clone(), ns),
        json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": program}, "spec": {"p4info": {"inline": p4info}}}),
    )
    .await;
}

/// A Bmv2 Switch on one emulated device and a VirtualSwitch on its slot 0.
pub struct Bmv2Slot<'a> {
    /// The Switch (cluster-scoped: give each test its own name).
    pub switch: &'a str,
    /// The VirtualSwitch (in the test's namespace).
    pub virtual_switch: &'a str,
    /// The P4Program it runs (in the same namespace).
    pub program: &'a str,
    /// The emulator's P4Runtime address and the device id there.
    pub endpoint: SocketAddr,
    pub device: u64,
}

/// Creates `slot`'s Switch (one slot) and VirtualSwitch in `ns`.
pub async fn bmv2_virtual_switch(client: &Client, ns: &str, slot: Bmv2Slot<'_>) {
    use p4fleet_crds::VirtualSwitch;
    use serde_json::json;
    let v1 = "p4fleet.dev/v1alpha1";
    bmv2_switch(client, slot.switch, slot.endpoint, slot.device).await;
    create_json(
        &Api::<VirtualSwitch>::namespaced(client.clone(), ns),
        json!({"apiVersion": v1, "kind": "VirtualSwitch",
            "metadata": {"name": slot.virtual_switch},
            "spec": {"programRef": slot.program, "switchRef": slot.switch, "slot": 0}}),
    )
    .await;
}

/// P4Program `name` (P4Info `p4info` inline) on VirtualSwitch `name` of the
/// one-slot Bmv2 Switch `<ns>-sw` (device `device` at `endpoint`): the
/// objects of a test of one program on one device.
pub async fn program_on_bmv2(
    client: &Client,
    ns: &str,
    name: &str,
    p4info: &str,
    endpoint: SocketAddr,
    device: u64,
) {
    p4info_program(client, ns, name, p4info).await;
    let sw = format!("{ns}-sw");
    let slot = Bmv2Slot {
        switch: &sw,
        virtual_switch: name,
        program: name,
        endpoint,
        device,
    };
    bmv2_virtual_switch(client, ns, slot).await;
}

/// Deletes Switch `name` (cluster-scoped) when a test is done with it; an
/// error (it is gone already) is ignored.
pub async fn delete_switch(client: &Client, name: &str) {
    let _ = Api::<p4fleet_crds::Switch>::all(client.clone())
        .delete(name, &Default::default())
        .await;
}

/// Creates the one-slot Bmv2 Switch `name` (cluster-scoped) on device
/// `device` of the P4Runtime server at `endpoint`.
pub async fn bmv2_switch(client: &Client, name: &str, endpoint: SocketAddr, device: u64) {
    create_json(
        &Api::<p4fleet_crds::Switch>::all(client.clone()),
        serde_json::json!({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": name},
            "spec": {"target": "Bmv2", "endpoint": endpoint.to_string(),
                "deviceId": device, "slots": 1}}),
    )
    .await;
}

/// Waits up to `timeout` until condition `type_` of P4Program `name` has
/// `reason`; returns its message.
pub async fn program_condition(
    programs: &Api<p4fleet_crds::P4Program>,
    name: &str,
    type_: &str,
    reason: &str,
    timeout: Duration,
) -> String {
    let what = format!("P4Program {name} {type_}: {reason}");
    status_until(programs, name, &what, timeout, |st| {
        p4fleet_crds::find_condition(&st.conditions, type_)
            .filter(|c| c.reason == reason)
            .map(|c| c.message.clone())
            .ok_or(format!("{:?}", st.conditions))
    })
    .await
}

/// Waits until object `name` of `api` has condition Ready=True; panics
/// with its conditions after `timeout`.
pub async fn wait_object_ready<K>(api: &kube::Api<K>, name: &str, timeout: Duration)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let what = format!("{} {name} Ready", std::any::type_name::<K>());
    wait_for(&what, timeout, || async {
        let obj = api.get(name).await.map_err(|e| e.to_string())?;
        let v = serde_json::to_value(&obj).map_err(|e| e.to_string())?;
        let conditions = &v["status"]["conditions"];
        let ready = conditions
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(()).ok_or(format!("{conditions}"))
    })
    .await
}

/// Waits (up to 30 s) for an Event in namespace `ns` whose message
/// contains `text` and, when given, whose reason is `reason`.
pub async fn wait_event(client: &Client, ns: &str, reason: Option<&str>, text: &str) {
    use k8s_openapi::api::core::v1::Event;
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let what = format!("an Event {reason:?} mentioning {text:?}");
    wait_for(&what, Duration::from_secs(30), || async {
        let list = events
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .iter()
            .find(|e| {
                reason.is_none_or(|r| e.reason.as_deref() == Some(r))
                    && e.message.as_deref().is_some_and(|m| m.contains(text))
            })
            .map(|_| ())
            .ok_or_else(|| format!("{} events", list.items.len()))
    })
    .await
}

/// [`set_status_where`] within 90 s, what the entity tests allow a set
/// (a sync, a retry after a refusal, a re-sync after a swap).
pub async fn set_status_within_90s(
    api: &Api<p4fleet_crds::TableEntrySet>,
    name: &str,
    what: &str,
    pred: impl Fn(&p4fleet_crds::TableEntrySetStatus) -> bool,
) -> p4fleet_crds::TableEntrySetStatus {
    set_status_where(api, name, what, Duration::from_secs(90), pred).await
}

/// Merge-patches TableEntrySet `name` with `patch` and waits (90 s, as
/// `what`) until its ResourcesSynced is False with `reason`; returns the
/// status: a counter, meter or register setting refused.
pub async fn resources_refused(
    api: &Api<p4fleet_crds::TableEntrySet>,
    name: &str,
    patch: serde_json::Value,
    what: &str,
    reason: &str,
) -> p4fleet_crds::TableEntrySetStatus {
    merge_patch(api, name, patch).await;
    set_status_within_90s(api, name, what, |s| {
        p4fleet_crds::find_condition(&s.conditions, "ResourcesSynced")
            .is_some_and(|c| !c.is_true() && c.reason == reason)
    })
    .await
}

/// Waits up to `timeout` until TableEntrySet `name`'s status satisfies
/// `pred`, and returns that status (the last one seen in the failure).
pub async fn set_status_where(
    api: &Api<p4fleet_crds::TableEntrySet>,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&p4fleet_crds::TableEntrySetStatus) -> bool,
) -> p4fleet_crds::TableEntrySetStatus {
    status_where(api, name, what, timeout, pred).await
}

/// Waits up to `timeout` until object `name`'s status (the default when it
/// has none) satisfies `pred`, and returns it (the last one seen in the failure).
pub async fn status_where<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&K::Status) -> bool,
) -> K::Status
where
    K: kube::core::object::HasStatus + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::Status: Default + Clone + std::fmt::Debug,
{
    status_until(api, name, what, timeout, |st| {
        if pred(&st) {
            Ok(st)
        } else {
            Err(format!("{st:?}"))
        }
    })
    .await
}

/// Waits up to 30 s until Switch `name`'s Reachable condition is False.
pub async fn switch_unreachable(switches: &Api<p4fleet_crds::Switch>, name: &str) {
    let what = format!("Switch {name} Reachable=False");
    status_until(switches, name, &what, Duration::from_secs(30), |st| {
        let c = st.conditions;
        let down = p4fleet_crds::find_condition(&c, "Reachable").is_some_and(|c| !c.is_true());
        down.then_some(()).ok_or(format!("{c:?}"))
    })
    .await
}

/// Waits up to `timeout` until `f` makes a value of object `name`'s status
/// (the default when it has none), and returns it; panics with `what` and
/// `f`'s last error after that.
pub async fn status_until<K, T>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    f: impl Fn(K::Status) -> Result<T, String>,
) -> T
where
    K: kube::core::object::HasStatus + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::Status: Default + Clone,
{
    wait_for(what, timeout, || async {
        let obj = api.get(name).await.map_err(|e| e.to_string())?;
        f(obj.status().cloned().unwrap_or_default())
    })
    .await
}

/// Polls `f` every 200 ms until it returns Ok; panics with `what` and the
/// last error after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(last) if Instant::now() > deadline => {
                panic!("timed out after {timeout:?} waiting for {what}: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn run_with_stdin(mut cmd: Command, stdin: &[u8]) -> Output {
    let child = spawn_feeding(&mut cmd, stdin)
        .unwrap_or_else(|e| panic!("spawn {:?}: {e}", cmd.get_program()));
    child.wait_with_output().expect("wait for child")
}

/// Spawns `cmd` with piped stdout and stderr, feeding it `stdin` (none
/// when empty) from a thread, so a large input cannot deadlock against output.
pub fn spawn_feeding(cmd: &mut Command, stdin: &[u8]) -> std::io::Result<Child> {
    cmd.stdin(if stdin.is_empty() {
        Stdio::null()
    } else {
        Stdio::piped()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    if !stdin.is_empty() {
        let mut pipe = child.stdin.take().expect("piped stdin");
        let data = stdin.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        });
    }
    Ok(child)
}

/// Builds a client from a kubeconfig file (current context).
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client, HarnessError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kubeconfig_config(path).await?;
    Ok(Client::try_from(config)?)
}

/// The client Config of a kubeconfig file's current context; errors name the file.
async fn kubeconfig_config(path: &Path) -> Result<Config, HarnessError> {
    let kc = Kubeconfig::read_from(path).map_err(|e| HarnessError::Kubeconfig {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| HarnessError::Kubeconfig {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

// ---------------------------------------------------------------------------
// Startup

fn init_shared() -> Result<ControlPlane, String> {
    // Children get PR_SET_PDEATHSIG, which fires when the *spawning thread*
    // exits, so they are spawned from a thread that lives as long as the process.
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("p4fleet-e2e-controlplane".into())
        .spawn(move || {
            let res = setup().map_err(|e| e.to_string());
            let _ = tx.send(res);
            loop {
                std::thread::park();
            }
        })
        .map_err(|e| e.to_string())?;
    rx.recv().map_err(|e| e.to_string())?
}

fn setup() -> Result<ControlPlane, HarnessError> {
    match std::env::var_os(KUBECONFIG_ENV) {
        Some(p) => prepare(PathBuf::from(p), None),
        None => setup_owned(),
    }
}

/// Starts etcd and kube-apiserver for this process and prepares them.
fn setup_owned() -> Result<ControlPlane, HarnessError> {
    let (dir, apiserver) = start_processes()?;
    prepare(dir.join("kubeconfig"), Some((dir, apiserver)))
}

/// Waits for the cluster of `kubeconfig` (when started here) and installs
/// the CRDs.
fn prepare(
    kubeconfig: PathBuf,
    owned: Option<(PathBuf, Apiserver)>,
) -> Result<ControlPlane, HarnessError> {
    let started = Instant::now();
    let (work_dir, apiserver) = match owned {
        Some((d, a)) => (Some(d), Some(a)),
        None => (None, None),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io_err("tokio runtime"))?;
    let (server, version) = rt.block_on(async {
        let client = client_from_kubeconfig(&kubeconfig).await?;
        if work_dir.is_some() {
            wait_ready(&client).await?;
        }
        let version = client.apiserver_version().await?.git_version;
        install_crds(&client).await?;
        let server = client_from_kubeconfig_url(&kubeconfig).await?;
        Ok::<_, HarnessError>((server, version))
    })?;
    // Straight to fd 2, not eprintln!: libtest captures the macros, and this
    // line should show in every `make test` run.
    let _ = writeln!(
        std::io::stderr(),
        "p4fleet-e2e: kube-apiserver {version} at {server} ({}; CRDs installed; ready in {:.1}s)",
        match &work_dir {
            Some(d) => format!("started by this test binary in {}", d.display()),
            None => format!("attached via {KUBECONFIG_ENV}={}", kubeconfig.display()),
        },
        started.elapsed().as_secs_f64()
    );
    Ok(ControlPlane {
        kubeconfig,
        server,
        version,
        work_dir,
        apiserver,
    })
}

async fn client_from_kubeconfig_url(path: &Path) -> Result<String, HarnessError> {
    let config = kubeconfig_config(path).await?;
    Ok(config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string())
}

async fn wait_ready(client: &Client) -> Result<(), HarnessError> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let mut last: String;
    loop {
        let req = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("static request");
        match client.request_text(req).await {
            Ok(body) if body.trim() == "ok" => return Ok(()),
            Ok(body) => last = body,
            Err(e) => last = e.to_string(),
        }
        if Instant::now() > deadline {
            return Err(HarnessError::Startup(format!(
                "kube-apiserver not ready after {STARTUP_TIMEOUT:?}: {last}"
            )));
        }
        if let Some(err) = owned_child_exited() {
            return Err(HarnessError::Startup(err));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Applies `p4fleet_crds::all()` (server-side) and waits until each CRD is
/// Established and served in discovery.
pub async fn install_crds(client: &Client) -> Result<(), HarnessError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crds = p4fleet_crds::all();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &pp, &Patch::Apply(crd)).await?;
    }
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        tokio::time::timeout(
            CRD_TIMEOUT,
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .map_err(|_| HarnessError::Startup(format!("CRD {name} not Established")))?
        .map_err(|e| HarnessError::Startup(format!("waiting for CRD {name}: {e}")))?;
        // Established can precede discovery; kubectl needs the latter.
        let deadline = Instant::now() + CRD_TIMEOUT;
        for version in crd.spec.versions.iter().filter(|v| v.served) {
            let gv = format!("{}/{}", crd.spec.group, version.name);
            loop {
                let served = client
                    .list_api_group_resources(&gv)
                    .await
                    .map(|l| l.resources.iter().any(|r| r.name == crd.spec.names.plural))
                    .unwrap_or(false);
                if served {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(HarnessError::Startup(format!(
                        "{} not in discovery of {gv}",
                        crd.spec.names.plural
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Child processes

struct Owned {
    children: Vec<Child>,
    /// Work directories, removed at exit.
    dirs: Vec<PathBuf>,
}

static OWNED: Mutex<Option<Owned>> = Mutex::new(None);

extern "C" fn cleanup_at_exit() {
    // Runs from libc exit(), after the test harness is done (passed or failed).
    let owned = match OWNED.lock() {
        Ok(mut g) => g.take(),
        Err(p) => p.into_inner().take(),
    };
    if let Some(mut o) = owned {
        for c in o.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for d in &o.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn owned_child_exited() -> Option<String> {
    let mut g = OWNED.lock().ok()?;
    let o = g.as_mut()?;
    for c in o.children.iter_mut() {
        if let Ok(Some(status)) = c.try_wait() {
            return Some(format!(
                "child process exited early ({status}); logs in {:?}",
                o.dirs
            ));
        }
    }
    None
}

fn temp_base() -> PathBuf {
    if let Some(d) = std::env::var_os("P4FLEET_E2E_TMPDIR") {
        return PathBuf::from(d);
    }
    // etcd fsyncs a lot; tmpfs keeps that off the disk.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.join("p4fleet-e2e")
    } else {
        std::env::temp_dir().join("p4fleet-e2e")
    }
}

/// Removes directories of earlier runs that were killed before cleanup
/// (directory names start with the owning pid).
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks for existence.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn free_ports<const N: usize>() -> Result<[u16; N], HarnessError> {
    // Hold all listeners at once so the ports are distinct.
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_err("bind free port"))?;
    let mut ports = [0u16; N];
    for (p, l) in ports.iter_mut().zip(&listeners) {
        *p = l.local_addr().map_err(io_err("local_addr"))?.port();
    }
    Ok(ports)
}

fn spawn_logged(mut cmd: Command, log: &Path, append: bool) -> Result<Child, HarnessError> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(append)
        .write(true)
        .truncate(!append)
        .open(log)
        .map_err(io_err(format!("create {}", log.display())))?;
    let err = out.try_clone().map_err(io_err("dup log"))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(io_err(format!("spawn {:?}", cmd.get_program())))
}

fn push_child(dir: &Path, child: Child) {
    let mut g = OWNED.lock().unwrap_or_else(|p| p.into_inner());
    let owned = g.get_or_insert_with(|| Owned {
        children: Vec::new(),
        dirs: Vec::new(),
    });
    if !owned.dirs.iter().any(|d| d == dir) {
        owned.dirs.push(dir.to_path_buf());
    }
    owned.children.push(child);
}

fn wait_tcp(addr: SocketAddr, what: &str) -> Result<(), HarnessError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Some(err) = owned_child_exited() {
            return Err(HarnessError::Startup(format!("{what}: {err}")));
        }
        if Instant::now() > deadline {
            return Err(HarnessError::Startup(format!(
                "{what} not listening on {addr}"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Starts etcd and kube-apiserver in a fresh directory; returns it (with
/// `kubeconfig` inside). Processes are reaped at exit or by PDEATHSIG.
fn start_processes() -> Result<(PathBuf, Apiserver), HarnessError> {
    let kas = repo_bin("kube-apiserver")?;
    let etcd = path_bin("etcd")?;
    let openssl = path_bin("openssl")?;

    let base = temp_base();
    std::fs::create_dir_all(&base).map_err(io_err(format!("create {}", base.display())))?;
    remove_stale(&base);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let dir = base.join(format!("{}-{nanos:08x}", std::process::id()));
    std::fs::create_dir_all(dir.join("certs")).map_err(io_err("create work dir"))?;
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    // SAFETY: registering a plain extern "C" fn.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(cleanup_at_exit);
    });
    // Register the dir even before any child exists so it is removed at exit.
    OWNED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(|| Owned {
            children: Vec::new(),
            dirs: Vec::new(),
        })
        .dirs
        .push(dir.clone());

    let token = format!("e2e-{}-{nanos:x}", std::process::id());
    std::fs::write(
        dir.join("tokens.csv"),
        format!("{token},admin,admin,\"system:masters\"\n"),
    )
    .map_err(io_err("write tokens.csv"))?;
    let sa_key = dir.join("sa.key");
    let sa_pub = dir.join("sa.pub");
    let genkey = Command::new(&openssl)
        .args(["genrsa", "-out"])
        .arg(&sa_key)
        .arg("2048")
        .output()
        .map_err(io_err("openssl genrsa"))?;
    let pubk = Command::new(&openssl)
        .args(["rsa", "-pubout", "-in"])
        .arg(&sa_key)
        .arg("-out")
        .arg(&sa_pub)
        .output()
        .map_err(io_err("openssl rsa"))?;
    if !genkey.status.success() || !pubk.status.success() {
        return Err(HarnessError::Startup(format!(
            "openssl failed: {}{}",
            String::from_utf8_lossy(&genkey.stderr),
            String::from_utf8_lossy(&pubk.stderr)
        )));
    }

    let [etcd_port, peer_port, kas_port] = free_ports::<3>()?;
    let client_url = format!("http://127.0.0.1:{etcd_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let mut cmd = Command::new(&etcd);
    cmd.arg("--name=e2e")
        .arg(format!("--data-dir={}", dir.join("etcd").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=e2e={peer_url}"))
        .args(["--logger=zap", "--log-level=warn"]);
    push_child(&dir, spawn_logged(cmd, &dir.join("etcd.log"), false)?);
    wait_tcp(([127, 0, 0, 1], etcd_port).into(), "etcd")?;

    let mut cmd = Command::new(&kas);
    cmd.arg(format!("--etcd-servers={client_url}"))
        .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"])
        .arg(format!("--secure-port={kas_port}"))
        .arg(format!("--cert-dir={}", dir.join("certs").display()))
        .arg(format!(
            "--token-auth-file={}",
            dir.join("tokens.csv").display()
        ))
        .arg("--authorization-mode=RBAC")
        .arg("--service-account-issuer=https://kubernetes.default.svc")
        .arg(format!("--service-account-key-file={}", sa_pub.display()))
        .arg(format!(
            "--service-account-signing-key-file={}",
            sa_key.display()
        ))
        .args([
            "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=true",
            "--v=1",
        ]);
    let log = dir.join("kube-apiserver.log");
    let apiserver = Apiserver {
        program: cmd.get_program().into(),
        args: cmd.get_args().map(|a| a.to_os_string()).collect(),
        log: log.clone(),
        pid: Mutex::new(0),
    };
    let child = spawn_logged(cmd, &log, false)?;
    *apiserver.pid.lock().unwrap() = child.id();
    push_child(&dir, child);

    // The serving certificate appears once the apiserver has generated it.
    let crt = dir.join("certs").join("apiserver.crt");
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let ca = loop {
        if let Ok(pem) = std::fs::read(&crt)
            && pem.ends_with(b"-----END CERTIFICATE-----\n")
        {
            break pem;
        }
        if let Some(err) = owned_child_exited() {
            return Err(HarnessError::Startup(format!("kube-apiserver: {err}")));
        }
        if Instant::now() > deadline {
            return Err(HarnessError::Startup(format!(
                "kube-apiserver wrote no {}",
                crt.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let kubeconfig = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:{kas_port}
    certificate-authority-data: {ca}
users:
- name: admin
  user:
    token: {token}
contexts:
- name: e2e
  context: {{cluster: e2e, user: admin}}
current-context: e2e
",
        ca = base64(&ca)
    );
    std::fs::write(dir.join("kubeconfig"), kubeconfig).map_err(io_err("write kubeconfig"))?;
    Ok((dir, apiserver))
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Test objects

/// `n` distinct entries of the firewall example's table in the line
/// format (`hdr.ipv4.srcAddr hdr.ipv4.dstAddr`, action `allow`), source
/// addresses counting up from `start`.
pub fn firewall_lines(start: usize, n: usize) -> String {
    firewall_lines_with(start, n, "172.16.0.1", 0)
}

/// [`firewall_lines`] with destination address `dst` and each entry's
/// port (its index mod 500) shifted by `port_shift`.
pub fn firewall_lines_with(start: usize, n: usize, dst: &str, port_shift: usize) -> String {
    let mut text = String::from("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n");
    for i in start..start + n {
        text.push_str(&format!(
            "10.{}.{}.{} {dst} {}\n",
            (i >> 16) & 255,
            (i >> 8) & 255,
            i & 255,
            (i + port_shift) % 500
        ));
    }
    text
}

/// Creates the object `obj` (JSON with apiVersion, kind, metadata, spec).
pub async fn create_json<K>(api: &Api<K>, obj: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj).expect("object of the kind");
    if let Err(e) = api.create(&PostParams::default(), &obj).await {
        panic!("create {:?}: {e}", obj.meta().name);
    }
}

/// Merge-patches object `name` of `api` with `patch`; panics on an error.
pub async fn merge_patch<K>(api: &Api<K>, name: &str, patch: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Waits up to `timeout` until object `name` of `api` is gone; panics
/// with what is left of it after that.
pub async fn wait_gone<K>(api: &Api<K>, name: &str, timeout: Duration)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{name} gone"), timeout, || async {
        match api.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(left) => Err(format!("still there: {left:?}")),
        }
    })
    .await
}

/// Deletes object `name` of `api` and waits up to 60 s until it is gone
/// (its finalizers done).
pub async fn delete_and_wait_gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.delete(name, &Default::default()).await.unwrap();
    wait_gone(api, name, Duration::from_secs(60)).await;
}

/// Creates TableEntrySet `name` with `spec` in `ns`; returns the
/// namespace's TableEntrySets.
pub async fn create_set(
    client: &Client,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) -> Api<p4fleet_crds::TableEntrySet> {
    let api: Api<p4fleet_crds::TableEntrySet> = Api::namespaced(client.clone(), ns);
    let obj = serde_json::json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
        "metadata": {"name": name}, "spec": spec
    });
    create_json(&api, obj).await;
    api
}

/// Server-side applies `obj` (JSON with apiVersion, kind, metadata.name),
/// taking its fields from any other manager: a test's "the user edits it".
pub async fn apply_json<K>(api: &Api<K>, obj: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = obj["metadata"]["name"]
        .as_str()
        .expect("metadata.name")
        .to_string();
    let pp = kube::api::PatchParams::apply("p4fleet-e2e").force();
    if let Err(e) = api.patch(&name, &pp, &kube::api::Patch::Apply(&obj)).await {
        panic!("apply {name}: {e}");
    }
}

/// Waits (up to 60 s) for an Event in `ns` regarding object `name` (with
/// `reason`, if given).
pub async fn event_about(
    client: &Client,
    ns: &str,
    name: &str,
    reason: Option<&str>,
) -> k8s_openapi::api::events::v1::Event {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("an Event about {name}"),
        Duration::from_secs(60),
        || async {
            let evs = events
                .list(&kube::api::ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            evs.items
                .into_iter()
                .find(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        && reason.is_none_or(|r| e.reason.as_deref() == Some(r))
                })
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await
}

// ---------------------------------------------------------------------------
// Namespaces

static NS_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Unique name with `prefix`, valid as a namespace or object name.
pub fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!(
        "{prefix}-{:x}-{:x}-{}",
        std::process::id(),
        (nanos & 0xff_ffff) as u32,
        NS_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A uniquely named namespace for one test, deleted (best effort) on drop.
#[derive(Debug)]
pub struct TestNamespace {
    name: String,
}

impl TestNamespace {
    /// Creates `e2e-<pid>-<time>-<n>`, labelled `p4fleet.dev/e2e=true`.
    pub async fn new(client: &Client) -> TestNamespace {
        let name = unique_name("e2e");
        let api: Api<Namespace> = Api::all(client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("p4fleet.dev/e2e".to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
        TestNamespace { name }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the namespace now (without waiting for finalization).
    pub async fn delete(self, client: &Client) -> Result<(), HarnessError> {
        let api: Api<Namespace> = Api::all(client.clone());
        let res = api.delete(&self.name, &DeleteParams::background()).await;
        std::mem::forget(self);
        match res {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // A private control plane is thrown away at exit (and has no namespace
        // controller to finish deletions anyway); only clean up shared clusters.
        // kubectl rather than the client: drop may run after the test runtime is gone.
        if let Some(Ok(cp)) = SHARED.get()
            && !cp.is_owned()
        {
            let _ = cp.kubectl([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ]);
        }
    }
}

impl std::ops::Deref for TestNamespace {
    type Target = str;
    fn deref(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn unique_names_are_valid_and_distinct() {
        let a = unique_name("e2e");
        let b = unique_name("e2e");
        assert_ne!(a, b);
        assert!(a.len() <= 63);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }
}
