//! The Switch's board probe stage: an FPGA Switch is asked what it is
//! (`GetBoardInfo` of the slot service) and its status records slots,
//! capacity (static region excluded) and configuration port as the device
//! reported them; `spec.slots`/`spec.capacity` count only when the device
//! does not say. Free resources and slot usage come from the slot claims
//! recorded on the Switch. [`complete`] is pure.

use std::collections::BTreeMap;

use p4fleet_client::SlotCallError;
use p4fleet_crds::{Condition, ConfigPortStatus, SlotClaim, Switch, SwitchStatus, SwitchTarget};
use p4fleet_proto::fpga as pb;

use crate::devices;
use crate::fleet::slot_claims as claims;

/// Condition type of an FPGA Switch: the slot service answered.
pub const SLOT_SERVICE: &str = "SlotService";

/// What the board said, or why it did not.
pub type BoardProbe = Result<pb::BoardInfo, SlotCallError>;

/// Asks an FPGA Switch's slot service for its board info (None for other kinds).
pub async fn probe(
    devices: &devices::DevicePool,
    sw: &Switch,
    timeout: std::time::Duration,
) -> Option<BoardProbe> {
    if sw.spec.target != SwitchTarget::Fpga {
        return None;
    }
    let client = match devices.slot_client(sw) {
        Ok(c) => c,
        Err(e) => return Some(Err(e.into())),
    };
    Some(
        match tokio::time::timeout(timeout, client.board_info()).await {
            Ok(r) => r,
            Err(_) => Err(SlotCallError::Unreachable {
                endpoint: sw.spec.endpoint.clone(),
                cause: p4fleet_client::ConnectCause::TimedOut,
                reason: format!("no answer within {timeout:?}"),
            }),
        },
    )
}

