//! Apply stage for a TableEntrySet's counters, meters and registers, after
//! its entries: `spec.meters` and `spec.registers` checked against each
//! target's running P4Info (names, indexes, widths, PIR >= CIR) and, only
//! when every one is valid everywhere, written as the exact difference
//! from what each device reports; `spec.counters` read back once per
//! interval into one readout over all targets. [`fold`] (pure) puts the
//! outcome into the status: the readout, per-item errors, the
//! `ResourcesSynced` condition and `Ready`.

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use p4fleet_client::Device;
use p4fleet_crds::entry_set::EntryError as StatusEntryError;
use p4fleet_crds::{Condition, CounterTop, CountersStatus, TableEntrySetStatus};
use p4fleet_model::entries::{Entry, format_key};
use p4fleet_model::resources::{
    self as model, CounterSample, MeterConfig, ResourceIndex, SettingError, differing,
    register_value, summarize,
};
use p4fleet_proto::p4runtime::{self as p4, entity::Entity, update::Type};

use super::SetCtx;
use super::dereference::Target;
use super::set::Set;
use super::status::RETRY;

pub const RESOURCES_SYNCED: &str = "ResourcesSynced";

/// One meter or register cell to write: its P4Runtime entity.
#[derive(Debug, Clone, PartialEq)]
struct Setting {
    /// `meters[2]`, `registers[0]`.
    source: String,
    entity: Entity,
}

/// What the counters, meters and registers of a set came to.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The readout for status: new when one was due, else the last.
    pub counters: Option<CountersStatus>,
    /// Per switch, when a readout was taken now (for metrics).
    pub per_switch: Vec<(String, model::Readout)>,
    pub errors: Vec<StatusEntryError>,
    /// The condition's reason when not synced.
    pub failure: Option<&'static str>,
    /// Cells written by this sync.
    pub written: usize,
}

impl Outcome {
    fn fail(&mut self, reason: &'static str, source: String, key: Option<String>, why: String) {
        self.failure.get_or_insert(reason);
        self.errors.push(StatusEntryError {
            source,
            key,
            reason: why,
        });
    }
}

/// Whether the set asks for any of this.
pub fn wanted(set: &Set<'_>) -> bool {
    set.spec.counters.is_some() || !set.spec.meters.is_empty() || !set.spec.registers.is_empty()
}

/// A refused item: the field the error is about, and why.
fn refusal(source: String, field: &str, e: SettingError) -> StatusEntryError {
    StatusEntryError {
        source,
        key: None,
        reason: format!("{field}: {e}"),
    }
}

/// The array `name` of `kind` with `index` checked; an unknown name or an
/// index out of range refused in `bad`.
fn resolve_item(
    ix: &ResourceIndex,
    (kind, name, index): (&'static str, &str, i64),
    source: &str,
    bad: &mut Vec<StatusEntryError>,
) -> Option<model::ArrayRef> {
    match ix.resolve(kind, name, index) {
        Ok(a) => Some(a),
        Err(e) => {
            let field = match e {
                SettingError::IndexOutOfRange { .. } => "index",
                _ => "name",
            };
            bad.push(refusal(source.to_string(), field, e));
            None
        }
    }
}

/// The cells of `spec.meters` and `spec.registers` resolved against one
/// P4Info; the invalid ones as errors naming the item and field.
fn settings(set: &Set<'_>, ix: &ResourceIndex) -> (Vec<Setting>, Vec<StatusEntryError>) {
    let (mut ok, mut bad) = (Vec::new(), Vec::new());
    for (i, m) in set.spec.meters.iter().enumerate() {
        let source = format!("meters[{i}]");
        let Some(array) = resolve_item(ix, ("meter", &m.name, m.index), &source, &mut bad) else {
            continue;
        };
        let config = MeterConfig {
            cir: m.cir,
            cburst: m.cburst,
            pir: m.pir,
            pburst: m.pburst,
        };
        if let Err(e) = config.check() {
            let field = match e {
                SettingError::Negative { field, .. } | SettingError::ZeroBurst { field } => field,
                _ => "pir",
            };
            bad.push(refusal(source, field, e));
            continue;
        }
        ok.push(Setting {
            source,
            entity: Entity::MeterEntry(p4::MeterEntry {
                meter_id: array.id,
                index: Some(p4::Index { index: m.index }),
                config: Some(p4::MeterConfig {
                    cir: m.cir,
                    cburst: m.cburst,
                    pir: m.pir,
                    pburst: m.pburst,
                }),
                counter_data: None,
            }),
        });
    }
    for (i, r) in set.spec.registers.iter().enumerate() {
        let source = format!("registers[{i}]");
        let Some(array) = resolve_item(ix, ("register", &r.name, r.index), &source, &mut bad)
        else {
            continue;
        };
        match register_value(&r.value, array.bitwidth) {
            Ok(v) => ok.push(Setting {
                source,
                entity: Entity::RegisterEntry(p4::RegisterEntry {
                    register_id: array.id,
                    index: Some(p4::Index { index: r.index }),
                    data: Some(p4::P4Data {
                        data: Some(p4::p4_data::Data::Bitstring(v)),
                    }),
                }),
            }),
            Err(e) => bad.push(refusal(source, "value", e)),
        }
    }
    (ok, bad)
}

/// The read filter of a setting's cell.
fn filter(e: &Entity) -> Entity {
    match e {
        Entity::MeterEntry(m) => Entity::MeterEntry(p4::MeterEntry { config: None, ..*m }),
        Entity::RegisterEntry(r) => Entity::RegisterEntry(p4::RegisterEntry {
            data: None,
            ..r.clone()
        }),
        other => other.clone(),
    }
}

/// The device's answer in a form comparable with a setting: registers'
/// values canonical (no leading zero bytes), as settings are.
fn comparable(e: Entity) -> Entity {
    match e {
        Entity::RegisterEntry(mut r) => {
            if let Some(p4::P4Data {
                data: Some(p4::p4_data::Data::Bitstring(b)),
            }) = &mut r.data
            {
                let first = b
                    .iter()
                    .position(|x| *x != 0)
                    .unwrap_or(b.len().saturating_sub(1));
                b.drain(..first);
            }
            Entity::RegisterEntry(r)
        }
        other => other,
    }
}

struct Resolved<'a> {
    target: &'a Target,
    dev: std::sync::Arc<Device>,
    index: ResourceIndex,
}

