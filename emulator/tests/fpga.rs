//! The emulated FPGA board through real gRPC clients: the slot service
//! (p4fleet.fpga.v1) and each slot's P4Runtime device, on free loopback
//! ports. Timing is asserted as lower bounds only; most tests use a fast
//! configuration port so they stay quick.

mod common;

use std::time::{Duration, Instant};

use common::entity::{exact, lpm};
use p4fleet_emulator::fpga::p4vbox::{FIREWALL, L2SWITCH, Program, ROUTER};
use p4fleet_emulator::fpga::{BoardSpec, FpgaConfig, bitstream, upload};
use p4fleet_emulator::{Emulator, EmulatorConfig, RunningEmulator};
use p4fleet_proto::fpga::{self as pb, slot_service_client::SlotServiceClient};
use p4fleet_proto::p4info::{self, P4Info};
use p4fleet_proto::p4runtime::{self as p4, entity::Entity, p4_runtime_client::P4RuntimeClient};
use p4fleet_proto::rpc;
use prost::Message;
use tonic::transport::Channel;
use tonic::{Code, Status};

const L2: Program = L2SWITCH;

/// Test-side lookups in a program's P4Info.
trait P4InfoIds {
    fn p4info(&self) -> P4Info;
    fn table(&self, name: &str) -> u32;
    fn action(&self, name: &str) -> u32;
}

impl P4InfoIds for Program {
    fn p4info(&self) -> P4Info {
        p4info::parse_text(self.p4info).unwrap()
    }

    fn table(&self, name: &str) -> u32 {
        id_named(self.p4info().tables.iter().map(|t| &t.preamble), name)
    }

    fn action(&self, name: &str) -> u32 {
        id_named(self.p4info().actions.iter().map(|a| &a.preamble), name)
    }
}

/// The id in the preamble named `name` (every one must have a preamble).
fn id_named<'a>(preambles: impl Iterator<Item = &'a Option<p4info::Preamble>>, name: &str) -> u32 {
    let mut all = preambles.map(|p| p.as_ref().unwrap());
    all.find(|p| p.name == name).unwrap().id
}

/// A number after `key: ` on a line of `yaml` (comments after it ignored).
fn yaml_number(yaml: &str, key: &str) -> u64 {
    yaml.lines()
        .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(": "))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{key} in {yaml}"))
}

#[test]
fn example_fpga_artifacts_match_table_one_and_the_generator() {
    for p in [&L2, &ROUTER, &FIREWALL] {
        let path = format!(
            "{}/../examples/{}/fpga.yaml",
            env!("CARGO_MANIFEST_DIR"),
            p.name
        );
        let yaml = std::fs::read_to_string(&path).unwrap();
        assert_eq!(yaml_number(&yaml, "luts"), p.luts, "{path}");
        assert_eq!(yaml_number(&yaml, "ffs"), p.ffs, "{path}");
        let bits = yaml_number(&yaml, "bits");
        assert_eq!(bits, 2_800_000, "{path}");
        let sha = bitstream::hex(&bitstream::sha256(
            &bitstream::synthetic(bits, p.name).unwrap(),
        ));
        assert!(
            yaml.contains(&format!("--bits {bits} --seed {} ", p.name)),
            "{path}"
        );
        assert!(yaml.contains(&format!("(sha256 {sha})")), "{path}: {sha}");
    }
}

/// The SUME preset with its configuration port at `bps`.
fn sume_at(bps: u64) -> FpgaConfig {
    let mut b = BoardSpec::netfpga_sume();
    b.config_port.bps = bps;
    FpgaConfig::new(b)
}

/// So fast that loads of a few kilobits take no measurable time.
const FAST: u64 = 1_000_000_000_000;

struct Board {
    emu: RunningEmulator,
    slots: SlotServiceClient<Channel>,
    p4rt: P4RuntimeClient<Channel>,
}

async fn start(fpga: FpgaConfig) -> Board {
    let emu = Emulator::start(EmulatorConfig {
        device_ids: Vec::new(),
        stats_addr: Some("127.0.0.1:0".parse().unwrap()),
        fpga: Some(fpga),
        ..Default::default()
    })
    .await
    .unwrap();
    let channel = common::channel(&emu).await;
    Board {
        slots: SlotServiceClient::new(channel.clone()),
        p4rt: P4RuntimeClient::new(channel),
        emu,
    }
}

fn header(slot: u32, p: &Program, bytes: &[u8]) -> pb::LoadSlotHeader {
    pb::LoadSlotHeader {
        slot,
        program_digest: format!("sha256:{}", bitstream::hex(&bitstream::sha256(bytes))),
        size_bits: 8 * bytes.len() as u64,
        sha256: bitstream::sha256(bytes).to_vec(),
        resources: p.resources(),
        p4info: Some(p.p4info()),
    }
}

