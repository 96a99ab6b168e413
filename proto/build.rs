//! Compiles the .proto files with protox (pure Rust, no protoc) and generates
//! prost messages plus tonic clients and servers from the descriptor set.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "google/rpc/status.proto",
    "google/rpc/code.proto",
    "p4/config/v1/p4types.proto",
    "p4/config/v1/p4info.proto",
    "p4/v1/p4data.proto",
    "p4/v1/p4runtime.proto",
    "bfrt/bfruntime.proto",
    "p4fleet/bulk.proto",
    "p4fleet/externs.proto",
    "p4fleet/fpga.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    for p in PROTOS {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }

    let fds = protox::compile(PROTOS, [&root])?;

    // Keep the descriptor set so the crate can parse/print protobuf text format.
    let bytes = prost::Message::encode_to_vec(&fds);
    std::fs::write(out_dir.join("file_descriptor_set.bin"), bytes)?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
