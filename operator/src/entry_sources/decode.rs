//! A ConfigMap's entry texts: `data` keys as they are, `binaryData` keys
//! ending in [`GZIP_SUFFIX`] gunzipped, other `binaryData` keys read as
//! UTF-8. Every text is bounded by [`MAX_TEXT_BYTES`], checked while
//! decompressing, so a small compressed bomb never becomes a huge
//! allocation. Pure (CPU only; callers run it on the blocking pool).
//!
//! A gzip key's [`Text`] keeps its compressed bytes, and its decoded text
//! only until the first parse takes it: resyncs reuse the parses, not the
//! texts, and at 1,000,000 entries the decoded texts were 30 B of each
//! entry's memory, the compressed ones are about 6.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;

/// `binaryData` keys with this suffix hold gzip-compressed line-format text.
pub const GZIP_SUFFIX: &str = ".gz";

/// The largest text one key may hold once decompressed (64 MiB: about
/// 2.3 million firewall entries; a ConfigMap holds at most 1 MiB, so only
/// a compression ratio above 64 reaches it).
pub const MAX_TEXT_BYTES: usize = 64 << 20;

/// Why a key's text cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("not valid gzip: {0}")]
    Gzip(String),
    #[error("decompresses to more than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("not UTF-8 text (byte {offset}); compressed keys must end in {GZIP_SUFFIX}")]
    NotUtf8 { offset: usize },
}

/// One key of a ConfigMap, decoded.
pub type Decoded = (String, Result<Text, DecodeError>);

/// A key's text as the cache holds it.
#[derive(Clone)]
pub enum Text {
    /// A `data` key, or a `binaryData` key that is not compressed.
    Plain(Arc<str>),
    Gzip(Arc<Gzipped>),
}

/// A compressed key: checked when fetched (gunzipped, within the limit,
/// UTF-8), so decoding it again gives the same text.
pub struct Gzipped {
    bytes: Box<[u8]>,
    limit: usize,
    /// The text decoded at fetch, until a parse takes it.
    decoded: Mutex<Option<Arc<str>>>,
}

impl Text {
    pub fn plain(text: &str) -> Self {
        Text::Plain(Arc::from(text))
    }

    /// The text; a compressed one is gunzipped again unless its decoded
    /// copy is still held.
    pub fn get(&self) -> Result<Arc<str>, DecodeError> {
        match self {
            Text::Plain(t) => Ok(t.clone()),
            Text::Gzip(g) => {
                let held = g.decoded.lock().unwrap_or_else(|p| p.into_inner()).clone();
                match held {
                    Some(t) => Ok(t),
                    None => utf8(gunzip(&g.bytes, g.limit)?),
                }
            }
        }
    }

    /// The text for a parse: as [`Text::get`], but a compressed text's
    /// decoded copy is released (the parse is what the cache keeps).
    pub fn take(&self) -> Result<Arc<str>, DecodeError> {
        if let Text::Gzip(g) = self
            && let Some(t) = g.decoded.lock().unwrap_or_else(|p| p.into_inner()).take()
        {
            return Ok(t);
        }
        self.get()
    }

    /// Bytes held: the compressed bytes and a decoded copy if one is held.
    pub fn held_bytes(&self) -> usize {
        match self {
            Text::Plain(t) => t.len(),
            Text::Gzip(g) => {
                let decoded = g.decoded.lock().unwrap_or_else(|p| p.into_inner());
                g.bytes.len() + decoded.as_ref().map_or(0, |t| t.len())
            }
        }
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Self {
        Text::plain(text)
    }
}

/// Texts are equal when they read the same (tests compare sources).
impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Text::Gzip(a), Text::Gzip(b)) if Arc::ptr_eq(a, b) || a.bytes == b.bytes => true,
            _ => self.get().ok() == other.get().ok(),
        }
    }
}

impl Eq for Text {}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Text::Plain(t) => write!(f, "Plain({} bytes)", t.len()),
            Text::Gzip(g) => write!(f, "Gzip({} bytes)", g.bytes.len()),
        }
    }
}

