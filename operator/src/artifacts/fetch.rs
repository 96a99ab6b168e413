//! Downloading `url` artifact sources: the Secrets a source names
//! ([`credentials`]), one download per digest at a time with a size cap,
//! a timeout and the digest check ([`Fetcher::get`]), and the downloads
//! kept by digest ([`super::digest_cache`]). TLS is rustls with the one
//! crypto provider the process installed (ring, as for kube and gRPC).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::header::{CONTENT_LENGTH, HeaderName, HeaderValue, LOCATION, USER_AGENT};
use hyper::{Request, StatusCode};
use hyper_rustls::HttpsConnectorBuilder;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use p4fleet_crds::UrlSource;
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::digest_cache::DigestCache;
use super::url_source::{
    CA_KEY, Checked, FetchError, MAX_REDIRECTS, Receiver, SecretUse, headers, host, redirect,
    same_origin,
};

/// How much a download may take (operator flags `--artifact-*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchLimits {
    /// Largest artifact accepted, in bytes.
    pub max_bytes: u64,
    /// Time for one download, redirects included.
    pub timeout: Duration,
    /// Downloaded artifacts kept in memory, in bytes.
    pub cache_bytes: u64,
}

impl Default for FetchLimits {
    fn default() -> Self {
        FetchLimits {
            max_bytes: 256 << 20,
            timeout: Duration::from_secs(120),
            cache_bytes: 512 << 20,
        }
    }
}

/// What a download sends besides the request: from the source's Secrets.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// Roots an https server must chain to; None: the system's.
    pub ca: Option<RootCertStore>,
    /// Sent only to the URL's own origin.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// Reads the Secrets `src` names in `ns`. A missing or unusable Secret is
/// the source's problem (`Ok(Err)`); a failed request is retried.
pub async fn credentials(
    client: &kube::Client,
    ns: &str,
    src: &UrlSource,
) -> Result<Result<Credentials, FetchError>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut out = Credentials::default();
    if let Some(r) = &src.ca_secret_ref {
        let data = match secret_data(&api, SecretUse::Ca, &r.name).await? {
            Ok(d) => d,
            Err(e) => return Ok(Err(e)),
        };
        let bad = |reason: String| FetchError::SecretInvalid {
            which: SecretUse::Ca,
            name: r.name.clone(),
            reason,
        };
        let Some(pem) = data.get(CA_KEY) else {
            return Ok(Err(bad(format!("has no key {CA_KEY}"))));
        };
        match roots(pem) {
            Ok(store) => out.ca = Some(store),
            Err(reason) => return Ok(Err(bad(format!("{CA_KEY}: {reason}")))),
        }
    }
    if let Some(r) = &src.headers_secret_ref {
        let data = match secret_data(&api, SecretUse::Headers, &r.name).await? {
            Ok(d) => d,
            Err(e) => return Ok(Err(e)),
        };
        let pairs = data.iter().map(|(k, v)| (k.as_str(), v.as_slice()));
        match headers(&r.name, pairs) {
            Ok(h) => out.headers = h,
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(out))
}

async fn secret_data(
    api: &Api<Secret>,
    which: SecretUse,
    name: &str,
) -> Result<Result<std::collections::BTreeMap<String, Vec<u8>>, FetchError>, kube::Error> {
    match api.get_opt(name).await {
        Ok(None) => Ok(Err(FetchError::SecretNotFound {
            which,
            name: name.into(),
        })),
        Ok(Some(s)) => Ok(Ok(s
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect())),
        // RBAC: a condition that says which Secret, not an endless retry.
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Err(FetchError::SecretInvalid {
            which,
            name: name.into(),
            reason: "the operator may not read it (chart value rbac.artifactSecretNamespaces)"
                .into(),
        })),
        Err(e) => Err(e),
    }
}

fn roots(pem: &[u8]) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem) {
        let c = c.map_err(|e| format!("not PEM: {e}"))?;
        store
            .add(c)
            .map_err(|e| format!("not a CA certificate: {e}"))?;
    }
    if store.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(store)
}

/// The system's trust store, loaded once.
fn system_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut store = RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::warn!(error = %e, "loading the system's CA certificates");
        }
        let (added, ignored) = store.add_parsable_certificates(found.certs);
        tracing::debug!(
            added,
            ignored,
            "system CA certificates for artifact downloads"
        );
        store
    })
}

