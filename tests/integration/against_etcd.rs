//! Drives the client library and kvcli against a real etcd server, proving that our own
//! .proto files are wire-compatible with etcd's.
//!
//! Needs the `etcd` binary (Debian: `apt-get install etcd-server`; or set `ETCD_BIN`). Without
//! it the test is skipped with a note, except under `CI=true`, where it fails: CI must not
//! silently lose the only check that the protocol matches.

use crate::common;
use leasekv::client::proto::etcdserverpb::{
    compare, request_op, response_op, Compare, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use leasekv::client::{Client, GetOptions, RetryPolicy};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The etcd binary: `ETCD_BIN`, else `etcd` on PATH.
fn find_etcd() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ETCD_BIN") {
        // An explicit path that does not exist counts as missing, not as a fallback to PATH.
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("etcd")).find(|candidate| candidate.is_file())
}

/// A free port on 127.0.0.1, below the ephemeral range (see [`common::free_ports`]).
fn free_port() -> u16 {
    common::free_ports(1)[0]
}

/// A single-member etcd on loopback in a temporary directory, killed (by pid) when dropped.
struct Etcd {
    child: Child,
    endpoint: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Etcd {
    fn start(binary: &PathBuf) -> Etcd {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        let (client_port, peer_port) = (free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let log = dir.path().join("etcd.log");
        let log_file = std::fs::File::create(&log).expect("create the etcd log file");
        let log_err = log_file.try_clone().expect("clone the etcd log handle");
        let child = Command::new(binary)
            .arg("--name=leasekv-test")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=leasekv-test={peer_url}"))
            .arg("--initial-cluster-state=new")
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .spawn()
            .expect("start etcd");
        Etcd { child, endpoint: format!("127.0.0.1:{client_port}"), log, _dir: dir }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Waits (at most 20 s) until etcd answers Status.
    async fn wait_ready(&mut self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(20);
        let policy = RetryPolicy { attempts: 1, ..RetryPolicy::default() };
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("etcd exited early with {status}; log:\n{}", self.log_tail());
            }
            if let Ok(client) = Client::connect_with(std::slice::from_ref(&self.endpoint), policy).await {
                if client.status().await.is_ok() {
                    return client;
                }
            }
            assert!(Instant::now() < deadline, "etcd not ready after 20 s; log:\n{}", self.log_tail());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        // Our own child, by pid; wait so that no zombie is left behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs kvcli against `endpoint` with a bounded wait.
fn kvcli(endpoint: &str, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvcli"))
        .arg("--endpoints")
        .arg(endpoint)
        .args(args)
        .env_remove("LEASEKV_ENDPOINTS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kvcli");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("poll kvcli").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("kvcli {args:?} did not finish within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect kvcli output")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_and_kvcli_interoperate_with_real_etcd() {
    let Some(binary) = find_etcd() else {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("CI=true but no etcd binary was found (install etcd-server or set ETCD_BIN)");
        }
        eprintln!(
            "note: skipping the etcd interoperability test: no etcd binary (install etcd-server or set ETCD_BIN)"
        );
        return;
    };
    let mut etcd = Etcd::start(&binary);
    let client = etcd.wait_ready().await;

    // --- KV ---
    let put = client.put("/t/a", "1", 0, false).await.expect("put /t/a");
    let first_revision = put.header.expect("put header").revision;
    assert!(first_revision > 0);
    client.put("/t/b", "2", 0, false).await.expect("put /t/b");
    let replaced = client.put("/t/b", "22", 0, true).await.expect("put /t/b with prev_kv");
    assert_eq!(replaced.prev_kv.expect("prev_kv").value, b"2");

    let one = client.get("/t/a", GetOptions::default()).await.expect("get /t/a");
    assert_eq!(one.kvs.len(), 1);
    assert_eq!(one.kvs[0].value, b"1");
    assert_eq!(one.kvs[0].create_revision, first_revision);
    assert_eq!(one.kvs[0].version, 1);

    let all = client.get("/t/", GetOptions { prefix: true, ..Default::default() }).await.expect("get prefix");
    let keys: Vec<&[u8]> = all.kvs.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(keys, vec![b"/t/a".as_slice(), b"/t/b".as_slice()]);
    assert_eq!(all.kvs[1].version, 2);

    let keys_only =
        client.get("/t/", GetOptions { prefix: true, keys_only: true, ..Default::default() }).await.expect("keys only");
    assert!(keys_only.kvs.iter().all(|kv| kv.value.is_empty()) && keys_only.kvs.len() == 2);
    let counted =
        client.get("/t/", GetOptions { prefix: true, count_only: true, ..Default::default() }).await.expect("count");
    assert_eq!((counted.count, counted.kvs.len()), (2, 0));
    let limited = client
        .get("/t/", GetOptions { prefix: true, limit: 1, serializable: true, ..Default::default() })
        .await
        .expect("limit");
    assert!(limited.more && limited.kvs.len() == 1);

    // --- Txn: compare-and-swap, both branches ---
    let cas = |expected: &str, new: &str| TxnRequest {
        compare: vec![Compare {
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Value as i32,
            key: b"/t/a".to_vec(),
            target_union: Some(compare::TargetUnion::Value(expected.as_bytes().to_vec())),
            range_end: Vec::new(),
        }],
        success: vec![RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: b"/t/a".to_vec(),
                value: new.as_bytes().to_vec(),
                ..Default::default()
            })),
        }],
        failure: vec![RequestOp {
            request: Some(request_op::Request::RequestRange(RangeRequest {
                key: b"/t/a".to_vec(),
                ..Default::default()
            })),
        }],
    };
    let swapped = client.txn(cas("1", "x")).await.expect("txn success branch");
    assert!(swapped.succeeded);
    assert!(matches!(swapped.responses[0].response, Some(response_op::Response::ResponsePut(_))));
    let refused = client.txn(cas("1", "y")).await.expect("txn failure branch");
    assert!(!refused.succeeded);
    match &refused.responses[0].response {
        Some(response_op::Response::ResponseRange(range)) => assert_eq!(range.kvs[0].value, b"x"),
        other => panic!("expected a range response, got {other:?}"),
    }

