//! The measured clients. Each one clears its table (outside the timing),
//! then inserts all entries at one batch size and returns a [`Sample`].

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, anyhow, bail};
use p4fleet::driver::{Device, DriverPool, WriteOptions};
use p4fleet::entries::Entry;
use p4fleet_crds::entry_set::Atomicity;
use p4fleet_crds::switch::{Switch, SwitchSpec};
use p4fleet_proto::p4info::P4Info;
use rbfrt::SwitchConnection;
use rbfrt::table::{MatchValue, Request};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::stats::Sample;
use crate::workload::{self, ACTION, TABLE};

/// A Switch resource for the driver pool (only the connection matters).
pub fn switch(endpoint: &str, device_id: u64) -> anyhow::Result<Switch> {
    let spec: SwitchSpec = serde_json::from_value(serde_json::json!({
        "target": "Bmv2", "endpoint": endpoint, "deviceId": device_id, "slots": 1
    }))?;
    Ok(Switch::new("bench", spec))
}

/// p4fleet's P4Runtime driver: the operator's own write path, from the
/// entry model (Entry → Update) to the answers, batched and pipelined by
/// [`Device::write`].
pub struct P4fleetP4rt {
    pub dev: Arc<Device>,
    pub info: P4Info,
    cookie: u64,
    /// Bulk path: entries go to the driver's `write_entries` (columns
    /// straight from the entry model).
    bulk: bool,
    _pool: DriverPool,
}

impl P4fleetP4rt {
    pub async fn connect(endpoint: &str, device_id: u64, info: P4Info) -> anyhow::Result<Self> {
        let pool = DriverPool::with_election_id(10);
        let dev = pool.connect(&switch(endpoint, device_id)?)?;
        dev.capabilities().await?;
        // The standard path unless asked (the `p4fleet-p4rt-bulk` path).
        if let Device::P4Runtime(d) = &*dev {
            d.set_bulk_enabled(false);
        }
        Ok(P4fleetP4rt {
            dev,
            info,
            cookie: 1000,
            bulk: false,
            _pool: pool,
        })
    }

    /// Uses p4fleet's columnar bulk write (docs/bulk.md); fails when the
    /// target does not advertise it.
    pub async fn use_bulk(&mut self) -> anyhow::Result<()> {
        self.bulk = true;
        if let Device::P4Runtime(d) = &*self.dev {
            d.set_bulk_enabled(true);
        }
        if !self.dev.capabilities().await?.bulk_write {
            bail!("the target does not advertise p4fleet.bulk.v1.BulkWrite");
        }
        Ok(())
    }

    /// VERIFY_AND_COMMIT with a new cookie clears the device's tables.
    pub async fn clear(&mut self) -> anyhow::Result<()> {
        self.cookie += 1;
        self.dev
            .set_pipeline(0, &self.info, b"bench".to_vec(), self.cookie)
            .await?;
        Ok(())
    }

    pub async fn run(
        &mut self,
        entries: &[Entry],
        batch: usize,
        max_in_flight: usize,
    ) -> anyhow::Result<Sample> {
        self.clear().await?;
        let opts = WriteOptions {
            batch_size: batch,
            max_in_flight,
            atomicity: Atomicity::ContinueOnError,
        };
        let start = Instant::now();
        let report = match &*self.dev {
            Device::P4Runtime(d) if self.bulk => {
                d.write_entries(
                    0,
                    p4fleet_proto::p4runtime::update::Type::Insert,
                    entries,
                    opts,
                )
                .await?
            }
            _ => {
                let updates = entries.iter().map(workload::insert).collect();
                self.dev.write(0, updates, opts).await?
            }
        };
        let elapsed = start.elapsed();
        if let Some(f) = report.failures.first() {
            bail!(
                "{} of {} updates failed, first: {}",
                report.failures.len(),
                entries.len(),
                f.message
            );
        }
        Ok(Sample {
            entries: entries.len(),
            requests: report.requests,
            elapsed_s: elapsed.as_secs_f64(),
            latency_sum_s: report.total_request_latency.as_secs_f64(),
        })
    }
}

/// rbfrt (crates.io) on BFRT, used as its README shows: one
/// `write_table_entries` call per batch, awaited before the next.
pub struct Rbfrt {
    conn: SwitchConnection,
}

impl Rbfrt {
    pub async fn connect(addr: std::net::SocketAddr, device_id: u32) -> anyhow::Result<Self> {
        let conn = SwitchConnection::builder(&addr.ip().to_string(), addr.port())
            .device_id(device_id)
            .client_id(1)
            .p4_name("firewall")
            .connect()
            .await
            .map_err(|e| anyhow!("rbfrt connect: {e:?}"))?;
        Ok(Rbfrt { conn })
    }

    fn request(i: usize) -> Request {
        Request::new(TABLE)
            .match_key(
                "hdr.ipv4.srcAddr",
                MatchValue::exact(std::net::Ipv4Addr::from(workload::src(i))),
            )
            .match_key(
                "hdr.ipv4.dstAddr",
                MatchValue::exact(std::net::Ipv4Addr::from(workload::dst(i))),
            )
            .action(ACTION)
            .action_data("port", workload::port(i))
    }

