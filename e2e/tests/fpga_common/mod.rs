//! Helpers shared by tests/vswitch_fpga.rs and examples/fpga_swap_bench.rs
//! (included with `#[path]`): P4VBox's programs as P4Programs with
//! synthetic bitstreams, a Switch for an emulated board, VirtualSwitches.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use p4fleet_client::{Device, Identity, Target};
use p4fleet_crds::{
    P4Program, SLOT_CLAIMS_ANNOTATION, SlotClaim, Switch, TableEntrySet, VirtualSwitch,
    find_condition,
};
use p4fleet_e2e::{create_json, repo_root, unique_name, wait_for};
use serde_json::json;

pub const WAIT: Duration = Duration::from_secs(120);

/// Polls `f` until it answers Some (within [`WAIT`]).
pub async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_for(what, WAIT, || {
        let fut = f();
        async move { fut.await.ok_or_else(|| "not yet".to_string()) }
    })
    .await
}

/// P4VBox's programs: (name, seed of the synthetic bitstream, luts, ffs).
pub const L2: (&str, u64, u64) = ("l2switch", 28_096, 40_506);
pub const ROUTER: (&str, u64, u64) = ("router", 57_704, 84_149);
pub const FIREWALL: (&str, u64, u64) = ("firewall", 45_683, 74_344);

/// A P4Program with FPGA artifacts (bitstream in a ConfigMap's binaryData).
pub async fn program(client: &Client, ns: &str, of: (&str, u64, u64)) -> String {
    let bits = p4fleet_emulator::fpga::bitstream::synthetic(2_800_000, of.0).unwrap();
    program_with_bitstream(client, ns, of.0, of, bits).await
}

/// P4Program `name`: the P4Info and resources of P4VBox's program `of`,
/// `bits` as its bitstream (2.8 Mb long).
pub async fn program_with_bitstream(
    client: &Client,
    ns: &str,
    name: &str,
    (example, luts, ffs): (&str, u64, u64),
    bits: Vec<u8>,
) -> String {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-fpga")},
    }))
    .unwrap();
    let mut cm = cm;
    cm.binary_data = Some([("bitstream".to_string(), ByteString(bits))].into());
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let p4info =
        std::fs::read_to_string(repo_root().join(format!("examples/{example}/p4info.txt")))
            .unwrap();
    let p: P4Program = serde_json::from_value(json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
        "metadata": {"name": name},
        "spec": {"p4info": {"inline": p4info}, "artifacts": {"fpga": {
            "bitstream": {"configMapKeyRef": {"name": format!("{name}-fpga"), "key": "bitstream"}},
            "bits": 2_800_000,
            "resources": {"luts": luts, "ffs": ffs},
        }}}
    }))
    .unwrap();
    let api = Api::<P4Program>::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &p).await.unwrap();
    until(&format!("P4Program {name} Ready"), || async {
        let p = api.get(name).await.ok()?;
        let st = p.status?;
        find_condition(&st.conditions, "Ready")
            .filter(|c| c.is_true())
            .and(st.digest)
    })
    .await
}

/// A Switch for the board at `addr`, once the operator has read its board info.
pub async fn fpga_switch(client: &Client, addr: SocketAddr) -> String {
    let name = unique_name("sume");
    let sw: Switch = serde_json::from_value(json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": name},
        "spec": {"target": "Fpga", "endpoint": addr.to_string(), "deviceId": 1,
                 "ports": [{"id": 0}, {"id": 1}, {"id": 2}, {"id": 3}]}
    }))
    .unwrap();
    let api = Api::<Switch>::all(client.clone());
    api.create(&PostParams::default(), &sw).await.unwrap();
    until(&format!("Switch {name} probed"), || async {
        let st = api.get(&name).await.ok()?.status?;
        (st.slots == Some(16) && st.capacity_source.as_deref() == Some("Device")).then_some(())
    })
    .await;
    name
}

/// Every entry P4Runtime device `1 + slot` of the board at `addr` holds, read back.
pub async fn read_back(addr: SocketAddr, slot: u32) -> Vec<p4fleet_proto::p4runtime::TableEntry> {
    let id = Identity {
        election_id: 1,
        client_id: 1,
    };
    let dev = Device::connect(Target::p4runtime(addr.to_string(), 1), id).unwrap();
    dev.read_table(slot, 0).await.unwrap()
}

