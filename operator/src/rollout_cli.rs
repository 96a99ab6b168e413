//! `p4fleet rollout status | history | pause | resume | retry | undo
//! [TYPE/]NAME`: a person's view of a rollout and one-off control over
//! it, as `kubectl rollout` gives for a Deployment (docs/rollouts.md,
//! "From the command line"). NAME is a P4Program; `tes/NAME` a selector
//! TableEntrySet, whose rollout moves entries revisions the same way.
//!
//! The pure parts are separate and unit-tested: [`Rolled`] (what the
//! commands read of either kind), [`render`] (status.rollout as text),
//! [`settled`] (when `--watch` stops), [`history`] (the kept revisions
//! as text), and the patches ([`pause_patch`], [`resume_patch`],
//! [`retry_patch`], [`undo_patch`] with [`undo_target`]).
//! [`run`] does the API calls. Every change is a JSON merge patch, as
//! `kubectl rollout pause` makes one, not a server-side apply: a person's
//! one-off change should not take ownership of `spec.rollout` away from
//! the GitOps tool that manages the object (with Argo CD self-heal on,
//! Git wins; a lasting pause or pin belongs in Git).

use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use p4fleet_crds::condition_types::READY;
use p4fleet_crds::{
    MovedState, P4Program, Rollout, RolloutPhase, RolloutRevision, RolloutStatus, RolloutStep,
    RolloutStrategy, TableEntrySet, find_condition,
};
use serde_json::{Value, json};

use crate::artifacts::short_digest;
use crate::cli::RolloutCommand;
use crate::fleet::rollout::{self, RESUME_ANNOTATION, RETRY_ANNOTATION, Step};
use crate::fleet::{entry_revisions, revisions};

/// How often `status --watch` reads the object again.
const POLL: Duration = Duration::from_secs(2);

/// The kinds that roll out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Program,
    EntrySet,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Program => "P4Program",
            Kind::EntrySet => "TableEntrySet",
        }
    }

    /// What a rollout moves, in the status text.
    fn moves(self) -> &'static str {
        match self {
            Kind::Program => "VirtualSwitches",
            Kind::EntrySet => "targets",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The object a command names: `NAME` (a P4Program) or `TYPE/NAME` as
/// kubectl takes it (`p4p/NAME`, `tes/NAME`, the kind or its plural).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub kind: Kind,
    pub name: String,
}

/// Reads `NAME` or `TYPE/NAME` (a clap value parser).
pub fn parse_object(s: &str) -> Result<Object, String> {
    let (kind, name) = match s.split_once('/') {
        None => (Kind::Program, s),
        Some((t, name)) => {
            let kind = match t.to_ascii_lowercase().as_str() {
                "p4p" | "p4program" | "p4programs" | "p4programs.p4fleet.dev" => Kind::Program,
                "tes" | "tableentryset" | "tableentrysets" | "tableentrysets.p4fleet.dev" => {
                    Kind::EntrySet
                }
                _ => {
                    return Err(format!(
                        "{t:?} does not roll out: give a P4Program (NAME or p4p/NAME) or a TableEntrySet (tes/NAME)"
                    ));
                }
            };
            (kind, name)
        }
    };
    if name.is_empty() || name.contains('/') {
        return Err(format!("{s:?} is not NAME or TYPE/NAME"));
    }
    Ok(Object {
        kind,
        name: name.to_string(),
    })
}

/// What the commands read of a P4Program or a TableEntrySet: its
/// rollout spec and status, and the revisions its status names.
#[derive(Debug, Clone, PartialEq)]
pub struct Rolled {
    pub kind: Kind,
    pub name: String,
    pub namespace: String,
    pub generation: Option<i64>,
    pub spec: Option<Rollout>,
    /// None: the operator has not written a status yet.
    pub status: Option<RolledStatus>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct RolledStatus {
    pub observed_generation: Option<i64>,
    /// The revision the whole fleet ran last.
    pub current: Option<RolloutRevision>,
    /// The revision of the content read now (absent while a set's is
    /// pinned: its status names only the pinned one).
    pub update: Option<RolloutRevision>,
    pub rollout: Option<RolloutStatus>,
    /// With no rollout status: whether the fleet holds what the spec asks.
    pub steady: bool,
}

impl Rolled {
    fn display(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }

    fn pin(&self) -> Option<i64> {
        self.spec.as_ref().and_then(|r| r.pin_revision)
    }

    fn rollout(&self) -> Option<&RolloutStatus> {
        self.status.as_ref()?.rollout.as_ref()
    }

    /// The revision the fleet is to hold: the pin, else the update.
    fn in_force(&self) -> Option<i64> {
        let update = self.status.as_ref()?.update.as_ref().map(|u| u.revision);
        self.pin().or(update)
    }
}

fn as_rev(r: &p4fleet_crds::RevisionRef) -> RolloutRevision {
    RolloutRevision {
        revision: r.revision,
        digest: r.digest.clone(),
    }
}

impl From<&P4Program> for Rolled {
    fn from(p: &P4Program) -> Rolled {
        let mut r = Rolled {
            kind: Kind::Program,
            name: p.name_any(),
            namespace: p.namespace().unwrap_or_default(),
            generation: p.metadata.generation,
            spec: p.spec.rollout.clone(),
            status: p.status.as_ref().map(|s| RolledStatus {
                observed_generation: s.observed_generation,
                current: s.current_revision.as_ref().map(as_rev),
                update: s.update_revision.as_ref().map(as_rev),
                rollout: s.rollout.clone(),
                steady: false,
            }),
        };
        // Steady: the whole fleet runs the revision in force.
        let in_force = r.in_force();
        if let Some(st) = &mut r.status {
            st.steady = in_force.is_some() && st.current.as_ref().map(|c| c.revision) == in_force;
        }
        r
    }
}

impl From<&TableEntrySet> for Rolled {
    /// A set's status names its revisions in `status.rollout` only: at
    /// rest (Completed) the one its targets hold, else `from` (where
    /// they were) and `to` (the content read now, or the pinned one).
    fn from(set: &TableEntrySet) -> Rolled {
        let pinned = set
            .spec
            .rollout
            .as_ref()
            .is_some_and(|r| r.pin_revision.is_some());
        Rolled {
            kind: Kind::EntrySet,
            name: set.name_any(),
            namespace: set.namespace().unwrap_or_default(),
            generation: set.metadata.generation,
            spec: set.spec.rollout.clone(),
            status: set.status.as_ref().map(|s| {
                let r = s.rollout.as_ref();
                let current = r.and_then(|r| match r.phase {
                    RolloutPhase::Completed => Some(r.to.clone()),
                    _ => r.from.clone(),
                });
                RolledStatus {
                    observed_generation: s.observed_generation,
                    current,
                    update: r.filter(|_| !pinned).map(|r| r.to.clone()),
                    rollout: s.rollout.clone(),
                    steady: find_condition(&s.conditions, READY).is_some_and(|c| c.is_true()),
                }
            }),
        }
    }
}

/// What stops a command (exit code 2). Each names the object.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no cluster to talk to (KUBECONFIG, ~/.kube/config or in-cluster): {0}")]
    Client(#[source] Box<kube::Error>),
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        kind: Kind,
        name: String,
        namespace: String,
    },
    #[error("{kind} {namespace}/{name}: {action}: {source}")]
    Api {
        kind: Kind,
        name: String,
        namespace: String,
        action: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("{kind} {namespace}/{name}: nothing to retry: {why}")]
    Retry {
        kind: Kind,
        name: String,
        namespace: String,
        why: String,
    },
    #[error("{kind} {namespace}/{name}: cannot undo: {refusal}")]
    Undo {
        kind: Kind,
        name: String,
        namespace: String,
        refusal: Refusal,
    },
    #[error(
        "{kind} {namespace}/{name}: the rollout did not finish, roll back or pause within {timeout:?}"
    )]
    Timeout {
        kind: Kind,
        name: String,
        namespace: String,
        timeout: Duration,
    },
    #[error("tokio runtime: {0}")]
    Runtime(std::io::Error),
    #[error("writing output: {0}")]
    Output(std::io::Error),
}

