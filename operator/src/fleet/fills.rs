//! Which TableEntrySet fills which VirtualSwitch's table (pure): read by
//! the sets themselves (conflicts, triggers), by the VirtualSwitch after a
//! swap (which sets to wait for) and by a P4Program whose change would
//! remove a table that sets still fill.

use kube::ResourceExt;
use p4fleet_crds::{TableEntrySet, VirtualSwitch};

/// Whether set `s` fills VirtualSwitch `vs` (by reference or selector).
pub fn fills(s: &TableEntrySet, vs: &VirtualSwitch) -> bool {
    s.namespace() == vs.namespace()
        && (s.spec.virtual_switch_ref.as_deref() == Some(vs.name_any().as_str())
            || s.spec
                .virtual_switch_selector
                .as_ref()
                .is_some_and(|sel| sel.matches(vs.labels())))
}

/// Whether a set's `spec.table` (full or short name) names `full`.
pub fn names_table(spec_table: &str, full: &str) -> bool {
    spec_table == full
        || full
            .strip_suffix(spec_table)
            .is_some_and(|p| p.ends_with('.'))
}
