//! BFRT state of one device: the loaded programs, the fixed tables and the
//! subscribed clients. Pure state; the caller holds the device's BFRT lock.

use std::collections::{BTreeMap, HashMap};

use p4fleet_proto::bfrt;

use super::NON_P4_JSON;
use super::schema::BfrtSchema;
use super::store::Program;
use crate::drift::drop_from_tables;

/// A client registered by Subscribe on a stream.
pub(crate) struct Client {
    pub stream_id: u64,
    pub bound: Option<String>,
}

/// BFRT state of one device: loaded programs, the fixed tables and the
/// subscribed clients.
pub(crate) struct BfrtDevice {
    pub programs: BTreeMap<String, Program>,
    /// Verified by VERIFY_AND_WARM_INIT_BEGIN, loaded by WARM_INIT_END.
    pub pending: Option<Vec<(BfrtSchema, bfrt::ForwardingPipelineConfig)>>,
    pub fixed: Program,
    pub clients: HashMap<u32, Client>,
}

impl Default for BfrtDevice {
    fn default() -> Self {
        BfrtDevice {
            programs: BTreeMap::new(),
            pending: None,
            fixed: Program::new(
                BfrtSchema::from_json(NON_P4_JSON.as_bytes()).expect("fixed tables parse"),
                bfrt::ForwardingPipelineConfig::default(),
            ),
            clients: HashMap::new(),
        }
    }
}

impl BfrtDevice {
    /// Checks program configs (names, bfrt.json, context.json).
    pub fn verify(
        configs: Vec<bfrt::ForwardingPipelineConfig>,
    ) -> Result<Vec<(BfrtSchema, bfrt::ForwardingPipelineConfig)>, String> {
        if configs.is_empty() {
            return Err("no program config given".into());
        }
        let mut out: Vec<(BfrtSchema, bfrt::ForwardingPipelineConfig)> = Vec::new();
        for c in configs {
            if c.p4_name.is_empty() {
                return Err("program config without p4_name".into());
            }
            if out.iter().any(|(_, o)| o.p4_name == c.p4_name) {
                return Err(format!("program {} given twice", c.p4_name));
            }
            let schema = BfrtSchema::from_json(&c.bfruntime_info)
                .map_err(|e| format!("program {}: {e}", c.p4_name))?;
            for p in &c.profiles {
                if !p.context.is_empty()
                    && serde_json::from_slice::<serde_json::Value>(&p.context).is_err()
                {
                    return Err(format!(
                        "program {} profile {}: context is not JSON",
                        c.p4_name, p.profile_name
                    ));
                }
            }
            out.push((schema, c));
        }
        Ok(out)
    }

    /// Replaces the loaded programs (keeping the state of unchanged tables
    /// when `reconcile`); bindings to programs that are gone are dropped.
    pub fn load(
        &mut self,
        programs: Vec<(BfrtSchema, bfrt::ForwardingPipelineConfig)>,
        reconcile: bool,
    ) {
        let mut old = std::mem::take(&mut self.programs);
        for (schema, config) in programs {
            let name = config.p4_name.clone();
            let mut p = Program::new(schema, config);
            if reconcile && let Some(o) = old.remove(&name) {
                p.adopt(o);
            }
            self.programs.insert(name, p);
        }
        for c in self.clients.values_mut() {
            if c.bound
                .as_ref()
                .is_some_and(|b| !self.programs.contains_key(b))
            {
                c.bound = None;
            }
        }
    }

    /// Entries per table name (program tables and non-empty fixed ones).
    pub fn table_counts(&self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for p in self.programs.values() {
            for (id, t) in &p.tables {
                out.push((p.schema.tables[id].name.clone(), t.entries.len() as u64));
            }
        }
        for (id, t) in &self.fixed.tables {
            if !t.entries.is_empty() {
                out.push((
                    self.fixed.schema.tables[id].name.clone(),
                    t.entries.len() as u64,
                ));
            }
        }
        out
    }

    /// Drift helper: removes up to `count` entries of table `table_id` (any
    /// table if `None`) of every program.
    pub fn drop_entries(&mut self, table_id: Option<u32>, count: usize) -> usize {
        let mut removed = 0;
        for p in self.programs.values_mut() {
            removed += drop_from_tables(
                &mut p.tables,
                |t| &mut t.entries,
                table_id,
                count - removed,
                |_, _| {},
            );
        }
        removed
    }
}
