//! The read-back of a sync, compared as bytes first.
//!
//! A device that keeps entries as written (P4Runtime, whose entries carry
//! the set's tag in their metadata) answers a Read with the same bytes the
//! set's entries encode to. When the answer holds as many entities as the
//! set desires and their [`EntitySum`] equals the desired entries' (each
//! encoded once per assembly, [`Desired::wire_sum`]), the device holds
//! exactly the desired entries with the set's tag: the plan is empty, and
//! nothing is decoded. Any difference (missing, extra, changed entries, or
//! a device that encodes equal entries differently) decodes the whole
//! answer and plans as before, with the same result. BFRT entries are
//! translated by the client, so BFRT always takes that path.

use p4fleet_client::{Device, EntitySum, RawEntities};
use p4fleet_model::entries::wire::p4rt_entity_into;
use p4fleet_model::entries::{Entry, TableSchema, WriteOp};
use p4fleet_model::sync::{self, DeviceEntry};
use p4fleet_proto::p4runtime::TableEntry;

use super::dereference::Target;
use super::desired::Desired;

/// What a read-back found.
#[derive(Debug)]
pub enum ReadBack {
    /// Exactly the desired entries, tagged the set's.
    InSync,
    /// The table's entries, decoded, with their ownership tags.
    Entries(Vec<DeviceEntry>),
}

impl Desired {
    /// The [`EntitySum`] of the entries as P4Runtime entities with `tag`'s
    /// metadata, taken once per assembly.
    pub fn wire_sum(&self, tag: u64) -> EntitySum {
        if let Some((t, s)) = self.wire.get()
            && *t == tag
        {
            return *s;
        }
        let s = wire_sum(self.iter(), tag);
        // A set has one tag; another tag (never) is simply not kept.
        let _ = self.wire.set((tag, s));
        s
    }
}

/// The [`EntitySum`] of `entries` written with `tag`'s metadata.
pub fn wire_sum<'a>(entries: impl Iterator<Item = &'a Entry>, tag: u64) -> EntitySum {
    let metadata = sync::tag_metadata(tag);
    let mut buf = Vec::new();
    let mut s = EntitySum::default();
    for e in entries {
        p4rt_entity_into(&WriteOp::insert(e).with_metadata(&metadata), &mut buf);
        s.add(&buf);
    }
    s
}

/// Reads target `t` back from `dev` and compares it with `desired`.
pub async fn read(
    dev: &Device,
    t: &Target,
    desired: &Desired,
    tag: u64,
) -> Result<ReadBack, p4fleet_client::Error> {
    match dev.read_table_raw(t.slot, t.schema.id).await? {
        Some(raw) => {
            let device_id = dev.target().device_id(t.slot);
            compare(&raw, &t.schema, desired, tag, device_id)
        }
        None => Ok(ReadBack::Entries(read_back(dev, t).await?)),
    }
}

/// [`ReadBack::InSync`] when `raw` holds exactly the encodings of
/// `desired` with `tag`, else the entries decoded.
pub fn compare(
    raw: &RawEntities,
    schema: &TableSchema,
    desired: &Desired,
    tag: u64,
    device_id: u64,
) -> Result<ReadBack, p4fleet_client::Error> {
    if raw.len() == desired.len() && raw.sum() == desired.wire_sum(tag) {
        return Ok(ReadBack::InSync);
    }
    let mut out = Vec::with_capacity(raw.len());
    raw.each_table_entry(device_id, |te| convert_into(schema, &te, &mut out))?;
    Ok(ReadBack::Entries(out))
}

/// Reads target `t`'s table back and converts it, with ownership tags,
/// each entry as its answer arrives: the messages of a large table
/// (several times the converted size) are never all held.
pub async fn read_back(
    dev: &Device,
    t: &Target,
) -> Result<Vec<DeviceEntry>, p4fleet_client::Error> {
    let mut out = Vec::new();
    dev.read_table_each(t.slot, t.schema.id, &mut |te| {
        convert_into(&t.schema, &te, &mut out)
    })
    .await?;
    out.shrink_to_fit();
    Ok(out)
}

/// Table entries read back, converted with their ownership tags.
pub fn convert(schema: &TableSchema, raw: &[TableEntry]) -> Vec<DeviceEntry> {
    let mut out = Vec::with_capacity(raw.len());
    for te in raw {
        convert_into(schema, te, &mut out);
    }
    out
}

