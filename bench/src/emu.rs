//! The emulator under test: a child process (its own scheduler, like a
//! switch's gRPC server), and its stats side channel.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, anyhow};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Child;

pub struct ChildEmulator {
    _child: Child,
    pub p4runtime: SocketAddr,
    pub bfrt: SocketAddr,
    pub stats: SocketAddr,
}

impl ChildEmulator {
    /// Starts `bin` serving devices 1..=`devices`, BFRT with the firewall
    /// program preloaded, optionally pinned to `cpus` (taskset list).
    pub async fn start(
        bin: &Path,
        devices: u64,
        bfrt_json: &Path,
        cpus: Option<&str>,
    ) -> anyhow::Result<ChildEmulator> {
        let mut cmd = match cpus {
            Some(c) => {
                let mut cmd = tokio::process::Command::new("taskset");
                cmd.args(["-c", c]).arg(bin);
                cmd
            }
            None => tokio::process::Command::new(bin),
        };
        cmd.args(["--devices", &devices.to_string()])
            .args(["--p4runtime-addr", "127.0.0.1:0"])
            .args(["--stats-addr", "127.0.0.1:0"])
            .args(["--bfrt-addr", "127.0.0.1:0"])
            .arg("--bfrt-program")
            .arg(format!("firewall={}", bfrt_json.display()))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().with_context(|| format!("starting {bin:?}"))?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let (mut p4runtime, mut bfrt, mut stats) = (None, None, None);
        while p4runtime.is_none() || bfrt.is_none() || stats.is_none() {
            let line = lines
                .next_line()
                .await?
                .ok_or_else(|| anyhow!("emulator exited before listening"))?;
            let addr = |prefix: &str| -> Option<SocketAddr> {
                line.strip_prefix(prefix)
                    .and_then(|a| a.trim().parse().ok())
            };
            if let Some(a) = addr("p4runtime listening on ") {
                p4runtime = Some(a);
            } else if let Some(a) = addr("bfrt listening on ") {
                bfrt = Some(a);
            } else if let Some(a) = addr("stats listening on ") {
                stats = Some(a);
            }
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(ChildEmulator {
            _child: child,
            p4runtime: p4runtime.expect("set"),
            bfrt: bfrt.expect("set"),
            stats: stats.expect("set"),
        })
    }

    /// Entries currently held by a device (all tables, both front ends).
    pub async fn entries(&self, device: u64) -> anyhow::Result<u64> {
        let body = http_get(self.stats, &format!("/stats/{device}")).await?;
        let v: serde_json::Value = serde_json::from_str(&body)?;
        v["entries"]
            .as_u64()
            .ok_or_else(|| anyhow!("no entries in {body}"))
    }
}

/// A minimal HTTP/1.0 GET (the stats side channel is plain HTTP).
async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await?;
    let (head, body) = buf
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("bad HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(anyhow!("GET {path}: {head}"));
    }
    Ok(body.to_string())
}
