//! The pure half of a `url` artifact source: checking the spec (URL,
//! digest), the headers a Secret gives, where a redirect leads, and
//! receiving the body ([`Receiver`]: a size cap and a sha256 over the
//! bytes as they arrive). Why a download failed is a [`FetchError`]; its
//! messages name the host, never the whole URL (a query string may hold a
//! token).

use hyper::Uri;
use hyper::header::{HeaderName, HeaderValue};
use p4fleet_crds::UrlSource;
use sha2::{Digest, Sha256};

/// Redirects followed before giving up (GitHub release assets and OCI
/// registry blobs answer with one or two).
pub const MAX_REDIRECTS: usize = 5;

/// Key of the CA Secret that holds the PEM CA certificate(s).
pub const CA_KEY: &str = "ca.crt";

/// Which Secret of a source a problem is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretUse {
    Ca,
    Headers,
}

impl SecretUse {
    /// The field under `url` that names the Secret.
    pub fn field(self) -> &'static str {
        match self {
            SecretUse::Ca => "caSecretRef",
            SecretUse::Headers => "headersSecretRef",
        }
    }
}

/// Why a `url` source gave no bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("invalid url: {reason}")]
    InvalidUrl { reason: String },
    #[error("sha256: {value:?} is not 64 lowercase hex digits")]
    InvalidDigest { value: String },
    #[error("{}: Secret {name} not found", which.field())]
    SecretNotFound { which: SecretUse, name: String },
    #[error("{}: Secret {name}: {reason}", which.field())]
    SecretInvalid {
        which: SecretUse,
        name: String,
        reason: String,
    },
    #[error("{host} answered HTTP {code}")]
    Status { host: String, code: u16 },
    #[error("{host}: the artifact is larger than the operator's limit of {limit} bytes (--artifact-max-bytes){}",
        declared.map(|d| format!("; the server declared {d} bytes")).unwrap_or_default())]
    TooLarge {
        host: String,
        limit: u64,
        declared: Option<u64>,
    },
    #[error("{host}: no complete answer within {secs} s (--artifact-fetch-timeout-seconds)")]
    Timeout { host: String, secs: u64 },
    #[error("{host}: TLS: {reason}")]
    Tls { host: String, reason: String },
    #[error("{host}: cannot connect: {reason}")]
    Connect { host: String, reason: String },
    #[error("{host}: download failed: {reason}")]
    Transfer { host: String, reason: String },
    #[error("{host}: more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects { host: String },
    #[error(
        "{host}: digest mismatch: spec says sha256 {expected}, the downloaded {size} bytes have {actual}"
    )]
    DigestMismatch {
        host: String,
        expected: String,
        actual: String,
        size: u64,
    },
}

impl FetchError {
    /// The condition reason a user acts on.
    pub fn reason(&self) -> &'static str {
        match self {
            FetchError::InvalidUrl { .. }
            | FetchError::InvalidDigest { .. }
            | FetchError::SecretInvalid { .. } => "InvalidArtifactSource",
            FetchError::SecretNotFound { .. } => "SourceNotFound",
            FetchError::DigestMismatch { .. } => "ArtifactDigestMismatch",
            FetchError::TooLarge { .. } => "ArtifactTooLarge",
            FetchError::Status { .. }
            | FetchError::Timeout { .. }
            | FetchError::Tls { .. }
            | FetchError::Connect { .. }
            | FetchError::Transfer { .. }
            | FetchError::TooManyRedirects { .. } => "ArtifactFetchFailed",
        }
    }
}

impl FetchError {
    /// Whether a download was tried and failed (the server, the network,
    /// or the bytes it gave): tried again only on the backoff. The others
    /// (a malformed source, a missing Secret) fail before any request.
    pub fn is_download_failure(&self) -> bool {
        matches!(
            self,
            FetchError::Status { .. }
                | FetchError::Timeout { .. }
                | FetchError::Tls { .. }
                | FetchError::Connect { .. }
                | FetchError::Transfer { .. }
                | FetchError::TooManyRedirects { .. }
                | FetchError::DigestMismatch { .. }
                | FetchError::TooLarge { .. }
        )
    }
}

/// A source that passed its checks: where to start and what to expect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub uri: Uri,
    /// The expected sha256, lowercase hex.
    pub sha256: String,
}

