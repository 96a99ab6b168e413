//! Flow isolation as P4VBox does it: a switch identifier (Sid) of VLAN id
//! plus optional destination MAC that the input interface steers frames
//! by, unique per board; slots of one VLAN may not share physical ports;
//! and each slot's physical-to-virtual port map. Pure.

use std::collections::BTreeSet;
use std::fmt;

use p4fleet_proto::fpga as pb;

use super::error::SlotError;
use super::spec::BoardSpec;

/// A switch identifier: VLAN id and, optionally, destination MAC (none:
/// any destination in the VLAN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sid {
    pub vlan: u16,
    pub dst_mac: Option<[u8; 6]>,
}

impl fmt::Display for Sid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dst_mac {
            Some(m) => write!(f, "(VLAN {}, dst {})", self.vlan, format_mac(&m)),
            None => write!(f, "(VLAN {}, any dst)", self.vlan),
        }
    }
}

pub fn format_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `aa:bb:cc:dd:ee:ff` (or `-` separated).
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split([':', '-']);
    for b in &mut out {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

impl Sid {
    /// From the wire, checking the VLAN id (1..=4094) and MAC length.
    pub(crate) fn from_proto(slot: u32, iso: &pb::Isolation) -> Result<Sid, SlotError> {
        let bad = |msg: String| SlotError::BadIsolation { slot, msg };
        let vlan = u16::try_from(iso.vlan_id)
            .ok()
            .filter(|v| (1..=4094).contains(v))
            .ok_or_else(|| bad(format!("vlan_id {} is not in 1..4094", iso.vlan_id)))?;
        let dst_mac = match iso.dst_mac.len() {
            0 => None,
            6 => Some(iso.dst_mac[..].try_into().expect("6 bytes")),
            n => return Err(bad(format!("dst_mac has {n} bytes, not 6 (or 0 for any)"))),
        };
        Ok(Sid { vlan, dst_mac })
    }

    pub fn to_proto(self) -> pb::Isolation {
        pb::Isolation {
            vlan_id: self.vlan.into(),
            dst_mac: self.dst_mac.map(|m| m.to_vec()).unwrap_or_default(),
        }
    }
}

/// A slot's physical-to-virtual port map; empty means every physical port
/// of the board, as itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortMap(Vec<(u32, u32)>);

impl PortMap {
    /// From the wire: physical ports must exist on the board, each mapped
    /// once, and no two onto the same virtual port (the output interface
    /// could not tell where a virtual port's frames go).
    pub(crate) fn from_proto(
        slot: u32,
        mappings: &[pb::PortMapping],
        board: &BoardSpec,
    ) -> Result<PortMap, SlotError> {
        let bad = |msg: String| SlotError::BadPortMap { slot, msg };
        let mut phys = BTreeSet::new();
        let mut virt = BTreeSet::new();
        let mut out = Vec::with_capacity(mappings.len());
        for m in mappings {
            if board.port(m.physical_port).is_none() {
                return Err(SlotError::UnknownPort {
                    slot,
                    port: m.physical_port,
                    known: known_ports(board),
                });
            }
            if !phys.insert(m.physical_port) {
                return Err(bad(format!(
                    "physical port {} is mapped twice",
                    m.physical_port
                )));
            }
            if !virt.insert(m.virtual_port) {
                return Err(bad(format!(
                    "virtual port {} is the target of two physical ports",
                    m.virtual_port
                )));
            }
            out.push((m.physical_port, m.virtual_port));
        }
        out.sort_unstable();
        Ok(PortMap(out))
    }

    pub fn to_proto(&self) -> Vec<pb::PortMapping> {
        self.0
            .iter()
            .map(|&(p, v)| pb::PortMapping {
                physical_port: p,
                virtual_port: v,
            })
            .collect()
    }

    /// Physical ports the slot uses.
    pub fn physical(&self, board: &BoardSpec) -> BTreeSet<u32> {
        if self.0.is_empty() {
            board.ports.iter().map(|p| p.id).collect()
        } else {
            self.0.iter().map(|&(p, _)| p).collect()
        }
    }

    /// The virtual port frames arriving on `physical` show up on, if the
    /// slot uses that port.
    pub fn virtual_of(&self, physical: u32, board: &BoardSpec) -> Option<u32> {
        if self.0.is_empty() {
            return board.port(physical).map(|p| p.id);
        }
        self.0
            .iter()
            .find(|&&(p, _)| p == physical)
            .map(|&(_, v)| v)
    }

    /// The physical port a frame for this slot enters on when nobody says:
    /// the first one it uses.
    pub fn first_physical(&self, board: &BoardSpec) -> Option<u32> {
        self.physical(board).into_iter().next()
    }
}

fn known_ports(board: &BoardSpec) -> String {
    board
        .ports
        .iter()
        .map(|p| format!("{} ({})", p.id, p.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What isolation needs to know of one slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotIsolation<'a> {
    pub slot: u32,
    pub sid: Option<Sid>,
    pub ports: &'a PortMap,
}

/// Checks that `slot` may have `sid` with `ports` next to `others` (every
/// other slot): the Sid is not another slot's, and no other slot of the
/// same VLAN uses any of the same physical ports.
pub(crate) fn check(
    slot: u32,
    sid: Sid,
    ports: &PortMap,
    others: &[SlotIsolation<'_>],
    board: &BoardSpec,
) -> Result<(), SlotError> {
    let mine = ports.physical(board);
    for o in others.iter().filter(|o| o.slot != slot) {
        let Some(theirs) = o.sid else { continue };
        if theirs == sid {
            return Err(SlotError::SidInUse {
                slot,
                other: o.slot,
                sid: sid.to_string(),
            });
        }
        if theirs.vlan == sid.vlan {
            let shared: Vec<u32> = mine
                .intersection(&o.ports.physical(board))
                .copied()
                .collect();
            if !shared.is_empty() {
                return Err(SlotError::VlanPortShared {
                    slot,
                    other: o.slot,
                    vlan: sid.vlan,
                    ports: shared,
                });
            }
        }
    }
    Ok(())
}

/// The slot the input interface steers a frame with this VLAN and
/// destination MAC to: the slot with exactly this Sid, else the one with
/// the VLAN and any destination.
pub(crate) fn steer(vlan: u16, dst_mac: [u8; 6], slots: &[SlotIsolation<'_>]) -> Option<u32> {
    let exact = Sid {
        vlan,
        dst_mac: Some(dst_mac),
    };
    let any = Sid {
        vlan,
        dst_mac: None,
    };
    slots
        .iter()
        .find(|s| s.sid == Some(exact))
        .or_else(|| slots.iter().find(|s| s.sid == Some(any)))
        .map(|s| s.slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board() -> BoardSpec {
        BoardSpec::netfpga_sume()
    }

    fn map(pairs: &[(u32, u32)]) -> PortMap {
        let m: Vec<_> = pairs
            .iter()
            .map(|&(p, v)| pb::PortMapping {
                physical_port: p,
                virtual_port: v,
            })
            .collect();
        PortMap::from_proto(0, &m, &board()).unwrap()
    }

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    #[test]
    fn sid_from_proto_checks_vlan_and_mac() {
        let ok = Sid::from_proto(
            1,
            &pb::Isolation {
                vlan_id: 10,
                dst_mac: MAC.to_vec(),
            },
        )
        .unwrap();
        assert_eq!(ok.to_string(), "(VLAN 10, dst 02:00:00:00:00:01)");
        assert_eq!(Sid::from_proto(1, &ok.to_proto()).unwrap(), ok);
        for (vlan, mac) in [
            (0, vec![]),
            (4095, vec![]),
            (70_000, vec![]),
            (5, vec![1, 2]),
        ] {
            let e = Sid::from_proto(
                1,
                &pb::Isolation {
                    vlan_id: vlan,
                    dst_mac: mac,
                },
            )
            .unwrap_err();
            assert!(matches!(e, SlotError::BadIsolation { slot: 1, .. }), "{e}");
        }
        assert_eq!(parse_mac("02:00:00:00:00:01"), Some(MAC));
        assert_eq!(parse_mac("02-00-00-00-00-01"), Some(MAC));
        assert_eq!(parse_mac("02:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:01:07"), None);
    }

    #[test]
    fn port_maps_need_real_distinct_ports() {
        let b = board();
        let m = map(&[(2, 0), (0, 1)]);
        assert_eq!(m.physical(&b).into_iter().collect::<Vec<_>>(), [0, 2]);
        assert_eq!(m.virtual_of(2, &b), Some(0));
        assert_eq!(m.virtual_of(1, &b), None);
        assert_eq!(m.first_physical(&b), Some(0));
        let identity = PortMap::default();
        assert_eq!(identity.physical(&b).len(), 4);
        assert_eq!(identity.virtual_of(3, &b), Some(3));
        assert_eq!(identity.virtual_of(4, &b), None);

        let pm = |p, v| pb::PortMapping {
            physical_port: p,
            virtual_port: v,
        };
        let e = PortMap::from_proto(3, &[pm(7, 0)], &b).unwrap_err();
        assert!(
            matches!(
                e,
                SlotError::UnknownPort {
                    slot: 3,
                    port: 7,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("0 (nf0)"), "{e}");
        let e = PortMap::from_proto(3, &[pm(1, 0), pm(1, 1)], &b).unwrap_err();
        assert!(matches!(e, SlotError::BadPortMap { .. }), "{e}");
        let e = PortMap::from_proto(3, &[pm(1, 0), pm(2, 0)], &b).unwrap_err();
        assert!(matches!(e, SlotError::BadPortMap { .. }), "{e}");
    }

    #[test]
    fn sids_are_unique_and_one_vlan_never_shares_ports() {
        let b = board();
        let (p01, p23, all) = (
            map(&[(0, 0), (1, 1)]),
            map(&[(2, 0), (3, 1)]),
            PortMap::default(),
        );
        let v10 = |mac: Option<[u8; 6]>| Sid {
            vlan: 10,
            dst_mac: mac,
        };
        let others = [
            SlotIsolation {
                slot: 0,
                sid: Some(v10(Some(MAC))),
                ports: &p01,
            },
            SlotIsolation {
                slot: 1,
                sid: None,
                ports: &all,
            },
        ];
        // Same Sid: refused naming slot 0.
        let e = check(2, v10(Some(MAC)), &p23, &others, &b).unwrap_err();
        assert!(matches!(e, SlotError::SidInUse { other: 0, .. }), "{e}");
        // Same VLAN, other MAC, disjoint ports: fine.
        check(2, v10(None), &p23, &others, &b).unwrap();
        // Same VLAN on shared ports (identity = all ports): refused.
        let e = check(2, v10(None), &all, &others, &b).unwrap_err();
        assert_eq!(
            e,
            SlotError::VlanPortShared {
                slot: 2,
                other: 0,
                vlan: 10,
                ports: vec![0, 1]
            }
        );
        // Another VLAN may share every port; a slot never clashes with itself.
        check(
            2,
            Sid {
                vlan: 20,
                dst_mac: None,
            },
            &all,
            &others,
            &b,
        )
        .unwrap();
        check(0, v10(Some(MAC)), &all, &others, &b).unwrap();
    }

    #[test]
    fn steering_prefers_the_exact_sid() {
        let all = PortMap::default();
        let slots = [
            SlotIsolation {
                slot: 4,
                sid: Some(Sid {
                    vlan: 10,
                    dst_mac: None,
                }),
                ports: &all,
            },
            SlotIsolation {
                slot: 7,
                sid: Some(Sid {
                    vlan: 10,
                    dst_mac: Some(MAC),
                }),
                ports: &all,
            },
        ];
        assert_eq!(steer(10, MAC, &slots), Some(7));
        assert_eq!(steer(10, [9; 6], &slots), Some(4));
        assert_eq!(steer(11, MAC, &slots), None);
    }
}
