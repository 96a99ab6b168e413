//! Fixtures shared by the unit tests.

/// One table with exact, LPM and ternary fields (so priorities are part of
/// the key), a table-only action with a 4-bit param, and NoAction.
pub const P4INFO: &str = r#"
tables {
  preamble { id: 1 name: "t" }
  match_fields { id: 1 name: "a" bitwidth: 9 match_type: EXACT }
  match_fields { id: 2 name: "b" bitwidth: 32 match_type: LPM }
  match_fields { id: 3 name: "c" bitwidth: 8 match_type: TERNARY }
  action_refs { id: 10 scope: TABLE_ONLY }
  action_refs { id: 11 }
  size: 0
}
actions { preamble { id: 10 name: "set" } params { id: 1 name: "p" bitwidth: 4 } }
actions { preamble { id: 11 name: "NoAction" } }
"#;

/// The l2crypt example's artifacts, which the data plane's tests load.
pub mod l2crypt {
    pub const SPEC: &str = include_str!("../../examples/l2crypt/l2crypt.spec");
    pub const MAILBOX_SPEC: &str = include_str!("../../examples/l2crypt/l2crypt_mailbox.spec");
    pub const P4INFO: &str = include_str!("../../examples/l2crypt/p4info.txt");
}

/// P4Runtime action `id` with `values` as its params 1, 2, ….
pub fn action(id: u32, values: &[&[u8]]) -> p4fleet_proto::p4runtime::Action {
    use p4fleet_proto::p4runtime::action::Param;
    let params = values.iter().zip(1..).map(|(v, param_id)| Param {
        param_id,
        value: v.to_vec(),
    });
    p4fleet_proto::p4runtime::Action {
        action_id: id,
        params: params.collect(),
    }
}

/// A small deterministic generator (no dependency): xorshift64 from `seed`.
pub fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}
