//! Counters, meters and registers as the operator handles them, without
//! I/O: the readout of a direct counter (totals, top-N entries), when the
//! next readout is due, meter configs checked as targets check them
//! (RFC 2698: PIR at least CIR, bursts above zero), register values parsed
//! against their `bit<W>` width, and the exact difference between the
//! settings a spec asks for and what a device reports.

use std::collections::HashMap;

use p4fleet_proto::p4info::{P4Info, Preamble, p4_bitstring_like_type_spec, p4_data_type_spec};

/// One entry's counts, labelled by its key as people write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSample {
    /// Where the entry is (e.g. its VirtualSwitch).
    pub place: String,
    pub key: String,
    pub packets: u64,
    pub bytes: u64,
}

/// A direct counter read back over all of a table's entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Readout {
    pub packets: u64,
    pub bytes: u64,
    pub entries: u64,
    /// The `top_n` entries with the most packets (ties: most bytes, then
    /// by place and key, so the list is stable between readouts).
    pub top: Vec<CounterSample>,
}

/// Sums `samples` and keeps the `top_n` busiest entries. Entries that
/// counted nothing are never in the top list.
pub fn summarize(samples: impl IntoIterator<Item = CounterSample>, top_n: usize) -> Readout {
    let mut r = Readout::default();
    let mut all: Vec<CounterSample> = Vec::new();
    for s in samples {
        r.packets = r.packets.saturating_add(s.packets);
        r.bytes = r.bytes.saturating_add(s.bytes);
        r.entries += 1;
        if s.packets > 0 || s.bytes > 0 {
            all.push(s);
        }
    }
    let order = |a: &CounterSample, b: &CounterSample| {
        (b.packets, b.bytes)
            .cmp(&(a.packets, a.bytes))
            .then_with(|| (&a.place, &a.key).cmp(&(&b.place, &b.key)))
    };
    if all.len() > top_n {
        // Partial selection: a table of a million entries is not sorted.
        if top_n > 0 {
            all.select_nth_unstable_by(top_n - 1, order);
        }
        all.truncate(top_n);
    }
    all.sort_unstable_by(order);
    r.top = all;
    r
}

/// Whether a readout taken at `last` (Unix seconds; `None`: never) is
/// older than `interval` seconds at `now`. Between readouts the status
/// keeps the last one, so it changes at most once per interval.
pub fn due(last: Option<i64>, now: i64, interval: u32) -> bool {
    last.is_none_or(|t| now.saturating_sub(t) >= i64::from(interval))
}

/// A two-rate three-color meter config (P4Runtime `MeterConfig`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeterConfig {
    pub cir: i64,
    pub cburst: i64,
    pub pir: i64,
    pub pburst: i64,
}

/// Why a meter config or register value is refused before anything is
/// written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    #[error("{field} {value} is negative")]
    Negative { field: &'static str, value: i64 },
    #[error("pir {pir} is below cir {cir}")]
    PirBelowCir { cir: i64, pir: i64 },
    #[error("{field} must be above 0")]
    ZeroBurst { field: &'static str },
    #[error("{kind} {name} is not in the program")]
    UnknownName { kind: &'static str, name: String },
    #[error("index {index} outside 0..{size}")]
    IndexOutOfRange { index: i64, size: i64 },
    #[error("value {value:?} is not a number (decimal or 0x hex)")]
    NotANumber { value: String },
    #[error("value {value:?} does not fit in {bitwidth} bits")]
    TooWide { value: String, bitwidth: u32 },
}

impl MeterConfig {
    /// The checks a target makes (RFC 2698 §3): nothing negative, PIR at
    /// least CIR, both bursts above zero.
    pub fn check(&self) -> Result<(), SettingError> {
        for (field, value) in [
            ("cir", self.cir),
            ("cburst", self.cburst),
            ("pir", self.pir),
            ("pburst", self.pburst),
        ] {
            if value < 0 {
                return Err(SettingError::Negative { field, value });
            }
        }
        if self.pir < self.cir {
            return Err(SettingError::PirBelowCir {
                cir: self.cir,
                pir: self.pir,
            });
        }
        for (field, v) in [("cburst", self.cburst), ("pburst", self.pburst)] {
            if v == 0 {
                return Err(SettingError::ZeroBurst { field });
            }
        }
        Ok(())
    }
}

/// A register value (decimal or `0x` hex) as the canonical bytes of a
/// `bit<bitwidth>` (no leading zero bytes, at least one byte).
pub fn register_value(text: &str, bitwidth: u32) -> Result<Vec<u8>, SettingError> {
    let t = text.trim().replace('_', "");
    let nan = || SettingError::NotANumber {
        value: text.to_string(),
    };
    let mut bytes: Vec<u8> = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => {
            if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(nan());
            }
            let padded = if hex.len() % 2 == 1 {
                format!("0{hex}")
            } else {
                hex.to_string()
            };
            (0..padded.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&padded[i..i + 2], 16).map_err(|_| nan()))
                .collect::<Result<_, _>>()?
        }
        None => t.parse::<u128>().map_err(|_| nan())?.to_be_bytes().to_vec(),
    };
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    bytes.drain(..first);
    let bits = bytes.first().map_or(0, |b| {
        (bytes.len() as u32 - 1) * 8 + (8 - b.leading_zeros())
    });
    if bits > bitwidth {
        return Err(SettingError::TooWide {
            value: text.to_string(),
            bitwidth,
        });
    }
    if bytes.is_empty() {
        bytes.push(0);
    }
    Ok(bytes)
}

