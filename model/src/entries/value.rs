//! Values as people write them, to and from canonical P4Runtime bytes.
//!
//! Accepted: decimal `42`, hex `0x2a`, binary `0b101010`, IPv4 `10.0.0.1`,
//! IPv6 `2001:db8::1`, MAC `aa:bb:cc:dd:ee:ff`. Per match kind: lpm
//! `value/len`, ternary `value&&&mask` (or `value/len`), range `lo..hi`,
//! and `*` for don't care where the kind allows it.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::bytes::{ByteStr, canonical_slice};
use super::entry::MatchValue;
use super::error::ValueError;
use super::schema::MatchKind;

/// The widest value any literal may denote. P4Runtime bitstrings in real
/// programs stay far below this; the bound makes the cost of one value
/// constant, so a text parses in time linear in its length, and a
/// 300,000-digit literal is refused before any arithmetic.
pub const MAX_VALUE_BITS: u32 = 4096;

/// Characters of a bad value that error messages quote: status and
/// Events must fit whatever the input (a 700 kB value once made every
/// status write of its set fail).
pub const QUOTE_LIMIT: usize = 48;

/// `s`, or its first [`QUOTE_LIMIT`] characters and its length in bytes
/// when longer, for error messages.
pub fn excerpt(s: &str) -> String {
    if s.len() <= QUOTE_LIMIT {
        return s.to_string();
    }
    let mut end = QUOTE_LIMIT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

/// Refuses a digit string (after its radix prefix) that cannot fit in
/// [`MAX_VALUE_BITS`]: checked on its length alone, before converting.
fn check_literal_length(s: &str, digits: &[u8], bits_per_digit: f64) -> Result<(), ValueError> {
    let first = digits
        .iter()
        .position(|&d| d != b'0')
        .unwrap_or(digits.len());
    let significant = digits.len() - first;
    // A number with n significant digits needs more than (n-1)·log2(radix) bits.
    let at_least = significant.saturating_sub(1) as f64 * bits_per_digit;
    if at_least >= MAX_VALUE_BITS as f64 {
        return Err(ValueError::LiteralTooLong {
            value: excerpt(s),
            len: s.len(),
            max_bits: MAX_VALUE_BITS,
        });
    }
    Ok(())
}

/// Parses a number or address into canonical bytes, without width check.
/// Numbers denoting more than [`MAX_VALUE_BITS`] bits are refused from
/// their length, before any conversion.
pub fn parse_number(s: &str) -> Result<ByteStr, ValueError> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err(ValueError::Empty);
    }
    // `0b:d2:…` is a MAC address (and `0b::1` IPv6), not binary.
    let radix_prefix = b.len() > 2 && b[0] == b'0' && !b.contains(&b':');
    if radix_prefix {
        match b[1] {
            b'x' | b'X' => check_literal_length(s, &b[2..], 4.0)?,
            b'b' | b'B' => check_literal_length(s, &b[2..], 1.0)?,
            _ => {}
        }
    }
    if b.iter().all(u8::is_ascii_digit) {
        check_literal_length(s, b, std::f64::consts::LOG2_10)?;
    }
    if radix_prefix {
        match b[1] {
            b'x' | b'X' => return parse_radix_pow2(&b[2..], 4).ok_or_else(|| syntax(s)),
            b'b' | b'B' => return parse_radix_pow2(&b[2..], 1).ok_or_else(|| syntax(s)),
            _ => {}
        }
    }
    if b.iter().all(u8::is_ascii_digit) {
        return parse_decimal(s);
    }
    if b.contains(&b':') {
        if let Some(mac) = parse_mac(b) {
            return Ok(ByteStr::canonical(&mac));
        }
        return s
            .parse::<Ipv6Addr>()
            .map(|a| ByteStr::canonical(&a.octets()))
            .map_err(|_| syntax(s));
    }
    if b.contains(&b'.') {
        return s
            .parse::<Ipv4Addr>()
            .map(|a| ByteStr::canonical(&a.octets()))
            .map_err(|_| syntax(s));
    }
    Err(syntax(s))
}

