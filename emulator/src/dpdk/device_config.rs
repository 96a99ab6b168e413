//! The device config a DPDK target accepts in SetForwardingPipelineConfig,
//! checked the way infrap4d reads it: `p4_device_config` is a serialized
//! `stratum.hal.tdi.BfPipelineConfig` (p4 name, bfrt.json, one profile
//! with its context.json and the pipeline `.spec` as its binary), never
//! the raw `.spec`. docs/dpdk.md has the byte layout.
//!
//! The emulator's own reader (over `crate::wire`), written from the layout,
//! not the model crate's packer: a bug in the packer must not be mirrored
//! here (emulator/README.md, the independent-oracle rule). Pure.

use crate::bfrt::schema::BfrtSchema;
use crate::p4runtime::schema::Schema;
use crate::wire::{Reader, Value, WireError};

/// Most pipes a profile may be scoped to (the SDE's `MAX_P4_PIPELINES`).
const MAX_PIPES: usize = 4;

/// The parts of an accepted config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DpdkDeviceConfig {
    pub p4_name: String,
    pub profile_name: String,
    /// The pipeline `.spec` (profiles[0].binary).
    pub spec: String,
    pub pipe_scope: Vec<u32>,
}

/// Why a `p4_device_config` is not what a DPDK target loads. Each names
/// the field (`profiles[0].context`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceConfigError {
    #[error(
        "p4_device_config is empty: a DPDK target takes a serialized BfPipelineConfig \
         (p4_name, bfrt.json, one profile with context.json and the .spec; docs/dpdk.md)"
    )]
    Empty,
    #[error(
        "p4_device_config is text (it starts with {start:?}), not a serialized \
         BfPipelineConfig: a DPDK target takes the .spec packed as profiles[0].binary, \
         next to the p4 name, bfrt.json and context.json (docs/dpdk.md)"
    )]
    Text { start: String },
    #[error("p4_device_config is not a serialized BfPipelineConfig: {field}: {reason}")]
    Malformed { field: String, reason: String },
    #[error("p4_device_config: {0} is missing or empty")]
    Missing(&'static str),
    #[error(
        "p4_device_config: profiles: a DPDK target runs one profile (pipeline) per program, got {0}"
    )]
    ProfileCount(usize),
    #[error("p4_device_config: {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

fn malformed(field: &str, e: WireError) -> DeviceConfigError {
    DeviceConfigError::Malformed {
        field: field.to_string(),
        reason: e.to_string(),
    }
}

fn len_field<'a>(field: &str, v: Value<'a>) -> Result<&'a [u8], DeviceConfigError> {
    v.bytes().map_err(|e| malformed(field, e))
}

fn string_field(field: &str, v: Value<'_>) -> Result<String, DeviceConfigError> {
    let b = len_field(field, v)?;
    String::from_utf8(b.to_vec()).map_err(|_| DeviceConfigError::Malformed {
        field: field.to_string(),
        reason: "not UTF-8".into(),
    })
}

/// Printable text (what a `.spec` or any other text file is), as opposed
/// to a serialized message: every BfPipelineConfig with a bfrt.json has
/// the tag byte 0x12, and any length of 128 or more is a multi-byte
/// varint, which is never valid UTF-8.
fn is_text(b: &[u8]) -> bool {
    std::str::from_utf8(b).is_ok_and(|s| {
        s.chars()
            .all(|c| !c.is_control() || matches!(c, '\n' | '\r' | '\t'))
    })
}

#[derive(Default)]
struct RawProfile<'a> {
    name: String,
    context: &'a [u8],
    binary: &'a [u8],
    scope: Vec<u32>,
}

fn parse_profile<'a>(buf: &'a [u8]) -> Result<RawProfile<'a>, DeviceConfigError> {
    let mut p = RawProfile::default();
    let mut r = Reader::new(buf);
    while let Some((f, v)) = r.next_field().map_err(|e| malformed("profiles[0]", e))? {
        match f {
            1 => p.name = string_field("profiles[0].profile_name", v)?,
            2 => p.context = len_field("profiles[0].context", v)?,
            3 => p.binary = len_field("profiles[0].binary", v)?,
            // Repeated uint32: packed (proto3's default) or one per field.
            4 => match v {
                Value::Varint(x) => p.scope.push(x as u32),
                Value::Len(packed) => {
                    let mut pr = Reader::new(packed);
                    while !pr.is_empty() {
                        let x = pr
                            .varint_value()
                            .map_err(|e| malformed("profiles[0].pipe_scope", e))?;
                        p.scope.push(x as u32);
                    }
                }
                _ => {
                    return Err(malformed(
                        "profiles[0].pipe_scope",
                        WireError("expected a varint or packed varints"),
                    ));
                }
            },
            // Unknown fields are skipped, as any protobuf reader does.
            _ => {}
        }
    }
    Ok(p)
}

