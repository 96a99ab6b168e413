//! tests/data/test.p4info.txt, the firewall/route/acl P4Info the bmv2
//! tests load, and the ids the tests write with.

use p4fleet_proto::p4info;

pub const FIREWALL: u32 = 33554433;
pub const ROUTE: u32 = 33554434;
pub const ACL: u32 = 33554435;
pub const ALLOW: u32 = 16777217;
pub const DROP: u32 = 16777218;

pub fn test_p4info() -> p4info::P4Info {
    p4info::parse_text(include_str!("../data/test.p4info.txt")).unwrap()
}
