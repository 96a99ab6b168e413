//! The compact line format for entries in ConfigMaps (docs/entries.md).
//!
//! ```text
//! # named form
//! hdr.ipv4.srcAddr=10.0.0.1 hdr.ipv4.dstAddr=10.0.0.2 => allow port=1
//! # positional form, after a header that fixes the field order
//! #! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr
//! #! action allow
//! 10.0.0.1 10.0.0.2 1
//! 10.0.0.3 10.0.0.4 drop
//! ```

use std::collections::HashMap;
use std::collections::hash_map::Entry as MapEntry;
use std::fmt::Write as _;

use super::direct_meter::{self, MeterConfig};
use super::entry::{Builder, Entry, EntryKey, ParseOptions};
use super::error::EntryError;
use super::schema::TableSchema;
use super::value::{excerpt, write_match, write_value};

/// The ConfigMap data key read when a TableEntrySet names none.
pub const DEFAULT_CONFIGMAP_KEY: &str = "entries";

/// Bytes of entry text per ConfigMap the splitter aims below: the API
/// server's limit is 1 MiB for the whole object, so leave room for
/// metadata and the key.
pub const CONFIGMAP_TEXT_LIMIT: usize = 1_000_000;

/// Parses lines one at a time, keeping `#!` header state between them.
pub struct LineParser<'s> {
    builder: Builder<'s>,
    /// Field indices for positional lines, from `#! fields`.
    positional: Vec<usize>,
    default_action: Option<usize>,
    /// The last line's `@meter=` (see [`LineParser::take_meter`]).
    meter: Option<MeterConfig>,
    /// The last line's `@member=` / `@group=`.
    reference: Option<ProfileRef>,
}

/// What an entry of a table with an action profile points at, by name:
/// `@member=NAME` or `@group=NAME` in place of an action
/// (docs/entities/action-profiles.md). The names are those of the set's
/// `spec.actionProfile`; they are resolved there, not here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileRef {
    Member(String),
    Group(String),
}

impl ProfileRef {
    /// The token's name without `@` and `=`: `member` or `group`.
    pub fn token(&self) -> &'static str {
        match self {
            ProfileRef::Member(_) => "member",
            ProfileRef::Group(_) => "group",
        }
    }
}

impl<'s> LineParser<'s> {
    pub fn new(schema: &'s TableSchema) -> Self {
        Self::with_options(schema, ParseOptions::default())
    }

    pub fn with_options(schema: &'s TableSchema, options: ParseOptions) -> Self {
        LineParser {
            builder: Builder::with_options(schema, options),
            positional: Vec::new(),
            default_action: None,
            meter: None,
            reference: None,
        }
    }

