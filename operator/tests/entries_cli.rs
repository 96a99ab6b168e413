//! `p4fleet entries ...` run as a binary: exit codes, `FILE:LINE` errors,
//! convert output that a TableEntrySet's parse accepts, fmt, and export
//! from an emulated device.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use p4fleet::stages::{SourceText, Sources, desired};
use p4fleet_crds::{TableEntrySet, TableEntrySetSpec};
use p4fleet_model::entries::{Entry, TableSchema, WriteOp, parse_text};
use p4fleet_proto::p4info;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .join(rel)
}

fn p4fleet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_p4fleet"))
        .args(args)
        .output()
        .expect("run p4fleet")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `p4fleet entries CMD --p4info P4INFO ARGS...`.
fn entries(cmd: &str, p4info: &Path, args: &[&str]) -> Output {
    let mut all = vec!["entries", cmd, "--p4info", p4info.to_str().unwrap()];
    all.extend(args);
    p4fleet(&all)
}

/// `p4fleet entries convert` of the router's P4Info: `--from FROM MORE... FILE`.
fn convert(from: &str, more: &[&str], file: &Path) -> Output {
    let mut args = vec!["--from", from];
    args.extend(more);
    args.push(file.to_str().unwrap());
    entries("convert", &repo(ROUTER_P4INFO), &args)
}

/// `p4fleet entries export`, off the test's runtime (the command blocks).
async fn export(p4info: &Path, args: &[impl AsRef<str>]) -> Output {
    let p4info = p4info.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| a.as_ref().to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        entries("export", &p4info, &args)
    })
    .await
    .unwrap()
}

/// The export succeeded, starts with `#! table TABLE`, and holds `want`.
fn assert_exported(out: &Output, table: &str, schema: &TableSchema, want: &[Entry]) {
    assert!(out.status.success(), "{}", text(&out.stderr));
    let exported = text(&out.stdout);
    assert!(
        exported.starts_with(&format!("#! table {table}\n")),
        "{exported}"
    );
    let mut back = parse_text(schema, &exported).unwrap();
    let mut want = want.to_vec();
    back.sort();
    want.sort();
    assert_eq!(back, want);
}

const ROUTER_P4INFO: &str = "examples/router/p4info.txt";

