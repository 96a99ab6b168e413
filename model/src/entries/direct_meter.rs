//! Direct meters per entry: an entry's `meter` (`cir`, `cburst`, `pir`,
//! `pburst`, RFC 2698) on a table whose P4Info has a `direct_meters`
//! entry, written as a `DirectMeterEntry` after the entry itself. Pure:
//! the line-format token, the table's direct meter from P4Info, the
//! difference from what a device reports, the P4Runtime messages.
//!
//! An entry without `meter` leaves its meter as the device has it (as for
//! indirect meters: p4fleet does not know what it was before).

use std::collections::HashMap;

use p4fleet_proto::p4info::P4Info;
use p4fleet_proto::p4runtime as p4rt;

use super::EntryKey;
use super::error::EntryError;
use super::schema::TableSchema;
use super::value::excerpt;
pub use crate::resources::MeterConfig;

/// The line-format token that sets an entry's meter:
/// `@meter=CIR:CBURST:PIR:PBURST`.
pub const TOKEN: &str = "meter=";

/// Parses `CIR:CBURST:PIR:PBURST` (the part after `@meter=`) and checks
/// it as targets do (nothing negative, PIR at least CIR, bursts above 0).
pub fn parse(text: &str) -> Result<MeterConfig, EntryError> {
    let bad = |reason: String| EntryError::InvalidMeter {
        value: excerpt(text),
        reason,
    };
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() != 4 {
        return Err(bad(format!(
            "expected cir:cburst:pir:pburst (4 numbers), got {}",
            parts.len()
        )));
    }
    let mut n = [0i64; 4];
    for (i, p) in parts.iter().enumerate() {
        n[i] = p
            .parse()
            .map_err(|_| bad(format!("{:?} is not an integer", excerpt(p))))?;
    }
    let c = MeterConfig {
        cir: n[0],
        cburst: n[1],
        pir: n[2],
        pburst: n[3],
    };
    check(&c).map_err(|e| match e {
        EntryError::InvalidMeter { reason, .. } => bad(reason),
        other => other,
    })?;
    Ok(c)
}

/// [`MeterConfig::check`] as an [`EntryError`] naming the config.
pub fn check(c: &MeterConfig) -> Result<(), EntryError> {
    c.check().map_err(|e| EntryError::InvalidMeter {
        value: format(c),
        reason: e.to_string(),
    })
}

/// The token's value for `c`: `CIR:CBURST:PIR:PBURST`.
pub fn format(c: &MeterConfig) -> String {
    format!("{}:{}:{}:{}", c.cir, c.cburst, c.pir, c.pburst)
}

/// A table's direct meter as P4Info declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectMeterSchema {
    pub id: u32,
    pub name: String,
}

impl DirectMeterSchema {
    /// The direct meter of table `table_id`, if it has one.
    pub fn of_table(info: &P4Info, table_id: u32) -> Option<DirectMeterSchema> {
        info.direct_meters
            .iter()
            .find(|m| m.direct_table_id == table_id)
            .map(|m| {
                let p = m.preamble.clone().unwrap_or_default();
                DirectMeterSchema {
                    id: p.id,
                    name: p.name,
                }
            })
    }
}

/// What one sync of a table's direct meters has to do. Indices point into
/// the desired list given to [`plan`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Configs to write (MODIFY): the device has another config or none.
    pub writes: Vec<usize>,
    /// Already as desired.
    pub in_place: Vec<usize>,
    /// The entry is not on the device (its insert failed or is pending):
    /// nothing to write its meter to.
    pub no_entry: Vec<usize>,
}

/// Diffs the desired configs (`(entry key, config)`) against the
/// device's direct meter entries of the table (`None`: unconfigured).
pub fn plan(
    desired: &[(&EntryKey, MeterConfig)],
    device: &HashMap<EntryKey, Option<MeterConfig>>,
) -> Plan {
    let mut p = Plan::default();
    for (i, (key, want)) in desired.iter().enumerate() {
        match device.get(*key) {
            None => p.no_entry.push(i),
            Some(Some(have)) if have == want => p.in_place.push(i),
            Some(_) => p.writes.push(i),
        }
    }
    p
}

/// The DirectMeterEntry that sets `key`'s meter to `c`.
pub fn to_proto(key: &EntryKey, c: &MeterConfig) -> p4rt::DirectMeterEntry {
    p4rt::DirectMeterEntry {
        table_entry: Some(key.to_proto()),
        config: Some(p4rt::MeterConfig {
            cir: c.cir,
            cburst: c.cburst,
            pir: c.pir,
            pburst: c.pburst,
        }),
        counter_data: None,
    }
}

