//! Entries from the formats people already have, into canonical entries
//! (then the line format with [`super::format_entries`]): simple_switch_CLI
//! `table_add` scripts and the P4 tutorials' `runtime.json`. Each value goes
//! through the same [`Builder`] as the line format and inline entries, so a
//! converted entry passes exactly the checks a TableEntrySet applies.

use std::collections::BTreeMap;

use p4fleet_proto::p4info::P4Info;
use serde_json::Value;

use super::entry::{Builder, Entry, ParseOptions};
use super::error::EntryError;
use super::schema::{MatchKind, TableSchema};
use super::value::{all_ones, parse_value};

/// simple_switch_CLI priorities win when *lower*; P4Runtime's when
/// *higher*. A converted priority is `SIMPLE_SWITCH_PRIORITY_BASE - p`, so
/// the order is kept and each entry's priority depends on nothing else in
/// the script (adding a line never renumbers the others).
pub const SIMPLE_SWITCH_PRIORITY_BASE: i64 = 1 << 24;

/// What a conversion produced: entries per table, in order of first use,
/// and the input it skipped on purpose.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Converted {
    pub tables: Vec<(TableSchema, Vec<Entry>)>,
    pub skipped: Vec<Skipped>,
}

/// An input command or object that holds no table entry (a default
/// action, a register write, ...). `at` is a 1-based line
/// (simple_switch_CLI) or a `table_entries` index (runtime.json).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub at: usize,
    pub what: String,
}

impl Converted {
    fn table(&mut self, p4info: &P4Info, name: &str) -> Result<usize, EntryError> {
        if let Some(i) = self.tables.iter().position(|(s, _)| s.name == name) {
            return Ok(i);
        }
        let schema = TableSchema::from_p4info(p4info, name)?;
        // The same table under another of its names.
        if let Some(i) = self.tables.iter().position(|(s, _)| s.id == schema.id) {
            return Ok(i);
        }
        self.tables.push((schema, Vec::new()));
        Ok(self.tables.len() - 1)
    }

    fn push(
        &mut self,
        p4info: &P4Info,
        options: ParseOptions,
        table: &str,
        build: impl FnOnce(&mut Builder<'_>) -> Result<(), EntryError>,
    ) -> Result<(), EntryError> {
        let i = self.table(p4info, table)?;
        let (schema, entries) = &mut self.tables[i];
        let mut b = Builder::with_options(schema, options);
        build(&mut b)?;
        entries.push(b.finish()?);
        Ok(())
    }
}

/// Converts a simple_switch_CLI script. `table_add T A K1 K2 ... => P1 P2
/// ... [priority]` becomes an entry (keys in P4Info field order: `v`,
/// `v/len`, `v&&&mask`, `lo->hi`); other commands are [`Skipped`]. The
/// first bad line fails the conversion, with its line number.
pub fn from_simple_switch_cli(
    p4info: &P4Info,
    text: &str,
    options: ParseOptions,
) -> Result<Converted, EntryError> {
    let mut out = Converted::default();
    for (i, line) in text.lines().enumerate() {
        let at = i + 1;
        let body = line.split('#').next().unwrap_or("").trim();
        let mut words = body.split_ascii_whitespace();
        match words.next() {
            None => {}
            Some("table_add") => {
                table_add(&mut out, p4info, options, words).map_err(|e| e.at_line(at))?
            }
            Some(cmd) => out.skipped.push(Skipped {
                at,
                what: format!("`{cmd}` (not a table entry)"),
            }),
        }
    }
    Ok(out)
}

fn table_add<'a>(
    out: &mut Converted,
    p4info: &P4Info,
    options: ParseOptions,
    mut words: impl Iterator<Item = &'a str>,
) -> Result<(), EntryError> {
    let syntax = |m: &str| EntryError::Syntax(format!("table_add {m}"));
    let table = words.next().ok_or_else(|| syntax("needs a table name"))?;
    let action = words.next().ok_or_else(|| syntax("needs an action name"))?;
    let rest: Vec<&str> = words.collect();
    let (keys, params) = match rest.iter().position(|w| *w == "=>") {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (&rest[..], &[][..]),
    };
    out.push(p4info, options, table, |b| {
        let schema = b.schema;
        if keys.len() != schema.match_fields.len() {
            return Err(syntax(&format!(
                "for {} needs {} match values ({}), got {}",
                schema.name,
                schema.match_fields.len(),
                field_names(schema),
                keys.len()
            )));
        }
        for (idx, k) in keys.iter().enumerate() {
            let f = &schema.match_fields[idx];
            match f.kind {
                MatchKind::Range => b.set_field(idx, &k.replacen("->", "..", 1))?,
                MatchKind::Optional => b.set_field(idx, &optional(k, f.bitwidth, &f.name)?)?,
                _ => b.set_field(idx, k)?,
            }
        }
        b.set_action_by_name(action)?;
        let nparams = schema.actions[schema.action_index(action)?].params.len();
        let (params, priority) = if schema.requires_priority() && params.len() == nparams + 1 {
            (&params[..nparams], Some(params[nparams]))
        } else {
            (params, None)
        };
        for (pos, p) in params.iter().enumerate() {
            b.set_param_at(pos, p)?;
        }
        if let Some(p) = priority {
            let p: i64 = p
                .parse()
                .map_err(|_| EntryError::Syntax(format!("bad priority {p:?}")))?;
            if !(0..SIMPLE_SWITCH_PRIORITY_BASE).contains(&p) {
                return Err(EntryError::InvalidPriority(p));
            }
            b.set_priority(SIMPLE_SWITCH_PRIORITY_BASE - p);
        }
        Ok(())
    })
}

