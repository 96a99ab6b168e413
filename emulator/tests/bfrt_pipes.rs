//! Several BFRT programs on one Tofino device, each on its own pipes
//! (`pipe_scope`), as BF Runtime runs them: the SetForwardingPipelineConfig
//! carries the whole device's config; overlapping scopes and pipes the chip
//! lacks are INVALID_ARGUMENT; each client BINDs to one program and writes
//! its tables; a warm init ending in RECONCILE_AND_WARM_INIT_END swaps one
//! pipe set's program while the program kept on the other pipes keeps its
//! entries (read back through an independent client).

mod common;

use common::firewall::TABLE as FW_TABLE;
use p4fleet_client::{Device, Identity, Target, WriteOptions};
use p4fleet_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use p4fleet_model::entries::{Entry, WriteOp};
use p4fleet_proto::bfrt::{
    ForwardingPipelineConfig, GetForwardingPipelineConfigRequest,
    SetForwardingPipelineConfigRequest, bf_runtime_client::BfRuntimeClient,
    forwarding_pipeline_config::Profile, set_forwarding_pipeline_config_request::Action,
};
use p4fleet_proto::p4runtime::update::Type;
use tonic::transport::Channel;

const FW_P4INFO: &str = include_str!("../../examples/firewall/p4info.txt");
const FW_BFRT: &str = include_str!("../../examples/firewall/bfrt.json");
const ROUTER_BFRT: &str = include_str!("../../examples/router/bfrt.json");

/// Firewall entry `i` -> allow(port i % 64).
fn entry(i: u32) -> Entry {
    common::firewall::entry(i, i % 64)
}

fn program(name: &str, bfrt_json: &str, pipes: &[u32]) -> ForwardingPipelineConfig {
    ForwardingPipelineConfig {
        p4_name: name.into(),
        bfruntime_info: bfrt_json.as_bytes().to_vec(),
        profiles: vec![Profile {
            profile_name: format!("{name}_profile"),
            context: b"{}".to_vec(),
            binary: vec![1, 2, 3],
            pipe_scope: pipes.to_vec(),
        }],
    }
}

/// A Tofino device 1 of `pipes` pipes: the emulator, its BFRT address and
/// a client of it.
async fn start(pipes: u32) -> (RunningEmulator, String, BfRuntimeClient<Channel>) {
    let emu = Emulator::start(EmulatorConfig {
        tofino_pipes: pipes,
        ..common::rbfrt::config(vec![1])
    })
    .await
    .unwrap();
    let addr = emu.bfrt_addr().unwrap().to_string();
    let c = BfRuntimeClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    (emu, addr, c)
}

async fn set(
    c: &mut BfRuntimeClient<Channel>,
    action: Action,
    config: Vec<ForwardingPipelineConfig>,
) -> Result<(), tonic::Status> {
    c.set_forwarding_pipeline_config(SetForwardingPipelineConfigRequest {
        device_id: 1,
        client_id: 1,
        action: action as i32,
        config,
        ..Default::default()
    })
    .await
    .map(|_| ())
}

/// A warm init to `config`, ended with RECONCILE so that unchanged
/// programs keep their state.
async fn warm_swap(c: &mut BfRuntimeClient<Channel>, config: Vec<ForwardingPipelineConfig>) {
    set(c, Action::VerifyAndWarmInitBegin, config)
        .await
        .unwrap();
    set(c, Action::ReconcileAndWarmInitEnd, vec![])
        .await
        .unwrap();
}

/// The status a VERIFY_AND_WARM_INIT_BEGIN_AND_END of `config` is refused
/// with; INVALID_ARGUMENT, as for every config that fails verification.
async fn refused(
    c: &mut BfRuntimeClient<Channel>,
    config: Vec<ForwardingPipelineConfig>,
) -> tonic::Status {
    let e = set(c, Action::VerifyAndWarmInitBeginAndEnd, config)
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    e
}

/// A client bound to program `name` of device 1.
async fn attached(addr: &str, client_id: u32, name: &str) -> Device {
    let dev = Device::connect(
        Target::bfrt(addr.to_string(), 1),
        Identity {
            election_id: 1,
            client_id,
        },
    )
    .unwrap();
    let info = p4fleet_proto::p4info::parse_text(FW_P4INFO).unwrap();
    let Device::Bfrt(b) = &dev else {
        panic!("a BFRT target")
    };
    assert_eq!(b.attach(0, &info, Some(name)).await.unwrap(), name);
    dev
}

