//! The firewall example on one emulated Bmv2 (P4Runtime) or Tofino (BFRT)
//! Switch, as the fault and restart tests use it: the emulator as its own
//! process (so it can be killed), the objects of one namespace, and an
//! independent view of the device through p4fleet-client.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use p4fleet_client::{Device, Identity, Target, TofinoPipeline};
use p4fleet_crds::{P4Program, Switch, TableEntrySet};
pub use p4fleet_model::entries::EntryKey;
use p4fleet_model::entries::{Entry, LineParser, TableSchema, WriteOp};
use serde_json::json;

use crate::processes::{Proc, build_binaries, spawn_emulator, spawn_operator};
use crate::{ControlPlane, TestNamespace, create_json, firewall_lines, repo_root};

/// The kind of Switch: which protocol the operator speaks to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// P4Runtime, entries carry ownership tags in their metadata.
    Bmv2,
    /// BFRT, entries carry no metadata.
    Tofino,
}

/// The two tests of a scenario `scenario(kind, device)` that runs on either
/// kind: `$bmv2` on Bmv2 device `$b`, `$tofino` on Tofino device `$t`.
#[macro_export]
macro_rules! bmv2_and_tofino_tests {
    ($scenario:ident: $bmv2:ident on $b:expr, $tofino:ident on $t:expr $(,)?) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $bmv2() {
            $scenario($crate::firewall::Kind::Bmv2, $b).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $tofino() {
            $scenario($crate::firewall::Kind::Tofino, $t).await;
        }
    };
}

/// The emulator's three listen addresses.
#[derive(Debug, Clone, Copy)]
pub struct Addrs {
    pub p4runtime: SocketAddr,
    pub bfrt: SocketAddr,
    pub stats: SocketAddr,
}

impl Addrs {
    /// The Switch endpoint for `kind`.
    pub fn endpoint(&self, kind: Kind) -> SocketAddr {
        match kind {
            Kind::Bmv2 => self.p4runtime,
            Kind::Tofino => self.bfrt,
        }
    }
}

/// Starts the emulator from `bin` (devices `devices`, e.g. "1,11") on
/// `addrs` (None: any free ports) and waits until it listens.
pub fn emulator(bin: &Path, devices: &str, addrs: Option<Addrs>) -> (Proc, Addrs) {
    let any = "127.0.0.1:0".to_string();
    let (p4runtime, bfrt, stats) = match addrs {
        Some(a) => (
            a.p4runtime.to_string(),
            a.bfrt.to_string(),
            a.stats.to_string(),
        ),
        None => (any.clone(), any.clone(), any),
    };
    let emu = spawn_emulator(
        bin,
        &[
            "--device-ids",
            devices,
            "--p4runtime-addr",
            &p4runtime,
            "--bfrt-addr",
            &bfrt,
            "--stats-addr",
            &stats,
        ],
    );
    let addrs = Addrs {
        p4runtime: emu.p4runtime,
        bfrt: emu.bfrt.expect("bfrt address"),
        stats: emu.stats,
    };
    (emu.proc, addrs)
}

/// The shared control plane, a client of it, the emulator with `devices`
/// and an operator logging to `log` with `args`, started in that order:
/// how the one-emulator firewall tests begin.
pub async fn emulator_and_operator(
    devices: &str,
    log: &str,
    args: &[&str],
) -> (&'static ControlPlane, Client, (Proc, Addrs), Proc) {
    let cp = ControlPlane::shared().await;
    let client = cp.client().await;
    let emu = emulator(&build_binaries(), devices, None);
    let op = spawn_operator(&build_binaries(), cp.kubeconfig_path(), log, args);
    (cp, client, emu, op)
}

/// Operator flags for periodic passes (resync, drift) longer than any
/// test: only a change, or the first sync after a start, writes or
/// repairs anything.
pub const LONG_PERIODS: [&str; 4] = ["--resync-seconds", "3600", "--drift-seconds", "3600"];

/// The TableEntrySet `fw` of [`setup`].
#[derive(Debug, Clone, Copy)]
pub struct FirewallSet {
    /// Entries in its ConfigMap `fw` ([`firewall_lines`] from 0).
    pub entries: usize,
    /// `Merge` or `Exclusive`.
    pub ownership: &'static str,
}

impl FirewallSet {
    /// `entries` entries, the set owning the table (`Exclusive`).
    pub fn exclusive(entries: usize) -> FirewallSet {
        FirewallSet {
            entries,
            ownership: "Exclusive",
        }
    }

    /// `entries` entries, the set sharing the table (`Merge`).
    pub fn merge(entries: usize) -> FirewallSet {
        FirewallSet {
            entries,
            ownership: "Merge",
        }
    }
}

