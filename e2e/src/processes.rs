//! The emulator and operator binaries as child processes of a test: built
//! once, killed when their handle drops (and by PDEATHSIG if the test
//! process dies first), logs under `target/e2e-logs/`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::repo_root;

/// `target/` of this workspace (or `$CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// The directory holding `p4fleet-emulator` and `p4fleet`, built with the
/// workspace's one feature set ([`crate::workspace_binaries`]).
pub fn build_binaries() -> PathBuf {
    crate::workspace_binaries().to_path_buf()
}

/// The operator's `/metrics` text, from its HTTP address.
pub fn metrics_text(addr: SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("operator's /metrics");
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(resp)
}

/// The value of the series `name{labels}` (labels as exposed, in order)
/// in a `/metrics` text; None when the series does not exist.
pub fn metric_sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let series = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(|v| v.trim().parse().expect("a sample value"))
}

/// Makes the child die (SIGKILL) when the thread that spawned it exits.
/// Waits until the operator serving /metrics at `metrics` has started at
/// least `at_least` reconciles of `kind` (a restarted operator has looked
/// at what it found).
pub async fn reconciled(metrics: SocketAddr, kind: &str, at_least: f64) {
    crate::wait_for(
        &format!("the operator's reconciles of {kind}"),
        Duration::from_secs(60),
        || async {
            let text = metrics_text(metrics);
            metric_sample(
                &text,
                "p4fleet_reconciles_total",
                &format!("kind=\"{kind}\""),
            )
            .filter(|n| *n >= at_least)
            .map(drop)
            .ok_or_else(|| format!("fewer than {at_least} {kind} reconciles yet"))
        },
    )
    .await
}

pub fn with_pdeathsig(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and
    // exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A log file `target/e2e-logs/<name>-<pid>.log` (created or truncated).
pub fn log_file(name: &str) -> (PathBuf, std::fs::File) {
    let dir = target_dir().join("e2e-logs");
    std::fs::create_dir_all(&dir).expect("create e2e-logs");
    let path = dir.join(format!("{name}-{}.log", std::process::id()));
    let f = std::fs::File::create(&path).expect("create log file");
    (path, f)
}

/// A child process killed (SIGKILL) when this handle drops.
pub struct Proc {
    child: Option<Child>,
    pub log: PathBuf,
}

impl Proc {
    /// Spawns `cmd` with stdin closed and SIGKILL on the death of the
    /// spawning thread (PDEATHSIG).
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Proc {
        with_pdeathsig(&mut cmd);
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn child process");
        Proc {
            child: Some(child),
            log,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// Sends `signal` (e.g. `libc::SIGSTOP`) to the process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(rc, 0, "kill({}, {signal})", self.pid());
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                return Some(st);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.as_mut()?.stdout.take()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts the operator (`p4fleet operator`) from `bin` against
/// `kubeconfig`, on any free port, logging to `target/e2e-logs/<log>-…`,
/// with `args` after the common ones (resync, drift, leader election …).
pub fn spawn_operator(
    bin: &std::path::Path,
    kubeconfig: &std::path::Path,
    log: &str,
    args: &[&str],
) -> Proc {
    let (log, file) = log_file(log);
    let mut cmd = Command::new(bin.join("p4fleet"));
    cmd.args(["operator", "--listen-addr", "127.0.0.1:0"])
        .args(["--log-level", "info,p4fleet=debug"])
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdout(file.try_clone().expect("clone log file"))
        .stderr(file);
    Proc::spawn(cmd, log)
}

/// The address the operator logging to `log` serves /metrics on (it logs
/// `serving /metrics, … addr=HOST:PORT` once listening, with `--listen-addr
/// 127.0.0.1:0` a port of its choosing). Waits up to `timeout`.
pub fn operator_http_addr(log: &std::path::Path, timeout: Duration) -> SocketAddr {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found = text
            .lines()
            .find(|l| l.contains("serving /metrics"))
            .and_then(|l| {
                // Text logs colour the field name: drop the escapes.
                let plain = strip_ansi(l);
                plain
                    .split_once("addr=")?
                    .1
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            });
        if let Some(addr) = found {
            return addr;
        }
        assert!(
            Instant::now() < deadline,
            "no metrics address in {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `s` without ANSI colour sequences (`ESC [ … m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A running emulator and the addresses it printed.
pub struct EmulatorProc {
    pub proc: Proc,
    pub p4runtime: SocketAddr,
    pub stats: SocketAddr,
    pub bfrt: Option<SocketAddr>,
}

/// Starts `p4fleet-emulator` from `bin` with `args`; returns once it has
/// printed its listen addresses.
pub fn spawn_emulator(bin: &std::path::Path, args: &[&str]) -> EmulatorProc {
    let (log, file) = log_file("emulator");
    let mut cmd = Command::new(bin.join("p4fleet-emulator"));
    cmd.args(args).stdout(Stdio::piped()).stderr(file);
    let mut proc = Proc::spawn(cmd, log);
    let mut out = BufReader::new(proc.stdout().expect("emulator stdout"));
    let (mut p4runtime, mut stats, mut bfrt) = (None, None, None);
    let wants_bfrt = args.contains(&"--bfrt-addr");
    while p4runtime.is_none() || stats.is_none() || (wants_bfrt && bfrt.is_none()) {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "emulator exited");
        let line = line.trim();
        if let Some(a) = line.strip_prefix("p4runtime listening on ") {
            p4runtime = a.parse().ok();
        } else if let Some(a) = line.strip_prefix("stats listening on ") {
            stats = a.parse().ok();
        } else if let Some(a) = line.strip_prefix("bfrt listening on ") {
            bfrt = a.parse().ok();
        }
    }
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    EmulatorProc {
        proc,
        p4runtime: p4runtime.expect("p4runtime address"),
        stats: stats.expect("stats address"),
        bfrt,
    }
}

/// `start()`'s value, made once per test binary: concurrent tests wait for
/// the first. `start` runs on a thread that lives as long as the process,
/// so the children it spawns (PDEATHSIG: killed when their spawning thread
/// exits) outlive every test; keep them with `std::mem::forget`.
pub async fn once_per_binary<T: Send + Sync + 'static>(
    cell: &'static std::sync::OnceLock<T>,
    start: impl FnOnce() -> T + Send + 'static,
) -> &'static T {
    tokio::task::spawn_blocking(move || cell.get_or_init(|| on_parked_thread(start)))
        .await
        .expect("start children")
}

/// Runs `f` on a thread that lives as long as the test process, so the
/// children it spawns (PDEATHSIG) outlive the test that started them;
/// returns what `f` returned.
pub fn on_parked_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
        loop {
            std::thread::park();
        }
    });
    rx.recv().expect("children started")
}

