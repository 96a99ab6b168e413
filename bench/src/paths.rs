//! The measured clients. Each one clears its table (outside the timing),
//! then inserts all entries at one batch size and returns a [`Sample`].

use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, anyhow, bail};
use bytes::{BufMut, Bytes, BytesMut};
use p4fleet_client::{
    Atomicity, Device, Identity, Target, TofinoPipeline, WriteOptions, WriteReport,
};
use p4fleet_model::entries::bfrt::{BfrtOp, BfrtProgramMap, BfrtWriteHeader, bfrt_write_request};
use p4fleet_model::entries::wire::{P4rtWriteHeader, p4rt_write_request};
use p4fleet_model::entries::{Entry, TableSchema, WriteOp};
use p4fleet_proto::p4info::P4Info;
use rbfrt::SwitchConnection;
use rbfrt::table::{MatchValue, Request};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::stats::Sample;
use crate::workload::{self, ACTION, TABLE};

/// The election id (and BFRT client id) the bench's clients claim.
const ELECTION_LOW: u64 = 10;

fn identity() -> Identity {
    Identity {
        election_id: u128::from(ELECTION_LOW),
        client_id: 2,
    }
}

/// p4fleet's P4Runtime path: the operator's own write path
/// (p4fleet-client), from the entry model (entries → [`WriteOp`]s →
/// request bytes encoded straight from the entries) to the answers,
/// batched and pipelined by [`Device::write_ops`], the call the
/// TableEntrySet sync makes.
pub struct P4fleetP4rt {
    pub dev: Device,
    pub info: P4Info,
    cookie: u64,
    /// Bulk path: the same `write_ops`, with the client's columnar bulk
    /// write enabled (columns straight from the entry model).
    bulk: bool,
}

impl P4fleetP4rt {
    pub async fn connect(endpoint: &str, device_id: u64, info: P4Info) -> anyhow::Result<Self> {
        let dev = Device::connect(Target::p4runtime(endpoint, device_id), identity())?;
        dev.capabilities().await?;
        // The standard path unless asked (the `p4fleet-p4rt-bulk` path).
        if let Device::P4Runtime(d) = &dev {
            d.set_bulk_enabled(false);
        }
        Ok(P4fleetP4rt {
            dev,
            info,
            cookie: 1000,
            bulk: false,
        })
    }