    pub fn schema(&self) -> &'s TableSchema {
        self.builder.schema
    }

    /// The direct meter config (`@meter=CIR:CBURST:PIR:PBURST`) of the
    /// entry the last [`LineParser::parse_line`] returned, if it had one.
    /// Kept beside the entry, not in it: a meter is not part of what
    /// identifies or compares entries.
    pub fn take_meter(&mut self) -> Option<MeterConfig> {
        self.meter.take()
    }

    /// Parses one line (without its newline). `Ok(None)` for blank lines,
    /// comments and headers. Errors carry no line number; see [`parse_text`].
    /// A line with `@member=` / `@group=` is refused: this is for tables
    /// whose entries take an action (see [`LineParser::parse_indirect_line`]).
    pub fn parse_line(&mut self, line: &str) -> Result<Option<Entry>, EntryError> {
        if !self.fill(line)? {
            return Ok(None);
        }
        if let Some(r) = &self.reference {
            return Err(EntryError::NotIndirect {
                table: self.builder.schema.name.clone(),
                token: r.token(),
            });
        }
        self.builder.finish().map(Some)
    }

    /// Parses one line of a table with an action profile: the match (and
    /// priority) and what it points at, `@member=NAME` or `@group=NAME`,
    /// instead of an action. `Ok(None)` for blank lines, comments and
    /// headers. A line with an action, or without a reference, is refused.
    pub fn parse_indirect_line(
        &mut self,
        line: &str,
    ) -> Result<Option<(EntryKey, ProfileRef)>, EntryError> {
        if !self.fill(line)? {
            return Ok(None);
        }
        let Some(r) = self.reference.take() else {
            return Err(EntryError::MissingProfileRef {
                table: self.builder.schema.name.clone(),
            });
        };
        if self.builder.has_action() {
            return Err(EntryError::Syntax(format!(
                "a line with `@{}=` takes no action",
                r.token()
            )));
        }
        if self.meter.take().is_some() {
            return Err(EntryError::Unsupported(
                "`@meter=` on an entry of a table with an action profile".into(),
            ));
        }
        self.builder.finish_key().map(|k| Some((k, r)))
    }

    /// Reads a line's tokens into the builder; false for blank lines,
    /// comments and headers.
    fn fill(&mut self, line: &str) -> Result<bool, EntryError> {
        let t = line.trim_start();
        if let Some(d) = t.strip_prefix("#!") {
            self.directive(d)?;
            return Ok(false);
        }
        let body = match t.find('#') {
            Some(i) => &t[..i],
            None => t,
        };
        let mut toks = body.split_ascii_whitespace().peekable();
        if toks.peek().is_none() {
            return Ok(false);
        }
        self.builder.reset();
        self.meter = None;
        self.reference = None;
        let named = body.contains("=>");
        if named {
            self.named(toks)?;
        } else if !self.positional.is_empty() || self.builder.schema.match_fields.is_empty() {
            self.positional(toks)?;
        } else {
            return Err(EntryError::Syntax(
                "expected `field=value ... => action [param=value ...]`, or a `#! fields ...` header before positional lines".into(),
            ));
        }
        Ok(true)
    }

    fn directive(&mut self, d: &str) -> Result<(), EntryError> {
        let mut words = d.split_ascii_whitespace();
        let schema = self.builder.schema;
        match words.next() {
            Some("fields") => {
                // A bad header leaves none, so later lines fail loudly
                // instead of being read with a half-set field order.
                let mut order = std::mem::take(&mut self.positional);
                order.clear();
                for w in words {
                    let i = schema.field_index(w)?;
                    if order.contains(&i) {
                        return Err(EntryError::DuplicateField {
                            field: schema.match_fields[i].name.clone(),
                        });
                    }
                    order.push(i);
                }
                self.positional = order;
            }
            Some("action") => {
                self.default_action = match words.next() {
                    Some(a) => Some(schema.action_index(a)?),
                    None => None,
                };
                if let Some(extra) = words.next() {
                    return Err(EntryError::Syntax(format!(
                        "`#! action` takes one name, got also {:?}",
                        excerpt(extra)
                    )));
                }
            }
            Some("table") => {
                let name = words
                    .next()
                    .ok_or_else(|| EntryError::Syntax("`#! table` needs a name".into()))?;
                if !schema.is_named(name) {
                    return Err(EntryError::WrongTable {
                        expected: schema.name.clone(),
                        found: excerpt(name),
                    });
                }
            }
            Some(other) => {
                return Err(EntryError::Syntax(format!(
                    "unknown header `#! {}` (known: fields, action, table)",
                    excerpt(other)
                )));
            }
            None => {}
        }
        Ok(())
    }

    /// A token after `@`: `meter=...`, `member=...`, `group=...`,
    /// `idle=30s` (the entry's idle timeout) or the priority (`@10`,
    /// `@priority=10`).
    fn at(&mut self, tok: &str) -> Result<(), EntryError> {
        if let Some(name) = tok.strip_prefix("member=") {
            return self.reference(ProfileRef::Member(name.to_string()));
        }
        if let Some(name) = tok.strip_prefix("group=") {
            return self.reference(ProfileRef::Group(name.to_string()));
        }
        if let Some(d) = tok.strip_prefix("idle=") {
            let ns = crate::learn::parse_duration(d)
                .map_err(|e| EntryError::Syntax(format!("@idle: {e}")))?;
            self.builder.set_idle_timeout(ns);
            return Ok(());
        }
        match tok.strip_prefix(direct_meter::TOKEN) {
            Some(m) => {
                if self.meter.is_some() {
                    return Err(EntryError::Syntax("`@meter=` appears twice".into()));
                }
                self.meter = Some(direct_meter::parse(m)?);
                Ok(())
            }
            None => self.priority(tok),
        }
    }

    fn reference(&mut self, r: ProfileRef) -> Result<(), EntryError> {
        let (ProfileRef::Member(name) | ProfileRef::Group(name)) = &r;
        if name.is_empty() {
            return Err(EntryError::Syntax(format!(
                "`@{}=` needs a name",
                r.token()
            )));
        }
        if let Some(first) = &self.reference {
            return Err(EntryError::Syntax(format!(
                "`@{}=` after `@{}=`: a line points at one member or group",
                r.token(),
                first.token()
            )));
        }
        self.reference = Some(r);
        Ok(())
    }

    fn priority(&mut self, tok: &str) -> Result<(), EntryError> {
        let n = tok.strip_prefix("priority=").unwrap_or(tok);
        let p: i64 = n
            .parse()
            .map_err(|_| EntryError::Syntax(format!("bad priority {:?}", excerpt(tok))))?;
        self.builder.set_priority(p);
        Ok(())
    }

    fn named<'a>(&mut self, toks: impl Iterator<Item = &'a str>) -> Result<(), EntryError> {
        let mut after_arrow = false;
        let mut pos = 0;
        for tok in toks {
            if let Some(p) = tok.strip_prefix('@') {
                self.at(p)?;
            } else if tok == "=>" {
                if after_arrow {
                    return Err(EntryError::Syntax("`=>` appears twice".into()));
                }
                after_arrow = true;
            } else if !after_arrow {
                let (name, value) = tok.split_once('=').ok_or_else(|| {
                    EntryError::Syntax(format!(
                        "expected field=value before `=>`, got {:?}",
                        excerpt(tok)
                    ))
                })?;
                self.builder.set_field_by_name(name, value)?;
            } else if !self.builder.has_action() {
                self.builder.set_action_by_name(tok)?;
            } else {
                self.param(tok, &mut pos)?;
            }
        }
        if !self.builder.has_action()
            && self.reference.is_none()
            && let Some(a) = self.default_action
        {
            self.builder.set_action(a)?;
        }
        Ok(())
    }

    fn param(&mut self, tok: &str, pos: &mut usize) -> Result<(), EntryError> {
        match tok.split_once('=') {
            Some((name, value)) => self.builder.set_param_by_name(name, value),
            None => {
                *pos += 1;
                self.builder.set_param_at(*pos - 1, tok)
            }
        }
    }

    fn positional<'a>(&mut self, toks: impl Iterator<Item = &'a str>) -> Result<(), EntryError> {
        let schema = self.builder.schema;
        let mut nfield = 0;
        let mut pos = 0;
        for tok in toks {
            if let Some(p) = tok.strip_prefix('@') {
                self.at(p)?;
            } else if nfield < self.positional.len() {
                self.builder.set_field(self.positional[nfield], tok)?;
                nfield += 1;
            } else if !self.builder.has_action() {
                // An action name, or else the first parameter of the
                // default action: values never look like action names.
                // Not `action_index`: its error (built, then dropped for
                // every line under `#! action`) was 1 % of a large parse.
                match schema.find_action(tok) {
                    Some(a) => self.builder.set_action(a)?,
                    None => {
                        let a = self
                            .default_action
                            .ok_or_else(|| schema.unknown_action(tok))?;
                        self.builder.set_action(a)?;
                        self.param(tok, &mut pos)?;
                    }
                }
            } else {
                self.param(tok, &mut pos)?;
            }
        }
        if nfield < self.positional.len() {
            return Err(EntryError::Syntax(format!(
                "expected {} field values (#! fields), got {nfield}",
                self.positional.len()
            )));
        }
        if !self.builder.has_action()
            && self.reference.is_none()
            && let Some(a) = self.default_action
        {
            self.builder.set_action(a)?;
        }
        Ok(())
    }
}

