//! A fleet of all four kinds for the rollout tests
//! (e2e/tests/rollout_mixed.rs): one P4Program `firewall` carrying its
//! bmv2, Tofino, DPDK and FPGA artifacts, twelve VirtualSwitches (three on
//! Bmv2, three on Tofino and three on Dpdk Switches of one emulator, three
//! on slots of one emulated NetFPGA-SUME), a selector TableEntrySet filling
//! all twelve, and a view of every device that does not go through the
//! operator: which build it runs, how often it was loaded, what its table
//! holds.
//!
//! A build (`v1`, `v2`, ...) changes what a recompile changes: the P4Info
//! (a comment), the Tofino binary and context.json, the DPDK `.spec` (a
//! comment) and context, the FPGA bitstream. The tables stay, so the bmv2
//! JSON and the bfrt.json stay the same bytes.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use p4fleet_client::{Device, Identity, SlotClient, Target};
use p4fleet_crds::{P4Program, Switch, TableEntrySet, VirtualSwitch, find_condition};
use p4fleet_model::entries::{Entry, EntryKey};
use p4fleet_proto::bfrt::GetForwardingPipelineConfigRequest;
use p4fleet_proto::bfrt::bf_runtime_client::BfRuntimeClient;
use serde_json::json;

use crate::processes::{Proc, build_binaries, device_stat, spawn_emulator};
use crate::rollout::{ENTRIES, V1, p4info, revision_digest, selector_set};
use crate::{apply_json, create_json, firewall, repo_root, wait_object_ready};

/// The FPGA bitstream's size (a small one: it is in the source ConfigMap
/// and in every revision's snapshot).
const BITS: u64 = 280_000;

/// The kind of Switch a VirtualSwitch runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bmv2,
    Tofino,
    Dpdk,
    Fpga,
}

/// One VirtualSwitch of the fleet and its device.
#[derive(Debug, Clone)]
pub struct Member {
    /// The VirtualSwitch's name, e.g. `tofino-0`.
    pub vs: String,
    pub kind: Kind,
    /// The Switch it runs on.
    pub switch: String,
    /// The emulator's device id (Bmv2, Tofino, Dpdk), or the slot the
    /// operator placed it in on the board (Fpga).
    pub device: u64,
}

/// The fleet: its processes, addresses and members, in rollout order
/// (`p4fleet.dev/rollout-order` is the index).
pub struct Mixed {
    pub ns: String,
    pub members: Vec<Member>,
    /// The emulator serving the Bmv2, Tofino and Dpdk devices.
    pub p4runtime: SocketAddr,
    pub bfrt: SocketAddr,
    pub stats: SocketAddr,
    /// The board's P4Runtime and slot service, and its side channel.
    pub board: SocketAddr,
    pub board_stats: SocketAddr,
    pub programs: Api<P4Program>,
    pub sets: Api<TableEntrySet>,
    cms: Api<ConfigMap>,
    /// (build, digest) of each revision seen, for reading cookies and slot
    /// digests back as builds.
    builds: std::sync::Mutex<Vec<(String, String)>>,
    _procs: (Proc, Proc),
}

/// Rollout order: the kinds interleaved, Tofino first, so that the canary
/// is a Tofino and the 50 % step moves every kind and leaves every kind.
const ORDER: [Kind; 4] = [Kind::Tofino, Kind::Dpdk, Kind::Fpga, Kind::Bmv2];

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Bmv2 => "bmv2",
        Kind::Tofino => "tofino",
        Kind::Dpdk => "dpdk",
        Kind::Fpga => "fpga",
    }
}

fn example(file: &str) -> String {
    std::fs::read_to_string(repo_root().join("examples/firewall").join(file)).unwrap()
}

/// The Tofino binary of `build` (the emulator keeps it as pushed).
fn tofino_bin(build: &str) -> String {
    format!("tofino.bin of firewall, build {build}")
}

/// A synthetic bitstream seeded by `build`, from the emulator's generator
/// (what examples/firewall/fpga.yaml tells users to run).
fn bitstream(build: &str) -> Vec<u8> {
    let out = std::process::Command::new(build_binaries().join("p4fleet-emulator"))
        .args(["fpga-bitstream", "--bits", &BITS.to_string(), "--seed"])
        .arg(format!("firewall {build}"))
        .output()
        .expect("run p4fleet-emulator fpga-bitstream");
    assert!(out.status.success(), "fpga-bitstream: {out:?}");
    out.stdout
}

