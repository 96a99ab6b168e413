//! The emulated board at run time: the state machine (`super::state`)
//! behind a lock, the one configuration port loads queue for, the slots'
//! P4Runtime devices, and the board as the slot service reports it.
//!
//! A load runs on a task of its own once verified, so it finishes (as
//! hardware would) even if the client goes away. It waits for the
//! configuration port (tokio's mutex is fair: arrival order), marks the
//! slot Loading, which removes the slot's P4Runtime pipeline, sleeps
//! `bits / port speed`, then checks what the configuration logic checks
//! (the sync word) and installs the P4Info that came with the bitstream as
//! the slot's pipeline (Loaded) or leaves the slot Failed.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use p4fleet_proto::fpga as pb;
use p4fleet_proto::p4runtime::{
    self as p4, set_forwarding_pipeline_config_request::Action as SetAction,
};

use super::bitstream;
use super::error::SlotError;
use super::isolation::{PortMap, Sid};
use super::slot_link::SlotLink;
use super::spec::{BoardSpec, FpgaConfig};
use super::state::{BoardState, Phase, Program};
use super::traffic::{FlowSpec, Target};
use crate::device::Device;

pub(crate) struct Board {
    pub spec: Arc<BoardSpec>,
    state: Mutex<BoardState>,
    /// The configuration port, held for the whole of a load.
    port: tokio::sync::Mutex<()>,
    /// P4Runtime device of each slot, by slot.
    devices: Vec<Arc<Device>>,
    /// An instant and the wall-clock time it was, for timestamps.
    epoch: (Instant, SystemTime),
}

/// How a load went.
pub(crate) struct LoadOutcome {
    /// Time Loading.
    pub took: Duration,
    /// Time waiting for the configuration port.
    pub queued: Duration,
    /// When it ended.
    pub at: SystemTime,
}

impl Board {
    /// A board whose slots are `devices` (in slot order, each made with
    /// [`super::slot_devices`]), with `config`'s traffic offered.
    pub fn new(config: &FpgaConfig, devices: Vec<Arc<Device>>) -> Board {
        assert_eq!(devices.len(), config.board.slots as usize);
        assert!(devices.iter().all(|d| d.fpga_slot.is_some()));
        let now = Instant::now();
        let spec = Arc::new(config.board.clone());
        let mut state = BoardState::new(spec.clone(), now);
        let flows = (0..spec.slots).map(|s| FlowSpec {
            target: Target::Slot(s),
            pps: config.traffic_pps,
            packet_bytes: config.packet_bytes,
        });
        state
            .set_flows(now, flows.collect())
            .expect("flows address existing slots");
        Board {
            spec,
            state: Mutex::new(state),
            port: tokio::sync::Mutex::new(()),
            devices,
            epoch: (now, SystemTime::now()),
        }
    }

