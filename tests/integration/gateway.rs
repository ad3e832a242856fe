//! etcd's HTTP/JSON gateway on leasekv's client port, tried the way HTTP clients use it:
//!
//! - differentially: the same requests (every gateway path, errors and streams included)
//!   to a real etcd and to leasekv give the same JSON once the values that must differ
//!   (cluster and member ids, terms, lease ids chosen by the server) are normalised;
//! - with a real gateway client, unchanged: OpenStack's `etcd3gw` (Python) against a
//!   three-node cluster;
//! - with bad input: the node answers each with a clear error and stays up;
//! - `/health` turning false on a node that lost its master, and true again.
//!
//! Needs `etcd` (Debian etcd-server) and Python's `etcd3gw` (PyPI; `.ci/run` installs both).
//! Without them these tests are skipped with a note, except under `CI=true`, where they fail.

use crate::common;

use common::http::{agent, get, post};
use leasekv::node_config::NodeFile;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KVSERVER: &str = env!("CARGO_BIN_EXE_kvserver");

/// A process this test started, killed by pid when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (at most 30 s) until `/health` on `port` says true.
fn wait_healthy(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = (0, String::new());
    while Instant::now() < deadline {
        last = get(port, "/health");
        if last == (200, r#"{"health":"true"}"#.to_string()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what} on port {port} not healthy within 30 s; last answer {last:?}");
}

fn start_kvserver(config: &Path, log: PathBuf) -> Process {
    let log = std::fs::File::create(log).expect("kvserver log file");
    Process(
        Command::new(KVSERVER)
            .arg("--config")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kvserver starts"),
    )
}

/// A single-node leasekv; its process and client port.
fn start_single(dir: &Path) -> (Process, u16) {
    let ports = common::free_ports(2);
    let config = dir.join("single.toml");
    let peers = NodeFile::local_peers(&ports[..1], &ports[1..2]);
    NodeFile::member(1, &peers, &dir.join("single-data"), "paxoslease").write(&config).expect("config written");
    (start_kvserver(&config, dir.join("single.log")), ports[0])
}

/// A three-node leasekv cluster (PaxosLease) in `dir`, every node healthy: the processes
/// (slots, so a test can stop one), the config files and the client ports.
fn start_three(dir: &Path) -> (Vec<Option<Process>>, Vec<PathBuf>, Vec<u16>) {
    let ports = common::free_ports(6);
    let configs = common::write_configs(dir, &ports[..3], &ports[3..], "paxoslease", "");
    let nodes = configs.iter().enumerate().map(|(i, c)| Some(start_kvserver(c, dir.join(format!("log{i}"))))).collect();
    for &port in &ports[..3] {
        wait_healthy(port, "leasekv");
    }
    (nodes, configs, ports[..3].to_vec())
}

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Replaces what must differ between two stores: ids, terms, versions, sizes, indexes.
fn normalise(value: &mut Value) {
    match value {
        Value::Object(map) => {
            // A member: its id and name are the store's own.
            let member = map.contains_key("peerURLs");
            for (key, v) in map.iter_mut() {
                let differs = matches!(
                    key.as_str(),
                    "cluster_id"
                        | "member_id"
                        | "raft_term"
                        | "raftTerm"
                        | "raftIndex"
                        | "raftAppliedIndex"
                        | "leader"
                        | "etcdserver"
                        | "peerURLs"
                        | "clientURLs"
                ) || (member && (key == "ID" || key == "name"));
                if differs {
                    *v = Value::String("*".into());
                } else {
                    normalise(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise),
        _ => {}
    }
}

/// The body as normalised JSON, or as text when it is not JSON.
fn shape(body: &str, loose_message: bool) -> Value {
    match serde_json::from_str::<Value>(body) {
        Ok(mut value) => {
            normalise(&mut value);
            if loose_message {
                // A decoder's own words (Go's encoding/json, serde) cannot match; the code does.
                for key in ["error", "message"] {
                    if let Some(v) = value.get_mut(key) {
                        *v = Value::String("*".into());
                    }
                }
            }
            value
        }
        // A stream's answer: one object per line.
        Err(_) if body.lines().count() > 1 && body.lines().all(|l| serde_json::from_str::<Value>(l).is_ok()) => {
            Value::Array(body.lines().map(|line| shape(line, loose_message)).collect())
        }
        Err(_) => Value::String(body.to_string()),
    }
}

/// One gateway request of the differential run.
struct Step {
    path: &'static str,
    body: String,
    /// Whether the error text may differ (malformed input, described by each decoder).
    loose_message: bool,
}

fn step(path: &'static str, body: Value) -> Step {
    Step { path, body: body.to_string(), loose_message: false }
}

fn raw(path: &'static str, body: &str) -> Step {
    Step { path, body: body.to_string(), loose_message: true }
}

fn steps() -> Vec<Step> {
    use serde_json::json;
    let (a, b, l) = (b64("a"), b64("b"), b64("l"));
    vec![
        step("/v3/kv/put", json!({"key": a, "value": b64("1")})),
        step("/v3/kv/put", json!({"key": a, "value": b64("2"), "prev_kv": true})),
        step("/v3/kv/range", json!({"key": a})),
        step("/v3/kv/range", json!({"key": a, "range_end": b, "count_only": true})),
        step("/v3/kv/range", json!({"key": a, "rangeEnd": b, "keysOnly": true, "limit": "1"})),
        step("/v3/kv/range", json!({"key": b64("zz")})),
        step("/v3/kv/deleterange", json!({"key": a, "prev_kv": true})),
        step("/v3/kv/deleterange", json!({"key": b64("nothing")})),
        step(
            "/v3/kv/txn",
            json!({"compare": [{"key": a, "target": "VERSION", "version": "0"}],
                   "success": [{"request_put": {"key": a, "value": b64("3")}}],
                   "failure": [{"request_range": {"key": a}}]}),
        ),
        step(
            "/v3/kv/txn",
            json!({"compare": [{"key": a, "target": "VERSION", "version": 0}],
                   "success": [{"request_put": {"key": a, "value": b64("3")}}],
                   "failure": [{"request_range": {"key": a}}]}),
        ),
        step(
            "/v3/kv/txn",
            json!({"compare": [{"key": a, "result": "GREATER", "target": "MOD", "mod_revision": "1"}],
                   "success": [{"request_delete_range": {"key": a, "prev_kv": true}}]}),
        ),
        step("/v3/lease/grant", json!({"TTL": 60, "ID": 1234})),
        step("/v3/lease/grant", json!({"TTL": "60", "ID": "1234"})),
        step("/v3/kv/put", json!({"key": l, "value": b64("x"), "lease": 1234})),
        step("/v3/kv/put", json!({"key": l, "value": b64("x"), "lease": "999"})),
        step("/v3/lease/timetolive", json!({"ID": 1234, "keys": true})),
        step("/v3/kv/lease/timetolive", json!({"ID": 55})),
        step("/v3/lease/leases", json!({})),
        step("/v3/kv/lease/leases", json!({})),
        step("/v3/lock/lock", json!({"name": b64("lk"), "lease": 1234})),
        step("/v3/lease/revoke", json!({"ID": 1234})),
        step("/v3/lease/revoke", json!({"ID": 1234})),
        step("/v3/kv/lease/revoke", json!({"ID": 77})),
        step("/v3/kv/range", json!({"key": l})),
        step("/v3/election/leader", json!({"name": b64("e")})),
        step("/v3/kv/compaction", json!({"revision": 2})),
        step("/v3/kv/compaction", json!({"revision": 2})),
        step("/v3/kv/compaction", json!({"revision": 100000})),
        step("/v3/kv/range", json!({"key": a, "revision": 1})),
        step("/v3/kv/put", json!({"key": "", "value": b64("x")})),
        step("/v3/cluster/member/list", json!({})),
        step("/v3beta/kv/range", json!({"key": l})),
        raw("/v3alpha/kv/range", "{}"),
        raw("/v3/no/such/path", "{}"),
        raw("/v3/kv/put", "not json"),
        raw("/v3/kv/put", r#"{"key": 5}"#),
        raw("/v3/kv/put", r#"{"key": "YQ==", "lease": "many"}"#),
        raw("/v3/kv/put", ""),
        raw("/v3/watch", r#"{"create_request": {"key": 5}}"#),
        raw("/v3/lease/keepalive", r#"{"ID": "1"}{"ID": 2}"#),
    ]
}

/// Runs `steps` against a store on `port`: each answer's status and normalised body.
fn run_steps(port: u16, steps: &[Step]) -> Vec<(u16, Value)> {
    steps
        .iter()
        .map(|s| {
            let (status, body) = post(port, s.path, s.body.as_bytes());
            (status, shape(&body, s.loose_message))
        })
        .collect()
}

/// A watch stream: opens it, then writes through `write`, and returns the first `lines`
/// answer objects, normalised.
fn watch_lines(port: u16, request: &str, lines: usize, write: impl FnOnce()) -> Vec<Value> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect for a watch");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    // The whole body at once, as gateway clients send it (etcd's HTTP/1.1 server answers
    // only once the request body is complete; the stream then stays open).
    let head = format!(
        "POST /v3/watch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{request}",
        request.len()
    );
    stream.write_all(head.as_bytes()).expect("send the watch request");
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    // Status line and headers.
    loop {
        line.clear();
        reader.read_line(&mut line).expect("read the answer's head");
        if line == "\r\n" {
            break;
        }
    }
    let mut objects = Vec::new();
    let mut write = Some(write);
    while objects.len() < lines {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        let text = line.trim();
        // Chunk-size lines and blank lines around the objects.
        if !text.starts_with('{') {
            continue;
        }
        objects.push(shape(text, false));
        if let Some(write) = write.take() {
            write();
        }
    }
    objects
}

#[test]
fn the_gateway_answers_as_etcds_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(etcd_process) = common::etcd::Etcd::start(dir.path()) else {
        eprintln!("skipped: etcd is not installed (Debian: etcd-server)");
        return;
    };
    let etcd = etcd_process.client_port;
    let (_leasekv, leasekv) = start_single(dir.path());
    wait_healthy(etcd, "etcd");
    wait_healthy(leasekv, "leasekv");

    let steps = steps();
    let theirs = run_steps(etcd, &steps);
    let ours = run_steps(leasekv, &steps);
    let mut differences = Vec::new();
    for ((step, theirs), ours) in steps.iter().zip(&theirs).zip(&ours) {
        if theirs != ours {
            differences.push(format!("POST {} {}\n  etcd:    {theirs:?}\n  leasekv: {ours:?}", step.path, step.body));
        }
    }

    // Election and lock, each store with the keys it handed out: campaign, leader,
    // proclaim, observe (its first answer), resign, lock and unlock.
    let recipes = |port: u16| -> Vec<(u16, Value)> {
        let mut answers = Vec::new();
        let mut call = |path: &str, body: Value| -> Value {
            let (status, text) = post(port, path, body.to_string().as_bytes());
            let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
            answers.push((status, shape(&value.to_string(), false)));
            value
        };
        call("/v3/lease/grant", serde_json::json!({"TTL": 60, "ID": 4321}));
        let campaign =
            call("/v3/election/campaign", serde_json::json!({"name": b64("el"), "lease": 4321, "value": b64("v1")}));
        let leader = campaign["leader"].clone();
        call("/v3/election/leader", serde_json::json!({"name": b64("el")}));
        call("/v3/election/proclaim", serde_json::json!({"leader": leader, "value": b64("v2")}));
        call("/v3/election/leader", serde_json::json!({"name": b64("el")}));
        call("/v3/election/resign", serde_json::json!({"leader": leader}));
        call("/v3/election/leader", serde_json::json!({"name": b64("el")}));
        let lock = call("/v3/lock/lock", serde_json::json!({"name": b64("lock2"), "lease": 4321}));
        call("/v3/lock/unlock", serde_json::json!({"key": lock["key"]}));
        call("/v3/lease/revoke", serde_json::json!({"ID": 4321}));
        answers
    };
    let (theirs, ours) = (recipes(etcd), recipes(leasekv));
    for (i, (t, o)) in theirs.iter().zip(&ours).enumerate() {
        if t != o {
            differences.push(format!("election/lock step {i}\n  etcd:    {t:?}\n  leasekv: {o:?}"));
        }
    }
    let observe = |port: u16| {
        post(port, "/v3/lease/grant", br#"{"TTL":60,"ID":5555}"#);
        post(
            port,
            "/v3/election/campaign",
            serde_json::json!({"name": b64("ob"), "lease": 5555, "value": b64("x")}).to_string().as_bytes(),
        );
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect for observe");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
        let body = serde_json::json!({"name": b64("ob")}).to_string();
        let head = format!(
            "POST /v3/election/observe HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(head.as_bytes()).expect("send observe");
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        let mut first = None;
        for _ in 0..40 {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            if line.trim().starts_with('{') {
                first = Some(shape(line.trim(), false));
                break;
            }
        }
        post(port, "/v3/lease/revoke", br#"{"ID":5555}"#);
        first
    };
    let (theirs, ours) = (observe(etcd), observe(leasekv));
    if theirs != ours || theirs.is_none() {
        differences.push(format!("observe\n  etcd:    {theirs:?}\n  leasekv: {ours:?}"));
    }

    // Status: the same fields (their values are each store's own), but for `dbSizeQuota`,
    // an etcd 3.6 field that etcd 3.4 does not send and leasekv fills (quota monitoring
    // reads it).
    let (status_theirs, status_ours) =
        (post(etcd, "/v3/maintenance/status", b"{}"), post(leasekv, "/v3/maintenance/status", b"{}"));
    let keys = |body: &str| -> Vec<String> {
        let value: Value = serde_json::from_str(body).unwrap_or_default();
        let mut keys: Vec<String> = value.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
        keys.sort();
        keys
    };
    let ours_in_34 = |body: &str| -> Vec<String> { keys(body).into_iter().filter(|k| k != "dbSizeQuota").collect() };
    if status_theirs.0 != status_ours.0 || keys(&status_theirs.1) != ours_in_34(&status_ours.1) {
        differences.push(format!("status\n  etcd:    {status_theirs:?}\n  leasekv: {status_ours:?}"));
    }

    // /version: the same fields; GET on a POST path; health.
    for (path, expect_same_text) in [("/version", false), ("/v3/kv/range", true), ("/health", true)] {
        let (theirs, ours) = (get(etcd, path), get(leasekv, path));
        let same = theirs.0 == ours.0
            && (!expect_same_text || theirs.1.trim() == ours.1.trim())
            && shape(&theirs.1, false) == shape(&ours.1, false);
        if !same {
            differences.push(format!("GET {path}\n  etcd:    {theirs:?}\n  leasekv: {ours:?}"));
        }
    }

    // A watch from an old revision, then live events.
    let watch = |port: u16| {
        let request = serde_json::json!({"create_request": {"key": b64("w"), "prev_kv": true}}).to_string();
        watch_lines(port, &request, 4, || {
            post(port, "/v3/kv/put", serde_json::json!({"key": b64("w"), "value": b64("1")}).to_string().as_bytes());
            post(port, "/v3/kv/put", serde_json::json!({"key": b64("w"), "value": b64("2")}).to_string().as_bytes());
            post(port, "/v3/kv/deleterange", serde_json::json!({"key": b64("w")}).to_string().as_bytes());
        })
    };
    let (theirs, ours) = (watch(etcd), watch(leasekv));
    if theirs != ours {
        differences.push(format!("watch\n  etcd:    {theirs:?}\n  leasekv: {ours:?}"));
    }
    assert!(theirs.len() == 4, "etcd's watch answered {theirs:?}");
    assert!(differences.is_empty(), "{} differences from etcd:\n{}", differences.len(), differences.join("\n"));
}

#[test]
fn etcd3gw_works_unchanged_against_a_three_node_cluster() {
    let Some(python) = common::tool("python3", "python3") else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    let has_etcd3gw = Command::new(&python).args(["-c", "import etcd3gw"]).status().is_ok_and(|s| s.success());
    if !has_etcd3gw {
        assert!(!common::in_ci(), "Python's etcd3gw is required under CI=true (.ci/run installs it with pip)");
        eprintln!("skipped: Python's etcd3gw is not installed (pip install etcd3gw)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (_nodes, _, ports) = start_three(dir.path());
    let endpoints: Vec<String> = ports[..3].iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gateway/etcd3gw_check.py");
    let output = Command::new(python).arg(script).arg(endpoints.join(",")).output().expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("etcd3gw: ok"),
        "etcd3gw against leasekv failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn bad_input_gets_a_clear_error_and_the_node_stays_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_node, port) = start_single(dir.path());
    wait_healthy(port, "leasekv");
    let huge = format!(r#"{{"key":"YQ==","value":"{}"}}"#, "A".repeat(6 * 1024 * 1024));
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("/v3/kv/put", b"not json".to_vec(), 400, "malformed JSON"),
        ("/v3/kv/put", br#"{"key": 5}"#.to_vec(), 400, "base64"),
        ("/v3/kv/put", br#"{"key": "YQ==", "lease": "many"}"#.to_vec(), 400, "malformed JSON"),
        ("/v3/kv/range", br#"{"key": "YQ==", "sort_order": "SIDEWAYS"}"#.to_vec(), 400, "malformed JSON"),
        ("/v3/kv/put", huge.into_bytes(), 400, "request is too large"),
        ("/v3/kv/put", br#"{"key": "YQ==", "value": "not base64!"}"#.to_vec(), 400, "malformed JSON"),
        ("/v3/lease/grant", br#"{"TTL": 1e400}"#.to_vec(), 400, "malformed JSON"),
        ("/v3/no/such/thing", b"{}".to_vec(), 404, "Not Found"),
    ];
    for (path, body, status, words) in cases {
        let (got, text) = post(port, path, &body);
        assert_eq!(got, status, "POST {path}: {text}");
        assert!(text.contains(words), "POST {path}: {text:?} should say {words:?}");
        if got == 400 {
            let value: Value = serde_json::from_str(&text).expect("an error body is JSON");
            assert_eq!(value["code"], 3, "{text}");
        }
    }
    assert_eq!(get(port, "/v3/kv/put").0, 405);
    // Garbage on the port, then a client that goes away mid-request.
    for garbage in [
        &b"\x16\x03\x01\x02\x00garbage"[..],
        b"GET / HTTP/9.9\r\n\r\n",
        b"POST /v3/kv/put HTTP/1.1\r\nContent-Length: 100\r\n\r\n{",
    ] {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = stream.write_all(garbage);
        }
    }
    let put = post(port, "/v3/kv/put", br#"{"key":"YQ==","value":"Yg=="}"#);
    assert_eq!(put.0, 200, "the node still answers: {put:?}");
}

#[test]
fn health_is_false_without_a_master_and_true_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut nodes, configs, ports) = start_three(dir.path());
    // Node 1 alone cannot reach a majority: no master, and no read.
    nodes[1] = None;
    nodes[2] = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = (0, String::new());
    while Instant::now() < deadline {
        last = get(ports[0], "/health");
        if last.0 == 503 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(last.0, 503, "health of a node cut off from a majority: {last:?}");
    let value: Value = serde_json::from_str(&last.1).expect("health is JSON");
    assert_eq!(value["health"], "false");
    assert!(value["reason"].as_str().is_some_and(|r| !r.is_empty()), "a reason: {last:?}");
    assert_eq!(get(ports[0], "/readyz").0, 503);
    assert_eq!(get(ports[0], "/livez"), (200, "ok\n".to_string()));
    nodes[1] = Some(start_kvserver(&configs[1], dir.path().join("log1-again")));
    wait_healthy(ports[0], "leasekv after a peer came back");
    assert_eq!(get(ports[0], "/readyz"), (200, "ok\n".to_string()));
}

#[test]
fn metrics_are_scraped_and_parsed_as_prometheus_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_node, port) = start_single(dir.path());
    wait_healthy(port, "leasekv");
    // A write over the gateway and one over gRPC (kvcli), a lease grant, then a scrape.
    assert_eq!(post(port, "/v3/kv/put", br#"{"key":"YQ==","value":"Yg=="}"#).0, 200);
    assert_eq!(post(port, "/v3/lease/grant", br#"{"TTL":30}"#).0, 200);
    let put = Command::new(env!("CARGO_BIN_EXE_kvcli"))
        .args(["--endpoints", &format!("127.0.0.1:{port}"), "put", "/m", "v"])
        .output()
        .expect("kvcli runs");
    assert!(put.status.success(), "kvcli put: {}", String::from_utf8_lossy(&put.stderr));
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut response = agent().get(&url).call().expect("a scrape");
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "content type {content_type}");
    let text = response.body_mut().read_to_string().expect("the exposition");
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parses");
    let value = |name: &str, labels: &[(&str, &str)]| -> Option<f64> {
        scrape.samples.iter().find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))).map(
            |s| match &s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => *v,
                prometheus_parse::Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
                prometheus_parse::Value::Summary(_) => 0.0,
            },
        )
    };
    assert_eq!(value("etcd_server_has_leader", &[]), Some(1.0), "{text}");
    assert_eq!(value("etcd_server_is_leader", &[]), Some(1.0));
    assert!(value("etcd_server_leader_changes_seen_total", &[]) >= Some(1.0));
    assert!(value("etcd_server_proposals_committed_total", &[]) >= Some(3.0));
    assert!(value("etcd_disk_wal_fsync_duration_seconds", &[]) >= Some(1.0), "fsyncs counted:\n{text}");
    assert_eq!(value("etcd_debugging_mvcc_keys_total", &[]), Some(2.0));
    assert_eq!(value("etcd_debugging_lease_granted_total", &[]), Some(1.0));
    assert_eq!(
        value(
            "grpc_server_handled_total",
            &[("grpc_service", "etcdserverpb.KV"), ("grpc_method", "Put"), ("grpc_code", "OK")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(value("leasekv_http_requests_total", &[("route", "/v3/kv/put"), ("code", "200")]), Some(1.0));
    assert!(
        value("leasekv_election_changes_total", &[("backend", "paxoslease"), ("change", "elected")]) >= Some(1.0),
        "{text}"
    );
    assert!(value("leasekv_election_changes_total", &[("backend", "paxoslease"), ("change", "failed_round")]).is_some());
    for name in ["etcd_server_proposals_pending", "etcd_server_proposals_failed_total", "leasekv_election_term"] {
        assert!(value(name, &[]).is_some(), "{name} missing");
    }
    // Every metric the example dashboard queries is served.
    let dashboard =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/grafana/leasekv-dashboard.json"))
            .expect("the example dashboard");
    let served: std::collections::BTreeSet<&str> = scrape.samples.iter().map(|s| s.metric.as_str()).collect();
    let queried: std::collections::BTreeSet<String> = dashboard
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("etcd_") || w.starts_with("leasekv_") || w.starts_with("grpc_server_"))
        .map(|w| w.trim_end_matches("_bucket").to_string())
        .collect();
    assert!(queried.len() >= 10, "{queried:?}");
    for name in &queried {
        assert!(served.contains(name.as_str()), "the dashboard queries {name}, which /metrics does not serve");
    }
}

/// Every member's headers carry the same term, which a takeover raises: clients such as
/// Patroni take a member whose term is below one they saw for a stale one.
#[test]
fn every_member_reports_the_term_and_a_takeover_raises_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut nodes, _, ports) = start_three(dir.path());
    // (term in the header, leader) as each live member answers Status.
    let terms = |alive: &[usize]| -> Vec<(u64, String)> {
        alive
            .iter()
            .map(|&i| {
                let (status, body) = post(ports[i], "/v3/maintenance/status", b"{}");
                assert_eq!(status, 200, "{body}");
                let value: Value = serde_json::from_str(&body).expect("JSON");
                let term = value["header"]["raft_term"].as_str().and_then(|t| t.parse().ok()).unwrap_or(0);
                (term, value["leader"].as_str().unwrap_or("0").to_string())
            })
            .collect()
    };
    // A member learns the round from the master's phase 1, its accepts or its commit
    // heartbeat: one started after the takeover knows it within a heartbeat, writes or not.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut before = Vec::new();
    while Instant::now() < deadline {
        before = terms(&[0, 1, 2]);
        if before.iter().all(|t| t.0 > 0 && *t == before[0]) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(before.iter().all(|t| t.0 > 0 && *t == before[0]), "every member, one term and one leader: {before:?}");
    let leader: usize = before[0].1.parse::<usize>().expect("a leader id") - 1;
    nodes[leader] = None;
    let alive: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut after = Vec::new();
    while Instant::now() < deadline {
        // A write goes through the new master's log: by then every survivor knows the round.
        let put = post(ports[alive[0]], "/v3/kv/put", br#"{"key":"dA==","value":"dg=="}"#);
        if put.0 == 200 {
            after = terms(&alive);
            if after.iter().all(|t| t.0 > before[0].0 && *t == after[0] && t.1 != "0") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        after.len() == 2 && after.iter().all(|t| t.0 > before[0].0 && *t == after[0]),
        "after the master ({leader}) stopped, the survivors agree on a higher term: before {before:?}, after {after:?}"
    );
}

/// The gateway over HTTP/2 without TLS (prior knowledge), as a gRPC-less HTTP/2 client
/// sends it: the same port, the same answers.
#[test]
fn the_gateway_answers_over_http2_too() {
    use http_body_util::{BodyExt, Full};
    let dir = tempfile::tempdir().expect("tempdir");
    let (_node, port) = start_single(dir.path());
    wait_healthy(port, "leasekv");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let client: hyper_util::client::legacy::Client<_, Full<hyper::body::Bytes>> =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(true)
                .build_http();
        let mut answers = Vec::new();
        for (path, body) in [("/v3/kv/put", r#"{"key":"aDI=","value":"dg=="}"#), ("/v3/kv/range", r#"{"key":"aDI="}"#)]
        {
            let request = hyper::Request::post(format!("http://127.0.0.1:{port}{path}"))
                .header("content-type", "application/json")
                .body(Full::new(hyper::body::Bytes::from(body)))
                .expect("a request");
            let response = client.request(request).await.expect("an HTTP/2 answer");
            assert_eq!(response.version(), hyper::Version::HTTP_2);
            assert_eq!(response.status(), 200);
            let bytes = response.into_body().collect().await.expect("the body").to_bytes();
            answers.push(serde_json::from_slice::<Value>(&bytes).expect("JSON"));
        }
        assert_eq!(answers[1]["kvs"][0]["value"], "dg==", "{answers:?}");
    });
}
