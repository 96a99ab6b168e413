//! Schema-level checks that need no API server.

use p4fleet_crds::all;

#[test]
fn five_crds_in_group() {
    let crds = all();
    let names: Vec<_> = crds
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "switches.p4fleet.dev",
            "p4programs.p4fleet.dev",
            "virtualswitches.p4fleet.dev",
            "tableentrysets.p4fleet.dev",
            "asyncexternpolicies.p4fleet.dev"
        ]
    );
    for crd in &crds {
        let v = &crd.spec.versions[0];
        assert!(v.subresources.as_ref().unwrap().status.is_some());
        assert!(!v.additional_printer_columns.as_ref().unwrap().is_empty());
    }
}

#[test]
fn conditions_are_a_list_map_keyed_by_type() {
    for crd in all() {
        let json = serde_json::to_value(&crd).unwrap();
        let conditions = &json["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"]["conditions"];
        assert_eq!(
            conditions["x-kubernetes-list-type"],
            "map",
            "{}",
            crd.metadata.name.unwrap()
        );
        assert_eq!(conditions["x-kubernetes-list-map-keys"][0], "type");
        assert_eq!(
            conditions["items"]["required"],
            serde_json::json!(["status", "type"])
        );
    }
}
