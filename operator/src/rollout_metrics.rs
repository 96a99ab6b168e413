//! `p4fleet_rollout_*`: where each P4Program's rollout stands (gauges
//! read from the cached programs' `status.rollout` at each scrape) and
//! what rollouts did (counters, one per Event the P4Program controller
//! published); `p4fleet_entries_rollout_*` the same for TableEntrySets'
//! rollouts of their entries. Both are encoded at the scrape from the
//! objects in the cache, so a deleted one leaves no series behind.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use p4fleet_crds::{P4Program, RolloutPhase, RolloutStatus, TableEntrySet};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::fleet::rollout;
use crate::metrics::SetLabels;

/// Labels: a P4Program (`namespace`, `name`), as for TableEntrySets.
pub type ProgramLabels = SetLabels;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub namespace: String,
    pub name: String,
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub namespace: String,
    pub name: String,
    pub state: String,
}

/// The objects the gauges are read from: set once the controllers'
/// caches exist (a standby replica has none and reports no rollout).
type Cached<K> = Arc<OnceLock<Store<K>>>;

/// Counters per program, in [`COUNTERS`] order.
type Counts = Arc<Mutex<HashMap<ProgramLabels, [u64; 4]>>>;

/// The counters: metric name, help, and the note reason each counts.
const COUNTERS: [(&str, &str, &str); 4] = [
    ("rollout_started", "Rollouts started", rollout::STARTED),
    (
        "rollout_steps_passed",
        "Rollout steps whose health gate passed",
        rollout::STEP_PASSED,
    ),
    (
        "rollout_completed",
        "Rollouts that reached every VirtualSwitch",
        rollout::COMPLETED,
    ),
    (
        "rollout_rollbacks",
        "Rollouts rolled back on a failed health gate",
        rollout::ROLLED_BACK,
    ),
];

#[derive(Clone, Default)]
pub struct RolloutMetrics {
    programs: Cached<P4Program>,
    counts: Counts,
    sets: Cached<TableEntrySet>,
    set_counts: Counts,
}

impl RolloutMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(Scrape {
            programs: self.programs.clone(),
            counts: self.counts.clone(),
            sets: self.sets.clone(),
            set_counts: self.set_counts.clone(),
        }));
    }

    /// Reads the gauges from `programs` and `sets` from now on.
    pub fn watch(&self, programs: Store<P4Program>, sets: Store<TableEntrySet>) {
        let _ = self.programs.set(programs);
        let _ = self.sets.set(sets);
    }

    /// Counts an Event the P4Program controller published (`reason`: one
    /// of [`rollout`]'s note reasons; others are not a rollout's).
    pub fn noted(&self, namespace: &str, name: &str, reason: &str) {
        count(&self.counts, namespace, name, reason);
    }

    /// The same for an Event of a TableEntrySet's entries rollout.
    pub fn noted_entries(&self, namespace: &str, name: &str, reason: &str) {
        count(&self.set_counts, namespace, name, reason);
    }
}

fn count(counts: &Counts, namespace: &str, name: &str, reason: &str) {
    let Some(i) = COUNTERS.iter().position(|c| c.2 == reason) else {
        return;
    };
    let labels = ProgramLabels {
        namespace: namespace.into(),
        name: name.into(),
    };
    let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
    counts.entry(labels).or_default()[i] += 1;
}

