//! The FPGA board on the HTTP side channel (JSON):
//!
//! - `GET /fpga` -> board, every slot's state and counters, unmatched and
//!   offered packets, flows
//! - `GET /fpga/traffic` -> `{"flows": [Flow, ...]}`
//! - `PUT /fpga/traffic` body `{"flows": [Flow, ...]}` replaces every flow;
//!   a Flow is `{"slot": 3, "pps": 1000}` (frames with slot 3's Sid) or
//!   `{"vlan": 10, "dst_mac": "02:00:00:00:00:01", "port": 0, "pps": 1000}`
//!   (a fixed Sid; `dst_mac` optional), each with optional
//!   `"packet_bytes"` (default 64)
//! - `PUT /fpga/slots/{slot}/traffic` body `{"pps": N, "packet_bytes": 64}`
//!   sets the rate offered to one slot
//!
//! Errors are `{"error": "..."}` with 400 (404 for an unknown slot).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use p4fleet_proto::fpga as pb;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::board::Board;
use super::error::SlotError;
use super::isolation::{Sid, format_mac, parse_mac};
use super::traffic::{FlowSpec, Target};

pub(crate) fn router(board: Arc<Board>) -> Router {
    Router::new()
        .route("/fpga", get(report))
        .route("/fpga/traffic", get(get_traffic).put(put_traffic))
        .route("/fpga/slots/{slot}/traffic", put(put_slot_traffic))
        .with_state(board)
}

fn error(e: SlotError) -> Response {
    let code = match e {
        SlotError::UnknownSlot { .. } => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    };
    (code, Json(json!({"error": e.to_string()}))).into_response()
}

/// A flow as JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Flow {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    slot: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vlan: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dst_mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    port: Option<u32>,
    pps: u64,
    #[serde(default = "default_packet_bytes")]
    packet_bytes: u32,
}

fn default_packet_bytes() -> u32 {
    64
}

impl Flow {
    fn spec(&self) -> Result<FlowSpec, SlotError> {
        let bad = |msg: String| SlotError::BadRequest { slot: None, msg };
        let target = match (self.slot, self.vlan) {
            (Some(s), None) => Target::Slot(s),
            (None, Some(vlan)) => {
                let dst_mac = match &self.dst_mac {
                    Some(m) => Some(parse_mac(m).ok_or_else(|| bad(format!("bad MAC {m:?}")))?),
                    None => None,
                };
                Target::Sid {
                    sid: Sid { vlan, dst_mac },
                    port: self.port.unwrap_or(0),
                }
            }
            _ => return Err(bad("a flow has either \"slot\" or \"vlan\"".into())),
        };
        Ok(FlowSpec {
            target,
            pps: self.pps,
            packet_bytes: self.packet_bytes,
        })
    }

    fn from_spec(f: &FlowSpec) -> Flow {
        let mut out = Flow {
            slot: None,
            vlan: None,
            dst_mac: None,
            port: None,
            pps: f.pps,
            packet_bytes: f.packet_bytes,
        };
        match f.target {
            Target::Slot(s) => out.slot = Some(s),
            Target::Sid { sid, port } => {
                out.vlan = Some(sid.vlan);
                out.dst_mac = sid.dst_mac.as_ref().map(format_mac);
                out.port = Some(port);
            }
        }
        out
    }
}

#[derive(Deserialize)]
struct Flows {
    flows: Vec<Flow>,
}

#[derive(Deserialize)]
struct Rate {
    pps: u64,
    #[serde(default = "default_packet_bytes")]
    packet_bytes: u32,
}

fn flows_json(board: &Board) -> serde_json::Value {
    let flows: Vec<Flow> = board.flows().iter().map(Flow::from_spec).collect();
    json!({ "flows": flows })
}

async fn get_traffic(State(board): State<Arc<Board>>) -> Response {
    Json(flows_json(&board)).into_response()
}

async fn put_traffic(State(board): State<Arc<Board>>, Json(body): Json<Flows>) -> Response {
    let specs: Result<Vec<FlowSpec>, SlotError> = body.flows.iter().map(Flow::spec).collect();
    match specs.and_then(|s| board.set_flows(s)) {
        Ok(()) => Json(flows_json(&board)).into_response(),
        Err(e) => error(e),
    }
}

async fn put_slot_traffic(
    State(board): State<Arc<Board>>,
    Path(slot): Path<u32>,
    Json(rate): Json<Rate>,
) -> Response {
    match board.set_slot_rate(slot, rate.pps, rate.packet_bytes) {
        Ok(()) => Json(flows_json(&board)).into_response(),
        Err(e) => error(e),
    }
}

fn phase_name(p: i32) -> &'static str {
    match pb::SlotPhase::try_from(p) {
        Ok(pb::SlotPhase::Empty) => "Empty",
        Ok(pb::SlotPhase::Loading) => "Loading",
        Ok(pb::SlotPhase::Loaded) => "Loaded",
        Ok(pb::SlotPhase::Failed) => "Failed",
        _ => "Unspecified",
    }
}

async fn report(State(board): State<Arc<Board>>) -> Response {
    let info = board.info();
    let (states, (counters, offered)) =
        match (board.slot_states(&[]), board.counters_and_offered(&[])) {
            (Ok(s), Ok(c)) => (s, c),
            (Err(e), _) | (_, Err(e)) => return error(e),
        };
    let slots: Vec<_> = states
        .iter()
        .zip(&counters.slots)
        .map(|(s, c)| {
            json!({
                "slot": s.slot,
                "device_id": s.device_id,
                "phase": phase_name(s.phase),
                "program_digest": s.program_digest,
                "load_queued": s.load_queued,
                "last_load_seconds": s.last_load_duration.as_ref()
                    .map(|d| d.seconds as f64 + f64::from(d.nanos) / 1e9),
                "resources_used": s.resources_used,
                "isolation": s.isolation.as_ref().map(|i| json!({
                    "vlan": i.vlan_id,
                    "dst_mac": (i.dst_mac.len() == 6)
                        .then(|| format_mac(&i.dst_mac[..].try_into().expect("6 bytes"))),
                })),
                "port_map": s.port_map.iter()
                    .map(|m| json!({"physical": m.physical_port, "virtual": m.virtual_port}))
                    .collect::<Vec<_>>(),
                "failure": (!s.failure.is_empty()).then_some(&s.failure),
                "counters": {
                    "rx_packets": c.rx_packets, "rx_bytes": c.rx_bytes,
                    "tx_packets": c.tx_packets, "tx_bytes": c.tx_bytes,
                    "dropped_packets": c.dropped_packets, "dropped_bytes": c.dropped_bytes,
                },
            })
        })
        .collect();
    let resources: Vec<_> = info
        .resources
        .iter()
        .map(|r| {
            json!({
                "name": r.name, "capacity": r.capacity, "static_region": r.static_region,
                "used": r.used, "free": r.free,
            })
        })
        .collect();
    let port = info.config_port.unwrap_or_default();
    Json(json!({
        "board": info.board,
        "part": info.part,
        "configuring": info.state == pb::BoardState::Configuring as i32,
        "config_port": {"name": port.name, "bits_per_second": port.bits_per_second,
                        "nominal_bits_per_second": port.nominal_bits_per_second},
        "resources": resources,
        "slots": slots,
        "unmatched_packets": counters.unmatched_packets,
        "unmatched_bytes": counters.unmatched_bytes,
        "offered_packets": offered,
        "flows": flows_json(&board)["flows"],
    }))
    .into_response()
}