impl Board {
    async fn upload(
        &mut self,
        header: pb::LoadSlotHeader,
        bytes: &[u8],
    ) -> Result<pb::LoadSlotResponse, Status> {
        let messages = upload::load_slot_messages(header, bytes);
        self.slots
            .load_slot(tokio_stream::iter(messages))
            .await
            .map(|r| r.into_inner())
    }

    /// Loads `p` into `slot` with a synthetic bitstream of `bits`.
    async fn load(
        &mut self,
        slot: u32,
        p: &Program,
        bits: u64,
    ) -> Result<pb::LoadSlotResponse, Status> {
        let bytes = bitstream::synthetic(bits, p.name).unwrap();
        self.upload(header(slot, p, &bytes), &bytes).await
    }

    /// Loads `programs` into slots 0.., then refuses `refused` in the next
    /// slot with RESOURCE_EXHAUSTED and `message`.
    async fn pack(&mut self, programs: &[&Program], refused: &Program, message: &str) -> Status {
        for (slot, p) in programs.iter().enumerate() {
            self.load(slot as u32, p, 1024).await.unwrap();
        }
        let next = programs.len() as u32;
        let s = assert_refused(
            self.load(next, refused, 1024).await,
            Code::ResourceExhausted,
            pb::Reason::InsufficientResources,
        );
        assert_eq!(s.message(), message);
        s
    }

    async fn unload_all(&mut self, slots: u32) {
        for slot in 0..slots {
            self.unload(slot).await;
        }
    }

    async fn unload(&mut self, slot: u32) {
        self.slots
            .unload_slot(pb::UnloadSlotRequest { slot })
            .await
            .unwrap();
    }

    async fn info(&mut self) -> pb::BoardInfo {
        self.slots
            .get_board_info(pb::GetBoardInfoRequest {})
            .await
            .unwrap()
            .into_inner()
    }

    async fn free(&mut self, resource: &str) -> u64 {
        let info = self.info().await;
        info.resources
            .iter()
            .find(|r| r.name == resource)
            .unwrap()
            .free
    }

    async fn state(&mut self, slot: u32) -> pb::SlotState {
        let mut r = self
            .slots
            .get_slot_state(pb::GetSlotStateRequest { slots: vec![slot] })
            .await
            .unwrap()
            .into_inner();
        r.slots.remove(0)
    }

    async fn counters(&mut self) -> Vec<pb::SlotCounters> {
        self.slots
            .get_slot_counters(pb::GetSlotCountersRequest { slots: vec![] })
            .await
            .unwrap()
            .into_inner()
            .slots
    }

    async fn isolate(&mut self, slot: u32, vlan: u32, mac: Option<[u8; 6]>) -> Result<(), Status> {
        self.slots
            .set_isolation(pb::SetIsolationRequest {
                slot,
                isolation: Some(pb::Isolation {
                    vlan_id: vlan,
                    dst_mac: mac.map(|m| m.to_vec()).unwrap_or_default(),
                }),
            })
            .await
            .map(|_| ())
    }

    async fn port_map(&mut self, slot: u32, pairs: &[(u32, u32)]) -> Result<(), Status> {
        let mappings = pairs
            .iter()
            .map(|&(p, v)| pb::PortMapping {
                physical_port: p,
                virtual_port: v,
            })
            .collect();
        self.slots
            .set_port_map(pb::SetPortMapRequest { slot, mappings })
            .await
            .map(|_| ())
    }
}

/// The typed detail of a refused slot-service call.
fn detail(s: &Status) -> pb::SlotError {
    let st = rpc::Status::decode(s.details()).expect("status details");
    assert_eq!(st.details[0].type_url, pb::SLOT_ERROR_TYPE_URL);
    pb::SlotError::decode(st.details[0].value.as_slice()).unwrap()
}

/// Asserts that `s`'s message says `part`.
fn assert_says(s: &Status, part: &str) {
    assert!(s.message().contains(part), "{}", s.message());
}

fn assert_refused(
    r: Result<impl std::fmt::Debug, Status>,
    code: Code,
    reason: pb::Reason,
) -> Status {
    let s = r.expect_err("refused");
    assert_eq!(s.code(), code, "{}", s.message());
    assert_eq!(detail(&s).reason(), reason, "{}", s.message());
    s
}

fn entry(
    table: u32,
    matches: Vec<p4::FieldMatch>,
    action: u32,
    params: &[&[u8]],
) -> p4::TableEntry {
    p4::TableEntry {
        table_id: table,
        r#match: matches,
        action: common::entity::action(action, params),
        ..Default::default()
    }
}

/// l2switch `dmac`: 02:00:00:00:00:i -> forward(port i % 4 + 1).
fn dmac_entry(i: u8) -> p4::TableEntry {
    entry(
        L2.table("MyIngress.dmac"),
        vec![exact(1, &[2, 0, 0, 0, 0, i])],
        L2.action("MyIngress.forward"),
        &[&[i % 4 + 1]],
    )
}

