//! Resource arithmetic: amounts per resource name, and what does not fit.
//! Pure.

use std::collections::BTreeMap;

/// Amounts per resource name (`luts`, `ffs`, ...); a missing name is 0.
pub(crate) type Resources = BTreeMap<String, u64>;

/// One resource a program needs more of than is free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shortfall {
    pub resource: String,
    pub need: u64,
    pub free: u64,
}

/// Every resource of `need` that `free` does not cover, in name order.
pub(crate) fn shortfalls(need: &Resources, free: &Resources) -> Vec<Shortfall> {
    need.iter()
        .filter_map(|(name, &n)| {
            let f = free.get(name).copied().unwrap_or(0);
            (n > f).then(|| Shortfall {
                resource: name.clone(),
                need: n,
                free: f,
            })
        })
        .collect()
}

/// Adds `b` into `a`.
pub(crate) fn add(a: &mut Resources, b: &Resources) {
    for (name, n) in b {
        *a.entry(name.clone()).or_default() += n;
    }
}

/// The larger amount of each resource of `a` and `b`.
pub(crate) fn max_each(a: &Resources, b: &Resources) -> Resources {
    let mut out = a.clone();
    for (name, &n) in b {
        let e = out.entry(name.clone()).or_default();
        *e = (*e).max(n);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(pairs: &[(&str, u64)]) -> Resources {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn shortfalls_name_each_resource_that_does_not_fit() {
        let free = r(&[("luts", 15_253), ("ffs", 263_581)]);
        assert!(shortfalls(&r(&[("luts", 15_253)]), &free).is_empty());
        let s = shortfalls(
            &r(&[("luts", 28_096), ("ffs", 40_506), ("brams", 1)]),
            &free,
        );
        assert_eq!(
            s,
            vec![
                Shortfall {
                    resource: "brams".into(),
                    need: 1,
                    free: 0
                },
                Shortfall {
                    resource: "luts".into(),
                    need: 28_096,
                    free: 15_253
                },
            ]
        );
    }

    #[test]
    fn add_and_max() {
        let mut a = r(&[("luts", 1)]);
        add(&mut a, &r(&[("luts", 2), ("ffs", 3)]));
        assert_eq!(a, r(&[("luts", 3), ("ffs", 3)]));
        assert_eq!(
            max_each(
                &r(&[("luts", 5), ("ffs", 1)]),
                &r(&[("luts", 2), ("ffs", 4)])
            ),
            r(&[("luts", 5), ("ffs", 4)])
        );
    }
}