/// Checks a source's URL (http or https, with a host) and digest; the
/// schema says the same, this guards objects stored before it did.
pub fn check(src: &UrlSource) -> Result<Checked, FetchError> {
    let sha = &src.sha256;
    if sha.len() != 64
        || !sha
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(FetchError::InvalidDigest { value: sha.clone() });
    }
    let uri = parse_http_uri(&src.url)?;
    Ok(Checked {
        uri,
        sha256: sha.clone(),
    })
}

fn parse_http_uri(s: &str) -> Result<Uri, FetchError> {
    let uri: Uri = s
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| FetchError::InvalidUrl {
            reason: e.to_string(),
        })?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        other => {
            return Err(FetchError::InvalidUrl {
                reason: format!(
                    "scheme {:?} is not http or https",
                    other.unwrap_or_default()
                ),
            });
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(FetchError::InvalidUrl {
            reason: "no host".into(),
        });
    }
    Ok(uri)
}

/// The host of `uri`, for messages.
pub fn host(uri: &Uri) -> String {
    uri.authority()
        .map(|a| {
            a.as_str()
                .rsplit('@')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .unwrap_or_default()
}

/// Where a redirect from `from` to `location` leads: an absolute URL, or a
/// path on the same server.
pub fn redirect(from: &Uri, location: &str) -> Result<Uri, FetchError> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return parse_http_uri(location);
    }
    if !location.starts_with('/') || location.starts_with("//") {
        return Err(FetchError::InvalidUrl {
            reason: format!("{}: unsupported redirect location", host(from)),
        });
    }
    let scheme = from.scheme_str().unwrap_or("https");
    let authority = from.authority().map(|a| a.as_str()).unwrap_or_default();
    parse_http_uri(&format!("{scheme}://{authority}{location}"))
}

/// Whether `to` is the same origin (scheme, host, port) as `from`: the
/// headers Secret (a token) is sent only there, never across a redirect
/// to another server.
pub fn same_origin(from: &Uri, to: &Uri) -> bool {
    from.scheme() == to.scheme() && from.authority() == to.authority()
}

/// The headers a headers Secret gives: each key a header name, its value
/// the header's value.
pub fn headers<'a>(
    name: &str,
    data: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<Vec<(HeaderName, HeaderValue)>, FetchError> {
    let bad = |reason: String| FetchError::SecretInvalid {
        which: SecretUse::Headers,
        name: name.into(),
        reason,
    };
    data.into_iter()
        .map(|(k, v)| {
            let n = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| bad(format!("key {k:?} is not an HTTP header name")))?;
            // Secrets written with a trailing newline (`echo`) are common.
            let trimmed = v.strip_suffix(b"\n").unwrap_or(v);
            let v = HeaderValue::from_bytes(trimmed)
                .map_err(|_| bad(format!("key {k:?}: not a valid HTTP header value")))?;
            Ok((n, v))
        })
        .collect()
}

/// A body being received: counts bytes against the cap and hashes them.
pub struct Receiver {
    host: String,
    limit: u64,
    hasher: Sha256,
    bytes: Vec<u8>,
}

impl Receiver {
    /// Starts a body from `host`; a declared length over `limit` is refused
    /// before any byte is read.
    pub fn new(host: String, limit: u64, declared: Option<u64>) -> Result<Self, FetchError> {
        if let Some(d) = declared.filter(|d| *d > limit) {
            return Err(FetchError::TooLarge {
                host,
                limit,
                declared: Some(d),
            });
        }
        // A declared length sizes the buffer once (it is at most `limit`).
        let capacity = declared.unwrap_or(0).min(limit) as usize;
        Ok(Receiver {
            host,
            limit,
            hasher: Sha256::new(),
            bytes: Vec::with_capacity(capacity),
        })
    }

