//! The firewall example's entries in p4fleet's model, as the BFRT driver
//! tests write them.

use p4fleet_model::entries::{
    ActionCall, ActionParam, ByteStr, Entry, EntryKey, FieldMatch, MatchValue,
};

/// The firewall table's P4Info id.
pub const TABLE: u32 = 39123287;

/// Firewall entry `i` (src 10.0.0.0 + i, dst 192.168.0.1) -> allow(port);
/// a port over 9 bits is the device's to refuse.
pub fn entry(i: u32, port: u32) -> Entry {
    let v = |x: u32| ByteStr::canonical(&x.to_be_bytes());
    let exact = |field_id, value| FieldMatch {
        field_id,
        value: MatchValue::Exact(value),
    };
    Entry {
        key: EntryKey {
            table_id: TABLE,
            matches: Box::new([exact(1, v(0x0a00_0000 + i)), exact(2, v(0xc0a8_0001))]),
            priority: 0,
        },
        action: ActionCall {
            action_id: 17724422,
            params: Box::new([ActionParam {
                param_id: 1,
                value: v(port),
            }]),
        },
        idle_timeout_ns: 0,
    }
}