    fn state(&self) -> MutexGuard<'_, BoardState> {
        self.state.lock().expect("board lock")
    }

    fn wall(&self, at: Instant) -> SystemTime {
        match at.checked_duration_since(self.epoch.0) {
            Some(d) => self.epoch.1 + d,
            None => self.epoch.1 - self.epoch.0.duration_since(at),
        }
    }

    fn link(&self, slot: u32) -> &SlotLink {
        self.devices[slot as usize]
            .fpga_slot
            .as_deref()
            .expect("slot devices have a link")
    }

    /// Shows `phase` on the slot's device; any phase but Loaded removes
    /// its pipeline (the tables went with the program).
    fn show(&self, slot: u32, phase: Phase) {
        if phase != Phase::Loaded {
            let mut p = self.devices[slot as usize]
                .p4runtime
                .pipeline
                .lock()
                .expect("pipeline lock");
            p.pipeline = None;
            p.saved = None;
        }
        self.link(slot).set(phase);
    }

    /// Installs `program`'s P4Info as the slot's P4Runtime pipeline, with
    /// the first 8 bytes of the bitstream's sha256 as its cookie.
    fn install(&self, slot: u32, program: &Program) -> Result<(), String> {
        let config = p4::ForwardingPipelineConfig {
            p4info: Some(program.p4info.clone()),
            p4_device_config: Vec::new(),
            cookie: Some(p4::forwarding_pipeline_config::Cookie {
                cookie: u64::from_be_bytes(program.sha256[..8].try_into().expect("8 bytes")),
            }),
        };
        self.devices[slot as usize]
            .p4runtime
            .pipeline
            .lock()
            .expect("pipeline lock")
            .set_pipeline(SetAction::VerifyAndCommit, Some(config))
            .map_err(|s| format!("p4info: {}", s.message()))
    }

    /// Sleeps until `bits` have gone through the port from `start`.
    async fn configure_for(&self, start: Instant, bits: u64) {
        let d = self.spec.config_port.load_time(bits);
        match start.checked_add(d) {
            Some(end) => tokio::time::sleep_until(end.into()).await,
            None => std::future::pending().await,
        }
    }

    /// Whether a program needing `need` may be loaded into `slot` now.
    pub fn check_load(
        &self,
        slot: u32,
        need: &super::resources::Resources,
    ) -> Result<(), SlotError> {
        self.state().check_load(slot, need)
    }

    /// Loads `program` (verified, its bitstream `bytes`) into `slot`.
    pub async fn load(
        self: &Arc<Self>,
        slot: u32,
        program: Program,
        bytes: Vec<u8>,
    ) -> Result<LoadOutcome, SlotError> {
        self.state().queue_load(slot, Arc::new(program))?;
        let board = self.clone();
        tokio::spawn(async move { board.run_load(slot, bytes).await })
            .await
            .unwrap_or_else(|e| {
                Err(SlotError::ConfigurationFailed {
                    slot: Some(slot),
                    why: format!("load task: {e}"),
                })
            })
    }

    async fn run_load(&self, slot: u32, bytes: Vec<u8>) -> Result<LoadOutcome, SlotError> {
        let asked = Instant::now();
        let _port = self.port.lock().await;
        let (program, start) = {
            let mut st = self.state();
            let now = Instant::now();
            let program = st.begin_load(slot, now).ok_or(SlotError::BadRequest {
                slot: Some(slot),
                msg: "the queued load was cancelled".into(),
            })?;
            self.show(slot, Phase::Loading);
            (program, now)
        };
        self.configure_for(start, program.size_bits).await;
        let mut st = self.state();
        let failure = if !bitstream::has_sync_word(&bytes) {
            Some("the configuration logic found no sync word 0xAA995566".to_string())
        } else {
            self.install(slot, &program).err()
        };
        let now = Instant::now();
        let took = st.finish_load(slot, now, failure.clone());
        self.show(
            slot,
            if failure.is_none() {
                Phase::Loaded
            } else {
                Phase::Failed
            },
        );
        drop(st);
        match failure {
            None => Ok(LoadOutcome {
                took,
                queued: start.saturating_duration_since(asked),
                at: self.wall(now),
            }),
            Some(why) => Err(SlotError::ConfigurationFailed {
                slot: Some(slot),
                why: format!("{why}; the slot is Failed"),
            }),
        }
    }

    /// Configures the whole board with a full bitstream (`bytes`, verified
    /// to be `full_bitstream_bits` long).
    pub async fn configure(self: &Arc<Self>, bytes: Vec<u8>) -> Result<LoadOutcome, SlotError> {
        self.state().queue_full()?;
        let board = self.clone();
        tokio::spawn(async move { board.run_full(bytes).await })
            .await
            .unwrap_or_else(|e| {
                Err(SlotError::ConfigurationFailed {
                    slot: None,
                    why: format!("configuration task: {e}"),
                })
            })
    }

    async fn run_full(&self, bytes: Vec<u8>) -> Result<LoadOutcome, SlotError> {
        let asked = Instant::now();
        let _port = self.port.lock().await;
        let start = {
            let mut st = self.state();
            let now = Instant::now();
            st.begin_full(now);
            for s in 0..self.spec.slots {
                self.show(s, Phase::Empty);
            }
            now
        };
        self.configure_for(start, self.spec.full_bitstream_bits)
            .await;
        let now = Instant::now();
        self.state().finish_full(now);
        let took = now.saturating_duration_since(start);
        if !bitstream::has_sync_word(&bytes) {
            // A real board would be left without a design; the emulated
            // one keeps its static region so it stays usable.
            return Err(SlotError::ConfigurationFailed {
                slot: None,
                why: "the configuration logic found no sync word 0xAA995566".into(),
            });
        }
        Ok(LoadOutcome {
            took,
            queued: start.saturating_duration_since(asked),
            at: self.wall(now),
        })
    }

    /// Empties `slot`.
    pub fn unload(&self, slot: u32) -> Result<(), SlotError> {
        let mut st = self.state();
        st.unload(slot, Instant::now())?;
        self.show(slot, Phase::Empty);
        Ok(())
    }

    pub fn set_isolation(&self, slot: u32, sid: Option<Sid>) -> Result<(), SlotError> {
        self.state().set_isolation(slot, sid, Instant::now())
    }

    pub fn set_port_map(&self, slot: u32, mappings: &[pb::PortMapping]) -> Result<(), SlotError> {
        let map = PortMap::from_proto(slot, mappings, &self.spec)?;
        self.state().set_port_map(slot, map, Instant::now())
    }

    pub fn set_flows(&self, flows: Vec<FlowSpec>) -> Result<(), SlotError> {
        self.state().set_flows(Instant::now(), flows)
    }

    /// Sets the rate of the flow addressed to `slot` (added if missing).
    pub fn set_slot_rate(&self, slot: u32, pps: u64, packet_bytes: u32) -> Result<(), SlotError> {
        let mut st = self.state();
        st.slot(slot)?;
        let mut flows: Vec<FlowSpec> = st
            .flows()
            .into_iter()
            .filter(|f| f.target != Target::Slot(slot))
            .collect();
        flows.push(FlowSpec {
            target: Target::Slot(slot),
            pps,
            packet_bytes,
        });
        st.set_flows(Instant::now(), flows)
    }

    pub fn flows(&self) -> Vec<FlowSpec> {
        self.state().flows()
    }

    pub fn info(&self) -> pb::BoardInfo {
        let st = self.state();
        let (used, free) = (st.used(), st.free());
        let spec = &self.spec;
        pb::BoardInfo {
            board: spec.board.clone(),
            part: spec.part.clone(),
            resources: spec
                .resources
                .iter()
                .map(|r| pb::Resource {
                    name: r.name.clone(),
                    capacity: r.capacity,
                    static_region: r.static_region,
                    static_share: if r.capacity == 0 {
                        0.0
                    } else {
                        r.static_region as f64 / r.capacity as f64
                    },
                    used: used.get(&r.name).copied().unwrap_or(0),
                    free: free.get(&r.name).copied().unwrap_or(0),
                })
                .collect(),
            config_port: Some(pb::ConfigPort {
                name: spec.config_port.name.clone(),
                nominal_bits_per_second: spec.config_port.nominal_bps,
                bits_per_second: spec.config_port.bps,
            }),
            slot_count: spec.slots,
            base_device_id: spec.base_device_id,
            ports: spec
                .ports
                .iter()
                .map(|p| pb::EthernetPort {
                    id: p.id,
                    name: p.name.clone(),
                    speed_bits_per_second: p.speed_bps,
                })
                .collect(),
            full_bitstream_bits: spec.full_bitstream_bits,
            state: if st.configuring || st.full_queued {
                pb::BoardState::Configuring
            } else {
                pb::BoardState::Ready
            } as i32,
        }
    }

    /// `slots`, or every slot when empty.
    fn pick(&self, st: &BoardState, slots: &[u32]) -> Result<Vec<u32>, SlotError> {
        if slots.is_empty() {
            return Ok((0..self.spec.slots).collect());
        }
        for &s in slots {
            st.slot(s)?;
        }
        Ok(slots.to_vec())
    }

    pub fn slot_states(&self, slots: &[u32]) -> Result<Vec<pb::SlotState>, SlotError> {
        let st = self.state();
        let picked = self.pick(&st, slots)?;
        Ok(picked
            .into_iter()
            .map(|i| {
                let s = &st.slots[i as usize];
                let program = s.program.as_deref();
                let phase = match s.phase {
                    Phase::Empty => pb::SlotPhase::Empty,
                    Phase::Loading => pb::SlotPhase::Loading,
                    Phase::Loaded => pb::SlotPhase::Loaded,
                    Phase::Failed => pb::SlotPhase::Failed,
                };
                pb::SlotState {
                    slot: i,
                    device_id: self.spec.device_id(i),
                    phase: phase as i32,
                    since: Some(self.wall(s.since).into()),
                    program_digest: program.map(|p| p.digest.clone()).unwrap_or_default(),
                    sha256: program.map(|p| p.sha256.to_vec()).unwrap_or_default(),
                    size_bits: program.map_or(0, |p| p.size_bits),
                    last_load_duration: s.last_load.and_then(|d| d.try_into().ok()),
                    resources_used: s.held().into_iter().collect(),
                    isolation: s.sid.map(Sid::to_proto),
                    port_map: s.port_map.to_proto(),
                    load_queued: s.queued.is_some(),
                    failure: s.failure.clone().unwrap_or_default(),
                }
            })
            .collect())
    }

    pub fn counters(&self, slots: &[u32]) -> Result<pb::GetSlotCountersResponse, SlotError> {
        self.counters_and_offered(slots).map(|(c, _)| c)
    }

    /// The counters of `slots` (every slot when empty) and the packets
    /// offered by every flow, at one instant.
    pub fn counters_and_offered(
        &self,
        slots: &[u32],
    ) -> Result<(pb::GetSlotCountersResponse, u64), SlotError> {
        let now = Instant::now();
        let mut st = self.state();
        let picked = self.pick(&st, slots)?;
        let c = st.counters(now);
        let response = pb::GetSlotCountersResponse {
            slots: picked
                .into_iter()
                .map(|i| {
                    let s = &c.slots[i as usize];
                    pb::SlotCounters {
                        slot: i,
                        rx_packets: s.rx_packets,
                        rx_bytes: s.rx_bytes,
                        tx_packets: s.tx_packets,
                        tx_bytes: s.tx_bytes,
                        dropped_packets: s.dropped_packets,
                        dropped_bytes: s.dropped_bytes,
                    }
                })
                .collect(),
            unmatched_packets: c.unmatched_packets,
            unmatched_bytes: c.unmatched_bytes,
            at: Some(self.wall(now).into()),
        };
        Ok((response, c.offered_packets))
    }
}