/// Downloads by digest: a cache of checked bytes and one download per
/// digest at a time (a program on many Switches is fetched once).
pub struct Fetcher {
    limits: FetchLimits,
    cache: Mutex<DigestCache>,
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    downloads: AtomicU64,
}

impl Fetcher {
    pub fn new(limits: FetchLimits) -> Self {
        Fetcher {
            cache: Mutex::new(DigestCache::new(limits.cache_bytes)),
            limits,
            inflight: Mutex::default(),
            downloads: AtomicU64::new(0),
        }
    }

    /// The checked bytes of `sha256`, when kept.
    pub fn cached(&self, sha256: &str) -> Option<Arc<Vec<u8>>> {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(sha256)
    }

    /// Downloads started so far (for logs and tests).
    pub fn downloads(&self) -> u64 {
        self.downloads.load(Ordering::Relaxed)
    }

    /// The bytes of `src`: from the cache, or downloaded and checked
    /// against its digest (then kept).
    pub async fn get(
        &self,
        src: &Checked,
        creds: &Credentials,
    ) -> Result<Arc<Vec<u8>>, FetchError> {
        if let Some(hit) = self.cached(&src.sha256) {
            return Ok(hit);
        }
        let gate = self
            .inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(src.sha256.clone())
            .or_default()
            .clone();
        let _one = gate.lock().await;
        // Whoever held the gate may have fetched it meanwhile.
        let out = match self.cached(&src.sha256) {
            Some(hit) => Ok(hit),
            None => self.download(src, creds).await.map(|bytes| {
                let bytes = Arc::new(bytes);
                self.cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .put(&src.sha256, bytes.clone());
                bytes
            }),
        };
        self.inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&src.sha256);
        out
    }

    async fn download(&self, src: &Checked, creds: &Credentials) -> Result<Vec<u8>, FetchError> {
        let n = self.downloads.fetch_add(1, Ordering::Relaxed) + 1;
        let started = std::time::Instant::now();
        let h = host(&src.uri);
        let secs = self.limits.timeout.as_secs();
        let out = tokio::time::timeout(
            self.limits.timeout,
            download(src, creds, self.limits.max_bytes),
        )
        .await
        .unwrap_or_else(|_| {
            Err(FetchError::Timeout {
                host: h.clone(),
                secs,
            })
        });
        match &out {
            Ok(b) => tracing::info!(host = %h, bytes = b.len(), sha256 = %src.sha256,
                ms = started.elapsed().as_millis() as u64, downloads = n, "artifact downloaded"),
            Err(e) => {
                tracing::warn!(host = %h, sha256 = %src.sha256, error = %e, "artifact download failed")
            }
        }
        out
    }
}

type HttpsClient = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Empty<Bytes>,
>;

fn client(creds: &Credentials) -> Result<HttpsClient, FetchError> {
    // The provider the process installed (ring); ring again in unit tests.
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let roots = creds.ca.clone().unwrap_or_else(|| system_roots().clone());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| FetchError::Tls {
            host: String::new(),
            reason: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// One download, following redirects; the body is hashed as it arrives.
async fn download(src: &Checked, creds: &Credentials, limit: u64) -> Result<Vec<u8>, FetchError> {
    let client = client(creds)?;
    let mut uri = src.uri.clone();
    for _ in 0..=MAX_REDIRECTS {
        let h = host(&uri);
        let mut req = Request::get(uri.clone())
            .header(USER_AGENT, concat!("p4fleet/", env!("CARGO_PKG_VERSION")));
        if same_origin(&src.uri, &uri) {
            for (k, v) in &creds.headers {
                req = req.header(k, v);
            }
        }
        let req = req.body(Empty::new()).map_err(|e| FetchError::InvalidUrl {
            reason: e.to_string(),
        })?;
        let resp = client
            .request(req)
            .await
            .map_err(|e| request_error(&h, &e))?;
        let status = resp.status();
        if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
            let loc = resp
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| FetchError::Status {
                    host: h.clone(),
                    code: status.as_u16(),
                })?;
            uri = redirect(&uri, loc)?;
            continue;
        }
        if !status.is_success() {
            return Err(FetchError::Status {
                host: h,
                code: status.as_u16(),
            });
        }
        let declared = resp
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let mut rx = Receiver::new(h.clone(), limit, declared)?;
        let mut body = resp.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| FetchError::Transfer {
                host: h.clone(),
                reason: e.to_string(),
            })?;
            if let Ok(data) = frame.into_data() {
                rx.push(&data)?;
            }
        }
        return rx.finish(&src.sha256);
    }
    Err(FetchError::TooManyRedirects {
        host: host(&src.uri),
    })
}

