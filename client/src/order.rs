//! Same-key ordering for pipelined writes. Requests of one write are sent
//! in order, up to `maxInFlight` at once; a request that touches a key of
//! an earlier request still in flight waits for that request first, so two
//! updates of one entry are applied in the order they were given (e.g. an
//! INSERT then a MODIFY in the next batch). Writes whose keys are all
//! distinct (the TableEntrySet sync's phases) pipeline freely.

use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasher, Hash};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use p4fleet_model::entries::WriteOp;
use p4fleet_model::entries::bfrt::BfrtOp;

/// What identifies the entry an update touches, hashed. Equal keys give
/// equal values; a collision only costs a wait.
pub(crate) trait OrderKey {
    fn order_key(&self) -> u64;
}

fn hash_of(v: impl Hash) -> u64 {
    // Fixed seed: equal keys hash equal within one write (all that matters).
    foldhash::fast::FixedState::with_seed(0x5eed).hash_one(v)
}

impl OrderKey for WriteOp<'_> {
    fn order_key(&self) -> u64 {
        hash_of(self.key())
    }
}

impl OrderKey for BfrtOp<'_> {
    fn order_key(&self) -> u64 {
        self.op().order_key()
    }
}

/// For each batch (keys per batch, in send order), the latest earlier
/// batch that shares a key with it: the one it must wait for.
pub(crate) fn dependencies<B, K>(batches: B) -> Vec<Option<usize>>
where
    B: IntoIterator<Item = K>,
    K: IntoIterator<Item = u64>,
{
    let mut last: HashMap<u64, usize, foldhash::fast::RandomState> = HashMap::default();
    let mut deps = Vec::new();
    for (i, keys) in batches.into_iter().enumerate() {
        let mut dep = None;
        for k in keys {
            if let Some(j) = last.insert(k, i)
                && j != i
            {
                dep = dep.max(Some(j));
            }
        }
        deps.push(dep);
    }
    deps
}

/// The dependencies of batches of updates, or none at all when nothing can
/// overlap (one request, or one in flight) or the keys are all distinct.
pub(crate) fn batch_dependencies<'u, U: OrderKey + 'u>(
    batches: impl IntoIterator<Item = &'u [U]>,
    opts: crate::WriteOptions,
) -> Vec<Option<usize>> {
    let batches: Vec<&[U]> = batches.into_iter().collect();
    if opts.max_in_flight <= 1 || batches.len() <= 1 || opts.distinct_keys {
        return vec![None; batches.len()];
    }
    dependencies(batches.iter().map(|b| b.iter().map(OrderKey::order_key)))
}

/// Runs `jobs` in order with at most `max_in_flight` started and not yet
/// finished; job `i` starts only after job `deps[i]` has finished.
/// `finished` gets each output as it arrives.
pub(crate) async fn run<J, Fut, O>(
    jobs: Vec<J>,
    deps: &[Option<usize>],
    max_in_flight: usize,
    mut start: impl FnMut(J) -> Fut,
    mut finished: impl FnMut(O),
) where
    Fut: Future<Output = O>,
{
    let max = max_in_flight.max(1);
    let mut done = vec![false; jobs.len()];
    let mut jobs = jobs.into_iter().enumerate().peekable();
    let mut pending = FuturesUnordered::new();
    loop {
        while pending.len() < max {
            let ready = match jobs.peek() {
                Some((i, _)) => deps.get(*i).copied().flatten().is_none_or(|d| done[d]),
                None => false,
            };
            if !ready {
                break;
            }
            let (i, job) = jobs.next().expect("peeked");
            let fut = start(job);
            pending.push(async move { (i, fut.await) });
        }
        // Nothing in flight means every earlier job is done, so the next
        // one was ready: an empty set here means all jobs ran.
        let Some((i, out)) = pending.next().await else {
            break;
        };
        done[i] = true;
        finished(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_batch_waits_for_the_latest_earlier_batch_with_a_shared_key() {
        let deps = dependencies(vec![vec![1, 2], vec![3], vec![2, 3], vec![4], vec![1, 1]]);
        assert_eq!(deps, vec![None, None, Some(1), None, Some(0)]);
    }

    #[test]
    fn distinct_keys_or_one_in_flight_have_no_dependencies() {
        let schema = p4fleet_model::entries::TableSchema::from_p4info(
            &p4fleet_proto::p4info::parse_text(include_str!("../../examples/firewall/p4info.txt"))
                .unwrap(),
            "MyIngress.firewall",
        )
        .unwrap();
        let text = include_str!("../../examples/firewall/entries.txt");
        let entries = p4fleet_model::entries::parse_text(&schema, text).unwrap();
        let ins: Vec<WriteOp> = entries.iter().map(WriteOp::insert).collect();
        assert!(ins.len() > 2);
        let opts = |max_in_flight, distinct_keys| crate::WriteOptions {
            max_in_flight,
            distinct_keys,
            ..Default::default()
        };
        let deps = batch_dependencies(ins.chunks(1), opts(4, false));
        assert_eq!(deps, vec![None; ins.len()]);
        // INSERT then MODIFY of the same entry in the next request.
        let same = [WriteOp::insert(&entries[0]), WriteOp::modify(&entries[0])];
        let deps = batch_dependencies(same.chunks(1), opts(4, false));
        assert_eq!(deps, vec![None, Some(0)]);
        let deps = batch_dependencies(same.chunks(1), opts(1, false));
        assert_eq!(deps, vec![None, None]);
        // A caller that says its keys are distinct is taken at its word.
        let deps = batch_dependencies(same.chunks(1), opts(4, true));
        assert_eq!(deps, vec![None, None]);
    }

    #[tokio::test]
    async fn dependent_jobs_start_after_their_dependency_finishes() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let deps = vec![None, None, Some(0), None];
        let jobs: Vec<u64> = vec![0, 1, 2, 3];
        let l = log.clone();
        run(
            jobs,
            &deps,
            3,
            |j| {
                let l = l.clone();
                async move {
                    l.lock().unwrap().push(format!("start {j}"));
                    // Job 0 is the slowest.
                    let ms = if j == 0 { 40 } else { 5 };
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                    l.lock().unwrap().push(format!("end {j}"));
                    j
                }
            },
            |_| {},
        )
        .await;
        let log = log.lock().unwrap().clone();
        let pos = |s: &str| log.iter().position(|x| x == s).unwrap();
        assert!(pos("end 0") < pos("start 2"), "{log:?}");
        // Job 3 may not overtake job 2 (jobs start in order).
        assert!(pos("start 2") < pos("start 3"), "{log:?}");
        // Independent jobs overlap: 1 starts before 0 ends.
        assert!(pos("start 1") < pos("end 0"), "{log:?}");
        assert_eq!(log.iter().filter(|x| x.starts_with("end")).count(), 4);
    }
}