/// Connects to each target and reads its running P4Info; a target that
/// cannot do this is an error in `out`.
async fn resolve<'a>(ctx: &SetCtx, targets: &'a [Target], out: &mut Outcome) -> Vec<Resolved<'a>> {
    let mut resolved = Vec::new();
    for t in targets {
        let source = format!("VirtualSwitch {}", t.virtual_switch);
        let dev = match t.device(&ctx.devices) {
            Ok(d) => d,
            Err(e) => {
                out.fail("DeviceUnavailable", source, None, e.to_string());
                continue;
            }
        };
        match dev.running_p4info(t.slot).await {
            Ok(Some(info)) => resolved.push(Resolved {
                target: t,
                index: ResourceIndex::from_p4info(&info),
                dev: dev.clone(),
            }),
            Ok(None) => out.fail(
                "DeviceUnavailable",
                source,
                None,
                "no pipeline loaded".into(),
            ),
            Err(e) => out.fail("DeviceUnavailable", source, None, e.to_string()),
        }
    }
    resolved
}

/// Applies the set's meters and registers and reads its counters (when
/// due) on every target.
pub async fn sync(
    ctx: &SetCtx,
    set: &Set<'_>,
    targets: &[Target],
    now_unix: i64,
    now: &str,
) -> Outcome {
    let previous = set.status.and_then(|s| s.counters.clone());
    let mut out = Outcome {
        counters: previous.clone(),
        ..Outcome::default()
    };
    if !wanted(set) {
        out.counters = None;
        return out;
    }
    let resolved = resolve(ctx, targets, &mut out).await;

    // Every setting checked on every target before any is written.
    let mut planned = Vec::new();
    let mut invalid = false;
    for r in &resolved {
        let (ok, bad) = settings(set, &r.index);
        for e in bad {
            if !out.errors.contains(&e) {
                out.errors.push(e);
            }
            invalid = true;
        }
        planned.push(ok);
    }
    if invalid {
        out.failure = Some("SettingInvalid");
    } else {
        for (r, ok) in resolved.iter().zip(&planned) {
            write_settings(r, ok, &mut out).await;
        }
    }

    if let Some(readout) = &set.spec.counters {
        let last = previous.as_ref().and_then(|c| unix(&c.read_at));
        if model::due(last, now_unix, readout.interval_seconds) {
            out.counters = read_counters(&resolved, readout.top_n as usize, now, &mut out).await;
        }
    } else {
        out.counters = None;
    }
    out
}