    pub async fn run(&mut self, n: usize, batch: usize) -> anyhow::Result<Sample> {
        self.conn
            .clear_table(TABLE)
            .await
            .map_err(|e| anyhow!("rbfrt clear_table: {e:?}"))?;
        let mut latency = 0.0;
        let mut requests = 0;
        let start = Instant::now();
        let mut i = 0;
        while i < n {
            let reqs: Vec<Request> = (i..(i + batch).min(n)).map(Self::request).collect();
            let t = Instant::now();
            self.conn
                .write_table_entries(reqs)
                .await
                .map_err(|e| anyhow!("rbfrt write_table_entries: {e:?}"))?;
            latency += t.elapsed().as_secs_f64();
            requests += 1;
            i += batch;
        }
        Ok(Sample {
            entries: n,
            requests,
            elapsed_s: start.elapsed().as_secs_f64(),
            latency_sum_s: latency,
        })
    }
}

/// What the Python peer says when it is ready.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct PythonInfo {
    pub python: String,
    pub grpcio: String,
    pub protobuf: String,
}

/// The Python P4Runtime peer (bench/python/p4rt_peer.py), a child process
/// driven one JSON line at a time so it runs interleaved with the others.
pub struct Python {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    pub info: PythonInfo,
}

impl Python {
    pub async fn start(
        python: &Path,
        script: &Path,
        endpoint: &str,
        device_id: u64,
        p4info: &Path,
    ) -> anyhow::Result<Self> {
        let mut child = tokio::process::Command::new(python)
            .arg(script)
            .args(["--grpc-addr", endpoint])
            .args(["--device-id", &device_id.to_string()])
            .arg("--p4info")
            .arg(p4info)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {python:?}"))?;
        let stdin = child.stdin.take().expect("piped");
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let first = lines
            .next_line()
            .await?
            .ok_or_else(|| anyhow!("python peer exited before it was ready"))?;
        let info: PythonInfo =
            serde_json::from_str(&first).with_context(|| format!("python said {first:?}"))?;
        Ok(Python {
            child,
            stdin,
            lines,
            info,
        })
    }

    pub async fn run(&mut self, n: usize, batch: usize) -> anyhow::Result<Sample> {
        let cmd = serde_json::json!({"cmd": "run", "batch": batch, "entries": n});
        self.stdin.write_all(format!("{cmd}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        let line = self
            .lines
            .next_line()
            .await?
            .ok_or_else(|| anyhow!("python peer exited"))?;
        serde_json::from_str(&line).with_context(|| format!("python said {line:?}"))
    }

    pub async fn stop(mut self) {
        let _ = self.stdin.write_all(b"{\"cmd\": \"quit\"}\n").await;
        let _ = self.child.wait().await;
    }
}

/// p4fleet's BFRT driver (operator/src/driver/bfrt.rs): the same entry
/// model and `write` as the P4Runtime path, translated to BFRT updates by
/// the driver.
pub struct P4fleetBfrt {
    dev: p4fleet::driver::BfrtDevice,
}

impl P4fleetBfrt {
    pub async fn connect(
        endpoint: &str,
        device_id: u64,
        info: &P4Info,
        bfrt_json: Vec<u8>,
    ) -> anyhow::Result<Self> {
        let dev = p4fleet::driver::BfrtDevice::new("bench".into(), endpoint.into(), device_id, 2)?;
        dev.set_pipeline(
            0,
            info,
            &p4fleet::driver::TofinoPipeline {
                p4_name: "firewall".into(),
                bfrt_json,
                ..Default::default()
            },
        )
        .await?;
        Ok(P4fleetBfrt { dev })
    }

    async fn write(
        &self,
        updates: Vec<p4fleet_proto::p4runtime::Update>,
        batch: usize,
        n: usize,
    ) -> anyhow::Result<p4fleet::driver::WriteReport> {
        let total = updates.len();
        let report = self
            .dev
            .write(
                0,
                updates,
                WriteOptions {
                    batch_size: batch,
                    max_in_flight: n,
                    atomicity: Atomicity::ContinueOnError,
                },
            )
            .await?;
        if let Some(f) = report.failures.first() {
            bail!(
                "{} of {total} updates failed, first: {}",
                report.failures.len(),
                f.message
            );
        }
        Ok(report)
    }

    /// Deletes every entry this bench writes (BFRT has no pipeline reset
    /// that keeps the binding).
    async fn clear(&self, entries: &[Entry]) -> anyhow::Result<()> {
        let have = self
            .dev
            .read_table(0, entries.first().map(|e| e.key.table_id).unwrap_or(0))
            .await?;
        if have.is_empty() {
            return Ok(());
        }
        let dels = have
            .into_iter()
            .map(|t| p4fleet_proto::p4runtime::Update {
                r#type: p4fleet_proto::p4runtime::update::Type::Delete as i32,
                entity: Some(p4fleet_proto::p4runtime::Entity {
                    entity: Some(p4fleet_proto::p4runtime::entity::Entity::TableEntry(
                        p4fleet_proto::p4runtime::TableEntry { action: None, ..t },
                    )),
                }),
            })
            .collect();
        self.write(dels, 10_000, 4).await.map(|_| ())
    }

    pub async fn run(
        &mut self,
        entries: &[Entry],
        batch: usize,
        max_in_flight: usize,
    ) -> anyhow::Result<Sample> {
        self.clear(entries).await?;
        let start = Instant::now();
        let updates = entries.iter().map(workload::insert).collect();
        let report = self.write(updates, batch, max_in_flight).await?;
        Ok(Sample {
            entries: entries.len(),
            requests: report.requests,
            elapsed_s: start.elapsed().as_secs_f64(),
            latency_sum_s: report.total_request_latency.as_secs_f64(),
        })
    }
}
