//! The client's one error type, and how gRPC statuses map onto it.

/// Why a device call could not be made or was refused as a whole.
/// Refusals of single updates are not errors: they are in the
/// [`WriteReport`](crate::WriteReport).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },
    /// The caller could not provide the target's TLS material (e.g. the
    /// operator's Secret is missing); `reason` says why.
    #[error("TLS material for {endpoint} unavailable: {reason}")]
    TlsUnavailable { endpoint: String, reason: String },
    #[error("invalid TLS material: {0}")]
    TlsMaterial(#[from] crate::TlsMaterialError),
    /// The TLS handshake with the device failed; `failure` says why.
    #[error("TLS to {endpoint} failed: {failure} ({detail})")]
    Tls {
        endpoint: String,
        failure: crate::TlsFailure,
        detail: String,
    },
    #[error("{0} is not supported")]
    Unsupported(&'static str),
    /// The device could not be reached: `cause` is why, by type (for
    /// condition reasons); `reason` is the transport's own words.
    #[error("device {device_id} at {endpoint} is unreachable: {cause} ({reason})")]
    Unreachable {
        endpoint: String,
        device_id: u64,
        cause: crate::ConnectCause,
        reason: String,
    },
    #[error("not primary for device {device_id}: {refusal}")]
    NotPrimary {
        device_id: u64,
        /// Boxed: it holds a u128 (16-byte aligned), which would double
        /// the size of every `Result` carrying this error.
        refusal: Box<crate::Refusal>,
    },
    #[error("{rpc} on device {device_id} at {endpoint} failed: {status}")]
    Rpc {
        endpoint: String,
        rpc: &'static str,
        device_id: u64,
        status: Box<tonic::Status>,
    },
    /// The endpoint answered, but not as the device's protocol: what it
    /// seems to be instead (another protocol's server, an HTTP server, not
    /// HTTP/2 at all), by [`crate::Found`].
    #[error(transparent)]
    WrongEndpoint(#[from] crate::WrongEndpoint),
    #[error("device {device_id} sent an invalid answer: {reason}")]
    Protocol { device_id: u64, reason: String },
}

impl Error {
    /// The error of a failed call: a failed TLS handshake is [`Error::Tls`],
    /// UNAVAILABLE, or a connection that failed in a way
    /// [`crate::ConnectCause`] knows (a reset is UNKNOWN to tonic), means
    /// the device could not be reached, anything else is the device's
    /// answer.
    pub(crate) fn rpc(
        endpoint: &str,
        rpc: &'static str,
        device_id: u64,
        status: tonic::Status,
    ) -> Error {
        if let Some((failure, detail)) = crate::tls::tls_failure(&status) {
            Error::Tls {
                endpoint: endpoint.to_string(),
                failure,
                detail,
            }
        } else if let Some(cause) = unreachable(&status) {
            Error::Unreachable {
                endpoint: endpoint.to_string(),
                device_id,
                cause,
                reason: status.message().to_string(),
            }
        } else {
            Error::Rpc {
                endpoint: endpoint.to_string(),
                rpc,
                device_id,
                status: Box::new(status),
            }
        }
    }
}

/// Why the call of `status` never reached the device, if it did not.
/// Only a failed call has a source (an answer has none), so a known
/// cause under any code is a connection that failed.
fn unreachable(status: &tonic::Status) -> Option<crate::ConnectCause> {
    let cause = crate::ConnectCause::of(status);
    if status.code() == tonic::Code::Unavailable {
        Some(cause)
    } else {
        (std::error::Error::source(status).is_some() && cause != crate::ConnectCause::Other)
            .then_some(cause)
    }
}

/// A status as one line: `Code: message`.
pub(crate) fn status_line(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_is_unreachable_the_rest_is_the_answer() {
        let e = Error::rpc("h:1", "Read", 3, tonic::Status::unavailable("down"));
        assert!(
            matches!(&e, Error::Unreachable { device_id: 3, reason, .. } if reason == "down"),
            "{e:?}"
        );
        let e = Error::rpc("h:1", "Read", 3, tonic::Status::not_found("x"));
        assert!(
            matches!(&e, Error::Rpc { rpc: "Read", status, .. } if status.code() == tonic::Code::NotFound)
        );
        // A connection reset under UNKNOWN (how tonic reports it) is no answer.
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let e = Error::rpc("h:1", "Read", 3, tonic::Status::from_error(Box::new(reset)));
        assert!(
            matches!(
                &e,
                Error::Unreachable {
                    cause: crate::ConnectCause::Reset,
                    ..
                }
            ),
            "{e:?}"
        );
        // Every call's error names the endpoint.
        let e = Error::rpc("h:1", "Read", 3, tonic::Status::internal("x"));
        assert!(e.to_string().contains(" at h:1 "), "{e}");
        assert_eq!(
            status_line(&tonic::Status::aborted("no")),
            "Aborted: no".to_string()
        );
    }
}
