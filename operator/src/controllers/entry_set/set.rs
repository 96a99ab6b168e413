//! The set as the stages after dereference take it: who it is, what it
//! asks for and the status it last had, read from the custom resource once
//! per sync. No stage past [`super::resolve`] reaches into the object or
//! its metadata; only `sync` itself, which owns the Kubernetes writes
//! (status, ownership record), holds the object. Pure.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use p4fleet_crds::{TableEntrySet, TableEntrySetSpec, TableEntrySetStatus};
use p4fleet_model::sync;

/// One TableEntrySet, as a value.
#[derive(Clone, Debug)]
pub struct Set<'a> {
    /// `namespace/name`: the key of every per-set memory.
    pub key: String,
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    /// The ownership tag its entries carry ([`p4fleet_model::sync`]).
    pub tag: u64,
    pub spec: &'a TableEntrySetSpec,
    /// The status last written (by this process's writer when it is
    /// fresher than the cache).
    pub status: Option<&'a TableEntrySetStatus>,
    /// Where its Events go.
    pub reference: ObjectReference,
    /// What the objects it owns (its digest sinks) name as their
    /// controller; none without a uid.
    pub owner: Option<OwnerReference>,
}

impl<'a> Set<'a> {
    /// The value of `set` as it stands.
    pub fn of(set: &'a TableEntrySet) -> Set<'a> {
        let namespace = set.namespace().unwrap_or_default();
        let name = set.name_any();
        Set {
            key: format!("{namespace}/{name}"),
            tag: sync::set_tag(&namespace, &name),
            namespace,
            name,
            generation: set.metadata.generation,
            spec: &set.spec,
            status: set.status.as_ref(),
            reference: set.object_ref(&()),
            owner: set.controller_owner_ref(&()),
        }
    }

    /// The same set with the status `latest` holds (after a status write).
    pub fn with_status_of(&self, latest: &'a TableEntrySet) -> Set<'a> {
        Set {
            status: latest.status.as_ref(),
            ..self.clone()
        }
    }

    /// The same set with a revision's `spec`
    /// ([`crate::fleet::entry_revisions::as_of`]) and no generation, so
    /// the live set's cached assembly is never taken for it.
    pub fn at_revision<'b>(&self, spec: &'b TableEntrySetSpec) -> Set<'b>
    where
        'a: 'b,
    {
        Set {
            spec,
            generation: None,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_carries_the_objects_identity_tag_and_status() {
        let mut cr = crate::controllers::entry_set::desired::tests::set(Vec::new());
        cr.metadata.name = Some("fw".into());
        cr.metadata.namespace = Some("lab".into());
        cr.metadata.generation = Some(4);
        let set = Set::of(&cr);
        assert_eq!(set.key, "lab/fw");
        assert_eq!(set.tag, sync::set_tag("lab", "fw"));
        assert_ne!(set.tag, sync::set_tag("lab", "fw2"));
        assert_eq!(set.generation, Some(4));
        assert!(set.status.is_none());
        assert_eq!(set.reference.name.as_deref(), Some("fw"));
        assert_eq!(set.reference.kind.as_deref(), Some("TableEntrySet"));
        assert!(set.owner.is_none(), "no uid, no owner reference");
        let mut stored = cr.clone();
        stored.metadata.uid = Some("u-1".into());
        let owner = Set::of(&stored).owner.expect("owner reference");
        assert_eq!((owner.uid.as_str(), owner.controller), ("u-1", Some(true)));
        let mut later = cr.clone();
        later.status = Some(Default::default());
        assert!(set.with_status_of(&later).status.is_some());
        let revision = set.spec.clone();
        let then = set.at_revision(&revision);
        assert_eq!((then.key.as_str(), then.generation), ("lab/fw", None));
    }
}
