//! One source text parsed against one table schema: the entries with
//! their line numbers and the first bad lines. What the cache shares
//! between sets and resyncs. Pure.

use p4fleet_model::entries::direct_meter::MeterConfig;
use p4fleet_model::entries::{Entry, LineParser, ParseOptions, TableSchema};

/// Errors kept per text: status shows at most a few, the rest are counted.
pub const MAX_TEXT_ERRORS: usize = 10;

/// The result of parsing one text.
#[derive(Debug, Default)]
pub struct ParsedText {
    pub entries: Vec<Entry>,
    /// `lines[i]` is the 1-based line of `entries[i]`.
    pub lines: Vec<u32>,
    /// The first [`MAX_TEXT_ERRORS`] bad lines: line and reason.
    pub errors: Vec<(u32, String)>,
    /// How many lines were bad.
    pub invalid: usize,
    /// `(i, config)`: `entries[i]` sets its direct meter (`@meter=`),
    /// sorted by `i`. Few entries have one, so they are kept apart.
    pub meters: Vec<(u32, MeterConfig)>,
}

impl ParsedText {
    /// Bytes this parse holds, roughly (for the cache's memory metric).
    pub fn approx_bytes(&self) -> usize {
        self.entries.capacity() * (std::mem::size_of::<Entry>() + 32) + self.lines.capacity() * 4
    }
}

/// Parses `text` line by line; bad lines are counted and the first few
/// kept (their messages quote at most a short prefix of a bad value).
/// Duplicates are left to the caller, which sees every source at once.
pub fn parse(schema: &TableSchema, options: ParseOptions, text: &str) -> ParsedText {
    let mut p = LineParser::with_options(schema, options);
    let mut out = ParsedText {
        entries: Vec::with_capacity(text.len() / 32),
        lines: Vec::with_capacity(text.len() / 32),
        ..Default::default()
    };
    for (i, line) in text.lines().enumerate() {
        let n = i as u32 + 1;
        match p.parse_line(line) {
            Ok(Some(e)) => {
                out.entries.push(e);
                out.lines.push(n);
                if let Some(m) = p.take_meter() {
                    out.meters.push((out.entries.len() as u32 - 1, m));
                }
            }
            Ok(None) => {}
            Err(e) => {
                out.invalid += 1;
                if out.errors.len() < MAX_TEXT_ERRORS {
                    // The model quotes short prefixes; this bounds the rest
                    // (names, headers) whatever the line held.
                    out.errors.push((n, excerpt_reason(&e.to_string())));
                }
            }
        }
    }
    out.entries.shrink_to_fit();
    out.lines.shrink_to_fit();
    out
}

/// At most 512 bytes of a reason.
pub fn excerpt_reason(reason: &str) -> String {
    if reason.len() <= 512 {
        return reason.to_string();
    }
    let mut end = 512;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &reason[..end], reason.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::entry_set::desired::tests::firewall;
    use p4fleet_model::entries::excerpt;

    #[test]
    fn entries_keep_their_lines_and_bad_lines_are_capped_and_short() {
        let mut text =
            String::from("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action drop\n");
        text.push_str("10.0.0.1 10.0.0.2\n\n");
        for _ in 0..12 {
            text.push_str(&format!("10.0.0.{} 10.0.0.1\n", "9".repeat(300_000)));
        }
        text.push_str("10.0.0.3 10.0.0.4\n");
        let p = parse(&firewall(), ParseOptions::default(), &text);
        assert_eq!(p.lines, [3, 17]);
        assert_eq!((p.invalid, p.errors.len()), (12, MAX_TEXT_ERRORS));
        assert_eq!(p.errors[0].0, 5);
        assert!(
            p.errors.iter().all(|(_, r)| r.len() < 300),
            "{:?}",
            p.errors[0]
        );
        assert!(excerpt(&"y".repeat(600)).len() < 100);
        assert!(excerpt_reason(&"z".repeat(5000)).len() < 600);
    }
}