/// One program's gauges. Pure.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub namespace: String,
    pub name: String,
    pub phase: RolloutPhase,
    pub step: u32,
    pub to_revision: i64,
    /// updated, healthy, pending, rolled_back.
    pub counts: [(&'static str, u32); 4],
}

const PHASES: [(RolloutPhase, &str); 4] = [
    (RolloutPhase::Progressing, "Progressing"),
    (RolloutPhase::Paused, "Paused"),
    (RolloutPhase::Completed, "Completed"),
    (RolloutPhase::RolledBack, "RolledBack"),
];

/// Rows of (namespace, name, rollout status), by namespace and name.
fn rows_of<'a>(
    objects: impl IntoIterator<Item = (String, String, Option<&'a RolloutStatus>)>,
) -> Vec<Row> {
    let mut rows: Vec<Row> = objects
        .into_iter()
        .filter_map(|(namespace, name, r)| {
            let r = r?;
            Some(Row {
                namespace,
                name,
                phase: r.phase,
                step: r.step,
                to_revision: r.to.revision,
                counts: [
                    ("updated", r.updated),
                    ("healthy", r.healthy),
                    ("pending", r.pending),
                    ("rolled_back", r.rolled_back),
                ],
            })
        })
        .collect();
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    rows
}

#[derive(Debug)]
struct Scrape {
    programs: Cached<P4Program>,
    counts: Counts,
    sets: Cached<TableEntrySet>,
    set_counts: Counts,
}

/// What one kind's families say: the name prefix (`""` or `entries_`),
/// the kind and what its rollouts move, for the help texts.
struct Family {
    prefix: &'static str,
    kind: &'static str,
    members: &'static str,
}

const PROGRAMS: Family = Family {
    prefix: "",
    kind: "P4Program",
    members: "VirtualSwitches",
};
const SETS: Family = Family {
    prefix: "entries_",
    kind: "TableEntrySet's entries",
    members: "VirtualSwitches",
};

/// The counters of `counts` whose object is in `present`, sorted; the
/// others (deleted objects) are dropped.
fn counted(counts: &Counts, present: &[(String, String)]) -> Vec<(ProgramLabels, [u64; 4])> {
    let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
    counts.retain(|k, _| {
        present
            .iter()
            .any(|(ns, name)| *name == k.name && *ns == k.namespace)
    });
    let mut counted: Vec<(ProgramLabels, [u64; 4])> =
        counts.iter().map(|(k, v)| (k.clone(), *v)).collect();
    counted.sort_by(|a, b| (&a.0.namespace, &a.0.name).cmp(&(&b.0.namespace, &b.0.name)));
    counted
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (e, programs, sets) = (&mut encoder, &self.programs, &self.sets);
        encode_kind(e, programs, &self.counts, &PROGRAMS, program_rollout)?;
        encode_kind(e, sets, &self.set_counts, &SETS, set_rollout)
    }
}

fn program_rollout(p: &P4Program) -> Option<&RolloutStatus> {
    p.status.as_ref()?.rollout.as_ref()
}

fn set_rollout(s: &TableEntrySet) -> Option<&RolloutStatus> {
    s.status.as_ref()?.rollout.as_ref()
}

/// The families of one kind, from its cached objects (none before the
/// cache exists).
fn encode_kind<K>(
    encoder: &mut DescriptorEncoder,
    cached: &Cached<K>,
    counts: &Counts,
    f: &Family,
    rollout_of: fn(&K) -> Option<&RolloutStatus>,
) -> Result<(), std::fmt::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone,
{
    let Some(store) = cached.get() else {
        return Ok(());
    };
    let objects = store.state();
    let named = |o: &K| (o.namespace().unwrap_or_default(), o.name_any());
    let present: Vec<(String, String)> = objects.iter().map(|o| named(o)).collect();
    let counted = counted(counts, &present);
    let rows = rows_of(objects.iter().map(|o| {
        let (ns, name) = named(o);
        (ns, name, rollout_of(o))
    }));
    encode_family(encoder, f, &counted, &rows)
}

