//! The long-lived StreamChannel each protocol keeps per device id, in one
//! loop: P4Runtime's arbitration (is this client primary?) and BFRT's
//! subscription (is this client subscribed?) are the same shape. Open the
//! stream with a hello, watch the device's answers, and re-open it with
//! exponential backoff whenever it ends. The state is published on a watch
//! channel that calls wait on; the task ends when its [`Sessions`] is
//! dropped.
//!
//! Every change of acceptance (a stream lost, a new stream accepted, a
//! refusal) also bumps one epoch counter per connection
//! ([`Sessions::epochs`]): a device that restarted answers on a new
//! stream, so whoever watches the epoch learns of it at once instead of at
//! its next periodic check.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use crate::error::status_line;
use crate::{ConnectCause, Error, Refusal, TlsFailure};

/// Backoff between re-opened streams: 100 ms doubling to 1 s, reset once
/// the device accepts this client again. The cap bounds how long a device
/// that came back waits for this client (a re-opened stream is one cheap
/// connect attempt).
fn backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(1))
        .without_max_times()
        .build()
}

/// What a device thinks of this client on one device id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// No stream (yet), and why.
    Connecting(Lost),
    /// Accepted (primary / subscribed). Counts acceptances, so per-stream
    /// setup (BFRT's BIND) can tell a new stream from the one it set up.
    Accepted(u64),
    /// Refused (another client is primary, the device id is not served,
    /// subscription refused).
    Refused(Refusal),
}

/// Why a session has no stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lost {
    /// The TLS handshake failed: which way, in rustls's words.
    Tls(TlsFailure, String),
    /// The connection failed or ended: why by type, and the transport's words.
    Connection(ConnectCause, String),
}

impl Lost {
    /// The error a caller waiting for the session gets.
    fn error(self, endpoint: &str, device_id: u64) -> Error {
        match self {
            Lost::Tls(failure, detail) => Error::Tls {
                endpoint: endpoint.to_string(),
                failure,
                detail,
            },
            Lost::Connection(cause, reason) => Error::Unreachable {
                endpoint: endpoint.to_string(),
                device_id,
                cause,
                reason,
            },
        }
    }

    /// For the log.
    fn describe(&self) -> String {
        match self {
            Lost::Tls(failure, detail) => format!("{failure} ({detail})"),
            Lost::Connection(cause, reason) => format!("{cause} ({reason})"),
        }
    }
}

impl State {
    /// Whether going from `self` to `next` changes what the device thinks
    /// of this client (a new reason to keep connecting does not).
    fn differs(&self, next: &State) -> bool {
        match (self, next) {
            (State::Connecting(_), State::Connecting(_)) => false,
            (State::Refused(a), State::Refused(b)) => a != b,
            (a, b) => a != b,
        }
    }
}

/// One protocol's stream: how to open it and read the device's answers.
pub(crate) trait Stream: Clone + Send + Sync + 'static {
    type Request: Send + 'static;
    type Response: Send + 'static;
    /// For logs and the reason a closed stream gives.
    const NAME: &'static str;

    /// The first message on a new stream (arbitration / subscribe).
    fn hello(&self, device_id: u64) -> Self::Request;

    fn open(
        &self,
        requests: ReceiverStream<Self::Request>,
    ) -> impl Future<Output = Result<tonic::Streaming<Self::Response>, tonic::Status>> + Send;

    /// A message the device sent on its own (not about this client's
    /// standing): passed on, with the reply it needs, if any (e.g. a
    /// P4Runtime digest list's ack).
    fn notice(&self, _device_id: u64, _message: &Self::Response) -> Option<Self::Request> {
        None
    }

    /// What a message says about this client: accepted, refused (why), or
    /// nothing (other notifications).
    fn answer(&self, message: Self::Response) -> Option<Result<(), Refusal>>;

    /// Whether a failed stream is the device refusing this client (e.g. a
    /// device id it does not serve) rather than a lost connection.
    fn refusal(&self, _status: &tonic::Status) -> Option<Refusal> {
        None
    }
}

struct Session {
    state: watch::Receiver<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The sessions of one connection, one per device id, started on first use.
pub(crate) struct Sessions<S: Stream> {
    stream: S,
    endpoint: String,
    by_device: Mutex<HashMap<u64, Session>>,
    /// Bumped on every change of any session's state.
    epoch: watch::Sender<u64>,
}

impl<S: Stream> Sessions<S> {
    pub(crate) fn new(stream: S, endpoint: &str) -> Self {
        Sessions {
            stream,
            endpoint: endpoint.to_string(),
            by_device: Default::default(),
            epoch: watch::Sender::new(0),
        }
    }

