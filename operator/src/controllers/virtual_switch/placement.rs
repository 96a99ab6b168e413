//! Placement, pure, in the manner of kube-scheduler: **filter** the
//! Switches a VirtualSwitch may run on (a free slot, every resource fits,
//! its isolation is unique, its VLAN shares no physical port with another
//! of the same VLAN, its port map is within the Switch's ports), then
//! **score** the rest (best fit: the Switch left with the least free
//! capacity wins, so boards fill up one by one). When none fits, the
//! error says why per Switch, as a scheduler does:
//! `0/3 switches: 2 insufficient luts (need 28158, free 12000), 1 no free slot`.
//!
//! The inputs are the Switches with their slot claims ([`SlotClaim`],
//! recorded on each Switch, see `claims`); placement only decides, the
//! claim is written with the Switch's resourceVersion as a precondition.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kube::ResourceExt;
use p4fleet_crds::{Isolation, SlotClaim, Switch, SwitchTarget, VirtualSwitchSpec};

/// What one Switch offers, with the claims already on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub slots: u32,
    /// Resources VirtualSwitches can use; None when unknown.
    pub capacity: Option<BTreeMap<String, u64>>,
    /// Physical ports (`spec.ports`); empty when the Switch lists none.
    pub ports: BTreeSet<u32>,
    pub claims: Vec<SlotClaim>,
    /// Whether programs on it occupy resources (FPGA boards).
    pub counts_resources: bool,
    /// BFRT Switches: hardware pipes per device (slot), None when unknown.
    /// Set only for BFRT Switches, whose slots hold pipe sets.
    pub pipes: Option<u32>,
    /// Whether it speaks BFRT (its slots are shared by pipe sets).
    pub bfrt: bool,
    /// Whether the operator has probed it (its status says whether it is
    /// Reachable): before that its slots and capacity are not known yet.
    pub probed: bool,
}

impl Candidate {
    /// A Switch as placement sees it: slots and capacity from its status
    /// (what the device reported) or else its spec.
    pub fn of(sw: &Switch, claims: Vec<SlotClaim>) -> Candidate {
        let st = sw.status.as_ref();
        let capacity = match st.map(|s| &s.capacity).filter(|c| !c.is_empty()) {
            Some(c) => Some(c.clone()),
            None if !sw.spec.capacity.is_empty() => Some(sw.spec.capacity.clone()),
            None => None,
        };
        Candidate {
            name: sw.name_any(),
            labels: sw.labels().clone(),
            slots: st.and_then(|s| s.slots).unwrap_or(sw.spec.slots),
            capacity,
            ports: sw.spec.ports.iter().map(|p| p.id).collect(),
            claims,
            counts_resources: sw.spec.target == SwitchTarget::Fpga,
            pipes: st.and_then(|s| s.pipes),
            bfrt: sw.spec.effective_protocol() == p4fleet_crds::SwitchProtocol::Bfrt,
            probed: st.is_some_and(|s| {
                p4fleet_crds::find_condition(
                    &s.conditions,
                    p4fleet_crds::condition_types::REACHABLE,
                )
                .is_some()
            }),
        }
    }

    fn others<'a>(&'a self, me: &'a str) -> impl Iterator<Item = &'a SlotClaim> + 'a {
        self.claims.iter().filter(move |c| c.virtual_switch != me)
    }

    /// Capacity minus what other VirtualSwitches' claims hold.
    pub fn free(&self, me: &str) -> BTreeMap<String, u64> {
        let mut free = self.capacity.clone().unwrap_or_default();
        for c in self.others(me) {
            for (r, n) in &c.resources {
                if let Some(f) = free.get_mut(r) {
                    *f = f.saturating_sub(*n);
                }
            }
        }
        free
    }
}

/// What a VirtualSwitch asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `namespace/name`.
    pub me: String,
    pub switch_ref: Option<String>,
    pub selector: BTreeMap<String, String>,
    pub slot: Option<u32>,
    /// Resources one instance of its program occupies (FPGA artifacts).
    pub resources: BTreeMap<String, u64>,
    pub isolation: Option<Isolation>,
    /// Physical ports of its port map (empty: every port).
    pub ports: BTreeSet<u32>,
    /// The hardware pipes its program asks for on a BFRT Switch
    /// ([`tofino_pipes`]); None: the whole device.
    pub pipes: Option<BTreeSet<u32>>,
}