/// One kind's counters and gauges.
fn encode_family(
    encoder: &mut DescriptorEncoder,
    f: &Family,
    counted: &[(ProgramLabels, [u64; 4])],
    rows: &[Row],
) -> Result<(), std::fmt::Error> {
    let name = |n: &str| format!("{}{n}", f.prefix);
    for (i, (metric, help, _)) in COUNTERS.iter().enumerate() {
        let help = format!("{help} ({})", f.kind);
        let n = name(metric);
        let mut m = encoder.encode_descriptor(&n, &help, None, MetricType::Counter)?;
        for (labels, n) in counted.iter().filter(|(_, n)| n[i] > 0) {
            ConstCounter::new(n[i]).encode(m.encode_family(labels)?)?;
        }
    }
    if rows.is_empty() {
        return Ok(());
    }
    let object = |r: &Row| ProgramLabels {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
    };
    let help = format!(
        "1 for the phase a {} rollout is in, 0 for the others",
        f.kind
    );
    gauges(encoder, &name("rollout_phase"), &help, rows, |r| {
        PHASES.map(|(phase, label)| {
            let labels = PhaseLabels {
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                phase: label.into(),
            };
            (labels, i64::from(r.phase == phase))
        })
    })?;
    let help = format!(
        "The step a {} rollout is at (0-based; the number of steps once done)",
        f.kind
    );
    gauges(encoder, &name("rollout_step"), &help, rows, |r| {
        [(object(r), i64::from(r.step))]
    })?;
    let help = format!("The revision a {} rollout rolls out", f.kind);
    gauges(encoder, &name("rollout_revision"), &help, rows, |r| {
        [(object(r), r.to_revision)]
    })?;
    let help = format!(
        "A {} rollout's {}: updated, healthy, pending, rolled_back",
        f.kind, f.members
    );
    gauges(
        encoder,
        &name("rollout_virtual_switches"),
        &help,
        rows,
        |r| {
            r.counts.map(|(state, n)| {
                let labels = StateLabels {
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    state: state.into(),
                };
                (labels, i64::from(n))
            })
        },
    )?;
    Ok(())
}

