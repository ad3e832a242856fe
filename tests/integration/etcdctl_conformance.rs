//! etcdctl (Debian package `etcd-client`, API v3) gets the same answers from leasekv as from a
//! real etcd (Debian package `etcd-server`).
//!
//! The test starts a three-node leasekv cluster and a three-node etcd cluster side by side on
//! 127.0.0.1, runs one fixed sequence of etcdctl commands against each (through the same member,
//! the second one, so on leasekv most commands are forwarded to the master), and compares the
//! two transcripts line by line: exit code, standard output and the error lines etcdctl prints.
//! The sequence covers `put` (plain, `--prev-kv`, `--lease`), `get` (plain, `--prefix`,
//! `--keys-only`, `--print-value-only`, `--limit`, a range, `--from-key`, a missing key,
//! `--sort-by` each target with `--order`), `del`
//! (one key, `--prefix`, `--prev-kv`, a missing key), `txn` (success and failure branch, reads
//! and writes mixed), `lease grant`, `lease keep-alive --once`, `lease timetolive` (with and
//! without `--keys`, and of a revoked lease), `lease list`, `lease revoke` (and its keys going),
//! `member list`, `endpoint status` over all three endpoints, and the errors for an empty key,
//! an unknown lease, a value over the 1.5 MiB request limit, a txn writing one key twice and
//! revoking a revoked lease. Most commands run both in the default simple format and with
//! `-w json`, which shows every field of etcd's answer (revisions, versions, prev_kv, count,
//! more, lease, nested txn headers).
//!
//! Only what legitimately differs between two clusters is replaced by placeholders before the
//! comparison: lease ids (chosen by the server), cluster and member ids, raft terms and indexes,
//! versions and database sizes, the ports in URLs, and a lease's remaining seconds when it is
//! within 3 s of its TTL (the two clusters run the commands at slightly different times), and
//! the order of a lease's keys (etcd keeps them in a Go map). Every header must carry a
//! raft_term, on every member, as etcd's do. Revisions are compared exactly: both stores start at revision 1 and must count the same
//! writes. `member list` and `endpoint status` are compared by shape (rows, which columns say
//! what, exactly one leader that every member agrees on), since their order depends on ids.
//!
//! Range's revision filters, which etcdctl 3.4 has no flags for, are compared over gRPC
//! (`revision_filters_answer_as_etcd`), and so are watch requests etcdctl cannot send
//! (`odd_watch_requests_answer_as_etcd`) and etcd's Lock and Election services
//! (`lock_and_election_answer_as_etcd`: etcdctl's lock and elect run those recipes
//! client-side, see `etcdctl_recipes.rs`).
//!
//! Then the MVCC history both stores now hold (`history_answers_as_etcd`): `get --rev` at every
//! revision, `watch --rev=1` replaying everything (simple and JSON, with and without
//! `--prev-kv`, from a follower), a live watch through puts, a delete and a lease revocation,
//! and `compaction` with reads and watches below, at and beyond the compaction point.
//!
//! Without etcd or etcdctl on PATH the test skips, except under `CI=true`, where it fails.
//! `SHOW_ETCDCTL_TRANSCRIPT=1` prints leasekv's normalised transcript (run with `--nocapture`).

use crate::common;

use serde_json::Value;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KVSERVER: &str = env!("CARGO_BIN_EXE_kvserver");

/// The longest one etcdctl run may take before it is killed (its own timeout is 10 s).
const RUN_LIMIT: Duration = Duration::from_secs(15);

/// How long a cluster may take to elect a leader and answer a linearizable read.
const READY_LIMIT: Duration = Duration::from_secs(15);

/// etcd's default request size limit (`--max-request-bytes`) and leasekv's value limit.
const REQUEST_LIMIT: usize = 1536 * 1024;

use common::tool;

/// Three server processes, killed (by pid) when dropped.
struct Cluster {
    name: &'static str,
    dir: tempfile::TempDir,
    children: Vec<Child>,
    client_ports: Vec<u16>,
}

impl Cluster {
    fn leasekv(ports: &[u16]) -> Cluster {
        let dir = tempfile::tempdir().expect("a temporary directory for leasekv");
        let (client_ports, peer_ports) = ports.split_at(3);
        let configs = common::write_configs(dir.path(), client_ports, peer_ports, "paxoslease", "");
        let mut children = Vec::new();
        for (i, path) in configs.iter().enumerate() {
            let log = std::fs::File::create(dir.path().join(format!("log{i}"))).expect("leasekv log file");
            let child = Command::new(KVSERVER)
                .arg("--config")
                .arg(path)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("kvserver starts");
            children.push(child);
        }
        Cluster { name: "leasekv", dir, children, client_ports: client_ports.to_vec() }
    }

    fn etcd(bin: &Path, ports: &[u16]) -> Cluster {
        let dir = tempfile::tempdir().expect("a temporary directory for etcd");
        let (client_ports, peer_ports) = ports.split_at(3);
        let initial: Vec<String> = (0..3).map(|j| format!("e{j}=http://127.0.0.1:{}", peer_ports[j])).collect();
        let mut children = Vec::new();
        for i in 0..3 {
            let log = std::fs::File::create(dir.path().join(format!("log{i}"))).expect("etcd log file");
            let child = Command::new(bin)
                .arg(format!("--name=e{i}"))
                .arg(format!("--data-dir={}", dir.path().join(format!("data{i}")).display()))
                .arg(format!("--listen-client-urls=http://127.0.0.1:{}", client_ports[i]))
                .arg(format!("--advertise-client-urls=http://127.0.0.1:{}", client_ports[i]))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{}", peer_ports[i]))
                .arg(format!("--initial-advertise-peer-urls=http://127.0.0.1:{}", peer_ports[i]))
                .arg(format!("--initial-cluster={}", initial.join(",")))
                .arg("--initial-cluster-state=new")
                .arg("--log-level=error")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("etcd starts");
            children.push(child);
        }
        Cluster { name: "etcd", dir, children, client_ports: client_ports.to_vec() }
    }

