//! Reads of an emulated device over P4Runtime, as the entity tests check
//! what the operator wrote.

use std::net::SocketAddr;

use p4fleet_model::entries::{Entry, TableSchema};
use p4fleet_model::sync::{self, DeviceEntry};
use p4fleet_proto::p4runtime::{self as p4, entity::Entity, p4_runtime_client::P4RuntimeClient};

/// Table entries read from a device as a sync plans them: each entry of
/// `schema`'s table with the ownership tag its metadata holds.
pub fn tagged(schema: &TableSchema, read: &[p4::TableEntry]) -> Vec<DeviceEntry> {
    read.iter()
        .map(|t| DeviceEntry {
            entry: Entry::from_proto(schema, t).unwrap(),
            tag: sync::tag_of(&t.metadata),
        })
        .collect()
}

/// Every entity matching `filter` on `device` of the P4Runtime server at
/// `p4runtime`; panics on any RPC error.
pub async fn read_entities(p4runtime: SocketAddr, device: u64, filter: Entity) -> Vec<Entity> {
    try_read_entities(p4runtime, device, filter).await.unwrap()
}

/// [`read_entities`], an RPC error (as text) returned, for a poll to retry.
pub async fn try_read_entities(
    p4runtime: SocketAddr,
    device: u64,
    filter: Entity,
) -> Result<Vec<Entity>, String> {
    let mut c = P4RuntimeClient::connect(format!("http://{p4runtime}"))
        .await
        .map_err(|e| e.to_string())?;
    let mut stream = c
        .read(p4::ReadRequest {
            device_id: device,
            entities: vec![p4::Entity {
                entity: Some(filter),
            }],
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    let mut out = Vec::new();
    while let Some(r) = stream.message().await.map_err(|e| e.to_string())? {
        out.extend(r.entities.into_iter().filter_map(|e| e.entity));
    }
    Ok(out)
}
