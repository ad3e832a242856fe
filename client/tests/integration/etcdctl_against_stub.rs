//! The other direction of wire compatibility: etcdctl (etcd's own Go client) talks to a
//! stub KV server built from our generated server traits. This is what the server crate will
//! do for real; the stub keeps only a map, enough for `put`, `get` and `del`.
//!
//! Needs `etcdctl` (Debian: `etcd-client`; or `ETCDCTL_BIN`); skipped with a note without it,
//! but failing under `CI=true`.

use leasekv_client::proto::etcdserverpb::kv_server::{Kv, KvServer};
use leasekv_client::proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse,
    RangeRequest, RangeResponse, ResponseHeader, TxnRequest, TxnResponse,
};
use leasekv_client::proto::mvccpb::KeyValue;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use tonic::{Request, Response, Status};

/// A single-node, in-memory KV with etcd's revision bookkeeping, no history.
#[derive(Default)]
struct StubKv {
    state: Mutex<(i64, BTreeMap<Vec<u8>, KeyValue>)>,
}

fn header(revision: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader { cluster_id: 1, member_id: 1, revision, raft_term: 1 })
}

/// Whether `key` is in the request's range (etcd's rules: empty end = one key, "\0" = to the end).
fn in_range(key: &[u8], start: &[u8], end: &[u8]) -> bool {
    match end {
        [] => key == start,
        [0] => key >= start,
        end => key >= start && key < end,
    }
}

#[tonic::async_trait]
impl Kv for StubKv {
    type RangeStreamStream = crate::NoRangeStream;

    async fn range_stream(&self, _: Request<RangeRequest>) -> Result<Response<Self::RangeStreamStream>, Status> {
        Err(Status::unimplemented("range stream"))
    }

    async fn range(&self, request: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        let r = request.into_inner();
        let state = self.state.lock().map_err(|_| Status::internal("poisoned"))?;
        let kvs: Vec<KeyValue> =
            state.1.values().filter(|kv| in_range(&kv.key, &r.key, &r.range_end)).cloned().collect();
        let count = kvs.len() as i64;
        Ok(Response::new(RangeResponse { header: header(state.0), kvs, more: false, count }))
    }

    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let r = request.into_inner();
        let mut state = self.state.lock().map_err(|_| Status::internal("poisoned"))?;
        state.0 += 1;
        let revision = state.0;
        let previous = state.1.get(&r.key).cloned();
        let kv = KeyValue {
            key: r.key.clone(),
            value: r.value,
            create_revision: previous.as_ref().map_or(revision, |p| p.create_revision),
            mod_revision: revision,
            version: previous.as_ref().map_or(1, |p| p.version + 1),
            lease: r.lease,
        };
        state.1.insert(r.key, kv);
        Ok(Response::new(PutResponse { header: header(revision), prev_kv: if r.prev_kv { previous } else { None } }))
    }

    async fn delete_range(
        &self,
        request: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        let r = request.into_inner();
        let mut state = self.state.lock().map_err(|_| Status::internal("poisoned"))?;
        let doomed: Vec<Vec<u8>> = state.1.keys().filter(|k| in_range(k, &r.key, &r.range_end)).cloned().collect();
        if !doomed.is_empty() {
            state.0 += 1;
        }
        let prev_kvs: Vec<KeyValue> = doomed.iter().filter_map(|k| state.1.remove(k)).collect();
        let deleted = prev_kvs.len() as i64;
        let prev_kvs = if r.prev_kv { prev_kvs } else { Vec::new() };
        Ok(Response::new(DeleteRangeResponse { header: header(state.0), deleted, prev_kvs }))
    }

    async fn txn(&self, _: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        Err(Status::unimplemented("the stub has no transactions"))
    }

    async fn compact(&self, _: Request<CompactionRequest>) -> Result<Response<CompactionResponse>, Status> {
        Err(Status::unimplemented("the stub has no history"))
    }
}

fn find_etcdctl() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ETCDCTL_BIN") {
        // An explicit path that does not exist counts as missing, not as a fallback to PATH.
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("etcdctl")).find(|candidate| candidate.is_file())
}

/// Runs etcdctl with bounded dial and command timeouts (it never waits longer than ~10 s).
async fn etcdctl(binary: &PathBuf, endpoint: &str, args: &[&str]) -> Output {
    let mut command = Command::new(binary);
    command
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg("--dial-timeout=3s")
        .arg("--command-timeout=5s")
        .args(args)
        .stdin(Stdio::null());
    // A blocking wait, off the runtime threads that serve the stub.
    tokio::task::spawn_blocking(move || command.output().expect("run etcdctl")).await.expect("join etcdctl")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_talks_to_our_generated_server() {
    let Some(binary) = find_etcdctl() else {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("CI=true but no etcdctl binary was found (install etcd-client or set ETCDCTL_BIN)");
        }
        eprintln!("note: skipping the etcdctl test: no etcdctl binary (install etcd-client or set ETCDCTL_BIN)");
        return;
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let endpoint = format!("127.0.0.1:{}", listener.local_addr().expect("local address").port());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder().add_service(KvServer::new(StubKv::default())).serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            async {
                let _ = stopped.await;
            },
        ),
    );

    let out = etcdctl(&binary, &endpoint, &["put", "/servers/1", "10.0.0.1"]).await;
    assert!(out.status.success(), "etcdctl put: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "OK\n");
    etcdctl(&binary, &endpoint, &["put", "/servers/2", "10.0.0.2"]).await;

    let out = etcdctl(&binary, &endpoint, &["get", "/servers/", "--prefix"]).await;
    assert!(out.status.success(), "etcdctl get: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/servers/1\n10.0.0.1\n/servers/2\n10.0.0.2\n");

    let out = etcdctl(&binary, &endpoint, &["-w", "json", "get", "/servers/1"]).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("etcdctl json output");
    assert_eq!(json["header"]["revision"], 2);
    assert_eq!(json["kvs"][0]["version"], 1);

    let out = etcdctl(&binary, &endpoint, &["del", "/servers/", "--prefix"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2\n", "{}", String::from_utf8_lossy(&out.stderr));

    let out = etcdctl(&binary, &endpoint, &["compaction", "1"]).await;
    assert!(!out.status.success(), "the stub's UNIMPLEMENTED reaches etcdctl as an error");

    let _ = stop.send(());
    server.await.expect("join the stub server").expect("the stub server ran cleanly");
}
