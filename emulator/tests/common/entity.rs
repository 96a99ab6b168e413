//! Builders of the P4Runtime table entry parts the tests write.

use p4fleet_proto::p4runtime::{self as p4, field_match::FieldMatchType};

/// An exact match of field `id` on `v`.
pub fn exact(id: u32, v: &[u8]) -> p4::FieldMatch {
    p4::FieldMatch {
        field_id: id,
        field_match_type: Some(FieldMatchType::Exact(p4::field_match::Exact {
            value: v.to_vec(),
        })),
    }
}

/// A longest-prefix match of field 1 on the first `len` bits of `v`.
pub fn lpm(v: &[u8], len: i32) -> p4::FieldMatch {
    p4::FieldMatch {
        field_id: 1,
        field_match_type: Some(FieldMatchType::Lpm(p4::field_match::Lpm {
            value: v.to_vec(),
            prefix_len: len,
        })),
    }
}

/// Action `id` with `params` as params 1, 2, ….
pub fn action(id: u32, params: &[&[u8]]) -> Option<p4::TableAction> {
    Some(p4::TableAction {
        r#type: Some(p4::table_action::Type::Action(p4::Action {
            action_id: id,
            params: params
                .iter()
                .enumerate()
                .map(|(i, v)| p4::action::Param {
                    param_id: i as u32 + 1,
                    value: v.to_vec(),
                })
                .collect(),
        })),
    })
}
