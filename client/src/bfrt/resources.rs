//! Counters and registers on a BFRT device, in P4Runtime's terms (the
//! operator's `ResourcesSynced` path is the same on every target): a
//! table's direct counter is read from the `$COUNTER_SPEC_*` data of its
//! entries, a register cell is the `$REGISTER_INDEX` entry of the
//! register's table. The translation is
//! [`p4fleet_model::entries::bfrt::stateful`]; what does not translate
//! (meters, indirect counters, one entry's counter) is
//! [`Error::Unsupported`], so callers can say so.

use p4fleet_proto::bfrt::{self, ReadRequest, WriteRequest, update};
use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime::{self as p4rt, entity::Entity};

use super::{BfrtDevice, decode_update_errors};
use crate::Error;
use crate::p4runtime::EntityError;

impl BfrtDevice {
    /// The P4Info the program of `slot` was set (or attached) with: BFRT
    /// devices know only bfrt.json, so this is the client's copy.
    pub async fn running_p4info(&self, slot: u32) -> Result<Option<P4Info>, Error> {
        let device_id = self.target.device_id(slot);
        Ok(self
            .loaded_parts(device_id)
            .map(|(p4info, _)| (*p4info).clone()))
    }

    /// Every table entry matching `filter`, as the device sends them.
    async fn read_bfrt(
        &self,
        device_id: u64,
        p4_name: String,
        filter: bfrt::TableEntry,
    ) -> Result<Vec<bfrt::TableEntry>, Error> {
        let mut out = Vec::new();
        self.read_bfrt_each(device_id, p4_name, vec![filter], &mut |t| {
            out.push(t);
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// Every table entry matching one of `filters`, each handed to `f` as
    /// the device's answers arrive; the first error `f` returns ends it.
    pub(super) async fn read_bfrt_each(
        &self,
        device_id: u64,
        p4_name: String,
        filters: Vec<bfrt::TableEntry>,
        f: &mut (dyn FnMut(bfrt::TableEntry) -> Result<(), Error> + Send),
    ) -> Result<(), Error> {
        let req = ReadRequest {
            target: Some(Self::target_device(device_id)),
            client_id: self.client_id,
            entities: filters
                .into_iter()
                .map(|t| bfrt::Entity {
                    entity: Some(bfrt::entity::Entity::TableEntry(t)),
                })
                .collect(),
            p4_name,
        };
        let call = self.client.clone().read(req).await;
        crate::for_each_response(
            call,
            |s| self.rpc_error("Read", device_id, s),
            |resp| {
                for e in resp.entities {
                    if let Some(bfrt::entity::Entity::TableEntry(t)) = e.entity {
                        f(t)?;
                    }
                }
                Ok(())
            },
        )
        .await
    }

    /// Register cells and a whole table's direct counters, as P4Runtime
    /// entities (`RegisterEntry`, `DirectCounterEntry` with a table id and
    /// no match), in the order of `filters`.
    pub async fn read_entities(
        &self,
        slot: u32,
        filters: Vec<p4rt::Entity>,
    ) -> Result<Vec<p4rt::Entity>, Error> {
        let device_id = self.target.device_id(slot);
        let (p4_name, map) = self.bound(device_id).await?;
        let (_, registers) = self.loaded_parts(device_id).unwrap_or_default();
        let protocol = |reason: String| Error::Protocol { device_id, reason };
        let mut out = Vec::new();
        for f in filters {
            match f.entity {
                Some(Entity::RegisterEntry(r)) => {
                    let reg = registers.get(r.register_id).ok_or_else(|| {
                        protocol(format!(
                            "register id {} has no Register table in the bfrt.json",
                            r.register_id
                        ))
                    })?;
                    let filter = reg.filter(&r).map_err(|e| protocol(e.to_string()))?;
                    for te in self.read_bfrt(device_id, p4_name.clone(), filter).await? {
                        if let Some(cell) = reg.from_bfrt(&te) {
                            out.push(p4rt::Entity {
                                entity: Some(Entity::RegisterEntry(cell)),
                            });
                        }
                    }
                }
                Some(Entity::DirectCounterEntry(d)) => {
                    let te = d.table_entry.unwrap_or_default();
                    if !te.r#match.is_empty() || te.is_default_action {
                        return Err(Error::Unsupported(
                            "reading one entry's direct counter over BFRT",
                        ));
                    }
                    let tm = map.table(te.table_id).ok_or_else(|| {
                        protocol(format!("table id {} is not in the bfrt.json", te.table_id))
                    })?;
                    if !tm.has_direct_counter() {
                        return Err(protocol(format!(
                            "table {} has no $COUNTER_SPEC_* data in the bfrt.json",
                            tm.bfrt_name
                        )));
                    }
                    let filter = bfrt::TableEntry {
                        table_id: tm.bfrt_table_id,
                        ..Default::default()
                    };
                    for t in self.read_bfrt(device_id, p4_name.clone(), filter).await? {
                        if t.is_default_entry {
                            continue;
                        }
                        let data = tm.counter_data(&t);
                        let entry = tm.from_bfrt(&t).map_err(|e| protocol(e.to_string()))?;
                        out.push(p4rt::Entity {
                            entity: Some(Entity::DirectCounterEntry(p4rt::DirectCounterEntry {
                                table_entry: Some(entry),
                                data,
                            })),
                        });
                    }
                }
                _ => {
                    return Err(Error::Unsupported("meters and indirect counters over BFRT"));
                }
            }
        }
        Ok(out)
    }

    /// Register writes (MODIFY of a `RegisterEntry`), as one BFRT Write
    /// (CONTINUE_ON_ERROR). Per-update refusals at the updates' indexes:
    /// ones that do not translate (a meter, a register without a Register
    /// table, a value too wide) without reaching the device.
    pub async fn write_entities(
        &self,
        slot: u32,
        updates: Vec<p4rt::Update>,
    ) -> Result<Vec<EntityError>, Error> {
        if updates.is_empty() {
            return Ok(Vec::new());
        }
        let device_id = self.target.device_id(slot);
        let (p4_name, _) = self.bound(device_id).await?;
        let (_, registers) = self.loaded_parts(device_id).unwrap_or_default();
        let mut refused: Vec<EntityError> = Vec::new();
        // (index in `updates`, BFRT update)
        let mut sent: Vec<(usize, bfrt::Update)> = Vec::new();
        for (i, u) in updates.into_iter().enumerate() {
            let entity = u.entity.and_then(|e| e.entity);
            let translated = match entity {
                Some(Entity::RegisterEntry(r)) if u.r#type == p4rt::update::Type::Modify as i32 => {
                    match registers.get(r.register_id) {
                        Some(reg) => reg.write(&r).map_err(|e| e.to_string()),
                        None => Err(format!(
                            "register id {} has no Register table in the bfrt.json",
                            r.register_id
                        )),
                    }
                }
                Some(Entity::RegisterEntry(_)) => {
                    Err("registers are only modified over BFRT".to_string())
                }
                _ => {
                    refused.push((
                        i,
                        tonic::Code::Unimplemented as i32,
                        "only register cells are written over BFRT by p4fleet".into(),
                    ));
                    continue;
                }
            };
            match translated {
                Ok(te) => sent.push((
                    i,
                    bfrt::Update {
                        r#type: update::Type::Modify as i32,
                        entity: Some(bfrt::Entity {
                            entity: Some(bfrt::entity::Entity::TableEntry(te)),
                        }),
                    },
                )),
                Err(why) => refused.push((i, tonic::Code::InvalidArgument as i32, why)),
            }
        }
        if sent.is_empty() {
            return Ok(refused);
        }
        let n = sent.len();
        let (index, bfrt_updates): (Vec<usize>, Vec<bfrt::Update>) = sent.into_iter().unzip();
        let req = WriteRequest {
            target: Some(Self::target_device(device_id)),
            client_id: self.client_id,
            updates: bfrt_updates,
            atomicity: bfrt::write_request::Atomicity::ContinueOnError as i32,
            p4_name,
        };
        match self.client.clone().write(req).await {
            Ok(_) => {}
            Err(status) => match decode_update_errors(&status, n) {
                Some(errors) => refused.extend(
                    errors
                        .into_iter()
                        .map(|(j, code, message)| (index[j], code, message)),
                ),
                None => return Err(self.rpc_error("Write", device_id, status)),
            },
        }
        refused.sort_by_key(|e| e.0);
        Ok(refused)
    }
}
