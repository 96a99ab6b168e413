//! Helpers several emulator test files share.

use std::time::Duration;

use p4fleet_proto::p4runtime::{self as p4, p4_runtime_client::P4RuntimeClient};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

/// A P4Runtime election id.
pub fn eid(v: u64) -> Option<p4::Uint128> {
    Some(p4::Uint128 { high: 0, low: v })
}

/// An open StreamChannel that made this client primary (election 10) on
/// `device`; keep it to stay primary.
pub type Primary = (
    mpsc::Sender<p4::StreamMessageRequest>,
    tonic::Streaming<p4::StreamMessageResponse>,
);

/// Becomes primary (election 10) on `device`.
pub async fn arbitrate(c: &mut P4RuntimeClient<Channel>, device: u64) -> Primary {
    let (tx, rx) = mpsc::channel(4);
    tx.send(p4::StreamMessageRequest {
        update: Some(p4::stream_message_request::Update::Arbitration(
            p4::MasterArbitrationUpdate {
                device_id: device,
                election_id: eid(10),
                ..Default::default()
            },
        )),
    })
    .await
    .unwrap();
    let mut stream = c
        .stream_channel(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("arbitration reply in time")
        .expect("stream open")
        .unwrap();
    (tx, stream)
}