/// How a command ended when nothing stopped it: exit code 0 or 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// `status --watch` saw the rollout roll back.
    RolledBack,
}

/// Why `undo` has no revision to go back to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0}")]
    NothingBefore(String),
    #[error("revision {revision} is not kept (kept: {kept}); {how}")]
    NotKept {
        revision: i64,
        kept: String,
        how: &'static str,
    },
}

/// Runs one `rollout` subcommand against the cluster of KUBECONFIG (as
/// kubectl finds it); results on `out`, notes on `diag`.
pub fn run(
    cmd: RolloutCommand,
    out: &mut dyn Write,
    diag: &mut dyn Write,
) -> Result<Outcome, Error> {
    crate::cli::block_on(run_async(cmd, out, diag)).map_err(Error::Runtime)?
}

async fn run_async(
    cmd: RolloutCommand,
    out: &mut dyn Write,
    diag: &mut dyn Write,
) -> Result<Outcome, Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = Client::try_default()
        .await
        .map_err(|e| Error::Client(Box::new(e)))?;
    let args = match &cmd {
        RolloutCommand::Status { object, .. }
        | RolloutCommand::Pause(object)
        | RolloutCommand::Resume(object)
        | RolloutCommand::Retry(object)
        | RolloutCommand::Undo { object, .. }
        | RolloutCommand::History(object) => object,
    };
    let target = Target {
        namespace: args
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string()),
        kind: args.object.kind,
        name: args.object.name.clone(),
        client,
    };
    match cmd {
        RolloutCommand::Status { watch, timeout, .. } => {
            if !watch {
                let r = target.get().await?;
                out.write_all(render(&r).as_bytes())
                    .map_err(Error::Output)?;
                return Ok(Outcome::Done);
            }
            match tokio::time::timeout(timeout, target.watch(out)).await {
                Ok(r) => r,
                Err(_) => Err(Error::Timeout {
                    kind: target.kind,
                    name: target.name.clone(),
                    namespace: target.namespace.clone(),
                    timeout,
                }),
            }
        }
        RolloutCommand::History(_) => {
            let (r, uid) = target.get_with_uid().await?;
            let kept = target.kept(uid.as_deref()).await?;
            out.write_all(history(&r, &kept).as_bytes())
                .map_err(Error::Output)?;
            Ok(Outcome::Done)
        }
        RolloutCommand::Pause(_) => {
            let r = target.get().await?;
            let was = r.spec.as_ref().is_some_and(|r| r.paused);
            target.patch(&pause_patch(), "pause").await?;
            let note = if was { " (it was already)" } else { "" };
            writeln!(out, "{} paused{note}", r.display()).map_err(Error::Output)?;
            if r.spec.as_ref().is_none_or(|r| {
                r.strategy == RolloutStrategy::AllAtOnce && r.pin_revision.is_none()
            }) {
                writeln!(
                    diag,
                    "note: strategy AllAtOnce: a pause holds nothing back (it acts on Canary rollouts and pins)"
                )
                .map_err(Error::Output)?;
            }
            Ok(Outcome::Done)
        }
        RolloutCommand::Resume(_) => {
            let r = target.get().await?;
            let resume = indefinite_pause(&r);
            target.patch(&resume_patch(&r), "resume").await?;
            match resume {
                Some(p) => writeln!(
                    out,
                    "{} resumed: passes steps[{}] (an indefinite pause) of revision {}'s rollout ({RESUME_ANNOTATION}={}/{})",
                    r.display(),
                    p.step,
                    p.revision,
                    p.revision,
                    p.step
                ),
                None => writeln!(out, "{} resumed", r.display()),
            }
            .map_err(Error::Output)?;
            Ok(Outcome::Done)
        }
        RolloutCommand::Retry(_) => {
            let r = target.get().await?;
            let patch = retry_patch(&r).map_err(|why| Error::Retry {
                kind: target.kind,
                name: target.name.clone(),
                namespace: target.namespace.clone(),
                why,
            })?;
            target.patch(&patch, "retry").await?;
            let value = &patch["metadata"]["annotations"][RETRY_ANNOTATION];
            writeln!(
                out,
                "{} retries its rolled-back revision from the first step ({RETRY_ANNOTATION}={})",
                r.display(),
                value.as_str().unwrap_or_default()
            )
            .map_err(Error::Output)?;
            Ok(Outcome::Done)
        }
        RolloutCommand::Undo { to_revision, .. } => {
            let (r, uid) = target.get_with_uid().await?;
            let kept: Vec<i64> = target
                .kept(uid.as_deref())
                .await?
                .iter()
                .map(|k| k.revision)
                .collect();
            let to = undo_target(&r, &kept, to_revision).map_err(|refusal| Error::Undo {
                kind: target.kind,
                name: target.name.clone(),
                namespace: target.namespace.clone(),
                refusal,
            })?;
            target.patch(&undo_patch(to), "undo").await?;
            writeln!(
                out,
                "{} rolled back: spec.rollout.pinRevision={to}",
                r.display()
            )
            .map_err(Error::Output)?;
            writeln!(
                diag,
                "note: a one-off change; where Git manages this {}, commit `pinRevision: {to}` there, or the next sync removes the pin",
                target.kind
            )
            .map_err(Error::Output)?;
            Ok(Outcome::Done)
        }
    }
}

/// The object a command acts on.
struct Target {
    client: Client,
    kind: Kind,
    namespace: String,
    name: String,
}

