//! How fast the emulator itself is, without a client or a network: the
//! P4Runtime tonic service is called in-process with pre-encoded gRPC
//! frames (gRPC frame decode + prost decode + validation + table insert +
//! response encode), and, for comparison, how long p4fleet's client side
//! takes to build and encode the same requests without sending them.

use std::time::Instant;

use anyhow::{anyhow, bail};
use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use p4fleet_emulator::{Emulator, EmulatorConfig};
use p4fleet_model::entries::Entry;
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{Uint128, WriteRequest};
use prost::Message;
use tower::{Service, ServiceExt};

use crate::paths::P4fleetP4rt;
use crate::stats::Sample;
use crate::workload;

/// The election id [`P4fleetP4rt`] uses (its pool's).
const ELECTION: Uint128 = Uint128 { high: 0, low: 10 };

fn frames(entries: &[Entry], batch: usize, device_id: u64) -> Vec<Bytes> {
    entries
        .chunks(batch)
        .map(|c| {
            let req = WriteRequest {
                device_id,
                election_id: Some(ELECTION),
                updates: c.iter().map(workload::insert).collect(),
                ..Default::default()
            };
            let len = req.encoded_len();
            let mut b = BytesMut::with_capacity(5 + len);
            b.put_u8(0);
            b.put_u32(len as u32);
            req.encode(&mut b).expect("capacity");
            b.freeze()
        })
        .collect()
}

/// One unary gRPC call of `path` with a pre-framed `frame`, straight into
/// the in-process service `svc`; the answer's message bytes (after the
/// 5-byte gRPC prefix) when grpc-status is 0.
pub async fn call<S>(svc: &mut S, path: &str, frame: Bytes) -> anyhow::Result<Bytes>
where
    S: Service<http::Request<Full<Bytes>>, Response = http::Response<tonic::body::Body>>,
    S::Error: std::error::Error + Send + Sync + 'static,
{
    let req = http::Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(frame))?;
    let resp = svc.ready().await?.call(req).await?;
    let (parts, body) = resp.into_parts();
    let collected = body.collect().await.map_err(|e| anyhow!("body: {e}"))?;
    let status = collected
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| parts.headers.get("grpc-status"))
        .map(|v| v.as_bytes().to_vec());
    let body = collected.to_bytes();
    if status.as_deref() != Some(b"0") || body.len() < 5 {
        bail!("{path} failed: {parts:?} {status:?}");
    }
    Ok(body.slice(5..))
}

/// The sample of a run that started at `start`, once the emulator is seen
/// to hold every entry it was sent.
pub(crate) fn held_sample(
    running: &p4fleet_emulator::RunningEmulator,
    entries: usize,
    requests: usize,
    start: Instant,
    latency_sum_s: f64,
) -> anyhow::Result<Sample> {
    let elapsed_s = start.elapsed().as_secs_f64();
    let held = running.stats(1).map(|s| s.entries).unwrap_or(0);
    if held != entries as u64 {
        bail!("emulator holds {held} entries, expected {entries}");
    }
    Ok(Sample {
        entries,
        requests,
        elapsed_s,
        latency_sum_s,
    })
}

/// The in-process emulator, primary taken and pipeline set through a real
/// connection (p4fleet-client), writes then sent straight into the service.
pub struct Ceiling {
    running: p4fleet_emulator::RunningEmulator,
    client: P4fleetP4rt,
}

impl Ceiling {
    pub async fn start(info: P4Info) -> anyhow::Result<Ceiling> {
        let running = Emulator::start(EmulatorConfig::default()).await?;
        let client = P4fleetP4rt::connect(&running.p4runtime_addr().to_string(), 1, info).await?;
        Ok(Ceiling { running, client })
    }

    pub async fn run(&mut self, entries: &[Entry], batch: usize) -> anyhow::Result<Sample> {
        self.client.clear().await?;
        let frames = frames(entries, batch, 1);
        let mut svc = self.running.emulator().service();
        let mut latency = 0.0;
        let start = Instant::now();
        let requests = frames.len();
        for f in frames {
            let t = Instant::now();
            call(&mut svc, "/p4.v1.P4Runtime/Write", f).await?;
            latency += t.elapsed().as_secs_f64();
        }
        held_sample(&self.running, entries.len(), requests, start, latency)
    }

    pub async fn shutdown(self) {
        drop(self.client);
        let _ = self.running.shutdown().await;
    }
}

/// p4fleet's client side alone: Entry → Update → encoded WriteRequest
/// bytes for every batch, nothing sent.
pub fn client_encode(entries: &[Entry], batch: usize) -> Sample {
    crate::stats::timed_encode(entries.len(), || frames(entries, batch, 1))
}
