//! p4fleet-client's P4Runtime device uses p4fleet's bulk write by itself
//! when the emulator serves it, with the standard path's results; without
//! it the device falls back to standard writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use p4fleet_client::{Atomicity, Device, Identity, Target, UpdateFailure, WriteOp, WriteOptions};
use p4fleet_emulator::{Emulator, EmulatorConfig};
use p4fleet_model::entries::{
    ActionCall, ActionParam, ByteStr, Entry, EntryKey, FieldMatch, MatchValue,
};
use p4fleet_proto::p4runtime::{self as p4rt, update::Type};
use tonic::service::interceptor::InterceptedService;

const P4INFO: &str = include_str!("../../examples/firewall/p4info.txt");
const TABLE: u32 = 39123287;
const ALLOW: u32 = 17724422;

/// Serves the emulator's P4Runtime (and BulkWrite when `bulk`), counting
/// BulkWrite calls.
async fn serve(bulk: bool) -> (String, Arc<AtomicUsize>) {
    let emu = Emulator::new(&EmulatorConfig {
        device_ids: vec![1, 2],
        ..Default::default()
    });
    let calls = Arc::new(AtomicUsize::new(0));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let counted = {
        let calls = calls.clone();
        InterceptedService::new(emu.bulk_service(), move |r| {
            calls.fetch_add(1, Ordering::Relaxed);
            Ok(r)
        })
    };
    let mut router = tonic::transport::Server::builder().add_service(emu.service());
    if bulk {
        router = router.add_service(counted);
    }
    tokio::spawn(router.serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l)));
    (addr, calls)
}

fn connect(endpoint: &str, device_id: u64) -> Device {
    let id = Identity {
        election_id: 5,
        client_id: 5,
    };
    Device::connect(Target::p4runtime(endpoint, device_id), id).unwrap()
}

/// Device 1 writing with bulk and device 2 with standard writes only, the
/// firewall set on both; and the count of BulkWrite calls.
async fn bulk_and_standard() -> (Device, Device, Arc<AtomicUsize>) {
    let (addr, calls) = serve(true).await;
    let info = p4fleet_proto::p4info::parse_text(P4INFO).unwrap();
    let bulk = connect(&addr, 1);
    let std = connect(&addr, 2);
    let Device::P4Runtime(d) = &std else {
        panic!("a P4Runtime device");
    };
    d.set_bulk_enabled(false);
    for d in [&bulk, &std] {
        d.set_pipeline(0, &info, b"x".to_vec(), 1).await.unwrap();
    }
    (bulk, std, calls)
}

fn v(x: u32) -> Vec<u8> {
    let b = x.to_be_bytes();
    let first = b.iter().position(|c| *c != 0).unwrap_or(3);
    b[first..].to_vec()
}

/// One update as the tests write it: firewall entry `i` with `port` as
/// given (possibly empty or too wide), tagged `set-{i % 3}`.
struct Update {
    ty: Type,
    entry: Entry,
    metadata: Vec<u8>,
}

fn update(ty: Type, i: u32, port: Vec<u8>) -> Update {
    let exact = |field_id, value: Vec<u8>| FieldMatch {
        field_id,
        value: MatchValue::Exact(ByteStr::new(&value)),
    };
    Update {
        ty,
        entry: Entry {
            key: EntryKey {
                table_id: TABLE,
                matches: Box::new([
                    exact(1, v(0x0a00_0000 + i)),
                    exact(2, v(0xc0a8_0000 + i % 7)),
                ]),
                priority: 0,
            },
            action: ActionCall {
                action_id: ALLOW,
                params: Box::new([ActionParam {
                    param_id: 1,
                    value: ByteStr::new(&port),
                }]),
            },
            idle_timeout_ns: 0,
        },
        metadata: format!("set-{}", i % 3).into_bytes(),
    }
}

/// The ops of a batch (DELETE carries the key only).
fn ops(batch: &[Update]) -> Vec<WriteOp<'_>> {
    batch
        .iter()
        .map(|u| WriteOp::new(u.ty, &u.entry).with_metadata(&u.metadata))
        .collect()
}

fn opts() -> WriteOptions {
    WriteOptions {
        batch_size: 700,
        max_in_flight: 3,
        atomicity: Atomicity::ContinueOnError,
        distinct_keys: false,
    }
}

fn codes(f: &[UpdateFailure]) -> Vec<(usize, i32)> {
    f.iter().map(|f| (f.index, f.code)).collect()
}

