//! One owner for what a device holds once (pure): a table's entries under
//! an Exclusive set, a table's default action, a digest's configuration,
//! a VirtualSwitch's extern policy. When two objects claim the same one,
//! the older keeps it, decided the same way by both and by every operator
//! process: the earlier `creationTimestamp`, then the name. The other is
//! held (it writes nothing of that claim to the device), and both report
//! the conflict naming each other, so the device is left alone instead of
//! flipping between the two.

use kube::{Resource, ResourceExt};

/// Whether `a` precedes `b`: created earlier, or at the same second with
/// the smaller name. An object without a creation time (never stored)
/// comes last.
pub fn older<K: Resource>(a: &K, b: &K) -> bool {
    let when = |o: &K| o.meta().creation_timestamp.as_ref().map(|t| t.0);
    match (when(a), when(b)) {
        (Some(x), Some(y)) if x != y => x < y,
        (Some(_), None) => true,
        (None, Some(_)) => false,
        _ => a.name_any() < b.name_any(),
    }
}

/// Whether `other` is a live rival of `me`: another object of the same
/// namespace that is not being deleted (one being deleted only takes its
/// own claims back).
pub fn rival<K: Resource>(me: &K, other: &K) -> bool {
    other.meta().namespace == me.meta().namespace
        && other.meta().name != me.meta().name
        && other.meta().deletion_timestamp.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn obj(name: &str, created: Option<i64>) -> ConfigMap {
        let mut o = ConfigMap::default();
        o.metadata.name = Some(name.into());
        o.metadata.namespace = Some("ns".into());
        o.metadata.creation_timestamp = created.map(|t| Time(Timestamp::from_second(t).unwrap()));
        o
    }

    #[test]
    fn the_older_wins_then_the_name_and_a_stored_one_before_a_new_one() {
        let (a, b) = (obj("b", Some(1)), obj("a", Some(2)));
        assert!(older(&a, &b) && !older(&b, &a));
        let (a, b) = (obj("a", Some(5)), obj("b", Some(5)));
        assert!(older(&a, &b) && !older(&b, &a), "same second: by name");
        let (a, b) = (obj("z", Some(5)), obj("a", None));
        assert!(older(&a, &b) && !older(&b, &a));
    }

    #[test]
    fn rivals_are_other_live_objects_of_the_namespace() {
        let me = obj("a", Some(1));
        assert!(rival(&me, &obj("b", Some(2))));
        assert!(!rival(&me, &me.clone()));
        let mut gone = obj("c", Some(0));
        gone.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(9).unwrap()));
        assert!(!rival(&me, &gone));
        let mut elsewhere = obj("d", Some(0));
        elsewhere.metadata.namespace = Some("other".into());
        assert!(!rival(&me, &elsewhere));
    }
}
