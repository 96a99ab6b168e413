//! The device config of a DPDK target (P4-DPDK behind infrap4d, Stratum's
//! TDI front end): what goes into P4Runtime's
//! `ForwardingPipelineConfig.p4_device_config`. Pure; no I/O.
//!
//! infrap4d does not take the raw `.spec` that p4c-dpdk writes. Its
//! SetForwardingPipelineConfig parses `p4_device_config` as a serialized
//! `stratum.hal.tdi.BfPipelineConfig` (the message Stratum's Tofino target
//! uses too) and writes the parts to disk for the SDE: the bfrt.json, and
//! per profile (pipeline) its context.json and its binary, which for DPDK
//! is the `.spec`. p4c-dpdk's `--tdi-builder-conf` names the parts
//! (`program-name`, `bfrt-config`, and one pipeline `pipe` with `context`,
//! `config` = the `.spec`, `pipe_scope` [0]); `tdi_pipeline_builder` packs
//! them. The wire layout (proto3):
//!
//! | field | number | wire type | what |
//! |---|---|---|---|
//! | `p4_name` | 1 | LEN (string) | the P4 program's name |
//! | `bfruntime_info` | 2 | LEN (bytes) | bfrt.json |
//! | `profiles` | 3 | LEN, repeated `Profile` | DPDK: exactly one |
//! | `packet_io_config` | 4 | LEN, optional | packet-I/O ports and queues |
//!
//! `Profile`: `profile_name` = 1 (string, `pipe`), `context` = 2 (bytes,
//! context.json), `binary` = 3 (bytes, the `.spec`), `pipe_scope` = 4
//! (repeated uint32, packed, `[0]`). docs/dpdk.md has the byte-level
//! example.
//!
//! The p4fleet emulator checks this structure with its own parser (it is
//! an independent oracle); this module is what p4fleet itself produces.

use prost::Message;

/// p4c-dpdk's pipeline (profile) name for PNA programs and what
/// `tdi_pipeline_builder` configs name it.
pub const DPDK_PROFILE_NAME: &str = "pipe";

/// `stratum.hal.tdi.BfPipelineConfig`.
#[derive(Clone, PartialEq, Message)]
pub struct BfPipelineConfig {
    /// The P4 program's name.
    #[prost(string, tag = "1")]
    pub p4_name: String,
    /// bfrt.json.
    #[prost(bytes = "vec", tag = "2")]
    pub bfruntime_info: Vec<u8>,
    /// One per pipeline; a DPDK target takes exactly one.
    #[prost(message, repeated, tag = "3")]
    pub profiles: Vec<Profile>,
    #[prost(message, optional, tag = "4")]
    pub packet_io_config: Option<PacketIoConfig>,
}

/// `stratum.hal.tdi.BfPipelineConfig.Profile`: one pipeline.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(string, tag = "1")]
    pub profile_name: String,
    /// context.json.
    #[prost(bytes = "vec", tag = "2")]
    pub context: Vec<u8>,
    /// The pipeline binary: for DPDK the `.spec`.
    #[prost(bytes = "vec", tag = "3")]
    pub binary: Vec<u8>,
    #[prost(uint32, repeated, tag = "4")]
    pub pipe_scope: Vec<u32>,
}

/// `stratum.hal.tdi.PacketIoConfig`.
#[derive(Clone, PartialEq, Message)]
pub struct PacketIoConfig {
    #[prost(uint32, repeated, tag = "1")]
    pub ports: Vec<u32>,
    #[prost(uint32, tag = "2")]
    pub nb_rxqs: u32,
    #[prost(uint32, tag = "3")]
    pub nb_txqs: u32,
}

/// Why bytes are not a DPDK pipeline config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PipelineConfigError {
    #[error("p4_device_config is not a serialized BfPipelineConfig: {0}")]
    Decode(String),
    #[error("p4_device_config: {0} is empty")]
    Missing(&'static str),
    #[error("p4_device_config: a DPDK target runs one profile (pipeline) per program, got {0}")]
    ProfileCount(usize),
    #[error("p4_device_config: profiles[0].binary (the .spec) is not UTF-8 text")]
    SpecNotText,
}

