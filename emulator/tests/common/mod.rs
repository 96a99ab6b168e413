//! Helpers several emulator test files share: a P4Runtime client's
//! arbitration, pipeline, Write and Read on election 10, and the side
//! channel's HTTP.

// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

pub mod binary;
pub mod entity;
pub mod firewall;
pub mod l2crypt;
pub mod rbfrt;
pub mod test_info;

use std::time::Duration;

use p4fleet_emulator::RunningEmulator;
use p4fleet_proto::google::rpc;
use p4fleet_proto::p4runtime::{
    self as p4, entity::Entity, p4_runtime_client::P4RuntimeClient, update::Type,
};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;

/// A channel to `emu`'s gRPC port.
pub async fn channel(emu: &RunningEmulator) -> Channel {
    tonic::transport::Endpoint::from_shared(emu.p4runtime_url())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A P4Runtime election id.
pub fn eid(v: u64) -> Option<p4::Uint128> {
    Some(p4::Uint128 { high: 0, low: v })
}

/// The MasterArbitrationUpdate of a client with `election` on `device`.
pub fn arbitration(device: u64, election: u64) -> p4::StreamMessageRequest {
    p4::StreamMessageRequest {
        update: Some(p4::stream_message_request::Update::Arbitration(
            p4::MasterArbitrationUpdate {
                device_id: device,
                election_id: eid(election),
                ..Default::default()
            },
        )),
    }
}

/// An open StreamChannel that made this client primary on a device; keep
/// it to stay primary.
pub type Primary = (
    mpsc::Sender<p4::StreamMessageRequest>,
    tonic::Streaming<p4::StreamMessageResponse>,
);

/// Becomes primary (election 10) on `device`.
pub async fn arbitrate(c: &mut P4RuntimeClient<Channel>, device: u64) -> Primary {
    arbitrate_as(c, device, 10).await
}

/// Becomes primary with `election` on `device`: the arbitration answer
/// must say OK.
pub async fn arbitrate_as(c: &mut P4RuntimeClient<Channel>, device: u64, election: u64) -> Primary {
    let (tx, rx) = mpsc::channel(4);
    tx.send(arbitration(device, election)).await.unwrap();
    let mut stream = c
        .stream_channel(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("arbitration reply in time")
        .expect("stream open")
        .unwrap();
    let Some(p4::stream_message_response::Update::Arbitration(a)) = first.update else {
        panic!("arbitration answer expected: {first:?}");
    };
    assert_eq!(a.status.unwrap().code, Code::Ok as i32, "primary");
    (tx, stream)
}

/// Sets `config` on `device` (VERIFY_AND_COMMIT) as the primary of
/// election 10.
pub async fn set_pipeline(
    c: &mut P4RuntimeClient<Channel>,
    device: u64,
    config: p4::ForwardingPipelineConfig,
) -> Result<(), tonic::Status> {
    c.set_forwarding_pipeline_config(p4::SetForwardingPipelineConfigRequest {
        device_id: device,
        election_id: eid(10),
        action: p4::set_forwarding_pipeline_config_request::Action::VerifyAndCommit as i32,
        config: Some(config),
        ..Default::default()
    })
    .await
    .map(|_| ())
}

/// Writes `updates` to `device` as the primary of election 10.
pub async fn write(
    c: &mut P4RuntimeClient<Channel>,
    device: u64,
    updates: Vec<(Type, Entity)>,
) -> Result<(), tonic::Status> {
    c.write(p4::WriteRequest {
        device_id: device,
        election_id: eid(10),
        updates: updates
            .into_iter()
            .map(|(ty, e)| p4::Update {
                r#type: ty as i32,
                entity: Some(p4::Entity { entity: Some(e) }),
            })
            .collect(),
        ..Default::default()
    })
    .await
    .map(|_| ())
}

/// Every entity on `device` matching `filter`.
pub async fn read(
    c: &mut P4RuntimeClient<Channel>,
    device: u64,
    filter: Entity,
) -> Result<Vec<Entity>, tonic::Status> {
    let mut stream = c
        .read(p4::ReadRequest {
            device_id: device,
            entities: vec![p4::Entity {
                entity: Some(filter),
            }],
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(r) = stream.message().await? {
        let kinds = r.entities.into_iter().map(|e| e.entity);
        out.extend(kinds.map(|e| e.expect("an entity of some kind")));
    }
    Ok(out)
}

/// Per-update (code, message) in a Status's `grpc-status-details-bin`.
pub fn error_details(status: &tonic::Status) -> Vec<(Code, String)> {
    rpc::Status::decode(status.details())
        .unwrap()
        .details
        .iter()
        .map(|any| {
            assert_eq!(any.type_url, "type.googleapis.com/p4.v1.Error");
            let e = p4::Error::decode(any.value.as_slice()).unwrap();
            (Code::from_i32(e.canonical_code), e.message)
        })
        .collect()
}

/// Per-update (code, message) from a failed Write.
pub fn update_errors(status: &tonic::Status) -> Vec<(Code, String)> {
    assert_eq!(status.code(), Code::Unknown, "{status:?}");
    error_details(status)
}

/// Minimal HTTP/1.1 client for the side channel, its bodies of one
/// content type.
pub struct SideChannel {
    pub addr: std::net::SocketAddr,
    pub content_type: &'static str,
}

impl SideChannel {
    /// `method path` with `body`: (status, JSON body).
    pub async fn call(&self, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n{body}",
            self.content_type,
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.unwrap();
        let code: u16 = buf[9..12].parse().unwrap();
        let start = buf.find("\r\n\r\n").unwrap() + 4;
        (code, serde_json::from_str(&buf[start..]).unwrap())
    }
}
