//! The objects a fleet run applies, as a user would write them: one
//! P4Program, and per Switch a Switch, a ConfigMap of entries in the line
//! format, a VirtualSwitch and a TableEntrySet (scenario a); or one Switch
//! with a TableEntrySet drawn from many ConfigMaps (scenario b). Pure.

use std::fmt::Write as _;

use serde_json::{Value, json};

pub const NAMESPACE: &str = "fleet";
pub const PROGRAM: &str = "fleet-fw";
pub const TABLE: &str = "MyIngress.firewall";
pub const FIELD_MANAGER: &str = "p4fleet-fleet-bench";
const API_VERSION: &str = "p4fleet.dev/v1alpha1";

/// Where one Switch's device is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub endpoint: String,
    pub device_id: u64,
}

/// The entries of a set: which version of the ports (0 = as created,
/// 1 = after the change of every `change_every`-th entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entries {
    pub count: usize,
    pub change_every: usize,
    pub version: u8,
}

impl Entries {
    /// Entries that differ between version 0 and 1.
    pub fn changed(&self) -> usize {
        self.count.div_ceil(self.change_every.max(1))
    }

    fn port(&self, e: usize) -> usize {
        let base = 1 + e % 250;
        if self.version == 1 && e.is_multiple_of(self.change_every.max(1)) {
            base % 250 + 1
        } else {
            base
        }
    }

    /// Lines `first..first+count` of the compact line format: exact match on
    /// source (10.x.y.z, unique up to 2^24 entries) and destination, action
    /// allow(port).
    pub fn lines(&self, first: usize, count: usize) -> String {
        let mut s = format!(
            "#! table {TABLE}\n#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n"
        );
        for e in first..(first + count).min(self.count) {
            let _ = writeln!(
                s,
                "10.{}.{}.{} 172.16.{}.{} {}",
                (e >> 16) & 255,
                (e >> 8) & 255,
                e & 255,
                (e >> 8) & 255,
                e & 255,
                self.port(e)
            );
        }
        s
    }
}

/// The P4Info with every table's `size` set to `size` (the emulator
/// enforces P4Info sizes; the example firewall has 65,536).
pub fn p4info_with_size(p4info: &str, size: usize) -> String {
    p4info
        .lines()
        .map(|l| {
            let indent = &l[..l.len() - l.trim_start().len()];
            if l.trim_start().starts_with("size:") {
                format!("{indent}size: {size}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

pub fn program(p4info: &str) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "P4Program",
        "metadata": {"name": PROGRAM, "namespace": NAMESPACE},
        "spec": {"p4info": {"inline": p4info}}
    })
}

pub fn switch_name(i: usize) -> String {
    format!("fleet-sw-{i:04}")
}

pub fn set_name(i: usize) -> String {
    format!("tes-{i:04}")
}

fn switch(i: usize, device: &Device) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "Switch",
        "metadata": {"name": switch_name(i)},
        "spec": {"target": "Bmv2", "endpoint": device.endpoint, "deviceId": device.device_id, "slots": 1}
    })
}

fn virtual_switch(i: usize) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": "VirtualSwitch",
        "metadata": {"name": format!("vs-{i:04}"), "namespace": NAMESPACE},
        "spec": {"programRef": PROGRAM, "switchRef": switch_name(i), "slot": 0}
    })
}

/// The key of a compressed ConfigMap's text (the operator gunzips
/// `binaryData` keys ending in `.gz`, docs/entries.md).
pub const GZIP_KEY: &str = "entries.gz";

/// `text` gzip-compressed at flate2's default level (that of `gzip -6`).
pub fn gzip(text: &str) -> Vec<u8> {
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

/// A ConfigMap holding `text` gzip-compressed in `binaryData`, as
/// `kubectl create configmap NAME --from-file=entries.gz` makes it.
pub fn gzip_config_map(name: &str, text: &str) -> Value {
    // ByteString serializes as base64, as binaryData is written.
    let bytes = serde_json::to_value(k8s_openapi::ByteString(gzip(text))).expect("bytes serialize");
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "binaryData": {GZIP_KEY: bytes}
    })
}