    /// Uses p4fleet's columnar bulk write (docs/bulk.md); fails when the
    /// target does not advertise it.
    pub async fn use_bulk(&mut self) -> anyhow::Result<()> {
        self.bulk = true;
        if let Device::P4Runtime(d) = &self.dev {
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
        // The bulk switch is the client's (set in connect / use_bulk).
        insert_all(&self.dev, entries, batch, max_in_flight).await
    }
}

/// Inserts `entries` into slot 0 with one [`Device::write_ops`] (the
/// operator's write path) and times it, first op built to last answer.
async fn insert_all(
    dev: &Device,
    entries: &[Entry],
    batch: usize,
    max_in_flight: usize,
) -> anyhow::Result<Sample> {
    let opts = WriteOptions {
        batch_size: batch,
        max_in_flight,
        atomicity: Atomicity::ContinueOnError,
        distinct_keys: false,
    };
    let start = Instant::now();
    let ops = workload::insert_ops(entries);
    let report = dev.write_ops(0, &ops, opts).await?;
    let elapsed = start.elapsed();
    check(&report, entries.len())?;
    Ok(Sample {
        entries: entries.len(),
        requests: report.requests,
        elapsed_s: elapsed.as_secs_f64(),
        latency_sum_s: report.total_request_latency.as_secs_f64(),
    })
}

/// Fails on any refused update: every path must write everything.
fn check(report: &WriteReport, total: usize) -> anyhow::Result<()> {
    if let Some(f) = report.failures.first() {
        bail!(
            "{} of {total} updates failed, first: {}",
            report.failures.len(),
            f.message
        );
    }
    Ok(())
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

/// p4fleet's BFRT path (client/src/bfrt.rs): the same entry model and
/// [`Device::write_ops`] as the P4Runtime path; the client translates to
/// BFRT while encoding.
pub struct P4fleetBfrt {
    dev: Device,
    schema: TableSchema,
}

impl P4fleetBfrt {
    pub async fn connect(
        endpoint: &str,
        device_id: u64,
        info: &P4Info,
        bfrt_json: Vec<u8>,
    ) -> anyhow::Result<Self> {
        let dev = Device::connect(Target::bfrt(endpoint, device_id), identity())?;
        dev.set_tofino_pipeline(
            0,
            info,
            &TofinoPipeline {
                p4_name: "firewall".into(),
                bfrt_json,
                ..Default::default()
            },
        )
        .await?;
        let schema = TableSchema::from_p4info(info, TABLE)?;
        Ok(P4fleetBfrt { dev, schema })
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
        let keys = have
            .iter()
            .map(|t| Ok(Entry::from_proto(&self.schema, t)?.key))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let dels: Vec<WriteOp> = keys.iter().map(WriteOp::delete).collect();
        let opts = WriteOptions {
            batch_size: 10_000,
            max_in_flight: 4,
            atomicity: Atomicity::ContinueOnError,
            distinct_keys: false,
        };
        check(&self.dev.write_ops(0, &dels, opts).await?, dels.len())
    }

    pub async fn run(
        &mut self,
        entries: &[Entry],
        batch: usize,
        max_in_flight: usize,
    ) -> anyhow::Result<Sample> {
        self.clear(entries).await?;
        insert_all(&self.dev, entries, batch, max_in_flight).await
    }
}

/// p4fleet's client side alone, as [`Device::write_ops`] does it on the
/// standard P4Runtime path: entries → ops → request bytes encoded straight
/// from the entries, per batch, each copied behind its 5-byte gRPC prefix
/// as tonic frames it; nothing sent. The requests carry the election id
/// [`P4fleetP4rt`] claims.
pub fn client_encode(entries: &[Entry], batch: usize) -> Sample {
    let header = P4rtWriteHeader {
        device_id: 1,
        election_id: (0, ELECTION_LOW),
        atomicity: Atomicity::ContinueOnError,
    };
    crate::stats::timed_encode(entries.len(), || {
        let ops = workload::insert_ops(entries);
        ops.chunks(batch.max(1))
            .map(|c| {
                let body = p4rt_write_request(&header, c);
                let mut f = BytesMut::with_capacity(5 + body.len());
                f.put_u8(0);
                f.put_u32(body.len() as u32);
                f.put_slice(&body);
                f.freeze()
            })
            .collect::<Vec<Bytes>>()
    })
}

/// The BFRT target of the bench's requests (as the client addresses it).
fn bfrt_header(device_id: u32) -> BfrtWriteHeader<'static> {
    BfrtWriteHeader {
        target: p4fleet_proto::bfrt::TargetDevice {
            device_id,
            pipe_id: 0xffff,
            direction: 0xff,
            prsr_id: 0xff,
        },
        client_id: 2,
        atomicity: Atomicity::ContinueOnError,
        p4_name: "firewall",
    }
}

/// [`client_encode`] for BFRT, as `BfrtDevice::write_ops` does it: every
/// op checked against the bfrt.json translation, then each batch's request
/// encoded straight from the entries.
pub fn bfrt_client_encode(map: &BfrtProgramMap, entries: &[Entry], batch: usize) -> Sample {
    let header = bfrt_header(1);
    crate::stats::timed_encode(entries.len(), || {
        let ops: Vec<BfrtOp> = entries
            .iter()
            .filter_map(|e| map.check(WriteOp::insert(e)).ok())
            .collect();
        ops.chunks(batch.max(1))
            .filter_map(|c| bfrt_write_request(map, &header, c).ok())
            .collect::<Vec<Vec<u8>>>()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn encode_only_frames_are_the_driver_requests() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let (_, ids) = workload::firewall(&root.join("examples/firewall/p4info.txt")).unwrap();
        let entries = workload::entries(&ids, 10);
        let s = client_encode(&entries, 4);
        assert_eq!((s.entries, s.requests), (10, 3));
        // The bytes decode to the Updates the prost path builds.
        let ops = workload::insert_ops(&entries);
        let h = P4rtWriteHeader {
            device_id: 1,
            election_id: (0, ELECTION_LOW),
            atomicity: Atomicity::ContinueOnError,
        };
        let req =
            p4fleet_proto::p4runtime::WriteRequest::decode(p4rt_write_request(&h, &ops).as_slice())
                .unwrap();
        let want: Vec<_> = entries.iter().map(workload::insert).collect();
        assert_eq!(req.updates, want);
        assert_eq!(req.election_id.map(|e| e.low), Some(ELECTION_LOW));
    }

    #[test]
    fn bfrt_encodings_agree() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let (info, ids) = workload::firewall(&root.join("examples/firewall/p4info.txt")).unwrap();
        let json = std::fs::read(root.join("examples/firewall/bfrt.json")).unwrap();
        let map = workload::bfrt_map(&info, &json).unwrap();
        let entries = workload::entries(&ids, 10);
        let ops: Vec<BfrtOp> = workload::insert_ops(&entries)
            .into_iter()
            .map(|op| map.check(op).unwrap())
            .collect();
        let direct = bfrt_write_request(&map, &bfrt_header(1), &ops).unwrap();
        let req = p4fleet_proto::bfrt::WriteRequest::decode(direct.as_slice()).unwrap();
        assert_eq!(req.updates.len(), 10);
        // The BFRT form of entry 3, read back, is the entry.
        let Some(p4fleet_proto::bfrt::entity::Entity::TableEntry(te)) = req.updates[3]
            .entity
            .as_ref()
            .and_then(|e| e.entity.as_ref())
        else {
            panic!("table entry expected")
        };
        let back = map.table(ids.table).unwrap().from_bfrt(te).unwrap();
        assert_eq!(back, entries[3].to_proto());
        assert_eq!(bfrt_client_encode(&map, &entries, 4).requests, 3);
    }

    /// The operator's write path (`write_ops`, requests encoded from the
    /// entries) gives the same per-update results and table contents
    /// whatever the batching and pipelining, on both protocols, refusals
    /// included: each step runs batched and pipelined on one device and one
    /// update per request on another.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn write_ops_answer_alike_whatever_the_batching() {
        use p4fleet_model::entries::{ByteStr, MatchValue};
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let (info, ids) = workload::firewall(&root.join("examples/firewall/p4info.txt")).unwrap();
        let json = std::fs::read(root.join("examples/firewall/bfrt.json")).unwrap();
        let emu = p4fleet_emulator::Emulator::start(p4fleet_emulator::EmulatorConfig {
            device_ids: vec![1, 2, 3, 4],
            bfrt_addr: Some("127.0.0.1:0".parse().unwrap()),
            ..Default::default()
        })
        .await
        .unwrap();
        let p4 = emu.p4runtime_addr().to_string();
        let bfrt = emu.bfrt_addr().unwrap().to_string();
        let tofino = TofinoPipeline {
            p4_name: "firewall".into(),
            bfrt_json: json,
            ..Default::default()
        };
        let mut devs = Vec::new();
        for id in [1, 2] {
            let d = Device::connect(Target::p4runtime(&p4, id), identity()).unwrap();
            if let Device::P4Runtime(p) = &d {
                p.set_bulk_enabled(false);
            }
            d.set_pipeline(0, &info, b"x".to_vec(), 1).await.unwrap();
            devs.push(d);
        }
        for id in [3, 4] {
            let d = Device::connect(Target::bfrt(&bfrt, id), identity()).unwrap();
            d.set_tofino_pipeline(0, &info, &tofino).await.unwrap();
            devs.push(d);
        }

        let mut entries = workload::entries(&ids, 420);
        // Too wide for the 32-bit field: refused by the P4Runtime device
        // and by the BFRT translation.
        entries[250].key.matches[0].value = MatchValue::Exact(ByteStr::new(&[1, 2, 3, 4, 5]));
        let mut moved = workload::entries(&ids, 400);
        for e in &mut moved {
            e.action.params[0].value = ByteStr::new(&[7]);
        }
        let md = p4fleet_model::sync::tag_metadata(9);
        // (ops, batch size, indexes refused)
        let steps: Vec<(Vec<WriteOp>, usize, Vec<usize>)> = vec![
            (
                entries[..300]
                    .iter()
                    .map(|e| WriteOp::insert(e).with_metadata(&md))
                    .collect(),
                100,
                vec![250],
            ),
            // 200..300 exist already; 250 is refused.
            (
                entries[200..400].iter().map(WriteOp::insert).collect(),
                64,
                (0..100).collect(),
            ),
            (
                moved[100..150].iter().map(WriteOp::modify).collect(),
                30,
                vec![],
            ),
            // 410..420 were never written: NOT_FOUND.
            (
                entries[..40]
                    .iter()
                    .chain(&entries[410..])
                    .map(|e| WriteOp::delete(&e.key))
                    .collect(),
                7,
                (40..50).collect(),
            ),
        ];
        let opts = |batch_size, max_in_flight| WriteOptions {
            batch_size,
            max_in_flight,
            atomicity: Atomicity::ContinueOnError,
            distinct_keys: false,
        };
        let codes = |r: &WriteReport| -> Vec<(usize, i32, String)> {
            r.failures
                .iter()
                .map(|f| (f.index, f.code, f.message.clone()))
                .collect()
        };
        for (ops, batch, refused) in &steps {
            for pair in devs.chunks(2) {
                let direct = pair[0].write_ops(0, ops, opts(*batch, 3)).await.unwrap();
                let single = pair[1].write_ops(0, ops, opts(1, 1)).await.unwrap();
                assert_eq!(codes(&direct), codes(&single));
                // One request per sendable op (BFRT refuses what it cannot
                // translate before sending), batched alike.
                assert!(single.requests <= ops.len());
                assert!(single.requests + refused.len() >= ops.len());
                assert_eq!(direct.requests, single.requests.div_ceil(*batch));
                let idx: Vec<usize> = direct.failures.iter().map(|f| f.index).collect();
                assert_eq!(&idx, refused, "{:?}", direct.failures.first());
            }
        }
        for pair in devs.chunks(2) {
            let (mut a, mut b) = (
                pair[0].read_table(0, ids.table).await.unwrap(),
                pair[1].read_table(0, ids.table).await.unwrap(),
            );
            assert!(a.len() > 300, "{}", a.len());
            let key = |t: &p4fleet_proto::p4runtime::TableEntry| format!("{:?}", t.r#match);
            a.sort_by_key(key);
            b.sort_by_key(key);
            assert_eq!(a, b);
        }
        emu.shutdown().await.unwrap();
    }
}
