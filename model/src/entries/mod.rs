//! Table entries: schema, value parsing, canonical entries and the compact
//! line format used in ConfigMaps. Pure logic, no I/O.
//!
//! - [`TableSchema`] describes one table (from P4Info via
//!   [`TableSchema::from_p4info`], see [`crate::p4info`]).
//! - [`parse_inline`] builds an [`Entry`] from a TableEntrySet's inline form;
//!   [`parse_text`] reads the line format (see docs/entries.md);
//!   [`format_entries`] and [`split_entries`] write it.
//! - [`bfrt`] parses bfrt.json and translates entries to and from BFRT.
//! - [`wire`] encodes P4Runtime (and, in [`bfrt`], BFRT) Write requests
//!   straight from [`WriteOp`]s that borrow entries.
//! - [`Entry`] / [`EntryKey`] are canonical (P4Runtime byte strings, fields
//!   sorted by id), so equal entries compare and hash equal whatever text
//!   they came from.

pub mod bfrt;
mod bytes;
pub mod convert;
mod default_action;
pub mod direct_meter;
mod entry;
mod error;
#[cfg(test)]
mod fuzz;
mod line;
pub mod profile;
mod proto;
mod schema;
mod value;
pub mod wire;

pub use bytes::ByteStr;
pub use default_action::{
    DefaultActionError, const_default_action, format_action, parse_default_action,
};
pub use entry::{
    ActionCall, ActionParam, Entry, EntryKey, FieldMatch, MatchValue, ParseOptions, parse_inline,
    parse_inline_with, set_idle_timeout, validate,
};
pub use error::{EntryError, ValueError};
pub use line::{
    CONFIGMAP_TEXT_LIMIT, DEFAULT_CONFIGMAP_KEY, LineParser, ParseReport, ProfileRef, Style,
    format_entries, format_entry, format_key, parse_text, parse_text_lossy, parse_text_lossy_with,
    split_entries,
};
#[cfg(test)]
pub(crate) use schema::fixtures;
pub(crate) use schema::name_matches;
pub use schema::{ActionSchema, ActionScope, FieldSchema, MatchKind, ParamSchema, TableSchema};
pub use value::{
    MAX_VALUE_BITS, QUOTE_LIMIT, excerpt, format_value, parse_match, parse_match_masking_host_bits,
    parse_number, parse_value, write_value,
};
pub use wire::{Atomicity, WriteOp};
