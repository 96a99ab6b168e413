//! The `p4fleet-emulator` binary: prints its listeners, serves, stops on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use p4fleet_proto::p4runtime::{self as p4, p4_runtime_client::P4RuntimeClient};

#[tokio::test]
async fn binary_prints_listeners_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_p4fleet-emulator"))
        .args(["--device-ids", "3,4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let second = lines.next().unwrap().unwrap();
    let p4rt = first
        .strip_prefix("p4runtime listening on ")
        .unwrap()
        .to_string();
    assert!(
        second.starts_with("stats listening on 127.0.0.1:"),
        "{second}"
    );

    let mut c = P4RuntimeClient::connect(format!("http://{p4rt}"))
        .await
        .unwrap();
    let caps = c.capabilities(p4::CapabilitiesRequest {}).await.unwrap();
    assert_eq!(caps.into_inner().p4runtime_api_version, "1.4.0");
    let cfg = c
        .get_forwarding_pipeline_config(p4::GetForwardingPipelineConfigRequest {
            device_id: 4,
            response_type: 0,
        })
        .await;
    assert!(cfg.is_ok());
    let missing = c
        .get_forwarding_pipeline_config(p4::GetForwardingPipelineConfigRequest {
            device_id: 1,
            response_type: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
}