    /// The connection's epoch: it changes whenever a session is lost,
    /// accepted again or refused. Ends (`changed` fails) when the
    /// sessions are dropped.
    pub(crate) fn epochs(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    /// Starts the session of `device_id` (if not running) without waiting.
    pub(crate) fn observe(&self, device_id: u64) {
        drop(self.watch(device_id));
    }

    /// The state of `device_id`'s session, starting it if needed.
    fn watch(&self, device_id: u64) -> watch::Receiver<State> {
        let mut sessions = self.by_device.lock().unwrap_or_else(|e| e.into_inner());
        let s = sessions.entry(device_id).or_insert_with(|| {
            // Until the first attempt ends, a waiter that gives up has
            // had no answer in time.
            let first = Lost::Connection(ConnectCause::TimedOut, "no answer yet".into());
            let (tx, rx) = watch::channel(State::Connecting(first));
            let epoch = self.epoch.clone();
            let task = tokio::spawn(run(self.stream.clone(), device_id, tx, epoch));
            Session { state: rx, task }
        });
        s.state.clone()
    }

    /// Waits up to `timeout` until `settled` holds for the session of
    /// `device_id`, then returns its acceptance count, or why the device
    /// does not accept this client (unreachable / refused).
    pub(crate) async fn wait(
        &self,
        device_id: u64,
        timeout: Duration,
        settled: impl Fn(&State) -> bool,
    ) -> Result<u64, Error> {
        let mut rx = self.watch(device_id);
        let _ = tokio::time::timeout(timeout, rx.wait_for(|s| settled(s))).await;
        let state = rx.borrow().clone();
        match state {
            State::Accepted(n) => Ok(n),
            State::Connecting(lost) => Err(lost.error(&self.endpoint, device_id)),
            State::Refused(refusal) => Err(Error::NotPrimary {
                device_id,
                refusal: Box::new(refusal),
            }),
        }
    }

    /// Starts the session of `device_id` if needed and waits up to
    /// `timeout` for the device's first verdict (accepted or refused);
    /// `Ok` when this client is accepted.
    pub(crate) async fn standing(&self, device_id: u64, timeout: Duration) -> Result<(), Error> {
        self.wait(device_id, timeout, |s| !matches!(s, State::Connecting(_)))
            .await
            .map(drop)
    }
}

/// Keeps the stream of one device id open, re-opening it with backoff after
/// any end, and publishes the state (and bumps `epoch` when it changes).
/// Ends when every receiver is gone.
async fn run<S: Stream>(
    s: S,
    device_id: u64,
    state: watch::Sender<State>,
    epoch: watch::Sender<u64>,
) {
    let publish = |next: State| {
        if state.send_replace(next.clone()).differs(&next) {
            epoch.send_modify(|e| *e += 1);
        }
    };
    let mut delays = backoff();
    let mut accepted = 0u64;
    loop {
        let (tx, rx) = mpsc::channel(4);
        // Cannot fail: the receiver is alive and the buffer empty.
        let _ = tx.send(s.hello(device_id)).await;
        let ended = match s.open(ReceiverStream::new(rx)).await {
            Err(status) => Err(status),
            Ok(mut stream) => loop {
                match stream.message().await {
                    Ok(Some(m)) => {
                        if let Some(reply) = s.notice(device_id, &m) {
                            // The request stream is open while we read;
                            // a failed send means it is ending anyway.
                            let _ = tx.send(reply).await;
                        }
                        match s.answer(m) {
                            Some(Ok(())) => {
                                accepted += 1;
                                delays = backoff();
                                publish(State::Accepted(accepted));
                            }
                            Some(Err(why)) => {
                                publish(State::Refused(why));
                            }
                            None => {}
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(status) => break Err(status),
                }
            },
        };
        drop(tx);
        let (next, reason) = match ended {
            Ok(()) => {
                let reason = format!("{} stream closed", S::NAME);
                let lost = Lost::Connection(ConnectCause::StreamClosed, reason.clone());
                (State::Connecting(lost), reason)
            }
            Err(status) => match s.refusal(&status) {
                Some(r) => (State::Refused(r), status_line(&status)),
                None => {
                    let lost = lost(&status);
                    let reason = lost.describe();
                    (State::Connecting(lost), reason)
                }
            },
        };
        publish(next);
        if state.is_closed() {
            return;
        }
        let delay = delays.next().unwrap_or(Duration::from_secs(5));
        tracing::debug!(device_id, stream = S::NAME, %reason, ?delay, "re-opening");
        tokio::time::sleep(delay).await;
    }
}

/// Why a stream could not be kept open, a TLS failure as such.
fn lost(status: &tonic::Status) -> Lost {
    match crate::tls::tls_failure(status) {
        Some((failure, detail)) => Lost::Tls(failure, detail),
        None => Lost::Connection(ConnectCause::of(status), status_line(status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_one_second_and_never_stops() {
        let want = [100.0, 200.0, 400.0, 800.0, 1000.0, 1000.0];
        for (d, ms) in backoff().zip(want) {
            // backon multiplies in f32.
            assert!(
                (d.as_secs_f64() * 1e3 - ms).abs() < 0.01,
                "{d:?} vs {ms} ms"
            );
        }
        assert!(backoff().nth(1000).is_some());
    }

    #[test]
    fn only_a_change_of_acceptance_is_an_epoch() {
        let c = |r: &str| State::Connecting(Lost::Connection(ConnectCause::Other, r.into()));
        assert!(!c("refused").differs(&c("timed out")));
        assert!(c("x").differs(&State::Accepted(1)));
        assert!(
            State::Accepted(1).differs(&State::Accepted(2)),
            "new stream"
        );
        assert!(State::Accepted(2).differs(&c("stream closed")));
        let r = |m: &str| {
            State::Refused(Refusal::NotPrimary {
                primary_election_id: Some(7),
                message: m.into(),
            })
        };
        assert!(r("a").differs(&r("b")));
        assert!(!r("a").differs(&r("a")));
    }
}
