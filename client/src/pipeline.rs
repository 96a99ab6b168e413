//! Batching and pipelining shared by every write path (P4Runtime, BFRT,
//! bulk): split the updates into requests of `batch_size`, keep up to
//! `max_in_flight` requests in flight (same-key order, see [`order`]), and
//! map per-update errors back to the caller's indexes.

use std::future::Future;
use std::time::Instant;

use prost::Message;

use crate::error::status_line;
use crate::observe::Observe;
use crate::order::{self, OrderKey};
use crate::{UpdateFailure, WriteOptions, WriteReport};

/// Per-update results of a request: `(index in request, code, message)`
/// for each refused update.
pub(crate) type UpdateErrors = Vec<(usize, i32, String)>;

/// A protocol's per-update error message (`p4.v1.Error`, `bfrt_proto.Error`).
pub(crate) trait UpdateError: Message + Default {
    /// Suffix of the `google.protobuf.Any` type URL that carries it.
    const TYPE_SUFFIX: &'static str;
    fn code_and_message(self) -> (i32, String);
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

/// The status of a failed one-update Write: its update's own error (code
/// and message) when the target sent one, else the request's status (the
/// batch status is generic on many targets).
pub(crate) fn single_update_status(status: tonic::Status, decode: Decode) -> tonic::Status {
    match decode(&status, 1).and_then(|e| e.into_iter().next()) {
        Some((_, code, message)) => tonic::Status::new(tonic::Code::from(code), message),
        None => status,
    }
}

/// How a request's failure status is read: its per-update errors, or None
/// when it failed as a whole.
pub(crate) type Decode = fn(&tonic::Status, usize) -> Option<UpdateErrors>;

/// One request: the caller's indexes of its updates, and what `send` sends.
pub(crate) type Batch<P> = (Vec<usize>, P);

/// Sends `updates` (each with the caller's index) in requests of
/// `opts.batch_size` (see [`run`]). `send` builds and sends one request.
///
/// The updates are split into batches before the returned future exists,
/// so the future holds only the batches, not the caller's iterator: an
/// iterator over borrowed ops inside an async fn's state trips rustc's
/// higher-ranked `Send` check in callers.
pub(crate) fn write_pipelined<U, F, Fut>(
    updates: impl IntoIterator<Item = (usize, U)>,
    opts: WriteOptions,
    report: &mut WriteReport,
    send: F,
    decode: Decode,
    observe: Observe<'_>,
) -> impl Future<Output = ()>
where
    U: OrderKey,
    F: Fn(Vec<U>) -> Fut,
    Fut: Future<Output = Result<UpdateErrors, tonic::Status>>,
{
    let batch = opts.batch_size.max(1);
    // Split by moving the updates (no per-entry clones); requests are built
    // lazily as the pipeline pulls them.
    let mut batches: Vec<Batch<Vec<U>>> = Vec::new();
    let mut it = updates.into_iter().peekable();
    while it.peek().is_some() {
        batches.push(it.by_ref().take(batch).unzip());
    }
    let deps = order::batch_dependencies(batches.iter().map(|b| b.1.as_slice()), opts);
    run(batches, deps, opts, report, send, decode, observe)
}

/// Sends the `batches` in order, at most `opts.max_in_flight` at once,
/// batch `i` only after batch `deps[i]` has its answer, and records
/// latencies and failures in `report`: per-update errors of an answer
/// (bulk) or of a failed status (`decode`), or every update of a request
/// that failed as a whole. `observe` hears of each request as it is
/// answered.
pub(crate) async fn run<P, F, Fut>(
    batches: Vec<Batch<P>>,
    deps: Vec<Option<usize>>,
    opts: WriteOptions,
    report: &mut WriteReport,
    send: F,
    decode: Decode,
    observe: Observe<'_>,
) where
    F: Fn(P) -> Fut,
    Fut: Future<Output = Result<UpdateErrors, tonic::Status>>,
{
    report.requests = batches.len();
    let start = Instant::now();
    let send = &send;
    order::run(
        batches,
        &deps,
        opts.max_in_flight,
        |(indexes, payload)| async move {
            let t = Instant::now();
            let r = send(payload).await;
            (indexes, t.elapsed(), r)
        },
        |(indexes, latency, r)| {
            report.total_request_latency += latency;
            let first = report.failures.len();
            let failed = record_answer(report, &indexes, r, decode);
            observe.answered(&indexes, latency, &report.failures[first..], failed);
        },
    )
    .await;
    report.elapsed = start.elapsed();
    report.failures.sort_by_key(|f| f.index);
}

/// Adds the refused updates of one answered request to `report`: its
/// per-update errors (of the answer, or decoded from a failed status), or
/// every update when it failed as a whole; returns that whole failure's code.
fn record_answer(
    report: &mut WriteReport,
    indexes: &[usize],
    r: Result<UpdateErrors, tonic::Status>,
    decode: Decode,
) -> Option<tonic::Code> {
    let errors = match r {
        Ok(errors) => errors,
        Err(status) => match decode(&status, indexes.len()) {
            Some(errors) => errors,
            None => {
                report.failed_requests += 1;
                let msg = status_line(&status);
                report
                    .failures
                    .extend(indexes.iter().map(|&index| UpdateFailure {
                        index,
                        code: status.code() as i32,
                        message: msg.clone(),
                    }));
                return Some(status.code());
            }
        },
    };
    // Indexes are within the request: `decode` and the bulk answer's
    // check make sure.
    report
        .failures
        .extend(errors.into_iter().filter_map(|(i, code, message)| {
            let index = *indexes.get(i)?;
            Some(UpdateFailure {
                index,
                code,
                message,
            })
        }));
    None
}
