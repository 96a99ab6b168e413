//! Scenario (e), issue 34's benchmark (docs/rollouts.md, "Benchmark"): a
//! fleet of Switches runs one program under one shared selector set; the
//! program gets a Canary `spec.rollout` (steps of `step_percent` %, an
//! analysis window, a step's VirtualSwitches at once) and a new revision.
//! Measured: each step's time (to every moved VirtualSwitch healthy, then
//! to the next step), the total, and the API requests per Switch moved.
//! Then a revision whose entries the devices refuse (the emulator's
//! injected `fail-updates`, for the next Write of each device): the first
//! step fails its gate, and the clock runs from `RolledBack` seen until
//! every moved Switch runs the old revision again with its entries exact.
//!
//! VirtualSwitches use `updateStrategy: Recreate`, so each move clears the
//! device's tables and the set writes its entries again (a revision that
//! only changes a comment would otherwise be hitless and write nothing,
//! and the refused entries could not fail the gate).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use kube::api::ListParams;
use p4fleet_crds::{P4Program, RolloutPhase, TableEntrySet, VirtualSwitch};
use serde_json::json;

use super::manifests::{PROGRAM, SHARED_SET};
use super::*;

/// How often the program's status is read while a rollout runs.
const POLL: Duration = Duration::from_millis(200);

/// One step of the good rollout.
#[derive(Debug, Clone, Serialize)]
pub struct StepTime {
    pub step: u32,
    /// From the step's start to every VirtualSwitch of it healthy
    /// (devices loading, entries written and read back), as the operator
    /// stamped them (`stepStartedAt`, `healthySince`).
    pub to_healthy: Option<f64>,
    /// From the step's start to the next step's (or `finishedAt`).
    pub seconds: f64,
}

/// What the scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub switches: usize,
    pub entries_per_switch: usize,
    pub step_percent: u32,
    pub analysis_seconds: u32,
    /// The fleet created and every object Ready.
    pub create_seconds: f64,
    pub steps: Vec<StepTime>,
    /// From the new revision applied to the rollout seen Completed.
    pub total_seconds: f64,
    /// API requests from the new revision to Completed (all clients but
    /// this benchmark's polls; watches not counted), per Switch moved.
    pub requests_per_switch: f64,
    pub requests_by_kind: Vec<(String, f64)>,
    /// The bad revision: from applied to `RolledBack` seen.
    pub to_rolled_back: f64,
    /// VirtualSwitches moved by the failed step and sent back.
    pub rolled_back: usize,
    /// From `RolledBack` seen to every moved VirtualSwitch running the old
    /// revision again (its entries not yet written).
    pub reloaded_seconds: f64,
    /// From `RolledBack` seen to every moved Switch on the old revision
    /// with its entries exact (the set Ready, every entry applied).
    /// `RolledBack` is seen within [`POLL`] of the operator writing it.
    pub rollback_seconds: f64,
}

/// POSTs to an emulator's side channel; its answer's body.
fn post(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    Ok(resp)
}

/// Arms (or with `None` clears) a fault on every device of every emulator.
fn faults(env: &Env, query: Option<&str>) -> anyhow::Result<()> {
    for e in &env.emulators {
        for d in 1..=e.devices {
            let path = match query {
                Some(q) => format!("/devices/{d}/faults?{q}"),
                None => format!("/devices/{d}/faults/clear"),
            };
            let r = post(e.stats, &path)?;
            if !r.starts_with("HTTP/1.1 2") {
                bail!("{path}: {}", r.lines().next().unwrap_or_default());
            }
        }
    }
    Ok(())
}

/// The program's status, read now.
async fn program_status(
    programs: &Api<P4Program>,
) -> anyhow::Result<p4fleet_crds::P4ProgramStatus> {
    Ok(programs.get(PROGRAM).await?.status.unwrap_or_default())
}