/// The pipes `spec.artifacts.tofino.pipes` names: `[]` or `["pipe"]` is
/// the whole device (None); otherwise exactly the pipes `pipeN` listed
/// (N below 8, each once). The error names the field and the entry.
pub fn tofino_pipes(names: &[String]) -> Result<Option<BTreeSet<u32>>, String> {
    if names.is_empty() || names == ["pipe"] {
        return Ok(None);
    }
    let mut out = BTreeSet::new();
    for (i, n) in names.iter().enumerate() {
        let pipe = n
            .strip_prefix("pipe")
            .and_then(|d| d.parse::<u32>().ok())
            .filter(|p| *p < 8 && n == &format!("pipe{p}"));
        match pipe {
            Some(p) if out.insert(p) => {}
            Some(_) => {
                return Err(format!(
                    "spec.artifacts.tofino.pipes[{i}]: {n:?} is listed twice"
                ));
            }
            None => {
                return Err(format!(
                    "spec.artifacts.tofino.pipes[{i}]: {n:?} is not a pipe (pipe0 to pipe7; [\"pipe\"] or none for the whole device)"
                ));
            }
        }
    }
    Ok(Some(out))
}

fn pipes_text(p: &BTreeSet<u32>) -> String {
    p.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

impl Request {
    pub fn new(me: &str, spec: &VirtualSwitchSpec, resources: BTreeMap<String, u64>) -> Request {
        Request {
            me: me.into(),
            switch_ref: spec.switch_ref.clone(),
            selector: spec
                .switch_selector
                .as_ref()
                .map(|s| s.match_labels.clone())
                .unwrap_or_default(),
            slot: spec.slot,
            resources,
            isolation: spec.isolation.clone(),
            ports: spec.port_map.iter().map(|m| m.physical).collect(),
            pipes: None,
        }
    }

    /// The claim this request makes on `slot` of `c`: with its pipes when
    /// `c` is a BFRT Switch.
    pub fn claim_on(&self, slot: u32, c: &Candidate) -> SlotClaim {
        let mut claim = self.claim(slot, c.counts_resources);
        if c.bfrt {
            claim.pipes = self.pipes.iter().flatten().copied().collect();
        }
        claim
    }

    /// The claim this request makes on `slot`.
    pub fn claim(&self, slot: u32, counts_resources: bool) -> SlotClaim {
        SlotClaim {
            slot,
            virtual_switch: self.me.clone(),
            resources: if counts_resources {
                self.resources.clone()
            } else {
                BTreeMap::new()
            },
            vlan: self.isolation.as_ref().map(|i| i.vlan),
            dst_mac: self
                .isolation
                .as_ref()
                .and_then(|i| i.dst_mac.as_ref().map(|m| m.to_ascii_lowercase())),
            ports: self.ports.iter().copied().collect(),
            pipes: Vec::new(),
        }
    }
}

/// Why one Switch does not fit (a filter's verdict).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unfit {
    NoFreeSlot,
    SlotOutOfRange {
        slot: u32,
        slots: u32,
    },
    SlotTaken {
        slot: u32,
        owner: String,
    },
    CapacityUnknown,
    Insufficient {
        resource: String,
        need: u64,
        free: u64,
    },
    IsolationInUse {
        vlan: u16,
        dst_mac: Option<String>,
        owner: String,
    },
    VlanPortsShared {
        vlan: u16,
        ports: Vec<u32>,
        owner: String,
    },
    PortNotOnSwitch {
        port: u32,
    },
    /// A BFRT Switch whose pipe count is unknown (neither the device nor
    /// `spec.pipes` says), asked for a pipe set.
    PipesUnknown,
    PipesOutOfRange {
        pipes: BTreeSet<u32>,
        count: u32,
    },
    /// The pipes asked for are held in `slot` by `owner`.
    PipesTaken {
        slot: u32,
        pipes: BTreeSet<u32>,
        owner: String,
    },
    /// No slot has every pipe asked for free.
    NoFreePipes {
        pipes: BTreeSet<u32>,
    },
}

