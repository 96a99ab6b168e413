//! Slot claims as every controller reads them: which VirtualSwitch holds
//! which slot (and pipes) of a Switch, recorded on the Switch itself
//! (annotation [`SLOT_CLAIMS_ANNOTATION`]), and the device that holds a
//! VirtualSwitch's program. Writing claims is placement's
//! (`controllers::virtual_switch::claims`); the Switch's board probe, the
//! sets that fill a VirtualSwitch and the VirtualSwitch itself read them.

use kube::ResourceExt;
use p4fleet_crds::{SLOT_CLAIMS_ANNOTATION, SlotClaim, Switch};

/// A claim annotation that does not parse: an error, not "no claims",
/// since ignoring it could overbook the board.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Switch {switch}: annotation {SLOT_CLAIMS_ANNOTATION} is not a claim list: {reason}")]
pub struct Malformed {
    pub switch: String,
    pub reason: String,
}

/// The claims recorded on a Switch. A malformed annotation counts as no
/// claims only when absent; otherwise it is an error, since ignoring it
/// could overbook the board.
pub fn read(sw: &Switch) -> Result<Vec<SlotClaim>, Malformed> {
    match sw.annotations().get(SLOT_CLAIMS_ANNOTATION) {
        None => Ok(Vec::new()),
        Some(s) => serde_json::from_str(s).map_err(|e| Malformed {
            switch: sw.name_any(),
            reason: e.to_string(),
        }),
    }
}

/// The first pipe of `vs`'s (`namespace/name`) pipe set on `sw`, from
/// its slot claim; None when it holds a whole device or slot.
pub fn first_pipe(sw: &Switch, vs: &str) -> Option<u32> {
    read(sw)
        .ok()?
        .into_iter()
        .find(|c| c.virtual_switch == vs)?
        .pipes
        .into_iter()
        .min()
}

/// The device that holds `vs`'s program in `slot` of `sw`: the pool's
/// connection, or on a pipe set starting at `first_pipe` the program's
/// own client (its entries are written and read through it).
pub fn program_device(
    pool: &crate::devices::DevicePool,
    sw: &Switch,
    slot: u32,
    first_pipe: Option<u32>,
    vs: &str,
) -> Result<std::sync::Arc<p4fleet_client::Device>, p4fleet_client::Error> {
    let dev = pool.connect(sw)?;
    let Some(first) = first_pipe else {
        return Ok(dev);
    };
    dev.pipe_set(slot, first)
        .ok_or_else(|| p4fleet_client::Error::Protocol {
            device_id: sw.spec.device_id + u64::from(slot),
            reason: format!(
                "VirtualSwitch {vs}: its program is not loaded on its pipe set (from pipe {first}) by this operator yet"
            ),
        })
}