/// The emulator's entry count of `device` (its stats side channel at
/// `stats`), None while it does not answer.
pub fn device_entries(stats: SocketAddr, device: u64) -> Option<u64> {
    device_stat(stats, device, "entries")
}

/// One counter of the emulator's stats of `device` (`/stats/<device>`:
/// `entries`, `write_rpcs`, …), None while it does not answer.
pub fn device_stat(stats: SocketAddr, device: u64, field: &str) -> Option<u64> {
    stats_get(stats, &format!("/stats/{device}"))?[field].as_u64()
}

/// The JSON the emulator's side channel at `stats` answers to a GET of
/// `path` (e.g. `/stats/3/dataplane`), None while it does not answer.
pub fn stats_get(stats: SocketAddr, path: &str) -> Option<serde_json::Value> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&stats, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {stats}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    serde_json::from_str(resp.split_once("\r\n\r\n")?.1).ok()
}

/// `method path` with `body` (text) on the emulator's side channel at
/// `stats`: the answer's body (all of the answer when it has none).
pub fn side_channel(stats: SocketAddr, method: &str, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(stats).expect("side channel");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {stats}\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(resp)
}

/// The JSON the emulator's side channel at `stats` answers to a POST of
/// JSON `body` to `path` (e.g. `/devices/3/frames`), None while it does
/// not answer.
pub fn stats_post(stats: SocketAddr, path: &str, body: &str) -> Option<serde_json::Value> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&stats, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {stats}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    serde_json::from_str(resp.split_once("\r\n\r\n")?.1).ok()
}

/// Starts `p4fleet-emulator` from `bin` serving TLS on `addr` (None: any
/// port) with `server` (written to `dir`, file names prefixed `tag`),
/// requiring client certificates signed by `client_ca`, with more flags
/// `extra` (e.g. `--fpga PRESET`).
pub fn spawn_tls_emulator(
    bin: &std::path::Path,
    dir: &std::path::Path,
    tag: &str,
    server: &crate::certs::Pair,
    client_ca: &crate::certs::TestCa,
    addr: Option<SocketAddr>,
    extra: &[&str],
) -> EmulatorProc {
    let file = |name: &str, body: &str| {
        let p = dir.join(format!("{tag}-{name}"));
        std::fs::write(&p, body).expect("write certificate file");
        p.to_string_lossy().into_owned()
    };
    let cert = file("tls.crt", &server.cert_pem);
    let key = file("tls.key", &server.key_pem);
    let ca = file("client-ca.crt", &client_ca.cert_pem);
    let addr = addr.map(|a| a.to_string()).unwrap_or("127.0.0.1:0".into());
    let mut args = vec![
        "--p4runtime-addr",
        &addr,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &ca,
    ];
    args.extend_from_slice(extra);
    spawn_emulator(bin, &args)
}

