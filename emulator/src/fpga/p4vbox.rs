//! P4VBox's three programs as the benchmark and tests load them: the
//! example P4Info of each and its resources from the paper's Table I
//! (NetFPGA-SUME occupation), the figures `examples/*/fpga.yaml` carry.

/// A program for a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    pub name: &'static str,
    /// P4Info, protobuf text format.
    pub p4info: &'static str,
    pub luts: u64,
    pub ffs: u64,
}

pub const L2SWITCH: Program = Program {
    name: "l2switch",
    p4info: include_str!("../../../examples/l2switch/p4info.txt"),
    luts: 28_096,
    ffs: 40_506,
};

pub const ROUTER: Program = Program {
    name: "router",
    p4info: include_str!("../../../examples/router/p4info.txt"),
    luts: 57_704,
    ffs: 84_149,
};

pub const FIREWALL: Program = Program {
    name: "firewall",
    p4info: include_str!("../../../examples/firewall/p4info.txt"),
    luts: 45_683,
    ffs: 74_344,
};

/// P4VBox's partial bitstream size: "Considering 2.8 Mb bitstreams".
pub const BITSTREAM_BITS: u64 = 2_800_000;

impl Program {
    /// The resources a LoadSlot header declares.
    pub fn resources(&self) -> std::collections::HashMap<String, u64> {
        [
            ("luts".to_string(), self.luts),
            ("ffs".to_string(), self.ffs),
        ]
        .into()
    }
}