impl Target {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The objects of the namespace with the labels `selector`; `what`
    /// names the request in an error.
    async fn labelled<K>(&self, selector: &str, what: &'static str) -> Result<Vec<K>, Error>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let list = self
            .api::<K>()
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| self.api_error(what, e))?;
        Ok(list.items)
    }

    fn not_found(&self) -> Error {
        Error::NotFound {
            kind: self.kind,
            name: self.name.clone(),
            namespace: self.namespace.clone(),
        }
    }

    fn api_error(&self, action: &'static str, source: kube::Error) -> Error {
        Error::Api {
            kind: self.kind,
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            action,
            source: Box::new(source),
        }
    }

    async fn get(&self) -> Result<Rolled, Error> {
        Ok(self.get_with_uid().await?.0)
    }

    /// The object as [`Rolled`], and its uid (what its revisions name).
    async fn get_with_uid(&self) -> Result<(Rolled, Option<String>), Error> {
        let read = match self.kind {
            Kind::Program => self
                .api::<P4Program>()
                .get_opt(&self.name)
                .await
                .map(|o| o.map(|p| (Rolled::from(&p), p.uid()))),
            Kind::EntrySet => self
                .api::<TableEntrySet>()
                .get_opt(&self.name)
                .await
                .map(|o| o.map(|s| (Rolled::from(&s), s.uid()))),
        };
        match read {
            Ok(Some(got)) => Ok(got),
            Ok(None) => Err(self.not_found()),
            Err(e) => Err(self.api_error("read", e)),
        }
    }

    async fn patch(&self, patch: &Value, action: &'static str) -> Result<(), Error> {
        let pp = PatchParams::default();
        let patch = Patch::Merge(patch);
        let done = match self.kind {
            Kind::Program => self
                .api::<P4Program>()
                .patch(&self.name, &pp, &patch)
                .await
                .map(drop),
            Kind::EntrySet => self
                .api::<TableEntrySet>()
                .patch(&self.name, &pp, &patch)
                .await
                .map(drop),
        };
        match done {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Err(self.not_found()),
            Err(e) => Err(self.api_error(action, e)),
        }
    }

    /// The revision numbers kept for the object of `uid`, that the
    /// operator can read back (what a pin may name): a program's
    /// ControllerRevisions (matched by owner reference, since the
    /// program label is left off long names), a set's revision
    /// ConfigMaps (by the uid label).
    async fn kept(&self, uid: Option<&str>) -> Result<Vec<revisions::Kept>, Error> {
        let mut kept: Vec<revisions::Kept> = match self.kind {
            Kind::Program => {
                let (k, v) = revisions::MANAGED_BY;
                let what = "list its ControllerRevisions";
                let list: Vec<ControllerRevision> =
                    self.labelled(&format!("{k}={v}"), what).await?;
                list.iter()
                    .filter(|cr| {
                        cr.owner_references().iter().any(|o| {
                            o.kind == "P4Program"
                                && o.name == self.name
                                && uid.is_none_or(|u| u == o.uid)
                        })
                    })
                    .filter_map(revisions::kept)
                    .collect()
            }
            Kind::EntrySet => {
                let Some(uid) = uid else {
                    return Ok(Vec::new());
                };
                let label = entry_revisions::SET_LABEL;
                let what = "list its revision ConfigMaps";
                let list: Vec<ConfigMap> = self.labelled(&format!("{label}={uid}"), what).await?;
                list.iter().filter_map(entry_revisions::kept).collect()
            }
        };
        kept.sort_by_key(|k| k.revision);
        kept.dedup_by_key(|k| k.revision);
        Ok(kept)
    }

    /// Prints the status each time it changes until [`settled`].
    async fn watch(&self, out: &mut dyn Write) -> Result<Outcome, Error> {
        let mut last = String::new();
        loop {
            let r = self.get().await?;
            let text = render(&r);
            if text != last {
                if !last.is_empty() {
                    writeln!(out).map_err(Error::Output)?;
                }
                out.write_all(text.as_bytes()).map_err(Error::Output)?;
                out.flush().map_err(Error::Output)?;
                last = text;
            }
            if let Some(s) = settled(&r) {
                writeln!(out, "{}", s.summary(&r)).map_err(Error::Output)?;
                return Ok(match s {
                    Settled::RolledBack => Outcome::RolledBack,
                    _ => Outcome::Done,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// `spec.rollout.paused: true`: nothing more moves, nothing rolls back.
pub fn pause_patch() -> Value {
    json!({"spec": {"rollout": {"paused": true}}})
}

/// `spec.rollout.paused: false`, and, when the rollout waits at an
/// indefinite `pause: {}` step, the resume annotation that passes that
/// step (of that revision only, so it cannot pass a later one).
pub fn resume_patch(p: &Rolled) -> Value {
    let mut patch = json!({"spec": {"rollout": {"paused": false}}});
    if let Some(r) = indefinite_pause(p) {
        patch["metadata"] = json!({"annotations": {
            RESUME_ANNOTATION: format!("{}/{}", r.revision, r.step)
        }});
    }
    patch
}

/// The annotation that retries the rollout's revision once after the
/// rollback it ended in (`<revision>@<finishedAt>`); why not when it did
/// not roll back.
pub fn retry_patch(p: &Rolled) -> Result<Value, String> {
    let Some(r) = p.rollout() else {
        return Err(format!("the {} has no rollout", p.kind));
    };
    let at = match (r.phase, &r.finished_at) {
        (RolloutPhase::RolledBack, Some(at)) => at,
        (phase, _) => {
            return Err(format!(
                "the rollout of revision {} is {phase:?}, not RolledBack",
                r.to.revision
            ));
        }
    };
    Ok(json!({"metadata": {"annotations": {
        RETRY_ANNOTATION: format!("{}@{at}", r.to.revision)
    }}}))
}

/// The rollout's current step when it is an indefinite pause of a
/// rollout not finished: the revision rolled out and the step.
fn indefinite_pause(p: &Rolled) -> Option<rollout::Resume> {
    let st = p.rollout()?;
    if !matches!(st.phase, RolloutPhase::Progressing | RolloutPhase::Paused) {
        return None;
    }
    let spec = p.spec.as_ref()?;
    // The operator's own reading of the steps; a spec it cannot follow
    // (a bad duration) is not waiting on any pause.
    let steps = rollout::plan(spec, 1).ok()?;
    match (spec.strategy, steps.get(st.step as usize)) {
        (RolloutStrategy::Canary, Some(Step::Pause(None))) => Some(rollout::Resume {
            revision: st.to.revision,
            step: st.step,
        }),
        _ => None,
    }
}

/// `spec.rollout.pinRevision: revision`.
pub fn undo_patch(revision: i64) -> Value {
    json!({"spec": {"rollout": {"pinRevision": revision}}})
}

/// The revision `undo` pins, among the revision numbers `kept`:
///
/// 1. `--to-revision N`, when N is kept;
/// 2. else, while a rollout is in progress, paused or rolled back, the
///    revision it started from (`status.rollout.from`): where the fleet
///    was before this change;
/// 3. else, when the fleet has not caught up (`status.currentRevision`
///    differs from the revision in force, the pin or else
///    `status.updateRevision`), the current revision;
/// 4. else the highest kept revision below the one in force, so a second
///    undo goes one further back (unlike `kubectl rollout undo`, which
///    swaps between the last two: here the newest content stays the
///    highest number until it changes).
///
/// The revision chosen must be kept, or the operator could not load it.
pub fn undo_target(p: &Rolled, kept: &[i64], to_revision: Option<i64>) -> Result<i64, Refusal> {
    let must_be_kept = |revision: i64| {
        if kept.contains(&revision) {
            Ok(revision)
        } else {
            Err(Refusal::NotKept {
                revision,
                kept: list(kept),
                how: match p.kind {
                    Kind::Program => {
                        "`kubectl get controllerrevisions -l p4fleet.dev/program=NAME` lists them"
                    }
                    Kind::EntrySet => {
                        "`kubectl get configmaps -L p4fleet.dev/entries-revision` lists them (NAME-entries-*)"
                    }
                },
            })
        }
    };
    if let Some(n) = to_revision {
        return must_be_kept(n);
    }
    let status = p.status.clone().unwrap_or_default();
    if let Some(r) = &status.rollout
        && matches!(
            r.phase,
            RolloutPhase::Progressing | RolloutPhase::Paused | RolloutPhase::RolledBack
        )
        && let Some(from) = &r.from
    {
        return must_be_kept(from.revision);
    }
    let Some(in_force) = p.in_force() else {
        return Err(Refusal::NothingBefore(format!(
            "it has no revision yet ({}): the operator has not recorded its content",
            match p.kind {
                Kind::Program => "no status.updateRevision",
                Kind::EntrySet => "no status.rollout",
            }
        )));
    };
    if let Some(c) = &status.current
        && c.revision != in_force
    {
        return must_be_kept(c.revision);
    }
    kept.iter()
        .copied()
        .filter(|k| *k < in_force)
        .max()
        .ok_or_else(|| {
            Refusal::NothingBefore(format!(
                "no revision before revision {in_force} is kept (kept: {})",
                list(kept)
            ))
        })
}

/// The kept revisions of `p`, oldest first, each with its digest, the
/// object that keeps it and what the status says of it (current, update,
/// pinned, the rollout's from and to), as `kubectl rollout history`
/// lists a Deployment's.
pub fn history(p: &Rolled, kept: &[revisions::Kept]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{} {}/{}", p.kind, p.namespace, p.name);
    if kept.is_empty() {
        let _ = writeln!(
            s,
            "  no revision kept yet: the operator records one for each content it rolls out"
        );
        return s;
    }
    let status = p.status.clone().unwrap_or_default();
    let rollout = status.rollout.as_ref();
    let width = kept.iter().map(|k| k.name.len()).max().unwrap_or(0);
    let _ = writeln!(s, "  REVISION  DIGEST        {:width$}  NOTES", "KEPT IN");
    for k in kept {
        let mut notes = Vec::new();
        let is = |r: Option<&RolloutRevision>| r.is_some_and(|r| r.revision == k.revision);
        if is(status.current.as_ref()) {
            notes.push("current".to_string());
        }
        if is(status.update.as_ref()) {
            notes.push("update".to_string());
        }
        if p.pin() == Some(k.revision) {
            notes.push("pinned".to_string());
        }
        if let Some(r) = rollout {
            if is(r.from.as_ref()) && r.phase != RolloutPhase::Completed {
                notes.push(format!("rollout from ({:?})", r.phase));
            }
            if r.to.revision == k.revision && r.phase != RolloutPhase::Completed {
                notes.push(format!("rollout to ({:?})", r.phase));
            }
        }
        let _ = writeln!(
            s,
            "  {:<8}  {}  {:width$}  {}",
            k.revision,
            short_digest(&k.digest),
            k.name,
            notes.join(", ")
        );
    }
    s
}

fn list(revisions: &[i64]) -> String {
    if revisions.is_empty() {
        return "none".into();
    }
    let v: Vec<String> = revisions.iter().map(i64::to_string).collect();
    v.join(", ")
}

/// Where `status --watch` stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The rollout completed (exit 0).
    Completed,
    /// No staged rollout, and the fleet runs the revision in force.
    Steady,
    /// A gate failed (exit 1).
    RolledBack,
    /// At a pause step or `spec.rollout.paused` (exit 0: waiting on a person).
    Paused,
}

impl Settled {
    /// The last line `--watch` prints.
    fn summary(self, p: &Rolled) -> String {
        let st = p.rollout();
        let to = st.map_or_else(String::new, |r| format!(" of revision {}", r.to.revision));
        match self {
            Settled::Completed => format!("rollout{to} complete"),
            Settled::Steady => match p.kind {
                Kind::Program => "the fleet runs the revision in force".into(),
                Kind::EntrySet => "every target holds the set's entries (Ready)".into(),
            },
            Settled::RolledBack => {
                let why = st
                    .and_then(|r| r.failure.as_ref())
                    .map_or_else(String::new, |f| format!(": {}", failure(f)));
                format!("rollout{to} rolled back{why}")
            }
            Settled::Paused => format!(
                "rollout{to} paused; resume with `p4fleet rollout resume {}{} -n {}`",
                prefix(p.kind),
                p.name,
                p.namespace
            ),
        }
    }
}

/// Whether the rollout of `p` has come to rest, as far as its status
/// says. A status older than the spec (`observedGeneration`), or a
/// rollout of another revision than the one in force, has not.
pub fn settled(p: &Rolled) -> Option<Settled> {
    let status = p.status.as_ref()?;
    if let (Some(seen), Some(generation)) = (status.observed_generation, p.generation)
        && seen < generation
    {
        return None;
    }
    let in_force = p.in_force();
    match &status.rollout {
        Some(r) => {
            if in_force.is_some_and(|f| f != r.to.revision) {
                return None;
            }
            match r.phase {
                RolloutPhase::Completed => Some(Settled::Completed),
                RolloutPhase::RolledBack => Some(Settled::RolledBack),
                RolloutPhase::Paused => Some(Settled::Paused),
                RolloutPhase::Progressing => None,
            }
        }
        None => status.steady.then_some(Settled::Steady),
    }
}

/// `revision 3 (a54f3b9f5505)`.
fn revision(r: &RolloutRevision) -> String {
    format!("revision {} ({})", r.revision, short_digest(&r.digest))
}

/// What a command names the object by: nothing for a P4Program (the
/// default kind), `tes/` for a set.
fn prefix(kind: Kind) -> &'static str {
    match kind {
        Kind::Program => "",
        Kind::EntrySet => "tes/",
    }
}

fn failure(f: &p4fleet_crds::GateFailure) -> String {
    let on = f
        .switch
        .as_ref()
        .map_or_else(String::new, |s| format!(" (Switch {s})"));
    format!(
        "{} failed on VirtualSwitch {}{on}: {}",
        f.check, f.virtual_switch, f.message
    )
}

/// The steps the operator follows: a step with none of its fields is
/// skipped, as [`rollout::plan`] skips it (the schema refuses one).
fn steps(p: &Rolled) -> Vec<&RolloutStep> {
    p.spec
        .as_ref()
        .filter(|r| r.strategy == RolloutStrategy::Canary)
        .map(|r| {
            r.steps
                .iter()
                .filter(|s| s.switches.is_some() || s.percent.is_some() || s.pause.is_some())
                .collect()
        })
        .unwrap_or_default()
}

fn describe(s: &RolloutStep) -> String {
    match (&s.switches, &s.percent, &s.pause) {
        (Some(n), _, _) => format!("switches: {n}"),
        (_, Some(pc), _) => format!("percent: {pc}"),
        (_, _, Some(pause)) => match &pause.duration {
            Some(d) => format!("pause {d}"),
            None => "pause until resumed".into(),
        },
        (None, None, None) => "empty".into(),
    }
}

/// `p`'s rollout as text for a person: the strategy, the revisions, the
/// step, the counts, every moved VirtualSwitch, the failure and the
/// times; or why there is no rollout.
pub fn render(p: &Rolled) -> String {
    let mut s = String::new();
    let (name, ns, kind) = (&p.name, &p.namespace, p.kind);
    let spec = p.spec.clone().unwrap_or_default();
    let steps = steps(p);
    // Writing to a String cannot fail.
    let _ = writeln!(s, "{kind} {ns}/{name}");
    let _ = write!(s, "  strategy: {:?}", spec.strategy);
    if spec.strategy == RolloutStrategy::Canary {
        let _ = write!(s, ", {} steps", steps.len());
    }
    if spec.paused {
        let _ = write!(s, ", paused (spec.rollout.paused)");
    }
    if let Some(pin) = spec.pin_revision {
        let _ = write!(s, ", pinned to revision {pin} (spec.rollout.pinRevision)");
    }
    s.push('\n');
    let Some(status) = &p.status else {
        let _ = writeln!(
            s,
            "  no status yet: the operator has not reconciled this {kind}"
        );
        return s;
    };
    let revisions = match (&status.current, &status.update) {
        (Some(c), Some(u)) => format!("current {}, update {}", revision(c), revision(u)),
        (None, Some(u)) => format!("update {}, no current revision yet", revision(u)),
        (Some(c), None) => format!("current {}", revision(c)),
        (None, None) => "none recorded yet".into(),
    };
    let Some(r) = &status.rollout else {
        let why = match spec.strategy {
            RolloutStrategy::AllAtOnce => match kind {
                Kind::Program => "strategy AllAtOnce moves every VirtualSwitch at once",
                Kind::EntrySet => "strategy AllAtOnce writes every target at once",
            },
            RolloutStrategy::Canary => {
                "nothing rolled out in steps yet (the first content is never staged)"
            }
        };
        let _ = writeln!(s, "  no rollout: {why}");
        let _ = writeln!(s, "  revisions: {revisions}");
        return s;
    };
    let _ = writeln!(s, "  rollout: {:?}", r.phase);
    let from = r
        .from
        .as_ref()
        .map_or_else(|| "nothing".to_string(), revision);
    let _ = writeln!(s, "  from {from} to {}", revision(&r.to));
    let _ = writeln!(s, "  revisions: {revisions}");
    let n = steps.len();
    let at = r.step as usize;
    let step = match steps.get(at) {
        _ if n == 0 => "no steps".to_string(),
        Some(st) => {
            let mut line = format!("step {} of {n}: steps[{at}] {}", at + 1, describe(st));
            if st.pause.as_ref().is_some_and(|p| p.duration.is_none())
                && r.phase == RolloutPhase::Paused
            {
                let _ = write!(
                    line,
                    " (p4fleet rollout resume {}{name} -n {ns})",
                    prefix(kind)
                );
            }
            line
        }
        None => format!("all {n} steps done"),
    };
    let _ = writeln!(s, "  {step}");
    let _ = writeln!(
        s,
        "  {}: {} updated, {} healthy, {} pending, {} rolled back",
        kind.moves(),
        r.updated,
        r.healthy,
        r.pending,
        r.rolled_back
    );
    if !r.moved.is_empty() {
        let _ = writeln!(s, "  moved:");
        for m in &r.moved {
            let on = m
                .switch
                .as_ref()
                .map_or_else(String::new, |sw| format!(" on Switch {sw}"));
            let state = match m.state {
                MovedState::Moving => "Moving",
                MovedState::Healthy => "Healthy",
                MovedState::Failed => "Failed",
                MovedState::RolledBack => "RolledBack",
            };
            let _ = writeln!(
                s,
                "    {}{on}: {state} (moved at steps[{}])",
                m.virtual_switch, m.step
            );
        }
    }
    if let Some(f) = &r.failure {
        let _ = writeln!(s, "  failure: {}", failure(f));
    }
    let times = [
        ("started", Some(&r.started_at)),
        ("step started", Some(&r.step_started_at)),
        ("healthy since", r.healthy_since.as_ref()),
        ("progressed", r.progressed_at.as_ref()),
        ("finished", r.finished_at.as_ref()),
    ];
    let times: Vec<String> = times
        .iter()
        .filter_map(|(k, v)| v.filter(|v| !v.is_empty()).map(|v| format!("{k} {v}")))
        .collect();
    if !times.is_empty() {
        let _ = writeln!(s, "  {}", times.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::{GateFailure, MovedSwitch, P4ProgramStatus, RevisionRef, RolloutStatus};

    // The pure functions as the program tests call them: on a P4Program
    // read as [`Rolled`].
    fn render(p: &P4Program) -> String {
        super::render(&p.into())
    }
    fn settled(p: &P4Program) -> Option<Settled> {
        super::settled(&p.into())
    }
    fn undo_target(p: &P4Program, kept: &[i64], to: Option<i64>) -> Result<i64, Refusal> {
        super::undo_target(&p.into(), kept, to)
    }
    fn retry_patch(p: &P4Program) -> Result<Value, String> {
        super::retry_patch(&p.into())
    }
    fn resume_patch(p: &P4Program) -> Value {
        super::resume_patch(&p.into())
    }

    const D1: &str = "1111111111111111aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const D2: &str = "2222222222222222bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const D3: &str = "3333333333333333cccccccccccccccccccccccccccccccccccccccccccccccc";

    fn digest(n: i64) -> &'static str {
        match n {
            1 => D1,
            2 => D2,
            _ => D3,
        }
    }

    fn rref(n: i64) -> RevisionRef {
        RevisionRef {
            name: format!("fw-{}", &digest(n)[..16]),
            revision: n,
            digest: digest(n).into(),
        }
    }

    fn rrev(n: i64) -> RolloutRevision {
        RolloutRevision {
            revision: n,
            digest: digest(n).into(),
        }
    }

    /// Program `fw` in `team-a` with `rollout` as its spec.rollout.
    fn program(rollout: Value) -> P4Program {
        serde_json::from_value(json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
            "metadata": {"name": "fw", "namespace": "team-a", "generation": 1},
            "spec": {"p4info": {"inline": "x"}, "rollout": rollout}
        }))
        .unwrap()
    }

    fn canary() -> Value {
        json!({"strategy": "Canary", "steps": [
            {"switches": 1}, {"pause": {"duration": "5m"}}, {"pause": {}}, {"percent": 100}
        ]})
    }

    fn in_progress(phase: RolloutPhase, step: u32) -> RolloutStatus {
        RolloutStatus {
            phase,
            from: Some(rrev(1)),
            to: rrev(2),
            step,
            step_started_at: "2026-01-02T03:04:05Z".into(),
            started_at: "2026-01-02T03:00:00Z".into(),
            updated: 1,
            healthy: 1,
            pending: 3,
            moved: vec![MovedSwitch {
                virtual_switch: "vs-0".into(),
                switch: Some("edge-1".into()),
                step: 0,
                state: MovedState::Healthy,
                packets_per_second_before: None,
            }],
            ..Default::default()
        }
    }

    fn with_status(
        mut p: P4Program,
        rollout: Option<RolloutStatus>,
        cur: i64,
        upd: i64,
    ) -> P4Program {
        p.status = Some(P4ProgramStatus {
            observed_generation: Some(1),
            current_revision: Some(rref(cur)),
            update_revision: Some(rref(upd)),
            rollout,
            ..Default::default()
        });
        p
    }

    /// Asserts that `text` says each of `parts`.
    fn assert_says(text: &str, parts: &[&str]) {
        for part in parts {
            assert!(text.contains(part), "{part:?} is not in:\n{text}");
        }
    }

    #[test]
    fn status_renders_phase_revisions_step_counts_moved_and_times() {
        let p = with_status(
            program(canary()),
            Some(in_progress(RolloutPhase::Paused, 2)),
            1,
            2,
        );
        let text = render(&p);
        assert!(text.starts_with("P4Program team-a/fw\n"), "{text}");
        assert_says(
            &text,
            &[
                "strategy: Canary, 4 steps",
                "rollout: Paused",
                "from revision 1 (111111111111) to revision 2 (222222222222)",
                "step 3 of 4: steps[2] pause until resumed (p4fleet rollout resume fw -n team-a)",
                "VirtualSwitches: 1 updated, 1 healthy, 3 pending, 0 rolled back",
                "vs-0 on Switch edge-1: Healthy (moved at steps[0])",
                "started 2026-01-02T03:00:00Z, step started 2026-01-02T03:04:05Z",
            ],
        );
        assert!(!text.contains("failure"), "{text}");
        assert!(!text.contains("finished"), "{text}");
    }

    #[test]
    fn status_renders_the_failure_of_a_rollback() {
        let mut r = in_progress(RolloutPhase::RolledBack, 0);
        r.moved[0].state = MovedState::RolledBack;
        r.rolled_back = 1;
        r.failure = Some(GateFailure {
            check: "EntriesReapplied".into(),
            virtual_switch: "vs-0".into(),
            switch: Some("edge-1".into()),
            message: "TableEntrySet fw: 3 entries failed".into(),
        });
        r.finished_at = Some("2026-01-02T03:05:00Z".into());
        let p = with_status(program(canary()), Some(r), 1, 2);
        let text = render(&p);
        assert_says(
            &text,
            &[
                "rollout: RolledBack",
                "failure: EntriesReapplied failed on VirtualSwitch vs-0 (Switch edge-1): TableEntrySet fw: 3 entries failed",
                "vs-0 on Switch edge-1: RolledBack",
                "finished 2026-01-02T03:05:00Z",
                "step 1 of 4: steps[0] switches: 1\n",
            ],
        );
    }

    #[test]
    fn status_says_why_there_is_no_rollout() {
        let all = with_status(program(json!({})), None, 2, 3);
        let text = render(&all);
        assert_says(
            &text,
            &[
                "strategy: AllAtOnce\n",
                "no rollout: strategy AllAtOnce moves every VirtualSwitch at once",
                "revisions: current revision 2 (222222222222), update revision 3 (333333333333)",
            ],
        );
        let first = with_status(program(canary()), None, 1, 1);
        let text = render(&first);
        assert!(
            text.contains("no rollout: nothing rolled out in steps yet"),
            "{text}"
        );
        let bare = program(canary());
        assert!(render(&bare).contains("no status yet"), "{}", render(&bare));
    }

    #[test]
    fn odd_statuses_render_without_panicking() {
        // No rollout block at all, an empty rollout status, a step past
        // the end, a Canary whose steps vanished from the spec.
        let mut odd = in_progress(RolloutPhase::Progressing, 9);
        odd.moved.clear();
        odd.from = None;
        odd.started_at = String::new();
        let none = with_status(program(Value::Null), Some(odd.clone()), 1, 2);
        let text = render(&none);
        assert_says(&text, &["no steps", "from nothing to revision 2"]);
        assert!(!text.contains("started ,"), "{text}");
        let past = with_status(program(canary()), Some(odd.clone()), 1, 2);
        assert!(
            render(&past).contains("all 4 steps done"),
            "{}",
            render(&past)
        );
        let empty = with_status(
            program(json!({"strategy": "Canary", "steps": []})),
            Some(RolloutStatus::default()),
            1,
            2,
        );
        assert!(render(&empty).contains("no steps"));
        let mut no_revs = program(canary());
        no_revs.status = Some(P4ProgramStatus::default());
        assert!(render(&no_revs).contains("revisions: none recorded yet"));
        assert_eq!(undo_target(&no_revs, &[], None).ok(), None);
        assert_eq!(indefinite_pause(&(&no_revs).into()), None);
        assert_eq!(settled(&no_revs), None);
    }

    #[test]
    fn pause_sets_paused_true() {
        assert_eq!(
            pause_patch(),
            json!({"spec": {"rollout": {"paused": true}}})
        );
    }

    #[test]
    fn resume_annotates_only_an_indefinite_pause_of_a_rollout_in_progress() {
        let at = |phase, step| with_status(program(canary()), Some(in_progress(phase, step)), 1, 2);
        // steps[2] is `pause: {}`: unpause and pass that step of revision 2.
        let p = at(RolloutPhase::Paused, 2);
        assert_eq!(
            resume_patch(&p),
            json!({"spec": {"rollout": {"paused": false}},
                "metadata": {"annotations": {RESUME_ANNOTATION: "2/2"}}})
        );
        // The annotation says what the operator's parser reads.
        let value = resume_patch(&p)["metadata"]["annotations"][RESUME_ANNOTATION].clone();
        assert_eq!(
            rollout::resume(value.as_str().unwrap()),
            Some(rollout::Resume {
                revision: 2,
                step: 2
            })
        );
        let plain = json!({"spec": {"rollout": {"paused": false}}});
        // A timed pause, a moving step, a finished or rolled-back rollout.
        assert_eq!(resume_patch(&at(RolloutPhase::Paused, 1)), plain);
        assert_eq!(resume_patch(&at(RolloutPhase::Progressing, 0)), plain);
        assert_eq!(resume_patch(&at(RolloutPhase::Completed, 2)), plain);
        assert_eq!(resume_patch(&at(RolloutPhase::RolledBack, 2)), plain);
        // No rollout status, or no steps.
        assert_eq!(resume_patch(&program(canary())), plain);
        let all = with_status(
            program(json!({"paused": true})),
            Some(in_progress(RolloutPhase::Paused, 0)),
            1,
            2,
        );
        assert_eq!(resume_patch(&all), plain);
    }

    #[test]
    fn retry_names_the_rollback_and_only_a_rolled_back_rollout_has_one() {
        let mut back = in_progress(RolloutPhase::RolledBack, 0);
        back.finished_at = Some("2026-01-02T03:05:00.250Z".into());
        let p = with_status(program(canary()), Some(back), 1, 2);
        let patch = retry_patch(&p).unwrap();
        let value = patch["metadata"]["annotations"][RETRY_ANNOTATION].as_str();
        assert_eq!(value, Some("2@2026-01-02T03:05:00.250Z"));
        // The annotation says what the operator's parser reads.
        assert_eq!(
            rollout::retry(value.unwrap()),
            Some(rollout::Retry {
                revision: 2,
                rolled_back_at: "2026-01-02T03:05:00.250Z".into()
            })
        );
        assert!(
            patch.get("spec").is_none(),
            "nothing of the spec is touched"
        );
        let moving = with_status(
            program(canary()),
            Some(in_progress(RolloutPhase::Progressing, 0)),
            1,
            2,
        );
        assert_eq!(
            retry_patch(&moving).unwrap_err(),
            "the rollout of revision 2 is Progressing, not RolledBack"
        );
        assert_eq!(
            retry_patch(&program(canary())).unwrap_err(),
            "the P4Program has no rollout"
        );
    }

    #[test]
    fn undo_goes_to_the_named_revision_only_when_kept() {
        let p = with_status(program(canary()), None, 3, 3);
        assert_eq!(undo_target(&p, &[1, 2, 3], Some(1)), Ok(1));
        assert_eq!(
            undo_target(&p, &[2, 3], Some(1)),
            Err(Refusal::NotKept {
                revision: 1,
                kept: "2, 3".into(),
                how: "`kubectl get controllerrevisions -l p4fleet.dev/program=NAME` lists them"
            })
        );
        assert_eq!(
            undo_patch(1),
            json!({"spec": {"rollout": {"pinRevision": 1}}})
        );
    }

    #[test]
    fn undo_goes_back_to_where_a_rollout_started() {
        for phase in [
            RolloutPhase::Progressing,
            RolloutPhase::Paused,
            RolloutPhase::RolledBack,
        ] {
            let p = with_status(program(canary()), Some(in_progress(phase, 0)), 1, 2);
            assert_eq!(undo_target(&p, &[1, 2], None), Ok(1), "{phase:?}");
            // From a revision no longer kept: refused, not pinned to nothing.
            assert!(matches!(
                undo_target(&p, &[2], None),
                Err(Refusal::NotKept { revision: 1, .. })
            ));
        }
        // A completed rollout is history: the revision before the one in force.
        let mut done = in_progress(RolloutPhase::Completed, 4);
        done.from = Some(rrev(2));
        done.to = rrev(3);
        let p = with_status(program(canary()), Some(done), 3, 3);
        assert_eq!(undo_target(&p, &[1, 2, 3], None), Ok(2));
    }

    #[test]
    fn undo_goes_back_to_the_current_revision_while_the_fleet_catches_up() {
        let p = with_status(program(json!({})), None, 1, 3);
        assert_eq!(undo_target(&p, &[1, 2, 3], None), Ok(1));
    }

    #[test]
    fn undo_goes_to_the_highest_kept_revision_below_the_one_in_force() {
        let p = with_status(program(json!({})), None, 3, 3);
        assert_eq!(undo_target(&p, &[1, 2, 3], None), Ok(2));
        assert_eq!(undo_target(&p, &[1, 3], None), Ok(1));
        // Pinned to 2 and settled there: one further back.
        let pinned = with_status(program(json!({"pinRevision": 2})), None, 2, 3);
        assert_eq!(undo_target(&pinned, &[1, 2, 3], None), Ok(1));
    }

    #[test]
    fn undo_refuses_when_nothing_is_before() {
        let p = with_status(program(json!({})), None, 1, 1);
        let e = undo_target(&p, &[1], None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no revision before revision 1 is kept (kept: 1)"
        );
        let mut fresh = program(json!({}));
        fresh.status = Some(P4ProgramStatus::default());
        let e = undo_target(&fresh, &[], None).unwrap_err();
        assert!(e.to_string().contains("no status.updateRevision"), "{e}");
        let wrapped = Error::Undo {
            kind: Kind::Program,
            name: "fw".into(),
            namespace: "team-a".into(),
            refusal: e,
        };
        assert!(
            wrapped
                .to_string()
                .starts_with("P4Program team-a/fw: cannot undo: "),
            "{wrapped}"
        );
    }

    #[test]
    fn watch_settles_on_completed_rolled_back_and_paused_only() {
        let at = |phase| with_status(program(canary()), Some(in_progress(phase, 2)), 1, 2);
        assert_eq!(settled(&at(RolloutPhase::Progressing)), None);
        assert_eq!(
            settled(&at(RolloutPhase::Completed)),
            Some(Settled::Completed)
        );
        assert_eq!(
            settled(&at(RolloutPhase::RolledBack)),
            Some(Settled::RolledBack)
        );
        assert_eq!(settled(&at(RolloutPhase::Paused)), Some(Settled::Paused));
        // A status older than the spec says nothing yet.
        let mut stale = at(RolloutPhase::Completed);
        stale.metadata.generation = Some(2);
        assert_eq!(settled(&stale), None);
        // A rollout of a revision no longer in force (a newer one came).
        let newer = with_status(
            program(canary()),
            Some(in_progress(RolloutPhase::Completed, 4)),
            2,
            3,
        );
        assert_eq!(settled(&newer), None);
        // No staged rollout: settled once the fleet runs the revision in force.
        assert_eq!(
            settled(&with_status(program(json!({})), None, 3, 3)),
            Some(Settled::Steady)
        );
        assert_eq!(settled(&with_status(program(json!({})), None, 2, 3)), None);
        let rolled = at(RolloutPhase::RolledBack);
        assert_eq!(
            Settled::Paused.summary(&(&at(RolloutPhase::Paused)).into()),
            "rollout of revision 2 paused; resume with `p4fleet rollout resume fw -n team-a`"
        );
        assert_eq!(
            Settled::RolledBack.summary(&(&rolled).into()),
            "rollout of revision 2 rolled back"
        );
    }

    /// Set `routes` in `team-a` with `rollout` and `status` (JSON).
    fn set(rollout: Value, status: Value) -> TableEntrySet {
        serde_json::from_value(json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": "routes", "namespace": "team-a", "generation": 1},
            "spec": {"table": "MyIngress.dmac", "rollout": rollout},
            "status": status
        }))
        .unwrap()
    }

    fn set_status(rollout: &RolloutStatus, ready: bool) -> Value {
        json!({"observedGeneration": 1, "rollout": rollout,
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"},
                "reason": "R", "message": "m", "lastTransitionTime": "2026-01-02T03:04:05Z"}]})
    }

    #[test]
    fn objects_are_named_as_kubectl_names_them() {
        let named = |s: &str| parse_object(s).map(|o| (o.kind, o.name));
        assert_eq!(named("fw"), Ok((Kind::Program, "fw".into())));
        assert_eq!(named("p4p/fw"), Ok((Kind::Program, "fw".into())));
        assert_eq!(named("P4Program/fw"), Ok((Kind::Program, "fw".into())));
        assert_eq!(named("tes/routes"), Ok((Kind::EntrySet, "routes".into())));
        assert_eq!(
            named("tableentrysets.p4fleet.dev/routes"),
            Ok((Kind::EntrySet, "routes".into()))
        );
        assert!(
            named("deploy/web")
                .unwrap_err()
                .contains("does not roll out")
        );
        assert!(named("tes/").is_err());
        assert!(named("tes/a/b").is_err());
    }

    #[test]
    fn a_sets_rollout_renders_its_targets_and_resumes_with_its_type() {
        let paused = in_progress(RolloutPhase::Paused, 2);
        let s = set(canary(), set_status(&paused, false));
        let r = Rolled::from(&s);
        let text = super::render(&r);
        assert!(text.starts_with("TableEntrySet team-a/routes\n"), "{text}");
        assert!(
            text.contains("targets: 1 updated, 1 healthy, 3 pending, 0 rolled back"),
            "{text}"
        );
        // Where the fleet was, and the content read now.
        assert_says(
            &text,
            &[
                "revisions: current revision 1 (111111111111), update revision 2 (222222222222)",
                "(p4fleet rollout resume tes/routes -n team-a)",
            ],
        );
        assert_eq!(
            super::resume_patch(&r)["metadata"]["annotations"][RESUME_ANNOTATION],
            "2/2"
        );
        assert_eq!(super::settled(&r), Some(Settled::Paused));
        assert_eq!(
            Settled::Paused.summary(&r),
            "rollout of revision 2 paused; resume with `p4fleet rollout resume tes/routes -n team-a`"
        );
    }

    #[test]
    fn a_sets_undo_and_retry_read_its_rollout_status() {
        // Mid-rollout: back to where it started.
        let moving = set(
            canary(),
            set_status(&in_progress(RolloutPhase::Progressing, 0), false),
        );
        assert_eq!(super::undo_target(&(&moving).into(), &[1, 2], None), Ok(1));
        assert_eq!(
            super::retry_patch(&(&moving).into()).unwrap_err(),
            "the rollout of revision 2 is Progressing, not RolledBack"
        );
        // At rest on revision 2: the highest kept below it.
        let mut done = in_progress(RolloutPhase::Completed, 4);
        done.from = Some(rrev(1));
        let at_rest = Rolled::from(&set(canary(), set_status(&done, true)));
        assert_eq!(super::undo_target(&at_rest, &[1, 2], None), Ok(1));
        assert_eq!(super::settled(&at_rest), Some(Settled::Completed));
        let e = super::undo_target(&at_rest, &[2], Some(1)).unwrap_err();
        assert!(
            e.to_string().contains("p4fleet.dev/entries-revision"),
            "{e}"
        );
        // Pinned to 1 and there: nothing below.
        let mut pinned_rollout = canary();
        pinned_rollout["pinRevision"] = json!(1);
        let mut on_1 = done.clone();
        on_1.to = rrev(1);
        let pinned = Rolled::from(&set(pinned_rollout, set_status(&on_1, true)));
        assert_eq!(pinned.status.as_ref().unwrap().update, None);
        assert!(matches!(
            super::undo_target(&pinned, &[1, 2], None),
            Err(Refusal::NothingBefore(_))
        ));
        // No rollout status: nothing recorded, and settled when Ready.
        let plain = Rolled::from(&set(
            json!({}),
            json!({"observedGeneration": 1,
            "conditions": [{"type": "Ready", "status": "True", "reason": "R",
                "message": "m", "lastTransitionTime": "2026-01-02T03:04:05Z"}]}),
        ));
        assert_eq!(super::settled(&plain), Some(Settled::Steady));
        assert!(matches!(
            super::undo_target(&plain, &[], None),
            Err(Refusal::NothingBefore(m)) if m.contains("no status.rollout")
        ));
        assert!(
            super::render(&plain)
                .contains("no rollout: strategy AllAtOnce writes every target at once")
        );
    }

    fn kept_rev(n: i64) -> revisions::Kept {
        revisions::Kept {
            name: format!("routes-entries-{}", &digest(n)[..16]),
            revision: n,
            digest: digest(n).into(),
            parts: Vec::new(),
        }
    }

    #[test]
    fn history_lists_kept_revisions_with_what_the_status_says_of_them() {
        let paused = in_progress(RolloutPhase::Paused, 2);
        let r = Rolled::from(&set(canary(), set_status(&paused, false)));
        let text = super::history(&r, &[kept_rev(1), kept_rev(2), kept_rev(3)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "TableEntrySet team-a/routes");
        assert!(
            lines[1].contains("REVISION  DIGEST        KEPT IN"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("  1         111111111111  routes-entries-1111111111111111  current, rollout from (Paused)"),
            "{text}"
        );
        assert!(lines[3].ends_with("update, rollout to (Paused)"), "{text}");
        assert!(
            lines[4]
                .trim_end()
                .ends_with("routes-entries-3333333333333333"),
            "{text}"
        );
        // A program pinned at rest: the pin, and no rollout notes.
        let mut pinned =
            program(json!({"strategy": "Canary", "pinRevision": 1, "steps": [{"percent": 100}]}));
        pinned = with_status(pinned, Some(in_progress(RolloutPhase::Completed, 1)), 1, 2);
        let text = super::history(&(&pinned).into(), &[kept_rev(1), kept_rev(2)]);
        assert_says(&text, &["current, pinned\n", "  update\n"]);
        assert!(!text.contains("rollout"), "{text}");
        // Nothing kept yet.
        assert!(super::history(&r, &[]).contains("no revision kept yet"));
    }
}
