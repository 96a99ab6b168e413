//! Protobuf definitions used by p4fleet, with generated prost messages and
//! tonic clients/servers.
//!
//! The `.proto` files under this crate are written for p4fleet to be wire- and
//! text-format-compatible with P4Runtime v1.4 (`p4.v1`, `p4.config.v1`) and
//! `google.rpc`. Convenient aliases:
//!
//! - [`p4runtime`] = `p4.v1` (messages, `p4_runtime_client`, `p4_runtime_server`)
//! - [`p4info`] = `p4.config.v1` plus [`p4info::parse_text`] / [`p4info::to_text`]
//! - [`rpc`] = `google.rpc` (`Status`, `Code`)
//! - [`bfrt`] = `bfrt_proto` (BF Runtime for Tofino: messages, `bf_runtime_client`,
//!   `bf_runtime_server`)
//! - [`text`] generic protobuf text-format helpers for any message in this crate.

#![allow(clippy::doc_lazy_continuation, clippy::large_enum_variant)]

/// Generated code in its protobuf package layout (`p4::v1`, `p4::config::v1`).
pub mod p4 {
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        include!(concat!(env!("OUT_DIR"), "/p4.v1.rs"));
    }
    pub mod config {
        pub mod v1 {
            #![allow(missing_docs, clippy::all)]
            include!(concat!(env!("OUT_DIR"), "/p4.config.v1.rs"));
        }
    }
}

/// Generated code for `google.rpc`.
pub mod google {
    pub mod rpc {
        #![allow(missing_docs, clippy::all)]
        include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
    }
}

/// Generated code for `bfrt_proto` (BF Runtime, Tofino).
pub mod bfrt_proto {
    #![allow(missing_docs, clippy::all, deprecated)]
    include!(concat!(env!("OUT_DIR"), "/bfrt_proto.rs"));
}

/// `bfrt_proto`: BF Runtime messages and the tonic service `BfRuntime`
/// (`bf_runtime_client`, `bf_runtime_server`), wire-compatible with the
/// protocol Tofino switches serve.
pub mod bfrt {
    pub use crate::bfrt_proto::*;

    /// `type_url` of a `bfrt_proto.Error` packed in `google.protobuf.Any`.
    pub const ERROR_TYPE_URL: &str = "type.googleapis.com/bfrt_proto.Error";
}

/// Generated code for `p4fleet.bulk.v1` (p4fleet's columnar bulk write).
pub mod p4fleet {
    pub mod bulk {
        pub mod v1 {
            #![allow(missing_docs, clippy::all)]
            include!(concat!(env!("OUT_DIR"), "/p4fleet.bulk.v1.rs"));
        }
    }
    pub mod externs {
        pub mod v1 {
            #![allow(missing_docs, clippy::all)]
            include!(concat!(env!("OUT_DIR"), "/p4fleet.externs.v1.rs"));
        }
    }
    pub mod fpga {
        pub mod v1 {
            #![allow(missing_docs, clippy::all)]
            include!(concat!(env!("OUT_DIR"), "/p4fleet.fpga.v1.rs"));
        }
    }
}

/// `p4fleet.bulk.v1`: the columnar `BulkWrite` service (`bulk_write_client`,
/// `bulk_write_server`), see docs/bulk.md.
pub mod bulk {
    pub use crate::p4fleet::bulk::v1::*;
}

/// `p4fleet.externs.v1`: the `ExternRuntime` service (`extern_runtime_client`,
/// `extern_runtime_server`) for extern policies and data plane stats of
/// software targets, see docs/dpdk.md.
pub mod externs {
    pub use crate::p4fleet::externs::v1::*;

    /// `type_url` of a `p4fleet.externs.v1.PolicyError` packed in
    /// `google.protobuf.Any`.
    pub const POLICY_ERROR_TYPE_URL: &str = "type.googleapis.com/p4fleet.externs.v1.PolicyError";
}

/// `p4fleet.fpga.v1`: the FPGA slot service (`slot_service_client`,
/// `slot_service_server`), see docs/fpga.md.
pub mod fpga {
    pub use crate::p4fleet::fpga::v1::*;

    /// `type_url` of a [`SlotError`] packed in `google.protobuf.Any`.
    pub const SLOT_ERROR_TYPE_URL: &str = "type.googleapis.com/p4fleet.fpga.v1.SlotError";
}

/// Encoded `google.protobuf.FileDescriptorSet` of every .proto in this crate
/// (with imports), for reflection and text format.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/file_descriptor_set.bin"));