#[test]
fn validate_passes_the_examples_and_names_file_and_line_of_errors() {
    let p4info = repo(ROUTER_P4INFO);
    let good = [
        repo("examples/router/acl.entries.txt"),
        repo("examples/router/ipv4_lpm.entries.txt"),
    ];
    let files: Vec<&str> = good.iter().map(|p| p.to_str().unwrap()).collect();
    let out = entries("validate", &p4info, &files);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("for MyIngress.acl, 0 invalid"));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("lpm.txt");
    std::fs::write(
        &bad,
        "#! table MyIngress.ipv4_lpm\n\
         dstAddr=10.0.0.0/8 => drop\n\
         dstAddr=10.0.1.1/24 => drop\n\
         dstAddr=10.0.2.0/24 => set_nhop dmac=00:00:00:00:00:01 port=512\n\
         dstAddr=10.0.0.0/8 => drop\n",
    )
    .unwrap();
    let out = entries("validate", &p4info, &[bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    let b = bad.display();
    assert!(
        err.contains(&format!("{b}:3: hdr.ipv4.dstAddr: ")) && err.contains("host bits"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{b}:4: MyIngress.set_nhop.port: 512 needs 10 bits"
        )),
        "{err}"
    );
    assert!(err.contains(&format!("{b}:5: duplicate entry")), "{err}");
    assert!(text(&out.stdout).contains("1 entry for MyIngress.ipv4_lpm, 3 invalid"));

    // A file that names no table, and --table for the wrong one.
    let nameless = dir.path().join("nameless.txt");
    std::fs::write(&nameless, "dstAddr=10.0.0.0/8 => drop\n").unwrap();
    let out = entries("validate", &p4info, &[nameless.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no table"),
        "{}",
        text(&out.stderr)
    );
    let out = entries(
        "validate",
        &p4info,
        &["--table", "acl", good[1].to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(":2: entries are for table"),
        "{}",
        text(&out.stderr)
    );

    // What the tool cannot judge is exit code 2.
    let out = entries("validate", &bad, &[bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not a P4Info"),
        "{}",
        text(&out.stderr)
    );
    let out = p4fleet(&["entries", "validate", "--p4info", "/nonexistent", "x"]);
    assert_eq!(out.status.code(), Some(2));
}

const SCRIPT: &str = "\
table_set_default MyIngress.ipv4_lpm MyIngress.drop
table_add MyIngress.ipv4_lpm MyIngress.set_nhop 10.0.1.0/24 => 00:00:0a:00:01:01 1
table_add MyIngress.ipv4_lpm MyIngress.set_nhop 0x0a000200/24 => 0x00000a000201 2
table_add MyIngress.ipv4_lpm MyIngress.drop 192.168.0.0/16 =>
table_add MyIngress.acl MyIngress.deny 10.0.0.0&&&255.0.0.0 0&&&0 6&&&0xff 22->22 => 1
table_add MyIngress.acl MyIngress.permit 0&&&0 0&&&0 0&&&0 0->65535 => 10
";

#[test]
fn converted_simple_switch_cli_script_is_accepted_by_a_table_entry_set() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("s1-commands.txt");
    std::fs::write(&script, SCRIPT).unwrap();
    let p4info_path = repo(ROUTER_P4INFO);
    let out = convert("simple-switch-cli", &["--table", "ipv4_lpm"], &script);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let converted = text(&out.stdout);
    assert_eq!(
        converted,
        "#! table MyIngress.ipv4_lpm\n\
         #! fields hdr.ipv4.dstAddr\n\
         #! action set_nhop\n\
         10.0.1.0/24 00:00:0a:00:01:01 1\n\
         10.0.2.0/24 00:00:0a:00:02:01 2\n\
         192.168.0.0/16 drop\n"
    );
    assert!(
        text(&out.stderr).contains(&format!(
            "{}:1: skipped `table_set_default`",
            script.display()
        )),
        "{}",
        text(&out.stderr)
    );

    // The text as a ConfigMap of a TableEntrySet, parsed by the
    // controller's own desired-state code: three entries, no errors.
    let info = p4info::parse_text(&std::fs::read_to_string(&p4info_path).unwrap()).unwrap();
    let schema = TableSchema::from_p4info(&info, "MyIngress.ipv4_lpm").unwrap();
    let spec: TableEntrySetSpec = serde_json::from_value(serde_json::json!({
        "virtualSwitchRef": "vs", "table": "MyIngress.ipv4_lpm",
        "entriesFrom": [{"configMap": "routes"}]
    }))
    .unwrap();
    let set = TableEntrySet::new("routes", spec);
    let sources = Sources {
        texts: vec![SourceText {
            config_map: "routes".into(),
            key: "entries".into(),
            resource_version: "1".into(),
            text: converted.as_str().into(),
        }],
    };
    let d = desired::parse(&set.spec, &schema, &sources);
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    assert_eq!(d.len(), 3);

    // Every table of the script, and the output validates.
    let out = convert("simple-switch-cli", &["--style", "named"], &script);
    assert!(out.status.success());
    let all = text(&out.stdout);
    assert_eq!(all.matches("#! table ").count(), 2, "{all}");
    assert!(all.contains("=> deny @16777215"), "{all}");

    // A bad line fails with file:line and exit code 1.
    std::fs::write(&script, "table_add ipv4_lpm set_nhop 10.0.1.1/24 => 1 1\n").unwrap();
    let out = convert("simple-switch-cli", &[], &script);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!("{}:1: hdr.ipv4.dstAddr", script.display())),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn convert_reads_runtime_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s1-runtime.json");
    std::fs::write(
        &json,
        r#"{"target": "bmv2", "table_entries": [
  {"table": "MyIngress.ipv4_lpm", "default_action": true, "action_name": "MyIngress.drop", "action_params": {}},
  {"table": "MyIngress.ipv4_lpm", "match": {"hdr.ipv4.dstAddr": ["10.0.1.1", 32]},
   "action_name": "MyIngress.set_nhop", "action_params": {"dmac": "08:00:00:00:01:11", "port": 1}}
]}"#,
    )
    .unwrap();
    let out = convert("runtime-json", &["--style", "named"], &json);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "#! table MyIngress.ipv4_lpm\nhdr.ipv4.dstAddr=10.0.1.1/32 => set_nhop dmac=08:00:00:00:01:11 port=1\n"
    );
    assert!(text(&out.stderr).contains("table_entries[0]: skipped default action"));
}