/// One entry converted onto `out`. Entries the schema cannot read are
/// logged and left out (a sync neither counts nor touches them).
fn convert_into(schema: &TableSchema, te: &TableEntry, out: &mut Vec<DeviceEntry>) {
    match Entry::from_proto(schema, te) {
        Ok(entry) => out.push(DeviceEntry {
            entry,
            tag: sync::tag_of(&te.metadata),
        }),
        Err(e) => {
            tracing::warn!(table = %schema.name, error = %e, "unreadable entry on device")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::entry_set::desired::tests::{firewall, set, texts};
    use crate::controllers::entry_set::desired::{Desired, parse};
    use p4fleet_model::sync::{Ownership, Plan};
    use p4fleet_proto::p4runtime::{Entity, ReadResponse, entity};
    use prost::Message;
    use prost::bytes::Bytes;

    const TAG: u64 = 0x5e7;

    fn desired(lines: &str) -> Desired {
        let text = format!("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n{lines}");
        parse(
            &set(vec![]).spec,
            &firewall(),
            &texts(&[("fw", "e", &text)]),
        )
    }

    /// A device's answer: prost-encoded, as the emulator and real targets
    /// build it, from table entries.
    fn answer(entries: Vec<TableEntry>) -> RawEntities {
        let m = ReadResponse {
            entities: entries
                .into_iter()
                .map(|t| Entity {
                    entity: Some(entity::Entity::TableEntry(t)),
                })
                .collect(),
        };
        RawEntities::parse(vec![Bytes::from(m.encode_to_vec())]).unwrap()
    }

    fn proto(e: &Entry, tag: u64) -> TableEntry {
        let mut t = e.to_proto();
        t.metadata = sync::tag_metadata(tag);
        t
    }

    /// The plan the slow path makes from the decoded answer.
    fn slow(raw: &RawEntities, d: &Desired) -> Plan {
        let on_device = convert(&d.schema, &raw.table_entries().unwrap());
        sync::plan(&d.refs(), &on_device, Ownership::Exclusive, TAG)
    }

    /// The plan the byte compare leads to.
    fn fast(raw: &RawEntities, d: &Desired) -> (bool, Plan) {
        match compare(raw, &d.schema, d, TAG, 1).unwrap() {
            ReadBack::InSync => (
                true,
                Plan {
                    unchanged: d.len(),
                    ..Default::default()
                },
            ),
            ReadBack::Entries(on_device) => (
                false,
                sync::plan(&d.refs(), &on_device, Ownership::Exclusive, TAG),
            ),
        }
    }

    #[test]
    fn the_byte_compare_plans_what_decoding_plans() {
        let d = desired(
            "#! action allow\n10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.3 2\n#! action drop\n10.0.0.1 10.0.0.4\n",
        );
        let ours: Vec<TableEntry> = d.iter().map(|e| proto(e, TAG)).collect();
        let other = desired("#! action drop\n10.0.0.9 10.0.0.9\n10.0.0.1 10.0.0.3\n");
        let other: Vec<TableEntry> = other.iter().map(|e| proto(e, TAG)).collect();
        let mut reordered = ours.clone();
        reordered.rotate_left(1);
        let mut foreign_tag = ours.clone();
        foreign_tag[0].metadata = sync::tag_metadata(9);
        let cases: Vec<(&str, Vec<TableEntry>, bool)> = vec![
            ("matching", ours.clone(), true),
            ("matching, another order", reordered, true),
            ("missing", ours[1..].to_vec(), false),
            (
                "extra",
                [ours.clone(), vec![other[0].clone()]].concat(),
                false,
            ),
            (
                "changed",
                vec![ours[0].clone(), ours[1].clone(), other[1].clone()],
                false,
            ),
            ("another tag", foreign_tag, false),
            ("empty", Vec::new(), false),
        ];
        for (name, device, in_sync) in cases {
            let raw = answer(device);
            let (fast_in_sync, plan) = fast(&raw, &d);
            assert_eq!(fast_in_sync, in_sync, "{name}");
            assert_eq!(plan, slow(&raw, &d), "{name}");
        }
    }

    #[test]
    fn a_differently_encoded_equal_entry_is_decoded_and_found_equal() {
        let d = desired("#! action allow\n10.0.0.1 10.0.0.2 1\n");
        let te = proto(d.entry(0), TAG);
        // The same TableEntry with its fields in reverse order (protobuf
        // allows any order; prost writes them ascending).
        let canonical = te.encode_to_vec();
        let reversed = reversed_fields(&te);
        assert_ne!(reversed, canonical);
        assert_eq!(TableEntry::decode(&reversed[..]).unwrap(), te);
        let mut entity = vec![0x12];
        prost::encoding::encode_varint(reversed.len() as u64, &mut entity);
        entity.extend_from_slice(&reversed);
        let mut response = vec![0x0a];
        prost::encoding::encode_varint(entity.len() as u64, &mut response);
        response.extend_from_slice(&entity);
        let raw = RawEntities::parse(vec![Bytes::from(response)]).unwrap();
        let (in_sync, plan) = fast(&raw, &d);
        assert!(!in_sync, "not the canonical bytes: decoded");
        assert_eq!(plan, slow(&raw, &d));
        assert_eq!(plan.unchanged, 1);
        assert_eq!(plan.writes(), 0);
    }

    /// `te` encoded with its top-level fields in descending order.
    fn reversed_fields(te: &TableEntry) -> Vec<u8> {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let mut one = |t: TableEntry| parts.push(t.encode_to_vec());
        one(TableEntry {
            table_id: te.table_id,
            ..Default::default()
        });
        // The matches stay in one run: their order is the field's.
        one(TableEntry {
            r#match: te.r#match.clone(),
            ..Default::default()
        });
        one(TableEntry {
            action: te.action.clone(),
            ..Default::default()
        });
        one(TableEntry {
            priority: te.priority,
            ..Default::default()
        });
        one(TableEntry {
            metadata: te.metadata.clone(),
            ..Default::default()
        });
        parts.reverse();
        parts.concat()
    }

    #[test]
    fn the_desired_sum_is_the_sum_of_the_entries_as_written() {
        let d = desired("#! action allow\n10.0.0.1 10.0.0.2 1\n10.0.0.1 10.0.0.3 2\n");
        let raw = answer(d.iter().map(|e| proto(e, TAG)).collect());
        assert_eq!(d.wire_sum(TAG), raw.sum());
        // Kept, and another tag is another sum.
        assert_eq!(d.wire_sum(TAG), raw.sum());
        assert_ne!(d.wire_sum(TAG + 1), raw.sum());
    }
}