/// The texts of `cm`: of `key` only when given (None if it has no such
/// key), else of every key, in key order (`data` and `binaryData` merged;
/// the API server refuses a key in both).
pub fn decode(cm: &ConfigMap, key: Option<&str>, limit: usize) -> Option<Vec<Decoded>> {
    let empty = BTreeMap::new();
    let data = cm.data.as_ref().unwrap_or(&empty);
    let empty_bin = BTreeMap::new();
    let binary = cm.binary_data.as_ref().unwrap_or(&empty_bin);
    let text = |k: &String, v: &String| -> Decoded {
        let r = if v.len() > limit {
            Err(DecodeError::TooLarge { limit })
        } else {
            Ok(Text::plain(v))
        };
        (k.clone(), r)
    };
    let bin = |k: &String, v: &k8s_openapi::ByteString| -> Decoded {
        (k.clone(), decode_binary(k, &v.0, limit))
    };
    match key {
        Some(k) => {
            if let Some((k, v)) = data.get_key_value(k) {
                Some(vec![text(k, v)])
            } else {
                binary.get_key_value(k).map(|(k, v)| vec![bin(k, v)])
            }
        }
        None => {
            let mut out: Vec<Decoded> = data.iter().map(|(k, v)| text(k, v)).collect();
            out.extend(binary.iter().map(|(k, v)| bin(k, v)));
            out.sort_by(|a, b| a.0.cmp(&b.0));
            Some(out)
        }
    }
}

/// The bytes of `cm`'s `data` and `binaryData` values.
pub fn data_bytes(cm: &ConfigMap) -> usize {
    let data = cm.data.iter().flatten().map(|(_, v)| v.len());
    let binary = cm.binary_data.iter().flatten().map(|(_, v)| v.0.len());
    data.chain(binary).sum()
}

fn decode_binary(key: &str, bytes: &[u8], limit: usize) -> Result<Text, DecodeError> {
    if key.ends_with(GZIP_SUFFIX) {
        let text = utf8(gunzip(bytes, limit)?)?;
        return Ok(Text::Gzip(Arc::new(Gzipped {
            bytes: bytes.into(),
            limit,
            decoded: Mutex::new(Some(text)),
        })));
    }
    if bytes.len() > limit {
        return Err(DecodeError::TooLarge { limit });
    }
    utf8(bytes.to_vec()).map(Text::Plain)
}

fn utf8(raw: Vec<u8>) -> Result<Arc<str>, DecodeError> {
    String::from_utf8(raw)
        .map(Arc::from)
        .map_err(|e| DecodeError::NotUtf8 {
            offset: e.utf8_error().valid_up_to(),
        })
}