/// Parses a whole text; the first error wins and carries its line number.
/// Two lines with the same match key and priority are an error.
pub fn parse_text(schema: &TableSchema, text: &str) -> Result<Vec<Entry>, EntryError> {
    let mut r = parse_text_lossy(schema, text, 1);
    match r.errors.pop() {
        Some(e) => Err(e),
        None => Ok(r.entries),
    }
}

/// What [`parse_text_lossy`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParseReport {
    /// The good entries, in line order (first of duplicates kept).
    pub entries: Vec<Entry>,
    /// The first errors (at most the limit asked for), in line order.
    pub errors: Vec<EntryError>,
    /// How many lines failed in total (bad lines plus later duplicates).
    pub failed: usize,
    /// How many good lines set a direct meter (`@meter=`).
    pub meters: usize,
}

/// Parses a whole text, skipping bad lines. With `max_errors == 1` it
/// stops at the first bad line (what [`parse_text`] needs).
pub fn parse_text_lossy(schema: &TableSchema, text: &str, max_errors: usize) -> ParseReport {
    parse_text_lossy_with(schema, text, max_errors, ParseOptions::default())
}

/// [`parse_text_lossy`] with [`ParseOptions`].
pub fn parse_text_lossy_with(
    schema: &TableSchema,
    text: &str,
    max_errors: usize,
    options: ParseOptions,
) -> ParseReport {
    let mut p = LineParser::with_options(schema, options);
    // A rough guess (about 30 bytes per compact line) saves regrowth.
    let mut entries = Vec::with_capacity(text.len() / 32);
    let mut lines: Vec<u32> = Vec::with_capacity(text.len() / 32);
    let mut errors = Vec::new();
    let mut failed = 0;
    let mut meters = 0;
    for (i, line) in text.lines().enumerate() {
        match p.parse_line(line) {
            Ok(Some(e)) => {
                entries.push(e);
                lines.push(i as u32 + 1);
                meters += usize::from(p.take_meter().is_some());
            }
            Ok(None) => {}
            Err(e) => {
                failed += 1;
                if errors.len() < max_errors {
                    errors.push(e.at_line(i + 1));
                }
                if max_errors == 1 {
                    return ParseReport {
                        entries: Vec::new(),
                        errors,
                        failed,
                        meters: 0,
                    };
                }
            }
        }
    }
    // Duplicates: keep the first, report the later line.
    let mut seen: HashMap<&EntryKey, u32> = HashMap::with_capacity(entries.len());
    let mut dup_idx = Vec::new();
    for (idx, e) in entries.iter().enumerate() {
        match seen.entry(&e.key) {
            MapEntry::Occupied(o) => {
                dup_idx.push(idx);
                errors.push(
                    EntryError::DuplicateEntry {
                        first_line: *o.get() as usize,
                    }
                    .at_line(lines[idx] as usize),
                );
            }
            MapEntry::Vacant(v) => {
                v.insert(lines[idx]);
            }
        }
    }
    drop(seen);
    if !dup_idx.is_empty() {
        failed += dup_idx.len();
        errors.sort_by_key(|e| e.line());
        let mut next = dup_idx.iter().peekable();
        let mut i = 0;
        entries.retain(|_| {
            let drop = next.next_if_eq(&&i).is_some();
            i += 1;
            !drop
        });
    }
    errors.truncate(max_errors);
    ParseReport {
        entries,
        errors,
        failed,
        meters,
    }
}

/// How [`format_entries`] writes lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// `#! fields` + `#! action` headers and positional lines; smallest.
    #[default]
    Compact,
    /// `field=value ... => action param=value`; readable, order-free.
    Named,
}

/// Writes entries as text that [`parse_text`] reads back to the same entries.
pub fn format_entries(
    schema: &TableSchema,
    entries: &[Entry],
    style: Style,
) -> Result<String, EntryError> {
    let f = Formatter::new(schema, entries, style)?;
    let mut out = String::with_capacity(f.header.len() + entries.len() * 32);
    out.push_str(&f.header);
    for e in entries {
        f.write_line(&mut out, e)?;
    }
    Ok(out)
}