/// One operator (`spawn_operator` with `log` and `args`) for all tests of
/// a test binary that share its control plane: started by the first
/// caller, on a thread that lives as long as the process (PDEATHSIG
/// follows the spawning thread).
pub fn shared_operator(
    bin: &std::path::Path,
    kubeconfig: &std::path::Path,
    log: &'static str,
    args: &'static [&'static str],
) {
    static OPERATOR: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    OPERATOR.get_or_init(|| {
        let (bin, kubeconfig) = (bin.to_path_buf(), kubeconfig.to_path_buf());
        on_parked_thread(move || {
            // Owned by the parked thread (PDEATHSIG), never dropped.
            std::mem::forget(spawn_operator(&bin, &kubeconfig, log, args));
        })
    });
}

/// An emulator and an operator that the tests of one binary share, and the
/// addresses those tests use.
pub struct Fleet {
    pub p4runtime: SocketAddr,
    /// The emulator's BFRT port, when its arguments ask for one.
    pub bfrt: Option<SocketAddr>,
    /// The emulator's side channel (`/stats`, faults, frames).
    pub stats: SocketAddr,
    /// The operator's HTTP address (`/metrics`, `/livez`).
    pub metrics: SocketAddr,
    pub operator_log: PathBuf,
}

impl Fleet {
    /// The BFRT address (the emulator's arguments must ask for one).
    pub fn bfrt(&self) -> SocketAddr {
        self.bfrt
            .expect("the emulator was started with --bfrt-addr")
    }
}

/// The test binary's [`Fleet`], started on first use: an emulator with
/// `emulator` arguments, an operator named `operator` (its log's name)
/// resyncing every `resync_seconds`, against the binary's shared control
/// plane. A binary has one: every call must ask for the same.
pub async fn fleet(
    emulator: &[&str],
    operator: &str,
    resync_seconds: u32,
) -> (&'static crate::ControlPlane, &'static Fleet) {
    type Asked = (Vec<String>, String, u32);
    static FLEET: std::sync::OnceLock<(Asked, Fleet)> = std::sync::OnceLock::new();
    let cp = crate::ControlPlane::shared().await;
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let emulator: Vec<String> = emulator.iter().map(|a| a.to_string()).collect();
    let asked: Asked = (emulator, operator.to_string(), resync_seconds);
    let start = asked.clone();
    let (started, fleet) = once_per_binary(&FLEET, move || {
        let bin = build_binaries();
        let (emulator, operator, resync) = &start;
        let emulator: Vec<&str> = emulator.iter().map(String::as_str).collect();
        let emu = spawn_emulator(&bin, &emulator);
        let resync = resync.to_string();
        let op = spawn_operator(&bin, &kubeconfig, operator, &["--resync-seconds", &resync]);
        let fleet = Fleet {
            p4runtime: emu.p4runtime,
            bfrt: emu.bfrt,
            stats: emu.stats,
            metrics: operator_http_addr(&op.log, Duration::from_secs(60)),
            operator_log: op.log.clone(),
        };
        // Owned by the parked start thread (PDEATHSIG).
        std::mem::forget((emu, op));
        (start, fleet)
    })
    .await;
    assert_eq!(*started, asked, "a test binary has one fleet");
    (cp, fleet)
}

/// Runs the `p4fleet` command line with `args` against the cluster of
/// `kubeconfig` (blocking: call it off the async runtime's threads).
pub fn p4fleet(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let bin = BIN.get_or_init(|| build_binaries().join("p4fleet"));
    Command::new(bin)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run p4fleet")
}

/// `p4fleet plan -f` on `manifest` (YAML) against the cluster of
/// `kubeconfig`: its exit code, what it printed, and its stderr.
pub fn p4fleet_plan(kubeconfig: &std::path::Path, manifest: &str) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("change.yaml");
    std::fs::write(&file, manifest).expect("write the manifest");
    let out = p4fleet(kubeconfig, &["plan", "-f", &file.to_string_lossy()]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