async fn write(dev: &Device, range: std::ops::Range<u32>) {
    let entries: Vec<Entry> = range.map(entry).collect();
    let ops: Vec<WriteOp<'_>> = entries
        .iter()
        .map(|e| WriteOp::new(Type::Insert, e))
        .collect();
    let r = dev
        .write_ops(0, &ops, WriteOptions::default())
        .await
        .unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures.first());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programs_on_disjoint_pipes_and_a_swap_of_one_pipe_set() {
    let (emu, addr, mut c) = start(4).await;

    // Overlapping pipe scopes: refused, nothing loaded.
    let e = refused(
        &mut c,
        vec![
            program("fw_a", FW_BFRT, &[0, 1]),
            program("fw_b", FW_BFRT, &[1, 2]),
        ],
    )
    .await;
    assert!(e.message().contains("pipe 1 is already in"), "{e:?}");
    // A pipe the chip lacks.
    let e = refused(&mut c, vec![program("fw_a", FW_BFRT, &[4])]).await;
    assert!(e.message().contains("pipes 0-3"), "{e:?}");

    // The whole device: fw_a on pipes 0-1, fw_b on 2-3.
    let both = vec![
        program("fw_a", FW_BFRT, &[0, 1]),
        program("fw_b", FW_BFRT, &[2, 3]),
    ];
    set(&mut c, Action::VerifyAndWarmInitBeginAndEnd, both.clone())
        .await
        .unwrap();
    let got = c
        .get_forwarding_pipeline_config(GetForwardingPipelineConfigRequest {
            device_id: 1,
            client_id: 1,
        })
        .await
        .unwrap()
        .into_inner();
    let scopes: Vec<(String, Vec<u32>)> = got
        .config
        .iter()
        .map(|c| (c.p4_name.clone(), c.profiles[0].pipe_scope.clone()))
        .collect();
    assert_eq!(
        scopes,
        [("fw_a".into(), vec![0, 1]), ("fw_b".into(), vec![2, 3])]
    );

    // One client per program; each program has its own tables.
    let a = attached(&addr, 11, "fw_a").await;
    let b = attached(&addr, 12, "fw_b").await;
    write(&a, 0..30).await;
    write(&b, 100..105).await;
    assert_eq!(a.read_table(0, FW_TABLE).await.unwrap().len(), 30);
    assert_eq!(b.read_table(0, FW_TABLE).await.unwrap().len(), 5);

    // Swap pipes 2-3 to the router: the whole config again, fw_a unchanged,
    // ended with RECONCILE so unchanged programs keep their state.
    let swapped = vec![
        program("fw_a", FW_BFRT, &[0, 1]),
        program("router", ROUTER_BFRT, &[2, 3]),
    ];
    warm_swap(&mut c, swapped).await;
    // fw_a's entries, read by a client that never wrote them.
    let reader = attached(&addr, 13, "fw_a").await;
    let kept = reader.read_table(0, FW_TABLE).await.unwrap();
    assert_eq!(kept.len(), 30);
    assert!(kept.contains(&entry(7).to_proto()));
    // fw_b is gone: a client bound to it is refused.
    assert!(b.read_table(0, FW_TABLE).await.is_err());

    // A program moved to other pipes is a new instance: its tables start empty.
    let moved = vec![
        program("fw_a", FW_BFRT, &[0]),
        program("router", ROUTER_BFRT, &[2, 3]),
    ];
    warm_swap(&mut c, moved).await;
    let reader = attached(&addr, 14, "fw_a").await;
    assert_eq!(reader.read_table(0, FW_TABLE).await.unwrap().len(), 0);
    emu.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_pipe_chip_refuses_pipes_two_and_three_and_an_empty_scope_is_every_pipe() {
    let (emu, _, mut c) = start(2).await;
    let e = refused(&mut c, vec![program("fw", FW_BFRT, &[0, 1, 2, 3])]).await;
    assert!(e.message().contains("pipes 0-1"), "{e:?}");
    // An empty scope takes both pipes, so a second program does not fit.
    let e = refused(
        &mut c,
        vec![
            program("fw", FW_BFRT, &[]),
            program("router", ROUTER_BFRT, &[1]),
        ],
    )
    .await;
    assert!(e.message().contains("pipe 1 is already in"), "{e:?}");
    set(
        &mut c,
        Action::VerifyAndWarmInitBeginAndEnd,
        vec![
            program("fw", FW_BFRT, &[0]),
            program("router", ROUTER_BFRT, &[1]),
        ],
    )
    .await
    .unwrap();
    emu.shutdown().await.unwrap();
}
