//! The ownership record's content (pure): the entry keys a TableEntrySet
//! owns per target (VirtualSwitch), encoded in a compact binary form and
//! gzip-compressed, with a SHA-256 digest of the uncompressed encoding
//! that names its content (an unchanged record is never written again).
//!
//! Encoding (version 1): `P4FOWN1\n`, then the number of targets; per
//! target its name and its keys in sorted order; per key the table id,
//! the priority (zigzag), the matches (field id, kind, values). Every
//! integer is a LEB128 varint, every byte string its length then bytes.
//! Sorting makes the encoding, and so the digest, a function of the set
//! of keys alone.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::sync::Arc;

use p4fleet_model::entries::{ByteStr, EntryKey, FieldMatch, MatchValue};
use sha2::{Digest, Sha256};

const MAGIC: &[u8] = b"P4FOWN1\n";
/// Bound on the decompressed record (a corrupt or hostile object must not
/// exhaust memory): 256 MiB is millions of keys.
const MAX_DECODED: u64 = 256 << 20;

/// Keys owned per target (VirtualSwitch name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    pub targets: HashMap<String, Arc<HashSet<EntryKey>>>,
}

/// Why stored bytes are not a record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("not gzip data, or truncated: {0}")]
    Gzip(String),
    #[error("decompresses to more than {MAX_DECODED} bytes")]
    TooLarge,
    #[error("unknown format (no P4FOWN1 header)")]
    UnknownFormat,
    #[error("truncated at byte {0}")]
    Truncated(usize),
    #[error("bad value at byte {0}")]
    Malformed(usize),
}

impl Record {
    /// The keys owned on `target` (empty when none are recorded).
    pub fn keys(&self, target: &str) -> Arc<HashSet<EntryKey>> {
        self.targets.get(target).cloned().unwrap_or_default()
    }

    /// The uncompressed encoding (sorted, so equal records encode alike).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        let mut names: Vec<&String> = self.targets.keys().collect();
        names.sort();
        varint(&mut out, names.len() as u64);
        for name in names {
            bytes(&mut out, name.as_bytes());
            let mut keys: Vec<&EntryKey> = self.targets[name].iter().collect();
            keys.sort();
            varint(&mut out, keys.len() as u64);
            for k in keys {
                encode_key(&mut out, k);
            }
        }
        out
    }

    /// SHA-256 of [`Record::encode`]: the record's content address.
    pub fn digest(encoded: &[u8]) -> [u8; 32] {
        Sha256::digest(encoded).into()
    }

    /// The gzip-compressed encoding, as stored.
    pub fn compress(encoded: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        // Writing to a Vec cannot fail.
        gz.write_all(encoded).expect("gzip into memory");
        gz.finish().expect("gzip into memory")
    }

    /// Decompresses and decodes stored bytes; returns the record and the
    /// digest of its encoding.
    pub fn decode(stored: &[u8]) -> Result<(Record, [u8; 32]), RecordError> {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(stored)
            .take(MAX_DECODED + 1)
            .read_to_end(&mut raw)
            .map_err(|e| RecordError::Gzip(e.to_string()))?;
        if raw.len() as u64 > MAX_DECODED {
            return Err(RecordError::TooLarge);
        }
        let rest = raw.strip_prefix(MAGIC).ok_or(RecordError::UnknownFormat)?;
        let mut r = Reader {
            buf: rest,
            pos: 0,
            base: MAGIC.len(),
        };
        let mut record = Record::default();
        for _ in 0..r.varint()? {
            let name = String::from_utf8(r.bytes()?.to_vec())
                .map_err(|_| RecordError::Malformed(r.at()))?;
            let n = r.varint()?;
            let mut keys = HashSet::with_capacity(n.min(1 << 20) as usize);
            for _ in 0..n {
                keys.insert(r.key()?);
            }
            record.targets.insert(name, Arc::new(keys));
        }
        if r.pos != r.buf.len() {
            return Err(RecordError::Malformed(r.at()));
        }
        Ok((record, Record::digest(&raw)))
    }
}