/// firewall: 10.0.0.i -> 10.0.1.i allow(port 1).
fn firewall_entry(i: u8) -> p4::TableEntry {
    entry(
        FIREWALL.table("MyIngress.firewall"),
        vec![exact(1, &[10, 0, 0, i]), exact(2, &[10, 0, 1, i])],
        FIREWALL.action("MyIngress.allow"),
        &[&[1]],
    )
}

/// Inserts `entries` on `device`.
async fn write(
    c: &mut P4RuntimeClient<Channel>,
    device: u64,
    entries: &[p4::TableEntry],
) -> Result<(), Status> {
    let inserts = entries
        .iter()
        .map(|e| (p4::update::Type::Insert, Entity::TableEntry(e.clone())))
        .collect();
    common::write(c, device, inserts).await
}

/// Every table entry on `device`, sorted.
async fn read_all(
    c: &mut P4RuntimeClient<Channel>,
    device: u64,
) -> Result<Vec<p4::TableEntry>, Status> {
    let all = common::read(c, device, Entity::TableEntry(p4::TableEntry::default())).await?;
    let entries = all.into_iter().map(|e| match e {
        Entity::TableEntry(t) => t,
        other => panic!("not a table entry: {other:?}"),
    });
    Ok(sorted(entries.collect()))
}

async fn pipeline(
    c: &mut P4RuntimeClient<Channel>,
    device: u64,
) -> Result<p4::ForwardingPipelineConfig, Status> {
    let r = c
        .get_forwarding_pipeline_config(p4::GetForwardingPipelineConfigRequest {
            device_id: device,
            response_type: 0,
        })
        .await?;
    Ok(r.into_inner().config.unwrap_or_default())
}

fn sorted(mut v: Vec<p4::TableEntry>) -> Vec<p4::TableEntry> {
    v.sort_by_key(|e| e.encode_to_vec());
    v
}

#[tokio::test]
async fn board_info_matches_the_sume_preset() {
    let mut b = start(FpgaConfig::new(BoardSpec::netfpga_sume())).await;
    let info = b.info().await;
    assert_eq!(info.board, "netfpga-sume");
    assert_eq!(info.part, "xc7vx690tffg1761-3");
    let r = |name: &str| {
        info.resources
            .iter()
            .find(|r| r.name == name)
            .unwrap()
            .clone()
    };
    let luts = r("luts");
    assert_eq!(
        (luts.capacity, luts.static_region, luts.used, luts.free),
        (433_200, 52_699, 0, 380_501)
    );
    assert!(
        (luts.static_share - 0.122).abs() < 0.0005,
        "{}",
        luts.static_share
    );
    let ffs = r("ffs");
    assert_eq!(
        (ffs.capacity, ffs.static_region, ffs.free),
        (866_400, 76_241, 790_159)
    );
    assert_eq!(r("brams").capacity, 1_470);
    let port = info.config_port.clone().unwrap();
    assert_eq!(port.name, "jtag");
    assert_eq!(port.nominal_bits_per_second, 66_000_000);
    assert_eq!(port.bits_per_second, 3_888_889);
    assert_eq!((info.slot_count, info.base_device_id), (16, 1));
    assert_eq!(info.full_bitstream_bits, 229_878_496);
    assert_eq!(info.ports.len(), 4);
    assert!(
        info.ports
            .iter()
            .all(|p| p.speed_bits_per_second == 10_000_000_000)
    );
    assert_eq!(info.state(), pb::BoardState::Ready);

    // Slot s is P4Runtime device 1 + s; nothing beyond.
    let states = b
        .slots
        .get_slot_state(pb::GetSlotStateRequest { slots: vec![] })
        .await
        .unwrap()
        .into_inner()
        .slots;
    assert_eq!(states.len(), 16);
    assert!(states.iter().all(|s| s.phase() == pb::SlotPhase::Empty));
    assert_eq!(states[15].device_id, 16);
    for (device, code) in [(1, Code::Ok), (16, Code::Ok), (17, Code::NotFound)] {
        let r = pipeline(&mut b.p4rt, device).await;
        assert_eq!(
            r.err().map_or(Code::Ok, |e| e.code()),
            code,
            "device {device}"
        );
    }
    let s = assert_refused(
        b.slots
            .get_slot_state(pb::GetSlotStateRequest { slots: vec![16] })
            .await,
        Code::NotFound,
        pb::Reason::UnknownSlot,
    );
    assert_eq!(s.message(), "no slot 16 (the board has slots 0 to 15)");
}

