//! The gRPC transport every driver uses: one lazily connected HTTP/2 channel
//! per Switch, sized for large batches and their per-update error trailers.

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use super::DriverError;

/// Largest message either way: a 1,000,000-update batch of firewall
/// entries is ~40 MB.
pub(crate) const MAX_MESSAGE: usize = 256 << 20;
/// Per-update errors come back in a trailer; a 30,000-update batch with
/// errors carries a few hundred KB there, far beyond h2's 16 KB default.
const MAX_HEADER_LIST: u32 = 64 << 20;
/// Backoff of the background stream (arbitration / subscription) tasks.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// A channel to `endpoint` (`host:port`); nothing is dialed until first use.
pub(crate) fn connect_lazy(endpoint: &str) -> Result<Channel, DriverError> {
    // TLS would switch the scheme and add `tls_config` here.
    let ep = Endpoint::from_shared(format!("http://{endpoint}"))
        .map_err(|e| DriverError::InvalidEndpoint {
            endpoint: endpoint.to_string(),
            reason: e.to_string(),
        })?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .http2_max_header_list_size(MAX_HEADER_LIST)
        // Large windows: a big batch should not stall on flow control.
        .initial_stream_window_size(Some(16 << 20))
        .initial_connection_window_size(Some(32 << 20));
    Ok(ep.connect_lazy())
}
