//! The committed CRD manifests must equal what the code generates.

use std::path::Path;

#[test]
fn committed_crds_match_the_generated_ones() {
    let want = p4fleet_crds::all_yaml();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root");
    for rel in ["charts/p4fleet/crds/crds.yaml", "config/crd/crds.yaml"] {
        let got = std::fs::read_to_string(root.join(rel)).unwrap_or_default();
        assert!(
            got == want,
            "{rel} differs from `p4fleet crds` output (or is missing): run `make crds` and commit the result"
        );
    }
}

#[test]
fn crds_subcommand_prints_all_five() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_p4fleet"))
        .arg("crds")
        .output()
        .expect("run p4fleet crds");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text, p4fleet_crds::all_yaml());
    assert_eq!(text.matches("kind: CustomResourceDefinition").count(), 5);
}