/// `p4.v1`: P4Runtime messages and the tonic service.
pub mod p4runtime {
    pub use crate::p4::v1::*;

    /// `type_url` of a `p4.v1.Error` packed in `google.protobuf.Any`.
    pub const ERROR_TYPE_URL: &str = "type.googleapis.com/p4.v1.Error";
}

/// `google.rpc`: `Status` and `Code`.
pub mod rpc {
    pub use crate::google::rpc::*;

    /// `type_url` of a `google.rpc.Status` packed in `google.protobuf.Any`.
    pub const STATUS_TYPE_URL: &str = "type.googleapis.com/google.rpc.Status";
}

/// `p4.config.v1`: P4Info and friends, plus text-format helpers.
pub mod p4info {
    pub use crate::p4::config::v1::*;
    pub use crate::text::TextFormatError;

    /// Full protobuf name of [`P4Info`].
    pub const P4INFO_NAME: &str = "p4.config.v1.P4Info";

    /// Parses a P4Info in protobuf text format (what `p4c --p4runtime-files
    /// x.p4info.txt` writes).
    pub fn parse_text(text: &str) -> Result<P4Info, TextFormatError> {
        crate::text::parse(P4INFO_NAME, text)
    }

    /// Prints a P4Info in (multi-line) protobuf text format.
    pub fn to_text(p4info: &P4Info) -> String {
        crate::text::to_text(P4INFO_NAME, p4info)
            .expect("P4Info is always in the embedded descriptor pool")
    }
}

/// Protobuf text format for any message defined in this crate, through
/// prost-reflect and [`FILE_DESCRIPTOR_SET`].
pub mod text {
    use std::sync::OnceLock;

    use prost_reflect::{DescriptorPool, DynamicMessage};

    /// Why text could not be turned into a message (or back).
    #[derive(Debug, thiserror::Error)]
    pub enum TextFormatError {
        /// The message name is not in the embedded descriptor pool.
        #[error("unknown message type {0}")]
        UnknownMessage(String),
        /// The text does not parse as the message.
        #[error("text format: {0}")]
        Parse(#[from] prost_reflect::text_format::ParseError),
        /// The parsed message does not decode as the Rust type.
        #[error("transcoding: {0}")]
        Decode(#[from] prost::DecodeError),
    }

    /// The descriptor pool of every message in this crate.
    pub fn pool() -> &'static DescriptorPool {
        static POOL: OnceLock<DescriptorPool> = OnceLock::new();
        POOL.get_or_init(|| {
            DescriptorPool::decode(crate::FILE_DESCRIPTOR_SET)
                .expect("embedded file descriptor set is valid")
        })
    }

    /// Parses `text` as the message `full_name` (e.g. `"p4.v1.TableEntry"`)
    /// into its prost type `M`.
    pub fn parse<M: prost::Message + Default>(
        full_name: &str,
        text: &str,
    ) -> Result<M, TextFormatError> {
        let desc = pool()
            .get_message_by_name(full_name)
            .ok_or_else(|| TextFormatError::UnknownMessage(full_name.to_string()))?;
        let dynamic = DynamicMessage::parse_text_format(desc, text)?;
        Ok(dynamic.transcode_to::<M>()?)
    }