/// Splits entries into texts of at most `limit` bytes each (every one
/// with its own headers), for several ConfigMaps.
pub fn split_entries(
    schema: &TableSchema,
    entries: &[Entry],
    style: Style,
    limit: usize,
) -> Result<Vec<String>, EntryError> {
    let f = Formatter::new(schema, entries, style)?;
    let mut chunks = Vec::new();
    let mut cur = f.header.clone();
    let mut line = String::new();
    let mut has_lines = false;
    for e in entries {
        line.clear();
        f.write_line(&mut line, e)?;
        if f.header.len() + line.len() > limit {
            return Err(EntryError::LineTooLong {
                needed: f.header.len() + line.len(),
                limit,
            });
        }
        if cur.len() + line.len() > limit {
            chunks.push(std::mem::replace(&mut cur, f.header.clone()));
        }
        cur.push_str(&line);
        has_lines = true;
    }
    if has_lines || chunks.is_empty() {
        chunks.push(cur);
    }
    Ok(chunks)
}

/// One entry as a named-form line without the newline, e.g. for status
/// messages: `hdr.ipv4.srcAddr=10.0.0.1 hdr.ipv4.dstAddr=10.0.0.2 => allow port=1`.
pub fn format_entry(schema: &TableSchema, e: &Entry) -> Result<String, EntryError> {
    let f = Formatter {
        schema,
        style: Style::Named,
        header: String::new(),
        default_action: None,
    };
    let mut out = String::new();
    f.write_line(&mut out, e)?;
    out.pop();
    Ok(out)
}

/// Just the match part (and priority) in named form, e.g.
/// `hdr.ipv4.srcAddr=10.0.0.0/8 @10`; unknown field ids are shown by id.
pub fn format_key(schema: &TableSchema, k: &EntryKey) -> String {
    let mut out = String::new();
    for m in &k.matches {
        match schema.field_by_id(m.field_id) {
            Some((_, f)) => {
                out.push_str(&f.name);
                out.push('=');
                write_match(&mut out, Some(&m.value), f.bitwidth);
            }
            None => {
                let _ = write!(out, "#{}=", m.field_id);
                write_match(&mut out, Some(&m.value), 0);
            }
        }
        out.push(' ');
    }
    if k.priority != 0 {
        let _ = write!(out, "@{}", k.priority);
    }
    if out.ends_with(' ') {
        out.pop();
    }
    out
}

struct Formatter<'s> {
    schema: &'s TableSchema,
    style: Style,
    header: String,
    default_action: Option<u32>,
}

impl<'s> Formatter<'s> {
    fn new(schema: &'s TableSchema, entries: &[Entry], style: Style) -> Result<Self, EntryError> {
        let mut header = String::new();
        let _ = writeln!(header, "#! table {}", schema.name);
        let mut default_action = None;
        if style == Style::Compact {
            header.push_str("#! fields");
            for f in &schema.match_fields {
                header.push(' ');
                header.push_str(&f.name);
            }
            header.push('\n');
            // The most used action goes in the header and out of the lines.
            let mut counts: Vec<(u32, usize)> = Vec::new();
            for e in entries {
                match counts.iter_mut().find(|(id, _)| *id == e.action.action_id) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((e.action.action_id, 1)),
                }
            }
            if let Some(&(id, _)) = counts.iter().max_by_key(|(_, n)| *n) {
                let (_, a) = schema
                    .action_by_id(id)
                    .ok_or_else(|| unknown_action(schema, id))?;
                let _ = writeln!(header, "#! action {}", a.short_name());
                default_action = Some(id);
            }
        }
        Ok(Formatter {
            schema,
            style,
            header,
            default_action,
        })
    }

    fn write_line(&self, out: &mut String, e: &Entry) -> Result<(), EntryError> {
        let schema = self.schema;
        if e.key.table_id != schema.id {
            return Err(EntryError::WrongTable {
                expected: schema.name.clone(),
                found: format!("id {}", e.key.table_id),
            });
        }
        let (_, a) = schema
            .action_by_id(e.action.action_id)
            .ok_or_else(|| unknown_action(schema, e.action.action_id))?;
        let start = out.len();
        match self.style {
            Style::Compact => {
                for f in &schema.match_fields {
                    write_match(out, e.key.get(f.id), f.bitwidth);
                    out.push(' ');
                }
                if self.default_action != Some(a.id) {
                    out.push_str(a.short_name());
                    out.push(' ');
                }
            }
            Style::Named => {
                for f in &schema.match_fields {
                    if let Some(m) = e.key.get(f.id) {
                        out.push_str(&f.name);
                        out.push('=');
                        write_match(out, Some(m), f.bitwidth);
                        out.push(' ');
                    }
                }
                out.push_str("=> ");
                out.push_str(a.short_name());
                out.push(' ');
            }
        }
        for p in &a.params {
            let v = e.action.param(a, p)?;
            if self.style == Style::Named {
                out.push_str(&p.name);
                out.push('=');
            }
            write_value(out, v.value.as_slice(), p.bitwidth);
            out.push(' ');
        }
        if e.key.priority != 0 {
            let _ = write!(out, "@{} ", e.key.priority);
        }
        if e.idle_timeout_ns != 0 {
            let _ = write!(
                out,
                "@idle={} ",
                crate::learn::format_duration(e.idle_timeout_ns)
            );
        }
        // Drop the trailing space; a line is never empty here.
        if out.len() > start && out.ends_with(' ') {
            out.pop();
        }
        out.push('\n');
        Ok(())
    }
}