    fn endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.client_ports[i])
    }

    fn all(&self) -> String {
        (0..3).map(|i| self.endpoint(i)).collect::<Vec<_>>().join(",")
    }

    /// The end of every node's log, for failure messages.
    fn logs(&self) -> String {
        (0..3)
            .map(|i| {
                let text = std::fs::read_to_string(self.dir.path().join(format!("log{i}"))).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {} node {i} log (end) ---\n{}\n", self.name, tail.join("\n"))
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What one etcdctl run produced.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs etcdctl (API v3) with a hard deadline: killed by pid after [`RUN_LIMIT`].
fn etcdctl(bin: &Path, endpoints: &str, timeout: &str, args: &[String], stdin: Option<&[u8]>) -> Run {
    let mut child = Command::new(bin)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .arg(format!("--command-timeout={timeout}"))
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("etcdctl starts");
    let writer = child.stdin.take().map(|mut pipe| {
        let input = stdin.unwrap_or_default().to_vec();
        std::thread::spawn(move || {
            // etcdctl may exit before reading everything (e.g. a usage error): ignore EPIPE.
            let _ = pipe.write_all(&input);
        })
    });
    let output = common::process::output_within(child, RUN_LIMIT)
        .unwrap_or_else(|| panic!("etcdctl {args:?} against {endpoints} did not finish within {RUN_LIMIT:?}"))
        .expect("etcdctl's output is readable");
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Waits until every member answers `endpoint status` naming the same leader and a
/// linearizable read succeeds. Nothing is written: both stores stay at revision 1.
fn wait_ready(bin: &Path, cluster: &Cluster) -> Result<Duration, String> {
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < READY_LIMIT {
        let status = etcdctl(bin, &cluster.all(), "2s", &strings(&["endpoint", "status", "-w", "json"]), None);
        let leaders: Option<BTreeSet<u64>> = serde_json::from_str::<Value>(&status.stdout).ok().and_then(|v| {
            let rows = v.as_array()?.clone();
            (rows.len() == 3).then(|| rows.iter().map(|r| r["Status"]["leader"].as_u64().unwrap_or(0)).collect())
        });
        match leaders {
            Some(set) if set.len() == 1 && !set.contains(&0) => {
                let read = etcdctl(bin, &cluster.endpoint(1), "3s", &strings(&["get", "/ready"]), None);
                if read.code == Some(0) {
                    return Ok(started.elapsed());
                }
                last = format!("read: {read:?}");
            }
            _ => last = format!("status: {status:?}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("{} not ready within {READY_LIMIT:?}; last: {last}\n{}", cluster.name, cluster.logs()))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// How a step's standard output is normalised and compared.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// Text, compared line by line.
    Simple,
    /// Text whose lines after the first are sorted (lease list: the order follows the ids).
    SortedTail,
    /// One JSON document, compared field by field (pretty-printed, keys sorted).
    Json,
    /// `member list` in the simple format.
    Members,
    /// `member list -w json`.
    MembersJson,
    /// `endpoint status` over every endpoint, simple format.
    Status,
    /// `endpoint status -w json` over every endpoint.
    StatusJson,
}

/// One etcdctl command of the sequence. `{L1}`, `{L2}` in the arguments stand for the lease
/// ids captured (from `lease grant`) under those names.
struct Step {
    args: Vec<&'static str>,
    stdin: Option<Vec<u8>>,
    all_endpoints: bool,
    shape: Shape,
    capture: Option<&'static str>,
}

fn step(args: &[&'static str]) -> Step {
    Step { args: args.to_vec(), stdin: None, all_endpoints: false, shape: Shape::Simple, capture: None }
}

impl Step {
    /// The same command with `-w json`.
    fn json(mut self) -> Step {
        self.args.extend(["-w", "json"]);
        self.shape = match self.shape {
            Shape::Members => Shape::MembersJson,
            Shape::Status => Shape::StatusJson,
            _ => Shape::Json,
        };
        self
    }

    fn stdin(mut self, input: impl Into<Vec<u8>>) -> Step {
        self.stdin = Some(input.into());
        self
    }

    fn shape(mut self, shape: Shape) -> Step {
        self.shape = shape;
        self
    }

    fn all_endpoints(mut self) -> Step {
        self.all_endpoints = true;
        self
    }

    fn capture(mut self, name: &'static str) -> Step {
        self.capture = Some(name);
        self
    }
}

/// A txn whose compare holds: reads before and after a write, a delete of nothing, a second write.
const TXN_SUCCESS: &str = "value(\"/t\") = \"1\"\n\nget /t\nput /t 2\nget /t\ndel /nothing\nput /u 1\n\nput /t 3\n\n";
/// A txn whose compare fails: the failure branch runs.
const TXN_FAILURE: &str = "value(\"/t\") = \"1\"\n\nput /t 4\n\nput /t 5\nget /t --prefix --keys-only\n\n";
/// A txn whose compare is on the mod revision, failure branch with a read only.
const TXN_READ_ONLY: &str = "mod(\"/t\") > \"1000\"\n\nput /t 6\n\nget /u\n\n";
/// A txn writing the same key twice in one branch: refused whichever branch would run.
const TXN_DUPLICATE: &str = "value(\"/t\") = \"1\"\n\nput /t 7\n\nput /u 8\ndel /u\n\n";

/// The sequence. Order matters: later steps see the effects (and revisions) of earlier ones.
fn sequence() -> Vec<Step> {
    let oversized = vec![b'x'; REQUEST_LIMIT + 30 * 1024];
    vec![
        // sorted gets, by every target (distinct values, versions and revisions, so that
        // no two keys tie)
        step(&["put", "/s/a", "3"]),
        step(&["put", "/s/b", "1"]),
        step(&["put", "/s/c", "2"]),
        step(&["put", "/s/a", "3"]),
        step(&["put", "/s/a", "3"]),
        step(&["put", "/s/c", "2"]),
        step(&["get", "/s/", "--prefix", "--sort-by=VALUE"]),
        step(&["get", "/s/", "--prefix", "--order=DESCEND"]),
        step(&["get", "/s/", "--prefix", "--sort-by=MODIFY", "--order=DESCEND", "--limit=2"]).json(),
        step(&["get", "/s/", "--prefix", "--sort-by=VERSION", "--order=ASCEND", "--keys-only"]).json(),
        step(&["get", "/s/", "--prefix", "--sort-by=CREATE", "--order=DESCEND"]),
        step(&["get", "/s/", "--prefix", "--sort-by=VALUE", "--keys-only", "--limit=1"]).json(),
        step(&["del", "/s/", "--prefix"]),
        // put / get
        step(&["put", "/a", "1"]),
        step(&["put", "/a", "1"]).json(),
        step(&["get", "/a"]),
        step(&["get", "/a"]).json(),
        step(&["put", "/a", "2", "--prev-kv"]),
        step(&["put", "/a", "3", "--prev-kv"]).json(),
        step(&["put", "/p/x", "10"]),
        step(&["put", "/p/y", "20"]),
        step(&["put", "/p/z", "30"]).json(),
        step(&["get", "/p/", "--prefix"]),
        step(&["get", "/p/", "--prefix"]).json(),
        step(&["get", "/p/", "--prefix", "--keys-only"]),
        step(&["get", "/p/", "--prefix", "--keys-only"]).json(),
        step(&["get", "/p/", "--prefix", "--print-value-only"]),
        step(&["get", "/p/", "--prefix", "--limit=2"]),
        step(&["get", "/p/", "--prefix", "--limit=2"]).json(),
        step(&["get", "/p/x", "/p/z"]).json(),
        step(&["get", "/p/y", "--from-key"]).json(),
        step(&["get", "/nope"]),
        step(&["get", "/nope"]).json(),
        // del
        step(&["del", "/p/z", "--prev-kv"]),
        step(&["del", "/nothing"]),
        step(&["del", "/nothing"]).json(),
        step(&["del", "/p/", "--prefix"]).json(),
        step(&["put", "/d", "x"]),
        step(&["del", "/d", "--prev-kv"]).json(),
        // txn
        step(&["put", "/t", "1"]),
        step(&["txn"]).stdin(TXN_SUCCESS),
        step(&["put", "/t", "1"]),
        step(&["txn"]).stdin(TXN_SUCCESS).json(),
        step(&["txn"]).stdin(TXN_FAILURE),
        step(&["txn"]).stdin(TXN_FAILURE).json(),
        step(&["txn"]).stdin(TXN_READ_ONLY).json(),
        step(&["get", "/t"]).json(),
        // leases
        step(&["lease", "grant", "30"]).capture("L1"),
        step(&["lease", "grant", "60"]).json().capture("L2"),
        step(&["put", "/leased", "v", "--lease={L1}"]),
        step(&["put", "/leased2", "w", "--lease={L1}"]).json(),
        step(&["get", "/leased"]).json(),
        step(&["lease", "keep-alive", "--once", "{L1}"]),
        step(&["lease", "keep-alive", "--once", "{L1}"]).json(),
        step(&["lease", "timetolive", "{L1}"]),
        step(&["lease", "timetolive", "{L1}", "--keys"]),
        step(&["lease", "timetolive", "{L1}", "--keys"]).json(),
        step(&["lease", "timetolive", "{L2}"]).json(),
        step(&["lease", "list"]).shape(Shape::SortedTail),
        step(&["lease", "list"]).json(),
        step(&["lease", "revoke", "{L1}"]),
        step(&["get", "/leased", "--prefix"]).json(),
        step(&["lease", "timetolive", "{L1}"]),
        step(&["lease", "timetolive", "{L1}", "--keys"]).json(),
        step(&["lease", "keep-alive", "--once", "{L1}"]),
        step(&["lease", "revoke", "{L1}"]),
        step(&["lease", "revoke", "{L2}"]).json(),
        step(&["lease", "list"]),
        // the cluster
        step(&["member", "list"]).shape(Shape::Members),
        step(&["member", "list"]).shape(Shape::Members).json(),
        step(&["endpoint", "status"]).shape(Shape::Status).all_endpoints(),
        step(&["endpoint", "status"]).shape(Shape::Status).all_endpoints().json(),
        // errors
        step(&["put", "", "v"]),
        step(&["get", ""]),
        step(&["put", "/x", "v", "--lease=1234abcd"]),
        step(&["put", "/big"]).stdin(oversized),
        step(&["txn"]).stdin(TXN_DUPLICATE),
        // nothing above changed what is stored
        step(&["get", "", "--from-key"]).json(),
    ]
}

/// Lease ids captured from `lease grant`, by name.
#[derive(Default)]
struct Leases(Vec<(&'static str, u64)>);

impl Leases {
    fn placeholder(&self, id: u64) -> Option<String> {
        self.0.iter().find(|(_, known)| *known == id).map(|(name, _)| format!("<lease {name}>"))
    }

    fn substitute(&self, arg: &str) -> String {
        let mut arg = arg.to_string();
        for (name, id) in &self.0 {
            arg = arg.replace(&format!("{{{name}}}"), &format!("{id:x}"));
        }
        arg
    }

    /// Replaces every whole word that is a known lease id in hex (plain or zero-padded).
    fn in_text(&self, text: &str) -> String {
        let mut out = String::new();
        let mut word = String::new();
        let flush = |word: &mut String, out: &mut String| {
            let id = u64::from_str_radix(word, 16).ok().filter(|_| word.len() >= 8);
            match id.and_then(|id| self.placeholder(id)) {
                Some(p) => out.push_str(&p),
                None => out.push_str(word),
            }
            word.clear();
        };
        for c in text.chars() {
            if c.is_ascii_alphanumeric() {
                word.push(c);
            } else {
                flush(&mut word, &mut out);
                out.push(c);
            }
        }
        flush(&mut word, &mut out);
        out
    }
}

/// "attached keys([/b /a])" → "attached keys([/a /b])": etcd keeps a lease's keys in a Go map.
fn sorted_lease_keys(line: &str) -> String {
    let tag = "attached keys([";
    let Some(start) = line.find(tag).map(|i| i + tag.len()) else { return line.to_string() };
    let Some(end) = line[start..].find("])").map(|i| start + i) else { return line.to_string() };
    let mut keys: Vec<&str> = line[start..end].split(' ').collect();
    keys.sort();
    format!("{}{}{}", &line[..start], keys.join(" "), &line[end..])
}

/// "granted with TTL(30s), remaining(29s)" → "remaining(TTL-ish)" when within 3 s of the TTL.
fn remaining_in_text(line: &str) -> String {
    let number_after = |tag: &str| -> Option<(usize, usize, i64)> {
        let start = line.find(tag)? + tag.len();
        let end = start + line[start..].find("s)")?;
        Some((start, end, line[start..end].parse().ok()?))
    };
    match (number_after("TTL("), number_after("remaining(")) {
        (Some((_, _, ttl)), Some((start, end, left))) if ttl - 3 <= left && left <= ttl => {
            format!("{}<within 3 s of the TTL>{}", &line[..start], &line[end..])
        }
        _ => line.to_string(),
    }
}

/// etcdctl's JSON puts keys and values in base64: decode the printable ones for readable diffs.
fn unbase64(text: &str) -> Option<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut count = 0;
    let mut bytes = Vec::new();
    for c in text.bytes().filter(|&c| c != b'=') {
        bits = (bits << 6) | ALPHABET.iter().position(|&a| a == c)? as u32;
        count += 6;
        if count >= 8 {
            count -= 8;
            bytes.push((bits >> count) as u8);
        }
    }
    String::from_utf8(bytes).ok().filter(|s| s.chars().all(|c| !c.is_control()))
}

/// Replaces what differs legitimately between two clusters inside a JSON answer.
fn normalise_json(value: &mut Value, leases: &Leases) {
    match value {
        Value::Object(map) => {
            let granted = map.get("granted-ttl").and_then(Value::as_i64);
            for (key, field) in map.iter_mut() {
                match key.as_str() {
                    "cluster_id" | "member_id" | "raft_term" | "raftTerm" | "raftIndex" | "raftAppliedIndex"
                    | "dbSize" | "dbSizeInUse" | "version" => {
                        // "version" is also a key's version, an integer: compared as is.
                        if !(key == "version" && field.is_i64()) {
                            *field = Value::String(format!("<{key}>"));
                        }
                    }
                    "ID" | "id" | "lease" => {
                        if let Some(p) = field.as_u64().and_then(|id| leases.placeholder(id)) {
                            *field = Value::String(p);
                        }
                    }
                    "ttl" => {
                        if let (Some(ttl), Some(granted)) = (field.as_i64(), granted) {
                            if ttl > 0 && granted - 3 <= ttl && ttl <= granted {
                                *field = Value::String("<within 3 s of granted-ttl>".to_string());
                            }
                        }
                    }
                    "key" | "value" => {
                        if let Some(text) = field.as_str().and_then(unbase64) {
                            *field = Value::String(format!("base64 of {text:?}"));
                        }
                    }
                    "keys" => {
                        if let Value::Array(keys) = field {
                            for k in keys.iter_mut() {
                                if let Some(text) = k.as_str().and_then(unbase64) {
                                    *k = Value::String(format!("base64 of {text:?}"));
                                }
                            }
                            // etcd keeps a lease's keys in a Go map: any order.
                            keys.sort_by_key(|k| k.to_string());
                        }
                    }
                    _ => normalise_json(field, leases),
                }
            }
            // The lease list's order follows the ids.
            if let Some(Value::Array(list)) = map.get_mut("leases") {
                list.sort_by_key(|v| v.to_string());
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| normalise_json(v, leases)),
        _ => {}
    }
}

/// `member list` rows: "id, started, name, peer url, client url, is learner".
fn normalise_members(stdout: &str, client_endpoints: &[String]) -> Vec<String> {
    let mut ids = BTreeSet::new();
    let mut rows: Vec<String> = stdout
        .lines()
        .map(|line| {
            let cols: Vec<&str> = line.split(", ").collect();
            if cols.len() != 6 {
                return format!("unexpected row: {line}");
            }
            ids.insert(cols[0].to_string());
            let client = client_url(cols[4], client_endpoints);
            let peer = if cols[3].starts_with("http://127.0.0.1:") { "<peer url>" } else { cols[3] };
            format!("<member id>, {}, <name>, {peer}, {client}, {}", cols[1], cols[5])
        })
        .collect();
    rows.sort();
    rows.push(format!("distinct member ids: {}", ids.len()));
    rows
}

fn client_url(url: &str, client_endpoints: &[String]) -> String {
    match client_endpoints.iter().position(|e| url == format!("http://{e}")) {
        Some(i) => format!("http://<client endpoint {i}>"),
        None => url.to_string(),
    }
}

fn normalise_members_json(value: &mut Value, client_endpoints: &[String], leases: &Leases) -> Vec<String> {
    let mut ids = BTreeSet::new();
    if let Some(Value::Array(members)) = value.get_mut("members") {
        for m in members.iter_mut() {
            if let Some(id) = m.get("ID").and_then(Value::as_u64) {
                ids.insert(id);
            }
            m["ID"] = Value::String("<member id>".to_string());
            m["name"] = Value::String("<name>".to_string());
            if let Some(Value::Array(urls)) = m.get_mut("peerURLs") {
                urls.iter_mut().for_each(|u| *u = Value::String("<peer url>".to_string()));
            }
            if let Some(Value::Array(urls)) = m.get_mut("clientURLs") {
                urls.iter_mut()
                    .for_each(|u| *u = Value::String(client_url(u.as_str().unwrap_or(""), client_endpoints)));
            }
        }
        members.sort_by_key(|m| m["clientURLs"].to_string());
    }
    let answering = value["header"]["member_id"].as_u64().is_some_and(|id| ids.contains(&id));
    normalise_json(value, leases);
    let mut lines = pretty(value);
    lines.push(format!("distinct member ids: {}", ids.len()));
    lines.push(format!("the answering member is listed: {answering}"));
    lines
}

/// `endpoint status` rows: "endpoint, id, version, db size, is leader, is learner, raft term,
/// raft index, raft applied index, errors" → their shape.
fn normalise_status(stdout: &str, client_endpoints: &[String]) -> Vec<String> {
    let rows: Vec<Vec<&str>> = stdout.lines().map(|l| l.split(", ").collect()).collect();
    let col = |i: usize, what: &str| rows.iter().filter(|r| r.get(i).is_some_and(|c| c.trim() == what)).count();
    let mut endpoints: Vec<String> = rows
        .iter()
        .map(|r| match client_endpoints.iter().position(|e| Some(&e.as_str()) == r.first()) {
            Some(i) => format!("<client endpoint {i}>"),
            None => format!("unexpected row: {}", r.join(", ")),
        })
        .collect();
    endpoints.sort();
    vec![
        format!("rows: {}", rows.len()),
        format!("columns per row: {:?}", rows.iter().map(Vec::len).collect::<BTreeSet<_>>()),
        format!("endpoints: {}", endpoints.join(" ")),
        format!("rows saying leader: {}", col(4, "true")),
        format!("rows saying learner: {}", col(5, "true")),
        format!(
            "rows with an error: {}",
            rows.iter().filter(|r| r.get(9).is_some_and(|c| !c.trim().is_empty())).count()
        ),
    ]
}

fn normalise_status_json(value: &Value, client_endpoints: &[String]) -> Vec<String> {
    let rows = value.as_array().cloned().unwrap_or_default();
    let leaders: BTreeSet<u64> = rows.iter().filter_map(|r| r["Status"]["leader"].as_u64()).collect();
    let leader_rows = rows
        .iter()
        .filter(|r| r["Status"]["header"]["member_id"].as_u64().is_some_and(|id| leaders.contains(&id)))
        .count();
    let terms: BTreeSet<u64> = rows.iter().filter_map(|r| r["Status"]["raftTerm"].as_u64()).collect();
    let mut endpoints: Vec<String> = rows
        .iter()
        .map(|r| {
            let e = r["Endpoint"].as_str().unwrap_or("");
            match client_endpoints.iter().position(|c| c == e) {
                Some(i) => format!("<client endpoint {i}>"),
                None => format!("unexpected endpoint {e}"),
            }
        })
        .collect();
    endpoints.sort();
    vec![
        format!("rows: {}", rows.len()),
        format!("endpoints: {}", endpoints.join(" ")),
        format!("distinct leaders named: {}", leaders.len()),
        format!("rows answered by the leader: {leader_rows}"),
        format!("distinct raft terms: {}", terms.len()),
        format!("rows with a version: {}", rows.iter().filter(|r| r["Status"]["version"].as_str().is_some()).count()),
    ]
}

fn pretty(value: &Value) -> Vec<String> {
    serde_json::to_string_pretty(value).unwrap_or_default().lines().map(str::to_string).collect()
}

/// One step's transcript with what differs legitimately replaced.
fn normalise(run: &Run, shape: Shape, leases: &Leases, client_endpoints: &[String]) -> Vec<String> {
    let mut lines = vec![format!("exit code: {:?}", run.code)];
    let text = |s: &str| -> Vec<String> {
        s.lines().map(|l| sorted_lease_keys(&remaining_in_text(&leases.in_text(l)))).collect()
    };
    let json = || serde_json::from_str::<Value>(run.stdout.trim()).ok();
    let out = match (shape, json()) {
        (Shape::Simple, _) => text(&run.stdout),
        (Shape::SortedTail, _) => {
            let mut all = text(&run.stdout);
            if all.len() > 1 {
                all[1..].sort();
            }
            all
        }
        (Shape::Json, Some(mut v)) => {
            normalise_json(&mut v, leases);
            pretty(&v)
        }
        (Shape::Members, _) => normalise_members(&run.stdout, client_endpoints),
        (Shape::MembersJson, Some(mut v)) => normalise_members_json(&mut v, client_endpoints, leases),
        (Shape::Status, _) => normalise_status(&run.stdout, client_endpoints),
        (Shape::StatusJson, Some(v)) => normalise_status_json(&v, client_endpoints),
        (_, None) => text(&run.stdout),
    };
    lines.extend(out.into_iter().map(|l| format!("out: {l}")));
    for line in run.stderr.lines() {
        // clientv3's retry logger: keep the gRPC error, drop the timestamp and the target.
        let log = serde_json::from_str::<Value>(line).ok().filter(|v| v.get("msg").is_some());
        let line = match log {
            Some(v) => format!("log: {}: {}", v["msg"].as_str().unwrap_or(""), v["error"].as_str().unwrap_or("")),
            None => line.to_string(),
        };
        lines.push(format!("err: {}", leases.in_text(&line)));
    }
    lines
}

/// The id a `lease grant` printed ("lease 694d77aa9e38260f granted with TTL(30s)" or JSON "ID").
fn granted_id(run: &Run) -> Option<u64> {
    if let Ok(v) = serde_json::from_str::<Value>(run.stdout.trim()) {
        return v["ID"].as_u64();
    }
    let hex = run.stdout.split_whitespace().nth(1)?;
    u64::from_str_radix(hex, 16).ok()
}

/// Runs the sequence against one cluster: the command line shown and the normalised
/// transcript of every step.
fn transcript(bin: &Path, cluster: &Cluster) -> (Vec<(String, Vec<String>)>, Leases) {
    let mut leases = Leases::default();
    let client_endpoints: Vec<String> = (0..3).map(|i| cluster.endpoint(i)).collect();
    let mut out = Vec::new();
    for step in sequence() {
        let args: Vec<String> = step.args.iter().map(|a| leases.substitute(a)).collect();
        let endpoints = if step.all_endpoints { cluster.all() } else { cluster.endpoint(1) };
        let run = etcdctl(bin, &endpoints, "10s", &args, step.stdin.as_deref());
        if let Some(name) = step.capture {
            let id = granted_id(&run)
                .unwrap_or_else(|| panic!("{}: no lease id in the answer to {args:?}: {run:?}", cluster.name));
            leases.0.push((name, id));
        }
        let shown_args: Vec<String> =
            step.args.iter().map(|a| if a.is_empty() { "''".to_string() } else { a.to_string() }).collect();
        let mut shown = format!("etcdctl {}", shown_args.join(" "));
        if let Some(input) = &step.stdin {
            if input.len() <= 200 {
                shown.push_str(&format!(" <<< {:?}", String::from_utf8_lossy(input)));
            } else {
                shown.push_str(&format!(" <<< ({} bytes)", input.len()));
            }
        }
        out.push((shown, normalise(&run, step.shape, &leases, &client_endpoints)));
    }
    (out, leases)
}

/// Where two normalised transcripts differ, step by step: a line diff (longest common
/// subsequence; the outputs are a few dozen lines) with `-` for etcd's lines and `+` for ours.
fn differences(etcd: &[(String, Vec<String>)], ours: &[(String, Vec<String>)]) -> String {
    let mut report = String::new();
    for (n, ((command, a), (_, b))) in etcd.iter().zip(ours).enumerate() {
        if a != b {
            report.push_str(&format!("\nstep {}: {command}\n{}", n + 1, line_diff(a, b)));
        }
    }
    report
}

fn line_diff(a: &[String], b: &[String]) -> String {
    // common[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut common = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            common[i][j] = if a[i] == b[j] { common[i + 1][j + 1] + 1 } else { common[i + 1][j].max(common[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push_str(&format!("    {}\n", a[i]));
            (i, j) = (i + 1, j + 1);
        } else if j < b.len() && (i == a.len() || common[i][j + 1] >= common[i + 1][j]) {
            out.push_str(&format!("  + {}\n", b[j]));
            j += 1;
        } else {
            out.push_str(&format!("  - {}\n", a[i]));
            i += 1;
        }
    }
    out
}

/// Range's min/max mod and create revision filters, with sorting, a limit and count_only,
/// alone and inside a Txn, give the same answers from leasekv as from etcd (over gRPC: etcdctl 3.4 has no flags for
/// them). Revisions are named relative to the first put, so the two stores need not be at
/// the same revision.
fn revision_filters_answer_as_etcd(ours: &Cluster, etcd: &Cluster) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let etcds = runtime.block_on(filtered_ranges(etcd.endpoint(1)));
    let leasekvs = runtime.block_on(filtered_ranges(ours.endpoint(1)));
    assert_eq!(leasekvs, etcds, "filtered ranges: leasekv's answers (left) differ from etcd's (right)");
}

/// Writes /f/a, /f/b, /f/c, /f/a, /f/c (first revision r), reads them back through each
/// filter, and deletes them; each answer as `keys count more`, revisions relative to r.
async fn filtered_ranges(endpoint: String) -> Vec<String> {
    use leasekv::client::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
    use leasekv::client::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
    use leasekv::client::proto::etcdserverpb::request_op::Request;
    use leasekv::client::proto::etcdserverpb::response_op::Response;
    use leasekv::client::proto::etcdserverpb::{
        kv_client::KvClient, Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
    };
    let mut kv = KvClient::connect(format!("http://{endpoint}")).await.expect("connect over gRPC");
    let mut first = None;
    for (key, value) in [("/f/a", "1"), ("/f/b", "2"), ("/f/c", "3"), ("/f/a", "4"), ("/f/c", "5")] {
        let put = PutRequest { key: key.into(), value: value.into(), ..Default::default() };
        let answer = kv.put(put).await.expect("put").into_inner();
        first.get_or_insert(answer.header.expect("a header").revision);
    }
    let r = first.expect("five puts");
    let range = |f: &dyn Fn(&mut RangeRequest)| {
        let mut request = RangeRequest { key: b"/f/".to_vec(), range_end: b"/f0".to_vec(), ..Default::default() };
        f(&mut request);
        request
    };
    let cases = [
        range(&|q| q.min_mod_revision = r + 3),
        range(&|q| q.max_mod_revision = r + 1),
        range(&|q| q.min_create_revision = r + 1),
        range(&|q| {
            q.max_create_revision = r + 1;
            q.sort_order = SortOrder::Descend as i32;
        }),
        range(&|q| {
            q.min_create_revision = r + 1;
            q.max_mod_revision = r + 2;
        }),
        range(&|q| {
            q.min_mod_revision = r + 1;
            q.sort_target = SortTarget::Value as i32;
            q.sort_order = SortOrder::Descend as i32;
            q.limit = 1;
        }),
        range(&|q| {
            q.min_mod_revision = r + 3;
            q.count_only = true;
        }),
        range(&|q| {
            q.max_mod_revision = r + 3;
            q.keys_only = true;
            q.limit = 1;
        }),
        // An unknown sort order is "etcdserver: invalid sort option" from etcd 3.5 on, and
        // from leasekv; the etcd 3.4 this test runs ignores it, so it is not compared here.
    ];
    let mut answers = Vec::new();
    for (case, request) in cases.into_iter().enumerate() {
        let described = format!("case {case}");
        answers.push(match kv.range(request).await {
            Ok(answer) => {
                let answer = answer.into_inner();
                let kvs: Vec<String> = answer
                    .kvs
                    .iter()
                    .map(|kv| {
                        format!(
                            "{}={} mod r+{} create r+{}",
                            String::from_utf8_lossy(&kv.key),
                            String::from_utf8_lossy(&kv.value),
                            kv.mod_revision - r,
                            kv.create_revision - r
                        )
                    })
                    .collect();
                format!("{described}: {kvs:?} count {} more {}", answer.count, answer.more)
            }
            Err(status) => format!("{described}: {:?} {}", status.code(), status.message()),
        });
    }
    // The same inside a Txn: a sorted, filtered, limited range in the branch that runs (no
    // compares: success), and one in each branch of a Txn whose compare fails.
    let shaped = || {
        range(&|q| {
            q.sort_target = SortTarget::Mod as i32;
            q.sort_order = SortOrder::Descend as i32;
            q.min_mod_revision = r + 1;
            q.limit = 2;
        })
    };
    let op = |request: RangeRequest| RequestOp { request: Some(Request::RequestRange(request)) };
    let missing = Compare {
        key: b"/f/none".to_vec(),
        result: CompareResult::Greater as i32,
        target: CompareTarget::Version as i32,
        target_union: Some(TargetUnion::Version(0)),
        ..Default::default()
    };
    let txns = [
        TxnRequest { success: vec![op(shaped())], ..Default::default() },
        TxnRequest {
            compare: vec![missing],
            success: vec![op(shaped())],
            failure: vec![op(range(&|q| q.sort_target = SortTarget::Value as i32)), op(shaped())],
        },
    ];
    for (case, txn) in txns.into_iter().enumerate() {
        let answer = kv.txn(txn).await.expect("txn").into_inner();
        let ranges: Vec<Vec<String>> = answer
            .responses
            .iter()
            .filter_map(|op| match &op.response {
                Some(Response::ResponseRange(range)) => Some(
                    range
                        .kvs
                        .iter()
                        .map(|kv| format!("{} mod r+{}", String::from_utf8_lossy(&kv.key), kv.mod_revision - r))
                        .chain([format!("count {} more {}", range.count, range.more)])
                        .collect(),
                ),
                _ => None,
            })
            .collect();
        answers.push(format!("txn {case}: succeeded {} {ranges:?}", answer.succeeded));
    }
    let delete = DeleteRangeRequest { key: b"/f/".to_vec(), range_end: b"/f0".to_vec(), ..Default::default() };
    kv.delete_range(delete).await.expect("delete /f/");
    answers
}

/// Watch requests etcdctl cannot send, over gRPC on one stream each, answered as etcd
/// answers them: an empty key, `range_end` "\\0", a negative and a future start revision,
/// a client-chosen id and its duplicate, a cancel of an unknown id, a request with nothing
/// in it, a progress request, a filter, and the events that follow. Revisions relative to a
/// put made first.
fn odd_watch_requests_answer_as_etcd(ours: &Cluster, etcd: &Cluster) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let (etcds, leasekvs) = runtime
        .block_on(async { tokio::join!(odd_watch_requests(etcd.endpoint(1)), odd_watch_requests(ours.endpoint(1))) });
    assert_eq!(leasekvs, etcds, "odd watch requests: leasekv's answers (left) differ from etcd's (right)");
}

async fn odd_watch_requests(endpoint: String) -> Vec<String> {
    use leasekv::client::proto::etcdserverpb::watch_request::RequestUnion;
    use leasekv::client::proto::etcdserverpb::{
        kv_client::KvClient, watch_client::WatchClient, PutRequest, WatchCancelRequest, WatchCreateRequest,
        WatchProgressRequest, WatchRequest,
    };
    let mut kv = KvClient::connect(format!("http://{endpoint}")).await.expect("connect over gRPC");
    let put = |key: &str, value: &str| PutRequest { key: key.into(), value: value.into(), ..Default::default() };
    let base = kv.put(put("/o/base", "0")).await.expect("put").into_inner().header.expect("header").revision;
    let create = |f: &dyn Fn(&mut WatchCreateRequest)| {
        let mut c = WatchCreateRequest { key: b"/o/a".to_vec(), ..Default::default() };
        f(&mut c);
        WatchRequest { request_union: Some(RequestUnion::CreateRequest(c)) }
    };
    let cases: Vec<(&str, Vec<WatchRequest>)> = vec![
        ("empty key", vec![create(&|c| c.key.clear())]),
        (
            "range_end \\0 from /o/",
            vec![create(&|c| {
                c.key = b"/o/".to_vec();
                c.range_end = vec![0];
            })],
        ),
        ("negative start", vec![create(&|c| c.start_revision = -5)]),
        ("future start", vec![create(&|c| c.start_revision = base + 1000)]),
        ("chosen id and its duplicate", vec![create(&|c| c.watch_id = 7), create(&|c| c.watch_id = 7)]),
        (
            "cancel of an unknown id, then a watch",
            vec![
                WatchRequest { request_union: Some(RequestUnion::CancelRequest(WatchCancelRequest { watch_id: 42 })) },
                create(&|_| {}),
            ],
        ),
        ("nothing in the request, then a watch", vec![WatchRequest { request_union: None }, create(&|_| {})]),
        (
            "progress request with one synced watcher",
            vec![
                create(&|_| {}),
                WatchRequest { request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})) },
            ],
        ),
        ("a stream whose client closed its side after a create (/o/a)", vec![create(&|_| {})]),
        (
            "no-put filter with prev_kv from the base",
            vec![create(&|c| {
                c.key = b"/o/".to_vec();
                c.range_end = b"/o0".to_vec();
                c.start_revision = base;
                c.filters = vec![0];
                c.prev_kv = true;
            })],
        ),
    ];
    let mut out = Vec::new();
    for (name, requests) in cases {
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        for r in requests {
            tx.send(r).await.expect("queue a request");
        }
        // etcd goes on sending events to a client that closed its side of the stream.
        let tx = (!name.starts_with("a stream whose client closed")).then_some(tx);
        let mut watch = WatchClient::connect(format!("http://{endpoint}")).await.expect("connect");
        let mut stream =
            watch.watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("watch stream").into_inner();
        // Give the creates time to land, then write what some of them watch.
        tokio::time::sleep(Duration::from_millis(200)).await;
        kv.put(put("/o/a", "1")).await.expect("put");
        kv.delete_range(leasekv::client::proto::etcdserverpb::DeleteRangeRequest {
            key: b"/o/a".to_vec(),
            ..Default::default()
        })
        .await
        .expect("delete");
        let mut answers = Vec::new();
        let deadline = Instant::now() + Duration::from_millis(800);
        while let Ok(Ok(Some(r))) =
            tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), stream.message()).await
        {
            let rel = |rev: i64| if rev == 0 { "0".to_string() } else { format!("base{:+}", rev - base) };
            let events: Vec<String> = r
                .events
                .iter()
                .map(|e| {
                    let kv = e.kv.clone().unwrap_or_default();
                    let prev = e.prev_kv.as_ref().map(|p| String::from_utf8_lossy(&p.value).into_owned());
                    format!("{}:{}@{}:prev={prev:?}", e.r#type, String::from_utf8_lossy(&kv.key), rel(kv.mod_revision))
                })
                .collect();
            answers.push(format!(
                "id={} created={} canceled={} reason={:?} compact={} events={events:?}",
                r.watch_id, r.created, r.canceled, r.cancel_reason, r.compact_revision
            ));
        }
        drop(tx);
        out.push(format!("{name}: {}", answers.join(" | ")));
    }
    out
}

/// etcd's Lock and Election gRPC services (which etcdctl does not use: its lock and elect run
/// the recipes client-side), called the same way on both, answers and errors compared.
fn lock_and_election_answer_as_etcd(ours: &Cluster, etcd: &Cluster) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let (etcds, leasekvs) = runtime.block_on(async {
        tokio::join!(lock_and_election_calls(etcd.endpoint(1)), lock_and_election_calls(ours.endpoint(1)))
    });
    assert_eq!(leasekvs, etcds, "Lock/Election: leasekv's answers (left) differ from etcd's (right)");
}

async fn lock_and_election_calls(endpoint: String) -> Vec<String> {
    use leasekv::client::proto::etcdserverpb::{lease_client::LeaseClient, LeaseGrantRequest};
    use leasekv::client::proto::v3electionpb::{
        election_client::ElectionClient, CampaignRequest, LeaderKey, LeaderRequest, ProclaimRequest, ResignRequest,
    };
    use leasekv::client::proto::v3lockpb::{lock_client::LockClient, LockRequest, UnlockRequest};
    let url = format!("http://{endpoint}");
    let leases = LeaseClient::connect(url.clone()).await.expect("connect");
    let grant = || {
        let mut leases = leases.clone();
        async move { leases.lease_grant(LeaseGrantRequest { ttl: 60, id: 0 }).await.expect("grant").into_inner().id }
    };
    let (l1, l2) = (grant().await, grant().await);
    let name = |id: i64| {
        if id == l1 {
            "<L1>".to_string()
        } else if id == l2 {
            "<L2>".to_string()
        } else {
            id.to_string()
        }
    };
    let show_key = |key: &[u8]| {
        String::from_utf8_lossy(key).replace(&format!("{l1:x}"), "<L1>").replace(&format!("{l2:x}"), "<L2>")
    };
    let err = |s: tonic::Status| format!("error {:?}: {}", s.code(), s.message());
    let mut out = Vec::new();
    let mut election = ElectionClient::connect(url.clone()).await.expect("connect");
    let mut lock = LockClient::connect(url.clone()).await.expect("connect");
    let leader_of = |mut e: ElectionClient<tonic::transport::Channel>| async move {
        match e.leader(LeaderRequest { name: b"e".to_vec() }).await {
            Ok(r) => format!(
                "leader value {:?}",
                r.into_inner().kv.map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
            ),
            Err(s) => format!("error {:?}: {}", s.code(), s.message()),
        }
    };
    out.push(format!("leader of an empty election: {}", leader_of(election.clone()).await));
    let won = election
        .campaign(CampaignRequest { name: b"e".to_vec(), lease: l1, value: b"v1".to_vec() })
        .await
        .expect("campaign")
        .into_inner()
        .leader
        .expect("a leader key");
    out.push(format!("campaign: key {} lease {}", show_key(&won.key), name(won.lease)));
    out.push(format!("leader: {}", leader_of(election.clone()).await));
    let proclaim =
        |leader: LeaderKey, value: &str| ProclaimRequest { leader: Some(leader), value: value.as_bytes().to_vec() };
    out.push(format!(
        "proclaim v2: {:?}",
        election.proclaim(proclaim(won.clone(), "v2")).await.map(|_| ()).map_err(err)
    ));
    out.push(format!("leader: {}", leader_of(election.clone()).await));
    let stale = LeaderKey { rev: won.rev + 1000, ..won.clone() };
    out.push(format!(
        "proclaim with a stale key: {:?}",
        election.proclaim(proclaim(stale.clone(), "x")).await.map(|_| ()).map_err(err)
    ));
    let missing = ProclaimRequest { leader: None, value: b"x".to_vec() };
    out.push(format!("proclaim without a leader key: {:?}", election.proclaim(missing).await.map(|_| ()).map_err(err)));
    // A second campaigner waits until the first resigns.
    let mut second = election.clone();
    let waiting = tokio::spawn(async move {
        second.campaign(CampaignRequest { name: b"e".to_vec(), lease: l2, value: b"w".to_vec() }).await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    out.push(format!("second campaigner done before the resign: {}", waiting.is_finished()));
    out.push(format!(
        "resign: {:?}",
        election.resign(ResignRequest { leader: Some(won.clone()) }).await.map(|_| ()).map_err(err)
    ));
    let second_won = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    let second_won = second_won.ok().and_then(|j| j.ok()).and_then(|r| r.ok()).and_then(|r| r.into_inner().leader);
    out.push(format!("second campaign: {:?}", second_won.as_ref().map(|l| show_key(&l.key))));
    out.push(format!("leader: {}", leader_of(election.clone()).await));
    out.push(format!(
        "resign with a stale key: {:?}",
        election.resign(ResignRequest { leader: Some(stale) }).await.map(|_| ()).map_err(err)
    ));
    let mut observe = election.observe(LeaderRequest { name: b"e".to_vec() }).await.expect("observe").into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), observe.message()).await;
    let first = first
        .ok()
        .and_then(|r| r.ok())
        .flatten()
        .and_then(|r| r.kv)
        .map(|kv| String::from_utf8_lossy(&kv.value).into_owned());
    out.push(format!("observe: {first:?}"));
    if let Some(l) = second_won {
        out.push(format!("proclaim w2: {:?}", election.proclaim(proclaim(l, "w2")).await.map(|_| ()).map_err(err)));
        let next = tokio::time::timeout(Duration::from_secs(5), observe.message()).await;
        let next = next
            .ok()
            .and_then(|r| r.ok())
            .flatten()
            .and_then(|r| r.kv)
            .map(|kv| String::from_utf8_lossy(&kv.value).into_owned());
        out.push(format!("observe after proclaim: {next:?}"));
    }
    // Locks.
    let held = lock.lock(LockRequest { name: b"l".to_vec(), lease: l1 }).await.expect("lock").into_inner().key;
    out.push(format!("lock: {}", show_key(&held)));
    let mut other = lock.clone();
    let waiting = tokio::spawn(async move { other.lock(LockRequest { name: b"l".to_vec(), lease: l2 }).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    out.push(format!("second locker done before the unlock: {}", waiting.is_finished()));
    out.push(format!("unlock: {:?}", lock.unlock(UnlockRequest { key: held.clone() }).await.map(|_| ()).map_err(err)));
    let got = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    let got = got.ok().and_then(|j| j.ok()).and_then(|r| r.ok()).map(|r| show_key(&r.into_inner().key));
    out.push(format!("second lock: {got:?}"));
    out.push(format!(
        "unlock of a key that is gone: {:?}",
        lock.unlock(UnlockRequest { key: held }).await.map(|_| ()).map_err(err)
    ));
    let unknown = lock.lock(LockRequest { name: b"l2".to_vec(), lease: 0x1234_5678 }).await;
    out.push(format!("lock with an unknown lease: {:?}", unknown.map(|r| show_key(&r.into_inner().key)).map_err(err)));
    out
}

/// Put's ignore_value / ignore_lease and nested transactions (etcdctl 3.4 cannot send
/// either), over gRPC: answers, per-operation headers and errors compared with etcd's.
fn txn_extensions_answer_as_etcd(ours: &Cluster, etcd: &Cluster) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let (etcds, leasekvs) =
        runtime.block_on(async { tokio::join!(txn_extensions(etcd.endpoint(1)), txn_extensions(ours.endpoint(1))) });
    if std::env::var_os("SHOW_ETCDCTL_TRANSCRIPT").is_some() {
        eprintln!("ignore flags and nested txns:\n    {}", leasekvs.join("\n    "));
    }
    assert_eq!(leasekvs, etcds, "ignore flags and nested txns: leasekv's answers (left) differ from etcd's (right)");
}

async fn txn_extensions(endpoint: String) -> Vec<String> {
    use leasekv::client::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
    use leasekv::client::proto::etcdserverpb::request_op::Request;
    use leasekv::client::proto::etcdserverpb::{
        kv_client::KvClient, lease_client::LeaseClient, Compare, LeaseGrantRequest, PutRequest, RangeRequest,
        RequestOp, ResponseHeader, TxnRequest, TxnResponse,
    };
    let url = format!("http://{endpoint}");
    let mut kv = KvClient::connect(url.clone()).await.expect("connect");
    let lease =
        LeaseClient::connect(url).await.expect("connect").lease_grant(LeaseGrantRequest { ttl: 60, id: 0 }).await;
    let lease = lease.expect("grant").into_inner().id;
    let put = |key: &str, value: &str| PutRequest { key: key.into(), value: value.into(), ..Default::default() };
    let base = kv.put(put("/x/a", "1")).await.expect("put").into_inner().header.expect("header").revision;
    // Headers as etcd fills them, with what differs between two clusters taken out.
    fn norm(h: &mut Option<ResponseHeader>, base: i64) {
        if let Some(h) = h {
            h.cluster_id = 0;
            h.member_id = 0;
            h.raft_term = 0;
            if h.revision != 0 {
                h.revision -= base;
            }
        }
    }
    fn norm_txn(t: &mut TxnResponse, base: i64) {
        use leasekv::client::proto::etcdserverpb::response_op::Response;
        norm(&mut t.header, base);
        for op in &mut t.responses {
            match op.response.as_mut() {
                Some(Response::ResponseRange(r)) => {
                    norm(&mut r.header, base);
                    for kv in &mut r.kvs {
                        kv.create_revision -= base;
                        kv.mod_revision -= base;
                    }
                }
                Some(Response::ResponsePut(r)) => norm(&mut r.header, base),
                Some(Response::ResponseDeleteRange(r)) => norm(&mut r.header, base),
                Some(Response::ResponseTxn(r)) => norm_txn(r, base),
                None => {}
            }
        }
    }
    let show = |r: Result<String, tonic::Status>| match r {
        Ok(s) => s,
        Err(e) => format!("error {:?}: {}", e.code(), e.message()),
    };
    let mut out = Vec::new();
    let mut leased = put("/x/l", "v");
    leased.lease = lease;
    kv.put(leased).await.expect("leased put");
    let cases: Vec<(&str, PutRequest)> = vec![
        ("ignore_value keeps the value", PutRequest { ignore_value: true, prev_kv: true, ..put("/x/a", "") }),
        ("ignore_lease keeps the lease", PutRequest { ignore_lease: true, ..put("/x/l", "v2") }),
        ("ignore_value on a missing key", PutRequest { ignore_value: true, ..put("/x/missing", "") }),
        ("ignore_value with a value", PutRequest { ignore_value: true, ..put("/x/a", "v") }),
        ("ignore_lease with a lease", PutRequest { ignore_lease: true, lease, ..put("/x/a", "") }),
    ];
    for (name, request) in cases {
        let answer = kv.put(request).await.map(|r| {
            let mut r = r.into_inner();
            norm(&mut r.header, base);
            format!("{r:?}").replace(&lease.to_string(), "<L>")
        });
        out.push(format!("{name}: {}", show(answer)));
    }
    let get = kv.range(RangeRequest { key: b"/x/".to_vec(), range_end: b"/x0".to_vec(), ..Default::default() }).await;
    let kvs: Vec<String> = get
        .expect("range")
        .into_inner()
        .kvs
        .iter()
        .map(|kv| {
            format!(
                "{}={} lease={}",
                String::from_utf8_lossy(&kv.key),
                String::from_utf8_lossy(&kv.value),
                kv.lease == lease
            )
        })
        .collect();
    out.push(format!("after the puts: {kvs:?}"));
    let op = |r: Request| RequestOp { request: Some(r) };
    let value_is = |key: &str, v: &str| Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Value as i32,
        key: key.into(),
        target_union: Some(TargetUnion::Value(v.into())),
        ..Default::default()
    };
    let absent = |key: &str| Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Version as i32,
        key: key.into(),
        target_union: Some(TargetUnion::Version(0)),
        ..Default::default()
    };
    let range = |key: &str| RangeRequest { key: key.into(), ..Default::default() };
    let txns: Vec<(&str, TxnRequest)> = vec![
        (
            "nested: inner compares see the state before the outer txn",
            TxnRequest {
                compare: vec![value_is("/x/a", "1")],
                success: vec![
                    op(Request::RequestRange(range("/x/a"))),
                    op(Request::RequestPut(put("/x/b", "2"))),
                    op(Request::RequestTxn(TxnRequest {
                        compare: vec![absent("/x/b")],
                        success: vec![
                            op(Request::RequestRange(range("/x/b"))),
                            op(Request::RequestPut(put("/x/c", "3"))),
                        ],
                        failure: vec![op(Request::RequestPut(put("/x/d", "4")))],
                    })),
                    op(Request::RequestRange(range("/x/c"))),
                ],
                failure: vec![],
            },
        ),
        (
            "nested failure branch with ignore_value inside",
            TxnRequest {
                compare: vec![],
                success: vec![op(Request::RequestTxn(TxnRequest {
                    compare: vec![value_is("/x/a", "nope")],
                    success: vec![op(Request::RequestPut(put("/x/e", "5")))],
                    failure: vec![op(Request::RequestPut(PutRequest { ignore_value: true, ..put("/x/c", "") }))],
                }))],
                failure: vec![],
            },
        ),
        (
            "a key put by the outer and a nested txn",
            TxnRequest {
                compare: vec![],
                success: vec![
                    op(Request::RequestPut(put("/x/f", "1"))),
                    op(Request::RequestTxn(TxnRequest {
                        success: vec![op(Request::RequestPut(put("/x/f", "2")))],
                        ..Default::default()
                    })),
                ],
                failure: vec![],
            },
        ),
        (
            "ranges at past revisions next to a put of the same key",
            TxnRequest {
                success: vec![
                    op(Request::RequestPut(put("/x/a", "9"))),
                    op(Request::RequestRange(RangeRequest { revision: base, ..range("/x/a") })),
                    op(Request::RequestRange(RangeRequest { revision: base + 2, ..range("/x/a") })),
                    op(Request::RequestRange(range("/x/a"))),
                ],
                ..Default::default()
            },
        ),
        (
            "a range at a future revision in a txn",
            TxnRequest {
                success: vec![
                    op(Request::RequestPut(put("/x/g", "1"))),
                    op(Request::RequestRange(RangeRequest { revision: base + 10_000, ..range("/x/a") })),
                ],
                ..Default::default()
            },
        ),
        (
            "ignore_value of a missing key in a txn",
            TxnRequest {
                success: vec![op(Request::RequestPut(PutRequest { ignore_value: true, ..put("/x/none", "") }))],
                ..Default::default()
            },
        ),
    ];
    for (name, txn) in txns {
        let answer = kv.txn(txn).await.map(|r| {
            let mut r = r.into_inner();
            norm_txn(&mut r, base);
            format!("{r:?}")
        });
        out.push(format!("{name}: {}", show(answer)));
    }
    out
}