/// Program `firewall`, Switch `<ns>-sw` (device `device`), VirtualSwitch
/// `fw` and TableEntrySet `fw` reading ConfigMap `fw` (batch 1000, 4 in
/// flight). Returns the Switch's name.
pub async fn setup(
    client: &Client,
    ns: &str,
    kind: Kind,
    addrs: Addrs,
    device: u64,
    set: FirewallSet,
) -> String {
    let read = |p: &str| std::fs::read_to_string(repo_root().join(p)).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let mut spec = json!({"p4info": {"inline": read("examples/firewall/p4info.txt")}});
    if kind == Kind::Tofino {
        create_json(
            &cms,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tofino"},
                "data": {"bfrt.json": read("examples/firewall/bfrt.json"), "tofino.bin": "bin"}}),
        )
        .await;
        let key = |k: &str| json!({"configMapKeyRef": {"name": "tofino", "key": k}});
        spec["artifacts"] = json!({"tofino": {"bfrtJson": key("bfrt.json"),
            "contextJson": {"inline": "{}"}, "binary": key("tofino.bin")}});
    }
    let sw = format!("{ns}-sw");
    let target = match kind {
        Kind::Bmv2 => "Bmv2",
        Kind::Tofino => "Tofino",
    };
    let v1 = "p4fleet.dev/v1alpha1";
    create_json(
        &Api::<P4Program>::namespaced(client.clone(), ns),
        json!({"apiVersion": v1, "kind": "P4Program", "metadata": {"name": "firewall"}, "spec": spec}),
    )
    .await;
    create_json(
        &Api::<Switch>::all(client.clone()),
        json!({"apiVersion": v1, "kind": "Switch", "metadata": {"name": sw},
            "spec": {"target": target, "endpoint": addrs.endpoint(kind).to_string(),
                "deviceId": device, "slots": 1}}),
    )
    .await;
    crate::firewall_virtual_switch(client, ns, &sw).await;
    create_json(
        &cms,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fw"},
            "data": {"entries": firewall_lines(0, set.entries)}}),
    )
    .await;
    create_json(
        &Api::<TableEntrySet>::namespaced(client.clone(), ns),
        json!({"apiVersion": v1, "kind": "TableEntrySet", "metadata": {"name": "fw"},
            "spec": {"virtualSwitchRef": "fw", "table": "MyIngress.firewall",
                "ownership": set.ownership,
                "entriesFrom": [{"configMap": "fw"}],
                "write": {"batchSize": 1000, "maxInFlight": 4}}}),
    )
    .await;
    sw
}

/// A namespace per kind, Bmv2 on device 1 and Tofino on device 11 (the
/// emulator's "1,11"), each with [`setup`]'s objects and `set`, in that order.
pub async fn setup_per_kind(
    client: &Client,
    addrs: Addrs,
    set: FirewallSet,
) -> Vec<(Kind, u64, TestNamespace)> {
    let mut cases = Vec::new();
    for (kind, device) in [(Kind::Bmv2, 1), (Kind::Tofino, 11)] {
        let ns = TestNamespace::new(client).await;
        setup(client, ns.name(), kind, addrs, device, set).await;
        cases.push((kind, device, ns));
    }
    cases
}

fn p4info_text() -> String {
    std::fs::read_to_string(repo_root().join("examples/firewall/p4info.txt")).unwrap()
}

/// The firewall table's schema (from the example's P4Info).
pub fn schema() -> TableSchema {
    p4fleet_model::fixtures::firewall()
}

/// The entries of a line-format text of the firewall table.
pub fn parse(text: &str) -> Vec<Entry> {
    let schema = schema();
    let mut p = LineParser::new(&schema);
    text.lines()
        .filter_map(|l| p.parse_line(l).expect("valid line"))
        .collect()
}

/// The keys of [`firewall_lines`]`(start, n)`.
pub fn keys_of_lines(start: usize, n: usize) -> HashSet<EntryKey> {
    parse(&firewall_lines(start, n))
        .into_iter()
        .map(|e| e.key)
        .collect()
}

/// An entry no TableEntrySet of these tests desires:
/// `192.168.1.1 -> 192.168.1.2: drop`.
pub fn foreign_entry() -> Entry {
    parse("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action drop\n192.168.1.1 192.168.1.2")
        .remove(0)
}

/// [`foreign_entry`] as a P4Runtime TableEntry in protobuf text format.
const FOREIGN_TEXT: &str = "table_id: 39123287\nmatch { field_id: 1 exact { value: \"\\xc0\\xa8\\x01\\x01\" } }\nmatch { field_id: 2 exact { value: \"\\xc0\\xa8\\x01\\x02\" } }\naction { action { action_id: 25652968 } }\n";

/// POSTs `body` to the emulator's side channel; returns the answer's body.
fn post(addr: SocketAddr, path: &str, body: &str) -> String {
    crate::processes::side_channel(addr, "POST", path, body)
}

/// Waits up to 180 s until set `fw` is Ready with `applied` entries
/// applied.
pub async fn ready_with(sets: &Api<TableEntrySet>, applied: usize) {
    crate::set_status_where(
        sets,
        "fw",
        &format!("Ready with {applied} applied"),
        std::time::Duration::from_secs(180),
        |st| {
            let ready =
                p4fleet_crds::find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true());
            ready && st.applied == applied as u64
        },
    )
    .await;
}

