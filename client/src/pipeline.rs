//! Batching and pipelining shared by every protocol: split the updates into
//! requests of `batch_size`, keep up to `max_in_flight` requests in flight,
//! and map per-update errors back to the caller's indexes.

use std::future::Future;
use std::time::Instant;

use prost::Message;

use super::order::{self, OrderKey};
use super::{UpdateFailure, WriteOptions, WriteReport};

/// Per-update results of a failed request: `(index in request, code,
/// message)` for each refused update.
pub(crate) type UpdateErrors = Vec<(usize, i32, String)>;

/// A protocol's per-update error message (`p4.v1.Error`, `bfrt_proto.Error`).
pub(crate) trait UpdateError: Message + Default {
    /// Suffix of the `google.protobuf.Any` type URL that carries it.
    const TYPE_SUFFIX: &'static str;
    fn code_and_message(self) -> (i32, String);
}

/// Decodes the per-update errors a failed Write carries in its
/// `grpc-status-details-bin` trailer (a `google.rpc.Status` whose details
/// hold one error per update, OK ones included). None when the status has
/// no such details, i.e. the request failed as a whole.
pub(crate) fn decode_update_errors<E: UpdateError>(
    status: &tonic::Status,
    n: usize,
) -> Option<UpdateErrors> {
    let details = status.details();
    if details.is_empty() {
        return None;
    }
    let st = p4fleet_proto::rpc::Status::decode(details).ok()?;
    if st.details.len() != n {
        return None;
    }
    let mut out = Vec::new();
    for (i, any) in st.details.iter().enumerate() {
        if !any.type_url.ends_with(E::TYPE_SUFFIX) {
            return None;
        }
        let (code, message) = E::decode(any.value.as_slice()).ok()?.code_and_message();
        if code != 0 {
            out.push((i, code, message));
        }
    }
    Some(out)
}

/// Sends `updates` (each with the caller's index) in requests of
/// `opts.batch_size`, at most `opts.max_in_flight` at once, and records
/// latencies and failures in `report`. `send` builds and sends one request;
/// `decode` reads its per-update errors.
///
/// The updates are split into batches before the returned future exists,
/// so the future holds only the batches, not the caller's iterator: an
/// iterator over borrowed ops inside an async fn's state trips rustc's
/// higher-ranked `Send` check in the controllers.
pub(crate) fn write_pipelined<U, F, Fut>(
    updates: impl IntoIterator<Item = (usize, U)>,
    opts: WriteOptions,
    report: &mut WriteReport,
    send: F,
    decode: fn(&tonic::Status, usize) -> Option<UpdateErrors>,
) -> impl Future<Output = ()>
where
    U: OrderKey,
    F: Fn(Vec<U>) -> Fut,
    Fut: Future<Output = Result<(), tonic::Status>>,
{
    let batch = opts.batch_size.max(1);
    // Split by moving the updates (no per-entry clones); requests are built
    // lazily as the pipeline pulls them.
    let mut batches: Vec<(Vec<usize>, Vec<U>)> = Vec::new();
    let mut it = updates.into_iter().peekable();
    while it.peek().is_some() {
        batches.push(it.by_ref().take(batch).unzip());
    }
    let deps =
        order::batch_dependencies(batches.iter().map(|b| b.1.as_slice()), opts.max_in_flight);
    run_pipelined(batches, deps, opts, report, send, decode)
}

async fn run_pipelined<U, F, Fut>(
    batches: Vec<(Vec<usize>, Vec<U>)>,
    deps: Vec<Option<usize>>,
    opts: WriteOptions,
    report: &mut WriteReport,
    send: F,
    decode: fn(&tonic::Status, usize) -> Option<UpdateErrors>,
) where
    F: Fn(Vec<U>) -> Fut,
    Fut: Future<Output = Result<(), tonic::Status>>,
{
    report.requests = batches.len();
    let start = Instant::now();
    let send = &send;
    order::run(
        batches,
        &deps,
        opts.max_in_flight,
        |(indexes, updates)| async move {
            let t = Instant::now();
            let r = send(updates).await;
            (indexes, t.elapsed(), r)
        },
        |(indexes, latency, r)| {
            report.total_request_latency += latency;
            let Err(status) = r else { return };
            match decode(&status, indexes.len()) {
                Some(errs) => report
                    .failures
                    .extend(errs.into_iter().map(|(i, code, message)| UpdateFailure {
                        index: indexes[i],
                        code,
                        message,
                    })),
                None => {
                    report.failed_requests += 1;
                    let msg = format!("{:?}: {}", status.code(), status.message());
                    report
                        .failures
                        .extend(indexes.iter().map(|&index| UpdateFailure {
                            index,
                            code: status.code() as i32,
                            message: msg.clone(),
                        }));
                }
            }
        },
    )
    .await;
    report.elapsed = start.elapsed();
    report.failures.sort_by_key(|f| f.index);
}

impl UpdateError for p4fleet_proto::p4runtime::Error {
    const TYPE_SUFFIX: &'static str = "p4.v1.Error";
    fn code_and_message(self) -> (i32, String) {
        (self.canonical_code, self.message)
    }
}

impl UpdateError for p4fleet_proto::bfrt::Error {
    const TYPE_SUFFIX: &'static str = "bfrt_proto.Error";
    fn code_and_message(self) -> (i32, String) {
        (self.canonical_code, self.message)
    }
}
