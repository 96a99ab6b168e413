//! Watches the fleet's objects and says when every one of them is Ready:
//! one watch per kind (no polling), so the clock stops at the status
//! write that completes the fleet.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::bail;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher::DefaultBackoff};
use kube::{Client, ResourceExt};
use p4fleet_crds::{P4Program, Switch, TableEntrySet, VirtualSwitch};
use serde_json::Value;
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    P4Program,
    Switch,
    VirtualSwitch,
    TableEntrySet,
}

impl Kind {
    pub fn of(kind: &str) -> Option<Kind> {
        Some(match kind {
            "P4Program" => Kind::P4Program,
            "Switch" => Kind::Switch,
            "VirtualSwitch" => Kind::VirtualSwitch,
            "TableEntrySet" => Kind::TableEntrySet,
            _ => return None,
        })
    }

    pub fn resource(self) -> ApiResource {
        match self {
            Kind::P4Program => ApiResource::erase::<P4Program>(&()),
            Kind::Switch => ApiResource::erase::<Switch>(&()),
            Kind::VirtualSwitch => ApiResource::erase::<VirtualSwitch>(&()),
            Kind::TableEntrySet => ApiResource::erase::<TableEntrySet>(&()),
        }
    }
}

/// What the bench reads from an object's status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seen {
    pub ready: bool,
    /// `Ready` reason and message, for a report of what is not Ready.
    pub why: String,
    /// TableEntrySet: when its last writing sync finished.
    pub last_sync_time: Option<String>,
    pub desired: u64,
    pub applied: u64,
    /// TableEntrySet: entries/s of its last writing sync.
    pub entries_per_second: Option<u64>,
}

