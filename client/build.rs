//! Compiles `proto/` into Rust (messages with prost, services with tonic).
//!
//! The build machines have no `protoc`, so the .proto files are parsed by `protox`, a pure-Rust
//! protobuf compiler, and its file descriptor set is handed to tonic's code generator.

use std::error::Error;

/// Every .proto file we generate code for; imports are resolved from `proto/`.
const PROTOS: &[&str] = &[
    "proto/mvccpb/kv.proto",
    "proto/etcdserverpb/rpc.proto",
    "proto/v3lockpb/v3lock.proto",
    "proto/v3electionpb/v3election.proto",
    "proto/leasekv/v1/leasekv.proto",
];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(PROTOS, ["proto"])?;
    tonic_prost_build::configure()
        // Both sides: kvcli and tests use the clients, the server crate implements the traits.
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