fn ports_text(ports: &[u32]) -> String {
    if ports.is_empty() {
        return "every port".into();
    }
    let p: Vec<String> = ports.iter().map(u32::to_string).collect();
    format!("ports {}", p.join(","))
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unfit::NoFreeSlot => write!(f, "no free slot"),
            Unfit::SlotOutOfRange { slot, slots } => {
                write!(f, "slot {slot} out of range ({slots} slots)")
            }
            Unfit::SlotTaken { slot, owner } => write!(f, "slot {slot} held by {owner}"),
            Unfit::CapacityUnknown => write!(
                f,
                "capacity unknown (the device did not report it and spec.capacity is empty)"
            ),
            Unfit::Insufficient {
                resource,
                need,
                free,
            } => write!(f, "insufficient {resource} (need {need}, free {free})"),
            Unfit::IsolationInUse {
                vlan,
                dst_mac,
                owner,
            } => write!(
                f,
                "isolation vlan {vlan} dst {} held by {owner}",
                dst_mac.as_deref().unwrap_or("any")
            ),
            Unfit::VlanPortsShared { vlan, ports, owner } => {
                write!(f, "vlan {vlan} shares {} with {owner}", ports_text(ports))
            }
            Unfit::PipesUnknown => write!(
                f,
                "pipe count unknown (the device did not report it and spec.pipes is unset)"
            ),
            Unfit::PipesOutOfRange { pipes, count } => write!(
                f,
                "pipes {} out of range ({count} pipes)",
                pipes_text(pipes)
            ),
            Unfit::PipesTaken { slot, pipes, owner } => {
                write!(
                    f,
                    "pipes {} of slot {slot} held by {owner}",
                    pipes_text(pipes)
                )
            }
            Unfit::NoFreePipes { pipes } => {
                write!(f, "no slot with pipes {} free", pipes_text(pipes))
            }
            Unfit::PortNotOnSwitch { port } => {
                write!(
                    f,
                    "spec.portMap: port {port} is not in the Switch's spec.ports"
                )
            }
        }
    }
}

/// [`PlacementError::NotProbed`]'s reason (a waiting one).
pub const NOT_PROBED: &str = "SwitchNotProbed";

/// Why a VirtualSwitch could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("spec.switchRef: Switch {0} not found")]
    SwitchNotFound(String),
    /// Every candidate was filtered out: `(switch, why)` for each.
    #[error("{}", unschedulable_message(.candidates, .unfit))]
    Unschedulable {
        candidates: usize,
        unfit: Vec<(String, Vec<Unfit>)>,
    },
    /// The claim could not be recorded (malformed claims, endless conflicts).
    #[error("{0}")]
    ClaimFailed(String),
    /// No candidate fits yet, and these have not been probed: their slots
    /// and capacity are still unknown (a wait, not a refusal).
    #[error("waiting for the first probe of Switch {}", .0.join(", "))]
    NotProbed(Vec<String>),
    /// The program's `spec.artifacts.tofino.pipes` names no pipes.
    #[error("P4Program {program}: {reason}")]
    InvalidPipes { program: String, reason: String },
}

impl PlacementError {
    pub fn reason(&self) -> &'static str {
        match self {
            PlacementError::SwitchNotFound(_) => "SwitchNotFound",
            PlacementError::Unschedulable { .. } => "Unschedulable",
            PlacementError::ClaimFailed(_) => "ClaimFailed",
            PlacementError::NotProbed(_) => NOT_PROBED,
            PlacementError::InvalidPipes { .. } => "InvalidPipes",
        }
    }
}

