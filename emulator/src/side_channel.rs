//! HTTP side channel: counters as JSON and drift helpers, for tests that run
//! the emulator as another process.
//!
//! - `GET  /stats`                          -> `{"devices": [DeviceStats, ...],
//!   "rpcs": {"/p4.v1.P4Runtime/Capabilities": n, ...}}` (`rpcs`: calls
//!   received per gRPC method over every device, `Emulator::rpc_counts`)
//! - `GET  /stats/{device}`                 -> `DeviceStats`
//! - `GET  /stats/{device}/dataplane`       -> a DPDK device's data plane:
//!   `{"device_id", "pipeline", "stats": EngineStats}`
//! - `POST /devices/{device}/delete-entry`  body: p4.v1.TableEntry text format
//!   -> `{"deleted": bool}`
//! - `POST /devices/{device}/drop-entries?table_id=T&count=N`
//!   -> `{"deleted": n}`
//! - `POST /devices/{device}/inject-entry`  body: p4.v1.TableEntry text format
//!   -> `{"inserted": true}`
//! - `POST /devices/{device}/faults?kind=K&after=M&count=N[&ms=T][&every=E]`
//!   arms an injected fault (`crate::faults`) for the N RPCs of its kind
//!   after the next M (defaults 0 and 1): `unavailable` (a Write answers
//!   UNAVAILABLE), `stall-write` (a Write waits T ms), `fail-updates` (every
//!   E-th update of a Write fails with RESOURCE_EXHAUSTED), `stall-read` (a
//!   Read stream stalls T ms after its first message) -> `{"armed": true}`
//! - `POST /devices/{device}/faults/clear`  -> `{"cleared": true}`
//! - `GET  /devices/{device}/faults`       -> how many RPCs each fault hit
//!
//! - `POST /devices/{device}/frames`  body: `[{"port": 1, "src":
//!   "02:00:00:00:00:01", "dst": "02:00:00:00:00:02", "len": 64}, ...]`
//!   (`len` optional, 64) -> `FrameReport` (the L2 frame model,
//!   `Emulator::receive_frames`)
//!
//! Errors are `{"error": "..."}` with a 4xx status.