#[test]
fn fmt_rewrites_to_canonical_form_and_check_reports() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("lpm.txt");
    std::fs::write(
        &f,
        "#! table ipv4_lpm\ndstAddr=0x0a000000/8   =>   set_nhop 0x1 3  # comment\n",
    )
    .unwrap();
    let p4info_path = repo(ROUTER_P4INFO);
    let file = f.to_str().unwrap();
    let fmt = |check: bool| {
        let args = if check {
            vec!["--check", file]
        } else {
            vec![file]
        };
        entries("fmt", &p4info_path, &args)
    };
    let out = fmt(true);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("not in canonical form"));
    let out = fmt(false);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let canonical = std::fs::read_to_string(&f).unwrap();
    assert_eq!(
        canonical,
        "#! table MyIngress.ipv4_lpm\n#! fields hdr.ipv4.dstAddr\n#! action set_nhop\n10.0.0.0/8 00:00:00:00:00:01 3\n"
    );
    assert!(fmt(true).status.success());
    // A file with an error is left as it is.
    std::fs::write(&f, "#! table ipv4_lpm\ndstAddr=10.0.0.1/8 => drop\n").unwrap();
    let out = fmt(false);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains(":2: hdr.ipv4.dstAddr"));
    // Unless host bits are masked, as p4runtime-shell does (opt-in).
    let out = entries(
        "fmt",
        &p4info_path,
        &["--mask-host-bits", "--style", "named", file],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        "#! table MyIngress.ipv4_lpm\nhdr.ipv4.dstAddr=10.0.0.0/8 => drop\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_reads_a_device_table_back_in_the_line_format() {
    let running = p4fleet_emulator::Emulator::start(p4fleet_emulator::EmulatorConfig {
        device_ids: vec![5],
        ..Default::default()
    })
    .await
    .unwrap();
    let p4info_path = repo(ROUTER_P4INFO);
    let info = p4info::parse_text(&std::fs::read_to_string(&p4info_path).unwrap()).unwrap();
    let schema = TableSchema::from_p4info(&info, "acl").unwrap();
    let file = std::fs::read_to_string(repo("examples/router/acl.entries.txt")).unwrap();
    let entries = parse_text(&schema, &file).unwrap();

    let addr = running.p4runtime_addr().to_string();
    let dev = p4fleet_client::Device::connect(
        p4fleet_client::Target::p4runtime(addr.clone(), 5),
        p4fleet_client::Identity {
            election_id: 7,
            client_id: 1,
        },
    )
    .unwrap();
    dev.set_pipeline(0, &info, b"cfg".to_vec(), 1)
        .await
        .unwrap();
    let ops: Vec<WriteOp> = entries.iter().map(WriteOp::insert).collect();
    let rep = dev
        .write_ops(0, &ops, p4fleet_client::WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(rep.failures, vec![]);

    let out = export(
        &p4info_path,
        &["--table", "acl", "--address", &addr, "--device-id", "5"],
    )
    .await;
    assert_exported(&out, "MyIngress.acl", &schema, &entries);

    // A device that is not there is exit code 2 with the reason.
    running.shutdown().await.unwrap();
    let out = export(
        &p4info_path,
        &[
            "--table",
            "acl",
            "--address",
            "127.0.0.1:1",
            "--timeout-seconds",
            "5",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("p4fleet: "),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_reads_a_bfrt_table_back_next_to_the_writer() {
    let running = p4fleet_emulator::Emulator::start(p4fleet_emulator::EmulatorConfig {
        device_ids: vec![3],
        bfrt_addr: Some(([127, 0, 0, 1], 0).into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let p4info_path = repo("examples/firewall/p4info.txt");
    let info = p4info::parse_text(&std::fs::read_to_string(&p4info_path).unwrap()).unwrap();
    let schema = TableSchema::from_p4info(&info, "firewall").unwrap();
    let mut file = String::from("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action allow\n");
    for i in 1..=20 {
        file.push_str(&format!("10.0.0.{i} 192.168.0.1 {i}\n"));
    }
    file.push_str("#! action drop\n10.0.1.1 192.168.0.1\n");
    let entries = parse_text(&schema, &file).unwrap();

    // A writer (as the operator: its own client id) loads the program and
    // writes the entries.
    let addr = running.bfrt_addr().unwrap().to_string();
    let writer = p4fleet_client::Device::connect(
        p4fleet_client::Target::bfrt(addr.clone(), 3),
        p4fleet_client::Identity {
            election_id: 1,
            client_id: 1,
        },
    )
    .unwrap();
    let pipeline = p4fleet_client::TofinoPipeline {
        p4_name: "firewall".into(),
        bfrt_json: std::fs::read(repo("examples/firewall/bfrt.json")).unwrap(),
        ..Default::default()
    };
    writer
        .set_tofino_pipeline(0, &info, &pipeline)
        .await
        .unwrap();
    let ops: Vec<WriteOp> = entries.iter().map(WriteOp::insert).collect();
    let rep = writer
        .write_ops(0, &ops, p4fleet_client::WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(rep.failures, vec![]);

    let args = |extra: &[&'static str]| {
        let mut args = vec!["--protocol", "bfrt", "--table", "MyIngress.firewall"];
        args.extend(["--address", &addr, "--device-id", "3"]);
        args.extend(extra);
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>()
    };
    let out = export(&p4info_path, &args(&[])).await;
    assert_exported(&out, "MyIngress.firewall", &schema, &entries);

    // The reader's own client id left the writer bound: it still writes.
    let more = parse_text(
        &schema,
        "#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr\n#! action drop\n10.0.2.1 192.168.0.1\n",
    )
    .unwrap();
    let ops: Vec<WriteOp> = more.iter().map(WriteOp::insert).collect();
    let rep = writer
        .write_ops(0, &ops, p4fleet_client::WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(rep.failures, vec![]);

    // A program the device does not run is exit code 2, naming what runs.
    let out = export(&p4info_path, &args(&["--program", "router"])).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("[firewall]"),
        "{}",
        text(&out.stderr)
    );
    running.shutdown().await.unwrap();
}