pub fn config_map(name: &str, text: String) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {"entries": text}
    })
}

fn entry_set(i: usize, sources: &[String], key: &str, write: Value) -> Value {
    let from: Vec<Value> = sources
        .iter()
        .map(|cm| json!({"configMap": cm, "key": key}))
        .collect();
    json!({
        "apiVersion": API_VERSION, "kind": "TableEntrySet",
        "metadata": {"name": set_name(i), "namespace": NAMESPACE},
        "spec": {"virtualSwitchRef": format!("vs-{i:04}"), "table": TABLE,
                 "entriesFrom": from, "write": write}
    })
}

fn fleet_config_map(i: usize, entries: &Entries) -> Value {
    config_map(&format!("entries-{i:04}"), entries.lines(0, entries.count))
}

/// Scenario (a): the program, then per device a Switch, its ConfigMap, a
/// VirtualSwitch and a TableEntrySet (batch size and in-flight at their
/// defaults: 1,000 and 4).
pub fn fleet(p4info: &str, devices: &[Device], entries: &Entries) -> Vec<Value> {
    let mut out = vec![program(p4info)];
    for (i, d) in devices.iter().enumerate() {
        out.push(switch(i, d));
        out.push(fleet_config_map(i, entries));
        out.push(virtual_switch(i));
        out.push(entry_set(
            i,
            &[format!("entries-{i:04}")],
            "entries",
            json!({"batchSize": 1000, "maxInFlight": 4}),
        ));
    }
    out
}

/// The label every VirtualSwitch of a shared-set fleet carries, and the
/// names of that fleet's one ConfigMap and TableEntrySet.
pub const SHARED_LABEL: (&str, &str) = ("p4fleet.dev/fleet-bench", "shared");
pub const SHARED_MAP: &str = "entries-shared";
pub const SHARED_SET: &str = "tes-shared";

/// Scenario (a) as a fleet writing the same entries everywhere: the
/// program, per device a Switch and a labelled VirtualSwitch, and one
/// ConfigMap and one TableEntrySet selecting every VirtualSwitch (a
/// change is then one object, however large the fleet).
pub fn shared_fleet(p4info: &str, devices: &[Device], entries: &Entries) -> Vec<Value> {
    let mut out = vec![program(p4info)];
    for (i, d) in devices.iter().enumerate() {
        out.push(switch(i, d));
        let mut vs = virtual_switch(i);
        vs["metadata"]["labels"] = json!({SHARED_LABEL.0: SHARED_LABEL.1});
        out.push(vs);
    }
    out.push(shared_config_map(entries));
    out.push(json!({
        "apiVersion": API_VERSION, "kind": "TableEntrySet",
        "metadata": {"name": SHARED_SET, "namespace": NAMESPACE},
        "spec": {"virtualSwitchSelector": {"matchLabels": {SHARED_LABEL.0: SHARED_LABEL.1}},
                 "table": TABLE,
                 "entriesFrom": [{"configMap": SHARED_MAP, "key": "entries"}],
                 "write": {"batchSize": 1000, "maxInFlight": 4}}
    }));
    out
}

/// The one ConfigMap of a shared-set fleet with `entries`.
pub fn shared_config_map(entries: &Entries) -> Value {
    config_map(SHARED_MAP, entries.lines(0, entries.count))
}

/// Scenario (c): the fleet's ConfigMaps with `entries` (version 1).
pub fn fleet_config_maps(switches: usize, entries: &Entries) -> Vec<Value> {
    (0..switches)
        .map(|i| fleet_config_map(i, entries))
        .collect()
}