    /// Takes the next chunk.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), FetchError> {
        if (self.bytes.len() + chunk.len()) as u64 > self.limit {
            return Err(FetchError::TooLarge {
                host: std::mem::take(&mut self.host),
                limit: self.limit,
                declared: None,
            });
        }
        self.hasher.update(chunk);
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// The bytes, when their sha256 is `expected`.
    pub fn finish(self, expected: &str) -> Result<Vec<u8>, FetchError> {
        let actual = hex::encode(self.hasher.finalize());
        if actual != expected {
            return Err(FetchError::DigestMismatch {
                host: self.host,
                expected: expected.into(),
                actual,
                size: self.bytes.len() as u64,
            });
        }
        Ok(self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(url: &str, sha: &str) -> UrlSource {
        UrlSource {
            url: url.into(),
            sha256: sha.into(),
            ..Default::default()
        }
    }

    fn sha(b: &[u8]) -> String {
        hex::encode(Sha256::digest(b))
    }

    #[test]
    fn sources_need_an_http_url_with_a_host_and_a_lowercase_sha256() {
        let good = sha(b"x");
        let c = check(&src("https://user:pw@example.com:8443/a/b.json?t=1", &good)).unwrap();
        assert_eq!(
            host(&c.uri),
            "example.com:8443",
            "no credentials in messages"
        );
        assert_eq!(c.sha256, good);
        assert!(check(&src("http://10.0.0.1/x", &good)).is_ok());

        let e = |url: &str, sha: &str| check(&src(url, sha)).unwrap_err();
        assert!(matches!(
            e("ftp://h/x", &good),
            FetchError::InvalidUrl { .. }
        ));
        assert!(matches!(
            e("/just/a/path", &good),
            FetchError::InvalidUrl { .. }
        ));
        assert!(matches!(
            e("https://", &good),
            FetchError::InvalidUrl { .. }
        ));
        assert_eq!(
            e("https://h/x", &good.to_uppercase()),
            FetchError::InvalidDigest {
                value: good.to_uppercase()
            }
        );
        assert!(matches!(
            e("https://h/x", "abc"),
            FetchError::InvalidDigest { .. }
        ));
        assert_eq!(e("https://h/x", "abc").reason(), "InvalidArtifactSource");
    }

    #[test]
    fn redirects_resolve_and_headers_stay_with_their_origin() {
        let from: Uri = "https://github.com/o/r/releases/download/v1/a.bin"
            .parse()
            .unwrap();
        let abs = redirect(&from, "https://objects.example.net/x?sig=1").unwrap();
        assert_eq!(host(&abs), "objects.example.net");
        assert!(!same_origin(&from, &abs));
        let rel = redirect(&from, "/o/r/other").unwrap();
        assert_eq!(rel.to_string(), "https://github.com/o/r/other");
        assert!(same_origin(&from, &rel));
        let downgrade: Uri = "http://github.com/x".parse().unwrap();
        assert!(
            !same_origin(&from, &downgrade),
            "scheme is part of the origin"
        );
        assert!(redirect(&from, "relative/path").is_err());
        assert!(redirect(&from, "//other.host/x").is_err());
        assert!(redirect(&from, "file:///etc/passwd").is_err());
    }

    #[test]
    fn a_headers_secret_gives_one_header_per_key() {
        let h = headers(
            "tok",
            [
                ("Authorization", b"Bearer abc\n".as_slice()),
                ("X-Extra", b"1".as_slice()),
            ],
        )
        .unwrap();
        assert_eq!(h[0].0, "authorization");
        assert_eq!(h[0].1, "Bearer abc", "a trailing newline is dropped");
        assert_eq!(h.len(), 2);
        let e = headers("tok", [("bad name", b"v".as_slice())]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "headersSecretRef: Secret tok: key \"bad name\" is not an HTTP header name"
        );
        let e = headers("tok", [("X", b"a\rb".as_slice())]).unwrap_err();
        assert_eq!(e.reason(), "InvalidArtifactSource");
    }

    #[test]
    fn the_receiver_caps_the_size_and_checks_the_digest() {
        let body = vec![7u8; 1000];
        let mut r = Receiver::new("h".into(), 1000, Some(1000)).unwrap();
        r.push(&body[..400]).unwrap();
        r.push(&body[400..]).unwrap();
        assert_eq!(r.finish(&sha(&body)).unwrap(), body);

        // Declared too large: refused before reading.
        let e = Receiver::new("h".into(), 999, Some(1000)).err().unwrap();
        assert_eq!(e.reason(), "ArtifactTooLarge");
        assert!(e.to_string().contains("declared 1000 bytes"), "{e}");
        // Undeclared (chunked) and too large: refused at the chunk that crosses.
        let mut r = Receiver::new("h".into(), 999, None).unwrap();
        r.push(&body[..999]).unwrap();
        assert_eq!(
            r.push(&body[999..]).unwrap_err(),
            FetchError::TooLarge {
                host: "h".into(),
                limit: 999,
                declared: None
            }
        );

        let mut r = Receiver::new("h".into(), 1000, None).unwrap();
        r.push(b"other").unwrap();
        let e = r.finish(&sha(&body)).unwrap_err();
        assert_eq!(e.reason(), "ArtifactDigestMismatch");
        assert_eq!(
            e.to_string(),
            format!(
                "h: digest mismatch: spec says sha256 {}, the downloaded 5 bytes have {}",
                sha(&body),
                sha(b"other")
            )
        );
    }
}