/// bmv2 writes an optional match as ternary: mask 0 is don't care,
/// all ones an exact value; any other mask has no optional equivalent.
fn optional(k: &str, width: u32, field: &str) -> Result<String, EntryError> {
    let Some((v, m)) = k.split_once("&&&") else {
        return Ok(k.to_string());
    };
    let bad = |reason| EntryError::InvalidMatch {
        field: field.to_string(),
        reason,
    };
    let mask = parse_value(m, width).map_err(bad)?;
    if mask.is_zero() {
        Ok("*".into())
    } else if mask == all_ones(width) {
        Ok(v.to_string())
    } else {
        Err(EntryError::Unsupported(format!(
            "{field}: an optional match takes mask 0 or all ones, not {m}"
        )))
    }
}

fn field_names(schema: &TableSchema) -> String {
    let names: Vec<&str> = schema
        .match_fields
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    names.join(" ")
}

/// Converts a P4 tutorials `runtime.json` (`table_entries`: `table`,
/// `match` {field: value | [value, prefix_len] | [value, mask] | [low,
/// high]}, `action_name`, `action_params`, `priority`). Values may be JSON
/// numbers or strings. Default-action objects are [`Skipped`].
pub fn from_runtime_json(
    p4info: &P4Info,
    text: &str,
    options: ParseOptions,
) -> Result<Converted, EntryError> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| EntryError::Syntax(format!("runtime.json: {e}")))?;
    let entries = match doc.get("table_entries") {
        None => &[][..],
        Some(Value::Array(a)) => &a[..],
        Some(_) => {
            return Err(EntryError::Syntax(
                "runtime.json: `table_entries` is not a list".into(),
            ));
        }
    };
    let mut out = Converted::default();
    for (i, e) in entries.iter().enumerate() {
        json_entry(&mut out, p4info, options, e).map_err(|err| err.at_entry(i))?;
        if e.get("default_action").and_then(Value::as_bool) == Some(true) {
            out.skipped.push(Skipped {
                at: i,
                what: "default action (not a table entry)".into(),
            });
        }
    }
    Ok(out)
}

