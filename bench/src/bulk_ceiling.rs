//! The emulator's own ceiling for p4fleet's bulk write (docs/bulk.md), like
//! [`crate::ceiling`] for the standard Write: pre-encoded
//! `p4fleet.bulk.v1.BulkWrite/Write` frames sent straight into the
//! in-process service (frame decode + column slicing + validation + table
//! insert), no client and no network.

use std::time::Instant;

use anyhow::{anyhow, bail};
use bytes::{BufMut, Bytes, BytesMut};
use p4fleet_emulator::{Emulator, EmulatorConfig};
use p4fleet_model::bulk::{BulkSchema, encode};
use p4fleet_model::entries::Entry;
use p4fleet_proto::bulk::BulkWriteResponse;
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{Uint128, update::Type};
use prost::Message;

use crate::paths::P4fleetP4rt;
use crate::stats::Sample;
use crate::workload;

fn frames(schema: &BulkSchema, entries: &[Entry], batch: usize) -> anyhow::Result<Vec<Bytes>> {
    let table = entries.first().map(|e| e.key.table_id).unwrap_or(0);
    entries
        .chunks(batch)
        .map(|c| {
            let ops = workload::insert_ops(c);
            let mut req = encode(schema, table, Type::Insert, &ops)
                .ok_or_else(|| anyhow!("entries not representable in bulk"))?;
            req.device_id = 1;
            // The election id P4fleetP4rt's pool uses.
            req.election_id = Some(Uint128 { high: 0, low: 10 });
            let len = req.encoded_len();
            let mut b = BytesMut::with_capacity(5 + len);
            b.put_u8(0);
            b.put_u32(len as u32);
            req.encode(&mut b)?;
            Ok(b.freeze())
        })
        .collect()
}

/// An in-process emulator with primary taken and pipeline set (through the
/// client); bulk writes go straight into its BulkWrite service.
pub struct BulkCeiling {
    running: p4fleet_emulator::RunningEmulator,
    client: P4fleetP4rt,
    schema: BulkSchema,
}

impl BulkCeiling {
    pub async fn start(info: P4Info) -> anyhow::Result<BulkCeiling> {
        let running = Emulator::start(EmulatorConfig::default()).await?;
        let schema = BulkSchema::from_p4info(&info);
        let client = P4fleetP4rt::connect(&running.p4runtime_addr().to_string(), 1, info).await?;
        Ok(BulkCeiling {
            running,
            client,
            schema,
        })
    }

    pub async fn run(&mut self, entries: &[Entry], batch: usize) -> anyhow::Result<Sample> {
        self.client.clear().await?;
        let frames = frames(&self.schema, entries, batch)?;
        let mut svc = self.running.emulator().bulk_service();
        let mut latency = 0.0;
        let requests = frames.len();
        let start = Instant::now();
        for f in frames {
            let t = Instant::now();
            let body =
                crate::ceiling::call(&mut svc, "/p4fleet.bulk.v1.BulkWrite/Write", f).await?;
            let answer = BulkWriteResponse::decode(body)?;
            if let Some(e) = answer.errors.first() {
                bail!("{} rows failed, first: {}", answer.errors.len(), e.message);
            }
            latency += t.elapsed().as_secs_f64();
        }
        crate::ceiling::held_sample(&self.running, entries.len(), requests, start, latency)
    }

    pub async fn shutdown(self) {
        drop(self.client);
        let _ = self.running.shutdown().await;
    }
}
