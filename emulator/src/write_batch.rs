//! What both front ends do with a Write batch once its updates are applied:
//! count them, wait out the latency profile, and answer, with one error
//! per update in the status details when some failed.

use std::sync::atomic::Ordering;

use p4fleet_proto::rpc;
use prost::Message;
use tonic::{Code, Status};

use crate::device::Device;
use crate::profile::{self, LatencyProfile};
use crate::update_error::UpdateError;

/// Updates a Write batch applied, by type.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    pub inserts: u64,
    pub modifies: u64,
    pub deletes: u64,
}

/// Finishes a Write batch of `n` updates on `dev`: counts what it applied
/// and what failed, waits out `profile`, then answers OK, or UNKNOWN with
/// `details()` (see [`error_details`]) when some updates failed.
pub(crate) async fn finish(
    dev: &Device,
    profile: LatencyProfile,
    n: usize,
    applied: Tally,
    errors: &[(usize, UpdateError)],
    details: impl FnOnce() -> Vec<u8>,
) -> Result<(), Status> {
    let c = &dev.counters;
    c.inserts.fetch_add(applied.inserts, Ordering::Relaxed);
    c.modifies.fetch_add(applied.modifies, Ordering::Relaxed);
    c.deletes.fetch_add(applied.deletes, Ordering::Relaxed);
    // State is already updated (reads see it); only the answer waits.
    profile::delay(profile, &dev.busy, n).await;
    if errors.is_empty() {
        return Ok(());
    }
    c.failed_updates
        .fetch_add(errors.len() as u64, Ordering::Relaxed);
    Err(Status::with_details(
        Code::Unknown,
        summary(n, errors),
        details().into(),
    ))
}

fn summary(n: usize, errors: &[(usize, UpdateError)]) -> String {
    format!("{} of {} updates failed", errors.len(), n)
}

/// The google.rpc.Status bytes of a failed batch of `n` updates: one detail
/// per update, in order, `error(e)` for those that failed and `ok` for the
/// others.
pub(crate) fn error_details(
    n: usize,
    errors: &[(usize, UpdateError)],
    ok: prost_types::Any,
    error: impl Fn(&UpdateError) -> prost_types::Any,
) -> Vec<u8> {
    let mut details = vec![ok; n];
    for (i, e) in errors {
        details[*i] = error(e);
    }
    rpc::Status {
        code: Code::Unknown as i32,
        message: summary(n, errors),
        details,
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::update_error::err;

    #[test]
    fn details_hold_one_entry_per_update_in_order() {
        let any = |v: &str| prost_types::Any {
            type_url: "t".into(),
            value: v.as_bytes().to_vec(),
        };
        let errors = [
            (1, err(Code::NotFound, "b")),
            (3, err(Code::OutOfRange, "d")),
        ];
        let bytes = error_details(4, &errors, any("ok"), |e| any(&e.message));
        let st = rpc::Status::decode(bytes.as_slice()).unwrap();
        assert_eq!(st.code, Code::Unknown as i32);
        assert_eq!(st.message, "2 of 4 updates failed");
        let values: Vec<&[u8]> = st.details.iter().map(|d| d.value.as_slice()).collect();
        assert_eq!(values, [&b"ok"[..], b"b", b"ok", b"d"]);
    }
}
