//! BFRT state of one device: the loaded programs, the fixed tables and the
//! subscribed clients. Pure state; the caller holds the device's BFRT lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use p4fleet_proto::bfrt;

use super::NON_P4_JSON;
use super::pipes;
use super::schema::BfrtSchema;
use super::store::Program;
use crate::drift::drop_from_tables;

/// A client registered by Subscribe on a stream.
pub(crate) struct Client {
    pub stream_id: u64,
    pub bound: Option<String>,
}

/// A program config that passed [`BfrtDevice::verify`].
pub(crate) struct Verified {
    pub schema: BfrtSchema,
    pub config: bfrt::ForwardingPipelineConfig,
    /// The pipes its profiles claim.
    pub pipes: BTreeSet<u32>,
}

/// BFRT state of one device: loaded programs, the fixed tables and the
/// subscribed clients.
pub(crate) struct BfrtDevice {
    /// Hardware pipes of the chip (`pipe_scope`s name pipes below this).
    pub pipes: u32,
    pub programs: BTreeMap<String, Program>,
    /// Verified by VERIFY_AND_WARM_INIT_BEGIN, loaded by WARM_INIT_END.
    pub pending: Option<Vec<Verified>>,
    pub fixed: Program,
    pub clients: HashMap<u32, Client>,
}

impl Default for BfrtDevice {
    fn default() -> Self {
        BfrtDevice {
            pipes: pipes::DEFAULT_PIPES,
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
    /// Checks program configs (names, bfrt.json, context.json, disjoint
    /// pipe scopes within the device's `pipes`): the whole device's config,
    /// as BF Runtime takes it.
    pub fn verify(
        configs: Vec<bfrt::ForwardingPipelineConfig>,
        pipes: u32,
    ) -> Result<Vec<Verified>, String> {
        if configs.is_empty() {
            return Err("no program config given".into());
        }
        let claimed = pipes::claimed(&configs, pipes)?;
        let mut out: Vec<Verified> = Vec::new();
        for (c, pipes) in configs.into_iter().zip(claimed) {
            if c.p4_name.is_empty() {
                return Err("program config without p4_name".into());
            }
            if out.iter().any(|o| o.config.p4_name == c.p4_name) {
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
            out.push(Verified {
                schema,
                config: c,
                pipes,
            });
        }
        Ok(out)
    }

    /// Replaces the loaded programs (the config is the whole device's);
    /// with `reconcile`, a program that keeps its name and pipes keeps the
    /// state of its unchanged tables (so one pipe set's program is swapped
    /// while the others keep their entries). Bindings to programs that are
    /// gone are dropped.
    pub fn load(&mut self, programs: Vec<Verified>, reconcile: bool) {
        let mut old = std::mem::take(&mut self.programs);
        for v in programs {
            let name = v.config.p4_name.clone();
            let mut p = Program::new(v.schema, v.config);
            p.pipes = v.pipes;
            if reconcile
                && let Some(o) = old.remove(&name)
                && o.pipes == p.pipes
            {
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