/// Applies ConfigMap `fw-src`: every source of the program, at `build`.
pub async fn source(cms: &Api<ConfigMap>, build: &str) {
    let b64 = |b: Vec<u8>| serde_json::to_value(ByteString(b)).unwrap();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fw-src"},
    "data": {
        "p4info.txt": p4info(build),
        "firewall.json": example("firewall.json"),
        "bfrt.json": example("bfrt.json"),
        "tofino-context.json": json!({"build": build}).to_string(),
        "firewall.spec": format!("{}; build {build}\n", example("firewall.spec")),
        "dpdk-context.json":
            json!({"program_name": "firewall", "target": "dpdk", "build": build}).to_string(),
    },
    "binaryData": {
        "tofino.bin": b64(tofino_bin(build).into_bytes()),
        "bitstream": b64(bitstream(build)),
    }});
    apply_json(cms, cm).await;
}

fn key(k: &str) -> serde_json::Value {
    json!({"configMapKeyRef": {"name": "fw-src", "key": k}})
}

impl Mixed {
    /// Starts the emulator (devices 1-3 Bmv2, 11-13 Tofino over BFRT, 21-23
    /// Dpdk) and the board, creates the fleet in `ns` at build `v1` with
    /// `rollout`, and waits until all twelve and the set are Ready.
    pub async fn start(client: &Client, ns: &str, rollout: serde_json::Value) -> Mixed {
        let bin = build_binaries();
        let emu = spawn_emulator(
            &bin,
            &[
                "--device-ids",
                "1,2,3,11,12,13,21,22,23",
                "--bfrt-addr",
                "127.0.0.1:0",
                "--dpdk-device-ids",
                "21,22,23",
                // Little traffic: three data planes share two cores with
                // everything else.
                "--dpdk-rate-pps",
                "1000",
                "--dpdk-extern-cores",
                "0",
            ],
        );
        let board = spawn_emulator(&bin, &["--fpga", "netfpga-sume", "--fpga-port", "icap"]);
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        source(&cms, "v1").await;
        let cfg = json!({
            "p4info": key("p4info.txt"),
            "artifacts": {
                "bmv2": {"json": key("firewall.json")},
                "tofino": {"bfrtJson": key("bfrt.json"), "contextJson": key("tofino-context.json"),
                    "binary": key("tofino.bin")},
                "dpdk": {"spec": key("firewall.spec"), "context": key("dpdk-context.json"),
                    "bfrtJson": key("bfrt.json")},
                // P4VBox's firewall (examples/firewall/fpga.yaml).
                "fpga": {"bitstream": key("bitstream"), "bits": BITS,
                    "resources": {"luts": 45683, "ffs": 74344}},
            },
            "rollout": rollout});
        create_json(
            &Api::<P4Program>::namespaced(client.clone(), ns),
            json!({"apiVersion": V1, "kind": "P4Program", "metadata": {"name": "firewall"},
                "spec": cfg}),
        )
        .await;
        let switches = Api::<Switch>::all(client.clone());
        let board_sw = format!("{ns}-fpga");
        create_json(
            &switches,
            json!({"apiVersion": V1, "kind": "Switch", "metadata": {"name": board_sw},
                "spec": {"target": "Fpga", "endpoint": board.p4runtime.to_string(), "deviceId": 1,
                    "ports": [{"id": 0}, {"id": 1}, {"id": 2}, {"id": 3}]}}),
        )
        .await;
        let bfrt = emu.bfrt.expect("bfrt address");
        let mut members = Vec::new();
        for i in 0..3u64 {
            for kind in ORDER {
                let (target, endpoint, device) = match kind {
                    Kind::Bmv2 => ("Bmv2", emu.p4runtime, 1 + i),
                    Kind::Tofino => ("Tofino", bfrt, 11 + i),
                    Kind::Dpdk => ("Dpdk", emu.p4runtime, 21 + i),
                    Kind::Fpga => ("Fpga", board.p4runtime, 0),
                };
                let vs = format!("{}-{i}", kind_name(kind));
                let switch = match kind {
                    Kind::Fpga => board_sw.clone(),
                    _ => {
                        let sw = format!("{ns}-{vs}");
                        create_json(
                            &switches,
                            json!({"apiVersion": V1, "kind": "Switch", "metadata": {"name": sw},
                                "spec": {"target": target, "endpoint": endpoint.to_string(),
                                    "deviceId": device, "slots": 1}}),
                        )
                        .await;
                        sw
                    }
                };
                let mut spec = json!({"programRef": "firewall", "switchRef": switch,
                    // Recreate: every program change clears the tables, so
                    // the set's entries are written again (and can fail).
                    "updateStrategy": {"type": "Recreate"}});
                match kind {
                    // Slots on a board are told apart by their traffic's VLAN.
                    Kind::Fpga => spec["isolation"] = json!({"vlan": 10 + i}),
                    _ => spec["slot"] = json!(0),
                }
                let order = members.len();
                create_json(
                    &Api::<VirtualSwitch>::namespaced(client.clone(), ns),
                    json!({"apiVersion": V1, "kind": "VirtualSwitch",
                        "metadata": {"name": vs, "labels": {"app": "fw",
                            "p4fleet.dev/rollout-order": order.to_string()}},
                        "spec": spec}),
                )
                .await;
                members.push(Member {
                    vs,
                    kind,
                    switch,
                    device,
                });
            }
        }
        selector_set(client, ns).await;
        let vss: Api<VirtualSwitch> = Api::namespaced(client.clone(), ns);
        for m in &mut members {
            wait_object_ready(&vss, &m.vs, Duration::from_secs(120)).await;
            if m.kind == Kind::Fpga {
                let st = vss.get(&m.vs).await.unwrap().status.unwrap();
                m.device = u64::from(st.slot.expect("a placed slot"));
            }
        }
        let fleet = Mixed {
            ns: ns.to_string(),
            members,
            p4runtime: emu.p4runtime,
            bfrt,
            stats: emu.stats,
            board: board.p4runtime,
            board_stats: board.stats,
            programs: Api::namespaced(client.clone(), ns),
            sets: Api::namespaced(client.clone(), ns),
            cms,
            builds: Default::default(),
            _procs: (emu.proc, board.proc),
        };
        fleet.set_ready().await;
        fleet.record(1, "v1").await;
        fleet
    }

