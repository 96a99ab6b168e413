//! Slot claims: which VirtualSwitch holds which slot, resources, isolation
//! and ports of a Switch. They live on the Switch itself (annotation
//! [`SLOT_CLAIMS_ANNOTATION`]) and every write carries the Switch's
//! resourceVersion as a precondition: two reconciles that chose the same
//! slot cannot both win; the loser gets 409 Conflict, reads again and
//! places again. No state is kept in memory, so this holds across
//! replicas and restarts.
//!
//! Switches are read from the shared cache ([`crate::cache`]), which may
//! lag: a write based on a stale Switch fails its precondition, and the
//! next attempt first waits for the cache to show a newer version.

use std::sync::Arc;

use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use p4fleet_crds::{SLOT_CLAIMS_ANNOTATION, SlotClaim, Switch};

use super::placement::{Candidate, PlacementError, Request, place};
use crate::cache::Cache;
use crate::fleet::slot_claims::{Malformed, read};

/// How many times a claim is retried after losing a race (409).
const ATTEMPTS: usize = 32;
/// How long a retry waits for the cache to show the Switch that won.
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(5);

/// The cached Switches, in LIST order (shared, not cloned: a reconcile
/// looks at every Switch, and a fleet's worth of deep clones per
/// reconcile was most of an idle round's CPU).
fn cached(cache: &Cache<Switch>) -> Vec<Arc<Switch>> {
    let mut switches = cache.store().state();
    switches.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    switches
}

/// After a lost write on `sw`: waits until the cache has moved past it.
async fn catch_up(cache: &Cache<Switch>, sw: &Switch) {
    let rv = sw.resource_version().unwrap_or_default();
    let obj_ref = kube::runtime::reflector::ObjectRef::from_obj(sw);
    if !cache.newer_than(&obj_ref, &rv, CATCH_UP).await {
        tracing::debug!(switch = %sw.name_any(), "cache did not move after a conflict");
    }
}

/// `claims` with `me`'s claim replaced by `new` (or removed), sorted by slot.
pub fn with_claim(claims: &[SlotClaim], me: &str, new: Option<SlotClaim>) -> Vec<SlotClaim> {
    let mut out: Vec<SlotClaim> = claims
        .iter()
        .filter(|c| c.virtual_switch != me)
        .cloned()
        .chain(new)
        .collect();
    out.sort_by(|a, b| (a.slot, &a.virtual_switch).cmp(&(b.slot, &b.virtual_switch)));
    out
}

/// Why claiming or releasing failed (not a placement verdict).
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("gave up claiming after {ATTEMPTS} conflicting writes on Switch {0}")]
    Contended(String),
}

