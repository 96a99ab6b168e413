//! A table's default entry in BFRT form (`is_default_entry`): the
//! translation of a P4Runtime default action through [`BfrtTableMap`], with
//! BFRT's full-width data values.

use p4fleet_proto::bfrt;

use super::{BfrtTableMap, conv};
use crate::entries::ActionCall;
use crate::entries::error::EntryError;

impl BfrtTableMap {
    /// The BFRT `TableEntry` that sets this table's default entry to
    /// `call` (sent as a MODIFY), or with None the one that resets it (sent
    /// as a RESET, no data).
    pub fn default_entry(&self, call: Option<&ActionCall>) -> Result<bfrt::TableEntry, EntryError> {
        let mut te = bfrt::TableEntry {
            table_id: self.bfrt_table_id,
            is_default_entry: true,
            ..Default::default()
        };
        let Some(call) = call else {
            return Ok(te);
        };
        let am = self
            .actions
            .iter()
            .find(|a| a.p4_id == call.action_id)
            .ok_or_else(|| {
                conv(format!(
                    "action id {} is not in the bfrt.json",
                    call.action_id
                ))
            })?;
        let mut fields = Vec::with_capacity(call.params.len());
        for p in &call.params {
            let &(_, data_id, width) = am
                .params
                .iter()
                .find(|(pid, _, _)| *pid == p.param_id)
                .ok_or_else(|| conv(format!("param id {} is not in the bfrt.json", p.param_id)))?;
            fields.push(bfrt::DataField {
                field_id: data_id,
                value: Some(bfrt::data_field::Value::Stream(full_width(
                    p.value.as_slice(),
                    width,
                )?)),
            });
        }
        te.data = Some(bfrt::TableData {
            action_id: am.bfrt_id,
            fields,
        });
        Ok(te)
    }
}

/// `v` left-padded with zeros to `ceil(width / 8)` bytes.
fn full_width(v: &[u8], width: u32) -> Result<Vec<u8>, EntryError> {
    let first = v.iter().position(|b| *b != 0).unwrap_or(v.len());
    let sig = &v[first..];
    let nb = width.div_ceil(8) as usize;
    if sig.len() > nb {
        return Err(conv(format!(
            "value of {} bytes does not fit in {width} bits",
            sig.len()
        )));
    }
    let mut out = vec![0; nb - sig.len()];
    out.extend_from_slice(sig);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entries::bfrt::BfrtInfo;
    use crate::entries::{ActionParam, ByteStr, TableSchema};

    const P4INFO: &str = include_str!("../../../../examples/firewall/p4info.txt");
    const BFRT: &str = include_str!("../../../../examples/firewall/bfrt.json");

    #[test]
    fn the_default_entry_round_trips_through_the_bfrt_form() {
        let info = p4fleet_proto::p4info::parse_text(P4INFO).unwrap();
        let schema = TableSchema::from_p4info(&info, "firewall").unwrap();
        let bfrt_info = BfrtInfo::parse(BFRT.as_bytes()).unwrap();
        let t = bfrt_info.table(&schema.name).unwrap();
        let map = BfrtTableMap::new(&schema, t).unwrap();
        let allow = &schema.actions[schema.action_index("allow").unwrap()];
        let call = ActionCall {
            action_id: allow.id,
            params: Box::new([ActionParam {
                param_id: 1,
                value: ByteStr::canonical(&[3]),
            }]),
        };
        let te = map.default_entry(Some(&call)).unwrap();
        assert!(te.is_default_entry);
        // 9 bits: two bytes on the wire.
        let data = te.data.as_ref().unwrap();
        assert_eq!(
            data.fields[0].value,
            Some(bfrt::data_field::Value::Stream(vec![0, 3]))
        );
        let back = map.from_bfrt(&te).unwrap();
        assert!(back.is_default_action);
        assert_eq!(back.action, Some(call.to_proto()));
        // Reset: no data.
        assert!(map.default_entry(None).unwrap().data.is_none());
        let unknown = ActionCall {
            action_id: 1,
            params: Box::default(),
        };
        assert!(map.default_entry(Some(&unknown)).is_err());
    }
}
