//! The emulator's BFRT port: an emulator serving it, and rbfrt (a real
//! BFRT client, unchanged) connected to it.

use std::net::SocketAddr;

use p4fleet_emulator::EmulatorConfig;
use rbfrt::{SwitchConnection, SwitchConnectionBuilder};

/// `devices` with a BFRT port on a free loopback port.
pub fn config(devices: Vec<u64>) -> EmulatorConfig {
    EmulatorConfig {
        device_ids: devices,
        bfrt_addr: Some("127.0.0.1:0".parse().unwrap()),
        ..Default::default()
    }
}

/// rbfrt's builder for client `client` of `device` on `addr`.
pub fn builder(addr: SocketAddr, device: u32, client: u32) -> SwitchConnectionBuilder {
    SwitchConnection::builder(&addr.ip().to_string(), addr.port())
        .device_id(device)
        .client_id(client)
}

/// rbfrt connected as `client` to device 0, having loaded `program` (its
/// `bfrt_json`, an empty context and `binary`) on `pipes` through rbfrt's
/// config file; the files live as long as the directory.
pub async fn load(
    addr: SocketAddr,
    client: u32,
    program: &str,
    bfrt_json: &str,
    binary: &[u8],
    pipes: &[u32],
) -> (SwitchConnection, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    std::fs::write(path("bfrt.json"), bfrt_json).unwrap();
    std::fs::write(path("context.json"), "{}").unwrap();
    std::fs::write(path("tofino.bin"), binary).unwrap();
    let conf = serde_json::json!({
        "chip_list": [],
        "p4_devices": [{
            "device-id": 0,
            "p4_programs": [{
                "program-name": program,
                "bfrt-config": path("bfrt.json"),
                "p4_pipelines": [{
                    "p4_pipeline_name": "pipe",
                    "context": path("context.json"),
                    "config": path("tofino.bin"),
                    "pipe_scope": pipes,
                }],
            }],
        }],
    });
    let conf_path = path(&format!("{program}.conf"));
    std::fs::write(&conf_path, conf.to_string()).unwrap();
    let switch = builder(addr, 0, client)
        .config(&conf_path)
        .connect()
        .await
        .unwrap();
    (switch, dir)
}