use axum::extract::{FromRequest, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use p4fleet_proto::p4runtime as p4;
use serde::Deserialize;
use serde_json::json;

use crate::faults::FaultKind;
use crate::{Emulator, EmulatorError};

pub(crate) fn router(emu: Emulator) -> Router {
    Router::new()
        .route("/stats", get(all_stats))
        .route("/stats/{device}", get(device_stats))
        .route("/stats/{device}/dataplane", get(dataplane_stats))
        .route("/devices/{device}/delete-entry", post(delete_entry))
        .route("/devices/{device}/drop-entries", post(drop_entries))
        .route("/devices/{device}/inject-entry", post(inject_entry))
        .route("/devices/{device}/frames", post(frames))
        .route(
            "/devices/{device}/faults",
            post(arm_fault).get(faults_fired),
        )
        .route("/devices/{device}/faults/clear", post(clear_faults))
        .with_state(emu)
}

fn error(code: StatusCode, msg: impl std::fmt::Display) -> Response {
    (code, Json(json!({"error": msg.to_string()}))).into_response()
}

fn emu_error(e: EmulatorError) -> Response {
    let code = match e {
        EmulatorError::UnknownDevice(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    };
    error(code, e)
}

async fn all_stats(State(emu): State<Emulator>) -> Response {
    let devices: Vec<_> = emu
        .device_ids()
        .into_iter()
        .filter_map(|id| emu.stats(id))
        .collect();
    Json(json!({ "devices": devices, "rpcs": emu.rpc_counts() })).into_response()
}

async fn device_stats(State(emu): State<Emulator>, Path(device): Path<u64>) -> Response {
    match emu.stats(device) {
        Some(s) => Json(s).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("unknown device id {device}")),
    }
}

async fn dataplane_stats(State(emu): State<Emulator>, Path(device): Path<u64>) -> Response {
    match emu.registry.engines.engine(device) {
        Ok(e) => Json(json!({
            "device_id": device,
            "pipeline": e.pipeline(),
            "stats": e.stats(),
        }))
        .into_response(),
        // Unknown device, not a DPDK target, or no pipeline yet.
        Err(s) => error(StatusCode::NOT_FOUND, s.message()),
    }
}

/// A request body in p4.v1.TableEntry text format, parsed.
struct EntryBody(p4::TableEntry);

impl<S: Send + Sync> FromRequest<S> for EntryBody {
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Response> {
        let body = String::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        p4fleet_proto::text::parse::<p4::TableEntry>("p4.v1.TableEntry", &body)
            .map(EntryBody)
            .map_err(|e| error(StatusCode::BAD_REQUEST, e))
    }
}

/// A drift helper's answer: `ok(value)` as JSON, or its error.
fn reply<T>(r: Result<T, EmulatorError>, ok: impl FnOnce(T) -> serde_json::Value) -> Response {
    match r {
        Ok(v) => Json(ok(v)).into_response(),
        Err(e) => emu_error(e),
    }
}

async fn delete_entry(
    State(emu): State<Emulator>,
    Path(device): Path<u64>,
    EntryBody(te): EntryBody,
) -> Response {
    reply(emu.delete_entry(device, &te), |d| json!({ "deleted": d }))
}

#[derive(Deserialize)]
struct DropQuery {
    table_id: Option<u32>,
    count: Option<usize>,
}

async fn drop_entries(
    State(emu): State<Emulator>,
    Path(device): Path<u64>,
    Query(q): Query<DropQuery>,
) -> Response {
    let r = emu.drop_entries(device, q.table_id, q.count.unwrap_or(1));
    reply(r, |n| json!({ "deleted": n }))
}

async fn inject_entry(
    State(emu): State<Emulator>,
    Path(device): Path<u64>,
    EntryBody(te): EntryBody,
) -> Response {
    reply(
        emu.inject_entry(device, te),
        |()| json!({ "inserted": true }),
    )
}

#[derive(Deserialize)]
struct FrameJson {
    port: u32,
    src: String,
    dst: String,
    #[serde(default = "default_len")]
    len: u64,
}

fn default_len() -> u64 {
    64
}

fn mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

async fn frames(
    State(emu): State<Emulator>,
    Path(device): Path<u64>,
    Json(body): Json<Vec<FrameJson>>,
) -> Response {
    let mut frames = Vec::with_capacity(body.len());
    for (i, f) in body.iter().enumerate() {
        let (Some(src), Some(dst)) = (mac(&f.src), mac(&f.dst)) else {
            return error(
                StatusCode::BAD_REQUEST,
                format!("frame {i}: src and dst must be MAC addresses (aa:bb:cc:dd:ee:ff)"),
            );
        };
        frames.push(crate::Frame {
            ingress_port: f.port,
            src,
            dst,
            len: f.len,
        });
    }
    reply(emu.receive_frames(device, &frames), |r| json!(r))
}

#[derive(Deserialize)]
struct FaultQuery {
    kind: String,
    after: Option<u64>,
    count: Option<u64>,
    ms: Option<u64>,
    every: Option<usize>,
}

impl FaultQuery {
    fn kind(&self) -> Result<FaultKind, String> {
        let ms = || {
            self.ms
                .map(std::time::Duration::from_millis)
                .ok_or_else(|| format!("fault {}: ms is required", self.kind))
        };
        match self.kind.as_str() {
            "unavailable" => Ok(FaultKind::Unavailable),
            "stall-write" => Ok(FaultKind::StallWrite(ms()?)),
            "stall-read" => Ok(FaultKind::StallRead(ms()?)),
            "fail-updates" => match self.every {
                Some(e) if e > 0 => Ok(FaultKind::FailUpdates(e)),
                _ => Err("fault fail-updates: every (> 0) is required".into()),
            },
            other => Err(format!(
                "unknown fault kind {other:?} (unavailable, stall-write, stall-read, fail-updates)"
            )),
        }
    }
}

async fn arm_fault(
    State(emu): State<Emulator>,
    Path(device): Path<u64>,
    Query(q): Query<FaultQuery>,
) -> Response {
    let kind = match q.kind() {
        Ok(k) => k,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    match emu.device(device) {
        Ok(dev) => {
            dev.faults
                .arm(kind, q.after.unwrap_or(0), q.count.unwrap_or(1));
            Json(json!({"armed": true})).into_response()
        }
        Err(e) => emu_error(e),
    }
}

async fn clear_faults(State(emu): State<Emulator>, Path(device): Path<u64>) -> Response {
    match emu.device(device) {
        Ok(dev) => {
            dev.faults.clear();
            Json(json!({"cleared": true})).into_response()
        }
        Err(e) => emu_error(e),
    }
}

async fn faults_fired(State(emu): State<Emulator>, Path(device): Path<u64>) -> Response {
    match emu.device(device) {
        Ok(dev) => Json(dev.faults.fired()).into_response(),
        Err(e) => emu_error(e),
    }
}
