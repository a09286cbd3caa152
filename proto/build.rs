//! Compiles `proto/*.proto` with protox (pure Rust), so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = [
        "proto/glovebox/v1/common.proto",
        "proto/glovebox/v1/gate.proto",
        "proto/glovebox/v1/executor.proto",
        "proto/glovebox/v1/packs.proto",
    ];
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
