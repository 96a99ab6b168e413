//! Why a device could not be reached, as a typed cause: the error source
//! chain of a failed call (tonic status → transport error → hyper-util's
//! connect error → `std::io::Error`, or our resolver's [`ResolveError`])
//! is walked and decided on types and `io::ErrorKind`s, never on text.
//! TLS failures are [`crate::TlsFailure`]s, told apart in `tls`.

use std::error::Error as StdError;
use std::fmt;
use std::io::ErrorKind;

/// What stopped the connection to a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectCause {
    /// Nothing listens on the endpoint's port (ECONNREFUSED).
    Refused,
    /// The host or its network cannot be routed to (EHOSTUNREACH,
    /// ENETUNREACH).
    NoRoute,
    /// The endpoint's host name did not resolve to any address.
    Dns,
    /// No answer in time: the TCP connect, or the device's first answer.
    TimedOut,
    /// The device reset or closed the connection.
    Reset,
    /// The device ended the stream without an error.
    StreamClosed,
    /// Anything else that made the call UNAVAILABLE (e.g. an HTTP/2
    /// protocol error); the detail text says what.
    Other,
}

impl ConnectCause {
    /// A condition reason (CamelCase) for this cause.
    pub fn reason(self) -> &'static str {
        match self {
            ConnectCause::Refused => "ConnectionRefused",
            ConnectCause::NoRoute => "NoRouteToHost",
            ConnectCause::Dns => "DnsNameNotResolved",
            ConnectCause::TimedOut => "ConnectTimeout",
            ConnectCause::Reset => "ConnectionReset",
            ConnectCause::StreamClosed => "StreamClosed",
            ConnectCause::Other => "Unreachable",
        }
    }

    /// The cause somewhere in `err`'s source chain ([`ConnectCause::Other`]
    /// when none is recognised).
    pub fn of(err: &(dyn StdError + 'static)) -> ConnectCause {
        let mut next = Some(err);
        while let Some(e) = next {
            if e.downcast_ref::<ResolveError>().is_some() {
                return ConnectCause::Dns;
            }
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if let Some(c) = of_kind(io.kind()) {
                    return c;
                }
                // An io::Error's `source` skips the error it wraps.
                if let Some(inner) = io.get_ref() {
                    let c = ConnectCause::of(inner);
                    if c != ConnectCause::Other {
                        return c;
                    }
                }
            }
            if e.downcast_ref::<tokio::time::error::Elapsed>().is_some() {
                return ConnectCause::TimedOut;
            }
            next = e.source();
        }
        ConnectCause::Other
    }
}

fn of_kind(kind: ErrorKind) -> Option<ConnectCause> {
    Some(match kind {
        ErrorKind::ConnectionRefused => ConnectCause::Refused,
        ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => ConnectCause::NoRoute,
        ErrorKind::TimedOut => ConnectCause::TimedOut,
        ErrorKind::ConnectionReset
        | ErrorKind::ConnectionAborted
        | ErrorKind::BrokenPipe
        | ErrorKind::NotConnected
        | ErrorKind::UnexpectedEof => ConnectCause::Reset,
        _ => return None,
    })
}

impl fmt::Display for ConnectCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnectCause::Refused => "connection refused",
            ConnectCause::NoRoute => "no route to host",
            ConnectCause::Dns => "DNS: name not resolved",
            ConnectCause::TimedOut => "timed out",
            ConnectCause::Reset => "connection reset by the device",
            ConnectCause::StreamClosed => "the device closed the stream",
            ConnectCause::Other => "unreachable",
        })
    }
}

/// A host name that did not resolve (from the channel's resolver, so that
/// a DNS failure is a type in the error chain, not a phrase).
#[derive(Debug, thiserror::Error)]
#[error("{host}: {}", match .source { Some(e) => e.to_string(), None => "no address".to_string() })]
pub struct ResolveError {
    pub host: String,
    #[source]
    pub source: Option<std::io::Error>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    fn status_over(e: impl StdError + Send + Sync + 'static) -> tonic::Status {
        tonic::Status::from_error(Box::new(e))
    }

    /// An error that wraps another (as hyper-util's connect error does).
    #[derive(Debug, thiserror::Error)]
    #[error("tcp connect error")]
    struct Wrapper(#[source] Box<dyn StdError + Send + Sync>);

    #[test]
    fn io_kinds_through_wrappers_and_statuses() {
        let cases = [
            (ErrorKind::ConnectionRefused, ConnectCause::Refused),
            (ErrorKind::HostUnreachable, ConnectCause::NoRoute),
            (ErrorKind::NetworkUnreachable, ConnectCause::NoRoute),
            (ErrorKind::TimedOut, ConnectCause::TimedOut),
            (ErrorKind::ConnectionReset, ConnectCause::Reset),
            (ErrorKind::BrokenPipe, ConnectCause::Reset),
            (ErrorKind::PermissionDenied, ConnectCause::Other),
        ];
        for (kind, want) in cases {
            let io = io::Error::new(kind, "x");
            let status = status_over(Wrapper(Box::new(io)));
            assert_eq!(ConnectCause::of(&status), want, "{kind:?}");
        }
        // The OS's own code, as a failed connect(2) gives it.
        let refused = io::Error::from_raw_os_error(111);
        assert_eq!(
            ConnectCause::of(&Wrapper(Box::new(refused))),
            ConnectCause::Refused
        );
        // An io::Error wrapping an io::Error of another kind.
        let inner = io::Error::new(ErrorKind::ConnectionRefused, "refused");
        let outer = io::Error::other(inner);
        assert_eq!(ConnectCause::of(&outer), ConnectCause::Refused);
    }

    #[test]
    fn resolver_failures_are_dns_whatever_they_say() {
        let e = ResolveError {
            host: "nonexistent.invalid".into(),
            source: Some(io::Error::other("anything")),
        };
        assert_eq!(
            ConnectCause::of(&status_over(Wrapper(Box::new(e)))),
            ConnectCause::Dns
        );
        let empty = ResolveError {
            host: "h".into(),
            source: None,
        };
        assert_eq!(ConnectCause::of(&empty), ConnectCause::Dns);
    }

    #[test]
    fn text_alone_is_no_cause() {
        let s = tonic::Status::unavailable("tcp connect error: Connection refused");
        assert_eq!(ConnectCause::of(&s), ConnectCause::Other);
    }

    #[test]
    fn every_cause_has_its_own_reason() {
        use ConnectCause::*;
        let all = [Refused, NoRoute, Dns, TimedOut, Reset, StreamClosed, Other];
        let reasons: std::collections::HashSet<_> = all.iter().map(|c| c.reason()).collect();
        assert_eq!(reasons.len(), all.len());
    }
}