/// Parses a value and checks that it fits in `width` bits.
pub fn parse_value(s: &str, width: u32) -> Result<ByteStr, ValueError> {
    let v = parse_number(s)?;
    check_width(s, &v, width)?;
    Ok(v)
}

fn check_width(s: &str, v: &ByteStr, width: u32) -> Result<(), ValueError> {
    let needed = v.bit_len();
    if needed > width {
        return Err(ValueError::TooWide {
            value: excerpt(s),
            needed,
            width,
        });
    }
    Ok(())
}

fn syntax(s: &str) -> ValueError {
    ValueError::Syntax(excerpt(s))
}

/// Hex (4 bits per digit) or binary (1 bit per digit), any length.
fn parse_radix_pow2(digits: &[u8], bits_per_digit: u32) -> Option<ByteStr> {
    if digits.is_empty() {
        return None;
    }
    let total_bits = digits.len() * bits_per_digit as usize;
    let n = total_bits.div_ceil(8);
    zeroed(n, |out| {
        // Fill from the least significant digit so odd digit counts align.
        let mut bit = 0usize;
        for &d in digits.iter().rev() {
            let v = match bits_per_digit {
                4 => (d as char).to_digit(16)?,
                _ => (d as char).to_digit(2)?,
            } as u8;
            let idx = n - 1 - bit / 8;
            out[idx] |= v << (bit % 8);
            bit += bits_per_digit as usize;
        }
        Some(ByteStr::canonical(out))
    })
}

/// Runs `f` on `n` zeroed bytes: on the stack when they fit in 32 (values
/// of up to 256 bits, nearly all), on the heap beyond.
fn zeroed<R>(n: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let mut small = [0u8; 32];
    match small.get_mut(..n) {
        Some(out) => f(out),
        None => f(&mut vec![0u8; n]),
    }
}

fn parse_decimal(s: &str) -> Result<ByteStr, ValueError> {
    if let Ok(v) = s.parse::<u128>() {
        return Ok(ByteStr::canonical(&v.to_be_bytes()));
    }
    // Wider than 128 bits: multiply-add nine digits at a time into
    // little-endian u32 limbs. The length check in `parse_number` bounds
    // the limbs to MAX_VALUE_BITS / 32, so this is linear in the digits.
    let mut le: Vec<u32> = vec![0];
    for chunk in s.as_bytes().chunks(9) {
        let mut chunk_value = 0u64;
        for &d in chunk {
            chunk_value = chunk_value * 10 + (d - b'0') as u64;
        }
        let scale = 10u64.pow(chunk.len() as u32);
        let mut carry = chunk_value;
        for limb in le.iter_mut() {
            let v = *limb as u64 * scale + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            le.push(carry as u32);
        }
    }
    let be: Vec<u8> = le.iter().rev().flat_map(|l| l.to_be_bytes()).collect();
    Ok(ByteStr::canonical(&be))
}

/// `aa:bb:cc:dd:ee:ff` (one or two hex digits per group).
fn parse_mac(b: &[u8]) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut i = 0;
    for part in b.split(|c| *c == b':') {
        if i == 6 || part.is_empty() || part.len() > 2 {
            return None;
        }
        let mut v = 0u8;
        for &c in part {
            v = v * 16 + (c as char).to_digit(16)? as u8;
        }
        out[i] = v;
        i += 1;
    }
    (i == 6).then_some(out)
}

/// All ones in `width` bits, canonical.
pub(crate) fn all_ones(width: u32) -> ByteStr {
    prefix_mask(width, width)
}

/// A `width`-bit mask with the top `len` bits set, canonical.
pub(crate) fn prefix_mask(len: u32, width: u32) -> ByteStr {
    if len == 0 || width == 0 {
        return ByteStr::new(&[0]);
    }
    let n = width.div_ceil(8) as usize;
    zeroed(n, |out| {
        // Bit i counted from the least significant end.
        for i in (width - len)..width {
            let idx = n - 1 - (i / 8) as usize;
            out[idx] |= 1 << (i % 8);
        }
        ByteStr::canonical(out)
    })
}

fn trailing_zero_bits(b: &[u8]) -> u32 {
    let mut tz = 0;
    for &x in b.iter().rev() {
        if x == 0 {
            tz += 8;
        } else {
            return tz + x.trailing_zeros();
        }
    }
    tz
}

