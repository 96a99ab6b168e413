//! The `p4fleet-emulator` binary with `--fpga`, and its `fpga-bitstream`
//! subcommand.

mod common;

use std::process::Command;

use common::binary::BIN;
use p4fleet_emulator::fpga::bitstream;
use p4fleet_proto::fpga::{self as pb, slot_service_client::SlotServiceClient};

#[tokio::test]
async fn fpga_flag_serves_the_board_on_the_p4runtime_port() {
    let mut served = common::binary::serve(&[
        "--fpga",
        "netfpga-sume",
        "--fpga-port",
        "icap",
        "--fpga-slots",
        "4",
    ]);
    let p4rt = served.p4runtime.clone();
    let stats = served.line();
    assert!(stats.starts_with("stats listening on "), "{stats}");
    let fpga = served.line();
    assert_eq!(
        fpga,
        "fpga netfpga-sume (xc7vx690tffg1761-3): 4 slots, devices 1-4, slot service on the p4runtime port"
    );

    let mut c = SlotServiceClient::connect(format!("http://{p4rt}"))
        .await
        .unwrap();
    let info = c
        .get_board_info(pb::GetBoardInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    let port = info.config_port.unwrap();
    assert_eq!(
        (port.name.as_str(), port.nominal_bits_per_second),
        ("icap", 3_200_000_000)
    );
    assert_eq!(info.slot_count, 4);

    served.terminate();
}

#[test]
fn fpga_flags_need_fpga() {
    let out = Command::new(BIN)
        .args(["--fpga-slots", "4"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fpga"));
}

#[test]
fn fpga_bitstream_is_deterministic() {
    let run = |seed: &str| {
        let out = Command::new(BIN)
            .args(["fpga-bitstream", "--bits", "2800000", "--seed", seed])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let a = run("l2switch");
    assert_eq!(a.stdout.len(), 350_000);
    assert_eq!(
        a.stdout,
        bitstream::synthetic(2_800_000, "l2switch").unwrap()
    );
    assert!(bitstream::has_sync_word(&a.stdout));
    let sha = bitstream::hex(&bitstream::sha256(&a.stdout));
    assert_eq!(
        String::from_utf8_lossy(&a.stderr).trim(),
        format!("2800000 bits, sha256 {sha}")
    );
    assert_eq!(run("l2switch").stdout, a.stdout);
    assert_ne!(run("router").stdout, a.stdout);
    let bad = Command::new(BIN)
        .args(["fpga-bitstream", "--bits", "100", "--seed", "x"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
}
