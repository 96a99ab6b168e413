//! The desired entries of every target, built off the async runtime: each
//! ConfigMap text parsed once per schema through the shared cache
//! ([`crate::entry_sources`]: on the blocking pool, shared between sets
//! and resyncs), then assembled per schema on the blocking pool too, so a
//! large or malformed source never holds up the runtime's threads. An
//! assembly whose inputs did not change since the set's last sync is
//! reused ([`super::desired_cache`]).

use p4fleet_model::entries::TableSchema;

use super::dereference::{Sources, Target};
use std::sync::Arc;

use super::desired::{self, PerTarget};
use super::desired_cache::{DesiredCache, Inputs};
use super::set::Set;
use crate::entry_sources::{EntrySources, schema_digest};

/// The desired entries of each target of `set`, its parses kept under
/// `set_key` (the set's key, or its revisions' during a rollout);
/// afterwards the cache holds only what some set used in its last sync.
pub async fn per_target(
    cache: &EntrySources,
    assembled: &DesiredCache,
    set_key: &str,
    set: &Set<'_>,
    targets: &[Target],
    sources: &Sources,
) -> PerTarget {
    cache.begin(set_key);
    let ns = &set.namespace;
    let mut schemas: Vec<&TableSchema> = Vec::new();
    let mut of_target = Vec::with_capacity(targets.len());
    for t in targets {
        let i = match schemas.iter().position(|s| **s == t.schema) {
            Some(i) => i,
            None => {
                schemas.push(&t.schema);
                schemas.len() - 1
            }
        };
        of_target.push(i);
    }
    let options = desired::options(set.spec);
    let mut parses = Vec::with_capacity(schemas.len());
    let mut kept = Vec::with_capacity(schemas.len());
    for schema in schemas {
        let digest = schema_digest(schema);
        let parsed = futures::future::join_all(
            sources
                .texts
                .iter()
                .map(|text| cache.parsed(set_key, ns, text, schema, digest, options)),
        )
        .await;
        // Unchanged spec, schema and parses: the last sync's assembly.
        let inputs = set
            .generation
            .map(|g| Inputs::new(g, digest, sources, &parsed));
        if let Some(d) = inputs.as_ref().and_then(|i| assembled.get(set_key, i)) {
            kept.extend(inputs.map(|i| (i, d.clone())));
            parses.push(d);
            continue;
        }
        let (spec, schema, sources) = (set.spec.clone(), schema.clone(), sources.clone());
        let d = Arc::new(
            cache
                .blocking(move || desired::assemble(&spec, &schema, &sources, &parsed))
                .await,
        );
        kept.extend(inputs.map(|i| (i, d.clone())));
        parses.push(d);
    }
    cache.finish(set_key);
    assembled.keep(set_key, kept);
    PerTarget::from_parts(parses, of_target)
}