/// One Read of `filters`, the entities unwrapped.
async fn read(
    p: &Device,
    slot: u32,
    filters: Vec<Entity>,
) -> Result<Vec<Entity>, p4fleet_client::Error> {
    let filters = filters.into_iter().map(|e| p4::Entity { entity: Some(e) });
    let read = p.read_entities(slot, filters.collect()).await?;
    Ok(read.into_iter().filter_map(|e| e.entity).collect())
}

/// Reads the cells of `ok` back and writes those that differ.
async fn write_settings(r: &Resolved<'_>, ok: &[Setting], out: &mut Outcome) {
    let vs = &r.target.virtual_switch;
    let bfrt_ok;
    let ok = if matches!(r.dev.as_ref(), Device::Bfrt(_)) {
        bfrt_ok = bfrt_settings(r, ok, out);
        &bfrt_ok[..]
    } else {
        ok
    };
    if ok.is_empty() {
        return;
    }
    let p = r.dev.as_ref();
    let filters = ok.iter().map(|s| filter(&s.entity)).collect();
    let on_device = match read(p, r.target.slot, filters).await {
        Ok(v) => v,
        Err(e) => {
            out.fail(
                "DeviceUnavailable",
                format!("VirtualSwitch {vs}"),
                None,
                e.to_string(),
            );
            return;
        }
    };
    let on_device: Vec<Option<Entity>> =
        on_device.into_iter().map(|e| Some(comparable(e))).collect();
    let desired: Vec<Entity> = ok.iter().map(|s| s.entity.clone()).collect();
    let todo = differing(&desired, &on_device);
    let updates = todo
        .iter()
        .map(|&i| p4::Update {
            r#type: Type::Modify as i32,
            entity: Some(p4::Entity {
                entity: Some(desired[i].clone()),
            }),
        })
        .collect();
    match p.write_entities(r.target.slot, updates).await {
        Ok(refused) => {
            out.written += todo.len() - refused.len();
            for (j, code, message) in refused {
                let source = ok[todo[j]].source.clone();
                let why = format!(
                    "VirtualSwitch {vs} refused it ({}): {message}",
                    tonic::Code::from_i32(code).description()
                );
                out.fail("SettingRefused", source, None, why);
            }
        }
        Err(e) => out.fail(
            "DeviceUnavailable",
            format!("VirtualSwitch {vs}"),
            None,
            e.to_string(),
        ),
    }
}

/// The settings a BFRT target takes (register cells); each other one
/// (meters: not mapped to BFRT's `Meter` tables yet) is an `UnsupportedOnTarget`
/// error naming it, never a silent skip.
fn bfrt_settings(r: &Resolved<'_>, ok: &[Setting], out: &mut Outcome) -> Vec<Setting> {
    let mut keep = Vec::with_capacity(ok.len());
    for s in ok {
        if matches!(s.entity, Entity::RegisterEntry(_)) {
            keep.push(s.clone());
        } else {
            out.fail(
                "UnsupportedOnTarget",
                s.source.clone(),
                None,
                format!(
                    "Switch {} is a BFRT target: meters are written over P4Runtime only",
                    r.target.switch.name_any()
                ),
            );
        }
    }
    keep
}

/// The condition reason of a failed device call: a target that cannot do
/// it (`Unsupported`) or one that did not answer.
fn device_failure(e: &p4fleet_client::Error) -> &'static str {
    match e {
        p4fleet_client::Error::Unsupported(_) => "UnsupportedOnTarget",
        _ => "DeviceUnavailable",
    }
}