impl Seen {
    pub fn of(status: Option<&Value>) -> Seen {
        let Some(st) = status else {
            return Seen {
                why: "no status".into(),
                ..Seen::default()
            };
        };
        let ready = st["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
        Seen {
            ready: ready.is_some_and(|c| c["status"] == "True"),
            why: ready
                .map(|c| format!("{}: {}", c["reason"], c["message"]))
                .unwrap_or_else(|| "no Ready condition".into()),
            last_sync_time: st["lastSyncTime"].as_str().map(str::to_string),
            desired: st["desired"].as_u64().unwrap_or(0),
            applied: st["applied"].as_u64().unwrap_or(0),
            entries_per_second: st["entriesPerSecond"].as_u64(),
        }
    }
}

/// What "done" means for one wait.
#[derive(Debug, Clone, Default)]
pub struct Want {
    pub objects: Vec<(Kind, String)>,
    /// TableEntrySets that must also have synced again: their
    /// lastSyncTime must differ from the one given here.
    pub resynced_from: HashMap<String, Option<String>>,
}

type Msg = Option<(Kind, String, Seen)>;

pub struct Tracker {
    rx: mpsc::UnboundedReceiver<Msg>,
    pub seen: HashMap<(Kind, String), Seen>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Tracker {
    /// Starts a watch per kind in `namespace` (Switches: cluster-wide) and
    /// returns once each has listed what exists.
    pub async fn start(client: &Client, namespace: &str) -> anyhow::Result<Tracker> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
        let mut tasks = Vec::new();
        let kinds = [
            Kind::P4Program,
            Kind::Switch,
            Kind::VirtualSwitch,
            Kind::TableEntrySet,
        ];
        for kind in kinds {
            let ar = kind.resource();
            let api: Api<DynamicObject> = if kind == Kind::Switch {
                Api::all_with(client.clone(), &ar)
            } else {
                Api::namespaced_with(client.clone(), namespace, &ar)
            };
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                let mut events = watcher::watcher(api, watcher::Config::default())
                    .backoff(DefaultBackoff::default())
                    .boxed();
                while let Some(ev) = events.next().await {
                    let msg = match ev {
                        Ok(Event::Apply(o) | Event::InitApply(o)) => {
                            Some((kind, o.name_any(), Seen::of(o.data.get("status"))))
                        }
                        Ok(Event::InitDone) => None,
                        _ => continue,
                    };
                    if tx.send(msg).is_err() {
                        return;
                    }
                }
            }));
        }
        let mut seen = HashMap::new();
        let mut inits = 0;
        while inits < kinds.len() {
            match rx.recv().await {
                Some(None) => inits += 1,
                Some(Some((k, n, s))) => {
                    seen.insert((k, n), s);
                }
                None => bail!("watches ended before listing"),
            }
        }
        Ok(Tracker { rx, seen, tasks })
    }

    /// Waits until everything in `want` is Ready; the time it took from
    /// `since`. On timeout, an error naming what is not Ready and why.
    pub async fn wait(
        &mut self,
        want: &Want,
        since: Instant,
        timeout: Duration,
    ) -> anyhow::Result<Duration> {
        let deadline = tokio::time::Instant::from_std(since + timeout);
        loop {
            if self.missing(want, 0).is_empty() {
                return Ok(since.elapsed());
            }
            // timeout_at returns a ready message even past the deadline, so
            // a steady stream of status updates would never time out.
            let next = if tokio::time::Instant::now() >= deadline {
                Err(())
            } else {
                tokio::time::timeout_at(deadline, self.rx.recv())
                    .await
                    .map_err(|_| ())
            };
            match next {
                Ok(Some(Some((k, n, s)))) => {
                    self.seen.insert((k, n), s);
                }
                Ok(Some(None)) => {}
                Ok(None) => bail!("watches ended"),
                Err(_) => {
                    let missing = self.missing(want, 5);
                    bail!(
                        "not Ready after {timeout:?}: {} of {} objects, e.g. {}",
                        self.missing(want, usize::MAX).len(),
                        want.objects.len(),
                        missing.join("; ")
                    )
                }
            }
        }
    }

    /// Up to `limit` (0: any one) objects of `want` not done yet.
    fn missing(&self, want: &Want, limit: usize) -> Vec<String> {
        let mut out = Vec::new();
        for (k, n) in &want.objects {
            let done = match self.seen.get(&(*k, n.clone())) {
                Some(s) => {
                    s.ready
                        && want
                            .resynced_from
                            .get(n)
                            .is_none_or(|before| *before != s.last_sync_time)
                }
                None => false,
            };
            if !done {
                let why = self
                    .seen
                    .get(&(*k, n.clone()))
                    .map(|s| s.why.clone())
                    .unwrap_or_else(|| "not seen".into());
                out.push(format!("{k:?} {n} ({why})"));
                if out.len() >= limit.max(1) {
                    break;
                }
            }
        }
        out
    }

    /// The last sync time of every TableEntrySet seen.
    pub fn last_syncs(&self) -> HashMap<String, Option<String>> {
        self.seen
            .iter()
            .filter(|((k, _), _)| *k == Kind::TableEntrySet)
            .map(|((_, n), s)| (n.clone(), s.last_sync_time.clone()))
            .collect()
    }

    /// Status figures of the TableEntrySets: (desired, applied, entries/s).
    pub fn sets(&self) -> BTreeMap<String, Seen> {
        self.seen
            .iter()
            .filter(|((k, _), _)| *k == Kind::TableEntrySet)
            .map(|((_, n), s)| (n.clone(), s.clone()))
            .collect()
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ready_and_sync_figures_come_from_status() {
        let s = Seen::of(Some(&json!({
            "conditions": [{"type": "Synced", "status": "True"},
                           {"type": "Ready", "status": "True", "reason": "Synced", "message": "ok"}],
            "lastSyncTime": "2026-11-23T00:00:00Z", "desired": 10, "applied": 10,
            "entriesPerSecond": 5000
        })));
        assert!(s.ready);
        assert_eq!(s.last_sync_time.as_deref(), Some("2026-11-23T00:00:00Z"));
        assert_eq!(
            (s.desired, s.applied, s.entries_per_second),
            (10, 10, Some(5000))
        );
        let not = Seen::of(Some(
            &json!({"conditions": [{"type": "Ready", "status": "False", "reason": "Syncing"}]}),
        ));
        assert!(!not.ready);
        assert!(not.why.contains("Syncing"));
        assert!(!Seen::of(None).ready);
    }
}