    // --- Leases ---
    let grant = client.lease_grant(30, 0).await.expect("lease grant");
    assert!(grant.id != 0 && grant.ttl == 30, "{grant:?}");
    client.put("/t/leased", "v", grant.id, false).await.expect("put with lease");
    let once = client.lease_keep_alive_once(grant.id).await.expect("keepalive once");
    assert_eq!((once.id, once.ttl), (grant.id, 30));
    let mut stream = client.lease_keep_alive(grant.id).await.expect("keepalive stream");
    for _ in 0..3 {
        assert_eq!(stream.keep_alive().await.expect("keepalive on stream").ttl, 30);
    }
    let ttl = client.lease_time_to_live(grant.id, true).await.expect("time to live");
    assert_eq!(ttl.granted_ttl, 30);
    assert!(ttl.ttl > 0 && ttl.ttl <= 30);
    assert_eq!(ttl.keys, vec![b"/t/leased".to_vec()]);
    let leases = client.lease_leases().await.expect("lease leases");
    assert!(leases.leases.iter().any(|l| l.id == grant.id));
    let explicit = client.lease_grant(10, 0x1234).await.expect("grant with an explicit id");
    assert_eq!(explicit.id, 0x1234);

    client.lease_revoke(grant.id).await.expect("revoke");
    let gone = client.get("/t/leased", GetOptions::default()).await.expect("get after revoke");
    assert!(gone.kvs.is_empty(), "revoke deletes attached keys");
    assert_eq!(client.lease_time_to_live(grant.id, false).await.expect("ttl after revoke").ttl, -1);
    assert_eq!(stream.keep_alive().await.expect("keepalive after revoke").ttl, 0);

    // --- Cluster and maintenance ---
    let members = client.member_list().await.expect("member list");
    assert_eq!(members.members.len(), 1);
    assert!(members.members[0].client_urls.iter().any(|u| u.ends_with(&etcd.endpoint)));
    let status = client.status().await.expect("status");
    assert!(status.version.starts_with("3."), "{status:?}");
    assert_eq!(status.leader, status.header.expect("status header").member_id);