    /// Prints `msg` (of protobuf type `full_name`) as multi-line text format.
    pub fn to_text<M: prost::Message>(full_name: &str, msg: &M) -> Result<String, TextFormatError> {
        let desc = pool()
            .get_message_by_name(full_name)
            .ok_or_else(|| TextFormatError::UnknownMessage(full_name.to_string()))?;
        let mut dynamic = DynamicMessage::new(desc);
        dynamic.transcode_from(msg)?;
        let opts = prost_reflect::text_format::FormatOptions::new()
            .pretty(true)
            .expand_any(true);
        Ok(dynamic.to_text_format_with_options(&opts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
pkg_info {
  arch: "v1model"
}
tables {
  preamble {
    id: 37375156
    name: "MyIngress.ipv4_lpm"
    alias: "ipv4_lpm"
  }
  match_fields {
    id: 1
    name: "hdr.ipv4.dstAddr"
    bitwidth: 32
    match_type: LPM
  }
  action_refs {
    id: 28792405
  }
  action_refs {
    id: 25652968
    annotations: "@defaultonly"
    scope: DEFAULT_ONLY
  }
  size: 1024
}
actions {
  preamble {
    id: 28792405
    name: "MyIngress.ipv4_forward"
    alias: "ipv4_forward"
  }
  params {
    id: 1
    name: "dstAddr"
    bitwidth: 48
  }
  params {
    id: 2
    name: "port"
    bitwidth: 9
  }
}
type_info {
}
"#;

    #[test]
    fn parses_p4info_text() {
        let info = p4info::parse_text(SAMPLE).unwrap();
        assert_eq!(info.pkg_info.as_ref().unwrap().arch, "v1model");
        let t = &info.tables[0];
        assert_eq!(t.preamble.as_ref().unwrap().id, 37375156);
        assert_eq!(t.size, 1024);
        assert_eq!(t.match_fields[0].bitwidth, 32);
        assert_eq!(
            t.match_fields[0].r#match,
            Some(p4info::match_field::Match::MatchType(
                p4info::match_field::MatchType::Lpm as i32
            ))
        );
        assert_eq!(
            t.action_refs[1].scope,
            p4info::action_ref::Scope::DefaultOnly as i32
        );
        assert_eq!(info.actions[0].params[1].bitwidth, 9);
    }

    #[test]
    fn text_round_trip() {
        let info = p4info::parse_text(SAMPLE).unwrap();
        let text = p4info::to_text(&info);
        assert!(text.contains("match_type: LPM"), "{text}");
        assert_eq!(p4info::parse_text(&text).unwrap(), info);
    }

    #[test]
    fn rejects_unknown_field() {
        let err = p4info::parse_text("tables { bogus: 1 }").unwrap_err();
        assert!(matches!(err, text::TextFormatError::Parse(_)), "{err}");
    }

    #[test]
    fn wire_numbers_match_p4runtime() {
        use prost::Message;
        // TableEntry.priority is field 4 (varint): tag byte 0x20.
        let te = p4runtime::TableEntry {
            priority: 1,
            ..Default::default()
        };
        assert_eq!(te.encode_to_vec(), vec![0x20, 0x01]);
        // FieldMatch.range is field 6 (length-delimited): tag 0x32.
        let fm = p4runtime::FieldMatch {
            field_id: 0,
            field_match_type: Some(p4runtime::field_match::FieldMatchType::Range(
                p4runtime::field_match::Range::default(),
            )),
        };
        assert_eq!(fm.encode_to_vec(), vec![0x32, 0x00]);
        // WriteRequest.role is field 6 (string): tag 0x32.
        let wr = p4runtime::WriteRequest {
            role: "r".into(),
            ..Default::default()
        };
        assert_eq!(wr.encode_to_vec(), vec![0x32, 0x01, b'r']);
    }

    #[test]
    fn wire_numbers_match_bfrt() {
        use prost::Message;
        // TableEntry.handle_id is field 7, is_default_entry field 4 (varints;
        // prost writes the oneof first).
        let te = bfrt::TableEntry {
            is_default_entry: true,
            value: Some(bfrt::table_entry::Value::HandleId(1)),
            ..Default::default()
        };
        assert_eq!(te.encode_to_vec(), vec![0x38, 0x01, 0x20, 0x01]);
        // KeyField.lpm is field 4 (length-delimited): tag 0x22.
        let kf = bfrt::KeyField {
            field_id: 0,
            match_type: Some(bfrt::key_field::MatchType::Lpm(
                bfrt::key_field::Lpm::default(),
            )),
        };
        assert_eq!(kf.encode_to_vec(), vec![0x22, 0x00]);
        // WriteRequest.p4_name is field 5 (string): tag 0x2a.
        let wr = bfrt::WriteRequest {
            p4_name: "f".into(),
            ..Default::default()
        };
        assert_eq!(wr.encode_to_vec(), vec![0x2a, 0x01, b'f']);
        // DataField.bool_val is field 8: tag 0x40.
        let df = bfrt::DataField {
            field_id: 0,
            value: Some(bfrt::data_field::Value::BoolVal(true)),
        };
        assert_eq!(df.encode_to_vec(), vec![0x40, 0x01]);
    }

    #[test]
    fn generic_text_for_runtime_messages() {
        let te: p4runtime::TableEntry = text::parse(
            "p4.v1.TableEntry",
            r#"table_id: 5 match { field_id: 1 exact { value: "\x0a\x00\x00\x01" } } priority: 0"#,
        )
        .unwrap();
        assert_eq!(te.table_id, 5);
        let s = text::to_text("p4.v1.TableEntry", &te).unwrap();
        assert!(s.contains("table_id: 5"));
    }
}
