//! What answered on an endpoint that did not answer a call as the service
//! the call was for: a gRPC server of the other P4 protocol, a gRPC server
//! of something else, an HTTP server, or something that does not speak
//! HTTP/2 at all. Decided on what the endpoint sent, never on error text:
//! gRPC status codes, the content-type of an HTTP/2 answer, h2's own
//! error kinds, an HTTP/1 status line.
//!
//! Only a failed call is looked into, so a healthy device never pays for
//! it: one raw gRPC request per service asked, on the call's channel, and,
//! when the connection broke in HTTP/2's framing, one HTTP/1.1 request on
//! a connection of its own.

use std::fmt;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use prost::bytes::Bytes;
use tonic::Code;
use tonic::codegen::http::{self, HeaderMap, StatusCode, header};
use tonic::transport::Channel;
use tower_service::Service as _;

use crate::{Error, Protocol, Target};

/// The longest a look at a failed endpoint may take in all; past it the
/// call's own error stands.
const LOOK_TIME: Duration = Duration::from_secs(2);

/// A gRPC service of p4fleet-client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// `p4.v1.P4Runtime`.
    P4Runtime,
    /// `bfrt_proto.BfRuntime` (Tofino).
    Bfrt,
    /// p4fleet's FPGA slot service, `p4fleet.fpga.v1.SlotService`.
    FpgaSlots,
    /// p4fleet's extern runtime, `p4fleet.externs.v1.ExternRuntime`.
    ExternRuntime,
}

impl Service {
    /// The gRPC service name.
    pub fn grpc_name(self) -> &'static str {
        match self {
            Service::P4Runtime => "p4.v1.P4Runtime",
            Service::Bfrt => "bfrt_proto.BfRuntime",
            Service::FpgaSlots => "p4fleet.fpga.v1.SlotService",
            Service::ExternRuntime => "p4fleet.externs.v1.ExternRuntime",
        }
    }

    /// The protocol a device of this service speaks, if it is one.
    pub fn protocol(self) -> Option<Protocol> {
        match self {
            Service::P4Runtime => Some(Protocol::P4Runtime),
            Service::Bfrt => Some(Protocol::Bfrt),
            Service::FpgaSlots | Service::ExternRuntime => None,
        }
    }

    /// A cheap read of this service: any answer but UNIMPLEMENTED shows it
    /// is served (an empty request message is valid for each; a device
    /// id of 0 may be refused, which is an answer too).
    fn probe_path(self) -> &'static str {
        match self {
            Service::P4Runtime => "/p4.v1.P4Runtime/Capabilities",
            Service::Bfrt => "/bfrt_proto.BfRuntime/GetForwardingPipelineConfig",
            Service::FpgaSlots => "/p4fleet.fpga.v1.SlotService/GetBoardInfo",
            Service::ExternRuntime => "/p4fleet.externs.v1.ExternRuntime/ListExterns",
        }
    }

    /// The services an endpoint taken for this one may serve instead: the
    /// P4 protocols for each other. The side services share a P4Runtime
    /// port, so a server without them is just "not served".
    fn others(self) -> &'static [Service] {
        match self {
            Service::P4Runtime => &[Service::Bfrt],
            Service::Bfrt => &[Service::P4Runtime],
            Service::FpgaSlots | Service::ExternRuntime => &[],
        }
    }
}

impl From<Protocol> for Service {
    fn from(p: Protocol) -> Service {
        match p {
            Protocol::P4Runtime => Service::P4Runtime,
            Protocol::Bfrt => Service::Bfrt,
        }
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Service::P4Runtime => "P4Runtime",
            Service::Bfrt => "BFRT",
            Service::FpgaSlots => "FPGA slot service",
            Service::ExternRuntime => "extern runtime",
        })
    }
}

/// What an endpoint that did not answer as the expected service seems to
/// be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A gRPC server of another service: it answered that service's
    /// request with something other than UNIMPLEMENTED.
    Serves(Service),
    /// A gRPC server that answered UNIMPLEMENTED to every service asked.
    OtherGrpc,
    /// An HTTP/2 server whose answer is not gRPC (no `application/grpc`
    /// content-type): its HTTP status and content-type.
    Http {
        status: u16,
        content_type: Option<String>,
    },
    /// An HTTP/1 server: it answered an HTTP/1.1 request with this status
    /// (gRPC needs HTTP/2).
    Http1 { status: u16 },
    /// It broke HTTP/2's framing at once and answered an HTTP/1.1 request
    /// with bytes that are not HTTP either.
    NotHttp,
}