/// `name=value,...` of a resource map.
pub fn summary(m: &BTreeMap<String, u64>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Fills in what the board reported and what the claims hold: slots,
/// capacity and its source, free resources, the configuration port, the
/// slot-service capability and condition, the slot summary.
pub fn complete(
    st: &mut SwitchStatus,
    sw: &Switch,
    board: Option<&BoardProbe>,
    claims: &[SlotClaim],
) {
    let spec = &sw.spec;
    let (slots, capacity, source) = match board {
        Some(Ok(info)) => {
            let capacity: BTreeMap<String, u64> = info
                .resources
                .iter()
                .map(|r| (r.name.clone(), r.capacity.saturating_sub(r.static_region)))
                .collect();
            st.config_port = info.config_port.as_ref().map(|p| ConfigPortStatus {
                name: p.name.clone(),
                bits_per_second: p.bits_per_second,
                nominal_bits_per_second: Some(p.nominal_bits_per_second),
            });
            let capacity = if capacity.is_empty() {
                spec.capacity.clone()
            } else {
                capacity
            };
            (info.slot_count, capacity, "Device")
        }
        _ => (spec.slots, spec.capacity.clone(), "Spec"),
    };
    let mut free = capacity.clone();
    for c in claims {
        for (r, n) in &c.resources {
            if let Some(f) = free.get_mut(r) {
                *f = f.saturating_sub(*n);
            }
        }
    }
    st.slots = Some(slots);
    st.capacity_source = Some(source.into());
    st.free_summary = (!free.is_empty()).then(|| summary(&free));
    st.capacity = capacity;
    st.free = free;
    st.slot_summary = Some(slot_summary(slots, st.pipes, claims, &st.slots_in_use));
    if let Some(board) = board {
        let cond = match board {
            Ok(info) if info.base_device_id != spec.device_id => device_id_mismatch(spec, info),
            Ok(info) => Condition::new(
                SLOT_SERVICE,
                true,
                "BoardInfo",
                format!(
                    "{} {}: {} slots, {} at {} bit/s",
                    info.board,
                    info.part,
                    info.slot_count,
                    info.config_port
                        .as_ref()
                        .map(|p| p.name.as_str())
                        .unwrap_or("?"),
                    info.config_port
                        .as_ref()
                        .map(|p| p.bits_per_second)
                        .unwrap_or(0)
                ),
            ),
            Err(e) => {
                let reason = match e {
                    SlotCallError::NotServed { .. } => "NotServed",
                    SlotCallError::WrongEndpoint(w) => w.reason(),
                    SlotCallError::Unreachable { cause, .. } => cause.reason(),
                    _ => "Unavailable",
                };
                Condition::new(SLOT_SERVICE, false, reason, e.to_string())
            }
        };
        if let Some(caps) = st.capabilities.as_mut() {
            caps.slot_service = board.is_ok();
            // What the slot service does, once it answered: per-slot loads
            // (others keep forwarding), isolation and port maps in the
            // static region, resources counted when the board lists them.
            caps.hot_swap = board.is_ok();
            caps.isolation = board.is_ok();
            caps.port_map = board.is_ok();
            caps.resources_counted = board.as_ref().is_ok_and(|i| !i.resources.is_empty());
        }
        st.conditions.push(cond);
    }
}

/// `used/total` slots (distinct slots: pipe sets share one), and on a
/// Switch with pipes also `pipes used/total` (a whole-device claim holds
/// every pipe of its slot).
fn slot_summary(
    slots: u32,
    pipes: Option<u32>,
    claims: &[SlotClaim],
    in_use: &[p4fleet_crds::SlotUse],
) -> String {
    let distinct =
        |it: &mut dyn Iterator<Item = u32>| it.collect::<std::collections::BTreeSet<_>>().len();
    let used = distinct(&mut claims.iter().map(|c| c.slot))
        .max(distinct(&mut in_use.iter().map(|u| u.slot)));
    match pipes {
        Some(p) => {
            let held: u32 = claims
                .iter()
                .map(|c| {
                    if c.pipes.is_empty() {
                        p
                    } else {
                        c.pipes.len() as u32
                    }
                })
                .sum();
            format!("{used}/{slots}, pipes {held}/{}", p * slots)
        }
        None => format!("{used}/{slots}"),
    }
}

/// Slot `s` is P4Runtime device `base_device_id + s`, and the operator
/// writes a slot's entries to `spec.deviceId + s`: any other deviceId
/// sends them to the wrong device (or none), so it is a condition.
fn device_id_mismatch(spec: &p4fleet_crds::SwitchSpec, info: &pb::BoardInfo) -> Condition {
    Condition::new(
        SLOT_SERVICE,
        false,
        "DeviceIdMismatch",
        format!(
            "spec.deviceId {} is not the board's base device id {} (slot s is P4Runtime device {} + s); set spec.deviceId to {}",
            spec.device_id, info.base_device_id, info.base_device_id, info.base_device_id
        ),
    )
}

/// The claims on `sw`, or none (with a warning) when the annotation is malformed.
pub fn claims_of(sw: &Switch) -> Vec<SlotClaim> {
    claims::read(sw).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "ignoring slot claims");
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_crds::{SwitchCapabilities, SwitchSpec};

    fn sume() -> pb::BoardInfo {
        pb::BoardInfo {
            board: "netfpga-sume".into(),
            part: "xc7vx690tffg1761-3".into(),
            slot_count: 16,
            base_device_id: 1,
            resources: vec![pb::Resource {
                name: "luts".into(),
                capacity: 433_200,
                static_region: 52_699,
                ..Default::default()
            }],
            config_port: Some(pb::ConfigPort {
                name: "jtag".into(),
                nominal_bits_per_second: 66_000_000,
                bits_per_second: 3_888_889,
            }),
            ..Default::default()
        }
    }

    fn switch(capacity: u64) -> Switch {
        let spec: SwitchSpec = serde_json::from_value(serde_json::json!({
            "target": "Fpga", "endpoint": "h:1", "slots": 4, "capacity": {"luts": capacity}
        }))
        .unwrap();
        Switch::new("b", spec)
    }

    #[test]
    fn the_device_says_slots_and_capacity_the_spec_only_when_it_does_not() {
        let claims = [SlotClaim {
            slot: 2,
            virtual_switch: "ns/a".into(),
            resources: [("luts".into(), 28_096)].into(),
            ..Default::default()
        }];
        let mut st = SwitchStatus {
            capabilities: Some(SwitchCapabilities::default()),
            ..Default::default()
        };
        complete(&mut st, &switch(1000), Some(&Ok(sume())), &claims);
        assert_eq!(st.slots, Some(16));
        assert_eq!(st.capacity["luts"], 380_501);
        assert_eq!(st.free["luts"], 380_501 - 28_096);
        assert_eq!(st.free_summary.as_deref(), Some("luts=352405"));
        assert_eq!(st.slot_summary.as_deref(), Some("1/16"));
        assert_eq!(st.capacity_source.as_deref(), Some("Device"));
        assert_eq!(st.config_port.as_ref().unwrap().bits_per_second, 3_888_889);
        assert!(st.capabilities.as_ref().unwrap().slot_service);
        assert!(st.conditions[0].is_true());

        let mut st = SwitchStatus {
            capabilities: Some(SwitchCapabilities::default()),
            ..Default::default()
        };
        let err = SlotCallError::NotServed {
            endpoint: "h:1".into(),
        };
        complete(&mut st, &switch(1000), Some(&Err(err)), &[]);
        assert_eq!((st.slots, st.capacity["luts"]), (Some(4), 1000));
        assert_eq!(st.capacity_source.as_deref(), Some("Spec"));
        assert!(!st.capabilities.as_ref().unwrap().slot_service);
        assert_eq!(st.conditions[0].reason, "NotServed");
    }

    #[test]
    fn pipe_sets_share_a_slot_and_count_pipes() {
        let claim = |slot, vs: &str, pipes: &[u32]| SlotClaim {
            slot,
            virtual_switch: vs.into(),
            pipes: pipes.to_vec(),
            ..Default::default()
        };
        let claims = [claim(0, "ns/a", &[0, 1]), claim(0, "ns/b", &[2])];
        assert_eq!(slot_summary(1, Some(4), &claims, &[]), "1/1, pipes 3/4");
        let whole = [claim(1, "ns/w", &[]), claim(0, "ns/a", &[0])];
        assert_eq!(slot_summary(2, Some(2), &whole, &[]), "2/2, pipes 3/4");
        assert_eq!(
            slot_summary(16, None, &[claim(3, "ns/f", &[])], &[]),
            "1/16"
        );
    }

    #[test]
    fn a_device_id_other_than_the_boards_base_is_a_condition() {
        let mut st = SwitchStatus {
            capabilities: Some(SwitchCapabilities::default()),
            ..Default::default()
        };
        let mut sw = switch(1000);
        sw.spec.device_id = 5;
        complete(&mut st, &sw, Some(&Ok(sume())), &[]);
        let c = &st.conditions[0];
        assert_eq!(
            (c.is_true(), c.reason.as_str()),
            (false, "DeviceIdMismatch")
        );
        assert_eq!(
            c.message,
            "spec.deviceId 5 is not the board's base device id 1 (slot s is P4Runtime device 1 + s); set spec.deviceId to 1"
        );
        // The board answered; what it said is still recorded.
        assert!(st.capabilities.as_ref().unwrap().slot_service);
        assert_eq!(st.slots, Some(16));
    }
}