/// An indexed array of a P4Info: its id, size and (registers) width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayRef {
    pub id: u32,
    pub size: i64,
    pub bitwidth: u32,
}

/// The counters, meters and registers of a P4Info, by name, and the
/// direct counter of each table (by table id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceIndex {
    pub meters: HashMap<String, ArrayRef>,
    pub registers: HashMap<String, ArrayRef>,
    /// Table id -> (direct counter id, name).
    pub direct_counters: HashMap<u32, (u32, String)>,
}

fn names(p: &Option<Preamble>) -> Vec<String> {
    // Both the full name and the alias resolve, as in p4runtime-shell.
    let p = p.clone().unwrap_or_default();
    let mut v = vec![p.name];
    if !p.alias.is_empty() {
        v.push(p.alias);
    }
    v
}

impl ResourceIndex {
    pub fn from_p4info(info: &P4Info) -> ResourceIndex {
        let mut ix = ResourceIndex::default();
        for m in &info.meters {
            let id = m.preamble.as_ref().map_or(0, |p| p.id);
            let r = ArrayRef {
                id,
                size: m.size,
                bitwidth: 0,
            };
            for n in names(&m.preamble) {
                ix.meters.insert(n, r);
            }
        }
        for g in &info.registers {
            let id = g.preamble.as_ref().map_or(0, |p| p.id);
            let bitwidth = match g.type_spec.as_ref().and_then(|t| t.type_spec.as_ref()) {
                Some(p4_data_type_spec::TypeSpec::Bitstring(b)) => match &b.type_spec {
                    Some(p4_bitstring_like_type_spec::TypeSpec::Bit(b)) => b.bitwidth as u32,
                    Some(p4_bitstring_like_type_spec::TypeSpec::Int(i)) => i.bitwidth as u32,
                    _ => 0,
                },
                _ => 0,
            };
            let r = ArrayRef {
                id,
                size: g.size.into(),
                bitwidth,
            };
            for n in names(&g.preamble) {
                ix.registers.insert(n, r);
            }
        }
        for c in &info.direct_counters {
            let p = c.preamble.clone().unwrap_or_default();
            ix.direct_counters.insert(c.direct_table_id, (p.id, p.name));
        }
        ix
    }

    /// The array named `name` of `kind`, with `index` checked.
    pub fn resolve(
        &self,
        kind: &'static str,
        name: &str,
        index: i64,
    ) -> Result<ArrayRef, SettingError> {
        let map = if kind == "meter" {
            &self.meters
        } else {
            &self.registers
        };
        let a = *map.get(name).ok_or_else(|| SettingError::UnknownName {
            kind,
            name: name.to_string(),
        })?;
        if index < 0 || index >= a.size {
            return Err(SettingError::IndexOutOfRange {
                index,
                size: a.size,
            });
        }
        Ok(a)
    }
}