impl Found {
    /// A condition reason (CamelCase) for what was found.
    pub fn reason(&self) -> &'static str {
        match self {
            Found::Serves(_) => "WrongProtocol",
            Found::OtherGrpc => "OtherGrpcService",
            Found::Http { .. } => "NotGrpc",
            Found::Http1 { .. } => "Http1Server",
            Found::NotHttp => "NotHttp2",
        }
    }
}

/// An endpoint that answered, but not as the service a call was for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(.endpoint, *.expected, .found))]
pub struct WrongEndpoint {
    /// `host:port`.
    pub endpoint: String,
    /// The service the call was for.
    pub expected: Service,
    /// What answered instead.
    pub found: Found,
}

impl WrongEndpoint {
    /// A condition reason (CamelCase): [`Found::reason`].
    pub fn reason(&self) -> &'static str {
        self.found.reason()
    }
}

fn describe(endpoint: &str, expected: Service, found: &Found) -> String {
    const PORT: &str = "check the endpoint's port";
    match found {
        Found::Serves(other) => format!(
            "{endpoint} answered, but not as a {expected} server: it serves {other} ({})",
            other.grpc_name()
        ),
        Found::OtherGrpc => match expected.others() {
            [other] => format!(
                "{endpoint} is a gRPC server, but of neither {expected} nor {other} (UNIMPLEMENTED to both): {PORT}"
            ),
            _ => format!(
                "{endpoint} is a gRPC server, but without the {expected} (UNIMPLEMENTED): {PORT}"
            ),
        },
        Found::Http {
            status,
            content_type,
        } => {
            let ct = match content_type {
                Some(c) => format!("content-type {c}"),
                None => "no content-type".to_string(),
            };
            format!(
                "{endpoint} is an HTTP server, not gRPC: it answered a {expected} request with HTTP {status} ({ct}): {PORT}"
            )
        }
        Found::Http1 { status } => format!(
            "{endpoint} is an HTTP/1 server, not gRPC (which needs HTTP/2): it answered an HTTP/1.1 request with HTTP {status}: {PORT}"
        ),
        Found::NotHttp => format!(
            "{endpoint} is not speaking HTTP/2 (nor HTTP/1), so it is no gRPC server: {PORT}"
        ),
    }
}

/// What answered `endpoint`, when `status` (a failed call of `expected`
/// on `channel`) may hide that it is not `expected`'s server; None when
/// the call's own error says it (the device answered as `expected`, the
/// connection failed, or the look failed or took too long).
pub async fn identify(
    channel: &Channel,
    endpoint: &str,
    expected: Service,
    status: &tonic::Status,
) -> Option<Found> {
    let look = async {
        if broke_http2(status) {
            return http1::probe(endpoint).await;
        }
        if !may_be_http(status) {
            return None;
        }
        match ask(channel, expected).await? {
            Answer::Http {
                status,
                content_type,
            } => Some(Found::Http {
                status,
                content_type,
            }),
            Answer::Grpc(Code::Unimplemented) => {
                for &other in expected.others() {
                    if let Answer::Grpc(code) = ask(channel, other).await?
                        && code != Code::Unimplemented
                    {
                        return Some(Found::Serves(other));
                    }
                }
                Some(Found::OtherGrpc)
            }
            // A gRPC answer of the service itself: the call's error stands.
            Answer::Grpc(_) => None,
        }
    };
    tokio::time::timeout(LOOK_TIME, look).await.ok().flatten()
}

/// The error of a failed call of `target`'s protocol on `channel`:
/// [`Error::WrongEndpoint`] when what answered is not that protocol's
/// server, else [`Error::rpc`].
pub(crate) async fn call_error(
    channel: &Channel,
    target: &Target,
    rpc: &'static str,
    device_id: u64,
    status: tonic::Status,
) -> Error {
    let expected = Service::from(target.protocol);
    match identify(channel, &target.endpoint, expected, &status).await {
        Some(found) => Error::WrongEndpoint(WrongEndpoint {
            endpoint: target.endpoint.clone(),
            expected,
            found,
        }),
        None => Error::rpc(&target.endpoint, rpc, device_id, status),
    }
}

