//! What an idle resync of one 1,000-entry set costs the operator, counted
//! (allocations and bytes allocated on the operator's threads; not time):
//! the assembly of the desired entries and the read-back compared with
//! them, before (re-assembled, decoded, planned) and after (the kept
//! assembly, the read-back compared as bytes). The emulator runs on its
//! own runtime, whose threads are not counted. Prints the counts that
//! docs/dev/fleet-lab-notes.md records:
//! `cargo test --workspace --test idle_resync -- --nocapture`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use p4fleet::stages::{
    Desired, DesiredCache, Inputs, ReadBack, SourceText, Sources, desired, parsed, read_check,
};
use p4fleet_crds::{TableEntrySet, TableEntrySetSpec};
use p4fleet_model::entries::{TableSchema, WriteOp};
use p4fleet_model::sync::{self, Ownership};
use p4fleet_proto::p4info;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set on the emulator's threads: their allocations are not the operator's.
    static UNCOUNTED: Cell<bool> = const { Cell::new(false) };
}

fn count(size: usize) {
    if !UNCOUNTED.with(Cell::get) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(size as u64, Ordering::Relaxed);
    }
}

// SAFETY: delegates to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size());
        unsafe { System.alloc(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count(new);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and bytes allocated while `f` runs (on counted threads).
async fn counted<T>(f: impl std::future::Future<Output = T>) -> (T, u64, u64) {
    let (a, b) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    let out = f.await;
    let (a2, b2) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    (out, a2 - a, b2 - b)
}

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .join(rel)
}

const N: usize = 1_000;

fn set() -> TableEntrySet {
    let spec: TableEntrySetSpec = serde_json::from_value(serde_json::json!({
        "virtualSwitchRef": "vs", "table": "firewall"
    }))
    .unwrap();
    let mut s = TableEntrySet::new("fw", spec);
    s.metadata.namespace = Some("ns".into());
    s.metadata.generation = Some(1);
    s
}

fn sources() -> Sources {
    let mut text = String::from("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n");
    for i in 0..N {
        text.push_str(&format!(
            "10.1.{}.{} 192.168.0.1 {}\n",
            i / 250,
            i % 250,
            i % 7 + 1
        ));
    }
    Sources {
        texts: vec![SourceText {
            config_map: "fw".into(),
            key: "entries".into(),
            resource_version: "1".into(),
            text: text.as_str().into(),
        }],
    }
}

#[test]
fn an_idle_resync_assembles_nothing_and_decodes_nothing() {
    let emu_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .on_thread_start(|| UNCOUNTED.with(|u| u.set(true)))
        .enable_all()
        .build()
        .unwrap();
    let running = emu_rt
        .block_on(p4fleet_emulator::Emulator::start(
            p4fleet_emulator::EmulatorConfig {
                device_ids: vec![4],
                ..Default::default()
            },
        ))
        .unwrap();
    let addr = running.p4runtime_addr().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let info = p4info::parse_text(
            &std::fs::read_to_string(repo("examples/firewall/p4info.txt")).unwrap(),
        )
        .unwrap();
        let schema = TableSchema::from_p4info(&info, "firewall").unwrap();
        let (set, sources) = (set(), sources());
        let tag = sync::set_tag("ns", "fw");

        // The desired entries: assembled (every resync before), or the
        // kept assembly (after).
        let parse = |schema: &TableSchema| {
            let opts = desired::options(&set.spec);
            vec![Arc::new(parsed::parse(
                schema,
                opts,
                &sources.texts[0].text.get().unwrap(),
            ))]
        };
        let parsed = parse(&schema);
        let digest = p4fleet::stages::schema_digest(&schema);
        let (d, assemble_allocs, assemble_bytes) =
            counted(async { Arc::new(desired::assemble(&set.spec, &schema, &sources, &parsed)) })
                .await;
        assert_eq!(d.len(), N, "{:?}", d.errors);
        let cache = DesiredCache::default();
        let inputs = Inputs::new(1, digest, &sources, &parsed);
        cache.keep("ns/fw", vec![(inputs.clone(), d.clone())]);
        let (kept, keep_allocs, _) = counted(async { cache.get("ns/fw", &inputs) }).await;
        assert!(Arc::ptr_eq(&kept.expect("kept"), &d));

        // The device holds exactly the desired entries, tagged ours.
        let dev = p4fleet_client::Device::connect(
            p4fleet_client::Target::p4runtime(addr, 4),
            p4fleet_client::Identity {
                election_id: 1,
                client_id: 1,
            },
        )
        .unwrap();
        dev.set_pipeline(0, &info, b"cfg".to_vec(), 1)
            .await
            .unwrap();
        let metadata = sync::tag_metadata(tag);
        let ops: Vec<WriteOp> = d
            .iter()
            .map(|e| WriteOp::insert(e).with_metadata(&metadata))
            .collect();
        let rep = dev
            .write_ops(0, &ops, p4fleet_client::WriteOptions::default())
            .await
            .unwrap();
        assert_eq!(rep.failures, vec![]);

        let slow = |d: Arc<Desired>| {
            let (dev, schema) = (&dev, &schema);
            async move {
                let raw = dev.read_table(0, schema.id).await.unwrap();
                let on_device = read_check::convert(schema, &raw);
                sync::plan(&d.refs(), &on_device, Ownership::Merge, tag)
            }
        };
        let fast = |d: Arc<Desired>| {
            let (dev, schema) = (&dev, &schema);
            async move {
                let raw = dev.read_table_raw(0, schema.id).await.unwrap().unwrap();
                let bytes = raw.byte_len();
                (
                    read_check::compare(&raw, schema, &d, tag, 4).unwrap(),
                    bytes,
                )
            }
        };
        // Warm: the connection, and the desired sum (once per assembly).
        let _ = slow(d.clone()).await;
        let (warm, _) = fast(d.clone()).await;
        assert!(matches!(warm, ReadBack::InSync), "{warm:?}");

        let (plan, slow_allocs, slow_bytes) = counted(slow(d.clone())).await;
        assert_eq!((plan.unchanged, plan.writes()), (N, 0));
        let ((found, read_bytes), fast_allocs, fast_bytes) = counted(fast(d.clone())).await;
        assert!(
            matches!(found, ReadBack::InSync),
            "the emulator answers with the bytes the entries were written as: {found:?}"
        );
        println!(
            "idle resync of {N} entries, per set: assemble {assemble_allocs} allocations \
             ({assemble_bytes} B) -> kept {keep_allocs}; read-back and compare \
             {slow_allocs} allocations ({slow_bytes} B) -> {fast_allocs} ({fast_bytes} B); \
             {read_bytes} B read, 0 entities decoded"
        );
        // What makes the idle round cheap: per entry, no allocation left.
        assert!(keep_allocs < 10, "{keep_allocs}");
        assert!(
            fast_allocs * 10 < slow_allocs,
            "{fast_allocs} vs {slow_allocs}"
        );

        // Drift: one entry gone, one changed by another writer. Decoded,
        // and planned as the slow path plans.
        let gone = WriteOp::delete(&d.entry(0).key);
        let mut changed = d.entry(1).clone();
        changed.action = d.entry(2).action.clone();
        let modify = WriteOp::modify(&changed);
        let rep = dev
            .write_ops(0, &[gone, modify], p4fleet_client::WriteOptions::default())
            .await
            .unwrap();
        assert_eq!(rep.failures, vec![]);
        let want = slow(d.clone()).await;
        let (found, _) = fast(d.clone()).await;
        let ReadBack::Entries(on_device) = found else {
            panic!("drift must be decoded")
        };
        let got = sync::plan(&d.refs(), &on_device, Ownership::Merge, tag);
        assert_eq!(got, want);
        assert_eq!(got.inserts, vec![0]);
        assert_eq!(got.modifies.len() + got.unchanged, N - 1);
    });
    drop(running);
}
