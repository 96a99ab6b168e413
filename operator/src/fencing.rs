//! How this replica identifies itself to devices, derived from its
//! leadership (docs/failover.md): the P4Runtime election id carries the
//! Lease term in its high 64 bits, so every new leader outranks every
//! previous one on a device that keeps the highest election id it has ever
//! seen, and a stale leader's writes are refused (PERMISSION_DENIED) by the
//! device itself, whatever the process start times or clocks.

use p4fleet_client::Identity;

use crate::leader::Term;

/// The identity of the leader of `term`: election id `(term + 1) << 64`
/// (high word `term + 1`, low word 0), BFRT client id the term's low 16
/// bits plus one (BFRT client ids are small integers; consecutive leaders
/// differ).
pub fn identity_for_term(term: Term) -> Identity {
    let high = term.0.saturating_add(1);
    Identity {
        election_id: u128::from(high) << 64,
        client_id: (term.0 % 0xffff) as u32 + 1,
    }
}

/// Without leader election (one replica, development): the process start
/// time in seconds in the low word. Any leader's id (high word ≥ 1)
/// outranks it.
pub fn identity_without_lease() -> Identity {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(1)
        .max(1);
    Identity {
        election_id: u128::from(secs),
        client_id: (secs & 0xffff) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_later_term_outranks_every_earlier_one() {
        let ids: Vec<u128> = (0..5)
            .chain([u64::from(u32::MAX), u64::MAX - 1])
            .map(|t| identity_for_term(Term(t)).election_id)
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert_eq!(identity_for_term(Term(0)).election_id, 1 << 64);
        assert_eq!(identity_for_term(Term(2)).election_id >> 64, 3);
    }

    #[test]
    fn a_leader_outranks_an_operator_without_a_lease() {
        let lone = identity_without_lease().election_id;
        assert!(lone < identity_for_term(Term(0)).election_id);
        assert!(lone > 0);
    }

    #[test]
    fn consecutive_terms_get_different_nonzero_bfrt_client_ids() {
        for t in [0u64, 1, 0xfffe, 0xffff, 0x1_0000] {
            let a = identity_for_term(Term(t)).client_id;
            let b = identity_for_term(Term(t + 1)).client_id;
            assert_ne!(a, b, "term {t}");
            assert!((1..=0xffff).contains(&a));
        }
    }
}