/// Whether the connection ended because the peer broke HTTP/2's framing
/// (h2 itself sent GOAWAY: e.g. a first "frame" larger than allowed,
/// which is what an HTTP/1 status line or a banner reads as).
fn broke_http2(status: &tonic::Status) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(status);
    while let Some(e) = next {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return h2.is_go_away() && h2.is_library();
        }
        next = e.source();
    }
    false
}

/// Whether `status` may be tonic's reading of an HTTP answer that was not
/// gRPC: an answer (no transport error under it) with a code tonic infers
/// from an HTTP status (404 UNIMPLEMENTED, 400 and an undecodable body
/// INTERNAL, 401, 403, 429/502/503/504 UNAVAILABLE, the rest UNKNOWN).
/// Other codes come only from a grpc-status.
fn may_be_http(status: &tonic::Status) -> bool {
    std::error::Error::source(status).is_none()
        && matches!(
            status.code(),
            Code::Unimplemented
                | Code::Internal
                | Code::Unknown
                | Code::Unauthenticated
                | Code::PermissionDenied
                | Code::Unavailable
        )
}

/// How an HTTP/2 server answered one request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// As gRPC, with this status.
    Grpc(Code),
    /// As plain HTTP.
    Http {
        status: u16,
        content_type: Option<String>,
    },
}

/// What an answer's head says: gRPC (with the status when it is in the
/// head: a trailers-only answer) or plain HTTP.
fn head(status: StatusCode, headers: &HeaderMap) -> Result<Option<Code>, Answer> {
    let content_type = headers.get(header::CONTENT_TYPE);
    // gRPC's content-type is application/grpc, maybe with +proto etc.
    let grpc = content_type.is_some_and(|c| c.as_bytes().starts_with(b"application/grpc"));
    if !grpc {
        return Err(Answer::Http {
            status: status.as_u16(),
            content_type: content_type.map(|c| String::from_utf8_lossy(c.as_bytes()).into_owned()),
        });
    }
    Ok(tonic::Status::from_header_map(headers).map(|s| s.code()))
}

/// Sends `service`'s probe request (an empty message) on `channel`; None
/// when the request failed (no answer at all).
async fn ask(channel: &Channel, service: Service) -> Option<Answer> {
    // gRPC's framing of an empty message: not compressed, length 0.
    const EMPTY_MESSAGE: &[u8] = &[0, 0, 0, 0, 0];
    let req = http::Request::builder()
        .method(http::Method::POST)
        .uri(service.probe_path())
        .header(header::CONTENT_TYPE, "application/grpc")
        .header(header::TE, "trailers")
        .body(tonic::body::Body::new(Full::new(Bytes::from_static(
            EMPTY_MESSAGE,
        ))))
        .ok()?;
    let mut ch = channel.clone();
    std::future::poll_fn(|cx| ch.poll_ready(cx)).await.ok()?;
    let (parts, body) = ch.call(req).await.ok()?.into_parts();
    match head(parts.status, &parts.headers) {
        Err(http) => Some(http),
        Ok(Some(code)) => Some(Answer::Grpc(code)),
        Ok(None) => {
            // The status is in the trailers, after a (small) message.
            let all = Limited::new(body, 1 << 20).collect().await.ok()?;
            let code = all
                .trailers()
                .and_then(tonic::Status::from_header_map)
                .map_or(Code::Unknown, |s| s.code());
            Some(Answer::Grpc(code))
        }
    }
}