/// `payload` cut into pieces of at most `max` bytes (at least one piece).
pub fn split(payload: &[u8], max: usize) -> Vec<&[u8]> {
    if payload.is_empty() {
        return vec![payload];
    }
    payload.chunks(max.max(1)).collect()
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

const EXACT: u8 = 0;
const LPM: u8 = 1;
const TERNARY: u8 = 2;
const RANGE: u8 = 3;
const OPTIONAL: u8 = 4;

fn encode_key(out: &mut Vec<u8>, k: &EntryKey) {
    varint(out, k.table_id.into());
    let p = k.priority;
    varint(out, ((p << 1) ^ (p >> 31)) as u32 as u64);
    varint(out, k.matches.len() as u64);
    for m in &k.matches {
        varint(out, m.field_id.into());
        match &m.value {
            MatchValue::Exact(v) => {
                out.push(EXACT);
                bytes(out, v.as_slice());
            }
            MatchValue::Lpm { value, prefix_len } => {
                out.push(LPM);
                bytes(out, value.as_slice());
                varint(out, (*prefix_len).into());
            }
            MatchValue::Ternary { value, mask } => {
                out.push(TERNARY);
                bytes(out, value.as_slice());
                bytes(out, mask.as_slice());
            }
            MatchValue::Range { low, high } => {
                out.push(RANGE);
                bytes(out, low.as_slice());
                bytes(out, high.as_slice());
            }
            MatchValue::Optional(v) => {
                out.push(OPTIONAL);
                bytes(out, v.as_slice());
            }
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf` in the decompressed record, for messages.
    base: usize,
}

impl<'a> Reader<'a> {
    fn at(&self) -> usize {
        self.base + self.pos
    }

    fn byte(&mut self) -> Result<u8, RecordError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(RecordError::Truncated(self.at()))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, RecordError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(RecordError::Malformed(self.at()))
    }

    fn u32(&mut self) -> Result<u32, RecordError> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| RecordError::Malformed(self.at()))
    }

    fn bytes(&mut self) -> Result<&'a [u8], RecordError> {
        let n = self.varint()?;
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.pos.checked_add(n))
            .filter(|&e| e <= self.buf.len())
            .ok_or(RecordError::Truncated(self.at()))?;
        let b = &self.buf[self.pos..end];
        self.pos = end;
        Ok(b)
    }

    fn value(&mut self) -> Result<ByteStr, RecordError> {
        Ok(ByteStr::new(self.bytes()?))
    }

    fn key(&mut self) -> Result<EntryKey, RecordError> {
        let table_id = self.u32()?;
        let z = self.u32()?;
        let priority = ((z >> 1) as i32) ^ -((z & 1) as i32);
        let n = self.varint()?;
        let mut matches = Vec::with_capacity(n.min(64) as usize);
        for _ in 0..n {
            let field_id = self.u32()?;
            let value = match self.byte()? {
                EXACT => MatchValue::Exact(self.value()?),
                LPM => MatchValue::Lpm {
                    value: self.value()?,
                    prefix_len: self.u32()?,
                },
                TERNARY => MatchValue::Ternary {
                    value: self.value()?,
                    mask: self.value()?,
                },
                RANGE => MatchValue::Range {
                    low: self.value()?,
                    high: self.value()?,
                },
                OPTIONAL => MatchValue::Optional(self.value()?),
                _ => return Err(RecordError::Malformed(self.at())),
            };
            matches.push(FieldMatch { field_id, value });
        }
        Ok(EntryKey {
            table_id,
            // With up to 64 fields (any real table) the capacity is
            // exact: no reallocation.
            matches: matches.into_boxed_slice(),
            priority,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(v: &[u8]) -> ByteStr {
        ByteStr::new(v)
    }

    fn every_kind(priority: i32) -> EntryKey {
        EntryKey {
            table_id: 0x0200_0001,
            matches: Box::new([
                FieldMatch {
                    field_id: 1,
                    value: MatchValue::Exact(b(&[10, 0, 0, 1])),
                },
                FieldMatch {
                    field_id: 2,
                    value: MatchValue::Lpm {
                        value: b(&[10, 1, 0, 0]),
                        prefix_len: 16,
                    },
                },
                FieldMatch {
                    field_id: 3,
                    value: MatchValue::Ternary {
                        value: b(&[1, 2]),
                        mask: b(&[0xff, 0]),
                    },
                },
                FieldMatch {
                    field_id: 4,
                    value: MatchValue::Range {
                        low: b(&[0]),
                        high: b(&[0x10, 0]),
                    },
                },
                FieldMatch {
                    field_id: 300,
                    value: MatchValue::Optional(b(&[])),
                },
            ]),
            priority,
        }
    }

    /// A firewall-like key: two distinct pseudo-random IPv4 addresses.
    fn firewall_key(i: u32) -> EntryKey {
        let a = i.wrapping_mul(2_654_435_761).to_be_bytes();
        let c = (i ^ 0x5bd1_e995).wrapping_mul(40_503).to_be_bytes();
        EntryKey {
            table_id: 49_661_089,
            matches: Box::new([
                FieldMatch {
                    field_id: 1,
                    value: MatchValue::Exact(b(&a)),
                },
                FieldMatch {
                    field_id: 2,
                    value: MatchValue::Exact(b(&c)),
                },
            ]),
            priority: 0,
        }
    }

    fn record(targets: &[(&str, Vec<EntryKey>)]) -> Record {
        Record {
            targets: targets
                .iter()
                .map(|(n, ks)| (n.to_string(), Arc::new(ks.iter().cloned().collect())))
                .collect(),
        }
    }

    #[test]
    fn every_match_kind_and_priority_round_trips() {
        let r = record(&[
            (
                "fw",
                vec![every_kind(0), every_kind(-7), every_kind(i32::MAX)],
            ),
            ("empty", vec![]),
            ("other", vec![every_kind(i32::MIN)]),
        ]);
        let enc = r.encode();
        let (back, digest) = Record::decode(&Record::compress(&enc)).unwrap();
        assert_eq!(back, r);
        assert_eq!(digest, Record::digest(&enc));
        assert!(back.keys("missing").is_empty());
    }

    #[test]
    fn the_digest_depends_on_the_keys_not_on_their_order() {
        let ks: Vec<EntryKey> = (0..100).map(firewall_key).collect();
        let mut rev = ks.clone();
        rev.reverse();
        let (a, b2) = (record(&[("fw", ks.clone())]), record(&[("fw", rev)]));
        assert_eq!(Record::digest(&a.encode()), Record::digest(&b2.encode()));
        let fewer = record(&[("fw", ks[1..].to_vec())]);
        assert_ne!(Record::digest(&a.encode()), Record::digest(&fewer.encode()));
        let renamed = record(&[("fw2", ks)]);
        assert_ne!(
            Record::digest(&a.encode()),
            Record::digest(&renamed.encode())
        );
    }

    #[test]
    fn thirty_thousand_firewall_keys_fit_one_object_compressed() {
        let r = record(&[("fw", (0..30_000).map(firewall_key).collect())]);
        let enc = r.encode();
        let gz = Record::compress(&enc);
        eprintln!("30,000 keys: {} bytes, {} gzipped", enc.len(), gz.len());
        // A ConfigMap holds at most 1 MiB; the store splits at MAX_CHUNK.
        assert!(
            gz.len() < super::super::store::MAX_CHUNK,
            "{} bytes compressed ({} raw)",
            gz.len(),
            enc.len()
        );
        assert_eq!(Record::decode(&gz).unwrap().0, r);
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let r = record(&[("fw", vec![every_kind(3)])]);
        let enc = r.encode();
        assert!(matches!(
            Record::decode(b"not gzip"),
            Err(RecordError::Gzip(_))
        ));
        assert_eq!(
            Record::decode(&Record::compress(b"P4FOWN9\n")),
            Err(RecordError::UnknownFormat)
        );
        // Every truncation of the encoding fails cleanly.
        for cut in MAGIC.len()..enc.len() {
            let gz = Record::compress(&enc[..cut]);
            assert!(Record::decode(&gz).is_err(), "cut at {cut}");
        }
        let mut extra = enc.clone();
        extra.push(0);
        assert!(matches!(
            Record::decode(&Record::compress(&extra)),
            Err(RecordError::Malformed(_))
        ));
        // A huge length claims more than there is.
        let mut huge = MAGIC.to_vec();
        varint(&mut huge, 1);
        varint(&mut huge, u64::MAX);
        assert!(Record::decode(&Record::compress(&huge)).is_err());
    }

    #[test]
    fn split_cuts_at_the_bound_and_joins_back() {
        let data: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let parts = split(&data, 1000);
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [1000, 1000, 500]
        );
        assert_eq!(parts.concat(), data);
        assert_eq!(split(&[], 1000).len(), 1);
    }
}
