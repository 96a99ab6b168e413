//! Who uses what in the entry-source cache: which parses and ConfigMaps
//! each set used in its last sync, counted per parse and indexed per
//! ConfigMap, so that a set's sync evicts exactly what it was the last
//! one to use. Pure: the cache does the evicting.
//!
//! This replaced a sweep that collected every set's uses whenever one set
//! stopped using something: in a change of every set's ConfigMap that was
//! one sweep per set over all sets, N² at 1,000 sets (a fifth of the
//! operator's CPU in that change; docs/dev/fleet-lab-notes.md).

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// A ConfigMap: (namespace, name).
pub type ConfigMapId = (String, String);

/// The ConfigMaps a set read and the resourceVersion it read of each
/// ("" when the ConfigMap was not there).
pub type ReadVersions = HashMap<ConfigMapId, String>;

/// What one set holds.
#[derive(Debug)]
struct Held<K> {
    config_maps: ReadVersions,
    /// The parses of its current sync.
    parses: HashSet<K>,
    /// The parses of the sync before (between [`Users::begin`] and
    /// [`Users::finish`]), not yet used again. Disjoint from `parses`.
    previous: HashSet<K>,
}

impl<K> Default for Held<K> {
    fn default() -> Self {
        Held {
            config_maps: HashMap::new(),
            parses: HashSet::new(),
            previous: HashSet::new(),
        }
    }
}

/// Every set's uses, parses counted and ConfigMaps indexed by reader.
#[derive(Debug)]
pub struct Users<K> {
    sets: HashMap<String, Held<K>>,
    /// How many sets hold each parse (in `parses` or `previous`).
    parse_refs: HashMap<K, usize>,
    /// The sets that read each ConfigMap in their last sync.
    readers: HashMap<ConfigMapId, HashSet<String>>,
}

