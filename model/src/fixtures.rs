//! The example firewall's table (examples/firewall), for the tests of
//! every crate: one fixture instead of one per test file.

use crate::entries::TableSchema;

/// examples/firewall's P4Info, as text.
pub const FIREWALL_P4INFO: &str = include_str!("../../examples/firewall/p4info.txt");

/// The firewall table (`MyIngress.firewall`: exact src and dst IPv4,
/// actions `allow(port)` and `drop`).
pub fn firewall() -> TableSchema {
    let info =
        p4fleet_proto::p4info::parse_text(FIREWALL_P4INFO).expect("examples/firewall P4Info");
    TableSchema::from_p4info(&info, "firewall").expect("the firewall table")
}