/// Runs `etcdctl watch ARGS` for `listen`, with `during` run meanwhile (writes the watch
/// should see), then kills it (by pid) and returns what it printed. A watch only ends when it
/// is cancelled, so this is how a watch's output is captured.
fn watch_for(bin: &Path, endpoint: &str, args: &[String], listen: Duration, during: impl FnOnce()) -> Run {
    let mut child = Command::new(bin)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg("watch")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("etcdctl watch starts");
    // The watch must be open before the writes it should see.
    std::thread::sleep(Duration::from_millis(700));
    during();
    let started = Instant::now();
    while started.elapsed() < listen {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let output = child.wait_with_output().expect("etcdctl watch output");
    Run {
        code: None,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `etcdctl watch -w json` prints one response per line: each normalised, headers and all.
fn normalise_watch_json(stdout: &str, leases: &Leases) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .flat_map(|line| match serde_json::from_str::<Value>(line) {
            Ok(mut v) => {
                normalise_json(&mut v, leases);
                pretty(&v)
            }
            Err(_) => vec![line.to_string()],
        })
        .collect()
}

/// The MVCC history: after the sequence both stores hold the same revisions, so every
/// revision must read the same (`get --rev`), a watch from revision 1 must replay the same
/// events (with and without `--prev-kv`), live watches must see the same new events (lease
/// revocation: one DELETE per key at one revision), and compaction and reads or watches
/// below it must give etcd's answers and errors.
fn history_answers_as_etcd(
    bin: &Path,
    etcd: &Cluster,
    etcd_leases: &Leases,
    ours: &Cluster,
    our_leases: &Leases,
) -> String {
    let head_of = |c: &Cluster| -> i64 {
        let run = etcdctl(bin, &c.endpoint(1), "5s", &strings(&["get", "/", "-w", "json"]), None);
        let v: Value = serde_json::from_str(run.stdout.trim()).unwrap_or_else(|_| panic!("get -w json: {run:?}"));
        v["header"]["revision"].as_i64().expect("a header revision")
    };
    let head = head_of(etcd);
    assert_eq!(head, head_of(ours), "the two stores should be at the same revision after the sequence");
    let mut steps: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
    let mut both = |label: String, f: &(dyn Fn(&Cluster, &Leases) -> Vec<String> + Sync)| {
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| f(etcd, etcd_leases));
            let b = s.spawn(|| f(ours, our_leases));
            (a.join().expect("etcd side"), b.join().expect("leasekv side"))
        });
        steps.push((label, a, b));
    };
    let client_endpoints = |c: &Cluster| (0..3).map(|i| c.endpoint(i)).collect::<Vec<_>>();
    // Every revision reads as it was (JSON: every field of every key).
    for rev in 1..=head {
        let args = strings(&["get", "", "--from-key", &format!("--rev={rev}"), "-w", "json"]);
        both(format!("etcdctl get '' --from-key --rev={rev} -w json"), &|c, leases| {
            normalise(&etcdctl(bin, &c.endpoint(1), "5s", &args, None), Shape::Json, leases, &client_endpoints(c))
        });
    }
    // The whole history replayed, on a follower and with prev_kv.
    for args in [&["--prefix", "", "--rev=1"][..], &["--prefix", "", "--rev=1", "--prev-kv"], &["/t", "--rev=2"]] {
        let args = strings(args);
        both(format!("etcdctl watch {args:?} (simple)"), &|c, _| {
            let run = watch_for(bin, &c.endpoint(2), &args, Duration::from_millis(1500), || {});
            run.stdout.lines().map(str::to_string).collect()
        });
        let json: Vec<String> = args.iter().cloned().chain(strings(&["-w", "json"])).collect();
        both(format!("etcdctl watch {json:?}"), &|c, leases| {
            normalise_watch_json(
                &watch_for(bin, &c.endpoint(2), &json, Duration::from_millis(1500), || {}).stdout,
                leases,
            )
        });
    }
    // Live events: puts, deletes and a lease revocation taking two keys at one revision.
    both("live watch of /live/ during puts, a delete and a lease revoke".to_string(), &|c, _| {
        let one = c.endpoint(1);
        let writes = || {
            let run = |args: &[&str]| etcdctl(bin, &one, "5s", &strings(args), None);
            let grant = run(&["lease", "grant", "60"]);
            let id = granted_id(&grant).expect("a lease id");
            let id = format!("{id:x}");
            run(&["put", "/live/a", "1"]);
            run(&["put", "/live/b", "2", &format!("--lease={id}")]);
            run(&["put", "/live/c", "3", &format!("--lease={id}")]);
            run(&["put", "/live/a", "4"]);
            run(&["del", "/live/a"]);
            run(&["lease", "revoke", &id]);
        };
        let args = strings(&["--prefix", "/live/", "--prev-kv"]);
        let run = watch_for(bin, &c.endpoint(2), &args, Duration::from_millis(1500), writes);
        run.stdout.lines().map(str::to_string).collect()
    });
    // Compaction: below it, reads and watches are refused; at it, they are served.
    let head = head_of(etcd);
    let at = head - 5;
    let compact_steps: Vec<Vec<String>> = vec![
        strings(&["compaction", &at.to_string()]),
        strings(&["compaction", &at.to_string()]),
        strings(&["compaction", &(head + 100).to_string()]),
        strings(&["get", "", "--from-key", &format!("--rev={}", at - 1)]),
        strings(&["get", "", "--from-key", &format!("--rev={at}"), "-w", "json"]),
        strings(&["get", "", "--from-key", &format!("--rev={}", head + 100)]),
    ];
    for args in compact_steps {
        both(format!("etcdctl {args:?}"), &|c, leases| {
            normalise(&etcdctl(bin, &c.endpoint(1), "5s", &args, None), Shape::Json, leases, &client_endpoints(c))
        });
    }
    for rev in [at - 1, at] {
        let args = strings(&["--prefix", "", &format!("--rev={rev}")]);
        both(format!("etcdctl watch {args:?} around the compaction point"), &|c, _| {
            let run = watch_for(bin, &c.endpoint(2), &args, Duration::from_millis(1500), || {});
            run.stdout.lines().chain(run.stderr.lines()).map(str::to_string).collect()
        });
    }
    let lines: usize = steps.iter().map(|(_, a, _)| a.len()).sum();
    eprintln!("history: {} steps, {lines} lines of etcd's answers compared", steps.len());
    if std::env::var_os("SHOW_ETCDCTL_TRANSCRIPT").is_some() {
        for (label, _, ours) in &steps {
            eprintln!("{label}\n    {}", ours.join("\n    "));
        }
    }
    let mut report = String::new();
    for (n, (label, a, b)) in steps.iter().enumerate() {
        if a != b {
            report.push_str(&format!("\nhistory step {}: {label}\n{}", n + 1, line_diff(a, b)));
        }
    }
    report
}

