//! The `p4fleet-emulator` binary: prints its listeners, serves, stops on SIGTERM.

mod common;

use p4fleet_proto::p4runtime::{self as p4, p4_runtime_client::P4RuntimeClient};

#[tokio::test]
async fn binary_prints_listeners_and_stops_on_sigterm() {
    let mut served = common::binary::serve(&["--device-ids", "3,4"]);
    let p4rt = served.p4runtime.clone();
    let second = served.line();
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

    served.terminate();
}
