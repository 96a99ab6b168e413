//! One source text parsed against one table schema: the entries with
//! their line numbers and the first bad lines. What the cache shares
//! between sets and resyncs. Pure.

use p4fleet_model::entries::direct_meter::MeterConfig;
use std::sync::OnceLock;

use p4fleet_model::entries::{Entry, LineParser, ParseOptions, TableSchema};
use p4fleet_model::sync;

/// Errors kept per text: status shows at most a few, the rest are counted.
pub const MAX_TEXT_ERRORS: usize = 10;

/// The result of parsing one text.
#[derive(Debug, Default)]
pub struct ParsedText {
    pub entries: Vec<Entry>,
    /// `lines.get(i)` is the 1-based line of `entries[i]`.
    pub lines: LineNumbers,
    /// The first [`MAX_TEXT_ERRORS`] bad lines: line and reason.
    pub errors: Vec<(u32, String)>,
    /// How many lines were bad.
    pub invalid: usize,
    /// `(i, config)`: `entries[i]` sets its direct meter (`@meter=`),
    /// sorted by `i`. Few entries have one, so they are kept apart.
    pub meters: Vec<(u32, MeterConfig)>,
    /// [`sync::desired_digest`] of `entries`, taken once (see
    /// [`ParsedText::digest`]).
    digest: OnceLock<[u8; 32]>,
}

impl ParsedText {
    /// [`sync::desired_digest`] of the entries, taken on first use and
    /// kept: [`parse`] takes it on the blocking pool, texts in parallel,
    /// so assembling a set's desired entries only combines the texts'.
    pub fn digest(&self) -> [u8; 32] {
        *self
            .digest
            .get_or_init(|| sync::desired_digest(&self.entries))
    }

    /// Bytes this parse holds, roughly (for the cache's memory metric).
    pub fn approx_bytes(&self) -> usize {
        self.entries.capacity() * (std::mem::size_of::<Entry>() + 32) + self.lines.approx_bytes()
    }
}

/// The line of each entry: mostly consecutive, so kept as runs.
pub type LineNumbers = super::runs::Runs;

/// A text that could not be decoded again (it was when fetched, so this
/// is not expected): no entries, the reason as one bad line.
pub fn unreadable(e: &impl std::fmt::Display) -> ParsedText {
    ParsedText {
        errors: vec![(0, excerpt_reason(&e.to_string()))],
        invalid: 1,
        ..Default::default()
    }
}

/// Parses `text` line by line; bad lines are counted and the first few
/// kept (their messages quote at most a short prefix of a bad value).
/// Duplicates are left to the caller, which sees every source at once.
pub fn parse(schema: &TableSchema, options: ParseOptions, text: &str) -> ParsedText {
    let mut p = LineParser::with_options(schema, options);
    // Sized by the lines, counted first (a vectorised scan): growing by
    // doubling held up to three times the entries' size while it copied.
    let lines = text.bytes().filter(|&b| b == b'\n').count() + 1;
    let mut out = ParsedText {
        entries: Vec::with_capacity(lines),
        ..Default::default()
    };
    for (i, line) in text.lines().enumerate() {
        let n = i as u32 + 1;
        match p.parse_line(line) {
            Ok(Some(e)) => {
                out.entries.push(e);
                out.lines.push(n.into());
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
    // Headers, comments and bad lines leave some capacity unused; only
    // then is the shrink's copy worth it.
    if out.entries.capacity() - out.entries.len() > out.entries.len() / 16 {
        out.entries.shrink_to_fit();
    }
    out.lines.shrink_to_fit();
    out.digest();
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
        assert_eq!(p.lines.to_vec(), [3, 17]);
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

    #[test]
    fn line_numbers_are_kept_as_runs_of_consecutive_lines() {
        let mut l = LineNumbers::default();
        let lines = [4, 5, 6, 7, 9, 10, 20, 21, 22, 23, 24, 26];
        for &n in &lines {
            l.push(n);
        }
        assert_eq!(l.to_vec(), lines);
        assert_eq!((l.len(), l.get(0), l.get(6), l.get(11)), (12, 4, 20, 26));
        assert_eq!(l.runs().len(), 4);
        // 100,000 lines of one text after a 3-line header: one run.
        let mut l = LineNumbers::default();
        (4..100_004).for_each(|n| l.push(n));
        assert_eq!((l.runs().len(), l.get(99_999)), (1, 100_003));
        assert!(LineNumbers::default().is_empty());
    }

    #[test]
    fn entries_are_allocated_once_for_the_lines_of_the_text() {
        let text = "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action drop\n\
                    10.0.0.1 10.0.0.2\n10.0.0.3 10.0.0.4\n# a comment\n10.0.0.5 10.0.0.6";
        let p = parse(&firewall(), ParseOptions::default(), text);
        assert_eq!(p.lines.to_vec(), [3, 4, 6]);
        // Six lines, three entries: the unused half was given back.
        assert_eq!(p.entries.capacity(), 3);
    }
}
