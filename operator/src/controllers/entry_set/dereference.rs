//! Dereference stage: everything a TableEntrySet refers to, read through
//! [`Reads`]. Its VirtualSwitches down to a Switch, a slot and the table's
//! schema from the program's P4Info; the texts of its ConfigMaps. What
//! cannot be resolved is a [`Problem`], never an error: the set still
//! syncs what did resolve. Only failed reads are errors.

use std::collections::HashMap;
use std::sync::Arc;

use kube::ResourceExt;
use p4fleet_crds::condition_types::PIPELINE_LOADED;
use p4fleet_crds::{Switch, TableEntrySet, VirtualSwitch, find_condition};
use p4fleet_model::entries::profile::ProfileSchema;
use p4fleet_model::entries::{EntryError, TableSchema, const_default_action};
use p4fleet_proto::p4info::P4Info;

use super::memory::TargetKey;
use crate::artifacts::{self, P4InfoError};
use crate::entry_sources::EntrySources;
pub use crate::entry_sources::{SourceProblem, SourceText, Sources};
use crate::fleet::slot_claims as claims;
use crate::reads::Reads;

/// A VirtualSwitch the set fills, resolved down to a device slot.
#[derive(Debug, Clone)]
pub struct Target {
    pub virtual_switch: String,
    pub switch: Switch,
    pub slot: u32,
    pub schema: TableSchema,
    /// The table's const default action id (P4Info), if it has one: its
    /// default action cannot be set.
    pub const_default_action: Option<u32>,
    /// The table's action profile (P4Info `implementation_id`), from the
    /// program's P4Info: its entries are synced by [`super::profiles`],
    /// not as direct entries.
    pub profile: Option<ProfileSchema>,
    /// BFRT: the first pipe of the VirtualSwitch's pipe set (its slot
    /// claim), when it runs on one: its entries go through that program's
    /// own client ([`Target::device`]).
    pub first_pipe: Option<u32>,
    /// The program content whose P4Info gave `schema`: the revision the
    /// VirtualSwitch has loaded, or, when that is not recorded, the content
    /// in force (the program's `status.digest`; None before it has one).
    pub encoded_for: Option<String>,
    /// The P4Program it runs, and that content's P4Info (a BFRT reader
    /// binds to the program with it).
    pub program: String,
    pub p4info: Arc<P4Info>,
}

impl Target {
    /// The device this target's entries are written to and read from: the
    /// Switch's, or on a BFRT pipe set the client bound to the
    /// VirtualSwitch's program (never another program of the device).
    pub fn device(
        &self,
        pool: &crate::devices::DevicePool,
    ) -> Result<std::sync::Arc<p4fleet_client::Device>, p4fleet_client::Error> {
        claims::program_device(
            pool,
            &self.switch,
            self.slot,
            self.first_pipe,
            &self.virtual_switch,
        )
    }

    /// The key of this target of set `set` (`namespace/name`) in the sync memory.
    pub fn key(&self, set: &str) -> TargetKey {
        TargetKey {
            set: set.to_string(),
            virtual_switch: self.virtual_switch.clone(),
        }
    }
}

/// A table's schema, its const default action and whether it has an
/// action profile.
type TableFacts = (
    TableSchema,
    Option<u32>,
    Option<ProfileSchema>,
    Arc<P4Info>,
    Option<String>,
);

/// Why the program of a VirtualSwitch gives no schema for the set's table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    #[error("P4Program {0} not found")]
    NotFound(String),
    #[error("P4Program {program}: {error}")]
    P4Info { program: String, error: P4InfoError },
    #[error("P4Program {program}: {error}")]
    Table { program: String, error: EntryError },
}

