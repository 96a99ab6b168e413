//! The CRDs' enums in the model's and the client's terms. The model and the
//! client know nothing of Kubernetes, so the operator converts; these are
//! functions rather than `From` impls because both sides are foreign types
//! here (Rust's orphan rule).

use p4fleet_client::WriteOptions;
use p4fleet_crds::entry_set;
use p4fleet_model::entries::Atomicity;
use p4fleet_model::sync::Ownership;

pub fn ownership(o: entry_set::Ownership) -> Ownership {
    match o {
        entry_set::Ownership::Merge => Ownership::Merge,
        entry_set::Ownership::Exclusive => Ownership::Exclusive,
    }
}

pub fn atomicity(a: entry_set::Atomicity) -> Atomicity {
    match a {
        entry_set::Atomicity::ContinueOnError => Atomicity::ContinueOnError,
        entry_set::Atomicity::RollbackOnError => Atomicity::RollbackOnError,
        entry_set::Atomicity::DataplaneAtomic => Atomicity::DataplaneAtomic,
    }
}

/// Where `Auto` starts before a device's writes have tuned it (the
/// defaults of a fixed setting).
pub const AUTO_START: (u32, u32) = (1000, 4);

/// A TableEntrySet's write options (batch size and requests in flight at
/// least 1; `Auto` as [`AUTO_START`], which the sync then tunes).
pub fn write_options(w: &entry_set::WriteOptions) -> WriteOptions {
    WriteOptions {
        batch_size: w.batch_size.or(AUTO_START.0).max(1) as usize,
        max_in_flight: w.max_in_flight.or(AUTO_START.1).max(1) as usize,
        atomicity: atomicity(w.atomicity),
        distinct_keys: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_options_keep_their_values_and_floor_at_one() {
        let w = entry_set::WriteOptions {
            batch_size: entry_set::Tunable::Fixed(0),
            max_in_flight: entry_set::Tunable::Fixed(7),
            atomicity: entry_set::Atomicity::RollbackOnError,
        };
        let o = write_options(&w);
        assert_eq!(o.batch_size, 1);
        assert_eq!(o.max_in_flight, 7);
        assert_eq!(o.atomicity, Atomicity::RollbackOnError);
        assert_eq!(
            ownership(entry_set::Ownership::Exclusive),
            Ownership::Exclusive
        );
        assert_eq!(
            atomicity(entry_set::Atomicity::DataplaneAtomic),
            Atomicity::DataplaneAtomic
        );
    }
}