impl BfPipelineConfig {
    /// A DPDK program as infrap4d takes it: one profile named
    /// [`DPDK_PROFILE_NAME`] with pipe scope `[0]`.
    pub fn dpdk(
        p4_name: &str,
        bfrt_json: Vec<u8>,
        context_json: Vec<u8>,
        spec: Vec<u8>,
    ) -> BfPipelineConfig {
        BfPipelineConfig {
            p4_name: p4_name.to_string(),
            bfruntime_info: bfrt_json,
            profiles: vec![Profile {
                profile_name: DPDK_PROFILE_NAME.to_string(),
                context: context_json,
                binary: spec,
                pipe_scope: vec![0],
            }],
            packet_io_config: None,
        }
    }

    /// The bytes for `p4_device_config`.
    pub fn pack(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    /// Reads a DPDK `p4_device_config` back: a BfPipelineConfig with a
    /// name, a bfrt.json and one profile whose binary is a text `.spec`.
    pub fn unpack_dpdk(bytes: &[u8]) -> Result<BfPipelineConfig, PipelineConfigError> {
        let c = BfPipelineConfig::decode(bytes)
            .map_err(|e| PipelineConfigError::Decode(e.to_string()))?;
        if c.p4_name.is_empty() {
            return Err(PipelineConfigError::Missing("p4_name"));
        }
        if c.bfruntime_info.is_empty() {
            return Err(PipelineConfigError::Missing("bfruntime_info (bfrt.json)"));
        }
        if c.profiles.len() != 1 {
            return Err(PipelineConfigError::ProfileCount(c.profiles.len()));
        }
        let p = &c.profiles[0];
        if p.profile_name.is_empty() {
            return Err(PipelineConfigError::Missing("profiles[0].profile_name"));
        }
        if p.binary.is_empty() {
            return Err(PipelineConfigError::Missing(
                "profiles[0].binary (the .spec)",
            ));
        }
        if std::str::from_utf8(&p.binary).is_err() {
            return Err(PipelineConfigError::SpecNotText);
        }
        Ok(c)
    }

    /// The `.spec` of a config [`BfPipelineConfig::unpack_dpdk`] accepted.
    pub fn spec(&self) -> Option<&str> {
        std::str::from_utf8(&self.profiles.first()?.binary).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> BfPipelineConfig {
        BfPipelineConfig::dpdk(
            "l2crypt",
            br#"{"tables":[]}"#.to_vec(),
            br#"{"target":"DPDK"}"#.to_vec(),
            b"apply {\n\ttx m.port\n}\n".to_vec(),
        )
    }

    #[test]
    fn packs_the_documented_layout() {
        let b = example().pack();
        // p4_name: field 1, LEN, 7 bytes.
        assert_eq!(&b[..9], b"\x0a\x07l2crypt");
        // bfruntime_info: field 2, LEN.
        assert_eq!(b[9], 0x12);
        let bfrt_len = b[10] as usize;
        assert_eq!(&b[11..11 + bfrt_len], br#"{"tables":[]}"#);
        // One profile: field 3, LEN; inside, name "pipe" first and the
        // packed pipe scope [0] last.
        let at = 11 + bfrt_len;
        assert_eq!(b[at], 0x1a);
        let profile = &b[at + 2..];
        assert_eq!(profile.len(), b[at + 1] as usize);
        assert_eq!(&profile[..6], b"\x0a\x04pipe");
        assert_eq!(&profile[profile.len() - 3..], b"\x22\x01\x00");
    }

    #[test]
    fn round_trips_and_gives_the_spec_back() {
        let c = example();
        let back = BfPipelineConfig::unpack_dpdk(&c.pack()).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.spec(), Some("apply {\n\ttx m.port\n}\n"));
    }

    #[test]
    fn refuses_what_infrap4d_would_not_load() {
        let raw_spec = b"; a .spec\nstruct h_t {\n\tbit<8> a\n}\n";
        assert!(matches!(
            BfPipelineConfig::unpack_dpdk(raw_spec),
            Err(PipelineConfigError::Decode(_))
        ));
        let mut two = example();
        two.profiles.push(two.profiles[0].clone());
        assert_eq!(
            BfPipelineConfig::unpack_dpdk(&two.pack()),
            Err(PipelineConfigError::ProfileCount(2))
        );
        let mut unnamed = example();
        unnamed.p4_name.clear();
        assert_eq!(
            BfPipelineConfig::unpack_dpdk(&unnamed.pack()),
            Err(PipelineConfigError::Missing("p4_name"))
        );
        let mut binary = example();
        binary.profiles[0].binary = vec![0xff, 0xfe];
        assert_eq!(
            BfPipelineConfig::unpack_dpdk(&binary.pack()),
            Err(PipelineConfigError::SpecNotText)
        );
    }
}
