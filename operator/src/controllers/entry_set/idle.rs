//! Idle timeouts of a set's own entries (`idleTimeout`, `@idle=`): the
//! set is registered with `crate::idle_reports` while some desired entry
//! has one, so the devices' notifications about them are counted and
//! reported (metric, aggregated Event, `status.idle`). They are never
//! deleted: a static entry is desired state. Learned entries are
//! `crate::learning`'s.

use p4fleet_crds::IdleStatus;
use p4fleet_model::entries::{EntryKey, TableSchema, format_key};
use p4fleet_model::sync;
use p4fleet_proto::p4runtime as p4;

use super::SetCtx;
use super::desired::Desired;
use super::set::Set;
use crate::status::EventNote;

/// The metadata the set's own entries carry.
fn metadata(set: &Set<'_>) -> Vec<u8> {
    sync::tag_metadata(set.tag)
}

/// Registers the set while one of its desired entries has an idle
/// timeout (stops otherwise); its status and the Event the rate limit
/// held back until now.
pub fn sync(
    ctx: &SetCtx,
    set: &Set<'_>,
    desired: Option<&Desired>,
) -> (Option<IdleStatus>, Option<EventNote>) {
    let md = metadata(set);
    let Some(d) = desired.filter(|d| d.iter().any(|e| e.idle_timeout_ns != 0)) else {
        ctx.own.idle.forget(&md);
        return (None, None);
    };
    ctx.own.idle.register(&set.reference, md.clone());
    let due = ctx.own.idle.take_due(&md, tokio::time::Instant::now());
    let status = ctx
        .own
        .idle
        .seen(&md)
        .map(|(notified, recent)| status(&d.schema, notified, &recent));
    (status, due)
}

/// On deletion: nothing more to report.
pub fn forget(ctx: &SetCtx, set: &Set<'_>) {
    ctx.own.idle.forget(&metadata(set));
}

/// `status.idle` (pure): the count and the recent entries' keys in the
/// line format's named form (by id when the schema does not read them).
pub fn status(schema: &TableSchema, notified: u64, recent: &[p4::TableEntry]) -> IdleStatus {
    IdleStatus {
        notified,
        recent: recent
            .iter()
            .map(|te| match EntryKey::from_proto(schema, te) {
                Ok(k) if te.table_id == schema.id => format_key(schema, &k),
                _ => format!("table id {} (not this set's table)", te.table_id),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_the_recent_keys() {
        let mut schema = p4fleet_model::entries::TableSchema::from_p4info(
            &p4fleet_proto::p4info::parse_text(include_str!(
                "../../../../examples/l2switch/p4info.txt"
            ))
            .unwrap(),
            "MyIngress.dmac",
        )
        .unwrap();
        schema.idle_timeout = true;
        let te = |table_id, mac: &[u8]| p4::TableEntry {
            table_id,
            r#match: vec![p4::FieldMatch {
                field_id: 1,
                field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                    p4::field_match::Exact {
                        value: mac.to_vec(),
                    },
                )),
            }],
            ..Default::default()
        };
        let st = status(
            &schema,
            7,
            &[te(schema.id, &[0, 0, 0, 0, 0, 1]), te(99, &[1])],
        );
        assert_eq!(st.notified, 7);
        assert_eq!(
            st.recent,
            [
                "hdr.ethernet.dstAddr=00:00:00:00:00:01",
                "table id 99 (not this set's table)"
            ]
        );
    }
}
