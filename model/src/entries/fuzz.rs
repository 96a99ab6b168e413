//! A property-test harness for the line format and the value parsers, run
//! by `cargo test` with a fixed budget and a fixed seed (so a failure
//! reproduces). `P4FLEET_FUZZ_CASES` raises the budget for a longer hunt;
//! `P4FLEET_FUZZ_SEED` picks another seed.
//!
//! Inputs are built from fragments of the real syntax (values in every
//! notation, field and action names, `=>`, `@priority`, headers) mixed
//! with random characters, huge literals and multi-byte text, so most of
//! them get past the first token. Properties:
//! - nothing panics;
//! - what parses formats back to text that parses to the same entry
//!   (match values alone too, for every match kind and width);
//! - error messages stay short whatever the input.

use super::entry::Entry;
use super::line::{LineParser, format_entry};
use super::schema::fixtures::{acl, dmac, firewall, ipv4_lpm};
use super::schema::{ActionScope, MatchKind, TableSchema};
use super::value::{parse_match, parse_match_masking_host_bits, write_match};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

fn budget() -> (usize, u64) {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse().ok());
    (
        env("P4FLEET_FUZZ_CASES").unwrap_or(20_000) as usize,
        env("P4FLEET_FUZZ_SEED").unwrap_or(0x9e37_79b9_7f4a_7c15),
    )
}

fn digits(r: &mut Rng, alphabet: &[u8], max: usize) -> String {
    let n = 1 + r.below(max);
    (0..n)
        .map(|_| alphabet[r.below(alphabet.len())] as char)
        .collect()
}

/// One value in some notation, sometimes malformed or enormous.
fn value(r: &mut Rng) -> String {
    match r.below(14) {
        0 => r.below(1 << 20).to_string(),
        1 => digits(r, b"0123456789", 60),
        2 => format!("0x{}", digits(r, b"0123456789abcdefABCDEF", 40)),
        3 => format!("0b{}", digits(r, b"01", 80)),
        4 => format!(
            "{}.{}.{}.{}",
            r.below(300),
            r.below(256),
            r.below(256),
            r.below(256)
        ),
        5 => format!(
            "{:x}:{:x}::{:x}",
            r.below(65536),
            r.below(65536),
            r.below(65536)
        ),
        6 => (0..6)
            .map(|_| format!("{:02x}", r.below(256)))
            .collect::<Vec<_>>()
            .join(":"),
        7 => format!("{}/{}", value(r), r.below(140)),
        8 => format!("{}&&&{}", value(r), value(r)),
        9 => format!("{}..{}", value(r), value(r)),
        10 => "*".into(),
        // Huge literals: refused from their length, never converted.
        11 => "7".repeat(1 + r.below(20_000)),
        12 => format!("0x{}", "f".repeat(1 + r.below(3_000))),
        _ => noise(r),
    }
}

/// Random characters, some multi-byte, some syntax.
fn noise(r: &mut Rng) -> String {
    const CHARS: &[&str] = &[
        "a", "Z", "0", "9", ".", ":", "/", "&", "=", ">", "@", "#", "!", "*", "-", "é", "€", "𝄞",
        "\u{0}", "x", "b", "_",
    ];
    let n = r.below(24);
    (0..n).map(|_| r.pick(CHARS)).collect()
}

const NAMES: &[&str] = &[
    "hdr.ipv4.srcAddr",
    "hdr.ipv4.dstAddr",
    "srcAddr",
    "dstAddr",
    "hdr.ipv4.protocol",
    "meta.l4_dst_port",
    "hdr.ethernet.dstAddr",
    "MyIngress.allow",
    "allow",
    "drop",
    "forward",
    "set_nhop",
    "port",
    "nhop",
    "nope",
];

/// One line: a header, a named line, a positional line or noise.
fn line(r: &mut Rng) -> String {
    let mut toks: Vec<String> = Vec::new();
    match r.below(6) {
        0 => {
            toks.push(
                r.pick(&["#!", "#! fields", "#! action", "#! table", "#! nope"])
                    .into(),
            );
            for _ in 0..r.below(4) {
                toks.push(r.pick(NAMES).into());
            }
        }
        1 | 2 => {
            for _ in 0..r.below(5) {
                toks.push(format!("{}={}", r.pick(NAMES), value(r)));
            }
            toks.push("=>".into());
            toks.push(r.pick(NAMES).into());
            for _ in 0..r.below(3) {
                if r.below(2) == 0 {
                    toks.push(format!("{}={}", r.pick(NAMES), value(r)));
                } else {
                    toks.push(value(r));
                }
            }
        }
        3 | 4 => {
            for _ in 0..r.below(6) {
                toks.push(value(r));
            }
            if r.below(3) == 0 {
                toks.insert(r.below(toks.len() + 1), r.pick(NAMES).into());
            }
        }
        _ => toks.push(noise(r)),
    }
    if r.below(4) == 0 {
        toks.insert(r.below(toks.len() + 1), format!("@{}", value(r)));
    }
    if r.below(10) == 0 {
        toks.push(format!("# {}", noise(r)));
    }
    toks.join(" ")
}

/// A number that fits in `width` bits, in decimal or hex.
fn fitting(r: &mut Rng, width: u32) -> String {
    let bits = 1 + r.below(width.min(64) as usize);
    let v = if bits == 64 {
        r.next()
    } else {
        r.next() & ((1u64 << bits) - 1)
    };
    if r.below(2) == 0 {
        v.to_string()
    } else {
        format!("{v:#x}")
    }
}