/// One readout of the table's direct counter over all targets.
async fn read_counters(
    resolved: &[Resolved<'_>],
    top_n: usize,
    now: &str,
    out: &mut Outcome,
) -> Option<CountersStatus> {
    let mut samples = Vec::new();
    let mut name = None;
    for r in resolved {
        let p = r.dev.as_ref();
        let t = r.target;
        let vs = &t.virtual_switch;
        let Some((_, counter)) = r.index.direct_counters.get(&t.schema.id) else {
            out.fail(
                "NoDirectCounter",
                "counters".into(),
                None,
                format!(
                    "table {} has no direct counter in the program of VirtualSwitch {vs}",
                    t.schema.name
                ),
            );
            continue;
        };
        name.get_or_insert_with(|| counter.clone());
        let filter = Entity::DirectCounterEntry(p4::DirectCounterEntry {
            table_entry: Some(p4::TableEntry {
                table_id: t.schema.id,
                ..Default::default()
            }),
            data: None,
        });
        let read = match read(p, t.slot, vec![filter]).await {
            Ok(v) => v,
            Err(e) => {
                out.fail(
                    device_failure(&e),
                    format!("VirtualSwitch {vs}"),
                    None,
                    e.to_string(),
                );
                continue;
            }
        };
        let mine: Vec<CounterSample> = read
            .into_iter()
            .filter_map(|e| match e {
                Entity::DirectCounterEntry(d) => Some(d),
                _ => None,
            })
            .map(|d| {
                let te = d.table_entry.unwrap_or_default();
                let key = match Entry::from_proto(&t.schema, &te) {
                    Ok(entry) => format_key(&t.schema, &entry.key),
                    Err(e) => format!("(unreadable entry: {e})"),
                };
                let data = d.data.unwrap_or_default();
                CounterSample {
                    place: vs.clone(),
                    key,
                    packets: data.packet_count.max(0) as u64,
                    bytes: data.byte_count.max(0) as u64,
                }
            })
            .collect();
        out.per_switch
            .push((t.switch.name_any(), summarize(mine.clone(), top_n)));
        samples.extend(mine);
    }
    let counter = name?;
    let r = summarize(samples, top_n);
    Some(CountersStatus {
        counter,
        read_at: now.to_string(),
        packets: r.packets,
        bytes: r.bytes,
        entries: r.entries,
        top: r
            .top
            .into_iter()
            .map(|s| CounterTop {
                virtual_switch: s.place,
                key: s.key,
                packets: s.packets,
                bytes: s.bytes,
            })
            .collect(),
    })
}

/// The reconcile's requeue with the counter readout in it: back when the
/// next readout is due, unless the sync already comes back sooner (a
/// retry, or a shorter resync).
pub fn requeue(set: &Set<'_>, action: Action, default_resync: Duration) -> Action {
    let Some(c) = &set.spec.counters else {
        return action;
    };
    let interval = Duration::from_secs(u64::from(c.interval_seconds));
    if action == Action::requeue(RETRY) && RETRY <= interval {
        return action;
    }
    let resync = match set.spec.resync_seconds {
        Some(0) => interval,
        Some(s) => Duration::from_secs(u64::from(s)),
        None => default_resync,
    };
    Action::requeue(interval.min(resync))
}

fn unix(rfc3339: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .ok()
        .map(|t| t.timestamp())
}

/// Puts `out` into `status` (pure): the readout, the errors (after the
/// entries' own, within `max_errors`), `ResourcesSynced` and, when that is
/// False, `Ready` False with its reason.
pub fn fold(status: &mut TableEntrySetStatus, out: &Outcome, wanted: bool, max_errors: usize) {
    status.counters = out.counters.clone();
    if !wanted {
        return;
    }
    for e in &out.errors {
        if status.errors.len() >= max_errors {
            break;
        }
        status.errors.push(e.clone());
    }
    let cond = match out.failure {
        None => Condition::new(
            RESOURCES_SYNCED,
            true,
            "Synced",
            "counters, meters and registers as the spec asks",
        ),
        Some(reason) => {
            let first = out
                .errors
                .first()
                .map(|e| format!("{}: {}", e.source, e.reason))
                .unwrap_or_default();
            let more = out.errors.len().saturating_sub(1);
            let msg = match more {
                0 => first,
                n => format!("{first} (and {n} more)"),
            };
            Condition::new(RESOURCES_SYNCED, false, reason, msg)
        }
    };
    if !cond.is_true()
        && let Some(ready) = status.conditions.iter_mut().find(|c| c.type_ == "Ready")
        && ready.is_true()
    {
        *ready = Condition::new("Ready", false, &cond.reason, cond.message.clone());
    }
    status.conditions.push(cond);
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::TableEntrySet;
    use p4fleet_crds::{MeterSetting, RegisterSetting};

    const P4INFO: &str = r#"
meters { preamble { id: 7 name: "MyIngress.rate" } spec { unit: BYTES } size: 4 }
registers { preamble { id: 9 name: "MyIngress.seen" } type_spec { bitstring { bit { bitwidth: 12 } } } size: 16 }
"#;

    fn set(meters: Vec<MeterSetting>, registers: Vec<RegisterSetting>) -> TableEntrySet {
        let mut spec: p4fleet_crds::TableEntrySetSpec =
            serde_json::from_value(serde_json::json!({"virtualSwitchRef": "b", "table": "t"}))
                .unwrap();
        spec.meters = meters;
        spec.registers = registers;
        TableEntrySet::new("s", spec)
    }

    fn meter(index: i64, cir: i64, pir: i64) -> MeterSetting {
        MeterSetting {
            name: "MyIngress.rate".into(),
            index,
            cir,
            cburst: 10,
            pir,
            pburst: 10,
        }
    }

    fn register(name: &str, index: i64, value: &str) -> RegisterSetting {
        RegisterSetting {
            name: name.into(),
            index,
            value: value.into(),
        }
    }

    #[test]
    fn each_bad_item_is_named_with_its_field() {
        let ix = ResourceIndex::from_p4info(&p4fleet_proto::p4info::parse_text(P4INFO).unwrap());
        let s = set(
            vec![meter(0, 100, 200), meter(1, 300, 200), meter(4, 1, 1)],
            vec![
                register("MyIngress.seen", 2, "0xabc"),
                register("MyIngress.seen", 16, "1"),
                register("MyIngress.seen", 3, "4096"),
                register("nope", 0, "1"),
            ],
        );
        let (ok, bad) = settings(&Set::of(&s), &ix);
        let sources: Vec<&str> = ok.iter().map(|s| s.source.as_str()).collect();
        assert_eq!(sources, ["meters[0]", "registers[0]"]);
        let got: Vec<(String, String)> = bad.into_iter().map(|e| (e.source, e.reason)).collect();
        assert_eq!(
            got,
            [
                ("meters[1]".into(), "pir: pir 200 is below cir 300".into()),
                ("meters[2]".into(), "index: index 4 outside 0..4".into()),
                (
                    "registers[1]".into(),
                    "index: index 16 outside 0..16".into()
                ),
                (
                    "registers[2]".into(),
                    "value: value \"4096\" does not fit in 12 bits".into()
                ),
                (
                    "registers[3]".into(),
                    "name: register nope is not in the program".into()
                ),
            ]
        );
    }

    #[test]
    fn readouts_bring_the_set_back_when_due() {
        let mut s = set(vec![], vec![]);
        let resync = Duration::from_secs(300);
        let away = Action::requeue(resync);
        assert_eq!(
            requeue(&Set::of(&s), away.clone(), resync),
            away,
            "no readout asked"
        );
        s.spec.counters = Some(p4fleet_crds::CounterReadout {
            interval_seconds: 30,
            top_n: 3,
        });
        assert_eq!(
            requeue(&Set::of(&s), away, resync),
            Action::requeue(Duration::from_secs(30))
        );
        let retry = Action::requeue(RETRY);
        assert_eq!(requeue(&Set::of(&s), retry.clone(), resync), retry);
        s.spec.resync_seconds = Some(10);
        let ten = Action::requeue(Duration::from_secs(10));
        assert_eq!(requeue(&Set::of(&s), ten.clone(), resync), ten);
    }

    #[test]
    fn device_values_compare_canonically() {
        let dev = comparable(Entity::RegisterEntry(p4::RegisterEntry {
            register_id: 9,
            index: Some(p4::Index { index: 2 }),
            data: Some(p4::P4Data {
                data: Some(p4::p4_data::Data::Bitstring(vec![0, 0x0a, 0xbc])),
            }),
        }));
        let ix = ResourceIndex::from_p4info(&p4fleet_proto::p4info::parse_text(P4INFO).unwrap());
        let (ok, _) = settings(
            &Set::of(&set(vec![], vec![register("MyIngress.seen", 2, "2748")])),
            &ix,
        );
        assert_eq!(ok[0].entity, dev);
    }

    #[test]
    fn a_failure_makes_ready_false_and_a_success_leaves_it() {
        let mut st = TableEntrySetStatus {
            conditions: vec![Condition::new("Ready", true, "Synced", "")],
            ..Default::default()
        };
        let mut out = Outcome::default();
        fold(&mut st, &out, true, 10);
        assert!(st.conditions.iter().all(|c| c.is_true()));
        out.fail(
            "SettingInvalid",
            "meters[1]".into(),
            None,
            "pir: low".into(),
        );
        let mut st = TableEntrySetStatus {
            conditions: vec![Condition::new("Ready", true, "Synced", "")],
            ..Default::default()
        };
        fold(&mut st, &out, true, 10);
        let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert!(!ready.is_true());
        assert_eq!(ready.reason, "SettingInvalid");
        assert_eq!(ready.message, "meters[1]: pir: low");
        assert_eq!(st.errors.len(), 1);
        // Not asked for: no condition.
        let mut st = TableEntrySetStatus::default();
        fold(&mut st, &Outcome::default(), false, 10);
        assert!(st.conditions.is_empty());
    }
}