#[tokio::test]
async fn p4vbox_packing_with_table_one_figures() {
    let mut b = start(sume_at(FAST)).await;
    // Thirteen L2 switches fit; the fourteenth does not.
    let s = b
        .pack(
            &[&L2; 13],
            &L2,
            "slot 13: insufficient luts (need 28096, free 15253)",
        )
        .await;
    let d = detail(&s);
    assert_eq!(d.slot, Some(13));
    assert_eq!(
        d.shortfalls,
        vec![pb::Shortfall {
            resource: "luts".into(),
            need: 28_096,
            free: 15_253
        }]
    );
    assert_eq!(b.free("luts").await, 15_253);
    assert_eq!(b.state(13).await.phase(), pb::SlotPhase::Empty);
    // Unloading frees what they held.
    b.unload_all(13).await;
    assert_eq!(b.free("luts").await, 380_501);
    assert_eq!(b.free("ffs").await, 790_159);

    // Six routers, then the seventh is refused; eight firewalls, then the ninth.
    let alike = [
        (
            &ROUTER,
            6,
            "slot 6: insufficient luts (need 57704, free 34277)",
        ),
        (
            &FIREWALL,
            8,
            "slot 8: insufficient luts (need 45683, free 15037)",
        ),
    ];
    for (p, fit, refusal) in alike {
        b.pack(&vec![p; fit as usize], p, refusal).await;
        b.unload_all(fit).await;
    }

    // A mix: 4 L2 + 2 routers + 3 firewalls = 364,841 LUTs.
    let mix = [
        &L2, &L2, &L2, &L2, &ROUTER, &ROUTER, &FIREWALL, &FIREWALL, &FIREWALL,
    ];
    b.pack(
        &mix,
        &ROUTER,
        "slot 9: insufficient luts (need 57704, free 15660)",
    )
    .await;
    assert_eq!(b.free("luts").await, 15_660);
    // Swapping a firewall for a router in place counts the firewall's share
    // as free: 15,660 + 45,683 >= 57,704.
    b.load(8, &ROUTER, 1024).await.unwrap();
    assert_eq!(b.free("luts").await, 15_660 + 45_683 - 57_704);
    let st = b.state(8).await;
    assert_eq!(st.resources_used["luts"], 57_704);
    assert_eq!(st.resources_used["ffs"], 84_149);
}

#[tokio::test]
async fn uploads_are_verified_before_the_slot_is_touched() {
    let mut b = start(sume_at(FAST)).await;
    let first = b.load(0, &L2, 4096).await.unwrap();
    let bytes = bitstream::synthetic(4096, "router").unwrap();
    let good = header(0, &ROUTER, &bytes);

    let mut h = good.clone();
    h.sha256[0] ^= 1;
    let s = assert_refused(
        b.upload(h, &bytes).await,
        Code::InvalidArgument,
        pb::Reason::ChecksumMismatch,
    );
    assert!(
        s.message()
            .starts_with("slot 0: sha256 of the bitstream is "),
        "{}",
        s.message()
    );

    let mut h = good.clone();
    h.size_bits += 32;
    let s = assert_refused(
        b.upload(h, &bytes).await,
        Code::InvalidArgument,
        pb::Reason::SizeMismatch,
    );
    assert_eq!(
        s.message(),
        "slot 0: received 4096 bits, the header declared 4128"
    );
    let mut h = good.clone();
    h.size_bits -= 32;
    assert_refused(
        b.upload(h, &bytes).await,
        Code::InvalidArgument,
        pb::Reason::SizeMismatch,
    );
    let mut h = good.clone();
    h.size_bits = 229_878_496 + 8;
    assert_refused(
        b.upload(h, &bytes).await,
        Code::InvalidArgument,
        pb::Reason::SizeMismatch,
    );

    let mut h = good.clone();
    h.p4info = None;
    assert_refused(
        b.upload(h, &bytes).await,
        Code::InvalidArgument,
        pb::Reason::BadP4info,
    );
    let mut h = good.clone();
    h.resources.insert("dsps".into(), 10);
    let s = assert_refused(
        b.upload(h, &bytes).await,
        Code::InvalidArgument,
        pb::Reason::UnknownResource,
    );
    assert_says(&s, "\"dsps\"");
    let mut h = good.clone();
    h.slot = 16;
    assert_refused(
        b.upload(h, &bytes).await,
        Code::NotFound,
        pb::Reason::UnknownSlot,
    );
    let mut h = good.clone();
    h.program_digest.clear();
    assert_refused(
        b.upload(h, &bytes).await,
        Code::InvalidArgument,
        pb::Reason::BadRequest,
    );

    // A stream without a header first.
    let chunk_first = vec![pb::LoadSlotRequest {
        part: Some(pb::load_slot_request::Part::Chunk(bytes.clone())),
    }];
    assert_refused(
        b.slots.load_slot(tokio_stream::iter(chunk_first)).await,
        Code::InvalidArgument,
        pb::Reason::BadRequest,
    );

    // None of it touched slot 0.
    let st = b.state(0).await;
    assert_eq!(st.phase(), pb::SlotPhase::Loaded);
    assert_eq!(st.program_digest, first.program_digest);
    assert_eq!(st.resources_used["luts"], 28_096);
    b.upload(good, &bytes).await.unwrap();
    assert_eq!(b.state(0).await.resources_used["luts"], 57_704);
}

