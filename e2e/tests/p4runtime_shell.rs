//! p4runtime-shell (PyPI, unchanged) against the emulator: connect as
//! primary, set the firewall pipeline, insert, read back, modify, delete.
//!
//! The virtualenv lives in `.local/p4runtime-shell-venv` (hack/install-deps.sh
//! creates it; this test creates or refreshes it when e2e/python/requirements.txt
//! changed).

use std::path::{Path, PathBuf};
use std::process::Command;

use p4fleet_e2e::repo_root;
use p4fleet_emulator::{DeviceStats, Emulator, EmulatorConfig};

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

/// examples/`name`/p4info.txt.
fn example(name: &str) -> PathBuf {
    repo_root().join("examples").join(name).join("p4info.txt")
}

/// Runs one of e2e/python's p4runtime-shell scripts against device 1 of
/// `running` with the P4Info `p4info` (and `extra` arguments); fails the
/// test unless every check passed, and prints the checks.
async fn run_shell_script(
    running: &p4fleet_emulator::RunningEmulator,
    script: &str,
    p4info: &Path,
    extra: &[&str],
) {
    let python = tokio::task::spawn_blocking(venv).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let device_config = tmp.path().join("device.json");
    // bmv2 would want its JSON here; the emulator only stores the bytes.
    std::fs::write(&device_config, b"{}").unwrap();
    let script = repo_root().join("e2e/python").join(script);
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let addr = running.p4runtime_addr().to_string();
    let out = tokio::task::spawn_blocking({
        let device_config = device_config.clone();
        let p4info = p4info.to_path_buf();
        move || {
            Command::new(python)
                .arg(script)
                .args(["--grpc-addr", &addr, "--device-id", "1", "--p4info"])
                .arg(p4info)
                .arg("--config")
                .arg(device_config)
                .args(extra)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let checks: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("ok:") || l.starts_with("FAIL"))
        .collect();
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "p4runtime-shell script failed: {checks:#?}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{}", checks.join("\n"));
}

async fn start_one_device() -> p4fleet_emulator::RunningEmulator {
    Emulator::start(EmulatorConfig {
        device_ids: vec![1],
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Runs `script` on [`start_one_device`] with the P4Info of examples/`name`;
/// returns the device's stats once it is done (the emulator shut down).
async fn device_stats_after(script: &str, name: &str) -> DeviceStats {
    let running = start_one_device().await;
    run_shell_script(&running, script, &example(name), &[]).await;
    let stats = running.stats(1).unwrap();
    running.shutdown().await.unwrap();
    stats
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4runtime_shell_sets_pipeline_inserts_reads_and_deletes() {
    let stats = device_stats_after("p4runtime_shell_test.py", "firewall").await;
    assert_eq!(stats.set_pipeline_rpcs, 1);
    assert_eq!(stats.inserts, 21);
    assert_eq!(stats.modifies, 1);
    assert_eq!(stats.deletes, 21);
    assert_eq!(stats.entries, 0);
}

/// Action profiles and packet replication on examples/fabric, written and
/// read back by p4runtime-shell (e2e/python/p4runtime_shell_groups.py):
/// an ECMP group of four members, entries by group and member, a multicast
/// group and a clone session, and the spec's errors for bad input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4runtime_shell_writes_and_reads_groups_and_replication() {
    let stats = device_stats_after("p4runtime_shell_groups.py", "fabric").await;
    // 5 members, a group, 2 routes, a multicast group and a clone session
    // in and out; the 7 bad updates refused one by one.
    assert_eq!((stats.inserts, stats.deletes), (10, 10));
    assert_eq!(stats.failed_updates, 7);
    assert_eq!(stats.entries, 0);
}

/// The firewall P4Info plus a direct counter on its table, a meter and a
/// register array, for the resources script.
const RESOURCES: &str = r#"
direct_counters { preamble { id: 330000001 name: "MyIngress.firewall_hits" alias: "firewall_hits" } spec { unit: BOTH } direct_table_id: 39123287 }
meters { preamble { id: 335000001 name: "MyIngress.rate" alias: "rate" } spec { unit: BYTES } size: 4 }
registers { preamble { id: 369000001 name: "MyIngress.seen" alias: "seen" } type_spec { bitstring { bit { bitwidth: 12 } } } size: 16 }
"#;

/// Meters, a direct counter and a register, written and read back by
/// p4runtime-shell (e2e/python/p4runtime_shell_resources.py).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4runtime_shell_writes_and_reads_meters_counters_and_registers() {
    let running = start_one_device().await;
    let tmp = tempfile::tempdir().unwrap();
    let p4info = tmp.path().join("p4info.txt");
    let firewall = std::fs::read_to_string(example("firewall")).unwrap();
    std::fs::write(&p4info, format!("{firewall}{RESOURCES}")).unwrap();
    let extra = ["--register-id", "369000001"];
    run_shell_script(&running, "p4runtime_shell_resources.py", &p4info, &extra).await;
    running.shutdown().await.unwrap();
}

/// Digests on examples/l2switch, configured and received by p4runtime-shell
/// (e2e/python/p4runtime_shell_digests.py): frames from unknown sources
/// sent through the emulator's side channel, the learning digest lists
/// received and acked by the shell's DigestList.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4runtime_shell_configures_and_receives_digests() {
    let running = Emulator::start(EmulatorConfig {
        device_ids: vec![1],
        stats_addr: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ..Default::default()
    })
    .await
    .unwrap();
    let stats = running.stats_addr().unwrap().to_string();
    run_shell_script(
        &running,
        "p4runtime_shell_digests.py",
        &example("l2switch"),
        &["--stats-addr", &stats],
    )
    .await;
    // Two lists of one, each acked by the shell (the acks may still be in
    // flight when the script ends).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let s = running.stats(1).unwrap();
        if (s.digest_lists, s.digest_messages, s.digest_acks) == (2, 2, 2) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "lists and acks: {s:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    running.shutdown().await.unwrap();
}