/// How many keys the device holds that it should not (stale), and how
/// many it lacks (lost).
pub fn stale_and_lost(
    on_device: &HashSet<EntryKey>,
    expected: &HashSet<EntryKey>,
) -> (usize, usize) {
    (
        on_device.difference(expected).count(),
        expected.difference(on_device).count(),
    )
}

/// Panics unless `on_device` is exactly `expected` (nothing stale, nothing
/// lost); `what` names the check in the log line and the panic.
pub fn assert_exact(on_device: &HashSet<EntryKey>, expected: &HashSet<EntryKey>, what: &str) {
    let (stale, lost) = stale_and_lost(on_device, expected);
    eprintln!(
        "{what}: {} entries on the device, {stale} stale, {lost} lost",
        on_device.len()
    );
    assert_eq!((stale, lost), (0, 0), "{what}: not exact");
}

/// Arms an injected fault on `device` of the emulator whose side channel is
/// at `stats`; `query` as in emulator/src/side_channel.rs, e.g.
/// `kind=unavailable&after=2&count=3`.
pub fn arm_fault(stats: SocketAddr, device: u64, query: &str) {
    let r = post(stats, &format!("/devices/{device}/faults?{query}"), "");
    assert!(r.contains("\"armed\":true"), "arming {query}: {r}");
}

/// Disarms every injected fault of `device`.
pub fn clear_faults(stats: SocketAddr, device: u64) {
    let r = post(stats, &format!("/devices/{device}/faults/clear"), "");
    assert!(r.contains("\"cleared\":true"), "clearing faults: {r}");
}

/// How many RPCs each injected fault of `device` hit so far (the side
/// channel's `GET /devices/{device}/faults`): `unavailable`,
/// `stalled_writes`, `failed_updates_writes`, `stalled_reads`.
pub fn faults_fired(stats: SocketAddr, device: u64) -> serde_json::Value {
    let path = format!("/devices/{device}/faults");
    let answer = crate::processes::side_channel(stats, "GET", &path, "");
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("faults of {device}: {e}: {answer}"))
}

/// Another client of the device, not the operator: on Bmv2 a backup
/// (election id 1, below any leader's), on Tofino a second BFRT client
/// bound to the loaded program. It writes foreign entries and reads the
/// table independently of the operator.
pub struct Other {
    dev: Device,
    kind: Kind,
}

impl Other {
    /// Connects to `device` of the emulator at `addrs`. On Tofino the
    /// operator must have loaded the program.
    pub async fn connect(kind: Kind, addrs: Addrs, device: u64) -> Other {
        let endpoint = addrs.endpoint(kind).to_string();
        // The operator's BFRT client ids fit in 16 bits.
        let id = Identity {
            election_id: 1,
            client_id: 0x1_0000 + device as u32,
        };
        let target = match kind {
            Kind::Bmv2 => Target::p4runtime(endpoint, device),
            Kind::Tofino => Target::bfrt(endpoint, device),
        };
        let dev = Device::connect(target, id).expect("connect");
        if kind == Kind::Tofino {
            let info = p4fleet_proto::p4info::parse_text(&p4info_text()).unwrap();
            let bfrt_json = std::fs::read(repo_root().join("examples/firewall/bfrt.json")).unwrap();
            let pipeline = TofinoPipeline {
                p4_name: "firewall".into(),
                bfrt_json,
                context_json: b"{}".to_vec(),
                binary: b"bin".to_vec(),
            };
            let pushed = dev.set_tofino_pipeline(0, &info, &pipeline).await.unwrap();
            assert!(!pushed, "the operator has loaded the same program");
        }
        Other { dev, kind }
    }

    /// The firewall table's keys as the device holds them.
    pub async fn keys(&self) -> HashSet<EntryKey> {
        let schema = schema();
        let raw = self.dev.read_table(0, schema.id).await.expect("read table");
        raw.iter()
            .map(|te| Entry::from_proto(&schema, te).expect("readable entry").key)
            .collect()
    }

    /// Writes `e` behind the operator's back. On Bmv2 (where this client is
    /// a backup) through the emulator's inject-entry side channel at
    /// `stats`, on Tofino as this BFRT client.
    pub async fn insert(&self, e: &Entry, stats: SocketAddr, device: u64) {
        match self.kind {
            Kind::Bmv2 => {
                assert_eq!(e, &foreign_entry(), "the side channel takes text");
                let r = post(
                    stats,
                    &format!("/devices/{device}/inject-entry"),
                    FOREIGN_TEXT,
                );
                assert!(r.contains("\"inserted\":true"), "{r}");
            }
            Kind::Tofino => {
                let r = self
                    .dev
                    .write_ops(0, &[WriteOp::insert(e)], Default::default())
                    .await
                    .unwrap();
                assert!(r.failures.is_empty(), "{:?}", r.failures);
            }
        }
    }
}