async fn sorted(dev: &Device) -> Vec<p4rt::TableEntry> {
    let mut t = dev.read_table(0, TABLE).await.unwrap();
    t.sort_by_key(|e| format!("{:?}", e.r#match));
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_uses_bulk_automatically_with_standard_results() {
    let (bulk, std, calls) = bulk_and_standard().await;
    assert!(bulk.capabilities().await.unwrap().bulk_write);

    // Inserts with duplicates (ALREADY_EXISTS) and a port too wide for its
    // 9 bits (OUT_OF_RANGE), then modifies and deletes with missing keys.
    let mut ins: Vec<Update> = (0..3000)
        .map(|i| update(Type::Insert, i, v(i % 512)))
        .collect();
    ins.push(update(Type::Insert, 10, v(1)));
    ins.push(update(Type::Insert, 5000, vec![2, 0]));
    ins.push(update(Type::Insert, 2999, v(1)));
    let modi: Vec<Update> = (2990..3010)
        .map(|i| update(Type::Modify, i, v(3)))
        .collect();
    let del: Vec<Update> = (0..100)
        .step_by(3)
        .chain(4000..4002)
        .map(|i| update(Type::Delete, i, vec![]))
        .collect();

    for batch in [ins, modi, del] {
        let before = calls.load(Ordering::Relaxed);
        let a = bulk.write_ops(0, &ops(&batch), opts()).await.unwrap();
        assert!(calls.load(Ordering::Relaxed) > before, "bulk was not used");
        let b = std.write_ops(0, &ops(&batch), opts()).await.unwrap();
        assert_eq!(codes(&a.failures), codes(&b.failures));
        assert_eq!(a.requests, b.requests);
        assert!(!a.failures.is_empty());
    }
    let (a, b) = (sorted(&bulk).await, sorted(&std).await);
    assert_eq!(a.len(), 3000 - 34);
    assert_eq!(a, b);

    // Mixed tables or types, or values the columns cannot carry, take the
    // standard path with the standard answers.
    let before = calls.load(Ordering::Relaxed);
    let odd = vec![
        update(Type::Insert, 7000, vec![]),
        update(Type::Insert, 7001, v(1)),
    ];
    let a = bulk.write_ops(0, &ops(&odd), opts()).await.unwrap();
    let b = std.write_ops(0, &ops(&odd), opts()).await.unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), before);
    assert_eq!(codes(&a.failures), codes(&b.failures));
    assert_eq!(
        codes(&a.failures),
        vec![(0, tonic::Code::OutOfRange as i32)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_falls_back_without_bulk() {
    let (addr, _) = serve(false).await;
    let info = p4fleet_proto::p4info::parse_text(P4INFO).unwrap();
    let dev = connect(&addr, 1);
    assert!(!dev.capabilities().await.unwrap().bulk_write);
    dev.set_pipeline(0, &info, b"x".to_vec(), 1).await.unwrap();
    let ins: Vec<Update> = (0..50).map(|i| update(Type::Insert, i, v(i))).collect();
    let r = dev.write_ops(0, &ops(&ins), opts()).await.unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(dev.read_table(0, TABLE).await.unwrap().len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canonical_entries_go_bulk_from_the_entry_model() {
    let (bulk, std, calls) = bulk_and_standard().await;
    let (Device::P4Runtime(b), Device::P4Runtime(s)) = (&bulk, &std) else {
        panic!("P4Runtime devices");
    };
    let entries: Vec<Entry> = (0..500u32)
        .map(|i| Entry {
            key: EntryKey {
                table_id: TABLE,
                matches: Box::new([
                    FieldMatch {
                        field_id: 1,
                        value: MatchValue::Exact(ByteStr::canonical(
                            &(0x0a00_0000 + i).to_be_bytes(),
                        )),
                    },
                    FieldMatch {
                        field_id: 2,
                        value: MatchValue::Exact(ByteStr::canonical(&[1])),
                    },
                ]),
                priority: 0,
            },
            action: ActionCall {
                action_id: ALLOW,
                params: Box::new([ActionParam {
                    param_id: 1,
                    value: ByteStr::canonical(&(i % 512).to_be_bytes()),
                }]),
            },
            idle_timeout_ns: 0,
        })
        .collect();
    for ty in [Type::Insert, Type::Insert, Type::Delete] {
        let n = if ty == Type::Delete { 100 } else { 500 };
        let before = calls.load(Ordering::Relaxed);
        let ops: Vec<WriteOp> = entries[..n].iter().map(|e| WriteOp::new(ty, e)).collect();
        let a = b.write_ops(0, &ops, opts()).await.unwrap();
        assert!(calls.load(Ordering::Relaxed) > before);
        let r = s.write_ops(0, &ops, opts()).await.unwrap();
        assert_eq!(codes(&a.failures), codes(&r.failures));
    }
    let (x, y) = (sorted(&bulk).await, sorted(&std).await);
    assert_eq!(x.len(), 400);
    assert_eq!(x, y);
}
