//! Each set's assembled desired entries, kept while what they were
//! assembled from is unchanged: the set's spec (its generation), the table
//! schema and the parsed texts (the very same shared parses). An idle
//! resync then neither re-assembles, re-validates nor re-digests them, and
//! what is derived from them once (their wire sum, [`Desired::wire_sum`])
//! is kept with them.
//!
//! The entries themselves are not held twice: a kept [`Desired`] indexes
//! the parses the entry-source cache shares (8 bytes per entry).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::desired::Desired;
use crate::entry_sources::{ParsedText, Sources};

/// What one assembly was built from.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The set's `metadata.generation` (moves with every spec change).
    pub generation: i64,
    pub schema: [u8; 32],
    /// ConfigMap name and key of each text, in order.
    pub texts: Vec<(String, String)>,
    /// The parses of those texts; compared by identity (a new resource
    /// version or schema is a new parse). Held, so never reused meanwhile.
    pub parsed: Vec<Arc<ParsedText>>,
}

impl Inputs {
    pub fn new(
        generation: i64,
        schema: [u8; 32],
        sources: &Sources,
        parsed: &[Arc<ParsedText>],
    ) -> Inputs {
        Inputs {
            generation,
            schema,
            texts: sources
                .texts
                .iter()
                .map(|t| (t.config_map.clone(), t.key.clone()))
                .collect(),
            parsed: parsed.to_vec(),
        }
    }

    fn same(&self, other: &Inputs) -> bool {
        self.generation == other.generation
            && self.schema == other.schema
            && self.texts == other.texts
            && self.parsed.len() == other.parsed.len()
            && self
                .parsed
                .iter()
                .zip(&other.parsed)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// One assembly and what it was built from.
pub type Kept = (Inputs, Arc<Desired>);

/// Per set (`namespace/name`), the assemblies of its last sync, one per
/// distinct schema of its targets.
#[derive(Default)]
pub struct DesiredCache {
    sets: Mutex<HashMap<String, Vec<Kept>>>,
}

impl DesiredCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Kept>>> {
        self.sets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The assembly of set `set` from `inputs`, if its last sync made it.
    pub fn get(&self, set: &str, inputs: &Inputs) -> Option<Arc<Desired>> {
        self.lock()
            .get(set)?
            .iter()
            .find(|(i, _)| i.same(inputs))
            .map(|(_, d)| d.clone())
    }

    /// Replaces what is kept for set `set` with the assemblies of this sync.
    pub fn keep(&self, set: &str, kept: Vec<Kept>) {
        let mut sets = self.lock();
        if kept.is_empty() {
            sets.remove(set);
        } else {
            sets.insert(set.to_string(), kept);
        }
    }

    /// Forgets set `set` (deleted).
    pub fn forget(&self, set: &str) {
        self.lock().remove(set);
    }

    /// How many sets have assemblies kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::entry_set::desired::tests::{firewall, set, texts};
    use crate::controllers::entry_set::desired::{assemble, options};
    use crate::entry_sources::parsed;

    fn parse(s: &Sources) -> Vec<Arc<ParsedText>> {
        let schema = firewall();
        s.texts
            .iter()
            .map(|t| {
                Arc::new(parsed::parse(
                    &schema,
                    options(&set(vec![]).spec),
                    &t.text.get().unwrap(),
                ))
            })
            .collect()
    }

    #[test]
    fn an_assembly_is_reused_only_from_the_same_inputs() {
        let cache = DesiredCache::default();
        let s = texts(&[("fw", "entries", "10.0.0.1 10.0.0.2\n")]);
        let p = parse(&s);
        let d = Arc::new(assemble(&set(vec![]).spec, &firewall(), &s, &p));
        let inputs = Inputs::new(1, [1; 32], &s, &p);
        cache.keep("ns/s", vec![(inputs.clone(), d.clone())]);
        let hit = cache.get("ns/s", &inputs).expect("kept");
        assert!(Arc::ptr_eq(&hit, &d));
        // Another set, generation, schema, ConfigMap key, or parse (equal
        // text, but a new resource version parses anew): not reused.
        assert!(cache.get("ns/t", &inputs).is_none());
        assert!(
            cache
                .get("ns/s", &Inputs::new(2, [1; 32], &s, &p))
                .is_none()
        );
        assert!(
            cache
                .get("ns/s", &Inputs::new(1, [2; 32], &s, &p))
                .is_none()
        );
        let other_key = texts(&[("fw", "more", "10.0.0.1 10.0.0.2\n")]);
        assert!(
            cache
                .get("ns/s", &Inputs::new(1, [1; 32], &other_key, &p))
                .is_none()
        );
        let reparsed = parse(&s);
        assert!(
            cache
                .get("ns/s", &Inputs::new(1, [1; 32], &s, &reparsed))
                .is_none()
        );
        cache.keep("ns/s", Vec::new());
        assert!(cache.is_empty());
        cache.keep("ns/s", vec![(inputs.clone(), d)]);
        cache.forget("ns/s");
        assert!(cache.get("ns/s", &inputs).is_none());
    }
}