    /// Applies the sources of `build` (see [`source`]).
    pub async fn source(&self, build: &str) {
        source(&self.cms, build).await;
    }

    /// Waits until the program's update revision is `n`, and remembers its
    /// digest as `build`'s.
    pub async fn record(&self, n: i64, build: &str) {
        let digest = revision_digest(&self.programs, n).await;
        self.builds
            .lock()
            .unwrap()
            .push((build.to_string(), digest));
    }

    /// The build whose digest is `digest` (or whose cookie, the digest's
    /// first 8 bytes, is `cookie`), else what was found.
    fn build_of(&self, digest: Option<&str>, cookie: Option<u64>) -> String {
        let builds = self.builds.lock().unwrap();
        let found = builds.iter().find(|(_, d)| {
            Some(d.as_str()) == digest
                || cookie.is_some_and(|c| u64::from_str_radix(&d[..16], 16) == Ok(c))
        });
        match found {
            Some((b, _)) => b.clone(),
            None => format!("unknown (digest {digest:?}, cookie {cookie:?})"),
        }
    }

    /// The build each member's device runs, read from the device: the
    /// pipeline cookie (Bmv2, Dpdk: the emulator's stats), the program's
    /// binary as pushed (Tofino: BFRT GetForwardingPipelineConfig), the
    /// slot's program digest (Fpga: the slot service's GetSlotState).
    pub async fn builds(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in &self.members {
            out.push(match m.kind {
                Kind::Bmv2 | Kind::Dpdk => {
                    let cookie = device_stat(self.stats, m.device, "cookie");
                    self.build_of(None, cookie)
                }
                Kind::Tofino => {
                    let text = self
                        .tofino_binary(m.device)
                        .await
                        .map(|b| String::from_utf8_lossy(&b).into_owned());
                    match text
                        .as_deref()
                        .and_then(|t| t.strip_prefix(&tofino_bin("")))
                    {
                        Some(b) => b.to_string(),
                        None => format!("unknown (binary {text:?})"),
                    }
                }
                Kind::Fpga => {
                    let st = self.slot(m.device as u32).await;
                    self.build_of(Some(&st.program_digest), None)
                }
            });
        }
        out
    }