fn json_entry(
    out: &mut Converted,
    p4info: &P4Info,
    options: ParseOptions,
    e: &Value,
) -> Result<(), EntryError> {
    let syntax = |m: String| EntryError::Syntax(m);
    if e.get("default_action").and_then(Value::as_bool) == Some(true) {
        return Ok(());
    }
    let table = e
        .get("table")
        .and_then(Value::as_str)
        .ok_or_else(|| syntax("`table` (a string) is missing".into()))?;
    let action = e
        .get("action_name")
        .and_then(Value::as_str)
        .ok_or(EntryError::MissingAction)?;
    let empty = serde_json::Map::new();
    let object = |key: &str| match e.get(key) {
        None | Some(Value::Null) => Ok(&empty),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(syntax(format!("`{key}` is not an object"))),
    };
    let matches = object("match")?;
    let params = object("action_params")?;
    let priority = match e.get("priority") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .ok_or_else(|| syntax(format!("bad priority {v}")))?,
        ),
    };
    out.push(p4info, options, table, |b| {
        let schema = b.schema;
        for (name, v) in matches {
            let idx = schema.field_index(name)?;
            let text = json_match(schema.match_fields[idx].kind, v)
                .ok_or_else(|| syntax(format!("{name}: cannot read match value {v}")))?;
            b.set_field(idx, &text)?;
        }
        b.set_action_by_name(action)?;
        // Sorted, so the first of two spellings of one name is reported.
        let params: BTreeMap<&String, &Value> = params.iter().collect();
        for (name, v) in params {
            let text = json_scalar(v)
                .ok_or_else(|| syntax(format!("{action}.{name}: cannot read value {v}")))?;
            b.set_param_by_name(name, &text)?;
        }
        if let Some(p) = priority {
            b.set_priority(p);
        }
        Ok(())
    })
}

/// A number or string as the value text the line format reads.
fn json_scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) if n.is_u64() => Some(n.to_string()),
        _ => None,
    }
}

/// runtime.json writes lpm as `[value, len]`, ternary as `[value, mask]`,
/// range as `[low, high]`, exact and optional as a value.
fn json_match(kind: MatchKind, v: &Value) -> Option<String> {
    match (kind, v) {
        (_, Value::Array(a)) if a.len() == 2 => {
            let (x, y) = (json_scalar(&a[0])?, json_scalar(&a[1])?);
            match kind {
                MatchKind::Lpm => Some(format!("{x}/{y}")),
                MatchKind::Ternary => Some(format!("{x}&&&{y}")),
                MatchKind::Range => Some(format!("{x}..{y}")),
                _ => None,
            }
        }
        (_, Value::Array(_)) => None,
        (_, v) => json_scalar(v),
    }
}