impl<K> Default for Users<K> {
    fn default() -> Self {
        Users {
            sets: HashMap::new(),
            parse_refs: HashMap::new(),
            readers: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Users<K> {
    /// Set `set` starts a sync: what it held becomes its previous uses.
    pub fn begin(&mut self, set: &str) {
        let held = self.sets.entry(set.to_string()).or_default();
        let parses = std::mem::take(&mut held.parses);
        held.previous.extend(parses);
    }

    /// Set `set` uses parse `key` in its current sync.
    pub fn parse(&mut self, set: &str, key: &K) {
        let held = self.sets.entry(set.to_string()).or_default();
        if held.parses.contains(key) {
            return;
        }
        if !held.previous.remove(key) {
            *self.parse_refs.entry(key.clone()).or_default() += 1;
        }
        held.parses.insert(key.clone());
    }

    /// Set `set` ends its sync: the parses of its previous sync it did not
    /// use again and no other set holds, to evict.
    pub fn finish(&mut self, set: &str) -> Vec<K> {
        let Some(held) = self.sets.get_mut(set) else {
            return Vec::new();
        };
        let dropped = std::mem::take(&mut held.previous);
        self.unref(dropped)
    }

    /// Set `set` read `read` (at those versions) in this sync: the
    /// ConfigMaps it no longer reads and no other set does, to evict.
    pub fn read(&mut self, set: &str, read: ReadVersions) -> Vec<ConfigMapId> {
        let held = self.sets.entry(set.to_string()).or_default();
        for id in read.keys().filter(|id| !held.config_maps.contains_key(*id)) {
            self.readers
                .entry(id.clone())
                .or_default()
                .insert(set.to_string());
        }
        let before = std::mem::replace(&mut held.config_maps, read);
        let gone: Vec<_> = before
            .into_keys()
            .filter(|id| !held.config_maps.contains_key(id))
            .collect();
        self.unread(set, gone)
    }

    /// Set `set` is gone: what it alone held, to evict.
    pub fn release(&mut self, set: &str) -> (Vec<K>, Vec<ConfigMapId>) {
        let Some(held) = self.sets.remove(set) else {
            return (Vec::new(), Vec::new());
        };
        let parses = held.parses.into_iter().chain(held.previous);
        let parses = self.unref(parses);
        let config_maps = self.unread(set, held.config_maps.into_keys());
        (parses, config_maps)
    }

    /// Whether some set holds parse `key`.
    pub fn holds(&self, key: &K) -> bool {
        self.parse_refs.contains_key(key)
    }

    /// The sets (`namespace/name`) that read ConfigMap `id` in their last
    /// sync, each with the resourceVersion it read.
    pub fn readers_of(&self, id: &ConfigMapId) -> Vec<(String, String)> {
        let Some(readers) = self.readers.get(id) else {
            return Vec::new();
        };
        readers
            .iter()
            .map(|set| {
                let version = self
                    .sets
                    .get(set)
                    .and_then(|h| h.config_maps.get(id))
                    .cloned()
                    .unwrap_or_default();
                (set.clone(), version)
            })
            .collect()
    }

    fn unref(&mut self, keys: impl IntoIterator<Item = K>) -> Vec<K> {
        let mut evict = Vec::new();
        for key in keys {
            if let Some(n) = self.parse_refs.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    self.parse_refs.remove(&key);
                    evict.push(key);
                }
            }
        }
        evict
    }

    fn unread(
        &mut self,
        set: &str,
        ids: impl IntoIterator<Item = ConfigMapId>,
    ) -> Vec<ConfigMapId> {
        let mut evict = Vec::new();
        for id in ids {
            if let Some(r) = self.readers.get_mut(&id) {
                r.remove(set);
                if r.is_empty() {
                    self.readers.remove(&id);
                    evict.push(id);
                }
            }
        }
        evict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str) -> ConfigMapId {
        ("ns".into(), name.into())
    }

    #[test]
    fn a_parse_is_evicted_when_its_last_set_stops_using_it() {
        let mut u = Users::<&str>::default();
        for set in ["a", "b"] {
            u.begin(set);
            u.parse(set, &"v1");
            u.parse(set, &"v1");
            assert!(u.finish(set).is_empty());
        }
        // Both move to v2: only the second to stop frees v1.
        u.begin("a");
        u.parse("a", &"v2");
        assert!(u.finish("a").is_empty(), "b still holds v1");
        assert!(u.holds(&"v1"));
        u.begin("b");
        u.parse("b", &"v2");
        assert_eq!(u.finish("b"), ["v1"]);
        assert!(!u.holds(&"v1"));
        // A sync that used the same parse again keeps it; one that never
        // finished keeps its previous uses until the next one does.
        u.begin("a");
        u.parse("a", &"v2");
        assert!(u.finish("a").is_empty());
        u.begin("b");
        u.begin("b");
        u.parse("b", &"v3");
        assert!(u.finish("b").is_empty(), "a still holds v2");
        assert_eq!(u.release("a").0, ["v2"]);
        assert!(u.holds(&"v3"));
        assert_eq!(u.release("b").0, ["v3"]);
        assert!(u.release("b").0.is_empty(), "released once");
    }

    #[test]
    fn a_config_map_is_evicted_when_its_last_reader_stops_reading_it() {
        let mut u = Users::<()>::default();
        let read = |names: &[&str]| {
            names
                .iter()
                .map(|n| (cm(n), "1".to_string()))
                .collect::<ReadVersions>()
        };
        fn sets(u: &Users<()>, id: &ConfigMapId) -> Vec<String> {
            let mut s: Vec<String> = u.readers_of(id).into_iter().map(|(s, _)| s).collect();
            s.sort();
            s
        }
        assert!(u.read("ns/a", read(&["x", "y"])).is_empty());
        assert!(u.read("ns/b", read(&["y"])).is_empty());
        assert_eq!(sets(&u, &cm("x")), ["ns/a"], "not b's");
        assert_eq!(sets(&u, &cm("y")), ["ns/a", "ns/b"]);
        assert_eq!(u.read("ns/a", read(&["z"])), [cm("x")], "y is b's too");
        assert_eq!(sets(&u, &cm("y")), ["ns/b"]);
        assert!(u.readers_of(&cm("x")).is_empty());
        assert_eq!(u.release("ns/b").1, [cm("y")]);
        assert_eq!(u.release("ns/a").1, [cm("z")]);
    }

    #[test]
    fn each_reader_is_known_with_the_version_it_read() {
        let mut u = Users::<()>::default();
        let at = |name: &str, rv: &str| ReadVersions::from([(cm(name), rv.to_string())]);
        u.read("ns/a", at("x", "7"));
        u.read("ns/b", at("x", ""));
        let mut r = u.readers_of(&cm("x"));
        r.sort();
        assert_eq!(
            r,
            [("ns/a".into(), "7".into()), ("ns/b".into(), String::new())]
        );
        // A later read replaces the version, not the reader.
        u.read("ns/a", at("x", "9"));
        assert!(
            u.readers_of(&cm("x"))
                .contains(&("ns/a".into(), "9".into()))
        );
        assert_eq!(u.readers_of(&cm("x")).len(), 2);
    }
}