/// The rustls error in `e`, also when io::Errors wrap it (hyper-rustls
/// wraps tokio-rustls's io::Error once more, and an io::Error's `source`
/// skips the error it wraps).
fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(t) = e.downcast_ref::<rustls::Error>() {
        return Some(t);
    }
    let inner = e.downcast_ref::<std::io::Error>()?.get_ref()?;
    rustls_error(inner)
}

/// A failed request as TLS, connect or transfer failure, told apart by
/// the error types in its chain (a rustls error anywhere is TLS).
fn request_error(host: &str, e: &hyper_util::client::legacy::Error) -> FetchError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut innermost = e.to_string();
    while let Some(c) = cause {
        if let Some(t) = rustls_error(c) {
            return FetchError::Tls {
                host: host.into(),
                reason: t.to_string(),
            };
        }
        innermost = c.to_string();
        cause = c.source();
    }
    if e.is_connect() {
        FetchError::Connect {
            host: host.into(),
            reason: innermost,
        }
    } else {
        FetchError::Transfer {
            host: host.into(),
            reason: innermost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One request seen by [`serve`]: path and its Authorization header.
    type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

    /// A loopback HTTP/1.1 server answering `route(path)` as (status line,
    /// extra headers, body).
    async fn serve(
        route: fn(&str, u16) -> (&'static str, String, Vec<u8>),
    ) -> (std::net::SocketAddr, Seen) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen: Seen = Arc::default();
        let s2 = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let seen = s2.clone();
                tokio::spawn(async move {
                    let mut req = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&req).to_string();
                    let path = text.split_whitespace().nth(1).unwrap_or("").to_string();
                    let auth = text
                        .lines()
                        .find_map(|l| l.strip_prefix("authorization: "))
                        .map(str::to_string);
                    seen.lock().unwrap().push((path.clone(), auth));
                    let (status, headers, body) = route(&path, addr.port());
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\n{headers}Connection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = s.write_all(head.as_bytes()).await;
                    let _ = s.write_all(&body).await;
                });
            }
        });
        (addr, seen)
    }

    const BODY: &[u8] = b"a large bmv2 json";

    fn route(path: &str, port: u16) -> (&'static str, String, Vec<u8>) {
        match path {
            "/a.json" => ("200 OK", String::new(), BODY.to_vec()),
            // Same origin, relative location.
            "/moved" => ("302 Found", "Location: /a.json\r\n".into(), Vec::new()),
            // Another origin (localhost is not 127.0.0.1): headers stay behind.
            "/elsewhere" => (
                "302 Found",
                format!("Location: http://localhost:{port}/a.json\r\n"),
                Vec::new(),
            ),
            "/loop" => ("302 Found", "Location: /loop\r\n".into(), Vec::new()),
            _ => ("404 Not Found", String::new(), b"no".to_vec()),
        }
    }

    fn checked(addr: std::net::SocketAddr, path: &str, body: &[u8]) -> Checked {
        Checked {
            uri: format!("http://{addr}{path}").parse().unwrap(),
            sha256: hex::encode(Sha256::digest(body)),
        }
    }

    fn token() -> Credentials {
        Credentials {
            ca: None,
            headers: vec![(
                HeaderName::from_static("authorization"),
                HeaderValue::from_static("Bearer t"),
            )],
        }
    }

    #[tokio::test]
    async fn downloads_are_checked_kept_by_digest_and_fetched_once() {
        let (addr, seen) = serve(route).await;
        let f = Arc::new(Fetcher::new(FetchLimits::default()));
        let src = checked(addr, "/a.json", BODY);
        // Four at once: one download.
        let gets = (0..4).map(|_| {
            let (f, src) = (f.clone(), src.clone());
            tokio::spawn(async move { f.get(&src, &token()).await })
        });
        for g in gets {
            assert_eq!(g.await.unwrap().unwrap().as_slice(), BODY);
        }
        assert_eq!(f.downloads(), 1);
        assert_eq!(seen.lock().unwrap().len(), 1);
        assert_eq!(
            seen.lock().unwrap()[0].1.as_deref(),
            Some("Bearer t"),
            "headers go to the URL's own origin"
        );

        // A wrong digest: an error, and nothing kept.
        let wrong = checked(addr, "/a.json", b"other");
        let e = f.get(&wrong, &token()).await.unwrap_err();
        assert_eq!(e.reason(), "ArtifactDigestMismatch");
        assert!(f.cached(&wrong.sha256).is_none());
        // Kept by digest: the same bytes named at another URL are a hit.
        assert_eq!(
            f.get(&checked(addr, "/other-name.json", BODY), &token())
                .await
                .unwrap()
                .as_slice(),
            BODY
        );
        assert_eq!(f.downloads(), 2);
        let e = f
            .get(&checked(addr, "/nope", b"never served"), &token())
            .await
            .unwrap_err();
        assert_eq!(
            e,
            FetchError::Status {
                host: addr.to_string(),
                code: 404
            }
        );
    }

    #[tokio::test]
    async fn redirects_are_followed_without_carrying_headers_to_another_origin() {
        let (addr, seen) = serve(route).await;
        let f = Fetcher::new(FetchLimits {
            cache_bytes: 0,
            ..Default::default()
        });
        let got = f
            .get(&checked(addr, "/moved", BODY), &token())
            .await
            .unwrap();
        assert_eq!(got.as_slice(), BODY);
        let got = f
            .get(&checked(addr, "/elsewhere", BODY), &token())
            .await
            .unwrap();
        assert_eq!(got.as_slice(), BODY);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen.iter().map(|(_, a)| a.is_some()).collect::<Vec<_>>(),
            [true, true, true, false],
            "{seen:?}"
        );
        let e = f
            .get(&checked(addr, "/loop", BODY), &token())
            .await
            .unwrap_err();
        assert_eq!(e.reason(), "ArtifactFetchFailed");
        assert!(matches!(e, FetchError::TooManyRedirects { .. }), "{e}");
        assert_eq!(f.downloads(), 3, "capacity 0 keeps nothing");
    }

    #[tokio::test]
    async fn size_connect_and_tls_failures_are_told_apart() {
        let (addr, _) = serve(route).await;
        let small = Fetcher::new(FetchLimits {
            max_bytes: 4,
            ..Default::default()
        });
        let e = small
            .get(&checked(addr, "/a.json", BODY), &Credentials::default())
            .await
            .unwrap_err();
        assert_eq!(
            e,
            FetchError::TooLarge {
                host: addr.to_string(),
                limit: 4,
                declared: Some(BODY.len() as u64)
            }
        );

        // Nothing listens on a port just freed.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let f = Fetcher::new(FetchLimits::default());
        let e = f
            .get(&checked(closed, "/a.json", BODY), &Credentials::default())
            .await
            .unwrap_err();
        assert!(matches!(e, FetchError::Connect { .. }), "{e}");

        // https to a server that answers in plain text: a TLS failure.
        let plain = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let plain_addr = plain.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = plain.accept().await {
                let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            }
        });
        let mut https = checked(plain_addr, "/a.json", BODY);
        https.uri = format!("https://{plain_addr}/a.json").parse().unwrap();
        let e = f.get(&https, &Credentials::default()).await.unwrap_err();
        assert!(matches!(e, FetchError::Tls { .. }), "{e}");

        // A server that accepts and never answers: the timeout.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent_addr = silent.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = silent.accept().await {
                held.push(s);
            }
        });
        let impatient = Fetcher::new(FetchLimits {
            timeout: Duration::from_millis(300),
            ..Default::default()
        });
        let e = impatient
            .get(
                &checked(silent_addr, "/a.json", BODY),
                &Credentials::default(),
            )
            .await
            .unwrap_err();
        assert!(matches!(e, FetchError::Timeout { .. }), "{e}");
        assert_eq!(e.reason(), "ArtifactFetchFailed");
    }
}
