//! Validation of table entries against the schema and their canonical keys.
//! Pure logic: the error codes follow the P4Runtime spec's rules for match
//! fields, priorities and action parameters.

use p4fleet_proto::p4info::action_ref::Scope;
use p4fleet_proto::p4runtime::{self as p4, field_match::FieldMatchType};
use tonic::Code;

use crate::key::MatchKind;
use crate::p4runtime::schema::{Schema, TableInfo, nbytes};
use crate::p4runtime::wire::{FieldView, MatchView, ParamView};
use crate::update_error::{UpdateError, err, given_once, hex, not_an_action_of};

/// Strips leading zero bytes (P4Runtime allows the client to pad) and checks
/// that the value fits in `bitwidth` bits. Returns the significant bytes.
pub fn significant<'a>(
    value: &'a [u8],
    bitwidth: u32,
    what: &dyn Fn() -> String,
) -> Result<&'a [u8], UpdateError> {
    if value.is_empty() {
        return Err(err(Code::OutOfRange, format!("{}: empty value", what())));
    }
    let first = value.iter().position(|b| *b != 0).unwrap_or(value.len());
    let sig = &value[first..];
    let nb = nbytes(bitwidth);
    let fits = sig.len() < nb
        || (sig.len() == nb && {
            let spare = nb as u32 * 8 - bitwidth;
            spare == 0 || sig[0] >> (8 - spare) == 0
        });
    if !fits {
        return Err(err(
            Code::OutOfRange,
            format!(
                "{}: value 0x{} does not fit in {} bits",
                what(),
                hex(value),
                bitwidth
            ),
        ));
    }
    Ok(sig)
}

/// Writes `value` right-aligned into `dst` (which is zero) after checking it.
fn put(
    dst: &mut [u8],
    value: &[u8],
    bitwidth: u32,
    what: &dyn Fn() -> String,
) -> Result<(), UpdateError> {
    let sig = significant(value, bitwidth, what)?;
    let n = dst.len();
    dst[n - sig.len()..].copy_from_slice(sig);
    Ok(())
}

/// True when all bits after the first `keep` bits of `buf` are zero.
fn zero_after(buf: &[u8], keep: usize) -> bool {
    let full = keep / 8;
    let rem = keep % 8;
    let mut start = full;
    if rem != 0 {
        if buf[full] & (0xffu8 >> rem) != 0 {
            return false;
        }
        start += 1;
    }
    buf[start.min(buf.len())..].iter().all(|b| *b == 0)
}

