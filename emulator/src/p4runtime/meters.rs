//! Indirect (`MeterEntry`) and direct (`DirectMeterEntry`) meter configs:
//! MODIFY sets a two-rate three-color config (RFC 2698, as P4Runtime's
//! `MeterConfig` is) after checking it, or resets the meter to
//! unconfigured (every packet green) when the config is absent; Read
//! returns the config, absent for an unconfigured meter. The software data
//! plane does not color packets: configs are stored and read back only
//! (docs/entities/meters.md).

use p4fleet_proto::p4runtime::{self as p4, entity::Entity, update::Type};
use tonic::Code;

use crate::p4runtime::pipeline::Pipeline;
use crate::p4runtime::resources::{
    ArrayInfo, direct_read_targets, direct_written, modify_only, read_cells, table_entry,
    written_cell,
};
use crate::update_error::{UpdateError, err};

/// Checks a meter config: rates and bursts not negative, PIR at least
/// CIR, both bursts above zero (RFC 2698 §3). `what` names the meter.
pub fn check_config(c: &p4::MeterConfig, what: &str) -> Result<(), UpdateError> {
    let bad = |m: String| Err(err(Code::InvalidArgument, format!("{what}: {m}")));
    for (name, v) in [
        ("cir", c.cir),
        ("cburst", c.cburst),
        ("pir", c.pir),
        ("pburst", c.pburst),
    ] {
        if v < 0 {
            return bad(format!("{name} {v} is negative"));
        }
    }
    if c.pir < c.cir {
        return bad(format!("pir {} is below cir {}", c.pir, c.cir));
    }
    if c.cburst == 0 || c.pburst == 0 {
        return bad(format!(
            "cburst {} and pburst {} must both be above 0",
            c.cburst, c.pburst
        ));
    }
    Ok(())
}

/// A write's config after its checks: `None` resets the meter.
fn config_of(
    config: Option<p4::MeterConfig>,
    counter_data: &Option<p4::MeterCounterData>,
    what: &str,
) -> Result<Option<p4::MeterConfig>, UpdateError> {
    if counter_data.is_some() {
        return Err(err(
            Code::Unimplemented,
            format!("{what}: meter counter data is not emulated"),
        ));
    }
    if let Some(c) = &config {
        check_config(c, what)?;
    }
    Ok(config)
}

impl Pipeline {
    pub(crate) fn write_meter(&mut self, ty: Type, e: p4::MeterEntry) -> Result<(), UpdateError> {
        modify_only(ty, "meter entries")?;
        let meters = &self.schema.resources.meters;
        let (array, index) = written_cell(meters, e.meter_id, &e.index, "meter")?;
        let what = format!("meter {}", array.name);
        let config = config_of(e.config, &e.counter_data, &format!("{what}[{index}]"))?;
        let cells = self.resources.meters.entry(e.meter_id).or_default();
        match config {
            Some(c) => cells.insert(index, c),
            None => cells.remove(&index),
        };
        Ok(())
    }

    pub(crate) fn read_meters(
        &self,
        f: &p4::MeterEntry,
        emit: &mut dyn FnMut(Entity),
    ) -> Result<(), UpdateError> {
        let cell = |array: &ArrayInfo, i: i64| {
            let cells = self.resources.meters.get(&array.id);
            Entity::MeterEntry(p4::MeterEntry {
                meter_id: array.id,
                index: Some(p4::Index { index: i }),
                config: cells.and_then(|c| c.get(&i)).cloned(),
                counter_data: None,
            })
        };
        let meters = &self.schema.resources.meters;
        read_cells(meters, f.meter_id, &f.index, "meter", cell, emit)
    }

    pub(crate) fn write_direct_meter(
        &mut self,
        ty: Type,
        e: p4::DirectMeterEntry,
    ) -> Result<(), UpdateError> {
        modify_only(ty, "direct meter entries")?;
        let with = &self.schema.resources.direct_meters;
        let (table_id, key, info) = direct_written(self, with, &e.table_entry, "direct meter")?;
        let config = config_of(
            e.config,
            &e.counter_data,
            &format!("direct meter {}", info.name),
        )?;
        let meters = &mut self
            .resources
            .direct
            .get_mut(&table_id)
            .expect("tables with a direct meter have direct state")
            .meters;
        match config {
            Some(c) => meters.insert(crate::key::Key::new(&key), c),
            None => meters.remove(key.as_slice()),
        };
        Ok(())
    }

    pub(crate) fn read_direct_meters(
        &self,
        f: &p4::DirectMeterEntry,
        emit: &mut dyn FnMut(Entity),
    ) -> Result<(), UpdateError> {
        let with = &self.schema.resources.direct_meters;
        direct_read_targets(
            self,
            with,
            &f.table_entry,
            "direct meter",
            &mut |t, key, stored| {
                let config = self
                    .resources
                    .direct
                    .get(&t)
                    .and_then(|d| d.meters.get(key))
                    .cloned();
                emit(Entity::DirectMeterEntry(p4::DirectMeterEntry {
                    table_entry: Some(table_entry(stored)),
                    config,
                    counter_data: None,
                }));
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(cir: i64, cburst: i64, pir: i64, pburst: i64) -> p4::MeterConfig {
        p4::MeterConfig {
            cir,
            cburst,
            pir,
            pburst,
        }
    }

    #[test]
    fn two_rate_configs_are_checked() {
        assert_eq!(check_config(&cfg(1000, 100, 2000, 200), "m"), Ok(()));
        assert_eq!(check_config(&cfg(1000, 100, 1000, 100), "m"), Ok(()));
        for bad in [
            cfg(2000, 100, 1000, 100),
            cfg(-1, 100, 1000, 100),
            cfg(10, 0, 1000, 100),
            cfg(10, 10, 1000, 0),
        ] {
            let e = check_config(&bad, "meter m[3]").unwrap_err();
            assert_eq!(e.code, Code::InvalidArgument, "{bad:?}");
            assert!(e.message.starts_with("meter m[3]: "), "{}", e.message);
        }
        assert!(
            check_config(&cfg(2000, 1, 1000, 1), "m")
                .unwrap_err()
                .message
                .contains("pir 1000 is below cir 2000")
        );
    }
}