/// Finds the table a line-format text names in its `#! table` header
/// (the first one), for tools that read texts without being told.
pub fn table_header(text: &str) -> Option<&str> {
    text.lines().find_map(|l| {
        let mut w = l.trim_start().strip_prefix("#!")?.split_ascii_whitespace();
        match w.next() {
            Some("table") => w.next(),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::bytes::ByteStr;
    use super::super::entry::MatchValue;
    use super::super::line::{Style, format_entries, parse_text};
    use super::super::schema::fixtures::p4info as parse_p4info;
    use super::*;

    /// The router example's P4Info: ipv4_lpm (lpm) and acl (ternary, range).
    fn router() -> P4Info {
        let text = include_str!("../../../examples/router/p4info.txt");
        parse_p4info(text)
    }

    #[test]
    fn simple_switch_cli_script_converts_every_kind() {
        let p = router();
        let script = "\
# set up routes
table_set_default MyIngress.ipv4_lpm MyIngress.drop
table_add MyIngress.ipv4_lpm MyIngress.set_nhop 10.0.1.0/24 => 00:00:0a:00:01:01 1
table_add ipv4_lpm set_nhop 0x0a000200/24 => 0x00000a000201 2
table_add MyIngress.acl MyIngress.deny 10.0.0.0&&&255.0.0.0 0&&&0 6&&&0xff 80->443 => 1
table_add MyIngress.acl MyIngress.permit 0&&&0 0&&&0 0&&&0 0->65535 => 10
mirroring_add 1 2
";
        let c = from_simple_switch_cli(&p, script, ParseOptions::default()).unwrap();
        assert_eq!(c.tables.len(), 2);
        let (lpm, es) = &c.tables[0];
        assert_eq!(lpm.name, "MyIngress.ipv4_lpm");
        assert_eq!(es.len(), 2);
        assert_eq!(
            es[1].key.matches[0].value,
            MatchValue::Lpm {
                value: ByteStr::new(&[10, 0, 2, 0]),
                prefix_len: 24
            }
        );
        let (acl, es) = &c.tables[1];
        assert_eq!(acl.name, "MyIngress.acl");
        // Lower wins in bmv2, higher in P4Runtime: the order is kept.
        assert_eq!(es[0].key.priority, (SIMPLE_SWITCH_PRIORITY_BASE - 1) as i32);
        assert!(es[0].key.priority > es[1].key.priority);
        // Mask 0 and the full range are don't care, left out.
        assert_eq!(es[0].key.matches.len(), 3);
        assert!(es[1].key.matches.is_empty());
        assert_eq!(
            c.skipped.iter().map(|s| s.at).collect::<Vec<_>>(),
            vec![2, 7]
        );
        // What the formatter writes reads back the same, under its header.
        for (schema, es) in &c.tables {
            let text = format_entries(schema, es, Style::Compact).unwrap();
            assert_eq!(table_header(&text), Some(schema.name.as_str()));
            assert_eq!(&parse_text(schema, &text).unwrap(), es);
        }
    }

    #[test]
    fn simple_switch_cli_errors_name_the_line() {
        let p = router();
        let refused =
            |script| from_simple_switch_cli(&p, script, ParseOptions::default()).unwrap_err();
        let err = refused("\ntable_add ipv4_lpm set_nhop 10.0.1.1/24 => 00:00:0a:00:01:01 1\n");
        assert_eq!(err.line(), Some(2));
        assert!(
            matches!(err.reason(), EntryError::InvalidMatch { field, .. } if field == "hdr.ipv4.dstAddr")
        );
        let err = refused("table_add nope a 1 =>\n");
        assert!(matches!(err.reason(), EntryError::UnknownTable(_)));
        let err = refused("table_add ipv4_lpm set_nhop =>\n");
        assert!(err.to_string().contains("needs 1 match values"), "{err}");
        let err = refused("table_add ipv4_lpm set_nhop 10.0.0.0/8 => 1\n");
        assert!(matches!(err.reason(), EntryError::MissingParam { .. }));
        let err = refused("table_add acl deny 0&&&0 0&&&0 0&&&0 1->2 =>\n");
        assert!(matches!(err.reason(), EntryError::PriorityRequired { .. }));
    }

    #[test]
    fn runtime_json_converts_and_skips_default_actions() {
        let p = router();
        let json = r#"{
  "target": "bmv2",
  "table_entries": [
    {"table": "MyIngress.ipv4_lpm", "default_action": true,
     "action_name": "MyIngress.drop", "action_params": {}},
    {"table": "MyIngress.ipv4_lpm", "match": {"hdr.ipv4.dstAddr": ["10.0.1.1", 32]},
     "action_name": "MyIngress.set_nhop",
     "action_params": {"dmac": "08:00:00:00:01:11", "port": 1}},
    {"table": "MyIngress.acl",
     "match": {"hdr.ipv4.srcAddr": ["10.0.0.0", "255.0.0.0"], "meta.l4_dst_port": [80, 443]},
     "action_name": "deny", "priority": 10}
  ]
}"#;
        let c = from_runtime_json(&p, json, ParseOptions::default()).unwrap();
        assert_eq!(
            c.skipped,
            vec![Skipped {
                at: 0,
                what: "default action (not a table entry)".into()
            }]
        );
        assert_eq!(c.tables[0].1.len(), 1);
        assert_eq!(c.tables[0].1[0].action.params.len(), 2);
        assert_eq!(c.tables[1].1[0].key.priority, 10);
        assert_eq!(
            c.tables[1].1[0].key.matches[1].value,
            MatchValue::Range {
                low: ByteStr::new(&[80]),
                high: ByteStr::new(&[1, 0xbb])
            }
        );
        let bad = r#"{"table_entries": [{"table": "ipv4_lpm", "match": {"dstAddr": ["10.0.1.1", 24]}, "action_name": "drop"}]}"#;
        let err = from_runtime_json(&p, bad, ParseOptions::default()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("table_entries[0]: hdr.ipv4.dstAddr"),
            "{err}"
        );
        assert!(from_runtime_json(&p, "{", ParseOptions::default()).is_err());
    }

    #[test]
    fn table_header_is_found() {
        assert_eq!(
            table_header("# x\n  #! table  a.b\n#! table c\n"),
            Some("a.b")
        );
        assert_eq!(table_header("#! fields a\n1 x\n"), None);
    }
}
