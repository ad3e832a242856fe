//! Compiles the node-to-node service (`proto/leasekv/peer/v1/peer.proto`) and the wire form
//! of etcd's Watch service that the server sends (`proto/etcdserverpb/watch_wire.proto`)
//! into Rust.
//!
//! The build machines have no `protoc`, so the .proto file is parsed by `protox`, a pure-Rust
//! protobuf compiler, and its file descriptor set is handed to tonic's code generator.

use std::error::Error;

/// The .proto files this crate owns; imports are resolved from `proto/`.
const PROTOS: &[&str] = &["proto/leasekv/peer/v1/peer.proto"];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(PROTOS, ["proto"])?;
    tonic_prost_build::configure()
        // Every node is both ends: it streams to its peers and serves their streams.
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    let fds = protox::compile(["proto/etcdserverpb/watch_wire.proto"], ["proto"])?;
    tonic_prost_build::configure()
        // Only served: clients use the client crate's etcd types.
        .build_client(false)
        .build_server(true)
        .extern_path(".etcdserverpb.WatchRequest", "::leasekv_client::proto::etcdserverpb::WatchRequest")
        .extern_path(".etcdserverpb.ResponseHeader", "::leasekv_client::proto::etcdserverpb::ResponseHeader")
        .bytes(".etcdserverpb.WatchResponse.events")
        .compile_fds(fds)?;
    Ok(())
}