/// `0/N switches: 2 <why>, 1 <why>`: each distinct reason with how many
/// Switches it ruled out, most frequent first.
fn unschedulable_message(candidates: &usize, unfit: &[(String, Vec<Unfit>)]) -> String {
    if *candidates == 0 {
        return "0/0 switches: no Switch matches spec.switchSelector".into();
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (_, why) in unfit {
        for w in why {
            *counts.entry(w.to_string()).or_default() += 1;
        }
    }
    let mut by: Vec<(String, usize)> = counts.into_iter().collect();
    by.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let parts: Vec<String> = by.iter().map(|(w, n)| format!("{n} {w}")).collect();
    format!("0/{candidates} switches: {}", parts.join(", "))
}

/// Whether two port sets meet; an empty set is every port.
fn shared_ports(a: &BTreeSet<u32>, b: &BTreeSet<u32>, all: &BTreeSet<u32>) -> Option<Vec<u32>> {
    let expand = |s: &BTreeSet<u32>| if s.is_empty() { all.clone() } else { s.clone() };
    match (
        a.is_empty() && all.is_empty(),
        b.is_empty() && all.is_empty(),
    ) {
        // The Switch lists no ports: "every port" meets anything.
        (true, _) => Some(b.iter().copied().collect()),
        (_, true) => Some(a.iter().copied().collect()),
        _ => {
            let shared: Vec<u32> = expand(a).intersection(&expand(b)).copied().collect();
            (!shared.is_empty()).then_some(shared)
        }
    }
}

/// The filters: the slot `req` gets on `c`, or every reason it does not fit.
pub fn filter(req: &Request, c: &Candidate) -> Result<u32, Vec<Unfit>> {
    let mut why = Vec::new();
    // On a BFRT Switch a pipe-set request shares a slot (device) with
    // other pipe sets it does not overlap; anything else holds its slot.
    let pipes = req.pipes.as_ref().filter(|_| c.bfrt);
    let taken = |s: u32| {
        c.others(&req.me).find(|o| {
            o.slot == s
                && match pipes {
                    None => true,
                    Some(p) => o.pipes.is_empty() || o.pipes.iter().any(|q| p.contains(q)),
                }
        })
    };
    if let Some(p) = pipes {
        match c.pipes {
            None => why.push(Unfit::PipesUnknown),
            Some(n) if p.iter().any(|q| *q >= n) => why.push(Unfit::PipesOutOfRange {
                pipes: p.clone(),
                count: n,
            }),
            Some(_) => {}
        }
    }
    let mine = c
        .claims
        .iter()
        .find(|o| o.virtual_switch == req.me)
        .map(|o| o.slot);
    let slot = match req.slot.or(mine) {
        Some(s) if s >= c.slots => {
            why.push(Unfit::SlotOutOfRange {
                slot: s,
                slots: c.slots,
            });
            None
        }
        Some(s) => match taken(s) {
            Some(o) if pipes.is_some() && !o.pipes.is_empty() => {
                why.push(Unfit::PipesTaken {
                    slot: s,
                    pipes: o.pipes.iter().copied().collect(),
                    owner: o.virtual_switch.clone(),
                });
                None
            }
            Some(o) => {
                why.push(Unfit::SlotTaken {
                    slot: s,
                    owner: o.virtual_switch.clone(),
                });
                None
            }
            None => Some(s),
        },
        None => {
            let free = (0..c.slots).find(|s| taken(*s).is_none());
            match (free, pipes) {
                (Some(_), _) => {}
                (None, Some(p)) => why.push(Unfit::NoFreePipes { pipes: p.clone() }),
                (None, None) => why.push(Unfit::NoFreeSlot),
            }
            free
        }
    };
    if c.counts_resources && !req.resources.is_empty() {
        match &c.capacity {
            None => why.push(Unfit::CapacityUnknown),
            Some(_) => {
                let free = c.free(&req.me);
                for (r, need) in &req.resources {
                    let f = free.get(r).copied().unwrap_or(0);
                    if *need > f {
                        why.push(Unfit::Insufficient {
                            resource: r.clone(),
                            need: *need,
                            free: f,
                        });
                    }
                }
            }
        }
    }
    for p in &req.ports {
        if !c.ports.is_empty() && !c.ports.contains(p) {
            why.push(Unfit::PortNotOnSwitch { port: *p });
        }
    }
    if let Some(iso) = &req.isolation {
        let mac = iso.dst_mac.as_ref().map(|m| m.to_ascii_lowercase());
        for o in c.others(&req.me).filter(|o| o.vlan == Some(iso.vlan)) {
            if o.dst_mac == mac {
                why.push(Unfit::IsolationInUse {
                    vlan: iso.vlan,
                    dst_mac: mac.clone(),
                    owner: o.virtual_switch.clone(),
                });
                continue;
            }
            let theirs: BTreeSet<u32> = o.ports.iter().copied().collect();
            if let Some(ports) = shared_ports(&req.ports, &theirs, &c.ports) {
                why.push(Unfit::VlanPortsShared {
                    vlan: iso.vlan,
                    ports,
                    owner: o.virtual_switch.clone(),
                });
            }
        }
    }
    match slot {
        Some(s) if why.is_empty() => Ok(s),
        _ => Err(why),
    }
}

/// Best fit: the fraction of its capacity a Switch has left once `req`
/// runs there, summed over the resources `req` needs (lower is better);
/// without resources, the share of slots left free.
fn score(req: &Request, c: &Candidate) -> f64 {
    let free = c.free(&req.me);
    let cap = c.capacity.clone().unwrap_or_default();
    let counted: Vec<f64> = req
        .resources
        .iter()
        .filter(|_| c.counts_resources)
        .filter_map(|(r, need)| {
            let total = *cap.get(r)? as f64;
            let left = free.get(r).copied().unwrap_or(0).saturating_sub(*need) as f64;
            (total > 0.0).then_some(left / total)
        })
        .collect();
    if !counted.is_empty() {
        return counted.iter().sum();
    }
    let used = c.others(&req.me).count() as f64 + 1.0;
    1.0 - used / f64::from(c.slots.max(1))
}

/// Chooses `(switch, slot)` for `req` among `switches`: the referenced
/// Switch, or those matching the selector, filtered then scored (best
/// fit, then name).
pub fn place(req: &Request, switches: &[Candidate]) -> Result<(String, u32), PlacementError> {
    let candidates: Vec<&Candidate> = match &req.switch_ref {
        Some(name) => vec![
            switches
                .iter()
                .find(|c| c.name == *name)
                .ok_or_else(|| PlacementError::SwitchNotFound(name.clone()))?,
        ],
        None => switches
            .iter()
            .filter(|c| req.selector.iter().all(|(k, v)| c.labels.get(k) == Some(v)))
            .collect(),
    };
    let mut feasible = Vec::new();
    let mut unfit = Vec::new();
    let mut unprobed = Vec::new();
    for c in &candidates {
        if !c.probed {
            unprobed.push(c.name.clone());
            continue;
        }
        match filter(req, c) {
            Ok(slot) => feasible.push((score(req, c), c.name.clone(), slot)),
            Err(why) => unfit.push((c.name.clone(), why)),
        }
    }
    feasible.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    match feasible.into_iter().next() {
        Some((_, name, slot)) => Ok((name, slot)),
        None if !unprobed.is_empty() => Err(PlacementError::NotProbed(unprobed)),
        None => Err(PlacementError::Unschedulable {
            candidates: candidates.len(),
            unfit,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P4VBox's Table I on a NetFPGA-SUME: what slots can use, and the programs.
    const SUME_LUTS: u64 = 380_501;
    const SUME_FFS: u64 = 790_159;
    const L2: [(&str, u64); 2] = [("ffs", 40_506), ("luts", 28_096)];
    const ROUTER: [(&str, u64); 2] = [("ffs", 84_149), ("luts", 57_704)];
    const FIREWALL: [(&str, u64); 2] = [("ffs", 74_344), ("luts", 45_683)];

    fn board(name: &str, slots: u32) -> Candidate {
        Candidate {
            name: name.into(),
            labels: [("kind".to_string(), "sume".to_string())].into(),
            slots,
            capacity: Some([("luts".into(), SUME_LUTS), ("ffs".into(), SUME_FFS)].into()),
            ports: [0, 1, 2, 3].into(),
            claims: vec![],
            counts_resources: true,
            pipes: None,
            bfrt: false,
            probed: true,
        }
    }

    #[test]
    fn an_unprobed_switch_is_waited_for_not_refused() {
        let mut fresh = board("fresh", 1);
        fresh.probed = false;
        fresh.capacity = None;
        let r = req("vs", &L2);
        let e = place(&r, std::slice::from_ref(&fresh)).unwrap_err();
        assert_eq!(e, PlacementError::NotProbed(vec!["fresh".into()]));
        assert_eq!(e.reason(), NOT_PROBED);
        assert!(crate::status::WAITING_REASONS.contains(&NOT_PROBED));
        // A probed one that fits is taken meanwhile.
        let placed = place(&r, &[fresh.clone(), board("sume", 2)]).unwrap();
        assert_eq!(placed.0, "sume");
        // One that does not fit leaves the wait for the unprobed one.
        let mut full = board("full", 1);
        full.capacity = Some([("luts".into(), 1), ("ffs".into(), 1)].into());
        assert!(matches!(
            place(&r, &[fresh, full]),
            Err(PlacementError::NotProbed(_))
        ));
    }

    fn req(me: &str, program: &[(&str, u64)]) -> Request {
        Request {
            me: me.into(),
            switch_ref: None,
            selector: [("kind".to_string(), "sume".to_string())].into(),
            slot: None,
            resources: program.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            isolation: None,
            ports: BTreeSet::new(),
            pipes: None,
        }
    }

    /// Places `n` instances one after the other, recording each claim.
    fn pack(boards: &mut [Candidate], program: &[(&str, u64)], n: usize) -> Vec<String> {
        let mut errors = Vec::new();
        for i in 0..n {
            let r = req(&format!("ns/v{i}"), program);
            match place(&r, boards) {
                Ok((name, slot)) => {
                    let b = boards.iter_mut().find(|b| b.name == name).unwrap();
                    b.claims.push(r.claim(slot, true));
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        errors
    }

    #[test]
    fn p4vbox_packing_13_l2_6_routers_8_firewalls() {
        for (program, fits) in [(&L2, 13), (&ROUTER, 6), (&FIREWALL, 8)] {
            let mut b = [board("sume", 16)];
            let errors = pack(&mut b, program, fits + 1);
            assert_eq!(b[0].claims.len(), fits);
            let slots: BTreeSet<u32> = b[0].claims.iter().map(|c| c.slot).collect();
            assert_eq!(slots.len(), fits, "no slot shared");
            assert_eq!(errors.len(), 1, "{errors:?}");
            let luts = program.iter().find(|p| p.0 == "luts").unwrap().1;
            let free = SUME_LUTS - luts * fits as u64;
            assert_eq!(
                errors[0],
                format!("0/1 switches: 1 insufficient luts (need {luts}, free {free})")
            );
        }
        let mut b = [board("sume", 16)];
        assert_eq!(
            pack(&mut b, &L2, 14)[0],
            "0/1 switches: 1 insufficient luts (need 28096, free 15253)",
            "the board's own figure"
        );
    }

    #[test]
    fn the_message_counts_each_reason_like_a_scheduler() {
        let mut a = board("a", 16);
        let mut b = board("b", 16);
        let mut c = board("c", 1);
        let big = |luts| SlotClaim {
            slot: 0,
            virtual_switch: "ns/big".into(),
            resources: [("luts".into(), luts)].into(),
            ..Default::default()
        };
        a.claims.push(big(SUME_LUTS - 12_000));
        b.claims.push(big(SUME_LUTS - 12_000));
        c.claims.push(big(0));
        let e = place(&req("ns/me", &[("luts", 28_158)]), &[a, b, c]).unwrap_err();
        assert_eq!(e.reason(), "Unschedulable");
        assert_eq!(
            e.to_string(),
            "0/3 switches: 2 insufficient luts (need 28158, free 12000), 1 no free slot"
        );
    }

    #[test]
    fn best_fit_fills_the_fuller_board_first() {
        let mut a = board("a", 16);
        let b = board("b", 16);
        a.claims.push(req("ns/x", &ROUTER).claim(0, true));
        assert_eq!(
            place(&req("ns/me", &L2), &[b.clone(), a.clone()]),
            Ok(("a".into(), 1))
        );
        // Once the program no longer fits the fuller board, the emptier one.
        for i in 1..6 {
            a.claims
                .push(req(&format!("ns/r{i}"), &ROUTER).claim(i, true));
        }
        assert_eq!(place(&req("ns/me", &ROUTER), &[a, b]), Ok(("b".into(), 0)));
    }

    #[test]
    fn fixed_slots_and_kept_claims() {
        let mut a = board("a", 4);
        a.claims.push(req("ns/x", &L2).claim(0, true));
        let mut r = req("ns/me", &L2);
        r.switch_ref = Some("a".into());
        assert_eq!(place(&r, std::slice::from_ref(&a)), Ok(("a".into(), 1)));
        r.slot = Some(0);
        assert_eq!(
            place(&r, std::slice::from_ref(&a)).unwrap_err().to_string(),
            "0/1 switches: 1 slot 0 held by ns/x"
        );
        r.slot = Some(4);
        assert_eq!(
            place(&r, std::slice::from_ref(&a)).unwrap_err().to_string(),
            "0/1 switches: 1 slot 4 out of range (4 slots)"
        );
        // Its own claim is kept (and its resources are not counted twice).
        r.slot = None;
        a.claims.push(r.claim(3, true));
        assert_eq!(place(&r, std::slice::from_ref(&a)), Ok(("a".into(), 3)));
        r.switch_ref = Some("zz".into());
        assert_eq!(
            place(&r, &[a]),
            Err(PlacementError::SwitchNotFound("zz".into()))
        );
    }

    fn isolated(me: &str, vlan: u16, mac: Option<&str>, ports: &[u32]) -> Request {
        let mut r = req(me, &L2);
        r.isolation = Some(Isolation {
            vlan,
            dst_mac: mac.map(Into::into),
        });
        r.ports = ports.iter().copied().collect();
        r
    }

    #[test]
    fn isolation_is_unique_and_a_vlan_shares_no_port() {
        let mut a = board("a", 16);
        a.claims
            .push(isolated("ns/x", 10, Some("02:00:00:00:00:01"), &[0]).claim(0, true));
        a.claims
            .push(isolated("ns/y", 20, None, &[]).claim(1, true));
        let one = |r: &Request| place(r, std::slice::from_ref(&a)).map_err(|e| e.to_string());
        assert_eq!(
            one(&isolated("ns/me", 10, Some("02:00:00:00:00:01"), &[1])),
            Err("0/1 switches: 1 isolation vlan 10 dst 02:00:00:00:00:01 held by ns/x".into())
        );
        // Same VLAN, another MAC: only disjoint ports.
        assert_eq!(
            one(&isolated("ns/me", 10, Some("02:00:00:00:00:02"), &[0, 1])),
            Err("0/1 switches: 1 vlan 10 shares ports 0 with ns/x".into())
        );
        assert!(one(&isolated("ns/me", 10, Some("02:00:00:00:00:02"), &[1, 2])).is_ok());
        // ns/y uses every port of VLAN 20.
        assert_eq!(
            one(&isolated("ns/me", 20, Some("02:00:00:00:00:09"), &[3])),
            Err("0/1 switches: 1 vlan 20 shares ports 3 with ns/y".into())
        );
        assert_eq!(
            one(&isolated("ns/me", 30, None, &[7])),
            Err("0/1 switches: 1 spec.portMap: port 7 is not in the Switch's spec.ports".into())
        );
    }

    #[test]
    fn switches_without_resources_or_capacity() {
        let mut bmv2 = board("bmv2", 2);
        bmv2.counts_resources = false;
        bmv2.capacity = None;
        // Not an FPGA: the program's FPGA resources do not apply.
        assert_eq!(place(&req("ns/me", &L2), &[bmv2]), Ok(("bmv2".into(), 0)));
        let mut fpga = board("fpga", 2);
        fpga.capacity = None;
        assert_eq!(
            place(&req("ns/me", &L2), &[fpga]).unwrap_err().to_string(),
            "0/1 switches: 1 capacity unknown (the device did not report it and spec.capacity is empty)"
        );
        assert_eq!(
            place(&req("ns/me", &L2), &[]).unwrap_err().to_string(),
            "0/0 switches: no Switch matches spec.switchSelector"
        );
    }

    /// A BFRT Switch of `slots` devices with `pipes` pipes each.
    fn tofino(slots: u32, pipes: Option<u32>) -> Candidate {
        Candidate {
            counts_resources: false,
            capacity: None,
            pipes,
            bfrt: true,
            ..board("tofino", slots)
        }
    }

    fn on_pipes(me: &str, pipes: Option<&[u32]>) -> Request {
        Request {
            pipes: pipes.map(|p| p.iter().copied().collect()),
            ..req(me, &[])
        }
    }

    /// Places `r` on `c` and records its claim; the claim or the message.
    fn take(c: &mut Candidate, r: &Request) -> Result<SlotClaim, String> {
        let (_, slot) = place(r, std::slice::from_ref(c)).map_err(|e| e.to_string())?;
        let claim = r.claim_on(slot, c);
        c.claims.push(claim.clone());
        Ok(claim)
    }

    #[test]
    fn tofino_pipes_names_exact_pipes_or_the_whole_device() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(tofino_pipes(&[]), Ok(None));
        assert_eq!(tofino_pipes(&names(&["pipe"])), Ok(None));
        assert_eq!(
            tofino_pipes(&names(&["pipe2", "pipe0"])),
            Ok(Some([0, 2].into()))
        );
        assert_eq!(
            tofino_pipes(&names(&["pipe0", "pipe0"])),
            Err("spec.artifacts.tofino.pipes[1]: \"pipe0\" is listed twice".into())
        );
        for bad in ["pipe8", "pipe01", "pipe-1", "egress", "pipe"] {
            let e = tofino_pipes(&names(&["pipe1", bad])).unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "spec.artifacts.tofino.pipes[1]: {bad:?} is not a pipe"
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn pipe_sets_share_a_device_when_disjoint() {
        let mut t = tofino(1, Some(4));
        let a = take(&mut t, &on_pipes("ns/a", Some(&[0, 1]))).unwrap();
        assert_eq!((a.slot, a.pipes.as_slice()), (0, &[0, 1][..]));
        let b = take(&mut t, &on_pipes("ns/b", Some(&[2, 3]))).unwrap();
        assert_eq!(
            (b.slot, b.pipes.as_slice()),
            (0, &[2, 3][..]),
            "same device"
        );
        // A third overlapping either does not fit: a scheduler-style message.
        assert_eq!(
            take(&mut t, &on_pipes("ns/c", Some(&[1, 2]))).unwrap_err(),
            "0/1 switches: 1 no slot with pipes 1,2 free"
        );
        // Nor does a whole-device program.
        assert_eq!(
            take(&mut t, &on_pipes("ns/w", None)).unwrap_err(),
            "0/1 switches: 1 no free slot"
        );
        // A fixed slot names the holder of the pipes.
        let mut fixed = on_pipes("ns/c", Some(&[1, 2]));
        fixed.slot = Some(0);
        assert_eq!(
            take(&mut t, &fixed).unwrap_err(),
            "0/1 switches: 1 pipes 0,1 of slot 0 held by ns/a"
        );
        // Deleting b frees pipes 2 and 3.
        t.claims.retain(|c| c.virtual_switch != "ns/b");
        let c = take(&mut t, &on_pipes("ns/c", Some(&[2]))).unwrap();
        assert_eq!((c.slot, c.pipes.as_slice()), (0, &[2][..]));
        // Its own claim is kept where it runs (placed again, same pipes).
        assert_eq!(
            place(&on_pipes("ns/c", Some(&[2])), std::slice::from_ref(&t)),
            Ok(("tofino".into(), 0))
        );
    }

    #[test]
    fn pipe_sets_move_to_the_next_device_and_hold_a_whole_device_off() {
        let mut t = tofino(2, Some(2));
        // A whole-device program takes slot 0; pipe sets go to slot 1.
        let w = take(&mut t, &on_pipes("ns/w", None)).unwrap();
        assert_eq!((w.slot, w.pipes.len()), (0, 0));
        let a = take(&mut t, &on_pipes("ns/a", Some(&[0]))).unwrap();
        assert_eq!((a.slot, a.pipes.as_slice()), (1, &[0][..]));
        assert_eq!(
            take(&mut t, &on_pipes("ns/b", Some(&[0]))).unwrap_err(),
            "0/1 switches: 1 no slot with pipes 0 free"
        );
        assert_eq!(
            take(&mut t, &on_pipes("ns/x", Some(&[1, 2]))).unwrap_err(),
            "0/1 switches: 1 pipes 1,2 out of range (2 pipes)"
        );
        let mut unknown = tofino(1, None);
        assert_eq!(
            take(&mut unknown, &on_pipes("ns/a", Some(&[0]))).unwrap_err(),
            "0/1 switches: 1 pipe count unknown (the device did not report it and spec.pipes is unset)"
        );
        // A whole-device program on a Switch whose pipes are unknown: as before.
        assert!(take(&mut unknown, &on_pipes("ns/w", None)).is_ok());
        // Other kinds ignore the Tofino pipes (and record none).
        let mut bmv2 = board("bmv2", 1);
        bmv2.counts_resources = false;
        let claim = take(&mut bmv2, &on_pipes("ns/a", Some(&[0]))).unwrap();
        assert!(claim.pipes.is_empty());
    }
}
