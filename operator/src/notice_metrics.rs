//! What P4Runtime devices send on their own (digest lists, idle timeout
//! notifications), counted per Switch: the device pool forwards each
//! connection's notices here (`DevicePool::observe_notices`), the
//! client's session has already acked the digest lists.
//!
//! Labels are bounded by the programs: a digest id or table id of the
//! running P4Info, never a digest's data or an entry's key.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use p4fleet_client::Notice;

use crate::metrics::{SetLabels, SwitchLabel};

/// Labels: a Switch and a digest id of its program.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DigestLabels {
    pub switch: String,
    pub digest_id: String,
}

/// Labels: a Switch and a table id of its program.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabels {
    pub switch: String,
    pub table_id: String,
}

#[derive(Clone, Default)]
pub struct NoticeMetrics {
    pub digest_lists: Family<DigestLabels, Counter>,
    pub digest_messages: Family<DigestLabels, Counter>,
    pub idle_notifications: Family<SwitchLabel, Counter>,
    pub idle_entries: Family<TableLabels, Counter>,
    /// Notices a slow consumer missed (the client's channel overflowed).
    pub notices_lost: Family<SwitchLabel, Counter>,
    /// A TableEntrySet's own entries named in idle timeout notifications
    /// (`crate::idle_reports`).
    pub idle_set_entries: Family<SetLabels, Counter>,
}

impl NoticeMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "digest_lists",
            "DigestLists received (and acked) from P4Runtime devices, by switch and digest id",
            self.digest_lists.clone(),
        );
        registry.register(
            "digest_messages",
            "Digest messages in the DigestLists received, by switch and digest id",
            self.digest_messages.clone(),
        );
        registry.register(
            "idle_timeout_notifications",
            "IdleTimeoutNotifications received, by switch",
            self.idle_notifications.clone(),
        );
        registry.register(
            "idle_timeout_entries",
            "Entries named in IdleTimeoutNotifications, by switch and table id",
            self.idle_entries.clone(),
        );
        registry.register(
            "idle_timeout_set_entries",
            "Entries of a TableEntrySet (with an idleTimeout) named in IdleTimeoutNotifications, by set; they stay on the device",
            self.idle_set_entries.clone(),
        );
        registry.register(
            "device_notices_lost",
            "Device notices (digest lists, idle notifications) the operator fell too far behind to count, by switch",
            self.notices_lost.clone(),
        );
    }

    /// Counts one notice of Switch `switch`.
    pub fn record(&self, switch: &str, notice: &Notice) {
        match notice {
            Notice::DigestList { list, .. } => {
                let l = DigestLabels {
                    switch: switch.to_string(),
                    digest_id: list.digest_id.to_string(),
                };
                self.digest_lists.get_or_create(&l).inc();
                self.digest_messages
                    .get_or_create(&l)
                    .inc_by(list.data.len() as u64);
            }
            Notice::IdleTimeout { notification, .. } => {
                self.idle_notifications
                    .get_or_create(&SwitchLabel {
                        switch: switch.to_string(),
                    })
                    .inc();
                for e in &notification.table_entry {
                    self.idle_entries
                        .get_or_create(&TableLabels {
                            switch: switch.to_string(),
                            table_id: e.table_id.to_string(),
                        })
                        .inc();
                }
            }
        }
    }

    /// `n` notices of `switch` were lost before they were counted.
    pub fn lost(&self, switch: &str, n: u64) {
        self.notices_lost
            .get_or_create(&SwitchLabel {
                switch: switch.to_string(),
            })
            .inc_by(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p4fleet_client::proto::p4runtime as p4;

    #[test]
    fn lists_messages_and_idle_entries_are_counted_by_their_ids() {
        let m = NoticeMetrics::default();
        let list = |n: usize| Notice::DigestList {
            device_id: 1,
            list: p4::DigestList {
                digest_id: 7,
                list_id: 1,
                data: vec![p4::P4Data::default(); n],
                timestamp: 0,
            },
        };
        m.record("sw", &list(3));
        m.record("sw", &list(2));
        let entry = |table_id| p4::TableEntry {
            table_id,
            ..Default::default()
        };
        m.record(
            "sw",
            &Notice::IdleTimeout {
                device_id: 1,
                notification: p4::IdleTimeoutNotification {
                    table_entry: vec![entry(5), entry(5), entry(6)],
                    timestamp: 0,
                },
            },
        );
        let d = DigestLabels {
            switch: "sw".into(),
            digest_id: "7".into(),
        };
        assert_eq!(m.digest_lists.get_or_create(&d).get(), 2);
        assert_eq!(m.digest_messages.get_or_create(&d).get(), 5);
        let t = |id: &str| TableLabels {
            switch: "sw".into(),
            table_id: id.into(),
        };
        assert_eq!(m.idle_entries.get_or_create(&t("5")).get(), 2);
        assert_eq!(m.idle_entries.get_or_create(&t("6")).get(), 1);
        assert_eq!(
            m.idle_notifications
                .get_or_create(&SwitchLabel {
                    switch: "sw".into()
                })
                .get(),
            1
        );
    }
}
