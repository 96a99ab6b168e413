//! Listening and serving: binds a listener, runs a gRPC or HTTP server on
//! it as a task until told to stop, and the [`RunningEmulator`] that owns
//! those servers.

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{DeviceStats, Emulator, EmulatorError};

/// The gRPC server settings of both front ends. Large batches are
/// megabytes: big HTTP/2 windows and frames mean fewer WINDOW_UPDATE round
/// trips and fewer frames to parse per Write (h2's defaults are 16 KiB
/// frames and hyper's 1 MiB windows). With `tls`, the port serves TLS only.
/// Every call is counted in `rpcs` by its method.
pub(crate) fn tuned_server(
    tls: Option<&crate::ServerTls>,
    rpcs: std::sync::Arc<crate::stats::RpcCounts>,
) -> Result<tonic::transport::Server, EmulatorError> {
    let server = tonic::transport::Server::builder()
        // The hook that sees every call's path: counts it (stats side
        // channel), no span of its own.
        .trace_fn(move |req| {
            rpcs.count(req.uri().path());
            tracing::Span::none()
        })
        .tcp_nodelay(true)
        .initial_stream_window_size(16 * 1024 * 1024)
        .initial_connection_window_size(64 * 1024 * 1024)
        .max_frame_size(1024 * 1024);
    match tls {
        Some(t) => server
            .tls_config(t.config())
            .map_err(|e| EmulatorError::Tls(e.to_string())),
        None => Ok(server),
    }
}

/// Accepted connections with TCP_NODELAY. The server builder's
/// `tcp_nodelay` only applies to listeners tonic binds itself; without it,
/// Nagle holds back the small response frames of concurrent requests until
/// the client's delayed ACK (~40 ms stalls with several Writes in flight).
fn nodelay_incoming(listener: TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// One server task on its own listener. Dropping it without
/// [`Server::stop`] stops the server too (the task sees the stop channel
/// close).
pub(crate) struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), EmulatorError>>>,
}

async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), EmulatorError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| EmulatorError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| EmulatorError::Bind { addr, source })?;
    Ok((listener, bound))
}

impl Server {
    /// Binds `addr` and serves the gRPC services of `router` there.
    pub async fn grpc(
        addr: SocketAddr,
        router: tonic::transport::server::Router,
    ) -> Result<Server, EmulatorError> {
        let (listener, bound) = bind(addr).await?;
        let (stop, stopped) = oneshot::channel::<()>();
        let incoming = nodelay_incoming(listener);
        let task = tokio::spawn(async move {
            router
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await
                .map_err(|e| EmulatorError::Server(e.to_string()))
        });
        Ok(Server::new(bound, stop, task))
    }

    /// Binds `addr` and serves the HTTP `app` there.
    pub async fn http(addr: SocketAddr, app: axum::Router) -> Result<Server, EmulatorError> {
        let (listener, bound) = bind(addr).await?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .map_err(|e| EmulatorError::Server(e.to_string()))
        });
        Ok(Server::new(bound, stop, task))
    }

    fn new(
        addr: SocketAddr,
        stop: oneshot::Sender<()>,
        task: JoinHandle<Result<(), EmulatorError>>,
    ) -> Server {
        Server {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Tells the server to stop (graceful: it finishes what it serves).
    fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }

    /// Waits for the server task to end.
    async fn join(&mut self) -> Result<(), EmulatorError> {
        if let Some(h) = self.task.take() {
            h.await
                .map_err(|e| EmulatorError::Server(e.to_string()))??;
        }
        Ok(())
    }

    fn abort(&self) {
        if let Some(h) = &self.task {
            h.abort();
        }
    }
}

/// A started emulator; dropping it without [`RunningEmulator::shutdown`]
/// stops the servers too (their tasks see the stop channels close).
pub struct RunningEmulator {
    pub(crate) emulator: Emulator,
    pub(crate) p4runtime: Server,
    pub(crate) stats: Option<Server>,
    pub(crate) bfrt: Option<Server>,
}

impl RunningEmulator {
    pub fn p4runtime_addr(&self) -> SocketAddr {
        self.p4runtime.addr()
    }

    /// `http://127.0.0.1:PORT`, handy for tonic clients.
    pub fn p4runtime_url(&self) -> String {
        format!("http://{}", self.p4runtime_addr())
    }

    pub fn stats_addr(&self) -> Option<SocketAddr> {
        self.stats.as_ref().map(Server::addr)
    }

    /// Where BFRT listens, when enabled.
    pub fn bfrt_addr(&self) -> Option<SocketAddr> {
        self.bfrt.as_ref().map(Server::addr)
    }

    pub fn emulator(&self) -> &Emulator {
        &self.emulator
    }

    pub fn stats(&self, device_id: u64) -> Option<DeviceStats> {
        self.emulator.stats(device_id)
    }

    /// Stops both servers and waits for them.
    pub async fn shutdown(mut self) -> Result<(), EmulatorError> {
        self.p4runtime.stop();
        self.stats.iter_mut().for_each(Server::stop);
        self.bfrt.iter_mut().for_each(Server::stop);
        // Open StreamChannels would keep graceful shutdown waiting; bound it.
        let wait = async {
            self.p4runtime.join().await?;
            if let Some(s) = &mut self.stats {
                s.join().await?;
            }
            if let Some(s) = &mut self.bfrt {
                s.join().await?;
            }
            Ok::<(), EmulatorError>(())
        };
        match tokio::time::timeout(std::time::Duration::from_secs(1), wait).await {
            Ok(r) => r,
            Err(_) => Ok(()),
        }
    }
}

impl Drop for RunningEmulator {
    fn drop(&mut self) {
        self.p4runtime.abort();
        self.stats.iter().for_each(Server::abort);
        self.bfrt.iter().for_each(Server::abort);
    }
}