#[test]
fn etcdctl_gets_the_same_answers_from_leasekv_as_from_etcd() {
    let (Some(etcd_bin), Some(bin)) = (tool("etcd", "etcd-server"), tool("etcdctl", "etcd-client")) else {
        eprintln!(
            "etcd or etcdctl not installed (Debian: etcd-server, etcd-client); skipping (required under CI=true)"
        );
        return;
    };
    let started = Instant::now();
    let ports = common::free_ports(12);
    // Both clusters start at once; each waits for its own leader.
    let ours = Cluster::leasekv(&ports[..6]);
    let etcd = Cluster::etcd(&etcd_bin, &ports[6..]);
    let (ours_ready, etcd_ready) = std::thread::scope(|s| {
        let a = s.spawn(|| wait_ready(&bin, &ours));
        let b = s.spawn(|| wait_ready(&bin, &etcd));
        (a.join().expect("leasekv readiness check"), b.join().expect("etcd readiness check"))
    });
    let ours_ready = ours_ready.unwrap_or_else(|e| panic!("{e}"));
    let etcd_ready = etcd_ready.unwrap_or_else(|e| panic!("{e}"));
    eprintln!("ready: leasekv after {ours_ready:?}, etcd after {etcd_ready:?}");

    let ((expected, etcd_leases), (actual, our_leases)) = std::thread::scope(|s| {
        let a = s.spawn(|| transcript(&bin, &etcd));
        let b = s.spawn(|| transcript(&bin, &ours));
        (a.join().expect("the etcd transcript"), b.join().expect("the leasekv transcript"))
    });
    eprintln!("{} steps on both clusters after {:?}", expected.len(), started.elapsed());
    if std::env::var_os("SHOW_ETCDCTL_TRANSCRIPT").is_some() {
        for (n, (command, lines)) in actual.iter().enumerate() {
            eprintln!("step {}: {command}\n    {}", n + 1, lines.join("\n    "));
        }
    }
    let diff = differences(&expected, &actual);
    assert!(
        diff.is_empty(),
        "etcdctl's answers from leasekv differ from a real etcd's (normalised; '-' lines are etcd's, \
         '+' lines leasekv's):\n{diff}"
    );

    revision_filters_answer_as_etcd(&ours, &etcd);
    odd_watch_requests_answer_as_etcd(&ours, &etcd);
    let history = history_answers_as_etcd(&bin, &etcd, &etcd_leases, &ours, &our_leases);
    assert!(
        history.is_empty(),
        "etcdctl's history answers (get --rev, watch, compaction) from leasekv differ from etcd's ('-' lines \
         are etcd's, '+' lines leasekv's):\n{history}"
    );
    // After the history comparison: these write keys holding lease ids, which differ.
    txn_extensions_answer_as_etcd(&ours, &etcd);
    lock_and_election_answer_as_etcd(&ours, &etcd);
    eprintln!("done after {:?}", started.elapsed());
}
