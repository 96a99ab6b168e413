//! A device endpoint that is something else: an HTTP/1 server, an HTTP/2
//! server that is not gRPC, a gRPC server of neither P4 protocol, a TCP
//! server that sends garbage or closes without a word. Each is told apart
//! by type (`Error::WrongEndpoint` with its `Found`, or the connection's
//! `ConnectCause`), for P4Runtime, BFRT and the FPGA slot service, and
//! each message names the endpoint. Servers listen on free loopback ports.
//! (A gRPC server of the other P4 protocol: emulator/tests/wrong_endpoint.rs.)

use std::convert::Infallible;
use std::time::Duration;

use http_body_util::Full;
use p4fleet_client::{
    ConnectCause, Device, Error, Found, Identity, Protocol, Service, SlotCallError, SlotClient,
    Target,
};
use prost::bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const ID: Identity = Identity {
    election_id: 1,
    client_id: 1,
};

/// A TCP server that reads what a client sends first, then writes
/// `answer` and closes.
async fn tcp_server(answer: &'static [u8]) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(answer).await;
                let _ = s.shutdown().await;
                // Drain what the client still sends, so the close is a
                // FIN and not a reset of unread data.
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// An HTTP/2 server without TLS (h2c) that answers every request with
/// `status` and `content_type` (none: no body either): not gRPC.
async fn h2c_server(status: u16, content_type: Option<&'static str>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let svc = hyper::service::service_fn(move |_req| async move {
                let mut r = hyper::Response::builder().status(status);
                let body = match content_type {
                    Some(ct) => {
                        r = r.header("content-type", ct);
                        Bytes::from_static(b"<html>not found</html>")
                    }
                    None => Bytes::new(),
                };
                Ok::<_, Infallible>(r.body(Full::new(body)).unwrap())
            });
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(s);
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(io, svc)
                        .await;
            });
        }
    });
    addr
}

/// A gRPC server of no service at all (tonic answers UNIMPLEMENTED to
/// everything), like a switch's gNMI port.
async fn grpc_server_of_nothing() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(l);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_routes(tonic::service::Routes::default())
            .serve_with_incoming(incoming),
    );
    addr
}

/// The probe's error of a `protocol` device at `endpoint`.
async fn probe(protocol: Protocol, endpoint: &str) -> Error {
    let t = Target {
        protocol,
        ..Target::p4runtime(endpoint, 1)
    };
    let d = Device::connect(t, ID).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), d.capabilities())
        .await
        .expect("an answer within 10 s");
    answer.expect_err("not a device")
}

/// The slot service's error at `endpoint`.
async fn board_info(endpoint: &str) -> SlotCallError {
    let c = SlotClient::connect(&Target::p4runtime(endpoint, 1)).unwrap();
    c.board_info().await.expect_err("not a board")
}

/// Asserts that every protocol's probe and the slot service found
/// `want` at `endpoint`, with a message naming it that has `words`.
async fn all_find(endpoint: &str, want: Found, words: &str) {
    for protocol in [Protocol::P4Runtime, Protocol::Bfrt] {
        match probe(protocol, endpoint).await {
            Error::WrongEndpoint(w) => {
                assert_eq!(w.found, want, "{protocol:?}: {w}");
                assert_eq!(w.expected, Service::from(protocol));
                assert_eq!(w.endpoint, endpoint);
                let m = w.to_string();
                println!("{protocol:?}: {} {m}", w.reason());
                assert!(m.starts_with(&format!("{endpoint} ")), "{m}");
                assert!(m.contains(words), "{m}");
            }
            other => panic!("{protocol:?} {endpoint}: {other:?}"),
        }
    }
    match board_info(endpoint).await {
        SlotCallError::WrongEndpoint(w) => {
            assert_eq!(w.found, want, "{w}");
            assert_eq!(w.expected, Service::FpgaSlots);
            assert!(w.to_string().starts_with(&format!("{endpoint} ")), "{w}");
        }
        other => panic!("slot service {endpoint}: {other:?}"),
    }
}

