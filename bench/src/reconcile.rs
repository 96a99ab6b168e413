//! Reconcile cost: a no-op resync of a large set (read-back + diff with
//! nothing to write), done the way the TableEntrySet reconciler does it
//! (`Device::read_table` → `Entry::from_proto` with ownership tags →
//! `sync::plan`), and the memory the operator holds per entry.

use std::time::Instant;

use anyhow::bail;
use p4fleet_client::{Atomicity, WriteOptions};
use p4fleet_model::entries::{Entry, TableSchema};
use p4fleet_model::sync::{self, DeviceEntry, Ownership};
use serde::{Deserialize, Serialize};

use crate::paths::P4fleetP4rt;
use crate::stats::Spread;
use crate::workload::{self, Ids};
use p4fleet_bench::alloc;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReconcileResult {
    pub entries: usize,
    pub runs: usize,
    /// Whole no-op resync, seconds.
    pub total_s: Spread,
    /// Read RPC (all chunks received).
    pub read_s: Spread,
    /// TableEntry → Entry with tag.
    pub convert_s: Spread,
    /// `sync::plan`.
    pub plan_s: Spread,
    /// Live heap bytes per desired entry (`Vec<Entry>`).
    pub desired_bytes_per_entry: f64,
    /// Live heap allocations per desired entry.
    pub desired_allocs_per_entry: f64,
    /// Live heap bytes per read-back entry (`Vec<DeviceEntry>`), held only
    /// during a sync.
    pub readback_bytes_per_entry: f64,
    /// Peak extra bytes per entry during one resync (raw read-back +
    /// converted + plan), above the desired set.
    pub resync_peak_bytes_per_entry: f64,
}

pub async fn run(
    client: &mut P4fleetP4rt,
    schema: &TableSchema,
    ids: &Ids,
    n: usize,
    runs: usize,
) -> anyhow::Result<ReconcileResult> {
    client.clear().await?;
    let (b0, a0) = alloc::live();
    let desired: Vec<Entry> = workload::entries(ids, n);
    let (b1, a1) = alloc::live();
    let tag = sync::set_tag("bench", "firewall");
    let plan = sync::plan(&desired, &[], Ownership::Merge, tag);
    let metadata = sync::tag_metadata(tag);
    let (_, phase) = sync::write_ops(&plan, &desired, &[], &metadata);
    let report = client
        .dev
        .write_ops(
            0,
            &phase.ops,
            WriteOptions {
                batch_size: 10_000,
                max_in_flight: 4,
                atomicity: Atomicity::ContinueOnError,
                distinct_keys: false,
            },
        )
        .await?;
    if !report.failures.is_empty() {
        bail!("{} inserts failed", report.failures.len());
    }
    let (mut total, mut read, mut convert, mut planning) = (vec![], vec![], vec![], vec![]);
    let mut readback_bytes = 0.0;
    let mut peak = 0isize;
    for _ in 0..runs {
        let (before, _) = alloc::live();
        let t0 = Instant::now();
        let raw = client.dev.read_table(0, schema.id).await?;
        let t1 = Instant::now();
        let (with_raw, _) = alloc::live();
        let mut on_device = Vec::with_capacity(raw.len());
        for te in &raw {
            on_device.push(DeviceEntry {
                entry: Entry::from_proto(schema, te)?,
                tag: sync::tag_of(&te.metadata),
            });
        }
        let t2 = Instant::now();
        let (with_both, _) = alloc::live();
        drop(raw);
        let (converted, _) = alloc::live();
        let plan = sync::plan(&desired, &on_device, Ownership::Merge, tag);
        let t3 = Instant::now();
        let (with_plan, _) = alloc::live();
        if plan.writes() != 0 || plan.unchanged != n {
            bail!(
                "resync is not a no-op: {} writes, {} unchanged",
                plan.writes(),
                plan.unchanged
            );
        }
        total.push((t3 - t0).as_secs_f64());
        read.push((t1 - t0).as_secs_f64());
        convert.push((t2 - t1).as_secs_f64());
        planning.push((t3 - t2).as_secs_f64());
        readback_bytes = (converted - before) as f64 / n as f64;
        peak = peak
            .max(with_raw - before)
            .max(with_both - before)
            .max(with_plan - before);
    }
    let spread = |v: &[f64]| Spread::of(v).expect("runs >= 1");
    Ok(ReconcileResult {
        entries: n,
        runs,
        total_s: spread(&total),
        read_s: spread(&read),
        convert_s: spread(&convert),
        plan_s: spread(&planning),
        desired_bytes_per_entry: (b1 - b0) as f64 / n as f64,
        desired_allocs_per_entry: (a1 - a0) as f64 / n as f64,
        readback_bytes_per_entry: readback_bytes,
        resync_peak_bytes_per_entry: peak as f64 / n as f64,
    })
}
