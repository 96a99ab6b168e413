//! The gRPC transport of every device: one lazily connected HTTP/2 channel
//! per target, sized for large batches and their per-update error trailers.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use tonic::transport::{Channel, Endpoint};

use crate::unreachable::ResolveError;
use crate::{Error, Target, tls};

/// Largest message either way: a 1,000,000-update batch of firewall
/// entries is ~40 MB.
pub(crate) const MAX_MESSAGE: usize = 256 << 20;
/// Per-update errors come back in a trailer; a 30,000-update batch with
/// errors carries a few hundred KB there, far beyond h2's 16 KB default.
const MAX_HEADER_LIST: u32 = 64 << 20;
/// HTTP/2 keepalive period: gRPC C++'s default
/// `GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS`.
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(300);

/// A channel to the target's endpoint (`host:port`), over TLS when the
/// target has TLS settings (checked here); nothing is dialed until first
/// use. Every gRPC service of a target (P4Runtime, BFRT, the
/// slot service, the extern runtime) goes through here, so keepalive, TLS
/// and window settings are the same for all of them.
pub fn connect_lazy(target: &Target) -> Result<Channel, Error> {
    let endpoint = &target.endpoint;
    let invalid = |reason: String| Error::InvalidEndpoint {
        endpoint: endpoint.clone(),
        reason,
    };
    let scheme = if target.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut ep = Endpoint::from_shared(format!("{scheme}://{endpoint}"))
        .map_err(|e| invalid(e.to_string()))?;
    if let Some(tls) = &target.tls {
        tls.check()?;
        let host = ep.uri().host().unwrap_or_default();
        // The device's certificate must name the host we dial (an IPv6
        // literal without its brackets).
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        ep = ep
            .tls_config(tls::client_config(tls, &host))
            .map_err(|e| invalid(format!("TLS settings: {e}")))?;
    }
    let ep = ep
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        // gRPC C++ servers (bmv2, Stratum) by default accept a ping without
        // data in between at most every 5 minutes and answer more with
        // GOAWAY "too_many_pings"; a lost device is noticed by its broken
        // arbitration stream, not by pings.
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(false)
        .http2_max_header_list_size(MAX_HEADER_LIST)
        // Large windows: a big batch should not stall on flow control.
        .initial_stream_window_size(Some(16 << 20))
        .initial_connection_window_size(Some(32 << 20));
    // tonic's own connector with our resolver: a name that does not
    // resolve is then a `ResolveError` in the chain, which
    // `ConnectCause` can tell from other failures by type.
    let mut http = HttpConnector::new_with_resolver(Resolver);
    http.enforce_http(false);
    http.set_nodelay(true);
    Ok(ep.connect_with_connector_lazy(http))
}

/// Resolves host names with the system resolver (on the blocking pool,
/// like hyper-util's default) and fails with a [`ResolveError`].
#[derive(Clone, Copy, Debug)]
struct Resolver;

impl tower_service::Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = ResolveError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ResolveError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ResolveError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let host = name.as_str().to_string();
        Box::pin(async move {
            // The port is set by the connector afterwards.
            let found = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map(|addrs| addrs.collect::<Vec<SocketAddr>>());
            match found {
                Ok(addrs) if !addrs.is_empty() => Ok(addrs.into_iter()),
                Ok(_) => Err(ResolveError { host, source: None }),
                Err(e) => Err(ResolveError {
                    host,
                    source: Some(e),
                }),
            }
        })
    }
}
