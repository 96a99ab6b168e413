//! p4runtime-shell (PyPI, unchanged) against the emulator: connect as
//! primary, set the firewall pipeline, insert, read back, modify, delete.
//!
//! The virtualenv lives in `.local/p4runtime-shell-venv` (hack/install-deps.sh
//! creates it; this test creates or refreshes it when e2e/python/requirements.txt
//! changed).

use std::path::{Path, PathBuf};
use std::process::Command;

use p4fleet_e2e::repo_root;
use p4fleet_emulator::{Emulator, EmulatorConfig};

/// The venv with p4runtime-shell, created or refreshed from requirements.txt.
fn venv() -> PathBuf {
    let root = repo_root();
    let req = root.join("e2e/python/requirements.txt");
    let dir = root.join(".local/p4runtime-shell-venv");
    let stamp = dir.join("requirements.txt");
    let want = std::fs::read(&req).expect("read e2e/python/requirements.txt");
    let python = dir.join("bin/python");
    if python.exists() && std::fs::read(&stamp).ok().as_deref() == Some(want.as_slice()) {
        return python;
    }
    run(Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&dir));
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(&req));
    std::fs::write(&stamp, want).unwrap();
    python
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the p4runtime-shell script `script` (in e2e/python) with `args`;
/// panics with its output unless it printed "all checks passed". Returns
/// its `ok:` lines.
async fn run_script(python: PathBuf, script: &str, args: Vec<std::ffi::OsString>) -> Vec<String> {
    let script = repo_root().join("e2e/python").join(script);
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let checks: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("ok:") || l.starts_with("FAIL"))
        .map(String::from)
        .collect();
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "p4runtime-shell script failed: {checks:#?}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    checks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4runtime_shell_sets_pipeline_inserts_reads_and_deletes() {
    let python = tokio::task::spawn_blocking(venv).await.unwrap();
    let running = Emulator::start(EmulatorConfig {
        device_ids: vec![1],
        ..Default::default()
    })
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let device_config = tmp.path().join("firewall.json");
    // bmv2 would want its JSON here; the emulator only stores the bytes.
    std::fs::write(&device_config, b"{}").unwrap();
    let p4info: &Path = &repo_root().join("examples/firewall/p4info.txt");
    let addr = running.p4runtime_addr().to_string();
    let args = vec![
        "--grpc-addr".into(),
        addr.into(),
        "--device-id".into(),
        "1".into(),
        "--p4info".into(),
        p4info.into(),
        "--config".into(),
        device_config.into(),
    ];
    let checks = run_script(python, "p4runtime_shell_test.py", args).await;
    eprintln!("{}", checks.join("\n"));
    let stats = running.stats(1).unwrap();
    assert_eq!(stats.set_pipeline_rpcs, 1);
    assert_eq!(stats.inserts, 21);
    assert_eq!(stats.modifies, 1);
    assert_eq!(stats.deletes, 21);
    assert_eq!(stats.entries, 0);
    running.shutdown().await.unwrap();
}

/// The firewall P4Info plus a direct counter on its table, a meter and a
/// register array, for the resources script.
const RESOURCES: &str = r#"
direct_counters { preamble { id: 330000001 name: "MyIngress.firewall_hits" alias: "firewall_hits" } spec { unit: BOTH } direct_table_id: 49661089 }
meters { preamble { id: 335000001 name: "MyIngress.rate" alias: "rate" } spec { unit: BYTES } size: 4 }
registers { preamble { id: 369000001 name: "MyIngress.seen" alias: "seen" } type_spec { bitstring { bit { bitwidth: 12 } } } size: 16 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4runtime_shell_writes_and_reads_meters_counters_and_registers() {
    let python = tokio::task::spawn_blocking(venv).await.unwrap();
    let running = Emulator::start(EmulatorConfig {
        device_ids: vec![1],
        ..Default::default()
    })
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let device_config = tmp.path().join("firewall.json");
    std::fs::write(&device_config, b"{}").unwrap();
    let p4info = tmp.path().join("p4info.txt");
    let firewall =
        std::fs::read_to_string(repo_root().join("examples/firewall/p4info.txt")).unwrap();
    std::fs::write(&p4info, format!("{firewall}{RESOURCES}")).unwrap();
    let addr = running.p4runtime_addr().to_string();
    let args = vec![
        "--grpc-addr".into(),
        addr.into(),
        "--device-id".into(),
        "1".into(),
        "--register-id".into(),
        "369000001".into(),
        "--p4info".into(),
        p4info.into(),
        "--config".into(),
        device_config.into(),
    ];
    run_script(python, "p4runtime_shell_resources.py", args).await;
    running.shutdown().await.unwrap();
}
