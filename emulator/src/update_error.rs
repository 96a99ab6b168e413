//! Why one update (or one read key) was refused: the per-update error both
//! front ends' table stores return, and from which each builds its own
//! per-update error details.

use tonic::{Code, Status};

use crate::wire::WireError;

/// Why one update (or one read key) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct UpdateError {
    pub code: Code,
    pub message: String,
}

pub fn err(code: Code, message: impl Into<String>) -> UpdateError {
    UpdateError {
        code,
        message: message.into(),
    }
}

/// The definition of a field an update names, `found` with its index, and
/// marked as given in `seen` (fields past the 64th are not tracked).
/// Refused as InvalidArgument with `unknown()` when there is none, or with
/// `duplicate(def)` when the update named it before.
pub(crate) fn given_once<T>(
    seen: &mut u64,
    found: Option<(usize, T)>,
    unknown: impl FnOnce() -> String,
    duplicate: impl FnOnce(&T) -> String,
) -> Result<T, UpdateError> {
    let Some((idx, def)) = found else {
        return Err(err(Code::InvalidArgument, unknown()));
    };
    if idx < 64 {
        if *seen & (1 << idx) != 0 {
            return Err(err(Code::InvalidArgument, duplicate(&def)));
        }
        *seen |= 1 << idx;
    }
    Ok(def)
}

/// An action id that is not among `table`'s actions.
pub(crate) fn not_an_action_of(table: &str, action_id: u32) -> UpdateError {
    err(
        Code::InvalidArgument,
        format!("table {table}: action id {action_id} is not an action of this table"),
    )
}

/// An update (or read filter) that is not valid protobuf.
pub(crate) fn malformed(e: WireError) -> UpdateError {
    err(Code::InvalidArgument, format!("update: {e}"))
}

/// A value in an error message.
pub(crate) fn hex(v: &[u8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}

/// A refused read key fails the whole Read with the key's code.
impl From<UpdateError> for Status {
    fn from(e: UpdateError) -> Status {
        Status::new(e.code, e.message)
    }
}