/// Writes `claims` on `sw` if it is still at the resourceVersion it was
/// read at. Ok(false): someone else wrote first.
async fn write(api: &Api<Switch>, sw: &Switch, claims: &[SlotClaim]) -> Result<bool, ClaimError> {
    let value = serde_json::to_string(claims).expect("claims serialize");
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": sw.resource_version(),
            "annotations": {SLOT_CLAIMS_ANNOTATION: value},
        }
    });
    match api
        .patch(
            &sw.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Where a VirtualSwitch holds its slot after [`claim`].
#[derive(Debug, Clone)]
pub struct Held {
    pub switch: Switch,
    pub claim: SlotClaim,
}

/// Places `req` and records its claim, or confirms (and updates) the
/// claim it already holds. Retries from a fresh read whenever another
/// writer got there first.
pub async fn claim(
    api: &Api<Switch>,
    cache: &Cache<Switch>,
    req: &Request,
) -> Result<Result<Held, PlacementError>, ClaimError> {
    for _ in 0..ATTEMPTS {
        // The Switches whose claims name `me` first, from the cache's
        // index: a placed VirtualSwitch (every periodic check) needs no
        // other, and the fleet's annotations are read only to place an
        // unplaced one.
        let mut switches = cache.filed_under(&req.me);
        let mut candidates = Vec::new();
        for sw in &switches {
            candidates.push(Candidate::of(sw, read(sw)?));
        }
        let holds = |c: &Candidate| c.claims.iter().any(|x| x.virtual_switch == req.me);
        if !candidates.iter().any(holds) {
            switches = cached(cache);
            candidates.clear();
            for sw in &switches {
                candidates.push(Candidate::of(sw, read(sw)?));
            }
        }
        // A claim it holds on a Switch it may no longer use is released first.
        if let Some(held) = candidates.iter().find(|c| {
            c.claims.iter().any(|x| x.virtual_switch == req.me)
                && req.switch_ref.as_ref().is_some_and(|r| *r != c.name)
        }) {
            let sw = switches.iter().find(|s| s.name_any() == held.name);
            if let Some(sw) = sw {
                write(api, sw, &with_claim(&held.claims, &req.me, None)).await?;
                catch_up(cache, sw).await;
            }
            continue;
        }
        let current = candidates
            .iter()
            .find(|c| c.claims.iter().any(|x| x.virtual_switch == req.me));
        let placed = match current {
            // Kept where it runs: only its own Switch is checked again.
            Some(c) => place(
                &Request {
                    switch_ref: Some(c.name.clone()),
                    ..req.clone()
                },
                std::slice::from_ref(c),
            ),
            None => place(req, &candidates),
        };
        let (name, slot) = match placed {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        let c = candidates
            .iter()
            .find(|c| c.name == name)
            .expect("placed on a candidate");
        let sw = switches
            .iter()
            .find(|s| s.name_any() == name)
            .expect("candidate of a switch");
        let mine = req.claim_on(slot, c);
        if c.claims.contains(&mine) {
            return Ok(Ok(Held {
                switch: Switch::clone(sw),
                claim: mine,
            }));
        }
        if write(api, sw, &with_claim(&c.claims, &req.me, Some(mine.clone()))).await? {
            return Ok(Ok(Held {
                switch: Switch::clone(sw),
                claim: mine,
            }));
        }
        catch_up(cache, sw).await;
    }
    Err(ClaimError::Contended(req.me.clone()))
}

/// Removes `me`'s claims from every Switch. Returns the claims it held.
pub async fn release(
    api: &Api<Switch>,
    cache: &Cache<Switch>,
    me: &str,
) -> Result<Vec<(String, SlotClaim)>, ClaimError> {
    let mut released = Vec::new();
    for _ in 0..ATTEMPTS {
        let switches = cached(cache);
        let mut pending = false;
        for sw in &switches {
            let claims = read(sw)?;
            let Some(mine) = claims.iter().find(|c| c.virtual_switch == me).cloned() else {
                continue;
            };
            if write(api, sw, &with_claim(&claims, me, None)).await? {
                released.push((sw.name_any(), mine));
            } else {
                catch_up(cache, sw).await;
                pending = true;
            }
        }
        if !pending {
            return Ok(released);
        }
    }
    Err(ClaimError::Contended(me.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::SwitchSpec;

    fn claim(slot: u32, who: &str) -> SlotClaim {
        SlotClaim {
            slot,
            virtual_switch: who.into(),
            ..Default::default()
        }
    }

    #[test]
    fn claims_round_trip_through_the_annotation() {
        let spec: SwitchSpec =
            serde_json::from_value(serde_json::json!({"target": "Fpga", "endpoint": "h:1"}))
                .unwrap();
        let mut sw = Switch::new("b", spec);
        assert_eq!(read(&sw).unwrap(), vec![]);
        let claims = with_claim(&[claim(3, "ns/a")], "ns/b", Some(claim(1, "ns/b")));
        assert_eq!(claims, vec![claim(1, "ns/b"), claim(3, "ns/a")]);
        sw.annotations_mut().insert(
            SLOT_CLAIMS_ANNOTATION.into(),
            serde_json::to_string(&claims).unwrap(),
        );
        assert_eq!(read(&sw).unwrap(), claims);
        assert_eq!(with_claim(&claims, "ns/a", None), vec![claim(1, "ns/b")]);
        sw.annotations_mut()
            .insert(SLOT_CLAIMS_ANNOTATION.into(), "{".into());
        let e = read(&sw).unwrap_err().to_string();
        assert!(
            e.starts_with("Switch b: annotation p4fleet.dev/slot-claims"),
            "{e}"
        );
    }
}
