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
    gateway_descriptors()?;
    Ok(())
}

/// The etcd protos the client crate compiles, from which the HTTP/JSON gateway maps
/// messages to JSON and back.
const CLIENT_PROTOS: &[&str] =
    &["etcdserverpb/rpc.proto", "v3lockpb/v3lock.proto", "v3electionpb/v3election.proto", "leasekv/v1/leasekv.proto"];

/// etcd's field names where they are not snake_case (message, our name, etcd's name). Names
/// never travel in binary protobuf, so our .proto files use snake_case for clean Rust; in
/// JSON they are the field names, and etcd's gateway clients read and write etcd's.
const ETCD_FIELD_NAMES: &[(&str, &str, &str)] = &[
    ("LeaseGrantRequest", "ttl", "TTL"),
    ("LeaseGrantRequest", "id", "ID"),
    ("LeaseGrantResponse", "id", "ID"),
    ("LeaseGrantResponse", "ttl", "TTL"),
    ("LeaseRevokeRequest", "id", "ID"),
    ("LeaseKeepAliveRequest", "id", "ID"),
    ("LeaseKeepAliveResponse", "id", "ID"),
    ("LeaseKeepAliveResponse", "ttl", "TTL"),
    ("LeaseTimeToLiveRequest", "id", "ID"),
    ("LeaseTimeToLiveResponse", "id", "ID"),
    ("LeaseTimeToLiveResponse", "ttl", "TTL"),
    ("LeaseTimeToLiveResponse", "granted_ttl", "grantedTTL"),
    ("LeaseStatus", "id", "ID"),
    ("Member", "id", "ID"),
    ("Member", "peer_urls", "peerURLs"),
    ("Member", "client_urls", "clientURLs"),
    ("Member", "is_learner", "isLearner"),
    ("MemberAddRequest", "peer_urls", "peerURLs"),
    ("MemberAddRequest", "is_learner", "isLearner"),
    ("MemberRemoveRequest", "id", "ID"),
    ("MemberUpdateRequest", "id", "ID"),
    ("MemberUpdateRequest", "peer_urls", "peerURLs"),
    ("MemberPromoteRequest", "id", "ID"),
    ("StatusResponse", "db_size", "dbSize"),
    ("StatusResponse", "raft_index", "raftIndex"),
    ("StatusResponse", "raft_term", "raftTerm"),
    ("StatusResponse", "raft_applied_index", "raftAppliedIndex"),
    ("StatusResponse", "db_size_in_use", "dbSizeInUse"),
    ("StatusResponse", "is_learner", "isLearner"),
    ("StatusResponse", "db_size_quota", "dbSizeQuota"),
    ("AlarmRequest", "member_id", "memberID"),
    ("AlarmMember", "member_id", "memberID"),
    ("MoveLeaderRequest", "target_id", "targetID"),
];

/// Writes `gateway.fds` (a file descriptor set) to OUT_DIR: the client crate's etcd protos
/// with etcd's field names, each field's JSON name set to its name in lowerCamelCase as
/// protoc would have derived it from etcd's .proto.
fn gateway_descriptors() -> Result<(), Box<dyn Error>> {
    use prost::Message;
    println!("cargo:rerun-if-changed=../client/proto");
    let mut fds = protox::compile(CLIENT_PROTOS, ["../client/proto"])?;
    let mut renamed = 0;
    for file in fds.file.iter_mut().filter(|f| f.package() == "etcdserverpb") {
        for message in &mut file.message_type {
            let name = message.name().to_string();
            for field in &mut message.field {
                let rename = ETCD_FIELD_NAMES.iter().find(|(m, ours, _)| *m == name && *ours == field.name());
                if let Some((_, _, etcd)) = rename {
                    field.name = Some(etcd.to_string());
                    field.json_name = Some(lower_camel(etcd));
                    renamed += 1;
                }
            }
        }
    }
    if renamed != ETCD_FIELD_NAMES.len() {
        return Err(format!("{renamed} of {} etcd field names matched a field", ETCD_FIELD_NAMES.len()).into());
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("gateway.fds");
    std::fs::write(out, fds.encode_to_vec())?;
    Ok(())
}

/// protoc's JSON name: underscores dropped, the letter after each upper-cased.
fn lower_camel(name: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}