/// The read filter for every direct meter entry of table `table_id`.
pub fn read_filter(table_id: u32) -> p4rt::DirectMeterEntry {
    p4rt::DirectMeterEntry {
        table_entry: Some(p4rt::TableEntry {
            table_id,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A read-back DirectMeterEntry as `(entry key, config)`; `None` config
/// for an unconfigured meter.
pub fn from_proto(
    schema: &TableSchema,
    e: &p4rt::DirectMeterEntry,
) -> Result<(EntryKey, Option<MeterConfig>), EntryError> {
    let te = e.table_entry.clone().unwrap_or_default();
    let key = EntryKey::from_proto(schema, &te)?;
    let config = e.config.as_ref().map(|c| MeterConfig {
        cir: c.cir,
        cburst: c.cburst,
        pir: c.pir,
        pburst: c.pburst,
    });
    Ok((key, config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(cir: i64, cburst: i64, pir: i64, pburst: i64) -> MeterConfig {
        MeterConfig {
            cir,
            cburst,
            pir,
            pburst,
        }
    }

    #[test]
    fn token_parses_and_round_trips() {
        let c = parse("1000:100:2000:200").unwrap();
        assert_eq!(c, cfg(1000, 100, 2000, 200));
        assert_eq!(format(&c), "1000:100:2000:200");
        assert_eq!(parse(&format(&c)).unwrap(), c);
    }

    #[test]
    fn bad_tokens_name_the_value_and_reason() {
        let e = parse("1000:100:2000").unwrap_err();
        assert!(matches!(e, EntryError::InvalidMeter { .. }), "{e}");
        assert!(e.to_string().contains("(4 numbers), got 3"), "{e}");
        let e = parse("1000:x:2000:200").unwrap_err();
        assert!(e.to_string().contains("\"x\" is not an integer"), "{e}");
        let e = parse("5000:100:1000:200").unwrap_err();
        assert_eq!(
            e.to_string(),
            "meter \"5000:100:1000:200\": pir 1000 is below cir 5000"
        );
        let e = parse("1:0:2:1").unwrap_err();
        assert!(e.to_string().contains("cburst must be above 0"), "{e}");
        let e = parse("-1:1:2:1").unwrap_err();
        assert!(e.to_string().contains("cir -1 is negative"), "{e}");
    }

    #[test]
    fn fabric_acl_has_a_direct_meter_and_smac_none() {
        let info =
            crate::entries::fixtures::p4info(include_str!("../../../examples/fabric/p4info.txt"));
        let table = |n: &str| {
            info.tables
                .iter()
                .find(|t| t.preamble.as_ref().unwrap().name == n)
                .unwrap()
                .preamble
                .as_ref()
                .unwrap()
                .id
        };
        let m = DirectMeterSchema::of_table(&info, table("MyIngress.acl")).unwrap();
        assert_eq!(m.name, "MyIngress.acl_meter");
        assert_eq!(m.id >> 24, 0x15);
        assert_eq!(
            DirectMeterSchema::of_table(&info, table("MyIngress.smac")),
            None
        );
    }

    #[test]
    fn plan_writes_only_what_differs_and_skips_missing_entries() {
        let key = |p: i32| EntryKey {
            table_id: 1,
            matches: Box::default(),
            priority: p,
        };
        let (k1, k2, k3, k4) = (key(1), key(2), key(3), key(4));
        let desired = vec![
            (&k1, cfg(1, 1, 1, 1)),
            (&k2, cfg(2, 2, 2, 2)),
            (&k3, cfg(3, 3, 3, 3)),
            (&k4, cfg(4, 4, 4, 4)),
        ];
        let device: HashMap<EntryKey, Option<MeterConfig>> = [
            (k1.clone(), Some(cfg(1, 1, 1, 1))),
            (k2.clone(), Some(cfg(9, 9, 9, 9))),
            (k3.clone(), None),
        ]
        .into_iter()
        .collect();
        let p = plan(&desired, &device);
        assert_eq!(p.in_place, vec![0]);
        assert_eq!(p.writes, vec![1, 2]);
        assert_eq!(p.no_entry, vec![3]);
    }

    #[test]
    fn proto_round_trip() {
        let schema = crate::entries::fixtures::firewall();
        let k = crate::entries::parse_text(
            &schema,
            "srcAddr=10.0.0.1 dstAddr=10.0.0.2 => allow port=1\n",
        )
        .unwrap()[0]
            .key
            .clone();
        let c = cfg(10, 20, 30, 40);
        let (k2, c2) = from_proto(&schema, &to_proto(&k, &c)).unwrap();
        assert_eq!((k2, c2), (k.clone(), Some(c)));
        let unconfigured = p4rt::DirectMeterEntry {
            config: None,
            ..to_proto(&k, &c)
        };
        assert_eq!(from_proto(&schema, &unconfigured).unwrap().1, None);
        assert_eq!(read_filter(7).table_entry.unwrap().table_id, 7);
    }
}