/// Whether `value` has a bit set where `mask` has none.
fn has_bits_outside(value: &[u8], mask: &[u8]) -> bool {
    let (lv, lm) = (value.len(), mask.len());
    (0..lv).any(|i| {
        let v = value[lv - 1 - i];
        let m = if i < lm { mask[lm - 1 - i] } else { 0 };
        v & !m != 0
    })
}

/// Compares canonical numbers.
fn cmp_num(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (a, b) = (canonical_slice(a), canonical_slice(b));
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn is_dont_care(s: &str) -> bool {
    s == "*"
}

/// Parses the text of one match field. `Ok(None)` means don't care: the
/// field is left out of the entry, as P4Runtime requires.
pub fn parse_match(kind: MatchKind, s: &str, width: u32) -> Result<Option<MatchValue>, ValueError> {
    match kind {
        MatchKind::Exact => {
            if is_dont_care(s) {
                return Err(ValueError::DontCareNotAllowed);
            }
            Ok(Some(MatchValue::Exact(parse_value(s, width)?)))
        }
        MatchKind::Optional => {
            if is_dont_care(s) {
                return Ok(None);
            }
            Ok(Some(MatchValue::Optional(parse_value(s, width)?)))
        }
        MatchKind::Lpm => {
            if is_dont_care(s) {
                return Ok(None);
            }
            let (v, len) = match s.split_once('/') {
                Some((v, l)) => (v, parse_prefix_len(l, width)?),
                None => (s, width),
            };
            let value = parse_value(v, width)?;
            check_host_bits(v, &value, len, width)?;
            if len == 0 {
                return Ok(None);
            }
            Ok(Some(MatchValue::Lpm {
                value,
                prefix_len: len,
            }))
        }
        MatchKind::Ternary => {
            if is_dont_care(s) {
                return Ok(None);
            }
            let (v, mask) = if let Some((v, m)) = s.split_once("&&&") {
                (v, parse_value(m, width)?)
            } else if let Some((v, l)) = s.split_once('/') {
                (v, prefix_mask(parse_prefix_len(l, width)?, width))
            } else {
                (s, all_ones(width))
            };
            let value = parse_value(v, width)?;
            if has_bits_outside(value.as_slice(), mask.as_slice()) {
                return Err(ValueError::BitsOutsideMask {
                    value: excerpt(v),
                    mask: excerpt(&format_value(mask.as_slice(), width)),
                });
            }
            if mask.is_zero() {
                return Ok(None);
            }
            Ok(Some(MatchValue::Ternary { value, mask }))
        }
        MatchKind::Range => {
            if is_dont_care(s) {
                return Ok(None);
            }
            let (low, high) = match s.split_once("..") {
                Some((l, h)) => (parse_value(l, width)?, parse_value(h, width)?),
                None => {
                    let v = parse_value(s, width)?;
                    (v.clone(), v)
                }
            };
            if cmp_num(low.as_slice(), high.as_slice()).is_gt() {
                return Err(ValueError::RangeReversed {
                    low: excerpt(&format_value(low.as_slice(), width)),
                    high: excerpt(&format_value(high.as_slice(), width)),
                });
            }
            if low.is_zero() && high == all_ones(width) {
                return Ok(None);
            }
            Ok(Some(MatchValue::Range { low, high }))
        }
    }
}

/// [`parse_match`] for users who opted in to p4runtime-shell's leniency
/// (`spec.maskHostBits`): an LPM value's bits after the prefix and a
/// ternary value's bits outside its mask are cleared instead of rejected
/// (`10.0.0.1/24` reads as `10.0.0.0/24`). Every other check stays.
pub fn parse_match_masking_host_bits(
    kind: MatchKind,
    s: &str,
    width: u32,
) -> Result<Option<MatchValue>, ValueError> {
    match parse_match(kind, s, width) {
        Err(ValueError::HostBitsSet { .. } | ValueError::BitsOutsideMask { .. }) => {}
        r => return r,
    }
    let (v, mask, rest) = if let Some((v, m)) = s.split_once("&&&") {
        (v, parse_value(m, width)?, format!("&&&{m}"))
    } else if let Some((v, l)) = s.split_once('/') {
        (
            v,
            prefix_mask(parse_prefix_len(l, width)?, width),
            format!("/{l}"),
        )
    } else {
        return parse_match(kind, s, width);
    };
    let value = parse_value(v, width)?;
    let mut masked = String::new();
    write_hex(&mut masked, &and(value.as_slice(), mask.as_slice()));
    masked.push_str(&rest);
    parse_match(kind, &masked, width)
}

/// `value & mask`, canonical.
fn and(value: &[u8], mask: &[u8]) -> Vec<u8> {
    let (lv, lm) = (value.len(), mask.len());
    (0..lv)
        .map(|i| {
            let m = if i + lm >= lv { mask[i + lm - lv] } else { 0 };
            value[i] & m
        })
        .collect()
}

fn parse_prefix_len(l: &str, width: u32) -> Result<u32, ValueError> {
    if l.is_empty() || !l.bytes().all(|c| c.is_ascii_digit()) {
        return Err(ValueError::BadPrefixLength(excerpt(l)));
    }
    let len: u32 = l
        .parse()
        .map_err(|_| ValueError::BadPrefixLength(excerpt(l)))?;
    if len > width {
        return Err(ValueError::PrefixTooLong { len, width });
    }
    Ok(len)
}

fn check_host_bits(text: &str, v: &ByteStr, len: u32, width: u32) -> Result<(), ValueError> {
    if !v.is_zero() && trailing_zero_bits(v.as_slice()) < width - len {
        return Err(ValueError::HostBitsSet {
            value: excerpt(text),
            len,
        });
    }
    Ok(())
}

/// Appends a value in the most readable form for its width: IPv4 for 32
/// bits, MAC for 48, IPv6 for 128, decimal up to 64 bits, hex beyond.
pub fn write_value(out: &mut String, value: &[u8], width: u32) {
    let v = canonical_slice(value);
    match width {
        32 if v.len() <= 4 => {
            let mut a = [0u8; 4];
            a[4 - v.len()..].copy_from_slice(v);
            let _ = write!(out, "{}.{}.{}.{}", a[0], a[1], a[2], a[3]);
        }
        48 if v.len() <= 6 => {
            let mut a = [0u8; 6];
            a[6 - v.len()..].copy_from_slice(v);
            let _ = write!(
                out,
                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                a[0], a[1], a[2], a[3], a[4], a[5]
            );
        }
        128 if v.len() <= 16 => {
            let mut a = [0u8; 16];
            a[16 - v.len()..].copy_from_slice(v);
            let _ = write!(out, "{}", Ipv6Addr::from(a));
        }
        w if w <= 64 && v.len() <= 8 => {
            let mut a = [0u8; 8];
            a[8 - v.len()..].copy_from_slice(v);
            let _ = write!(out, "{}", u64::from_be_bytes(a));
        }
        _ => write_hex(out, v),
    }
}

/// `0x` followed by the hex digits, without leading zeros.
pub fn write_hex(out: &mut String, v: &[u8]) {
    let v = canonical_slice(v);
    out.push_str("0x");
    if v.is_empty() {
        out.push('0');
        return;
    }
    let _ = write!(out, "{:x}", v[0]);
    for b in &v[1..] {
        let _ = write!(out, "{b:02x}");
    }
}

/// [`write_value`] into a new string.
pub fn format_value(value: &[u8], width: u32) -> String {
    let mut s = String::new();
    write_value(&mut s, value, width);
    s
}

/// Appends a match in the syntax [`parse_match`] reads back.
pub(crate) fn write_match(out: &mut String, m: Option<&MatchValue>, width: u32) {
    match m {
        None => out.push('*'),
        Some(MatchValue::Exact(v)) | Some(MatchValue::Optional(v)) => {
            write_value(out, v.as_slice(), width)
        }
        Some(MatchValue::Lpm { value, prefix_len }) => {
            write_value(out, value.as_slice(), width);
            let _ = write!(out, "/{prefix_len}");
        }
        Some(MatchValue::Ternary { value, mask }) => {
            write_value(out, value.as_slice(), width);
            // Prefix-shaped masks read better (and are shorter) as /len.
            let ones: u32 = mask.as_slice().iter().map(|b| b.count_ones()).sum();
            if width > 0 && ones < width && *mask == prefix_mask(ones, width) {
                let _ = write!(out, "/{ones}");
            } else {
                out.push_str("&&&");
                write_value(out, mask.as_slice(), width);
            }
        }
        Some(MatchValue::Range { low, high }) => {
            write_value(out, low.as_slice(), width);
            out.push_str("..");
            write_value(out, high.as_slice(), width);
        }
    }
}

/// Checks bytes received from elsewhere (P4Runtime, a controller) for
/// canonical form and width.
pub fn check_canonical(v: &[u8], width: u32) -> Result<ByteStr, ValueError> {
    if v.is_empty() {
        return Err(ValueError::Empty);
    }
    let c = canonical_slice(v);
    let b = ByteStr::new(c);
    let needed = b.bit_len();
    if needed > width {
        let mut s = String::new();
        write_hex(&mut s, c);
        return Err(ValueError::TooWide {
            value: s,
            needed,
            width,
        });
    }
    Ok(b)
}

/// Host bits of an lpm value, for values that did not come from text.
pub(crate) fn lpm_host_bits_ok(v: &ByteStr, len: u32, width: u32) -> bool {
    v.is_zero() || trailing_zero_bits(v.as_slice()) >= width - len.min(width)
}

/// `value & !mask == 0`, for values that did not come from text.
pub(crate) fn within_mask(v: &ByteStr, mask: &ByteStr) -> bool {
    !has_bits_outside(v.as_slice(), mask.as_slice())
}

/// Canonical numeric order, for values that did not come from text.
pub(crate) fn num_le(a: &ByteStr, b: &ByteStr) -> bool {
    cmp_num(a.as_slice(), b.as_slice()).is_le()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The match `text` gives for a `width`-bit field of `kind` (not a
    /// don't care).
    fn matched(kind: MatchKind, text: &str, width: u32) -> MatchValue {
        parse_match(kind, text, width).unwrap().unwrap()
    }

    #[test]
    fn masking_host_bits_is_opt_in_and_clears_only_those() {
        use MatchKind::*;
        assert!(matches!(
            parse_match(Lpm, "10.0.0.1/24", 32),
            Err(ValueError::HostBitsSet { .. })
        ));
        let m = |k, s| parse_match_masking_host_bits(k, s, 32).unwrap();
        assert_eq!(m(Lpm, "10.0.0.1/24"), m(Lpm, "10.0.0.0/24"));
        assert_eq!(
            m(Lpm, "10.0.0.1/24"),
            Some(MatchValue::lpm(&[10, 0, 0, 0], 24))
        );
        // A prefix of 0 is don't care, whatever the value.
        assert_eq!(m(Lpm, "10.0.0.1/0"), None);
        assert_eq!(
            m(Ternary, "10.1.2.3&&&255.255.0.0"),
            m(Ternary, "10.1.0.0/16")
        );
        assert_eq!(
            m(Ternary, "0x1ff&&&0xf0"),
            Some(MatchValue::ternary(&[0xf0], &[0xf0]))
        );
        // Everything else is still checked.
        assert!(parse_match_masking_host_bits(Lpm, "10.0.0.1/33", 32).is_err());
        assert!(parse_match_masking_host_bits(Lpm, "1.2.3.4.5/8", 32).is_err());
        assert!(parse_match_masking_host_bits(Exact, "0x1ff", 8).is_err());
    }

    fn num(s: &str, w: u32) -> Vec<u8> {
        parse_value(s, w).unwrap().to_vec()
    }

    #[test]
    fn decimal_hex_binary() {
        assert_eq!(num("42", 8), vec![42]);
        assert_eq!(num("0x2a", 8), vec![42]);
        assert_eq!(num("0X2A", 8), vec![42]);
        assert_eq!(num("0b101010", 8), vec![42]);
        assert_eq!(num("256", 9), vec![1, 0]);
        assert_eq!(num("0x100", 9), vec![1, 0]);
        assert_eq!(num("0xabc", 12), vec![0x0a, 0xbc]);
        assert_eq!(num("0x0000ff", 8), vec![0xff]);
    }

    #[test]
    fn zero_is_one_byte() {
        for s in [
            "0",
            "0x0",
            "0x0000",
            "0b0",
            "0.0.0.0",
            "::",
            "00:00:00:00:00:00",
        ] {
            assert_eq!(num(s, 128), vec![0], "{s}");
        }
    }

    #[test]
    fn addresses() {
        assert_eq!(num("10.0.0.1", 32), vec![10, 0, 0, 1]);
        assert_eq!(num("0.0.1.2", 32), vec![1, 2]);
        assert_eq!(
            num("aa:bb:cc:dd:ee:ff", 48),
            vec![0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]
        );
        assert_eq!(num("0:0:0:0:0:1", 48), vec![1]);
        // A MAC or IPv6 address whose first group is `0b` is no binary number.
        assert_eq!(num("0b:d2:fd:d6:8a:5c", 48)[0], 0x0b);
        assert_eq!(num("0b::1", 128)[0], 0x0b);
        assert_eq!(
            num("00:11:22:33:44:55", 48),
            vec![0x11, 0x22, 0x33, 0x44, 0x55]
        );
        let mut v6 = vec![0x20, 0x01, 0x0d, 0xb8];
        v6.extend([0u8; 11]);
        v6.push(1);
        assert_eq!(num("2001:db8::1", 128), v6);
        assert_eq!(num("::1", 128), vec![1]);
    }

    #[test]
    fn width_errors() {
        assert_eq!(
            parse_value("512", 9).unwrap_err(),
            ValueError::TooWide {
                value: "512".into(),
                needed: 10,
                width: 9
            }
        );
        assert!(parse_value("511", 9).is_ok());
        assert!(matches!(
            parse_value("10.0.0.1", 16),
            Err(ValueError::TooWide { needed: 28, .. })
        ));
        assert!(parse_value("2001:db8::1", 32).is_err());
        assert!(parse_value("0b11", 1).is_err());
        assert!(parse_value("0b1", 1).is_ok());
    }

    #[test]
    fn syntax_errors() {
        for s in [
            "",
            "abc",
            "0x",
            "0xg1",
            "0b102",
            "10.0.0",
            "10.0.0.256",
            "1:2:3",
            "aa:bb:cc:dd:ee:fg",
            "-1",
            "1.5e3",
            "0b",
        ] {
            assert!(parse_value(s, 128).is_err(), "{s:?} should fail");
        }
    }

    #[test]
    fn wide_decimal_and_hex() {
        // 2^128 needs 129 bits.
        let v = num("340282366920938463463374607431768211456", 129);
        assert_eq!(v.len(), 17);
        assert_eq!(v[0], 1);
        assert!(v[1..].iter().all(|b| *b == 0));
        let h = num(&format!("0x1{}", "0".repeat(64)), 257);
        assert_eq!(h.len(), 33);
        assert!(parse_value("340282366920938463463374607431768211456", 128).is_err());
    }

    /// Decimal text of a big-endian number, by repeated division (a slow
    /// reference for the chunked parser).
    fn to_decimal(be: &[u8]) -> String {
        let mut n = be.to_vec();
        let mut digits = Vec::new();
        while n.iter().any(|&b| b != 0) {
            let mut rem = 0u32;
            for b in n.iter_mut() {
                let cur = (rem << 8) | *b as u32;
                *b = (cur / 10) as u8;
                rem = cur % 10;
            }
            digits.push(b'0' + rem as u8);
        }
        if digits.is_empty() {
            digits.push(b'0');
        }
        digits.reverse();
        String::from_utf8(digits).unwrap()
    }

    #[test]
    fn chunked_decimal_matches_hex_at_every_length() {
        // Numbers of 1..=512 bytes with a varied bit pattern, written in
        // decimal and parsed back: the nine-digit chunks and their carries
        // must agree with the hex reading at every length.
        for len in (1..=512usize).step_by(7) {
            let be: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8 | 1).collect();
            let dec = to_decimal(&be);
            let mut hex = String::new();
            write_hex(&mut hex, &be);
            assert_eq!(
                parse_number(&dec).unwrap(),
                parse_number(&hex).unwrap(),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn literals_wider_than_any_field_are_refused_from_their_length() {
        for s in [
            "9".repeat(300_000),
            format!("0x{}", "f".repeat(2000)),
            format!("0b{}", "1".repeat(5000)),
        ] {
            let err = parse_number(&s).unwrap_err();
            assert!(
                matches!(err, ValueError::LiteralTooLong { len, max_bits: MAX_VALUE_BITS, .. } if len == s.len()),
                "{err:?}"
            );
            // The message quotes a short prefix, not the value.
            assert!(err.to_string().len() < 200, "{err}");
        }
        // Leading zeros do not count: this is 1.
        let padded = format!("{}1", "0".repeat(100_000));
        assert_eq!(parse_value(&padded, 1).unwrap().as_slice(), [1]);
        // The widest value allowed still parses (and is too wide for a field).
        let widest = to_decimal(&[0xff; (MAX_VALUE_BITS / 8) as usize]);
        assert_eq!(parse_number(&widest).unwrap().bit_len(), MAX_VALUE_BITS);
        assert!(matches!(
            parse_value(&widest, 32),
            Err(ValueError::TooWide { .. })
        ));
    }

    #[test]
    fn errors_quote_a_short_prefix_of_long_values() {
        let long = format!("10.0.0.{}", "x".repeat(700_000));
        let msg = parse_value(&long, 32).unwrap_err().to_string();
        assert!(msg.contains("10.0.0.xx"), "{msg}");
        assert!(msg.contains("(700007 bytes)"), "{msg}");
        assert!(msg.len() < 250, "{msg}");
        // Multi-byte characters are cut at a character boundary.
        let e = excerpt(&"é".repeat(100));
        assert!(e.ends_with("(200 bytes)"), "{e}");
        assert_eq!(excerpt("short"), "short");
    }

    #[test]
    fn lpm() {
        let m = matched(MatchKind::Lpm, "10.0.0.0/24", 32);
        assert_eq!(m, MatchValue::lpm(&[10, 0, 0, 0], 24));
        // Without a length: a host route.
        assert!(matches!(
            parse_match(MatchKind::Lpm, "10.0.0.1", 32).unwrap(),
            Some(MatchValue::Lpm { prefix_len: 32, .. })
        ));
        assert!(matches!(
            parse_match(MatchKind::Lpm, "10.0.0.1/24", 32),
            Err(ValueError::HostBitsSet { len: 24, .. })
        ));
        assert!(matches!(
            parse_match(MatchKind::Lpm, "10.0.0.0/33", 32),
            Err(ValueError::PrefixTooLong { len: 33, width: 32 })
        ));
        assert!(matches!(
            parse_match(MatchKind::Lpm, "10.0.0.0/x", 32),
            Err(ValueError::BadPrefixLength(_))
        ));
        assert_eq!(parse_match(MatchKind::Lpm, "0.0.0.0/0", 32).unwrap(), None);
        assert_eq!(parse_match(MatchKind::Lpm, "*", 32).unwrap(), None);
        assert!(parse_match(MatchKind::Lpm, "10.0.0.0/0", 32).is_err());
        assert!(parse_match(MatchKind::Lpm, "2001:db8::/32", 128).is_ok());
        assert!(parse_match(MatchKind::Lpm, "2001:db8::/16", 128).is_err());
    }

    #[test]
    fn ternary() {
        let m = matched(MatchKind::Ternary, "10.0.0.0&&&255.0.0.0", 32);
        assert_eq!(m, MatchValue::ternary(&[10, 0, 0, 0], &[255, 0, 0, 0]));
        assert_eq!(matched(MatchKind::Ternary, "10.0.0.0/8", 32), m);
        assert_eq!(
            matched(MatchKind::Ternary, "0x0a&&&0x0f", 8),
            MatchValue::ternary(&[0x0a], &[0x0f])
        );
        // No mask: all ones.
        assert_eq!(
            matched(MatchKind::Ternary, "5", 9),
            MatchValue::ternary(&[5], &[1, 0xff])
        );
        assert!(matches!(
            parse_match(MatchKind::Ternary, "10.0.0.1&&&255.0.0.0", 32),
            Err(ValueError::BitsOutsideMask { .. })
        ));
        assert_eq!(parse_match(MatchKind::Ternary, "0&&&0", 32).unwrap(), None);
        assert_eq!(parse_match(MatchKind::Ternary, "*", 32).unwrap(), None);
        assert!(parse_match(MatchKind::Ternary, "1&&&0x1ff", 8).is_err());
    }

    #[test]
    fn range() {
        assert_eq!(
            matched(MatchKind::Range, "1024..2047", 16),
            MatchValue::range(&[4, 0], &[7, 0xff])
        );
        assert_eq!(
            matched(MatchKind::Range, "80", 16),
            MatchValue::range(&[80], &[80])
        );
        assert!(matches!(
            parse_match(MatchKind::Range, "2..1", 16),
            Err(ValueError::RangeReversed { .. })
        ));
        assert!(matches!(
            parse_match(MatchKind::Range, "255..256", 16),
            Ok(Some(_))
        ));
        assert!(matches!(
            parse_match(MatchKind::Range, "256..255", 16),
            Err(ValueError::RangeReversed { .. })
        ));
        assert_eq!(parse_match(MatchKind::Range, "0..65535", 16).unwrap(), None);
        assert_eq!(parse_match(MatchKind::Range, "*", 16).unwrap(), None);
        assert!(parse_match(MatchKind::Range, "0..65536", 16).is_err());
        assert!(parse_match(MatchKind::Range, "10.0.0.1..10.0.0.9", 32).is_ok());
    }

    #[test]
    fn exact_and_optional_dont_care() {
        assert_eq!(
            parse_match(MatchKind::Exact, "*", 32),
            Err(ValueError::DontCareNotAllowed)
        );
        assert_eq!(parse_match(MatchKind::Optional, "*", 8).unwrap(), None);
        assert_eq!(
            parse_match(MatchKind::Optional, "6", 8).unwrap(),
            Some(MatchValue::Optional(ByteStr::new(&[6])))
        );
    }

    #[test]
    fn formatting_round_trips() {
        let cases = [
            ("10.0.0.1", 32),
            ("0.0.0.0", 32),
            ("aa:bb:cc:dd:ee:ff", 48),
            ("00:00:00:00:00:01", 48),
            ("2001:db8::1", 128),
            ("511", 9),
            ("0", 9),
            ("0x1ffffffffffffffffff", 73),
        ];
        for (s, w) in cases {
            let v = parse_value(s, w).unwrap();
            assert_eq!(format_value(v.as_slice(), w), s, "width {w}");
        }
        for (s, k, w) in [
            ("10.0.0.0/24", MatchKind::Lpm, 32),
            ("10.0.0.0&&&255.0.255.0", MatchKind::Ternary, 32),
            ("10.0.0.0/8", MatchKind::Ternary, 32),
            ("5&&&7", MatchKind::Ternary, 8),
            ("80..443", MatchKind::Range, 16),
        ] {
            let m = parse_match(k, s, w).unwrap();
            let mut out = String::new();
            write_match(&mut out, m.as_ref(), w);
            assert_eq!(out, s);
        }
    }

    #[test]
    fn masks() {
        assert_eq!(prefix_mask(8, 32).to_vec(), vec![255, 0, 0, 0]);
        assert_eq!(prefix_mask(1, 9).to_vec(), vec![1, 0]);
        assert_eq!(prefix_mask(9, 9).to_vec(), vec![1, 255]);
        assert_eq!(prefix_mask(0, 9).to_vec(), vec![0]);
        assert_eq!(all_ones(12).to_vec(), vec![0x0f, 0xff]);
    }

    #[test]
    fn canonical_check() {
        assert_eq!(check_canonical(&[0, 0, 5], 8).unwrap().to_vec(), vec![5]);
        assert!(check_canonical(&[], 8).is_err());
        assert!(check_canonical(&[2, 0], 9).is_err());
    }
}