/// Replaces the program's P4Info with `p4info` plus a comment naming
/// `revision` (a new content, the same program).
async fn new_revision(
    programs: &Api<P4Program>,
    p4info: &str,
    revision: u32,
) -> anyhow::Result<()> {
    let text = format!("{p4info}\n# rollout benchmark, content {revision}\n");
    let patch = json!({"spec": {"p4info": {"inline": text}}});
    programs
        .patch(PROGRAM, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// API requests between two snapshots, by `VERB resource`, without
/// watches, leases and this benchmark's GETs of the program.
fn requests(before: &Snapshot, after: &Snapshot) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for (k, row) in &after.api.rows {
        let was = before.api.rows.get(k).map_or(0.0, |r| r.requests);
        let n = row.requests - was;
        let ours = k.verb == "GET" && k.resource == "p4programs" && k.subresource.is_empty();
        let skip = k.verb == "WATCH" || k.resource == "leases" || k.resource.is_empty() || ours;
        if n > 0.0 && !skip {
            out.push((k.label(), n));
        }
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// Runs the scenario on `switches` Switches.
pub async fn run(
    cp: &ControlPlane,
    cfg: &Config,
    switches: usize,
    step_percent: u32,
    analysis_seconds: u32,
) -> anyhow::Result<Report> {
    let _ = procfs::raise_nofile();
    let mut env = start(cp, cfg, switches).await?;
    let entries = Entries {
        count: cfg.entries,
        change_every: cfg.change_every,
        version: 0,
    };
    let devices = device_list(&env, switches);
    let p4info = p4info(cfg.entries)?;
    let mut objects = manifests::shared_fleet(&p4info, &devices, &entries);
    for o in &mut objects {
        if o["kind"] == "VirtualSwitch" {
            o["spec"]["updateStrategy"] = json!({"type": "Recreate"});
        }
    }
    let total = (switches * cfg.entries) as u64;
    let want = want_all(&objects);
    let created = timed_apply(&mut env, cfg, "create", &objects, &want, total, total).await?;
    eprintln!(
        "rollout bench: {switches} Switches Ready in {:.1} s",
        created.seconds
    );

    let programs: Api<P4Program> = Api::namespaced(env.client.clone(), NAMESPACE);
    let steps: Vec<Value> = (1..=100 / step_percent)
        .map(|i| json!({"percent": i * step_percent}))
        .collect();
    let per_step = (switches * step_percent as usize).div_ceil(100).max(1);
    let rollout = json!({"spec": {"rollout": {"strategy": "Canary", "steps": steps,
        "maxUnavailable": per_step, "analysis": {"seconds": analysis_seconds},
        "progressDeadlineSeconds": 900}}});
    programs
        .patch(PROGRAM, &PatchParams::default(), &Patch::Merge(&rollout))
        .await?;

    // The good revision, step by step.
    let before = env.snapshot().await?;
    new_revision(&programs, &p4info, 2).await?;
    let started = Instant::now();
    // Per step as the operator stamped it: started, every VirtualSwitch
    // healthy (the window's start).
    let mut seen: Vec<(u32, String, Option<String>)> = Vec::new();
    let finished = loop {
        if started.elapsed() > cfg.timeout {
            bail!("the rollout did not complete within {:?}", cfg.timeout);
        }
        let st = program_status(&programs).await?;
        let Some(r) = st.rollout.filter(|r| r.to.revision >= 2) else {
            tokio::time::sleep(POLL).await;
            continue;
        };
        if seen.last().is_none_or(|s| s.0 != r.step) {
            seen.push((r.step, r.step_started_at.clone(), None));
        }
        let last = seen.last_mut().expect("pushed");
        if last.2.is_none() {
            last.2 = r.healthy_since.clone();
        }
        match r.phase {
            RolloutPhase::Completed => break r.finished_at.clone().unwrap_or_default(),
            RolloutPhase::RolledBack => bail!("the good revision rolled back: {:?}", r.failure),
            _ => {}
        }
        tokio::time::sleep(POLL).await;
    };
    let total_seconds = started.elapsed().as_secs_f64();
    let after = env.snapshot().await?;
    let by_kind = requests(&before, &after);
    let all: f64 = by_kind.iter().map(|r| r.1).sum();
    let at = |s: &str| chrono::DateTime::parse_from_rfc3339(s).ok();
    let between = |a: &str, b: &str| match (at(a), at(b)) {
        (Some(a), Some(b)) => Some((b - a).num_milliseconds() as f64 / 1000.0),
        _ => None,
    };
    let steps: Vec<StepTime> = seen
        .iter()
        .filter(|s| s.0 < 100 / step_percent)
        .enumerate()
        .map(|(i, s)| {
            let next = seen.get(i + 1).map_or(finished.as_str(), |n| n.1.as_str());
            StepTime {
                step: s.0,
                to_healthy: s.2.as_deref().and_then(|h| between(&s.1, h)),
                seconds: between(&s.1, next).unwrap_or(f64::NAN),
            }
        })
        .collect();
    eprintln!("rollout bench: revision 2 completed in {total_seconds:.1} s");

    // The bad revision: every device refuses the next Write it gets (every
    // update in it), which is the first step's entries after its load; the
    // gate fails and its VirtualSwitches go back. One Write only, so the
    // rollback's writes are not refused and the clock does not depend on
    // when this process clears the faults.
    faults(&env, Some("kind=fail-updates&every=1&count=1"))?;
    let good = program_status(&programs).await?.digest;
    new_revision(&programs, &p4info, 3).await?;
    let applied = Instant::now();
    let back = loop {
        if applied.elapsed() > cfg.timeout {
            bail!(
                "the bad revision did not roll back within {:?}",
                cfg.timeout
            );
        }
        let r = program_status(&programs).await?.rollout;
        match r {
            Some(r) if r.to.revision >= 3 && r.phase == RolloutPhase::RolledBack => break r,
            _ => tokio::time::sleep(POLL).await,
        }
    };
    let failed_at = Instant::now();
    let to_rolled_back = (failed_at - applied).as_secs_f64();
    let moved: Vec<String> = back
        .moved
        .iter()
        .map(|m| m.virtual_switch.clone())
        .collect();
    let vss: Api<VirtualSwitch> = Api::namespaced(env.client.clone(), NAMESPACE);
    let sets: Api<TableEntrySet> = Api::namespaced(env.client.clone(), NAMESPACE);
    let mut reloaded = None;
    loop {
        if failed_at.elapsed() > cfg.timeout {
            bail!(
                "the moved Switches were not exact again within {:?}",
                cfg.timeout
            );
        }
        let list = vss.list(&ListParams::default()).await?.items;
        let on_old = moved.iter().all(|m| {
            list.iter().any(|v| {
                v.name_any() == *m
                    && v.status.as_ref().and_then(|s| s.loaded_digest.as_ref()) == good.as_ref()
            })
        });
        if on_old && reloaded.is_none() {
            reloaded = Some(failed_at.elapsed().as_secs_f64());
        }
        let set = sets.get(SHARED_SET).await?.status.unwrap_or_default();
        let ready =
            p4fleet_crds::find_condition(&set.conditions, "Ready").is_some_and(|c| c.is_true());
        if on_old && ready && set.applied == total && set.failed == 0 {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let rollback_seconds = failed_at.elapsed().as_secs_f64();
    // Those armed on devices the failed step did not reach.
    faults(&env, None)?;
    let reloaded_seconds = reloaded.unwrap_or(rollback_seconds);
    Ok(Report {
        switches,
        entries_per_switch: cfg.entries,
        step_percent,
        analysis_seconds,
        create_seconds: created.seconds,
        steps,
        total_seconds,
        requests_per_switch: all / switches as f64,
        requests_by_kind: by_kind,
        to_rolled_back,
        rolled_back: moved.len(),
        reloaded_seconds,
        rollback_seconds,
    })
}

impl Report {
    /// The results as the docs show them.
    pub fn markdown(&self) -> String {
        use std::fmt::Write as _;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{} Switches, {} entries each (one shared selector set), steps of {} %, analysis window {} s, `updateStrategy: Recreate`; fleet created and Ready in {:.1} s.\n",
            self.switches,
            self.entries_per_switch,
            self.step_percent,
            self.analysis_seconds,
            self.create_seconds
        );
        let _ = writeln!(
            t,
            "| step | to every moved VirtualSwitch healthy | step time | beyond the window | of it, operator |"
        );
        let _ = writeln!(t, "|---|---|---|---|---|");
        let window = f64::from(self.analysis_seconds);
        for s in &self.steps {
            let healthy = s.to_healthy.map_or("-".into(), |h| format!("{h:.1} s"));
            let beyond = s.seconds - window;
            // Beyond the window and the devices' load and writes: noticing
            // health, the window's timer, deciding the next step.
            let operator = s
                .to_healthy
                .map_or("-".into(), |h| format!("{:.1} s", beyond - h));
            let _ = writeln!(
                t,
                "| {} | {healthy} | {:.1} s | {beyond:.1} s | {operator} |",
                s.step, s.seconds
            );
        }
        let _ = writeln!(
            t,
            "\nTotal {:.1} s; {:.1} API requests per Switch moved ({}).\n",
            self.total_seconds,
            self.requests_per_switch,
            self.requests_by_kind
                .iter()
                .take(6)
                .map(|(k, n)| format!("{k} {n:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            t,
            "Bad revision: `RolledBack` seen {:.1} s after it was applied; from then, its {} moved VirtualSwitches ran the old revision again after {:.1} s and had every entry exact after {:.1} s.",
            self.to_rolled_back, self.rolled_back, self.reloaded_seconds, self.rollback_seconds
        );
        t
    }
}