/// Something the set refers to that could not be resolved; the message
/// names the field or object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("spec.virtualSwitchRef: VirtualSwitch {0} not found")]
    VirtualSwitchNotFound(String),
    #[error("spec.virtualSwitchSelector matches no VirtualSwitch")]
    NoVirtualSwitch,
    #[error("VirtualSwitch {0} has no pipeline loaded yet")]
    VirtualSwitchNotReady(String),
    #[error("VirtualSwitch {virtual_switch}: Switch {switch} not found")]
    SwitchNotFound {
        virtual_switch: String,
        switch: String,
    },
    #[error(transparent)]
    ProgramNotUsable(ProgramError),
    /// The program has no such table: the spec is wrong, not a reference.
    #[error("table {table:?} is not in the program of VirtualSwitch {virtual_switch}: {error}")]
    UnknownTable {
        table: String,
        virtual_switch: String,
        error: ProgramError,
    },
    /// An entry source (ConfigMap) that could not be read.
    #[error(transparent)]
    Source(SourceProblem),
    /// The table exists, but not in the program this VirtualSwitch runs
    /// now (it swapped programs, or other VirtualSwitches run one that has
    /// it): not a typo, and the set comes back when the VirtualSwitch does.
    #[error(
        "table {table:?} is not in P4Program {program}, which VirtualSwitch {virtual_switch} runs"
    )]
    TableNotInProgram {
        table: String,
        virtual_switch: String,
        program: String,
    },
    /// Another set fills the same table of the same VirtualSwitch and one
    /// of them is Exclusive ([`super::conflicts`]).
    #[error(transparent)]
    OwnershipConflict(super::conflicts::Conflict),
}

impl Problem {
    /// The condition reason this problem reports.
    pub fn reason(&self) -> &'static str {
        match self {
            Problem::VirtualSwitchNotFound(_) => "VirtualSwitchNotFound",
            Problem::NoVirtualSwitch => "NoVirtualSwitch",
            Problem::VirtualSwitchNotReady(_) => "VirtualSwitchNotReady",
            Problem::SwitchNotFound { .. } => "SwitchNotFound",
            Problem::ProgramNotUsable(_) => "ProgramNotUsable",
            Problem::UnknownTable { .. } => "UnknownTable",
            Problem::Source(p) => p.reason(),
            Problem::TableNotInProgram { .. } => "TableNotInProgram",
            Problem::OwnershipConflict(_) => "OwnershipConflict",
        }
    }

    /// Whether it makes the spec invalid (`Valid`) rather than a reference
    /// unresolved (`ResolvedRefs`).
    pub fn invalidates_spec(&self) -> bool {
        matches!(self, Problem::UnknownTable { .. })
    }

    /// Whether it concerns an entry source (ConfigMaps): while one is
    /// missing, the entries it held are unknown, so nothing is deleted.
    pub fn is_source(&self) -> bool {
        matches!(self, Problem::Source(_))
    }

    /// Whether the set should poll until it resolves. ConfigMap changes
    /// and VirtualSwitch changes bring the set back through its watches,
    /// but a VirtualSwitch's Switch and program are not watched here.
    pub fn polls(&self) -> bool {
        match self {
            Problem::Source(p) => p.polls(),
            // The VirtualSwitch's watch brings the set back when it changes.
            Problem::TableNotInProgram { .. } => false,
            p => !p.invalidates_spec(),
        }
    }
}

/// What a set refers to, resolved.
#[derive(Debug, Clone, Default)]
pub struct Dereferenced {
    pub targets: Vec<Target>,
    /// Unresolved references and unknown tables, VirtualSwitches' first,
    /// then ConfigMaps'.
    pub problems: Vec<Problem>,
    pub sources: Sources,
}

impl Dereferenced {
    /// Whether every required entry source was read (deletes are allowed).
    pub fn sources_complete(&self) -> bool {
        !self.problems.iter().any(Problem::is_source)
    }
}

/// Resolves the set's VirtualSwitches and reads its ConfigMaps in `ns`
/// (through `entry_sources`, which fetches only what changed).
pub async fn dereference(
    reads: &impl Reads,
    entry_sources: &EntrySources,
    ns: &str,
    set: &TableEntrySet,
) -> Result<Dereferenced, kube::Error> {
    let mut lookup = Lookup {
        reads,
        p4infos: &entry_sources.p4infos,
        ns,
        set,
        problems: Vec::new(),
    };
    let targets = lookup.targets().await?;
    let (sources, source_problems) = entry_sources
        .read(
            reads,
            &crate::controllers::object_key(set),
            ns,
            &set.spec.entries_from,
        )
        .await?;
    let mut problems = lookup.problems;
    problems.extend(source_problems.into_iter().map(Problem::Source));
    Ok(Dereferenced {
        targets,
        problems,
        sources,
    })
}

