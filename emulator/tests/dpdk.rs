//! Dpdk devices through the emulator's gRPC port: the packed pipeline
//! config (`BfPipelineConfig`) checked by SetForwardingPipelineConfig, the
//! data plane following what P4Runtime Writes install, and the extern
//! runtime served for Dpdk devices only.

mod common;

use std::time::{Duration, Instant};

use common::l2crypt::{FLOOD, MAILBOX_SPEC, P4INFO, SPEC, assert_l2crypt_externs, forward, packed};
use p4fleet_emulator::RunningEmulator;
use p4fleet_emulator::dataplane::EngineStats;
use p4fleet_emulator::dataplane::packet;
use p4fleet_proto::externs::{self as pb, extern_runtime_client::ExternRuntimeClient};
use p4fleet_proto::p4info;
use p4fleet_proto::p4runtime::{self as p4, p4_runtime_client::P4RuntimeClient};
use tonic::Code;
use tonic::transport::Channel;

/// Device 1 is a Dpdk target, device 2 is not.
async fn start() -> RunningEmulator {
    common::l2crypt::start_dpdk(vec![1, 2], vec![1], Some(1)).await
}

async fn set_pipeline(
    c: &mut P4RuntimeClient<Channel>,
    device: u64,
    device_config: Vec<u8>,
) -> Result<(), tonic::Status> {
    let config = p4::ForwardingPipelineConfig {
        p4info: Some(p4info::parse_text(P4INFO).unwrap()),
        p4_device_config: device_config,
        cookie: None,
    };
    common::set_pipeline(c, device, config).await
}

fn port(s: &EngineStats, p: u32) -> u64 {
    s.tx_per_port
        .iter()
        .find(|(q, _)| *q == p)
        .map_or(0, |(_, n)| *n)
}

/// Polls the device's data plane stats until `done`; panics after 30 s.
async fn wait(
    emu: &RunningEmulator,
    what: &str,
    done: impl Fn(&EngineStats) -> bool,
) -> EngineStats {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = emu.emulator().dataplane(1).expect("a data plane").stats();
        if done(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn target(device: u64) -> Option<pb::Target> {
    Some(pb::Target {
        device_id: device,
        pipeline: String::new(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_config_loads_and_entries_steer_the_data_plane() {
    let emu = start().await;
    let mut c = P4RuntimeClient::connect(emu.p4runtime_url()).await.unwrap();
    let mut ext = ExternRuntimeClient::connect(emu.p4runtime_url())
        .await
        .unwrap();
    let _stream = common::arbitrate(&mut c, 1).await;

    // Before a pipeline: the extern runtime says why there is nothing.
    let err = ext
        .list_externs(pb::ListExternsRequest { target: target(1) })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");

    // The raw .spec is what infrap4d would refuse.
    let err = set_pipeline(&mut c, 1, SPEC.as_bytes().to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("BfPipelineConfig"), "{err:?}");
    assert!(emu.emulator().dataplane(1).is_none());

    set_pipeline(&mut c, 1, packed(SPEC)).await.unwrap();
    let list = ext
        .list_externs(pb::ListExternsRequest { target: target(1) })
        .await
        .unwrap()
        .into_inner();
    assert_l2crypt_externs(&list);
    let caps = list.externs[0].capabilities.as_ref().unwrap();
    assert_eq!(caps.max_cores, 1, "--dpdk-extern-cores bounds the cores");

    // No entries: every packet floods.
    let s = wait(&emu, "flooded traffic", |s| port(s, FLOOD) > 50).await;
    assert_eq!(port(&s, 1), 0);

    // What P4Runtime installs is what the data plane forwards with.
    let entry = p4::entity::Entity::TableEntry(forward(packet::dst_mac(0), 1));
    common::write(&mut c, 1, vec![(p4::update::Type::Insert, entry)])
        .await
        .unwrap();
    let s = wait(&emu, "flow 0 forwarded to port 1", |s| port(s, 1) > 10).await;
    let dmac = s
        .tables
        .iter()
        .find(|t| t.name == "MyIngress.dmac")
        .unwrap();
    assert_eq!(dmac.entries, 1);
    assert!(dmac.hits > 0, "{dmac:?}");
    let fwd = dmac.actions.iter().find(|a| a.0 == "forward").unwrap();
    assert!(fwd.2 > 0, "{dmac:?}");
    // The rate is sampled (every 100 ms here) while traffic flows.
    wait(&emu, "a forwarding rate", |s| s.packets_per_second > 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_dpdk_devices_have_an_extern_runtime() {
    let emu = start().await;
    let mut ext = ExternRuntimeClient::connect(emu.p4runtime_url())
        .await
        .unwrap();
    let code =
        |r: Result<tonic::Response<pb::ListExternsResponse>, tonic::Status>| r.unwrap_err().code();
    assert_eq!(
        code(
            ext.list_externs(pb::ListExternsRequest { target: target(2) })
                .await
        ),
        Code::Unimplemented
    );
    assert_eq!(
        code(
            ext.list_externs(pb::ListExternsRequest { target: target(9) })
                .await
        ),
        Code::NotFound
    );

    // A plain device keeps taking any device config.
    let mut c = P4RuntimeClient::connect(emu.p4runtime_url()).await.unwrap();
    let _stream = common::arbitrate(&mut c, 2).await;
    set_pipeline(&mut c, 2, SPEC.as_bytes().to_vec())
        .await
        .unwrap();
    assert!(emu.emulator().dataplane(2).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mailbox_variant_loads_and_a_write_of_the_state_word_is_refused() {
    let emu = start().await;
    let mut c = P4RuntimeClient::connect(emu.p4runtime_url()).await.unwrap();
    let _stream = common::arbitrate(&mut c, 1).await;
    // f.<extern>.w0/w1 operands load, as on p4fleet-dpdk-agent.
    set_pipeline(&mut c, 1, packed(MAILBOX_SPEC)).await.unwrap();
    let s = wait(&emu, "traffic through the mailboxes", |s| {
        s.externs.iter().all(|x| x.sync_calls > 10)
    })
    .await;
    assert_eq!(s.drops.total(), 0, "{s:#?}");

    // The agent's own mailbox word: refused with its line, and the running
    // pipeline stays.
    let bad = MAILBOX_SPEC.replace(
        "\tmov f.async_encrypt.w1 h.payload.w1\n",
        "\tmov f.async_encrypt.w1 h.payload.w1\n\tmov f.async_encrypt.p4fleet_state 0\n",
    );
    let line = bad
        .lines()
        .position(|l| l.contains("p4fleet_state 0"))
        .unwrap()
        + 1;
    let err = set_pipeline(&mut c, 1, packed(&bad)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains(&format!("line {line}")) && err.message().contains("p4fleet_state"),
        "{err:?}"
    );
    let before = emu.emulator().dataplane(1).unwrap().stats().tx_packets;
    wait(&emu, "the mailbox pipeline still running", |s| {
        s.tx_packets > before
    })
    .await;
}
