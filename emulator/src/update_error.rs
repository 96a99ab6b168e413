//! Why one update (or one read key) was refused: the per-update error both
//! front ends' table stores return, and from which each builds its own
//! per-update error details.

use tonic::Code;

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