#[tokio::test]
async fn an_http1_server_is_named_as_one() {
    let http1 = tcp_server(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").await;
    all_find(
        &http1,
        Found::Http1 { status: 404 },
        "is an HTTP/1 server, not gRPC",
    )
    .await;
}

#[tokio::test]
async fn an_http2_server_that_is_not_grpc_is_named_as_one() {
    // With a body (tonic fails to decode it) and without (tonic maps the
    // HTTP status): the same finding.
    let page = h2c_server(404, Some("text/html")).await;
    let want = Found::Http {
        status: 404,
        content_type: Some("text/html".into()),
    };
    all_find(&page, want, "is an HTTP server, not gRPC").await;
    let empty = h2c_server(503, None).await;
    let want = Found::Http {
        status: 503,
        content_type: None,
    };
    all_find(&empty, want, "HTTP 503").await;
}

#[tokio::test]
async fn a_server_that_sends_garbage_is_not_speaking_http2() {
    // Any first three bytes past 16 KiB read as an oversized frame.
    let garbage = tcp_server(b"\xde\xad\xbe\xef garbage \x00\x01\x02\r\n").await;
    all_find(&garbage, Found::NotHttp, "is not speaking HTTP/2").await;
    // A banner, as an SSH port sends.
    let ssh = tcp_server(b"SSH-2.0-OpenSSH_9.6\r\n").await;
    all_find(&ssh, Found::NotHttp, "is not speaking HTTP/2").await;
}

#[tokio::test]
async fn a_grpc_server_of_neither_protocol_says_so() {
    let other = grpc_server_of_nothing().await;
    for protocol in [Protocol::P4Runtime, Protocol::Bfrt] {
        match probe(protocol, &other).await {
            Error::WrongEndpoint(w) => {
                assert_eq!(w.found, Found::OtherGrpc, "{w}");
                assert_eq!(w.reason(), "OtherGrpcService");
                let m = w.to_string();
                println!("{protocol:?}: {m}");
                assert!(m.starts_with(&format!("{other} is a gRPC server")), "{m}");
            }
            e => panic!("{protocol:?}: {e:?}"),
        }
    }
    // A gRPC server without the slot service is what NotServed means.
    assert!(matches!(
        board_info(&other).await,
        SlotCallError::NotServed { .. }
    ));
}

#[tokio::test]
async fn a_server_that_closes_without_a_word_was_reset_and_says_where() {
    let silent = tcp_server(b"").await;
    for protocol in [Protocol::P4Runtime, Protocol::Bfrt] {
        let e = probe(protocol, &silent).await;
        println!("{protocol:?}: {e}");
        match e {
            Error::Unreachable {
                cause, endpoint, ..
            } => {
                assert_eq!(endpoint, silent);
                assert!(
                    matches!(cause, ConnectCause::Reset | ConnectCause::StreamClosed),
                    "{cause:?}"
                );
            }
            // What a close reads as depends on timing; any error must
            // still name the endpoint.
            e => assert!(e.to_string().contains(&silent), "{protocol:?}: {e}"),
        }
    }
}

#[tokio::test]
async fn the_public_look_serves_the_side_services_too() {
    // The extern runtime's callers can ask the same question.
    let page = h2c_server(404, Some("text/plain")).await;
    let ch = p4fleet_client::connect_lazy(&Target::p4runtime(page.as_str(), 1)).unwrap();
    let status = tonic::Status::unimplemented("as tonic maps HTTP 404");
    let found = p4fleet_client::identify(&ch, &page, Service::ExternRuntime, &status).await;
    assert_eq!(
        found,
        Some(Found::Http {
            status: 404,
            content_type: Some("text/plain".into())
        })
    );
    let other = grpc_server_of_nothing().await;
    let ch = p4fleet_client::connect_lazy(&Target::p4runtime(other.as_str(), 1)).unwrap();
    let found = p4fleet_client::identify(&ch, &other, Service::ExternRuntime, &status).await;
    assert_eq!(found, Some(Found::OtherGrpc));
    // A code only a grpc-status gives is the service's own answer.
    let refused = tonic::Status::not_found("no such device");
    let found = p4fleet_client::identify(&ch, &other, Service::ExternRuntime, &refused).await;
    assert_eq!(found, None);
}
