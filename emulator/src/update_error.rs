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

/// Marks field `idx` as given in `seen` (fields past the 64th are not
/// tracked), or refuses it as InvalidArgument with `duplicate()` when it
/// already was: a field named twice in one update.
pub(crate) fn given_once(
    seen: &mut u64,
    idx: usize,
    duplicate: impl FnOnce() -> String,
) -> Result<(), UpdateError> {
    if idx < 64 {
        if *seen & (1 << idx) != 0 {
            return Err(err(Code::InvalidArgument, duplicate()));
        }
        *seen |= 1 << idx;
    }
    Ok(())
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
