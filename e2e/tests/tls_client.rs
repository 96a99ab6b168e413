//! mTLS between p4fleet-client and the emulator, without Kubernetes:
//! certificates made here with rcgen; each bad case fails with its own
//! [`TlsFailure`], decided on rustls's error variants. Also what a device
//! says when it refuses this client on a device id (another primary, a
//! device id it does not serve).

use std::time::Duration;

use p4fleet_client::{Device, Error, Identity, Protocol, Refusal, Target, TlsFailure, TlsSettings};
use p4fleet_e2e::certs::{Pair, TestCa, Validity};
use p4fleet_emulator::{ArbitrationMode, Emulator, EmulatorConfig, RunningEmulator, ServerTls};

async fn emulator(server: &Pair, client_ca: Option<&TestCa>) -> RunningEmulator {
    Emulator::start(EmulatorConfig {
        tls: Some(ServerTls {
            cert_pem: server.cert_pem.clone().into(),
            key_pem: server.key_pem.clone().into(),
            client_ca_pem: client_ca.map(|c| c.cert_pem.clone().into()),
        }),
        ..Default::default()
    })
    .await
    .expect("start emulator")
}

fn target(emu: &RunningEmulator, device_id: u64, tls: Option<TlsSettings>) -> Target {
    Target {
        endpoint: emu.p4runtime_addr().to_string(),
        device_id,
        protocol: Protocol::P4Runtime,
        tls,
    }
}

fn settings(ca: &TestCa, client: Option<&Pair>) -> TlsSettings {
    TlsSettings {
        ca_pem: ca.cert_pem.clone().into(),
        cert_pem: client
            .map(|c| c.cert_pem.clone().into())
            .unwrap_or_default(),
        key_pem: client.map(|c| c.key_pem.clone().into()).unwrap_or_default(),
    }
}

const ID: Identity = Identity {
    election_id: 10,
    client_id: 1,
};

/// The TLS failure of a capabilities call, or panics naming what came.
async fn failure(t: Target) -> TlsFailure {
    let dev = Device::connect(t, ID).expect("connect");
    match dev.capabilities().await {
        Err(Error::Tls { failure, .. }) => failure,
        other => panic!("expected a TLS failure, got {other:?}"),
    }
}

#[tokio::test]
async fn mutual_tls_works_and_each_bad_certificate_says_why() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = TestCa::new("switch CA");
    let other_ca = TestCa::new("someone else's CA");
    let client = ca.client();
    let good = emulator(&ca.server(&["127.0.0.1"], Validity::Current), Some(&ca)).await;

    // Mutual TLS: capabilities and arbitration over TLS.
    let dev = Device::connect(target(&good, 1, Some(settings(&ca, Some(&client)))), ID).unwrap();
    let caps = dev.capabilities().await.expect("capabilities over mTLS");
    assert_eq!(caps.protocol, "P4Runtime");
    dev.standing(0, Duration::from_secs(5))
        .await
        .expect("primary over mTLS");

    // Plaintext to a TLS port is not a TLS failure, just unreachable.
    let plain = Device::connect(target(&good, 1, None), ID).unwrap();
    assert!(plain.capabilities().await.is_err());

    let wrong_ca = settings(&other_ca, Some(&client));
    assert_eq!(
        failure(target(&good, 1, Some(wrong_ca))).await,
        TlsFailure::UnknownCa
    );
    let no_client_cert = settings(&ca, None);
    assert_eq!(
        failure(target(&good, 1, Some(no_client_cert))).await,
        TlsFailure::ClientCertificateRequired
    );
    let foreign_client = other_ca.client();
    assert_eq!(
        failure(target(&good, 1, Some(settings(&ca, Some(&foreign_client))))).await,
        TlsFailure::ClientCertificateRejected
    );

    let expired = emulator(&ca.server(&["127.0.0.1"], Validity::Expired), Some(&ca)).await;
    assert_eq!(
        failure(target(&expired, 1, Some(settings(&ca, Some(&client))))).await,
        TlsFailure::Expired
    );
    let wrong_name = emulator(
        &ca.server(&["switch.example"], Validity::Current),
        Some(&ca),
    )
    .await;
    assert_eq!(
        failure(target(&wrong_name, 1, Some(settings(&ca, Some(&client))))).await,
        TlsFailure::WrongName
    );
    for e in [good, expired, wrong_name] {
        e.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn a_refusal_says_what_the_device_said() {
    let emu = Emulator::start(EmulatorConfig {
        arbitration: ArbitrationMode::HighestEverSeen,
        ..Default::default()
    })
    .await
    .unwrap();
    let plain = |id| Target::p4runtime(emu.p4runtime_addr().to_string(), id);
    // Device id 7 is not served: NOT_FOUND.
    let dev = Device::connect(plain(7), ID).unwrap();
    match dev.standing(0, Duration::from_secs(5)).await {
        Err(Error::NotPrimary { refusal, .. }) => match *refusal {
            Refusal::UnknownDevice { message } => assert!(message.contains('7'), "{message}"),
            other => panic!("expected UnknownDevice, got {other:?}"),
        },
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Another controller with a higher election id holds device 1.
    let other = Identity {
        election_id: (5u128 << 64) | 3,
        client_id: 2,
    };
    let winner = Device::connect(plain(1), other).unwrap();
    winner.standing(0, Duration::from_secs(5)).await.unwrap();
    let loser = Device::connect(plain(1), ID).unwrap();
    match loser.standing(0, Duration::from_secs(5)).await {
        Err(Error::NotPrimary { refusal, .. }) => match *refusal {
            Refusal::NotPrimary {
                primary_election_id,
                ..
            } => assert_eq!(primary_election_id, Some((5u128 << 64) | 3)),
            other => panic!("expected NotPrimary, got {other:?}"),
        },
        other => panic!("expected a refusal, got {other:?}"),
    }
    drop((dev, winner, loser));
    emu.shutdown().await.unwrap();
}