/// Checks `bytes` is a DPDK pipeline config for the P4Info behind
/// `schema`: the BfPipelineConfig structure, a bfrt.json naming every
/// P4Info table, one profile whose context.json is a DPDK context of this
/// program and whose binary is text. Loading the `.spec` itself is the
/// data plane's job (`dataplane::spec`), with its own typed errors.
pub(crate) fn check(bytes: &[u8], schema: &Schema) -> Result<DpdkDeviceConfig, DeviceConfigError> {
    if bytes.is_empty() {
        return Err(DeviceConfigError::Empty);
    }
    if is_text(bytes) {
        let start: String = std::str::from_utf8(bytes)
            .unwrap_or_default()
            .chars()
            .take(40)
            .collect();
        return Err(DeviceConfigError::Text { start });
    }
    let (mut p4_name, mut bfrt, mut profiles) = (String::new(), &[][..], Vec::new());
    let mut r = Reader::new(bytes);
    while let Some((f, v)) = r
        .next_field()
        .map_err(|e| malformed("BfPipelineConfig", e))?
    {
        match f {
            1 => p4_name = string_field("p4_name", v)?,
            2 => bfrt = len_field("bfruntime_info", v)?,
            3 => profiles.push(len_field("profiles", v)?),
            4 => {
                len_field("packet_io_config", v)?;
            }
            _ => {}
        }
    }
    if p4_name.is_empty() {
        return Err(DeviceConfigError::Missing("p4_name"));
    }
    if bfrt.is_empty() {
        return Err(DeviceConfigError::Missing("bfruntime_info (bfrt.json)"));
    }
    check_bfrt(bfrt, schema)?;
    if profiles.len() != 1 {
        return Err(DeviceConfigError::ProfileCount(profiles.len()));
    }
    let p = parse_profile(profiles[0])?;
    if p.name.is_empty() {
        return Err(DeviceConfigError::Missing("profiles[0].profile_name"));
    }
    if p.context.is_empty() {
        return Err(DeviceConfigError::Missing(
            "profiles[0].context (context.json)",
        ));
    }
    check_context(p.context, &p4_name)?;
    if p.binary.is_empty() {
        return Err(DeviceConfigError::Missing("profiles[0].binary (the .spec)"));
    }
    let spec = String::from_utf8(p.binary.to_vec()).map_err(|_| DeviceConfigError::Invalid {
        field: "profiles[0].binary",
        reason: "a DPDK pipeline binary is the .spec text, and this is not UTF-8".into(),
    })?;
    if p.scope.len() > MAX_PIPES || p.scope.iter().any(|s| *s as usize >= MAX_PIPES) {
        return Err(DeviceConfigError::Invalid {
            field: "profiles[0].pipe_scope",
            reason: format!(
                "{:?}: at most {MAX_PIPES} pipes, each below {MAX_PIPES}",
                p.scope
            ),
        });
    }
    Ok(DpdkDeviceConfig {
        p4_name,
        profile_name: p.name,
        spec,
        pipe_scope: p.scope,
    })
}

/// The bfrt.json parses, and names every P4Info table (as the target maps
/// P4Runtime ids onto BF-RT tables by name; P4-DPDK prefixes the pipeline,
/// `pipe.MyIngress.t`).
fn check_bfrt(bfrt: &[u8], schema: &Schema) -> Result<(), DeviceConfigError> {
    let bf = BfrtSchema::from_json(bfrt).map_err(|e| DeviceConfigError::Invalid {
        field: "bfruntime_info",
        reason: e.to_string(),
    })?;
    let mut names: Vec<&str> = schema.tables.values().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    for name in names {
        let found = bf.tables.values().any(|t| {
            t.name == name
                || t.name
                    .strip_suffix(name)
                    .is_some_and(|prefix| prefix.ends_with('.'))
        });
        if !found {
            return Err(DeviceConfigError::Invalid {
                field: "bfruntime_info",
                reason: format!("bfrt.json has no table for P4Info table {name}"),
            });
        }
    }
    Ok(())
}

