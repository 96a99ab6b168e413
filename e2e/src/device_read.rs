//! Reads of an emulated device over P4Runtime, as the entity tests check
//! what the operator wrote.

use std::net::SocketAddr;

use p4fleet_proto::p4runtime::{self as p4, entity::Entity, p4_runtime_client::P4RuntimeClient};

/// Every entity matching `filter` on `device` of the P4Runtime server at
/// `p4runtime`; panics on any RPC error.
pub async fn read_entities(p4runtime: SocketAddr, device: u64, filter: Entity) -> Vec<Entity> {
    let mut c = P4RuntimeClient::connect(format!("http://{p4runtime}"))
        .await
        .unwrap();
    let mut stream = c
        .read(p4::ReadRequest {
            device_id: device,
            entities: vec![p4::Entity {
                entity: Some(filter),
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(r) = stream.message().await.unwrap() {
        out.extend(r.entities.into_iter().filter_map(|e| e.entity));
    }
    out
}