/// Scenario (b): one Switch, one TableEntrySet drawn from
/// ceil(count / per_map) ConfigMaps of `per_map` lines each, their text
/// gzip-compressed in `binaryData` when `gzip` (as issue 14 (b) asks: a
/// 1,000,000-entry table fits in a few such ConfigMaps) or plain in
/// `data`.
pub fn big(
    p4info: &str,
    device: &Device,
    entries: &Entries,
    per_map: usize,
    gzip: bool,
) -> Vec<Value> {
    let per_map = per_map.max(1);
    let maps = entries.count.div_ceil(per_map);
    let names: Vec<String> = (0..maps).map(|m| format!("big-entries-{m:03}")).collect();
    let mut out = vec![program(p4info), switch(0, device), virtual_switch(0)];
    for (m, name) in names.iter().enumerate() {
        let text = entries.lines(m * per_map, per_map);
        out.push(if gzip {
            gzip_config_map(name, &text)
        } else {
            config_map(name, text)
        });
    }
    let key = if gzip { GZIP_KEY } else { "entries" };
    out.push(entry_set(
        0,
        &names,
        key,
        json!({"batchSize": 10000, "maxInFlight": 4}),
    ));
    out
}

/// Objects grouped into YAML files by kind, in an order kubectl applies
/// them in (`kubectl apply -f DIR` takes files by name).
pub fn yaml_files(objects: &[Value]) -> Vec<(String, String)> {
    const ORDER: [&str; 5] = [
        "P4Program",
        "Switch",
        "ConfigMap",
        "VirtualSwitch",
        "TableEntrySet",
    ];
    let mut files = Vec::new();
    for (n, kind) in ORDER.iter().enumerate() {
        let docs: Vec<String> = objects
            .iter()
            .filter(|o| o["kind"] == *kind)
            .map(|o| serde_yaml::to_string(o).expect("JSON values serialize"))
            .collect();
        if !docs.is_empty() {
            files.push((
                format!("{n}0-{}.yaml", kind.to_lowercase()),
                docs.join("---\n"),
            ));
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices(n: usize) -> Vec<Device> {
        (0..n)
            .map(|i| Device {
                endpoint: "127.0.0.1:9559".into(),
                device_id: i as u64 + 1,
            })
            .collect()
    }

    #[test]
    fn lines_have_unique_keys_and_the_change_touches_every_kth() {
        let v0 = Entries {
            count: 1000,
            change_every: 100,
            version: 0,
        };
        let v1 = Entries { version: 1, ..v0 };
        let (a, b) = (v0.lines(0, 1000), v1.lines(0, 1000));
        let body = |s: &str| s.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!((body(&a), body(&b)), (1000, 1000));
        let keys: std::collections::HashSet<_> = a
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.rsplit_once(' ').unwrap().0)
            .collect();
        assert_eq!(keys.len(), 1000);
        let differ = a.lines().zip(b.lines()).filter(|(x, y)| x != y).count();
        assert_eq!(differ, v0.changed());
        assert_eq!(differ, 10);
        assert!(a.starts_with("#! table MyIngress.firewall\n"));
    }

    #[test]
    fn ports_stay_within_nine_bits() {
        let v1 = Entries {
            count: 600,
            change_every: 1,
            version: 1,
        };
        for e in 0..600 {
            assert!((1..=250).contains(&v1.port(e)));
            assert_ne!(v1.port(e), Entries { version: 0, ..v1 }.port(e));
        }
    }

    #[test]
    fn a_fleet_is_four_objects_per_switch_plus_the_program() {
        let e = Entries {
            count: 10,
            change_every: 100,
            version: 0,
        };
        let objs = fleet("p4info", &devices(3), &e);
        assert_eq!(objs.len(), 13);
        let sets: Vec<_> = objs
            .iter()
            .filter(|o| o["kind"] == "TableEntrySet")
            .collect();
        assert_eq!(sets[2]["spec"]["virtualSwitchRef"], "vs-0002");
        assert_eq!(
            sets[2]["spec"]["entriesFrom"][0]["configMap"],
            "entries-0002"
        );
        let sw = objs.iter().find(|o| o["kind"] == "Switch").unwrap();
        assert!(sw["metadata"].get("namespace").is_none());
        let files = yaml_files(&objs);
        let names: Vec<_> = files.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "00-p4program.yaml",
                "10-switch.yaml",
                "20-configmap.yaml",
                "30-virtualswitch.yaml",
                "40-tableentryset.yaml"
            ]
        );
        assert_eq!(files[1].1.matches("kind: Switch").count(), 3);
    }

    #[test]
    fn a_shared_fleet_is_one_set_selecting_every_virtual_switch() {
        let e = Entries {
            count: 10,
            change_every: 100,
            version: 0,
        };
        let objs = shared_fleet("p4info", &devices(3), &e);
        // The program, 3 × (Switch, VirtualSwitch), one ConfigMap, one set.
        assert_eq!(objs.len(), 9);
        let sets: Vec<_> = objs
            .iter()
            .filter(|o| o["kind"] == "TableEntrySet")
            .collect();
        assert_eq!(sets.len(), 1);
        let labels = &sets[0]["spec"]["virtualSwitchSelector"]["matchLabels"];
        for vs in objs.iter().filter(|o| o["kind"] == "VirtualSwitch") {
            assert_eq!(&vs["metadata"]["labels"], labels);
        }
        assert_eq!(sets[0]["spec"]["entriesFrom"][0]["configMap"], SHARED_MAP);
        let maps: Vec<_> = objs.iter().filter(|o| o["kind"] == "ConfigMap").collect();
        assert_eq!(maps.len(), 1);
        assert_eq!(maps[0], &shared_config_map(&e));
    }

    /// Scenario (b)'s entries.
    const MILLION: Entries = Entries {
        count: 1_000_000,
        change_every: 100,
        version: 0,
    };

    #[test]
    fn a_big_set_spans_config_maps_under_the_size_limit() {
        let objs = big("p4info", &devices(1)[0], &MILLION, 25_000, false);
        let maps: Vec<_> = objs.iter().filter(|o| o["kind"] == "ConfigMap").collect();
        assert_eq!(maps.len(), 40);
        let lines: usize = maps
            .iter()
            .map(|m| {
                let t = m["data"]["entries"].as_str().unwrap();
                assert!(t.len() < 1_000_000, "{} bytes", t.len());
                t.lines().filter(|l| !l.starts_with('#')).count()
            })
            .sum();
        assert_eq!(lines, 1_000_000);
        let set = objs.last().unwrap();
        assert_eq!(set["spec"]["entriesFrom"].as_array().unwrap().len(), 40);
    }

    #[test]
    fn a_compressed_big_set_fits_in_ten_config_maps() {
        use std::io::Read as _;
        let objs = big("p4info", &devices(1)[0], &MILLION, 100_000, true);
        let maps: Vec<_> = objs.iter().filter(|o| o["kind"] == "ConfigMap").collect();
        assert_eq!(maps.len(), 10);
        let mut lines = 0;
        for m in &maps {
            assert!(m.get("data").is_none());
            let bytes: k8s_openapi::ByteString =
                serde_json::from_value(m["binaryData"][GZIP_KEY].clone()).unwrap();
            // The API server's limit counts the raw bytes (1 MiB per object).
            assert!(bytes.0.len() < 900_000, "{} bytes", bytes.0.len());
            let mut text = String::new();
            flate2::read::GzDecoder::new(&bytes.0[..])
                .read_to_string(&mut text)
                .unwrap();
            lines += text.lines().filter(|l| !l.starts_with('#')).count();
        }
        assert_eq!(lines, 1_000_000);
        let set = objs.last().unwrap();
        assert_eq!(set["spec"]["entriesFrom"][0]["key"], GZIP_KEY);
        assert_eq!(set["spec"]["entriesFrom"].as_array().unwrap().len(), 10);
    }

    #[test]
    fn p4info_sizes_are_replaced() {
        let t = "tables {\n  size: 65536\n}\n";
        assert_eq!(
            p4info_with_size(t, 2_000_000),
            "tables {\n  size: 2000000\n}\n"
        );
    }
}