#[tokio::test]
async fn a_load_takes_bits_over_the_jtag_speed() {
    // The SUME's JTAG: 3,888,889 bits/s (P4VBox's 2.8 Mb in 0.72 s).
    let mut b = start(FpgaConfig::new(BoardSpec::netfpga_sume())).await;
    let bits = 38_912;
    let bps = b.info().await.config_port.unwrap().bits_per_second;
    let model = Duration::from_nanos(bits * 1_000_000_000 / bps);
    assert!(model > Duration::from_millis(10), "{model:?}");
    let t = Instant::now();
    let r = b.load(3, &L2, bits).await.unwrap();
    let wall = t.elapsed();
    let took: Duration = r.load_duration.unwrap().try_into().unwrap();
    assert!(took >= model, "{took:?} < {model:?}");
    assert!(wall >= model, "{wall:?} < {model:?}");
    assert_eq!((r.slot, r.device_id), (3, 4));
    let st = b.state(3).await;
    assert_eq!(st.phase(), pb::SlotPhase::Loaded);
    assert_eq!(st.size_bits, bits);
    let last: Duration = st.last_load_duration.unwrap().try_into().unwrap();
    assert_eq!(last, took);
}

#[tokio::test]
async fn loads_on_one_configuration_port_are_serialized() {
    // 16,384 bits at 100 kb/s: 164 ms each.
    let mut b = start(sume_at(100_000)).await;
    let model = Duration::from_nanos(16_384 * 10_000);
    let t = Instant::now();
    let mut other = b.slots.clone();
    let second = tokio::spawn(async move {
        let bytes = bitstream::synthetic(16_384, "router").unwrap();
        let messages = upload::load_slot_messages(header(1, &ROUTER, &bytes), &bytes);
        other
            .load_slot(tokio_stream::iter(messages))
            .await
            .unwrap()
            .into_inner()
    });
    let first = b.load(0, &L2, 16_384).await.unwrap();
    let second = second.await.unwrap();
    let wall = t.elapsed();
    assert!(wall >= 2 * model, "{wall:?}");
    // The two Loading intervals do not overlap.
    let interval = |r: &pb::LoadSlotResponse| {
        let end = std::time::SystemTime::try_from(r.loaded_at.unwrap()).unwrap();
        let took: Duration = r.load_duration.unwrap().try_into().unwrap();
        assert!(took >= model, "{took:?}");
        (end - took, end)
    };
    let (a, b2) = (interval(&first), interval(&second));
    assert!(a.1 <= b2.0 || b2.1 <= a.0, "{a:?} overlaps {b2:?}");
    assert_eq!(b.state(0).await.phase(), pb::SlotPhase::Loaded);
    assert_eq!(b.state(1).await.phase(), pb::SlotPhase::Loaded);
}

