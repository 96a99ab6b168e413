//! p4fleet-client's BFRT device (client/src/bfrt.rs) against the emulator:
//! push the firewall's Tofino artifacts (skipped the second time), write
//! P4Runtime-form entries in batches, per-update errors, read back in
//! canonical P4Runtime form, ROLLBACK_ON_ERROR.

mod common;

use common::firewall::entry;
use p4fleet_client::{Atomicity, Device, Identity, Target, TofinoPipeline, WriteOptions};
use p4fleet_emulator::Emulator;
use p4fleet_model::entries::{Entry, WriteOp};
use p4fleet_proto::p4runtime::{self as p4rt, update::Type};

const P4INFO: &str = include_str!("../../examples/firewall/p4info.txt");
const BFRT_JSON: &str = include_str!("../../examples/firewall/bfrt.json");

/// The entry as read back over BFRT (canonical P4Runtime form).
fn read_form(i: u32, port: u32) -> p4rt::TableEntry {
    entry(i, port).to_proto()
}

fn ops(batch: &[(Type, Entry)]) -> Vec<WriteOp<'_>> {
    batch.iter().map(|(ty, e)| WriteOp::new(*ty, e)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bfrt_driver_pushes_writes_and_reads() {
    let emu = Emulator::start(common::rbfrt::config(vec![3]))
        .await
        .unwrap();
    let dev = Device::connect(
        Target::bfrt(emu.bfrt_addr().unwrap().to_string(), 3),
        Identity {
            election_id: 7,
            client_id: 7,
        },
    )
    .unwrap();
    let info = p4fleet_proto::p4info::parse_text(P4INFO).unwrap();
    let pipeline = TofinoPipeline {
        p4_name: "firewall".into(),
        bfrt_json: BFRT_JSON.as_bytes().to_vec(),
        context_json: b"{}".to_vec(),
        binary: vec![1, 2, 3],
    };
    assert!(dev.set_tofino_pipeline(0, &info, &pipeline).await.unwrap());
    assert!(
        !dev.set_tofino_pipeline(0, &info, &pipeline).await.unwrap(),
        "already loaded"
    );
    // A rebuild that keeps the tables (the same bfrt.json, a new binary
    // and context.json) is another program: pushed, once; so is going
    // back to the first build.
    let rebuilt = TofinoPipeline {
        context_json: br#"{"build": 2}"#.to_vec(),
        binary: vec![4, 5, 6],
        ..pipeline.clone()
    };
    assert!(dev.set_tofino_pipeline(0, &info, &rebuilt).await.unwrap());
    assert!(!dev.set_tofino_pipeline(0, &info, &rebuilt).await.unwrap());
    assert!(dev.set_tofino_pipeline(0, &info, &pipeline).await.unwrap());
    assert!(
        dev.capabilities()
            .await
            .unwrap()
            .api_version
            .contains("firewall")
    );

    let ins: Vec<_> = (0..3000)
        .map(|i| (Type::Insert, entry(i, i % 512)))
        .collect();
    let opts = WriteOptions {
        batch_size: 700,
        max_in_flight: 3,
        atomicity: Atomicity::ContinueOnError,
        distinct_keys: false,
    };
    let r = dev.write_ops(0, &ops(&ins), opts).await.unwrap();
    assert_eq!(r.requests, 5);
    assert!(r.failures.is_empty(), "{:?}", r.failures.first());
    assert_eq!(emu.stats(3).unwrap().entries, 3000);

    // Per-update errors: a duplicate, a missing delete, a port too wide.
    let bad = vec![
        (Type::Insert, entry(5000, 1)),
        (Type::Insert, entry(1, 1)),
        (Type::Delete, entry(9999, 1)),
        (Type::Insert, entry(5001, 600)),
        (Type::Modify, entry(2, 42)),
    ];
    let r = dev.write_ops(0, &ops(&bad), opts).await.unwrap();
    let idx: Vec<(usize, tonic::Code)> = r.failures.iter().map(|f| (f.index, f.code())).collect();
    assert_eq!(
        idx,
        vec![
            (1, tonic::Code::AlreadyExists),
            (2, tonic::Code::NotFound),
            (3, tonic::Code::OutOfRange)
        ]
    );

    // Read back in canonical P4Runtime form.
    let mut got = dev.read_table(0, 39123287).await.unwrap();
    assert_eq!(got.len(), 3001);
    got.sort_by(|a, b| a.r#match[0].encode_key().cmp(&b.r#match[0].encode_key()));
    assert!(got.contains(&read_form(7, 7)));
    assert!(got.contains(&read_form(2, 42)));
    assert!(got.contains(&read_form(5000, 1)));

    // ROLLBACK_ON_ERROR: all or nothing.
    let batch = vec![
        (Type::Insert, entry(6000, 1)),
        (Type::Delete, entry(3, 3)),
        (Type::Insert, entry(4, 4)),
    ];
    let r = dev
        .write_ops(
            0,
            &ops(&batch),
            WriteOptions {
                atomicity: Atomicity::RollbackOnError,
                ..opts
            },
        )
        .await
        .unwrap();
    assert_eq!(r.failures.len(), 3);
    assert_eq!(r.failures[2].code(), tonic::Code::AlreadyExists);
    assert_eq!(r.failures[0].code(), tonic::Code::Aborted);
    assert_eq!(dev.read_table(0, 0).await.unwrap().len(), 3001);

    // Drift through the shared stats helper (same table id as P4Info).
    assert_eq!(
        emu.emulator().drop_entries(3, Some(39123287), 10).unwrap(),
        10
    );
    assert_eq!(dev.read_table(0, 39123287).await.unwrap().len(), 2991);
    emu.shutdown().await.unwrap();
}

trait EncodeKey {
    fn encode_key(&self) -> Vec<u8>;
}

impl EncodeKey for p4rt::FieldMatch {
    fn encode_key(&self) -> Vec<u8> {
        prost::Message::encode_to_vec(self)
    }
}

/// Two programs on disjoint pipe sets of one device, each bound by a
/// client id of its own; the second swapped for a third while the first
/// keeps its entries (read back by a client that never wrote them), then
/// its pipes freed. The device reports its pipe count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bfrt_driver_keeps_one_pipe_set_while_another_is_swapped() {
    let emu = Emulator::start(common::rbfrt::config(vec![5]))
        .await
        .unwrap();
    let target = || Target::bfrt(emu.bfrt_addr().unwrap().to_string(), 5);
    let dev = Device::connect(
        target(),
        Identity {
            election_id: 7,
            client_id: 7,
        },
    )
    .unwrap();
    assert_eq!(dev.capabilities().await.unwrap().pipes, Some(4));
    let fw_info = p4fleet_proto::p4info::parse_text(P4INFO).unwrap();
    let router_info =
        p4fleet_proto::p4info::parse_text(include_str!("../../examples/router/p4info.txt"))
            .unwrap();
    let pipeline = |name: &str, bfrt: &str| TofinoPipeline {
        p4_name: name.into(),
        bfrt_json: bfrt.as_bytes().to_vec(),
        context_json: b"{}".to_vec(),
        binary: vec![1],
    };
    let fw = pipeline("firewall", BFRT_JSON);
    let router = pipeline("router", include_str!("../../examples/router/bfrt.json"));
    assert!(
        dev.set_tofino_pipes(0, &fw_info, &fw, &[0, 1])
            .await
            .unwrap()
    );
    assert!(
        !dev.set_tofino_pipes(0, &fw_info, &fw, &[0, 1])
            .await
            .unwrap(),
        "same program on the same pipes: not pushed again"
    );
    // Writes go through the program's own client (first pipe 0).
    let batch: Vec<(Type, Entry)> = (0..5).map(|i| (Type::Insert, entry(i, 1))).collect();
    let rep = dev
        .pipe_set(0, 0)
        .expect("the firewall's client")
        .write_ops(0, &ops(&batch), WriteOptions::default())
        .await
        .unwrap();
    assert!(rep.failures.is_empty(), "{:?}", rep.failures);
    assert!(
        dev.set_tofino_pipes(0, &router_info, &router, &[2, 3])
            .await
            .unwrap()
    );
    // A slot's read that goes through no program's client is refused.
    let e = dev.read_table(0, 0).await.unwrap_err().to_string();
    assert!(e.contains("on pipe sets"), "{e}");
    let programs = dev.capabilities().await.unwrap().api_version;
    assert!(
        programs.contains("firewall") && programs.contains("router"),
        "{programs}"
    );
    // Hot swap of pipes 2-3: the router replaced by a second firewall.
    let fw_b = pipeline("firewall_b", BFRT_JSON);
    assert!(
        dev.set_tofino_pipes(0, &fw_info, &fw_b, &[2, 3])
            .await
            .unwrap()
    );
    let programs = dev.capabilities().await.unwrap().api_version;
    assert!(!programs.contains("router"), "{programs}");
    // Read back by a client that never wrote them.
    let reader = Device::connect(
        target(),
        Identity {
            election_id: 1,
            client_id: 99,
        },
    )
    .unwrap();
    let Device::Bfrt(bfrt) = &reader else {
        panic!("a BFRT device")
    };
    let (fw_ref, reader_ref) = (&fw_info, &reader);
    let read = |name: &'static str| async move {
        bfrt.attach(0, fw_ref, Some(name)).await.unwrap();
        reader_ref.read_table(0, 39123287).await.unwrap()
    };
    assert_eq!(read("firewall").await.len(), 5, "kept across the swap");
    let own = dev.pipe_set(0, 0).unwrap();
    assert_eq!(own.read_table(0, 39123287).await.unwrap().len(), 5);
    assert!(
        dev.pipe_set(0, 1).is_none(),
        "pipe sets are known by their first pipe"
    );
    assert_eq!(read("firewall_b").await.len(), 0);
    // Freeing pipes 2-3 keeps the firewall and its entries.
    assert_eq!(
        dev.remove_tofino_pipes(0, &[2, 3]).await.unwrap(),
        vec!["firewall_b".to_string()]
    );
    let programs = dev.capabilities().await.unwrap().api_version;
    assert!(programs.ends_with("programs [firewall]"), "{programs}");
    assert_eq!(read("firewall").await.len(), 5);
}