/// Builds the canonical key of an entry into `key` (cleared first): every
/// field at a fixed offset, zero-padded to its byte width, omitted
/// (don't-care) fields as zeros, then the priority when the table needs one.
pub fn encode_key(
    table: &TableInfo,
    matches: &[FieldView<'_>],
    priority: i32,
    key: &mut Vec<u8>,
) -> Result<(), UpdateError> {
    key.clear();
    key.resize(table.key_len, 0);
    let mut seen: u64 = 0;
    let mut seen_extra: Vec<u32> = Vec::new();
    for m in matches {
        let Some((idx, f)) = table.field(m.field_id) else {
            return Err(err(
                Code::InvalidArgument,
                format!(
                    "table {}: unknown match field id {}",
                    table.name, m.field_id
                ),
            ));
        };
        let dup = if idx < 64 {
            let d = seen & (1 << idx) != 0;
            seen |= 1 << idx;
            d
        } else {
            let d = seen_extra.contains(&m.field_id);
            seen_extra.push(m.field_id);
            d
        };
        if dup {
            return Err(err(
                Code::InvalidArgument,
                format!("table {}: duplicate match field {}", table.name, f.name),
            ));
        }
        let what = || format!("table {} field {}", table.name, f.name);
        let nb = f.nbytes;
        let slot = &mut key[f.offset..f.offset + f.kind.key_len(nb)];
        match (f.kind, m.m) {
            (MatchKind::Exact, MatchView::Exact(value)) => {
                put(slot, value, f.bitwidth, &what)?;
            }
            (MatchKind::Lpm, MatchView::Lpm(value, prefix_len)) => {
                if prefix_len <= 0 || prefix_len as u32 > f.bitwidth {
                    return Err(err(
                        Code::InvalidArgument,
                        format!(
                            "{}: prefix_len {} not in 1..={} (omit the field for a \
                             don't-care match)",
                            what(),
                            prefix_len,
                            f.bitwidth
                        ),
                    ));
                }
                put(&mut slot[..nb], value, f.bitwidth, &what)?;
                let pad = nb * 8 - f.bitwidth as usize;
                if !zero_after(&slot[..nb], pad + prefix_len as usize) {
                    return Err(err(
                        Code::InvalidArgument,
                        format!(
                            "{}: bits beyond prefix length {} must be zero",
                            what(),
                            prefix_len
                        ),
                    ));
                }
                slot[nb..].copy_from_slice(&(prefix_len as u16).to_be_bytes());
            }
            (MatchKind::Ternary, MatchView::Ternary(value, mask)) => {
                let (v, mk) = slot.split_at_mut(nb);
                put(v, value, f.bitwidth, &what)?;
                put(mk, mask, f.bitwidth, &|| format!("{} mask", what()))?;
                if mk.iter().all(|b| *b == 0) {
                    return Err(err(
                        Code::InvalidArgument,
                        format!("{}: all-zero mask (omit the field instead)", what()),
                    ));
                }
                if v.iter().zip(mk.iter()).any(|(v, m)| v & !m != 0) {
                    return Err(err(
                        Code::InvalidArgument,
                        format!("{}: value has bits outside the mask", what()),
                    ));
                }
            }
            (MatchKind::Range, MatchView::Range(low, high)) => {
                let (lo, hi) = slot.split_at_mut(nb);
                put(lo, low, f.bitwidth, &|| format!("{} low", what()))?;
                put(hi, high, f.bitwidth, &|| format!("{} high", what()))?;
                if lo > hi {
                    return Err(err(
                        Code::InvalidArgument,
                        format!("{}: low is greater than high", what()),
                    ));
                }
                if lo.iter().all(|b| *b == 0) && is_max(hi, f.bitwidth) {
                    return Err(err(
                        Code::InvalidArgument,
                        format!("{}: full range (omit the field instead)", what()),
                    ));
                }
            }
            (MatchKind::Optional, MatchView::Optional(value)) => {
                slot[0] = 1;
                put(&mut slot[1..], value, f.bitwidth, &what)?;
            }
            (kind, got) => {
                return Err(err(
                    Code::InvalidArgument,
                    format!("{}: expected a {kind:?} match, got {}", what(), got.name()),
                ));
            }
        }
    }
    // Exact fields cannot be don't-care.
    for (idx, f) in table.fields.iter().enumerate() {
        let present = if idx < 64 {
            seen & (1 << idx) != 0
        } else {
            seen_extra.contains(&f.id)
        };
        if !present && f.kind == MatchKind::Exact {
            return Err(err(
                Code::InvalidArgument,
                format!("table {}: missing exact match field {}", table.name, f.name),
            ));
        }
    }
    if table.needs_priority {
        if priority <= 0 {
            return Err(err(
                Code::InvalidArgument,
                format!(
                    "table {}: priority must be > 0 for ternary/range/optional tables",
                    table.name
                ),
            ));
        }
        let n = key.len();
        key[n - 4..].copy_from_slice(&priority.to_be_bytes());
    } else if priority != 0 {
        return Err(err(
            Code::InvalidArgument,
            format!(
                "table {}: priority must be 0 for a table without ternary/range/optional fields",
                table.name
            ),
        ));
    }
    Ok(())
}

/// Whether `v` is the largest value of `bitwidth` bits (a full range's
/// high bound).
#[inline]
pub(crate) fn is_max(v: &[u8], bitwidth: u32) -> bool {
    // Byte i (from the end) holds value bits [8i, 8i+8); a column wider than
    // the field (bulk writes carry the client's width) has zero bytes on top.
    v.len() as u64 * 8 >= u64::from(bitwidth)
        && v.iter().rev().enumerate().all(|(i, b)| {
            let bits = bitwidth.saturating_sub(i as u32 * 8).min(8);
            *b == if bits == 0 { 0 } else { 0xff >> (8 - bits) }
        })
}

/// Checks a direct action of a table entry (`for_default` = as the table's
/// default action) against the table's action refs and the action's params.
pub fn check_action(
    schema: &Schema,
    table: &TableInfo,
    action_id: u32,
    params: &[ParamView<'_>],
    for_default: bool,
) -> Result<(), UpdateError> {
    let Some(scope) = table.action_scope(action_id) else {
        return Err(not_an_action_of(&table.name, action_id));
    };
    let misplaced = match (scope, for_default) {
        (Scope::DefaultOnly, false) => Some("may only"),
        (Scope::TableOnly, true) => Some("cannot"),
        _ => None,
    };
    if let Some(how) = misplaced {
        return Err(err(
            Code::InvalidArgument,
            format!(
                "table {}: action {} {how} be the default action",
                table.name, action_id
            ),
        ));
    }
    let info = schema
        .actions
        .get(&action_id)
        .expect("schema checked action refs");
    if params.len() != info.params.len() {
        return Err(err(
            Code::InvalidArgument,
            format!(
                "action {}: expected {} params, got {}",
                info.name,
                info.params.len(),
                params.len()
            ),
        ));
    }
    let mut seen: u64 = 0;
    for p in params {
        let found = info
            .params
            .iter()
            .enumerate()
            .find(|(_, q)| q.id == p.param_id);
        let pinfo = given_once(
            &mut seen,
            found,
            || format!("action {}: unknown param id {}", info.name, p.param_id),
            |pinfo| format!("action {}: duplicate param {}", info.name, pinfo.name),
        )?;
        significant(p.value, pinfo.bitwidth, &|| {
            format!("action {} param {}", info.name, pinfo.name)
        })?;
    }
    Ok(())
}

/// `v` without its leading zero bytes, keeping at least one: P4Runtime's
/// canonical form, used for what Read returns.
#[inline]
pub(crate) fn canonical(v: &[u8]) -> &[u8] {
    let first = v
        .iter()
        .position(|b| *b != 0)
        .unwrap_or(v.len().saturating_sub(1));
    &v[first..]
}

/// [`canonical`] in place.
pub fn canonicalize(v: &mut Vec<u8>) {
    let n = v.len() - canonical(v).len();
    if n > 0 {
        v.drain(..n);
    }
}

/// Canonical form of every byte string in a (validated) entry.
pub fn canonicalize_entry(e: &mut p4::TableEntry) {
    for m in &mut e.r#match {
        match &mut m.field_match_type {
            Some(FieldMatchType::Exact(x)) => canonicalize(&mut x.value),
            Some(FieldMatchType::Lpm(x)) => canonicalize(&mut x.value),
            Some(FieldMatchType::Ternary(x)) => {
                canonicalize(&mut x.value);
                canonicalize(&mut x.mask);
            }
            Some(FieldMatchType::Range(x)) => {
                canonicalize(&mut x.low);
                canonicalize(&mut x.high);
            }
            Some(FieldMatchType::Optional(x)) => canonicalize(&mut x.value),
            _ => {}
        }
    }
    if let Some(p4::TableAction {
        r#type: Some(p4::table_action::Type::Action(a)),
    }) = &mut e.action
    {
        canonicalize_action(a);
    }
    super::action_profile::canonicalize_action_set(e);
}

pub fn canonicalize_action(a: &mut p4::Action) {
    for p in &mut a.params {
        canonicalize(&mut p.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn what() -> String {
        "f".into()
    }

    #[test]
    fn significant_accepts_padding_and_checks_width() {
        assert_eq!(significant(&[0, 0, 1, 0xff], 9, &what).unwrap(), &[1, 0xff]);
        assert_eq!(significant(&[0], 1, &what).unwrap(), &[] as &[u8]);
        assert_eq!(
            significant(&[2, 0], 9, &what).unwrap_err().code,
            Code::OutOfRange
        );
        assert_eq!(
            significant(&[1, 0, 0], 16, &what).unwrap_err().code,
            Code::OutOfRange
        );
        assert_eq!(
            significant(&[], 8, &what).unwrap_err().code,
            Code::OutOfRange
        );
        assert!(significant(&[0xff; 4], 32, &what).is_ok());
    }

    #[test]
    fn prefix_bits() {
        assert!(zero_after(&[0x0a, 0, 0, 0], 8));
        assert!(!zero_after(&[0x0a, 1, 0, 0], 8));
        assert!(zero_after(&[0x0a, 0x80, 0, 0], 9));
        assert!(!zero_after(&[0x0a, 0x40, 0, 0], 9));
        assert!(zero_after(&[0xff], 8));
    }

    #[test]
    fn max_values() {
        assert!(is_max(&[0x01, 0xff], 9));
        assert!(!is_max(&[0x00, 0xff], 9));
        assert!(is_max(&[0xff, 0xff], 16));
        // Wider than the field: the top bytes must be zero (and no shift
        // overflow on the way).
        assert!(is_max(&[0x00, 0x00, 0x01, 0xff], 9));
        assert!(!is_max(&[0xff, 0xff, 0xff, 0xff], 9));
        assert!(!is_max(&[0x01], 9));
        assert!(!is_max(&[0xff], 9));
    }

    #[test]
    fn canonical_form_keeps_one_byte() {
        let mut v = vec![0, 0, 0];
        canonicalize(&mut v);
        assert_eq!(v, vec![0]);
        let mut v = vec![0, 1, 0];
        canonicalize(&mut v);
        assert_eq!(v, vec![1, 0]);
    }
}
