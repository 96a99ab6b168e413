//! Errors of the entry model. One enum for the whole boundary; value
//! problems are a nested reason so messages name the field first.

use thiserror::Error;

/// Why a single value (match value, mask, bound or parameter) is rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ValueError {
    #[error("empty value")]
    Empty,
    #[error(
        "cannot parse {0:?}: expected a decimal, 0x hex or 0b binary number, an IPv4, IPv6 or MAC address"
    )]
    Syntax(String),
    #[error("{value} needs {needed} bits, the field is {width} bits wide")]
    TooWide {
        value: String,
        needed: u32,
        width: u32,
    },
    #[error("number {value:?} of {len} characters is wider than any field ({max_bits} bits)")]
    LiteralTooLong {
        value: String,
        len: usize,
        max_bits: u32,
    },
    #[error("prefix length {len} is longer than the field's {width} bits")]
    PrefixTooLong { len: u32, width: u32 },
    #[error("bad prefix length {0:?}")]
    BadPrefixLength(String),
    #[error("{value}/{len} has bits set after the prefix (host bits must be zero)")]
    HostBitsSet { value: String, len: u32 },
    #[error("value {value} has bits set outside mask {mask}")]
    BitsOutsideMask { value: String, mask: String },
    #[error("range low {low} is greater than high {high}")]
    RangeReversed { low: String, high: String },
    #[error("don't care (*) is not allowed for an exact match")]
    DontCareNotAllowed,
}

/// Everything that can be wrong with an entry, a line or a schema lookup.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EntryError {
    #[error("invalid P4Info: {0}")]
    BadP4Info(String),
    #[error("table {0:?} not found in P4Info")]
    UnknownTable(String),
    #[error("table {table:?} has no match field {field:?}")]
    UnknownField { table: String, field: String },
    #[error("match field {field:?} is ambiguous: {candidates}")]
    AmbiguousField { field: String, candidates: String },
    #[error("exact match field {field:?} is missing")]
    MissingField { field: String },
    #[error("match field {field:?} is given twice")]
    DuplicateField { field: String },
    #[error("{field}: {reason}")]
    InvalidMatch { field: String, reason: ValueError },
    #[error("table {table:?} has no action {action:?}")]
    UnknownAction { table: String, action: String },
    #[error("action {action:?} is default-only in table {table:?}; entries cannot use it")]
    DefaultOnlyAction { table: String, action: String },
    #[error("missing action")]
    MissingAction,
    #[error("action {action:?} has no parameter {param:?}")]
    UnknownParam { action: String, param: String },
    #[error("action {action:?} parameter {param:?} is missing")]
    MissingParam { action: String, param: String },
    #[error("action {action:?} parameter {param:?} is given twice")]
    DuplicateParam { action: String, param: String },
    #[error("action {action:?} takes {expected} parameters, got {got}")]
    TooManyParams {
        action: String,
        expected: usize,
        got: usize,
    },
    #[error("{action}.{param}: {reason}")]
    InvalidParam {
        action: String,
        param: String,
        reason: ValueError,
    },
    #[error("table {table:?} has ternary, range or optional fields; entries need a priority (> 0)")]
    PriorityRequired { table: String },
    #[error("table {table:?} has only exact/lpm fields; entries must not set a priority")]
    PriorityNotAllowed { table: String },
    #[error(
        "table {table:?} does not notify idle timeouts (its P4Info says NO_TIMEOUT; compile it with support_timeout = true), so entries cannot have an idle timeout"
    )]
    NoIdleTimeout { table: String },
    #[error("priority {0} must be greater than zero")]
    InvalidPriority(i64),
    #[error("syntax: {0}")]
    Syntax(String),
    #[error("entries are for table {found:?}, expected {expected:?}")]
    WrongTable { expected: String, found: String },
    #[error("duplicate entry: same match key and priority as line {first_line}")]
    DuplicateEntry { first_line: usize },
    #[error("a single entry line plus header needs {needed} bytes, more than the limit of {limit}")]
    LineTooLong { needed: usize, limit: usize },
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// `@member=` / `@group=` on a line of a table whose entries take an
    /// action.
    #[error("table {table:?} has no action profile: `@{token}=` does not apply, give an action")]
    NotIndirect { table: String, token: &'static str },
    /// A line of a table with an action profile without `@member=` /
    /// `@group=`.
    #[error(
        "table {table:?} has an action profile: a line takes `@member=NAME` or `@group=NAME`, not an action"
    )]
    MissingProfileRef { table: String },
    /// A direct meter config (`@meter=` or an entry's `meter`).
    #[error("meter {value:?}: {reason}")]
    InvalidMeter { value: String, reason: String },
    #[error("table_entries[{index}]: {source}")]
    AtEntry {
        index: usize,
        #[source]
        source: Box<EntryError>,
    },
    #[error("line {line}: {source}")]
    AtLine {
        line: usize,
        #[source]
        source: Box<EntryError>,
    },
}

impl EntryError {
    /// Attaches a 1-based line number.
    pub fn at_line(self, line: usize) -> Self {
        EntryError::AtLine {
            line,
            source: Box::new(self),
        }
    }

    /// Attaches the 0-based index of a runtime.json `table_entries` object.
    pub fn at_entry(self, index: usize) -> Self {
        EntryError::AtEntry {
            index,
            source: Box::new(self),
        }
    }

    /// The error without its line number (or entry index).
    pub fn reason(&self) -> &EntryError {
        match self {
            EntryError::AtLine { source, .. } | EntryError::AtEntry { source, .. } => {
                source.reason()
            }
            e => e,
        }
    }

    /// The line number, if this error came from the line format.
    pub fn line(&self) -> Option<usize> {
        match self {
            EntryError::AtLine { line, .. } => Some(*line),
            _ => None,
        }
    }
}
