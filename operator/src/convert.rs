//! The CRDs' enums in the model's and the client's terms. The model and the
//! client know nothing of Kubernetes, so the operator converts; these are
//! functions rather than `From` impls because both sides are foreign types
//! here (Rust's orphan rule).

use p4fleet_crds::entry_set;
use p4fleet_model::sync::Ownership;

pub fn ownership(o: entry_set::Ownership) -> Ownership {
    match o {
        entry_set::Ownership::Merge => Ownership::Merge,
        entry_set::Ownership::Exclusive => Ownership::Exclusive,
    }
}
