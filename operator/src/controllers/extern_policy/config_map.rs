//! The ConfigMap that holds a policy's T4P4S launch options: written by
//! server-side apply with the operator's field manager, owned by the
//! policy (garbage-collected with it), and deleted while the policy has no
//! T4P4S rendering, so that a T4P4S deployment never mounts options the
//! policy no longer says.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use p4fleet_crds::AsyncExternPolicy;

use super::t4p4s::{self, Rendering};
use crate::status::FIELD_MANAGER;

/// Label on every rendered ConfigMap: the policy it renders.
pub const POLICY_LABEL: &str = "p4fleet.dev/async-extern-policy";

/// The ConfigMap object for a rendering of `policy`.
pub fn object(policy: &AsyncExternPolicy, launch: &t4p4s::Launch) -> serde_json::Value {
    let owner = policy.controller_owner_ref(&());
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": launch.config_map,
            "labels": {
                POLICY_LABEL: policy.name_any(),
                "app.kubernetes.io/managed-by": "p4fleet",
            },
            "ownerReferences": owner.into_iter().collect::<Vec<_>>(),
        },
        "data": launch.data(&policy.name_any()),
    })
}

/// Applies the rendering, or deletes the ConfigMap of a policy that has
/// none (a missing one is fine).
pub async fn publish(
    client: &Client,
    ns: &str,
    policy: &AsyncExternPolicy,
    rendered: &Rendering,
) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    match rendered {
        Ok(launch) => {
            api.patch(
                &launch.config_map,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(object(policy, launch)),
            )
            .await?;
        }
        Err(_) => {
            let name = t4p4s::config_map_name(&policy.name_any());
            match api.delete(&name, &DeleteParams::default()).await {
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                other => {
                    other?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_map_is_owned_by_its_policy() {
        let mut p: AsyncExternPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "AsyncExternPolicy",
            "metadata": {"name": "l2", "namespace": "ns", "uid": "u-1"},
            "spec": {"virtualSwitchRef": "l2", "externs": [{"name": "async_encrypt", "mode": "Sync"}]}
        }))
        .unwrap();
        let host = t4p4s::Host {
            program: "l2crypt".into(),
            cores: None,
        };
        let launch = t4p4s::render("l2", &p.spec, &host).unwrap();
        let cm = object(&p, &launch);
        assert_eq!(cm["metadata"]["name"], "l2-t4p4s");
        let owner = &cm["metadata"]["ownerReferences"][0];
        assert_eq!(
            (
                &owner["kind"],
                &owner["name"],
                &owner["uid"],
                &owner["controller"]
            ),
            (
                &serde_json::json!("AsyncExternPolicy"),
                &serde_json::json!("l2"),
                &serde_json::json!("u-1"),
                &serde_json::json!(true)
            )
        );
        assert_eq!(
            cm["data"][t4p4s::ARGS],
            ":l2crypt x_crypto async=off cores=1"
        );
        // Without a uid (never the case for a stored object) no owner.
        p.metadata.uid = None;
        assert_eq!(
            object(&p, &launch)["metadata"]["ownerReferences"],
            serde_json::json!([])
        );
    }
}
