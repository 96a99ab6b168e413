//! Prints every CRD as YAML (`cargo run -p p4fleet-crds --example print_crds`).
fn main() {
    print!("{}", p4fleet_crds::all_yaml());
}