    // --- The extension is ours: etcd does not know it, and says so with UNIMPLEMENTED ---
    let err = client.resolve_name("server1").await.expect_err("etcd has no leasekv extension");
    assert_eq!(err.code(), Some(tonic::Code::Unimplemented), "{err}");
    assert!(err.to_string().contains("ResolveName"), "{err}");

    // --- Delete ---
    let deleted = client.delete("/t/", true, true).await.expect("delete prefix");
    assert_eq!(deleted.deleted, 2);
    assert_eq!(deleted.prev_kvs.len(), 2);

    // --- Failover: a dead endpoint first, the live one second ---
    let dead = format!("127.0.0.1:{}", free_port());
    let policy = RetryPolicy { initial_backoff: Duration::from_millis(10), ..RetryPolicy::default() };
    let failover = Client::connect_with(&[dead.clone(), etcd.endpoint.clone()], policy)
        .await
        .expect("fail over to the live endpoint");
    assert_eq!(failover.current_endpoint(), format!("http://{}", etcd.endpoint));
    failover.status().await.expect("status after failover");
    let all_dead = Client::connect_with(std::slice::from_ref(&dead), RetryPolicy { attempts: 2, ..policy })
        .await
        .expect_err("nothing listens");
    assert!(all_dead.to_string().contains(&dead), "{all_dead}");

    // --- kvcli against etcd ---
    let endpoint = etcd.endpoint.clone();
    let out = kvcli(&endpoint, &["put", "/cli/k", "hello"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "OK\n");
    let out = kvcli(&endpoint, &["get", "/cli/k"]);
    assert_eq!((out.status.code(), stdout(&out)), (Some(0), "/cli/k\nhello\n".to_string()), "{}", stderr(&out));
    let out = kvcli(&endpoint, &["get", "/cli/", "--prefix", "--keys-only"]);
    assert_eq!(stdout(&out), "/cli/k\n");
    let out = kvcli(&endpoint, &["get", "/cli/missing"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("kvcli: error: key \"/cli/missing\" not found"), "{}", stderr(&out));
    let out = kvcli(&endpoint, &["get"]);
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
    let out = kvcli(&endpoint, &["lease", "grant", "0x77", "--ttl", "20"]);
    assert_eq!(stdout(&out), "lease 0000000000000077 granted with TTL(20s)\n", "{}", stderr(&out));
    let out = kvcli(&endpoint, &["put", "/cli/l", "v", "--lease", "0x77"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = kvcli(&endpoint, &["lease", "ttl", "0000000000000077", "--keys"]);
    assert!(stdout(&out).contains("attached keys([/cli/l])"), "{}{}", stdout(&out), stderr(&out));
    let out = kvcli(&endpoint, &["lease", "list"]);
    assert!(stdout(&out).contains("0000000000000077 - granted(20s)"), "{}{}", stdout(&out), stderr(&out));
    let out = kvcli(&endpoint, &["-w", "json", "get", "/cli/k"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json output");
    assert_eq!(json["kvs"][0]["value"], "hello");
    let out = kvcli(&endpoint, &["status"]);
    assert!(out.status.success() && stdout(&out).contains("members: 1"), "{}{}", stdout(&out), stderr(&out));
    let out = kvcli(&endpoint, &["lease", "revoke", "0x77"]);
    assert_eq!(stdout(&out), "lease 0000000000000077 revoked\n", "{}", stderr(&out));
    let out = kvcli(&endpoint, &["del", "/cli/", "--prefix"]);
    assert_eq!(stdout(&out), "1\n", "{}", stderr(&out));
    let out = kvcli(&endpoint, &["put", "/cli/n", "v", "--lease", "server1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("ResolveName"), "{}", stderr(&out));
    let out = kvcli(&format!("127.0.0.1:{}", free_port()), &["get", "/x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("could not connect"), "{}", stderr(&out));
}
