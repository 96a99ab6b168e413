//! A ConfigMap's entry texts: `data` keys as they are, `binaryData` keys
//! ending in [`GZIP_SUFFIX`] gunzipped, other `binaryData` keys read as
//! UTF-8. Every text is bounded by [`MAX_TEXT_BYTES`], checked while
//! decompressing, so a small compressed bomb never becomes a huge
//! allocation. Pure (CPU only; callers run it on the blocking pool).

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

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
pub type Decoded = (String, Result<Arc<str>, DecodeError>);

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
            Ok(Arc::from(v.as_str()))
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

fn decode_binary(key: &str, bytes: &[u8], limit: usize) -> Result<Arc<str>, DecodeError> {
    let raw = if key.ends_with(GZIP_SUFFIX) {
        gunzip(bytes, limit)?
    } else {
        if bytes.len() > limit {
            return Err(DecodeError::TooLarge { limit });
        }
        bytes.to_vec()
    };
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
            .map(|(k, r)| (k, r.map(|t| t.to_string())))
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
            &*decode(&c, None, 100).unwrap()[0].1.clone().unwrap(),
            "one\ntwo\n"
        );
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