fn unknown_action(schema: &TableSchema, id: u32) -> EntryError {
    EntryError::UnknownAction {
        table: schema.name.clone(),
        action: format!("id {id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::bytes::ByteStr;
    use super::super::entry::MatchValue;
    use super::super::error::ValueError;
    use super::super::schema::fixtures::*;
    use super::*;

    fn firewall_lines(n: usize) -> String {
        let mut s = String::from("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n");
        for i in 0..n {
            let (a, b, c) = ((i >> 16) as u8, (i >> 8) as u8, i as u8);
            let _ = writeln!(s, "10.{a}.{b}.{c} 172.16.{c}.{b} {}", i % 512);
        }
        s
    }

    #[test]
    fn meter_token_in_named_and_positional_lines() {
        let t = firewall();
        let mut p = LineParser::new(&t);
        let e = p
            .parse_line(
                "srcAddr=10.0.0.1 dstAddr=10.0.1.1 => allow port=1 @meter=1000:100:2000:200",
            )
            .unwrap()
            .unwrap();
        assert_eq!(e.action.params.len(), 1);
        let m = p.take_meter().unwrap();
        assert_eq!((m.cir, m.cburst, m.pir, m.pburst), (1000, 100, 2000, 200));
        assert_eq!(p.take_meter(), None, "taken once");
        p.parse_line("#! fields srcAddr dstAddr").unwrap();
        p.parse_line("10.0.0.2 10.0.1.1 @meter=1:1:1:1 allow 2")
            .unwrap();
        assert_eq!(p.take_meter().map(|m| m.pir), Some(1));
        // A line without the token has none, whatever the line before had.
        p.parse_line("10.0.0.3 10.0.1.1 @meter=1:1:1:1 allow 2")
            .unwrap();
        p.parse_line("10.0.0.4 10.0.1.1 allow 2").unwrap();
        assert_eq!(p.take_meter(), None);
        let r = parse_text_lossy(
            &t,
            "#! fields srcAddr dstAddr\n10.0.0.1 10.0.1.1 allow 1 @meter=5:5:5:5\n10.0.0.2 10.0.1.1 allow 1\n",
            10,
        );
        assert_eq!((r.entries.len(), r.meters), (2, 1));
    }

    #[test]
    fn bad_meter_tokens_name_line_and_token() {
        let t = firewall();
        let text = "#! fields srcAddr dstAddr\n\
                    10.0.0.1 10.0.1.1 allow 1 @meter=5000:100:1000:200\n\
                    10.0.0.2 10.0.1.1 allow 1 @meter=1:2:3\n\
                    10.0.0.3 10.0.1.1 allow 1 @meter=1:1:1:1 @meter=1:1:1:1\n";
        let r = parse_text_lossy(&t, text, 10);
        let errs: Vec<String> = r.errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            errs,
            [
                "line 2: meter \"5000:100:1000:200\": pir 1000 is below cir 5000",
                "line 3: meter \"1:2:3\": expected cir:cburst:pir:pburst (4 numbers), got 3",
                "line 4: syntax: `@meter=` appears twice",
            ]
        );
        assert_eq!((r.entries.len(), r.meters), (0, 0));
    }

    #[test]
    fn member_and_group_tokens_on_indirect_lines() {
        let t = ipv4_lpm();
        let mut p = LineParser::new(&t);
        let (k, r) = p
            .parse_indirect_line("hdr.ipv4.dstAddr=10.0.0.0/8 => @group=ecmp1")
            .unwrap()
            .unwrap();
        assert_eq!(r, ProfileRef::Group("ecmp1".into()));
        assert_eq!(k.matches.len(), 1);
        assert_eq!(p.parse_indirect_line("# comment").unwrap(), None);
        // Positional, with a `#! action` header that such lines ignore.
        p.parse_line("#! fields dstAddr").unwrap();
        p.parse_line("#! action set_nhop").unwrap();
        let (k2, r) = p
            .parse_indirect_line("11.0.0.0/8 @member=nh3")
            .unwrap()
            .unwrap();
        assert_eq!(r, ProfileRef::Member("nh3".into()));
        assert_ne!(k2, k);
        // A direct line on the same table reads as before.
        assert!(p.parse_line("12.0.0.0/8 drop").unwrap().is_some());
    }

    #[test]
    fn bad_member_and_group_tokens_name_line_and_reason() {
        let t = ipv4_lpm();
        let mut p = LineParser::new(&t);
        let err = |p: &mut LineParser, line: &str| p.parse_indirect_line(line).unwrap_err();
        assert!(matches!(
            err(&mut p, "dstAddr=10.0.0.0/8 => set_nhop 1 2"),
            EntryError::MissingProfileRef { .. }
        ));
        assert!(matches!(
            err(&mut p, "dstAddr=10.0.0.0/8 => drop @group=g"),
            EntryError::Syntax(ref m) if m == "a line with `@group=` takes no action"
        ));
        assert!(matches!(
            err(&mut p, "dstAddr=10.0.0.0/8 => @group=g @member=m"),
            EntryError::Syntax(ref m) if m.contains("one member or group")
        ));
        assert!(matches!(
            err(&mut p, "dstAddr=10.0.0.0/8 => @member="),
            EntryError::Syntax(ref m) if m == "`@member=` needs a name"
        ));
        assert!(matches!(
            err(&mut p, "dstAddr=10.0.0.0/8 => @group=g @meter=1:1:1:1"),
            EntryError::Unsupported(_)
        ));
        assert!(matches!(
            err(&mut p, "dstAddr=10.0.0.300/8 => @group=g"),
            EntryError::InvalidMatch { .. }
        ));
        // On a table whose entries take an action, the token is refused
        // with its line, through parse_text as through the operator.
        let e = parse_text(
            &t,
            "dstAddr=10.0.0.0/8 => drop\ndstAddr=11.0.0.0/8 => @group=g\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2: table \"MyIngress.ipv4_lpm\" has no action profile: `@group=` does not apply, give an action"
        );
    }

    #[test]
    fn named_lines() {
        let t = firewall();
        let text = "\
# a comment
hdr.ipv4.srcAddr=10.0.0.1 hdr.ipv4.dstAddr=10.0.0.2 => allow port=1

  srcAddr=10.0.0.3 dstAddr=10.0.0.4 => MyIngress.drop   # trailing comment
dstAddr=10.0.0.6 srcAddr=10.0.0.5 => allow 7
";
        let es = parse_text(&t, text).unwrap();
        assert_eq!(es.len(), 3);
        assert_eq!(
            es[0].key.matches[1].value,
            MatchValue::Exact(ByteStr::new(&[10, 0, 0, 2]))
        );
        assert_eq!(es[1].action.action_id, 25652968);
        assert_eq!(es[2].action.params[0].value, ByteStr::new(&[7]));
        assert_eq!(
            es[2].key.matches[0].value,
            MatchValue::Exact(ByteStr::new(&[10, 0, 0, 5]))
        );
    }

    #[test]
    fn positional_lines() {
        let t = firewall();
        let text = "\
#! table MyIngress.firewall
#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr
10.0.0.1 10.0.0.2 allow 1
10.0.0.3 10.0.0.4 drop
#! action allow
10.0.0.5 10.0.0.6 3
10.0.0.7 10.0.0.8 port=4
10.0.0.9 10.0.0.10 drop
#! fields dstAddr srcAddr
10.0.0.12 10.0.0.11 5
";
        let es = parse_text(&t, text).unwrap();
        assert_eq!(es.len(), 6);
        assert_eq!(es[2].action.action_id, 17724422);
        assert_eq!(es[3].action.params[0].value, ByteStr::new(&[4]));
        assert_eq!(es[4].action.action_id, 25652968);
        assert_eq!(
            es[5].key.matches[0].value,
            MatchValue::Exact(ByteStr::new(&[10, 0, 0, 11]))
        );
    }

    #[test]
    fn errors_carry_line_numbers_and_fields() {
        let t = firewall();
        let text =
            "#! fields srcAddr dstAddr\n10.0.0.1 10.0.0.2 allow 1\n\n10.0.0.1 10.0.0.300 allow 1\n";
        let err = parse_text(&t, text).unwrap_err();
        assert_eq!(err.line(), Some(4));
        let msg = err.to_string();
        assert!(msg.starts_with("line 4: hdr.ipv4.dstAddr: "), "{msg}");

        let err = parse_text(
            &t,
            "#! fields srcAddr dstAddr\n10.0.0.1 10.0.0.2 allow 512\n",
        )
        .unwrap_err();
        assert_eq!(err.line(), Some(2));
        assert!(matches!(
            err,
            EntryError::AtLine { ref source, .. } if matches!(**source, EntryError::InvalidParam { reason: ValueError::TooWide { width: 9, needed: 10, .. }, .. })
        ));

        let err = parse_text(&t, "10.0.0.1 10.0.0.2 allow 1\n").unwrap_err();
        assert!(
            matches!(err, EntryError::AtLine { line: 1, ref source } if matches!(**source, EntryError::Syntax(_)))
        );

        let err = parse_text(&t, "#! fields srcAddr\n10.0.0.1 allow 1\n").unwrap_err();
        assert!(err.to_string().contains("hdr.ipv4.dstAddr"), "{err}");

        let err = parse_text(&t, "#! fields srcAddr dstAddr\n10.0.0.1\n").unwrap_err();
        assert!(err.to_string().contains("expected 2 field values"), "{err}");

        let err = parse_text(&t, "#! fields srcAddr dstAddr\n1 2 allow 1 2\n").unwrap_err();
        assert!(
            matches!(err, EntryError::AtLine { ref source, .. } if matches!(**source, EntryError::TooManyParams { .. }))
        );

        let err = parse_text(&t, "#! fields srcAddr dstAddr\n1 2 forward 1\n").unwrap_err();
        assert!(
            matches!(err, EntryError::AtLine { ref source, .. } if matches!(**source, EntryError::UnknownAction { .. }))
        );

        let err = parse_text(&t, "#! table dmac\n").unwrap_err();
        assert!(
            matches!(err, EntryError::AtLine { line: 1, ref source } if matches!(**source, EntryError::WrongTable { .. }))
        );

        let err = parse_text(&t, "#! feilds srcAddr\n").unwrap_err();
        assert!(err.to_string().contains("unknown header"), "{err}");

        let err = parse_text(&t, "srcAddr=1 dstAddr=2 => allow port=1 @priority=3\n").unwrap_err();
        assert!(
            matches!(err, EntryError::AtLine { ref source, .. } if matches!(**source, EntryError::PriorityNotAllowed { .. }))
        );

        let err = parse_text(&t, "srcAddr=1 dstAddr=2 => allow port=1 port=2\n").unwrap_err();
        assert!(
            matches!(err, EntryError::AtLine { ref source, .. } if matches!(**source, EntryError::DuplicateParam { .. }))
        );

        let err = parse_text(&t, "srcAddr=1 srcAddr=2 => drop\n").unwrap_err();
        assert!(
            matches!(err, EntryError::AtLine { ref source, .. } if matches!(**source, EntryError::DuplicateField { .. }))
        );

        let err = parse_text(&t, "srcAddr 1 => drop\n").unwrap_err();
        assert!(
            matches!(err, EntryError::AtLine { ref source, .. } if matches!(**source, EntryError::Syntax(_)))
        );
    }

    #[test]
    fn duplicates_are_reported_with_both_lines() {
        let t = firewall();
        let text = "#! fields srcAddr dstAddr\n1 2 drop\n3 4 drop\n1 2 allow 5\n";
        let err = parse_text(&t, text).unwrap_err();
        assert_eq!(err, EntryError::DuplicateEntry { first_line: 2 }.at_line(4));
        let r = parse_text_lossy(&t, text, 10);
        assert_eq!(r.entries.len(), 2);
        assert_eq!(r.errors.len(), 1);
        assert_eq!(r.failed, 1);
    }

    #[test]
    fn lossy_collects_errors_in_order() {
        let t = firewall();
        let text = "#! fields srcAddr dstAddr\nx 2 drop\n3 4 drop\n1 2 nope\n1 2 drop\n";
        let r = parse_text_lossy(&t, text, 10);
        assert_eq!(r.entries.len(), 2);
        assert_eq!(
            r.errors.iter().map(|e| e.line()).collect::<Vec<_>>(),
            vec![Some(2), Some(4)]
        );
        assert_eq!(r.failed, 2);
        let r = parse_text_lossy(&t, text, 1);
        assert_eq!(r.errors.len(), 1);
        assert_eq!(r.errors[0].line(), Some(2));
        // Errors are capped, the count is not; duplicates sort in by line.
        let text = "#! fields srcAddr dstAddr\n1 1 drop\n1 1 drop\nx 1 drop\ny 1 drop\n";
        let r = parse_text_lossy(&t, text, 2);
        assert_eq!(r.failed, 3);
        assert_eq!(
            r.errors.iter().map(|e| e.line()).collect::<Vec<_>>(),
            vec![Some(3), Some(4)]
        );
        assert_eq!(r.entries.len(), 1);
        assert_eq!(parse_text_lossy(&t, text, 0).entries.len(), 1);
        // A bad header is reported once, then its lines fail too.
        let r = parse_text_lossy(&t, "#! fields srcAddr nope\n1 2 drop\n", 10);
        assert_eq!(r.failed, 2);
    }

    #[test]
    fn acl_lines_with_priority_and_dont_care() {
        let t = acl();
        let text = "\
#! fields srcAddr dstAddr protocol l4_dst_port
10.0.0.0/8 * 6 80..443 deny @10
* 192.168.0.0&&&255.255.0.0 * * permit @priority=5
srcAddr=10.1.0.0/16 => permit @20
";
        let es = parse_text(&t, text).unwrap();
        assert_eq!(es.len(), 3);
        assert_eq!(es[0].key.priority, 10);
        assert_eq!(es[0].key.matches.len(), 3);
        assert_eq!(es[1].key.matches.len(), 1);
        assert_eq!(es[1].key.matches[0].field_id, 2);
        assert_eq!(es[2].key.priority, 20);
        let err = parse_text(
            &t,
            "#! fields srcAddr dstAddr protocol l4_dst_port\n* * * * deny\n",
        )
        .unwrap_err();
        assert!(
            matches!(err, EntryError::AtLine { ref source, .. } if matches!(**source, EntryError::PriorityRequired { .. }))
        );
        let err = parse_text(&t, "=> NoAction @1\n").unwrap_err();
        assert!(
            matches!(err, EntryError::AtLine { ref source, .. } if matches!(**source, EntryError::DefaultOnlyAction { .. }))
        );
    }

    #[test]
    fn lpm_and_mac_lines() {
        let t = ipv4_lpm();
        let text = "#! fields dstAddr\n#! action set_nhop\n10.0.0.0/8 00:00:00:00:01:01 1\n0.0.0.0/0 aa:bb:cc:dd:ee:ff 2\n10.1.0.0/16 drop\n";
        let es = parse_text(&t, text).unwrap();
        assert_eq!(es.len(), 3);
        assert!(es[1].key.matches.is_empty());
        assert_eq!(
            es[1].action.params[0].value,
            ByteStr::new(&[0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff])
        );
        let err = parse_text(&t, "#! fields dstAddr\n10.0.0.1/8 drop\n").unwrap_err();
        assert!(err.to_string().contains("host bits"), "{err}");
        let t = dmac();
        let es = parse_text(
            &t,
            "hdr.ethernet.dstAddr=00:11:22:33:44:55 => forward port=3\n",
        )
        .unwrap();
        assert_eq!(
            es[0].key.matches[0].value,
            MatchValue::Exact(ByteStr::new(&[0x11, 0x22, 0x33, 0x44, 0x55]))
        );
    }

    #[test]
    fn idle_timeouts_only_on_tables_that_notify_them() {
        let mut t = dmac();
        let text = "#! fields dstAddr\n#! action forward\n00:00:00:00:00:01 3 @idle=30s\nhdr.ethernet.dstAddr=00:00:00:00:00:02 => forward port=4 @idle=1500ms\n00:00:00:00:00:03 5\n";
        // dmac without NOTIFY_CONTROL: the device would refuse it.
        let err = parse_text(&t, text).unwrap_err();
        assert!(
            matches!(&err, EntryError::AtLine { line: 3, source } if matches!(**source, EntryError::NoIdleTimeout { .. })),
            "{err:?}"
        );
        t.idle_timeout = true;
        let es = parse_text(&t, text).unwrap();
        let idle: Vec<i64> = es.iter().map(|e| e.idle_timeout_ns).collect();
        assert_eq!(idle, [30_000_000_000, 1_500_000_000, 0]);
        for style in [Style::Compact, Style::Named] {
            let out = format_entries(&t, &es, style).unwrap();
            assert!(out.contains("@idle=30s"), "{out}");
            assert_eq!(parse_text(&t, &out).unwrap(), es, "{out}");
        }
        let err = parse_text(
            &t,
            "#! fields dstAddr\n#! action forward\n00:00:00:00:00:01 3 @idle=soon\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("@idle"), "{err}");
    }

    #[test]
    fn twenty_thousand_firewall_entries_fit_one_configmap() {
        let t = firewall();
        let text = firewall_lines(20_000);
        assert!(text.len() < 1_000_000, "{} bytes", text.len());
        let es = parse_text(&t, &text).unwrap();
        assert_eq!(es.len(), 20_000);
        // What the formatter writes is as small and reads back the same.
        let out = format_entries(&t, &es, Style::Compact).unwrap();
        assert!(out.len() < 1_000_000, "{} bytes", out.len());
        assert_eq!(parse_text(&t, &out).unwrap(), es);
        // And the rbfrt experiment's 30,000 fit too.
        let text = firewall_lines(30_000);
        assert!(text.len() < CONFIGMAP_TEXT_LIMIT, "{} bytes", text.len());
    }

    #[test]
    fn format_round_trips_every_kind() {
        for (t, text) in [
            (
                acl(),
                "#! fields srcAddr dstAddr protocol l4_dst_port\n10.0.0.0/8 * 6 80..443 deny @10\n* 192.168.0.0&&&255.255.0.0 * * permit @5\n* * * 1024 deny @7\n",
            ),
            (
                ipv4_lpm(),
                "#! fields dstAddr\n10.0.0.0/8 set_nhop 00:00:00:00:01:01 1\n0.0.0.0/0 drop\n",
            ),
            (
                v6(),
                "#! fields hdr.ipv6.dstAddr hdr.inner.dstAddr\n2001:db8::1 2001:db8::/32 go 0x0\n::1 * go 1\n",
            ),
        ] {
            let es = parse_text(&t, text).unwrap();
            for style in [Style::Compact, Style::Named] {
                let out = format_entries(&t, &es, style).unwrap();
                assert_eq!(parse_text(&t, &out).unwrap(), es, "{out}");
            }
        }
    }

    #[test]
    fn named_format_is_readable() {
        let t = firewall();
        let es = parse_text(&t, "srcAddr=10.0.0.1 dstAddr=10.0.0.2 => allow port=1\n").unwrap();
        let out = format_entries(&t, &es, Style::Named).unwrap();
        assert_eq!(
            out,
            "#! table MyIngress.firewall\nhdr.ipv4.srcAddr=10.0.0.1 hdr.ipv4.dstAddr=10.0.0.2 => allow port=1\n"
        );
        let out = format_entries(&t, &es, Style::Compact).unwrap();
        assert_eq!(
            out,
            "#! table MyIngress.firewall\n#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n10.0.0.1 10.0.0.2 1\n"
        );
    }

    #[test]
    fn single_entry_and_key_text() {
        let t = acl();
        let es = parse_text(&t, "srcAddr=10.0.0.0/8 l4_dst_port=80..443 => deny @10\n").unwrap();
        assert_eq!(
            format_entry(&t, &es[0]).unwrap(),
            "hdr.ipv4.srcAddr=10.0.0.0/8 meta.l4_dst_port=80..443 => deny @10"
        );
        assert_eq!(
            format_key(&t, &es[0].key),
            "hdr.ipv4.srcAddr=10.0.0.0/8 meta.l4_dst_port=80..443 @10"
        );
        let f = firewall();
        let es = parse_text(&f, "#! fields srcAddr dstAddr\n1 2 drop\n3 4 drop\n").unwrap();
        // Across texts parsed one by one, sync::duplicates finds them.
        assert_eq!(crate::sync::duplicates(&es), vec![]);
        let mut more = es.clone();
        more.extend(parse_text(&f, "#! fields srcAddr dstAddr\n3 4 allow 1\n").unwrap());
        assert_eq!(crate::sync::duplicates(&more), vec![(1, 2)]);
    }

    #[test]
    fn split_respects_limit_and_keeps_everything() {
        let t = firewall();
        let es = parse_text(&t, &firewall_lines(5_000)).unwrap();
        let chunks = split_entries(&t, &es, Style::Compact, 20_000).unwrap();
        assert!(chunks.len() > 5);
        let mut back = Vec::new();
        for c in &chunks {
            assert!(c.len() <= 20_000);
            back.extend(parse_text(&t, c).unwrap());
        }
        assert_eq!(back, es);
        assert_eq!(
            split_entries(&t, &es, Style::Compact, CONFIGMAP_TEXT_LIMIT)
                .unwrap()
                .len(),
            1
        );
        assert!(matches!(
            split_entries(&t, &es, Style::Compact, 50),
            Err(EntryError::LineTooLong { .. })
        ));
        assert_eq!(
            split_entries(&t, &[], Style::Compact, 100).unwrap().len(),
            1
        );
    }

    #[test]
    fn parses_100k_lines_quickly() {
        let t = firewall();
        let text = firewall_lines(100_000);
        let start = std::time::Instant::now();
        let es = parse_text(&t, &text).unwrap();
        let took = start.elapsed();
        assert_eq!(es.len(), 100_000);
        // Generous bound for debug builds on a shared 2-core machine.
        assert!(took.as_secs() < 20, "{took:?}");
    }
}