#[tokio::test]
async fn a_hot_swap_keeps_other_slots_entries_and_traffic() {
    // 32,768 bits at 100 kb/s: 328 ms of Loading; 100,000 packets/s per slot.
    let mut cfg = sume_at(100_000);
    cfg.traffic_pps = 100_000;
    let mut b = start(cfg).await;
    let model = Duration::from_nanos(32_768 * 10_000);
    for (slot, p) in [(0, &L2), (1, &ROUTER), (2, &FIREWALL)] {
        b.load(slot, p, 1024).await.unwrap();
        b.isolate(slot, 10 * (slot + 1), None).await.unwrap();
    }
    let mut c = b.p4rt.clone();
    let _p = primaries(&mut c, &[1, 2, 3]).await;
    let l2: Vec<_> = (1..=20).map(dmac_entry).collect();
    let fw: Vec<_> = (1..=30).map(firewall_entry).collect();
    write(&mut c, 1, &l2).await.unwrap();
    write(&mut c, 3, &fw).await.unwrap();
    let route = entry(
        ROUTER.table("MyIngress.ipv4_lpm"),
        vec![lpm(&[10, 0, 0, 0], 8)],
        ROUTER.action("MyIngress.set_nhop"),
        &[&[2, 0, 0, 0, 0, 9], &[3]],
    );
    write(&mut c, 2, std::slice::from_ref(&route))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;

    let before = b.counters().await;
    assert!(
        before[..3]
            .iter()
            .all(|s| s.rx_packets > 0 && s.rx_packets == s.tx_packets)
    );

    // Swap slot 1 from router to firewall.
    let mut swapper = b.slots.clone();
    let swap = tokio::spawn(async move {
        let bytes = bitstream::synthetic(32_768, "firewall-2").unwrap();
        let messages = upload::load_slot_messages(header(1, &FIREWALL, &bytes), &bytes);
        swapper.load_slot(tokio_stream::iter(messages)).await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.state(1).await.phase() != pb::SlotPhase::Loading {
        assert!(Instant::now() < deadline, "slot 1 never showed Loading");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let during = b.counters().await;
    // The swapped slot's tables are gone and not writable while it loads.
    let e = write(&mut c, 2, &[firewall_entry(1)]).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(
        e.message().contains("FPGA slot 1, which is Loading"),
        "{}",
        e.message()
    );
    assert_eq!(
        read_all(&mut c, 2).await.unwrap_err().code(),
        Code::FailedPrecondition
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let later = b.counters().await;
    let r = swap.await.unwrap().unwrap().into_inner();
    let after = b.counters().await;
    let took: Duration = r.load_duration.unwrap().try_into().unwrap();
    assert!(took >= model, "{took:?}");

    for s in [0, 2] {
        let rx = [&before, &during, &later, &after].map(|c| c[s].rx_packets);
        assert!(
            rx[0] < rx[1] && rx[1] < rx[2] && rx[2] < rx[3],
            "slot {s} kept forwarding: {rx:?}"
        );
        assert_eq!(after[s].dropped_packets, 0, "slot {s} lost nothing");
        assert_eq!(after[s].rx_packets, after[s].tx_packets);
    }
    // The swapped slot dropped what arrived while it was Loading: at least
    // rate x model time.
    let dropped = after[1].dropped_packets - before[1].dropped_packets;
    assert!(
        dropped >= 100_000 * model.as_millis() as u64 / 1000 - 1,
        "{dropped}"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        b.counters().await[1].rx_packets > after[1].rx_packets,
        "slot 1 forwards again"
    );

    // Other slots' entries are intact; slot 1 runs the firewall, empty.
    assert_eq!(read_all(&mut c, 1).await.unwrap(), sorted(l2));
    assert_eq!(read_all(&mut c, 3).await.unwrap(), sorted(fw));
    assert!(read_all(&mut c, 2).await.unwrap().is_empty());
    let cfg = pipeline(&mut c, 2).await.unwrap();
    assert_eq!(cfg.p4info.unwrap(), FIREWALL.p4info());
    write(&mut c, 2, &[firewall_entry(7)]).await.unwrap();
    assert_eq!(read_all(&mut c, 2).await.unwrap(), vec![firewall_entry(7)]);
    let st = b.state(1).await;
    assert_eq!(st.program_digest, r.program_digest);
    assert_eq!(st.resources_used["luts"], 45_683);
    assert_eq!(
        st.isolation.unwrap().vlan_id,
        20,
        "isolation survives a swap"
    );
}

/// Primaries for several devices.
async fn primaries(c: &mut P4RuntimeClient<Channel>, devices: &[u64]) -> Vec<common::Primary> {
    let mut out = Vec::new();
    for &d in devices {
        out.push(common::arbitrate(c, d).await);
    }
    out
}

#[tokio::test]
async fn isolation_clashes_name_the_other_slot() {
    let mut b = start(sume_at(FAST)).await;
    const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
    b.isolate(0, 10, Some(A)).await.unwrap();
    let s = assert_refused(
        b.isolate(1, 10, Some(A)).await,
        Code::AlreadyExists,
        pb::Reason::SidInUse,
    );
    assert_eq!(detail(&s).other_slot, Some(0));
    assert_eq!(
        s.message(),
        "slot 1: Sid (VLAN 10, dst 02:00:00:00:00:0a) is already slot 0's"
    );
    // Same VLAN, other MAC, but both on every port (no port map): refused.
    let s = assert_refused(
        b.isolate(1, 10, Some(B)).await,
        Code::AlreadyExists,
        pb::Reason::VlanPortShared,
    );
    let d = detail(&s);
    assert_eq!((d.other_slot, d.ports), (Some(0), vec![0, 1, 2, 3]));
    assert_says(&s, "slot 0 is in VLAN 10 too");
    // Disjoint ports: fine.
    b.port_map(0, &[(0, 0), (1, 1)]).await.unwrap();
    b.port_map(1, &[(2, 0), (3, 1)]).await.unwrap();
    b.isolate(1, 10, Some(B)).await.unwrap();
    // A port map that would share port 1 with slot 0: refused.
    let s = assert_refused(
        b.port_map(1, &[(1, 0)]).await,
        Code::AlreadyExists,
        pb::Reason::VlanPortShared,
    );
    assert_eq!(detail(&s).ports, vec![1]);
    // Other VLANs may use any port.
    b.isolate(2, 20, None).await.unwrap();
    // Bad input.
    assert_refused(
        b.port_map(2, &[(7, 0)]).await,
        Code::InvalidArgument,
        pb::Reason::UnknownPort,
    );
    assert_refused(
        b.port_map(2, &[(0, 5), (1, 5)]).await,
        Code::InvalidArgument,
        pb::Reason::BadPortMap,
    );
    assert_refused(
        b.isolate(3, 4095, None).await,
        Code::InvalidArgument,
        pb::Reason::BadIsolation,
    );
    assert_refused(
        b.isolate(16, 30, None).await,
        Code::NotFound,
        pb::Reason::UnknownSlot,
    );

    let st = b.state(1).await;
    assert_eq!(st.isolation.unwrap().dst_mac, B.to_vec());
    assert_eq!(st.port_map.len(), 2);
    // Clearing slot 0's isolation frees its Sid.
    b.slots
        .set_isolation(pb::SetIsolationRequest {
            slot: 0,
            isolation: None,
        })
        .await
        .unwrap();
    // Slot 3 may take (VLAN 10, A) once it stays off slot 1's ports.
    let s = assert_refused(
        b.isolate(3, 10, Some(A)).await,
        Code::AlreadyExists,
        pb::Reason::VlanPortShared,
    );
    let d = detail(&s);
    assert_eq!((d.other_slot, d.ports), (Some(1), vec![2, 3]));
    b.port_map(3, &[(0, 0)]).await.unwrap();
    b.isolate(3, 10, Some(A)).await.unwrap();
}

#[tokio::test]
async fn slot_devices_take_entries_only_while_loaded() {
    let mut b = start(sume_at(FAST)).await;
    let mut c = b.p4rt.clone();
    // Slot 4 is device 5.
    let _p = common::arbitrate(&mut c, 5).await;
    let e = write(&mut c, 5, &[dmac_entry(1)]).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(
        e.message()
            .starts_with("device 5 is FPGA slot 4, which is Empty"),
        "{}",
        e.message()
    );
    // The pipeline comes with the bitstream, never through P4Runtime.
    let config = p4::ForwardingPipelineConfig {
        p4info: Some(L2.p4info()),
        ..Default::default()
    };
    let e = common::set_pipeline(&mut c, 5, config).await.unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(e.message().contains("LoadSlot"), "{}", e.message());

    let bytes = bitstream::synthetic(2048, "l2switch").unwrap();
    b.upload(header(4, &L2, &bytes), &bytes).await.unwrap();
    let cfg = pipeline(&mut c, 5).await.unwrap();
    assert_eq!(cfg.p4info.unwrap(), L2.p4info());
    let sha = bitstream::sha256(&bytes);
    assert_eq!(
        cfg.cookie.unwrap().cookie,
        u64::from_be_bytes(sha[..8].try_into().unwrap())
    );
    let entries: Vec<_> = (1..=5).map(dmac_entry).collect();
    write(&mut c, 5, &entries).await.unwrap();
    assert_eq!(read_all(&mut c, 5).await.unwrap(), sorted(entries));
    // Slot 5 (device 6) is another device, still empty.
    let _p6 = common::arbitrate(&mut c, 6).await;
    assert_eq!(
        write(&mut c, 6, &[dmac_entry(1)]).await.unwrap_err().code(),
        Code::FailedPrecondition
    );

    b.unload(4).await;
    let e = write(&mut c, 5, &[dmac_entry(9)]).await.unwrap_err();
    assert!(e.message().contains("which is Empty"), "{}", e.message());
    let st = b.state(4).await;
    assert_eq!(st.phase(), pb::SlotPhase::Empty);
    assert!(st.program_digest.is_empty() && st.resources_used.values().all(|&n| n == 0));
}

#[tokio::test]
async fn a_failed_load_leaves_the_slot_failed_and_frees_its_resources() {
    let mut b = start(sume_at(FAST)).await;
    b.load(2, &ROUTER, 1024).await.unwrap();
    // Checksummed and sized right, but no sync word: the configuration
    // logic rejects it after the transfer.
    let junk = vec![0x5a; 512];
    let s = assert_refused(
        b.upload(header(2, &FIREWALL, &junk), &junk).await,
        Code::Aborted,
        pb::Reason::ConfigurationFailed,
    );
    assert_says(&s, "no sync word");
    let st = b.state(2).await;
    assert_eq!(st.phase(), pb::SlotPhase::Failed);
    assert!(st.failure.contains("sync word"), "{}", st.failure);
    assert_eq!(st.resources_used.get("luts").copied().unwrap_or(0), 0);
    assert_eq!(b.free("luts").await, 380_501);
    let mut c = b.p4rt.clone();
    let _p = common::arbitrate(&mut c, 3).await;
    let e = write(&mut c, 3, &[firewall_entry(1)]).await.unwrap_err();
    assert!(e.message().contains("which is Failed"), "{}", e.message());
    b.load(2, &FIREWALL, 1024).await.unwrap();
    write(&mut c, 3, &[firewall_entry(1)]).await.unwrap();
}

#[tokio::test]
async fn full_configuration_empties_every_slot() {
    // A 65,536-bit "full" bitstream at 1 Mb/s: 66 ms.
    let mut board = BoardSpec::netfpga_sume();
    board.full_bitstream_bits = 65_536;
    board.config_port.bps = 1_000_000;
    let mut b = start(FpgaConfig::new(board)).await;
    let model = Duration::from_micros(65_536);
    b.load(0, &L2, 1024).await.unwrap();
    b.load(1, &ROUTER, 1024).await.unwrap();
    b.isolate(0, 10, None).await.unwrap();

    let configure = |bits: u64| {
        let bytes = bitstream::synthetic(bits, "full").unwrap();
        let h = pb::ConfigureBoardHeader {
            size_bits: bits,
            sha256: bitstream::sha256(&bytes).to_vec(),
        };
        upload::configure_board_messages(h, &bytes)
    };
    let s = assert_refused(
        b.slots
            .configure_board(tokio_stream::iter(configure(32_768)))
            .await,
        Code::InvalidArgument,
        pb::Reason::SizeMismatch,
    );
    assert_says(&s, "a full bitstream for xc7vx690tffg1761-3 is 65536 bits");

    let mut other = b.slots.clone();
    let full = tokio::spawn(async move {
        other
            .configure_board(tokio_stream::iter(configure(65_536)))
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.info().await.state() != pb::BoardState::Configuring {
        assert!(
            Instant::now() < deadline,
            "the board never showed Configuring"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_refused(
        b.load(2, &L2, 1024).await,
        Code::Unavailable,
        pb::Reason::BoardConfiguring,
    );
    let r = full.await.unwrap().unwrap().into_inner();
    let took: Duration = r.load_duration.unwrap().try_into().unwrap();
    assert!(took >= model, "{took:?}");

    let info = b.info().await;
    assert_eq!(info.state(), pb::BoardState::Ready);
    assert!(info.resources.iter().all(|r| r.used == 0));
    for slot in [0, 1] {
        let st = b.state(slot).await;
        assert_eq!(st.phase(), pb::SlotPhase::Empty);
        assert!(st.isolation.is_none());
    }
    let mut c = b.p4rt.clone();
    let _p = common::arbitrate(&mut c, 1).await;
    assert_eq!(
        write(&mut c, 1, &[dmac_entry(1)]).await.unwrap_err().code(),
        Code::FailedPrecondition
    );
    b.load(0, &L2, 1024).await.unwrap();
}

#[tokio::test]
async fn slot_counters_and_traffic_on_the_side_channel() {
    let mut b = start(sume_at(FAST)).await;
    let side = common::SideChannel {
        addr: b.emu.stats_addr().unwrap(),
        content_type: "application/json",
    };
    b.load(0, &L2, 1024).await.unwrap();
    b.isolate(0, 10, None).await.unwrap();
    let (code, flows) = side
        .call("PUT", "/fpga/slots/0/traffic", r#"{"pps": 50000}"#)
        .await;
    assert_eq!(code, 200, "{flows}");
    assert_eq!(flows["flows"][0]["slot"], 0);
    // Frames for VLAN 99 (no slot) and for slot 5 (Empty, VLAN 60).
    b.isolate(5, 60, None).await.unwrap();
    let body = r#"{"flows": [{"slot": 0, "pps": 50000}, {"vlan": 99, "pps": 1000, "packet_bytes": 100}, {"vlan": 60, "port": 2, "pps": 2000}]}"#;
    let (code, _) = side.call("PUT", "/fpga/traffic", body).await;
    assert_eq!(code, 200);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (code, r) = side.call("GET", "/fpga", "").await;
    assert_eq!(code, 200);
    let slot = |i: usize| &r["slots"][i];
    assert_eq!(slot(0)["phase"], "Loaded");
    assert_eq!(slot(0)["isolation"]["vlan"], 10);
    let rx0 = slot(0)["counters"]["rx_packets"].as_u64().unwrap();
    let dropped5 = slot(5)["counters"]["dropped_packets"].as_u64().unwrap();
    let unmatched = r["unmatched_packets"].as_u64().unwrap();
    assert!(rx0 > 0 && dropped5 > 0 && unmatched > 0, "{r}");
    assert_eq!(r["unmatched_bytes"].as_u64().unwrap(), 100 * unmatched);
    assert_eq!(
        r["offered_packets"].as_u64().unwrap(),
        rx0 + dropped5 + unmatched
    );
    assert_eq!(r["resources"][0]["free"], 380_501 - 28_096);
    // The same counters over gRPC, later: never lower.
    let c = b.counters().await;
    assert!(c[0].rx_packets >= rx0 && c[5].dropped_packets >= dropped5);
    // Bad requests.
    let (code, e) = side
        .call("PUT", "/fpga/slots/16/traffic", r#"{"pps": 1}"#)
        .await;
    assert_eq!(code, 404, "{e}");
    let (code, _) = side
        .call("PUT", "/fpga/traffic", r#"{"flows": [{"pps": 1}]}"#)
        .await;
    assert_eq!(code, 400);
    let (code, _) = side
        .call(
            "PUT",
            "/fpga/traffic",
            r#"{"flows": [{"vlan": 5, "port": 9, "pps": 1}]}"#,
        )
        .await;
    assert_eq!(code, 400);
}