    /// How often each member's device was loaded, as the device counts it:
    /// SetForwardingPipelineConfig calls (Bmv2, Dpdk; Tofino, where a BIND
    /// counts too), the slot's last load (Fpga: when it entered its
    /// phase). Equal values: not loaded in between.
    pub async fn loads(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in &self.members {
            out.push(match m.kind {
                Kind::Bmv2 | Kind::Dpdk | Kind::Tofino => {
                    let n = device_stat(self.stats, m.device, "set_pipeline_rpcs");
                    format!("{} set_pipeline_rpcs {n:?}", m.vs)
                }
                Kind::Fpga => {
                    let st = self.slot(m.device as u32).await;
                    format!("{} slot {:?} since {:?}", m.vs, st.phase(), st.since)
                }
            });
        }
        out
    }

    /// The binary of program `firewall` (its first profile's) as Tofino
    /// device `device` reports it.
    async fn tofino_binary(&self, device: u64) -> Option<Vec<u8>> {
        let mut c = BfRuntimeClient::connect(format!("http://{}", self.bfrt))
            .await
            .ok()?;
        let r = c
            .get_forwarding_pipeline_config(GetForwardingPipelineConfigRequest {
                device_id: device as u32,
                client_id: 0,
            })
            .await
            .ok()?
            .into_inner();
        let p = r.config.into_iter().find(|c| c.p4_name == "firewall")?;
        Some(p.profiles.first()?.binary.clone())
    }

    async fn slot(&self, slot: u32) -> p4fleet_proto::fpga::SlotState {
        SlotClient::connect(&Target::p4runtime(self.board.to_string(), 1))
            .unwrap()
            .slot_state(slot)
            .await
            .unwrap_or_else(|e| panic!("slot {slot}: {e}"))
    }

    /// The firewall table's keys on `m`'s device, read by a client of its
    /// own that never wrote any (P4Runtime: a backup; BFRT: a client bound
    /// to the loaded program).
    pub async fn keys(&self, m: &Member) -> HashSet<EntryKey> {
        let schema = firewall::schema();
        let backup = Identity {
            election_id: 1,
            // Above the operator's BFRT client ids (16 bits), one per device.
            client_id: 0x1_0000 + m.device as u32,
        };
        let (dev, slot) = match m.kind {
            Kind::Bmv2 | Kind::Dpdk => (
                Device::connect(
                    Target::p4runtime(self.p4runtime.to_string(), m.device),
                    backup,
                ),
                0,
            ),
            Kind::Tofino => (
                Device::connect(Target::bfrt(self.bfrt.to_string(), m.device), backup),
                0,
            ),
            // Slot n of the board is device 1 + n.
            Kind::Fpga => (
                Device::connect(Target::p4runtime(self.board.to_string(), 1), backup),
                m.device as u32,
            ),
        };
        let dev = dev.expect("connect");
        if let Device::Bfrt(d) = &dev {
            let info = p4fleet_proto::p4info::parse_text(&p4info("")).unwrap();
            d.attach(0, &info, Some("firewall")).await.unwrap();
        }
        let raw = dev
            .read_table(slot, schema.id)
            .await
            .unwrap_or_else(|e| panic!("reading {}'s table: {e}", m.vs));
        raw.iter()
            .map(|te| Entry::from_proto(&schema, te).expect("readable entry").key)
            .collect()
    }

    /// Waits until the set is Ready with every entry applied on all twelve.
    pub async fn set_ready(&self) {
        let want = (ENTRIES * self.members.len()) as u64;
        crate::set_status_where(
            &self.sets,
            "fw",
            &format!("the set Ready with {want} applied"),
            Duration::from_secs(120),
            |st| {
                find_condition(&st.conditions, "Ready").is_some_and(|c| c.is_true())
                    && st.applied == want
            },
        )
        .await;
    }

    /// Deletes the fleet's Switches (cluster-scoped), then its namespace.
    pub async fn teardown(self, client: &Client, ns: crate::TestNamespace) {
        let switches = Api::<Switch>::all(client.clone());
        let names: HashSet<&str> = self.members.iter().map(|m| m.switch.as_str()).collect();
        for sw in names {
            let _ = switches.delete(sw, &Default::default()).await;
        }
        ns.delete(client).await.unwrap();
    }
}
