//! p4fleet-client pointed at the emulator's other ports: a P4Runtime
//! device at its BFRT port and the reverse (each a gRPC server of the
//! other protocol), the slot service at a BFRT port, and a device at its
//! stats side channel (axum's HTTP server, which takes HTTP/2 without TLS
//! too). Each says what answered, by type, in a message that names the
//! endpoint.

use std::time::Duration;

use p4fleet_client::{
    Device, Error, Found, Identity, Protocol, Service, SlotCallError, SlotClient, Target,
};
use p4fleet_emulator::{Emulator, EmulatorConfig, RunningEmulator};

const ID: Identity = Identity {
    election_id: 1,
    client_id: 1,
};

async fn emulator() -> RunningEmulator {
    Emulator::start(EmulatorConfig {
        bfrt_addr: Some("127.0.0.1:0".parse().unwrap()),
        stats_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    })
    .await
    .expect("start emulator")
}

/// The probe's error of a `protocol` device at `endpoint`, as the
/// endpoint that did not answer as expected.
async fn wrong(protocol: Protocol, endpoint: &str) -> p4fleet_client::WrongEndpoint {
    let t = Target {
        protocol,
        ..Target::p4runtime(endpoint, 1)
    };
    let d = Device::connect(t, ID).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), d.capabilities())
        .await
        .expect("an answer within 10 s");
    match answer {
        Err(Error::WrongEndpoint(w)) => {
            println!("{protocol:?} at {endpoint}: {} {w}", w.reason());
            assert_eq!(w.expected, Service::from(protocol));
            assert_eq!(w.endpoint, endpoint);
            assert!(w.to_string().starts_with(&format!("{endpoint} ")), "{w}");
            w
        }
        other => panic!("{protocol:?} at {endpoint}: {other:?}"),
    }
}

#[tokio::test]
async fn each_protocol_at_the_others_port_names_what_it_serves() {
    let emu = emulator().await;
    let p4rt = emu.p4runtime_addr().to_string();
    let bfrt = emu.bfrt_addr().unwrap().to_string();

    let w = wrong(Protocol::P4Runtime, &bfrt).await;
    assert_eq!(w.found, Found::Serves(Service::Bfrt));
    assert_eq!(w.reason(), "WrongProtocol");
    assert_eq!(
        w.to_string(),
        format!(
            "{bfrt} answered, but not as a P4Runtime server: it serves BFRT (bfrt_proto.BfRuntime)"
        )
    );

    let w = wrong(Protocol::Bfrt, &p4rt).await;
    assert_eq!(w.found, Found::Serves(Service::P4Runtime));
    assert!(
        w.to_string()
            .contains("not as a BFRT server: it serves P4Runtime"),
        "{w}"
    );

    // The right ports still answer.
    for (protocol, endpoint) in [(Protocol::P4Runtime, &p4rt), (Protocol::Bfrt, &bfrt)] {
        let t = Target {
            protocol,
            ..Target::p4runtime(endpoint.as_str(), 1)
        };
        let d = Device::connect(t, ID).unwrap();
        d.capabilities().await.expect("the protocol's own port");
    }

    // A gRPC server without the slot service (here, BFRT's) is NotServed.
    let slots = SlotClient::connect(&Target::p4runtime(bfrt.as_str(), 1)).unwrap();
    let e = slots.board_info().await.unwrap_err();
    assert!(matches!(e, SlotCallError::NotServed { .. }), "{e:?}");
    emu.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_device_at_the_stats_port_finds_an_http_server_not_grpc() {
    let emu = emulator().await;
    let stats = emu.stats_addr().unwrap().to_string();
    for protocol in [Protocol::P4Runtime, Protocol::Bfrt] {
        let w = wrong(protocol, &stats).await;
        assert!(matches!(w.found, Found::Http { status: 404, .. }), "{w}");
        assert_eq!(w.reason(), "NotGrpc");
    }
    let slots = SlotClient::connect(&Target::p4runtime(stats.as_str(), 1)).unwrap();
    match slots.board_info().await.unwrap_err() {
        SlotCallError::WrongEndpoint(w) => {
            assert!(matches!(w.found, Found::Http { status: 404, .. }), "{w}");
            assert!(w.to_string().starts_with(&format!("{stats} ")), "{w}");
        }
        e => panic!("{e:?}"),
    }
    emu.shutdown().await.unwrap();
}