/// A named-form line valid for `schema`, then maybe mutated: a token
/// replaced by a value or noise, dropped or doubled.
fn schema_line(r: &mut Rng, schema: &TableSchema) -> String {
    let mut toks: Vec<String> = Vec::new();
    for f in &schema.match_fields {
        let v = fitting(r, f.bitwidth);
        let v = match f.kind {
            MatchKind::Lpm => format!(
                "{v}/{}",
                if v == "0" || v == "0x0" {
                    0
                } else {
                    f.bitwidth
                }
            ),
            MatchKind::Ternary => format!("{v}&&&{v}"),
            MatchKind::Range => format!("{v}..{v}"),
            _ => v,
        };
        toks.push(format!("{}={v}", f.name));
    }
    if schema.requires_priority() {
        toks.push(format!("@{}", 1 + r.below(1000)));
    }
    toks.push("=>".into());
    let actions: Vec<_> = schema
        .actions
        .iter()
        .filter(|a| a.scope != ActionScope::DefaultOnly)
        .collect();
    let a = actions[r.below(actions.len())];
    toks.push(a.name.clone());
    for p in &a.params {
        toks.push(format!("{}={}", p.name, fitting(r, p.bitwidth)));
    }
    if r.below(2) == 0 {
        let i = r.below(toks.len());
        match r.below(4) {
            0 => toks[i] = value(r),
            1 => toks[i] = noise(r),
            2 => {
                toks.remove(i);
            }
            _ => toks.insert(i, toks[i].clone()),
        }
    }
    toks.join(" ")
}

/// Headers that make positional lines parse for each fixture.
const HEADERS: &[&str] = &[
    "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow",
    "#! fields hdr.ipv4.dstAddr",
    "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr hdr.ipv4.protocol meta.l4_dst_port",
    "#! fields hdr.ethernet.dstAddr",
];

/// Error messages stay short: they end up in status and Events.
fn assert_short(msg: &str, input: &str) {
    assert!(
        msg.len() < 600,
        "a {}-byte message for a {}-byte input: {}",
        msg.len(),
        input.len(),
        &msg[..200.min(msg.len())]
    );
}

#[test]
fn line_parser_never_panics_and_round_trips_what_it_accepts() {
    let (cases, seed) = budget();
    let mut r = Rng(seed | 1);
    let schemas = [firewall(), ipv4_lpm(), acl(), dmac()];
    let mut accepted = 0usize;
    for case in 0..cases {
        let i = case % schemas.len();
        let schema = &schemas[i];
        let mut p = LineParser::new(schema);
        for h in HEADERS[i].lines() {
            p.parse_line(h).unwrap();
        }
        let text = if r.below(2) == 0 {
            schema_line(&mut r, schema)
        } else {
            line(&mut r)
        };
        match p.parse_line(&text) {
            Ok(Some(e)) => {
                accepted += 1;
                let formatted = format_entry(schema, &e)
                    .unwrap_or_else(|err| panic!("{text:?} parsed but does not format: {err}"));
                let again: Option<Entry> = LineParser::new(schema)
                    .parse_line(&formatted)
                    .unwrap_or_else(|err| panic!("{text:?} → {formatted:?}: {err}"));
                assert_eq!(again.as_ref(), Some(&e), "{text:?} → {formatted:?}");
            }
            Ok(None) => {}
            Err(err) => assert_short(&err.to_string(), &text),
        }
    }
    // The generator reaches past the first token often enough to matter.
    assert!(accepted * 5 > cases, "only {accepted} of {cases} accepted");
}

#[test]
fn value_parsers_never_panic_and_round_trip_what_they_accept() {
    let (cases, seed) = budget();
    let mut r = Rng(seed.rotate_left(17) | 1);
    let kinds = [
        MatchKind::Exact,
        MatchKind::Lpm,
        MatchKind::Ternary,
        MatchKind::Range,
        MatchKind::Optional,
    ];
    let widths = [1, 7, 8, 9, 16, 32, 48, 64, 65, 128, 129, 4096];
    let mut accepted = 0usize;
    for _ in 0..cases {
        let kind = kinds[r.below(kinds.len())];
        let width = widths[r.below(widths.len())];
        let text = value(&mut r);
        let lenient = parse_match_masking_host_bits(kind, &text, width);
        match parse_match(kind, &text, width) {
            Ok(m) => {
                accepted += 1;
                // Lenient parsing accepts all that strict parsing does, alike.
                assert_eq!(lenient.as_ref().ok(), Some(&m), "{text:?}");
                let Some(m) = m else { continue };
                let mut s = String::new();
                write_match(&mut s, Some(&m), width);
                let again = parse_match(kind, &s, width)
                    .unwrap_or_else(|e| panic!("{kind:?}/{width}: {text:?} → {s:?}: {e}"));
                assert_eq!(again, Some(m), "{kind:?}/{width}: {text:?} → {s:?}");
            }
            Err(err) => assert_short(&err.to_string(), &text),
        }
        if let Err(err) = lenient {
            assert_short(&err.to_string(), &text);
        }
    }
    assert!(accepted * 20 > cases, "only {accepted} of {cases} accepted");
}