/// Exact difference: the positions of `desired` whose value differs from
/// what the device reports (`on_device`, same order; `None` where the
/// device said nothing), i.e. the only writes a sync sends.
pub fn differing<T: PartialEq>(desired: &[T], on_device: &[Option<T>]) -> Vec<usize> {
    desired
        .iter()
        .enumerate()
        .filter(|(i, d)| on_device.get(*i).and_then(Option::as_ref) != Some(*d))
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(key: &str, packets: u64, bytes: u64) -> CounterSample {
        CounterSample {
            place: "vs".into(),
            key: key.into(),
            packets,
            bytes,
        }
    }

    #[test]
    fn summary_sums_everything_and_keeps_the_busiest() {
        let r = summarize(
            [
                s("a", 5, 500),
                s("b", 9, 90),
                s("c", 0, 0),
                s("d", 5, 600),
                s("e", 1, 1),
            ],
            3,
        );
        assert_eq!((r.packets, r.bytes, r.entries), (20, 1191, 5));
        let keys: Vec<&str> = r.top.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, ["b", "d", "a"], "packets, then bytes break ties");
        let all = summarize([s("a", 5, 500), s("c", 0, 0)], 10);
        assert_eq!(all.top.len(), 1, "idle entries are not top entries");
        assert!(summarize([s("a", 1, 1)], 0).top.is_empty());
    }

    #[test]
    fn top_n_is_stable_for_equal_counts() {
        let many: Vec<CounterSample> = (0..100).map(|i| s(&format!("k{i:03}"), 7, 7)).collect();
        let mut rev = many.clone();
        rev.reverse();
        assert_eq!(summarize(many, 4).top, summarize(rev, 4).top);
    }

    #[test]
    fn a_readout_is_due_once_per_interval() {
        assert!(due(None, 100, 60));
        assert!(!due(Some(100), 159, 60));
        assert!(due(Some(100), 160, 60));
        assert!(!due(Some(200), 100, 60), "a clock that went back waits");
    }

    #[test]
    fn meter_configs_are_checked_like_targets_do() {
        let c = |cir, cburst, pir, pburst| MeterConfig {
            cir,
            cburst,
            pir,
            pburst,
        };
        assert_eq!(c(1000, 10, 2000, 20).check(), Ok(()));
        assert_eq!(
            c(2000, 10, 1000, 20).check(),
            Err(SettingError::PirBelowCir {
                cir: 2000,
                pir: 1000
            })
        );
        assert_eq!(
            c(-1, 10, 1000, 20).check(),
            Err(SettingError::Negative {
                field: "cir",
                value: -1
            })
        );
        assert_eq!(
            c(1, 0, 1, 1).check(),
            Err(SettingError::ZeroBurst { field: "cburst" })
        );
    }

    #[test]
    fn register_values_fit_their_width() {
        assert_eq!(register_value("0", 12), Ok(vec![0]));
        assert_eq!(register_value("4095", 12), Ok(vec![0x0f, 0xff]));
        assert_eq!(register_value("0xabc", 12), Ok(vec![0x0a, 0xbc]));
        assert_eq!(register_value("0x000abc", 12), Ok(vec![0x0a, 0xbc]));
        assert!(matches!(
            register_value("4096", 12),
            Err(SettingError::TooWide { bitwidth: 12, .. })
        ));
        assert!(matches!(
            register_value("0x1abc", 12),
            Err(SettingError::TooWide { .. })
        ));
        assert!(matches!(
            register_value("12a", 12),
            Err(SettingError::NotANumber { .. })
        ));
        assert!(matches!(
            register_value("0x", 12),
            Err(SettingError::NotANumber { .. })
        ));
    }

    #[test]
    fn names_and_indexes_resolve_against_the_p4info() {
        let info = p4fleet_proto::p4info::parse_text(
            r#"
meters { preamble { id: 7 name: "MyIngress.rate" alias: "rate" } spec { unit: BYTES } size: 4 }
registers { preamble { id: 9 name: "MyIngress.seen" } type_spec { bitstring { bit { bitwidth: 12 } } } size: 16 }
direct_counters { preamble { id: 5 name: "MyIngress.hits" } direct_table_id: 3 }
"#,
        )
        .unwrap();
        let ix = ResourceIndex::from_p4info(&info);
        assert_eq!(ix.resolve("meter", "rate", 3).unwrap().id, 7);
        assert_eq!(ix.resolve("meter", "MyIngress.rate", 0).unwrap().id, 7);
        assert_eq!(
            ix.resolve("meter", "rate", 4),
            Err(SettingError::IndexOutOfRange { index: 4, size: 4 })
        );
        let r = ix.resolve("register", "MyIngress.seen", 15).unwrap();
        assert_eq!((r.id, r.bitwidth), (9, 12));
        assert!(matches!(
            ix.resolve("register", "seen", 0),
            Err(SettingError::UnknownName { .. })
        ));
        assert_eq!(ix.direct_counters[&3], (5, "MyIngress.hits".into()));
    }

    #[test]
    fn only_differences_are_written() {
        let desired = [1, 2, 3];
        assert_eq!(differing(&desired, &[Some(1), Some(5), None]), [1, 2]);
        assert!(differing(&desired, &[Some(1), Some(2), Some(3)]).is_empty());
    }
}