/// A TableEntrySet for `table` of VirtualSwitch `vs`, its entries from
/// an example's entry file (a ConfigMap of that name).
pub async fn entry_set(client: &Client, ns: &str, name: &str, vs: &str, table: &str, file: &str) {
    let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
    create_json(
        &Api::<ConfigMap>::namespaced(client.clone(), ns),
        json!({"metadata": {"name": name}, "data": {"entries": text}}),
    )
    .await;
    create_json(
        &Api::<TableEntrySet>::namespaced(client.clone(), ns),
        json!({
            "apiVersion": "p4fleet.dev/v1alpha1", "kind": "TableEntrySet",
            "metadata": {"name": name},
            "spec": {"virtualSwitchRef": vs, "table": table,
                     "entriesFrom": [{"configMap": name, "key": "entries"}]}
        }),
    )
    .await;
}

/// The reason of a TableEntrySet's first False condition, with its message.
pub fn set_problem(s: &TableEntrySet) -> Option<(String, String)> {
    let st = s.status.as_ref()?;
    st.conditions
        .iter()
        .find(|c| !c.is_true())
        .map(|c| (c.reason.clone(), c.message.clone()))
}

pub fn vs(name: &str, program: &str, switch: &str, vlan: u16) -> VirtualSwitch {
    serde_json::from_value(json!({
        "apiVersion": "p4fleet.dev/v1alpha1", "kind": "VirtualSwitch",
        "metadata": {"name": name},
        "spec": {"programRef": program, "switchRef": switch, "isolation": {"vlan": vlan}}
    }))
    .unwrap()
}

/// P4VBox's three programs and, on a new Switch for the board at `addr`,
/// VirtualSwitches "a" (L2, VLAN 10), "b" (router, 20), "c" (L2, 30).
pub struct Three {
    pub router: String,
    pub firewall: String,
    pub switch: String,
    pub api: Api<VirtualSwitch>,
}

pub async fn three(client: &Client, ns: &str, addr: SocketAddr) -> Three {
    program(client, ns, L2).await;
    let router = program(client, ns, ROUTER).await;
    let firewall = program(client, ns, FIREWALL).await;
    let switch = fpga_switch(client, addr).await;
    let api = Api::<VirtualSwitch>::namespaced(client.clone(), ns);
    for (name, program, vlan) in [
        ("a", "l2switch", 10),
        ("b", "router", 20),
        ("c", "l2switch", 30),
    ] {
        api.create(&PostParams::default(), &vs(name, program, &switch, vlan))
            .await
            .unwrap();
    }
    Three {
        router,
        firewall,
        switch,
        api,
    }
}

/// A VirtualSwitch's condition `t`: (is true, reason, message).
pub fn condition(v: &VirtualSwitch, t: &str) -> Option<(bool, String, String)> {
    let c = find_condition(&v.status.as_ref()?.conditions, t)?;
    Some((c.is_true(), c.reason.clone(), c.message.clone()))
}

pub fn ready(v: &VirtualSwitch) -> bool {
    condition(v, "Ready").is_some_and(|c| c.0)
}

/// The message of a VirtualSwitch's `Scheduled=False Unschedulable`.
pub fn unschedulable(v: &VirtualSwitch) -> Option<String> {
    condition(v, "Scheduled")
        .filter(|c| !c.0 && c.1 == "Unschedulable")
        .map(|c| c.2)
}

/// Waits until VirtualSwitch `name` is Ready; returns it.
pub async fn until_ready(api: &Api<VirtualSwitch>, name: &str) -> VirtualSwitch {
    until(&format!("{name} Ready"), || async {
        let v = api.get(name).await.ok()?;
        ready(&v).then_some(v)
    })
    .await
}

/// Waits until VirtualSwitch `name` is Unschedulable; returns the message.
pub async fn until_unschedulable(api: &Api<VirtualSwitch>, name: &str) -> String {
    until(&format!("{name} Unschedulable"), || async {
        unschedulable(&api.get(name).await.ok()?)
    })
    .await
}

/// Creates `v` and waits until it is Unschedulable; returns the message.
pub async fn create_unschedulable(api: &Api<VirtualSwitch>, v: &VirtualSwitch) -> String {
    api.create(&PostParams::default(), v).await.unwrap();
    until_unschedulable(api, &v.name_any()).await
}

/// The slot claims recorded on a Switch.
pub fn claims(sw: &Switch) -> Vec<SlotClaim> {
    sw.annotations()
        .get(SLOT_CLAIMS_ANNOTATION)
        .map(|s| serde_json::from_str(s).unwrap())
        .unwrap_or_default()
}
