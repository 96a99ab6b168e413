//! Registers (`RegisterEntry`): MODIFY sets one cell to a `bit<W>` value
//! (padding allowed, too-wide values refused like match fields), or
//! resets it to zero when `data` is absent; Read returns cells in canonical
//! form.

use p4fleet_proto::p4runtime::{self as p4, P4Data, entity::Entity, p4_data, update::Type};
use tonic::Code;

use crate::p4runtime::entry::significant;
use crate::p4runtime::pipeline::Pipeline;
use crate::p4runtime::resources::{ArrayInfo, modify_only, read_cells, written_cell};
use crate::update_error::{UpdateError, err};

/// The canonical value of a register write: `data` must be a bitstring
/// that fits `bitwidth`; absent data is zero.
pub fn register_value(
    data: &Option<P4Data>,
    bitwidth: u32,
    what: &str,
) -> Result<Vec<u8>, UpdateError> {
    match data.as_ref().and_then(|d| d.data.as_ref()) {
        None => Ok(vec![0]),
        Some(p4_data::Data::Bitstring(b)) => {
            let sig = significant(b, bitwidth, &|| what.to_string())?;
            Ok(if sig.is_empty() {
                vec![0]
            } else {
                sig.to_vec()
            })
        }
        Some(_) => Err(err(
            Code::InvalidArgument,
            format!("{what}: a register of bit<{bitwidth}> takes a bitstring"),
        )),
    }
}

impl Pipeline {
    pub(crate) fn write_register(
        &mut self,
        ty: Type,
        e: p4::RegisterEntry,
    ) -> Result<(), UpdateError> {
        modify_only(ty, "register entries")?;
        let registers = &self.schema.resources.registers;
        let (array, index) = written_cell(registers, e.register_id, &e.index, "register")?;
        let what = format!("register {}[{index}]", array.name);
        let value = register_value(&e.data, array.bitwidth, &what)?;
        let cells = self.resources.registers.entry(e.register_id).or_default();
        if value == [0] {
            cells.remove(&index);
        } else {
            cells.insert(index, value);
        }
        Ok(())
    }

    pub(crate) fn read_registers(
        &self,
        f: &p4::RegisterEntry,
        emit: &mut dyn FnMut(Entity),
    ) -> Result<(), UpdateError> {
        let cell = |array: &ArrayInfo, i: i64| {
            let cells = self.resources.registers.get(&array.id);
            let v = cells.and_then(|c| c.get(&i)).cloned().unwrap_or(vec![0]);
            Entity::RegisterEntry(p4::RegisterEntry {
                register_id: array.id,
                index: Some(p4::Index { index: i }),
                data: Some(P4Data {
                    data: Some(p4_data::Data::Bitstring(v)),
                }),
            })
        };
        let registers = &self.schema.resources.registers;
        read_cells(registers, f.register_id, &f.index, "register", cell, emit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(v: &[u8]) -> Option<P4Data> {
        Some(P4Data {
            data: Some(p4_data::Data::Bitstring(v.to_vec())),
        })
    }

    #[test]
    fn values_are_checked_against_the_width_and_made_canonical() {
        assert_eq!(register_value(&None, 12, "r"), Ok(vec![0]));
        assert_eq!(
            register_value(&bits(&[0, 0, 0x0f, 0xff]), 12, "r"),
            Ok(vec![0x0f, 0xff])
        );
        assert_eq!(register_value(&bits(&[0]), 12, "r"), Ok(vec![0]));
        let e = register_value(&bits(&[0x1f, 0xff]), 12, "register r[2]").unwrap_err();
        assert_eq!(e.code, Code::OutOfRange);
        assert!(e.message.starts_with("register r[2]"), "{}", e.message);
        let not_bits = Some(P4Data {
            data: Some(p4_data::Data::Bool(true)),
        });
        assert_eq!(
            register_value(&not_bits, 12, "r").unwrap_err().code,
            Code::InvalidArgument
        );
    }
}