/// Decompresses (several gzip members, as `cat a.gz b.gz` makes, read in
/// turn), stopping with an error past `limit` bytes.
fn gunzip(bytes: &[u8], limit: usize) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::with_capacity(bytes.len().saturating_mul(4).min(limit));
    let mut reader = flate2::read::MultiGzDecoder::new(bytes).take(limit as u64 + 1);
    reader
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::Gzip(e.to_string()))?;
    if out.len() > limit {
        return Err(DecodeError::TooLarge { limit });
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;

    pub fn gzip(text: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(text).unwrap();
        e.finish().unwrap()
    }

    fn cm(data: &[(&str, &str)], binary: &[(&str, Vec<u8>)]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            binary_data: Some(
                binary
                    .iter()
                    .map(|(k, v)| (k.to_string(), k8s_openapi::ByteString(v.clone())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn texts(d: Vec<Decoded>) -> Vec<(String, Result<String, DecodeError>)> {
        d.into_iter()
            .map(|(k, r)| (k, r.map(|t| t.get().unwrap().to_string())))
            .collect()
    }

    #[test]
    fn data_and_gzip_binary_data_are_read_in_key_order() {
        let c = cm(
            &[("b", "plain")],
            &[
                ("a.entries.txt.gz", gzip(b"packed")),
                ("c.txt", b"raw".to_vec()),
            ],
        );
        assert_eq!(
            texts(decode(&c, None, MAX_TEXT_BYTES).unwrap()),
            [
                ("a.entries.txt.gz".into(), Ok("packed".into())),
                ("b".into(), Ok("plain".into())),
                ("c.txt".into(), Ok("raw".into())),
            ]
        );
        let one = decode(&c, Some("a.entries.txt.gz"), MAX_TEXT_BYTES).unwrap();
        assert_eq!(
            texts(one),
            [("a.entries.txt.gz".into(), Ok("packed".into()))]
        );
        assert!(decode(&c, Some("nope"), MAX_TEXT_BYTES).is_none());
        // Concatenated gzip members read as one text.
        let mut two = gzip(b"one\n");
        two.extend(gzip(b"two\n"));
        let c = cm(&[], &[("x.gz", two)]);
        assert_eq!(
            &*decode(&c, None, 100).unwrap()[0]
                .1
                .clone()
                .unwrap()
                .get()
                .unwrap(),
            "one\ntwo\n"
        );
    }

    #[test]
    fn a_compressed_text_keeps_its_bytes_and_gives_its_decoded_copy_to_one_parse() {
        let body = "10.0.0.1 10.0.0.2 1\n".repeat(1000);
        let packed = gzip(body.as_bytes());
        let c = cm(&[("plain", "a b 1\n")], &[("e.gz", packed.clone())]);
        let d = decode(&c, None, MAX_TEXT_BYTES).unwrap();
        let (gz, plain) = (d[0].1.clone().unwrap(), d[1].1.clone().unwrap());
        assert!(matches!(gz, Text::Gzip(_)) && matches!(plain, Text::Plain(_)));
        assert_eq!(gz.held_bytes(), packed.len() + body.len());
        assert_eq!(&*gz.take().unwrap(), body);
        // Taken: only the compressed bytes are held, and the text is
        // decoded again for whoever asks next.
        assert_eq!(gz.held_bytes(), packed.len());
        assert_eq!(&*gz.get().unwrap(), body);
        assert_eq!(&*gz.take().unwrap(), body);
        assert_eq!(gz.held_bytes(), packed.len());
        // A plain text is held as it is.
        assert_eq!(&*plain.take().unwrap(), "a b 1\n");
        assert_eq!(plain.held_bytes(), 6);
        assert_eq!(gz, Text::plain(&body));
        assert_ne!(plain, Text::plain("a b 2\n"));
    }

    #[test]
    fn a_config_maps_data_bytes_count_both_maps() {
        let c = cm(&[("a", "12345")], &[("b.gz", vec![0; 7])]);
        assert_eq!(data_bytes(&c), 12);
        assert_eq!(data_bytes(&ConfigMap::default()), 0);
    }

    #[test]
    fn bombs_garbage_and_binary_are_refused_by_variant() {
        // 10 MB of zeros compress to ~10 kB; the limit stops them early.
        let bomb = gzip(&vec![b'0'; 10_000_000]);
        assert!(bomb.len() < 20_000);
        let c = cm(
            &[],
            &[
                ("bomb.gz", bomb),
                ("bad.gz", b"not gzip at all".to_vec()),
                ("bin", vec![b'a', 0xff, 0xfe]),
                ("packed-bin.gz", gzip(&[0xc3, 0x28])),
            ],
        );
        let d = decode(&c, None, 1_000_000).unwrap();
        let errs: Vec<_> = d.into_iter().map(|(k, r)| (k, r.unwrap_err())).collect();
        assert!(
            matches!(&errs[0], (k, DecodeError::Gzip(_)) if k == "bad.gz"),
            "{errs:?}"
        );
        assert_eq!(errs[1], ("bin".into(), DecodeError::NotUtf8 { offset: 1 }));
        assert_eq!(
            errs[2],
            ("bomb.gz".into(), DecodeError::TooLarge { limit: 1_000_000 })
        );
        assert_eq!(
            errs[3],
            ("packed-bin.gz".into(), DecodeError::NotUtf8 { offset: 0 })
        );
        // Plain text over the limit too.
        let c = cm(&[("big", &"x".repeat(101))], &[]);
        assert_eq!(
            decode(&c, None, 100).unwrap()[0].1,
            Err(DecodeError::TooLarge { limit: 100 })
        );
    }
}