/// One gauge family `n`: for each row, the values `of` gives it, each
/// under its labels.
fn gauges<L: EncodeLabelSet, I: IntoIterator<Item = (L, i64)>>(
    encoder: &mut DescriptorEncoder,
    n: &str,
    help: &str,
    rows: &[Row],
    of: impl Fn(&Row) -> I,
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(n, help, None, MetricType::Gauge)?;
    for r in rows {
        for (labels, v) in of(r) {
            ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::{self, ObjectRef};
    use kube::runtime::watcher;
    use p4fleet_crds::{P4ProgramStatus, RolloutRevision, RolloutStatus};

    fn program(ns: &str, name: &str, rollout: Option<RolloutStatus>) -> P4Program {
        let mut p: P4Program = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"p4info": {"configMapKeyRef": {"name": "x", "key": "p4info.txt"}}}
        }))
        .unwrap();
        p.status = Some(P4ProgramStatus {
            rollout,
            ..Default::default()
        });
        p
    }

    fn rows(programs: &[P4Program]) -> Vec<Row> {
        rows_of(programs.iter().map(|p| {
            (
                p.namespace().unwrap_or_default(),
                p.name_any(),
                program_rollout(p),
            )
        }))
    }

    fn progressing() -> RolloutStatus {
        RolloutStatus {
            phase: RolloutPhase::Progressing,
            to: RolloutRevision {
                revision: 7,
                digest: "d7".into(),
            },
            step: 2,
            updated: 3,
            healthy: 1,
            pending: 9,
            ..Default::default()
        }
    }

    #[test]
    fn only_programs_with_a_rollout_have_rows_in_a_stable_order() {
        let ps = [
            program("b", "fw", Some(progressing())),
            program("a", "plain", None),
            program("a", "fw", Some(progressing())),
        ];
        let rows = rows(&ps);
        let names: Vec<_> = rows
            .iter()
            .map(|r| format!("{}/{}", r.namespace, r.name))
            .collect();
        assert_eq!(names, ["a/fw", "b/fw"]);
        assert_eq!(rows[0].step, 2);
        assert_eq!(rows[0].counts[2], ("pending", 9));
    }

    #[test]
    fn a_scrape_reads_the_cached_programs_and_counts_the_events() {
        let m = RolloutMetrics::default();
        let mut registry = Registry::with_prefix("p4fleet");
        m.register(&mut registry);
        let text = |r: &Registry| {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, r).unwrap();
            out
        };
        assert!(
            !text(&registry).contains("p4fleet_rollout_phase"),
            "no store yet"
        );

        let (store, mut writer) = reflector::store::<P4Program>();
        let p = program("ns", "fw", Some(progressing()));
        writer.apply_watcher_event(&watcher::Event::Apply(p.clone()));
        let (sets, _) = reflector::store::<TableEntrySet>();
        m.watch(store.clone(), sets);
        m.noted("ns", "fw", rollout::STARTED);
        m.noted("ns", "fw", rollout::ROLLED_BACK);
        m.noted("ns", "fw", "DigestChanged");
        let out = text(&registry);
        for line in [
            r#"p4fleet_rollout_phase{namespace="ns",name="fw",phase="Progressing"} 1"#,
            r#"p4fleet_rollout_phase{namespace="ns",name="fw",phase="RolledBack"} 0"#,
            r#"p4fleet_rollout_step{namespace="ns",name="fw"} 2"#,
            r#"p4fleet_rollout_revision{namespace="ns",name="fw"} 7"#,
            r#"p4fleet_rollout_virtual_switches{namespace="ns",name="fw",state="updated"} 3"#,
            r#"p4fleet_rollout_started_total{namespace="ns",name="fw"} 1"#,
            r#"p4fleet_rollout_rollbacks_total{namespace="ns",name="fw"} 1"#,
        ] {
            assert!(out.contains(line), "{line} not in:\n{out}");
        }
        assert!(!out.contains("p4fleet_rollout_completed_total{"), "{out}");

        // A deleted program leaves no gauge and no counter behind.
        writer.apply_watcher_event(&watcher::Event::Delete(p));
        assert!(store.get(&ObjectRef::new("fw").within("ns")).is_none());
        let out = text(&registry);
        assert!(!out.contains("p4fleet_rollout_phase{"), "{out}");
        assert!(!out.contains("p4fleet_rollout_started_total{"), "{out}");
    }

    #[test]
    fn a_sets_entries_rollout_has_its_own_families() {
        let m = RolloutMetrics::default();
        let mut registry = Registry::with_prefix("p4fleet");
        m.register(&mut registry);
        let (programs, _) = reflector::store::<P4Program>();
        let (sets, mut writer) = reflector::store::<TableEntrySet>();
        let mut set: TableEntrySet = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": "acl", "namespace": "ns"},
            "spec": {"virtualSwitchSelector": {"matchLabels": {"app": "fw"}},
                "table": "t", "entries": [{"match": {"a": "1"}, "action": "x"}]}
        }))
        .unwrap();
        set.status = Some(p4fleet_crds::TableEntrySetStatus {
            rollout: Some(progressing()),
            ..Default::default()
        });
        writer.apply_watcher_event(&watcher::Event::Apply(set));
        m.watch(programs, sets);
        m.noted_entries("ns", "acl", rollout::ROLLED_BACK);
        // A program's Event is not counted for the set of the same name.
        m.noted("ns", "acl", rollout::STARTED);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        for line in [
            r#"p4fleet_entries_rollout_phase{namespace="ns",name="acl",phase="Progressing"} 1"#,
            r#"p4fleet_entries_rollout_revision{namespace="ns",name="acl"} 7"#,
            r#"p4fleet_entries_rollout_rollbacks_total{namespace="ns",name="acl"} 1"#,
        ] {
            assert!(out.contains(line), "{line} not in:\n{out}");
        }
        assert!(!out.contains("p4fleet_rollout_phase{"), "{out}");
        assert!(
            !out.contains("p4fleet_entries_rollout_started_total{"),
            "{out}"
        );
    }
}
