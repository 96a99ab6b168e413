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

/// One background stream task per device id (P4Runtime arbitration, BFRT
/// subscription), started on first use; its state is published on a watch
/// channel. Tasks are aborted when the set is dropped.
pub(crate) struct Sessions<S> {
    by_device: std::sync::Mutex<std::collections::HashMap<u64, Session<S>>>,
}

struct Session<S> {
    state: tokio::sync::watch::Receiver<S>,
    task: tokio::task::JoinHandle<()>,
}

impl<S> Drop for Session<S> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<S: Send + Sync + 'static> Sessions<S> {
    pub(crate) fn new() -> Self {
        Sessions {
            by_device: Default::default(),
        }
    }

    /// The state of `device_id`'s task, starting it from `initial` with
    /// `start` if it is not running yet.
    pub(crate) fn watch<F>(
        &self,
        device_id: u64,
        initial: S,
        start: impl FnOnce(tokio::sync::watch::Sender<S>) -> F,
    ) -> tokio::sync::watch::Receiver<S>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut sessions = self.by_device.lock().unwrap_or_else(|e| e.into_inner());
        let s = sessions.entry(device_id).or_insert_with(|| {
            let (tx, rx) = tokio::sync::watch::channel(initial);
            let task = tokio::spawn(start(tx));
            Session { state: rx, task }
        });
        s.state.clone()
    }
}