/// The HTTP/1.1 look at an endpoint that broke HTTP/2's framing.
mod http1 {
    use super::Found;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What the first bytes an endpoint sent back to an HTTP/1.1 request
    /// are.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(super) enum Reply {
        /// An HTTP/1 status line, with its status.
        Http1(u16),
        /// An HTTP/2 frame (a server's SETTINGS or GOAWAY on stream 0):
        /// it speaks HTTP/2 after all.
        Http2,
        /// A TLS record (an alert): a TLS port, not a plaintext one.
        Tls,
        /// Nothing before it closed or went quiet.
        Nothing,
        /// Bytes that are none of these.
        Other,
    }

    impl Reply {
        pub(super) fn of(bytes: &[u8]) -> Reply {
            if bytes.is_empty() {
                return Reply::Nothing;
            }
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut r = httparse::Response::new(&mut headers);
            // A status line is enough (the code is set once it parsed);
            // the headers may be cut off or too many.
            let _ = r.parse(bytes);
            if let Some(code) = r.code {
                return Reply::Http1(code);
            }
            if is_h2_frame(bytes) {
                return Reply::Http2;
            }
            // Content type alert (21) or handshake (22), version 3.x.
            if bytes.len() >= 3 && matches!(bytes[0], 21 | 22) && bytes[1] == 3 {
                return Reply::Tls;
            }
            Reply::Other
        }

        /// What the reply says the endpoint is, when it says.
        pub(super) fn found(self) -> Option<Found> {
            match self {
                Reply::Http1(status) => Some(Found::Http1 { status }),
                Reply::Other => Some(Found::NotHttp),
                // Neither makes it "not HTTP/2" for sure: the call's own
                // error stands.
                Reply::Http2 | Reply::Tls | Reply::Nothing => None,
            }
        }
    }

    /// A frame header of SETTINGS (4) or GOAWAY (7) on stream 0 within
    /// the default maximum frame size: what an HTTP/2 server sends first.
    fn is_h2_frame(b: &[u8]) -> bool {
        if b.len() < 9 {
            return false;
        }
        let len = u32::from_be_bytes([0, b[0], b[1], b[2]]);
        let stream = u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff;
        len <= 1 << 14 && matches!(b[3], 4 | 7) && stream == 0
    }

    /// Sends `GET /` over HTTP/1.1 on a connection of its own and reads
    /// the first line of the reply.
    pub(super) async fn probe(endpoint: &str) -> Option<Found> {
        let mut s = tokio::net::TcpStream::connect(endpoint).await.ok()?;
        let req = format!("GET / HTTP/1.1\r\nHost: {endpoint}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::with_capacity(512);
        // Up to the status line's end (or 9 bytes of a frame header, or
        // 512 bytes), the end of the stream, or quiet.
        let read = async {
            while buf.len() < 512 && !buf.windows(2).any(|w| w == b"\r\n") {
                let mut chunk = [0u8; 512];
                match s.read(&mut chunk[..512 - buf.len()]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
                if buf.len() >= 9 && Reply::of(&buf) == Reply::Http2 {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), read).await;
        Reply::of(&buf).found()
    }
}

#[cfg(test)]
mod tests {
    use super::http1::Reply;
    use super::*;

    #[test]
    fn heads_tell_grpc_from_http() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, "application/grpc".parse().unwrap());
        assert_eq!(head(StatusCode::OK, &h), Ok(None));
        h.insert("grpc-status", "12".parse().unwrap());
        assert_eq!(head(StatusCode::OK, &h), Ok(Some(Code::Unimplemented)));
        h.insert(
            header::CONTENT_TYPE,
            "application/grpc+proto".parse().unwrap(),
        );
        assert_eq!(head(StatusCode::OK, &h), Ok(Some(Code::Unimplemented)));
        // An HTTP answer, with or without a content-type.
        let mut h = HeaderMap::new();
        assert_eq!(
            head(StatusCode::NOT_FOUND, &h),
            Err(Answer::Http {
                status: 404,
                content_type: None
            })
        );
        h.insert(header::CONTENT_TYPE, "text/html".parse().unwrap());
        // A grpc-status alone does not make it gRPC.
        h.insert("grpc-status", "0".parse().unwrap());
        assert_eq!(
            head(StatusCode::OK, &h),
            Err(Answer::Http {
                status: 200,
                content_type: Some("text/html".into())
            })
        );
    }

    #[test]
    fn only_answers_with_codes_tonic_infers_from_http_are_looked_into() {
        assert!(may_be_http(&tonic::Status::unimplemented("")));
        assert!(may_be_http(&tonic::Status::internal("")));
        assert!(may_be_http(&tonic::Status::unknown("")));
        assert!(may_be_http(&tonic::Status::unavailable("")));
        // Only a grpc-status says these: the service answered.
        assert!(!may_be_http(&tonic::Status::not_found("")));
        assert!(!may_be_http(&tonic::Status::invalid_argument("")));
        assert!(!may_be_http(&tonic::Status::failed_precondition("")));
        // A transport failure under it: no answer to look at.
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "x");
        let failed = tonic::Status::from_error(Box::new(io));
        assert_eq!(failed.code(), Code::Unknown);
        assert!(!may_be_http(&failed));
        assert!(!broke_http2(&failed));
        // h2's error for a reset stream is not the peer breaking framing.
        let reset = tonic::Status::from_error(Box::new(h2::Error::from(h2::Reason::CANCEL)));
        assert!(!broke_http2(&reset));
    }

    #[test]
    fn first_replies_to_http1_say_what_answered() {
        let cases: [(&[u8], Reply); 9] = [
            (b"HTTP/1.1 404 Not Found\r\n", Reply::Http1(404)),
            (
                b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
                Reply::Http1(400),
            ),
            // The status line alone, the rest not read.
            (
                b"HTTP/1.1 505 HTTP Version Not Supported\r\nServ",
                Reply::Http1(505),
            ),
            // A server's SETTINGS (what tonic sends to a GET).
            (
                &[0, 0, 18, 4, 0, 0, 0, 0, 0, 0, 4, 0, 16, 0, 0],
                Reply::Http2,
            ),
            // GOAWAY on stream 0.
            (
                &[0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                Reply::Http2,
            ),
            // A TLS alert record (decode_error).
            (&[21, 3, 3, 0, 2, 2, 50], Reply::Tls),
            (b"", Reply::Nothing),
            (b"SSH-2.0-OpenSSH_9.6\r\n", Reply::Other),
            (b"HTTP/2 200\r\n", Reply::Other),
        ];
        for (bytes, want) in cases {
            assert_eq!(Reply::of(bytes), want, "{bytes:?}");
        }
        assert_eq!(
            Reply::Http1(404).found(),
            Some(Found::Http1 { status: 404 })
        );
        assert_eq!(Reply::Other.found(), Some(Found::NotHttp));
        for unsure in [Reply::Http2, Reply::Tls, Reply::Nothing] {
            assert_eq!(unsure.found(), None);
        }
    }

    #[test]
    fn every_finding_has_its_own_reason_and_names_the_endpoint() {
        let all = [
            Found::Serves(Service::Bfrt),
            Found::OtherGrpc,
            Found::Http {
                status: 404,
                content_type: None,
            },
            Found::Http1 { status: 404 },
            Found::NotHttp,
        ];
        let reasons: std::collections::HashSet<_> = all.iter().map(Found::reason).collect();
        assert_eq!(reasons.len(), all.len());
        for found in all {
            let e = WrongEndpoint {
                endpoint: "10.0.0.5:50052".into(),
                expected: Service::P4Runtime,
                found,
            };
            assert!(e.to_string().starts_with("10.0.0.5:50052 "), "{e}");
        }
        let e = WrongEndpoint {
            endpoint: "10.0.0.5:50052".into(),
            expected: Service::P4Runtime,
            found: Found::Serves(Service::Bfrt),
        };
        assert_eq!(
            e.to_string(),
            "10.0.0.5:50052 answered, but not as a P4Runtime server: it serves BFRT (bfrt_proto.BfRuntime)"
        );
    }

    #[test]
    fn the_p4_protocols_are_each_others_alternative() {
        for p in [Protocol::P4Runtime, Protocol::Bfrt] {
            let s = Service::from(p);
            assert_eq!(s.protocol(), Some(p));
            let other = s.others();
            assert_eq!(other.len(), 1);
            assert_eq!(other[0].others(), &[s]);
            assert!(s.probe_path().starts_with(&format!("/{}/", s.grpc_name())));
        }
        for side in [Service::FpgaSlots, Service::ExternRuntime] {
            assert!(side.others().is_empty());
            assert_eq!(side.protocol(), None);
            assert!(
                side.probe_path()
                    .starts_with(&format!("/{}/", side.grpc_name()))
            );
        }
    }
}
