//! The emulator processes and the operator of a fleet run, and what they
//! report: the emulator's per-device counters, the operator's metrics.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use p4fleet_e2e::processes::{Proc, log_file};
use serde::{Deserialize, Serialize};

/// One emulator process serving devices `1..=devices` on one port.
pub struct Emulator {
    pub proc: Proc,
    pub p4runtime: SocketAddr,
    pub stats: SocketAddr,
    pub devices: u64,
}

impl Emulator {
    /// Spawns `bin/p4fleet-emulator` (SIGKILL when the spawning thread
    /// ends); returns once it printed its addresses.
    pub fn spawn(bin: &Path, index: usize, devices: u64) -> anyhow::Result<Emulator> {
        Emulator::spawn_with(bin, index, devices, &[])
    }

    /// [`Emulator::spawn`] with more arguments (e.g. `--profile tofino`).
    pub fn spawn_with(
        bin: &Path,
        index: usize,
        devices: u64,
        extra: &[&str],
    ) -> anyhow::Result<Emulator> {
        let (log, file) = log_file(&format!("fleet-emulator-{index}"));
        let mut cmd = Command::new(bin.join("p4fleet-emulator"));
        cmd.args(["--devices", &devices.to_string()])
            .args(extra)
            .args(["--p4runtime-addr", "127.0.0.1:0"])
            .args(["--stats-addr", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(file);
        let mut proc = Proc::spawn(cmd, log);
        let mut out = BufReader::new(proc.stdout().context("emulator stdout")?);
        let (mut p4runtime, mut stats) = (None, None);
        while p4runtime.is_none() || stats.is_none() {
            let mut line = String::new();
            if out.read_line(&mut line)? == 0 {
                bail!("emulator exited; log in {}", proc.log.display());
            }
            let line = line.trim();
            if let Some(a) = line.strip_prefix("p4runtime listening on ") {
                p4runtime = a.parse().ok();
            } else if let Some(a) = line.strip_prefix("stats listening on ") {
                stats = a.parse().ok();
            }
        }
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Ok(Emulator {
            proc,
            p4runtime: p4runtime.expect("set"),
            stats: stats.expect("set"),
            devices,
        })
    }

    /// Counters of every device this process serves.
    pub fn stats(&self) -> anyhow::Result<Vec<DeviceStats>> {
        Ok(self.stats_and_rpcs()?.0)
    }

    /// [`Emulator::stats`] and the gRPC calls this process received by
    /// method (`/p4.v1.P4Runtime/Capabilities`, …; an emulator built
    /// before it counted them reports none).
    pub fn stats_and_rpcs(
        &self,
    ) -> anyhow::Result<(Vec<DeviceStats>, std::collections::BTreeMap<String, u64>)> {
        #[derive(Deserialize)]
        struct All {
            devices: Vec<DeviceStats>,
            #[serde(default)]
            rpcs: std::collections::BTreeMap<String, u64>,
        }
        let body = http_get(self.stats, "/stats")?;
        let all = serde_json::from_str::<All>(&body)
            .with_context(|| format!("emulator /stats: {body}"))?;
        Ok((all.devices, all.rpcs))
    }
}

/// The emulator's counters of one device (the fields the bench uses).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceStats {
    #[serde(default)]
    pub write_rpcs: u64,
    #[serde(default)]
    pub read_rpcs: u64,
    #[serde(default)]
    pub inserts: u64,
    #[serde(default)]
    pub modifies: u64,
    #[serde(default)]
    pub deletes: u64,
    #[serde(default)]
    pub entries: u64,
}

impl DeviceStats {
    pub fn written(&self) -> u64 {
        self.inserts + self.modifies + self.deletes
    }

    /// The sum over devices.
    pub fn total(all: &[DeviceStats]) -> DeviceStats {
        all.iter().fold(DeviceStats::default(), |a, d| DeviceStats {
            write_rpcs: a.write_rpcs + d.write_rpcs,
            read_rpcs: a.read_rpcs + d.read_rpcs,
            inserts: a.inserts + d.inserts,
            modifies: a.modifies + d.modifies,
            deletes: a.deletes + d.deletes,
            entries: a.entries + d.entries,
        })
    }

    /// What changed since `before` (entries: the count now).
    pub fn since(&self, before: &DeviceStats) -> DeviceStats {
        DeviceStats {
            write_rpcs: self.write_rpcs - before.write_rpcs,
            read_rpcs: self.read_rpcs - before.read_rpcs,
            inserts: self.inserts - before.inserts,
            modifies: self.modifies - before.modifies,
            deletes: self.deletes - before.deletes,
            entries: self.entries,
        }
    }
}

/// The operator (`p4fleet operator`) as a child process, its metrics and
/// health on `listen`.
pub struct Operator {
    pub proc: Proc,
    pub listen: SocketAddr,
}

impl Operator {
    pub fn spawn(
        bin: &Path,
        kubeconfig: &Path,
        resync_seconds: u64,
        drift_seconds: u64,
        log_level: &str,
    ) -> anyhow::Result<Operator> {
        let listen = free_port()?;
        let (log, file) = log_file("fleet-operator");
        let mut cmd = Command::new(bin.join("p4fleet"));
        cmd.args(["operator", "--listen-addr", &listen.to_string()])
            .args(["--log-level", log_level])
            .args(["--resync-seconds", &resync_seconds.to_string()])
            .args(["--drift-seconds", &drift_seconds.to_string()])
            .env("KUBECONFIG", kubeconfig)
            .stdout(file.try_clone()?)
            .stderr(file);
        let op = Operator {
            proc: Proc::spawn(cmd, log),
            listen,
        };
        for _ in 0..600 {
            if http_get(listen, "/metrics").is_ok() {
                return Ok(op);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!(
            "operator did not serve /metrics on {listen}; log in {}",
            op.proc.log.display()
        )
    }

    pub fn metrics(&self) -> anyhow::Result<String> {
        http_get(self.listen, "/metrics")
    }
}

fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// A plain HTTP/1.0 GET of a loopback side channel; the body of a 200.
pub fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    let (head, body) = buf
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("GET {path}: no HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or(head));
    }
    Ok(body.to_string())
}