/// context.json is a JSON object; when it says which target and program
/// it was compiled for (p4c-dpdk writes `target` and `program_name`), they
/// are DPDK and this program.
fn check_context(context: &[u8], p4_name: &str) -> Result<(), DeviceConfigError> {
    let invalid = |reason: String| DeviceConfigError::Invalid {
        field: "profiles[0].context",
        reason,
    };
    let v: serde_json::Value = serde_json::from_slice(context)
        .map_err(|e| invalid(format!("context.json is not JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| invalid("context.json is not a JSON object".into()))?;
    if let Some(t) = obj.get("target")
        && !t.as_str().is_some_and(|t| t.eq_ignore_ascii_case("dpdk"))
    {
        return Err(invalid(format!(
            "context.json was compiled for target {t}, not DPDK"
        )));
    }
    if let Some(n) = obj.get("program_name").and_then(|n| n.as_str())
        && n != p4_name
    {
        return Err(invalid(format!(
            "context.json is for program {n:?}, the config for {p4_name:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_model::pipeline_config::BfPipelineConfig;

    use crate::testing::l2crypt::{P4INFO, SPEC};
    const BFRT: &[u8] = include_bytes!("../../../examples/l2crypt/bfrt.json");
    const CONTEXT: &[u8] = include_bytes!("../../../examples/l2crypt/context.json");

    fn schema() -> Schema {
        Schema::from_p4info(&p4fleet_proto::p4info::parse_text(P4INFO).unwrap()).unwrap()
    }

    fn packed() -> BfPipelineConfig {
        BfPipelineConfig::dpdk(
            "l2crypt",
            BFRT.to_vec(),
            CONTEXT.to_vec(),
            SPEC.as_bytes().to_vec(),
        )
    }

    #[test]
    fn accepts_the_packed_example() {
        let c = check(&packed().pack(), &schema()).unwrap();
        assert_eq!(c.p4_name, "l2crypt");
        assert_eq!(c.profile_name, "pipe");
        assert_eq!(c.spec, SPEC);
        assert_eq!(c.pipe_scope, [0]);
    }

    #[test]
    fn the_raw_spec_is_refused_as_text() {
        let e = check(SPEC.as_bytes(), &schema()).unwrap_err();
        assert!(
            matches!(&e, DeviceConfigError::Text { start } if start.starts_with("; p4fleet")),
            "{e}"
        );
        assert!(e.to_string().contains("profiles[0].binary"), "{e}");
        assert_eq!(check(&[], &schema()), Err(DeviceConfigError::Empty));
    }

    #[test]
    fn unpacked_pipe_scope_and_unknown_fields_are_read_like_protobuf() {
        let mut b = packed().pack();
        // An unknown top-level field (number 9, varint) is skipped.
        b.extend_from_slice(&[0x48, 0x01]);
        assert!(check(&b, &schema()).is_ok());
        // pipe_scope as unpacked varints (field 4, varint): 0, then 1.
        let mut profile = Vec::new();
        crate::wire::put_bytes(&mut profile, 1, b"pipe");
        crate::wire::put_bytes(&mut profile, 2, CONTEXT);
        crate::wire::put_bytes(&mut profile, 3, SPEC.as_bytes());
        profile.extend_from_slice(&[0x20, 0x00, 0x20, 0x01]);
        let mut cfg = Vec::new();
        crate::wire::put_bytes(&mut cfg, 1, b"l2crypt");
        crate::wire::put_bytes(&mut cfg, 2, BFRT);
        crate::wire::put_bytes(&mut cfg, 3, &profile);
        assert_eq!(check(&cfg, &schema()).unwrap().pipe_scope, [0, 1]);
    }

    #[test]
    fn each_structural_error_names_its_field() {
        let s = schema();
        let refused = |c: BfPipelineConfig| check(&c.pack(), &s).unwrap_err();

        let mut c = packed();
        c.p4_name.clear();
        assert_eq!(refused(c), DeviceConfigError::Missing("p4_name"));

        let mut c = packed();
        c.bfruntime_info.clear();
        assert_eq!(
            refused(c),
            DeviceConfigError::Missing("bfruntime_info (bfrt.json)")
        );

        let mut c = packed();
        c.bfruntime_info = br#"{"tables": []}"#.to_vec();
        let e = refused(c);
        assert!(
            e.to_string()
                .contains("no table for P4Info table MyIngress.dmac"),
            "{e}"
        );

        let mut c = packed();
        c.profiles.push(c.profiles[0].clone());
        assert_eq!(refused(c), DeviceConfigError::ProfileCount(2));
        let mut c = packed();
        c.profiles.clear();
        assert_eq!(refused(c), DeviceConfigError::ProfileCount(0));

        let mut c = packed();
        c.profiles[0].context = br#"{"target": "tofino"}"#.to_vec();
        let e = refused(c);
        assert!(e.to_string().contains("profiles[0].context"), "{e}");
        assert!(e.to_string().contains("tofino"), "{e}");

        let mut c = packed();
        c.profiles[0].context = br#"{"program_name": "router"}"#.to_vec();
        assert!(refused(c).to_string().contains("\"router\""));

        let mut c = packed();
        c.profiles[0].binary.clear();
        assert_eq!(
            refused(c),
            DeviceConfigError::Missing("profiles[0].binary (the .spec)")
        );

        let mut c = packed();
        c.profiles[0].binary = vec![0xff, 0x00, 0xfe];
        assert!(refused(c).to_string().contains("profiles[0].binary"));

        let mut c = packed();
        c.profiles[0].pipe_scope = vec![0, 7];
        assert!(refused(c).to_string().contains("pipe_scope"));
    }

    #[test]
    fn wrong_wire_types_and_truncation_are_malformed() {
        // p4_name (field 1) as a varint.
        let e = check(&[0x08, 0x01, 0x12, 0x00], &schema()).unwrap_err();
        assert!(
            matches!(&e, DeviceConfigError::Malformed { field, .. } if field == "p4_name"),
            "{e}"
        );
        // A truncated copy of a good config.
        let b = packed().pack();
        let e = check(&b[..b.len() - 10], &schema()).unwrap_err();
        assert!(matches!(e, DeviceConfigError::Malformed { .. }), "{e}");
    }
}