/// One dereference: where it reads, and what it found unresolved so far.
struct Lookup<'a, R> {
    reads: &'a R,
    p4infos: &'a artifacts::ParsedP4Infos,
    ns: &'a str,
    set: &'a TableEntrySet,
    problems: Vec<Problem>,
}

impl<R: Reads> Lookup<'_, R> {
    async fn virtual_switches(&mut self) -> Result<Vec<VirtualSwitch>, kube::Error> {
        let spec = &self.set.spec;
        if let Some(name) = &spec.virtual_switch_ref {
            let found = self.reads.virtual_switch(self.ns, name).await?;
            if found.is_none() {
                self.problems
                    .push(Problem::VirtualSwitchNotFound(name.clone()));
            }
            return Ok(found.into_iter().collect());
        }
        let Some(selector) = &spec.virtual_switch_selector else {
            return Ok(Vec::new());
        };
        let mut vss = self.reads.virtual_switches(Some(self.ns)).await?;
        vss.retain(|v| selector.matches(v.labels()));
        if vss.is_empty() {
            self.problems.push(Problem::NoVirtualSwitch);
        }
        Ok(vss)
    }

    async fn targets(&mut self) -> Result<Vec<Target>, kube::Error> {
        let table = &self.set.spec.table;
        // VirtualSwitches running the same content share one read of it.
        type Runs = (String, Option<String>);
        let mut schemas: HashMap<Runs, Result<TableFacts, ProgramError>> = HashMap::new();
        let mut targets = Vec::new();
        for vs in self.virtual_switches().await? {
            let vs_name = vs.name_any();
            let st = vs.status.clone().unwrap_or_default();
            let loaded =
                find_condition(&st.conditions, PIPELINE_LOADED).is_some_and(|c| c.is_true());
            let (Some(sw_name), Some(slot), true) = (st.switch, st.slot, loaded) else {
                self.problems.push(Problem::VirtualSwitchNotReady(vs_name));
                continue;
            };
            let Some(switch) = self.reads.switch(&sw_name).await? else {
                self.problems.push(Problem::SwitchNotFound {
                    virtual_switch: vs_name,
                    switch: sw_name,
                });
                continue;
            };
            let program = vs.spec.program_ref.clone();
            let runs = (program.clone(), st.loaded_digest.clone());
            if !schemas.contains_key(&runs) {
                let schema = self.schema(&program, table, runs.1.as_deref()).await?;
                schemas.insert(runs.clone(), schema);
            }
            match &schemas[&runs] {
                Ok((schema, const_default_action, profile, p4info, encoded_for)) => {
                    targets.push(Target {
                        first_pipe: claims::first_pipe(&switch, &format!("{}/{vs_name}", self.ns)),
                        virtual_switch: vs_name,
                        switch,
                        slot,
                        schema: schema.clone(),
                        const_default_action: *const_default_action,
                        profile: profile.clone(),
                        encoded_for: encoded_for.clone(),
                        program: program.clone(),
                        p4info: p4info.clone(),
                    })
                }
                Err(
                    error @ ProgramError::Table {
                        error: EntryError::UnknownTable(_),
                        ..
                    },
                ) => {
                    let problem = if self.table_elsewhere(&vs, table).await? {
                        Problem::TableNotInProgram {
                            table: table.clone(),
                            virtual_switch: vs_name,
                            program: program.clone(),
                        }
                    } else {
                        Problem::UnknownTable {
                            table: table.clone(),
                            virtual_switch: vs_name,
                            error: error.clone(),
                        }
                    };
                    self.problems.push(problem);
                }
                Err(error) => self.problems.push(Problem::ProgramNotUsable(error.clone())),
            }
        }
        Ok(targets)
    }

    /// Whether `table`, missing from the program `vs` runs, is a table of
    /// some program rather than a typo: `vs` has swapped programs (status
    /// `lastSwap`), or another VirtualSwitch of the namespace runs a
    /// program that has it.
    async fn table_elsewhere(&self, vs: &VirtualSwitch, table: &str) -> Result<bool, kube::Error> {
        let swapped = vs.status.as_ref().and_then(|s| s.last_swap.as_ref());
        if swapped.is_some_and(|s| s.from_digest.is_some()) {
            return Ok(true);
        }
        let mut programs: Vec<String> = self
            .reads
            .virtual_switches(Some(self.ns))
            .await?
            .into_iter()
            .map(|v| v.spec.program_ref)
            .filter(|p| *p != vs.spec.program_ref)
            .collect();
        programs.sort();
        programs.dedup();
        for p in programs {
            if self.schema(&p, table, None).await?.is_ok() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The schema of `table` in program `program`, its const default
    /// action and whether it has an action profile. `runs`: the content
    /// the VirtualSwitch has loaded, whose recorded revision gives the
    /// P4Info, so its entries are encoded for the pipeline the device
    /// runs: a rollout's VirtualSwitch not moved yet or rolled back, one
    /// under a held change, and one whose program's sources were just
    /// edited (the sources then already say what it does not run yet).
    async fn schema(
        &self,
        program: &str,
        table: &str,
        runs: Option<&str>,
    ) -> Result<Result<TableFacts, ProgramError>, kube::Error> {
        let Some(p) = self.reads.program(self.ns, program).await? else {
            return Ok(Err(ProgramError::NotFound(program.to_string())));
        };
        let recorded = match runs {
            Some(digest) => self.revision_p4info(program, digest).await?,
            None => None,
        };
        let (info, encoded_for) = match recorded {
            Some(info) => (info, runs.map(str::to_string)),
            // Not recorded (a content from before revisions, or one that
            // could not be snapshotted): the sources in force, as before.
            None => match artifacts::p4info(self.reads, self.p4infos, self.ns, &p.spec).await? {
                Ok(info) => (info, p.status.as_ref().and_then(|s| s.digest.clone())),
                Err(error) => {
                    let program = program.to_string();
                    return Ok(Err(ProgramError::P4Info { program, error }));
                }
            },
        };
        Ok(TableSchema::from_p4info(&info, table)
            .map(|s| {
                let const_default = const_default_action(&info, s.id);
                let profile = ProfileSchema::of_table(&info, s.id);
                (s, const_default, profile, info.clone(), encoded_for)
            })
            .map_err(|error| ProgramError::Table {
                program: program.to_string(),
                error,
            }))
    }

    /// The P4Info of revision `digest` of `program`, from its snapshot
    /// (read once per process: a revision never changes); None when it is
    /// not recorded or does not parse (then the sources in force give it,
    /// as before revisions).
    async fn revision_p4info(
        &self,
        program: &str,
        digest: &str,
    ) -> Result<Option<Arc<P4Info>>, kube::Error> {
        if let Some(info) = self.p4infos.of_revision(self.ns, program, digest) {
            return Ok(Some(info));
        }
        // The revision cache says whether it is recorded at all: a content
        // that is not costs no read of the API server at each sync.
        let name = crate::fleet::revisions::revision_name(program, digest);
        let recorded = self.reads.program_revisions(self.ns, program).await?;
        if !recorded.iter().any(|cr| cr.name_any() == name) {
            return Ok(None);
        }
        let loaded =
            crate::fleet::revisions::load::load(self.reads, self.ns, program, digest).await?;
        let Ok(info) = loaded
            .map_err(drop)
            .and_then(|r| self.p4infos.of(&r.resolved).map_err(drop))
        else {
            return Ok(None);
        };
        self.p4infos
            .keep_revision(self.ns, program, digest, info.clone());
        Ok(Some(info))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::reads::fixture::{Cluster, meta, vs_spec};
    use k8s_openapi::api::core::v1::ConfigMap;
    use p4fleet_crds::{Condition, P4Program, SwitchSpec, TableEntrySetSpec, VirtualSwitchStatus};

    pub const FIREWALL: &str = include_str!("../../../../examples/firewall/p4info.txt");
    const ROUTER: &str = include_str!("../../../../examples/router/p4info.txt");

    fn program(name: &str, p4info: &str) -> P4Program {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"p4info": {"inline": p4info}}
        }))
        .unwrap()
    }

    fn switch(name: &str) -> Switch {
        let spec: SwitchSpec =
            serde_json::from_value(serde_json::json!({"target": "Bmv2", "endpoint": "h:1"}))
                .unwrap();
        Switch {
            metadata: meta(name, None, &[]),
            spec,
            status: None,
        }
    }

    /// A VirtualSwitch running `program`, placed on `switch` slot 0 with
    /// its pipeline loaded when `switch` is given.
    fn vs(
        name: &str,
        program: &str,
        switch: Option<&str>,
        labels: &[(&str, &str)],
    ) -> VirtualSwitch {
        VirtualSwitch {
            metadata: meta(name, Some("ns"), labels),
            spec: vs_spec(program, switch),
            status: switch.map(|s| VirtualSwitchStatus {
                switch: Some(s.into()),
                slot: Some(0),
                conditions: vec![Condition::new(PIPELINE_LOADED, true, "Loaded", "")],
                ..Default::default()
            }),
        }
    }

    fn set(spec: serde_json::Value) -> TableEntrySet {
        let spec: TableEntrySetSpec = serde_json::from_value(spec).unwrap();
        let mut s = TableEntrySet::new("s", spec);
        s.metadata.namespace = Some("ns".into());
        s
    }

    fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: meta(name, Some("ns"), &[]),
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn cluster() -> Cluster {
        Cluster {
            switches: vec![switch("sw")],
            programs: vec![
                program("fw", FIREWALL),
                program("broken", "tables {"),
                program("router", ROUTER),
            ],
            virtual_switches: vec![
                vs("a", "fw", Some("sw"), &[("pool", "x")]),
                vs("b", "fw", Some("sw"), &[("pool", "x")]),
                vs("pending", "fw", None, &[("pool", "y")]),
                vs("lost", "fw", Some("gone"), &[("pool", "y")]),
                vs("bad", "broken", Some("sw"), &[("pool", "y")]),
                vs("nofw", "missing", Some("sw"), &[("pool", "y")]),
                vs("r", "router", Some("sw"), &[("pool", "r")]),
            ],
            config_maps: vec![config_map("cm", &[("b", "2"), ("a", "1")])],
            ..Default::default()
        }
    }

    async fn run(spec: serde_json::Value) -> Dereferenced {
        dereference(&cluster(), &EntrySources::default(), "ns", &set(spec))
            .await
            .unwrap()
    }

    /// A set for the VirtualSwitches labelled `pool`.
    async fn select(pool: &str, table: &str) -> Dereferenced {
        run(
            serde_json::json!({"virtualSwitchSelector": {"matchLabels": {"pool": pool}},
            "table": table}),
        )
        .await
    }

    fn texts(d: &Dereferenced) -> Vec<(&str, &str, String)> {
        d.sources
            .texts
            .iter()
            .map(|t| {
                let text = t.text.get().unwrap().to_string();
                (t.config_map.as_str(), t.key.as_str(), text)
            })
            .collect()
    }

    /// `c` dereferenced (with `sources`) for a set of `table` on the
    /// VirtualSwitches of pool x.
    async fn pooled(c: &Cluster, sources: &EntrySources, table: &str) -> Dereferenced {
        let set = set(serde_json::json!({
            "virtualSwitchSelector": {"matchLabels": {"pool": "x"}}, "table": table}));
        dereference(c, sources, "ns", &set).await.unwrap()
    }

    fn reasons(d: &Dereferenced) -> Vec<&'static str> {
        d.problems.iter().map(Problem::reason).collect()
    }

    #[tokio::test]
    async fn a_loaded_virtual_switch_resolves_to_its_switch_slot_and_schema() {
        let d = run(
            serde_json::json!({"virtualSwitchRef": "a", "table": "firewall",
            "entriesFrom": [{"configMap": "cm"}]}),
        )
        .await;
        assert!(d.problems.is_empty(), "{:?}", d.problems);
        assert_eq!(d.targets.len(), 1);
        let t = &d.targets[0];
        assert_eq!((t.virtual_switch.as_str(), t.slot), ("a", 0));
        assert_eq!(t.switch.name_any(), "sw");
        assert_eq!(t.schema.name, "MyIngress.firewall");
        assert_eq!(
            texts(&d),
            [("cm", "a", "1".into()), ("cm", "b", "2".into())]
        );
        assert!(d.sources_complete());
    }

    #[tokio::test]
    async fn every_unresolved_virtual_switch_is_a_problem_with_its_reason() {
        let d = select("y", "firewall").await;
        assert!(d.targets.is_empty());
        assert_eq!(
            reasons(&d),
            [
                "VirtualSwitchNotReady",
                "SwitchNotFound",
                "ProgramNotUsable",
                "ProgramNotUsable"
            ]
        );
        let messages: Vec<String> = d.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages[0],
            "VirtualSwitch pending has no pipeline loaded yet"
        );
        assert_eq!(messages[1], "VirtualSwitch lost: Switch gone not found");
        assert!(
            messages[2].starts_with("P4Program broken: spec.p4info: cannot parse:"),
            "{}",
            messages[2]
        );
        assert_eq!(messages[3], "P4Program missing not found");
        assert!(d.problems.iter().all(Problem::polls));

        let d = run(serde_json::json!({"virtualSwitchRef": "nope", "table": "firewall"})).await;
        assert_eq!(d.problems, [Problem::VirtualSwitchNotFound("nope".into())]);
        assert_eq!(
            d.problems[0].to_string(),
            "spec.virtualSwitchRef: VirtualSwitch nope not found"
        );
        let d = select("z", "firewall").await;
        assert_eq!(d.problems, [Problem::NoVirtualSwitch]);
    }

    #[tokio::test]
    async fn an_unknown_table_invalidates_the_spec_by_its_variant() {
        let d = select("x", "MyIngress.dmac").await;
        assert!(d.targets.is_empty());
        assert_eq!(reasons(&d), ["UnknownTable", "UnknownTable"]);
        assert!(d.problems[0].invalidates_spec() && !d.problems[0].polls());
        assert_eq!(
            d.problems[0].to_string(),
            "table \"MyIngress.dmac\" is not in the program of VirtualSwitch a: P4Program fw: table \"MyIngress.dmac\" not found in P4Info"
        );
    }

    #[tokio::test]
    async fn a_virtual_switch_on_an_older_revision_gets_that_revisions_schema() {
        use crate::artifacts::{Resolved, field};
        use crate::fleet::revisions::{part_object, revision_name, revision_object, snapshot};
        // Revision 1 of fw had the firewall's P4Info; its sources now give
        // the router's (revision 2, in force).
        let mut c = cluster();
        let old: Resolved = [(field::P4INFO, Ok(FIREWALL.as_bytes().to_vec()))]
            .into_iter()
            .collect();
        let old_digest = old.digest();
        let fw = c
            .programs
            .iter_mut()
            .find(|p| p.name_any() == "fw")
            .unwrap();
        fw.metadata.uid = Some("u-1".into());
        let name = revision_name("fw", &old_digest);
        let snap = snapshot(&name, &fw.spec, &old).unwrap();
        let mut cr = revision_object(fw, &name, 1, &snap.manifest);
        cr.metadata.namespace = Some("ns".into());
        c.revisions.push(cr);
        for (n, d) in &snap.parts {
            let mut cm = part_object(fw, n, d);
            cm.metadata.namespace = Some("ns".into());
            c.config_maps.push(cm);
        }
        fw.spec.p4info.inline = Some(ROUTER.into());
        fw.status = Some(p4fleet_crds::P4ProgramStatus {
            digest: Some("2".repeat(64)),
            ..Default::default()
        });
        for v in c.virtual_switches.iter_mut() {
            let runs = if v.name_any() == "a" {
                old_digest.clone()
            } else {
                "2".repeat(64)
            };
            if let Some(st) = v.status.as_mut() {
                st.loaded_digest = Some(runs);
            }
        }
        let sources = EntrySources::default();
        let d = pooled(&c, &sources, "firewall").await;
        // a runs revision 1: the firewall table, from its snapshot; b runs
        // the router content, which has no such table.
        let names: Vec<&str> = d
            .targets
            .iter()
            .map(|t| t.virtual_switch.as_str())
            .collect();
        assert_eq!(names, ["a"]);
        assert_eq!(d.targets[0].schema.name, "MyIngress.firewall");
        assert_eq!(d.targets[0].encoded_for, Some(old_digest.clone()));
        assert_eq!(d.problems.len(), 1, "{:?}", d.problems);
        // A VirtualSwitch on the content in force reads the sources.
        c.virtual_switches
            .iter_mut()
            .filter_map(|v| v.status.as_mut())
            .for_each(|st| st.loaded_digest = Some("2".repeat(64)));
        let d = pooled(&c, &sources, "firewall").await;
        assert!(d.targets.is_empty(), "{:?}", d.targets);
        // A revision read once is kept: the snapshot gone, a still resolves.
        c.config_maps.retain(|cm| !cm.name_any().starts_with(&name));
        c.virtual_switches
            .iter_mut()
            .filter(|v| v.name_any() == "a")
            .filter_map(|v| v.status.as_mut())
            .for_each(|st| st.loaded_digest = Some(old_digest.clone()));
        let d = pooled(&c, &sources, "firewall").await;
        assert_eq!(d.targets.len(), 1);
    }

    #[tokio::test]
    async fn a_content_not_recorded_is_encoded_for_the_content_in_force() {
        // No revisions: the sources give the P4Info, and the target says
        // it is the program's content in force, not what it has loaded.
        let mut c = cluster();
        for v in c
            .virtual_switches
            .iter_mut()
            .filter_map(|v| v.status.as_mut())
        {
            v.loaded_digest = Some("1".repeat(64));
        }
        let d = pooled(&c, &EntrySources::default(), "firewall").await;
        assert!(d.targets.iter().all(|t| t.encoded_for.is_none()));
        let fw = c
            .programs
            .iter_mut()
            .find(|p| p.name_any() == "fw")
            .unwrap();
        fw.status = Some(p4fleet_crds::P4ProgramStatus {
            digest: Some("2".repeat(64)),
            ..Default::default()
        });
        let d = pooled(&c, &EntrySources::default(), "firewall").await;
        assert_eq!(d.targets.len(), 2);
        assert!(
            d.targets
                .iter()
                .all(|t| t.encoded_for == Some("2".repeat(64)))
        );
    }

    #[tokio::test]
    async fn a_table_of_another_program_is_not_in_this_one_rather_than_unknown() {
        // "MyIngress.ipv4_lpm" is the router's (VirtualSwitch r runs it).
        let d = select("x", "MyIngress.ipv4_lpm").await;
        assert!(d.targets.is_empty());
        assert_eq!(reasons(&d), ["TableNotInProgram", "TableNotInProgram"]);
        let p = &d.problems[0];
        assert!(!p.invalidates_spec() && !p.polls() && !p.is_source());
        assert_eq!(
            p.to_string(),
            "table \"MyIngress.ipv4_lpm\" is not in P4Program fw, which VirtualSwitch a runs"
        );
        // The router's own VirtualSwitch resolves it.
        let d = select("r", "MyIngress.ipv4_lpm").await;
        assert_eq!((d.targets.len(), d.problems.len()), (1, 0));

        // A VirtualSwitch that swapped programs: its old tables are not typos.
        let mut c = cluster();
        c.virtual_switches.retain(|v| v.name_any() != "r");
        let swapped = c.virtual_switches.iter_mut().find(|v| v.name_any() == "a");
        swapped.unwrap().status.as_mut().unwrap().last_swap = Some(p4fleet_crds::LastSwap {
            from_digest: Some("old".into()),
            ..Default::default()
        });
        let d = pooled(&c, &EntrySources::default(), "MyIngress.ipv4_lpm").await;
        assert_eq!(reasons(&d), ["TableNotInProgram", "UnknownTable"]);
    }

    #[tokio::test]
    async fn missing_config_maps_and_keys_are_named_unless_optional() {
        let d = run(
            serde_json::json!({"virtualSwitchRef": "a", "table": "firewall",
            "entriesFrom": [
                {"configMap": "nope"}, {"configMap": "maybe", "optional": true},
                {"configMap": "cm", "key": "c"}, {"configMap": "cm", "key": "d", "optional": true},
                {"configMap": "cm", "key": "b"}
            ]}),
        )
        .await;
        assert_eq!(d.targets.len(), 1);
        let messages: Vec<String> = d.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            ["ConfigMap nope not found", "ConfigMap cm has no key \"c\""]
        );
        assert_eq!(reasons(&d), ["ConfigMapNotFound", "ConfigMapNotFound"]);
        assert!(!d.sources_complete());
        assert!(!d.problems[0].polls());
        assert_eq!(texts(&d), [("cm", "b", "2".into())]);
    }
}
