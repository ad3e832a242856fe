//! Moving a store from etcd to leasekv and back: an etcd snapshot file (`etcdctl snapshot
//! save`) restored with `kvserver restore` / `kvcli snapshot restore` into a new three-node
//! cluster, which then answers etcdctl as the etcd the file came from did, and leasekv's
//! own backup (in etcd's format) restored by `etcdctl snapshot restore` into an etcd that
//! answers as leasekv did: every key with
//! its revisions, version, value and lease, the store revision, reads in the past down to
//! the compaction point, the leases with their TTLs and keys, users, roles, permissions and
//! the auth switch. And a damaged, cut or foreign file refused with the reason, nothing
//! written.
//!
//! The first test needs etcd and etcdctl (Debian's `etcd-server`, `etcd-client`): it skips
//! without them, and fails without them under `CI=true`. The second uses the etcd 3.4.23
//! snapshot committed as a fuzz seed and needs nothing else.

use crate::common;

use common::cluster::{Cluster, KVSERVER};
use common::etcd::Etcd;
use common::process::{run, succeeded};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const KVCLI: &str = env!("CARGO_BIN_EXE_kvcli");
const ROOT: &str = "root:rootpw";

/// etcdctl against one endpoint, every call bounded in time.
struct Etcdctl {
    binary: PathBuf,
    endpoint: String,
    user: Option<&'static str>,
}

impl Etcdctl {
    fn output(&self, args: &[&str]) -> Output {
        let mut command = Command::new(&self.binary);
        command.env("ETCDCTL_API", "3").args(["--endpoints", &self.endpoint, "--dial-timeout=2s"]);
        command.arg("--command-timeout=5s");
        if let Some(user) = self.user {
            command.args(["--user", user]);
        }
        command.args(args).output().expect("etcdctl runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        succeeded(&self.output(args), &format!("etcdctl {}", args.join(" ")))
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut with_format = args.to_vec();
        with_format.extend(["-w", "json"]);
        serde_json::from_str(&self.ok(&with_format)).expect("etcdctl's JSON")
    }

    /// Retries `args` until it succeeds, for at most `limit`.
    fn until_ok(&self, args: &[&str], limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let output = self.output(args);
            if output.status.success() {
                return String::from_utf8_lossy(&output.stdout).into_owned();
            }
            assert!(Instant::now() < deadline, "etcdctl {args:?} kept failing: {output:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Everything compared: what etcd answered, then what leasekv answers.
#[derive(Debug, PartialEq)]
struct Answers {
    /// The store revision and every key (key, create, mod, version, value, lease).
    now: (i64, Value),
    /// Every key at each revision from the compaction point on.
    past: Vec<(i64, Value)>,
    /// Each lease: id, granted TTL, keys (sorted).
    leases: Vec<(i64, i64, Vec<String>)>,
    /// `user list`, `user get` of each, `role list`, `role get` of each (the root role
    /// aside: etcd answers it with a permission of its own), `auth status`.
    auth: Vec<String>,
}

fn keys_of(response: &Value) -> Value {
    // etcd leaves out zero fields (a key without a lease); so does leasekv's gateway, but
    // compare the fields explicitly so that a missing one reads as 0 on both sides.
    let kvs = response["kvs"].as_array().cloned().unwrap_or_default();
    kvs.iter()
        .map(|kv| {
            let field = |name: &str| kv[name].as_i64().unwrap_or(0);
            serde_json::json!([
                kv["key"],
                field("create_revision"),
                field("mod_revision"),
                field("version"),
                kv["value"],
                field("lease")
            ])
        })
        .collect()
}

fn answers(etcdctl: &Etcdctl, compacted: i64) -> Answers {
    let all = etcdctl.json(&["get", "", "--prefix"]);
    let revision = all["header"]["revision"].as_i64().expect("a revision");
    let past = (compacted..revision)
        .map(|at| (at, keys_of(&etcdctl.json(&["get", "", "--prefix", &format!("--rev={at}")]))))
        .collect();
    let below = etcdctl.output(&["get", "", "--prefix", &format!("--rev={}", compacted - 1)]);
    assert!(!below.status.success(), "a read below the compaction point is refused");
    assert!(String::from_utf8_lossy(&below.stderr).contains("compacted"), "{below:?}");
    let mut leases = Vec::new();
    let listed = etcdctl.json(&["lease", "list"]);
    for lease in listed["leases"].as_array().cloned().unwrap_or_default() {
        let id = lease["id"].as_i64().expect("a lease id");
        let ttl = etcdctl.json(&["lease", "timetolive", &format!("{id:x}"), "--keys"]);
        let mut keys: Vec<String> = ttl["keys"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|k| k.as_str().unwrap_or_default().to_string())
            .collect();
        keys.sort();
        leases.push((ttl["id"].as_i64().unwrap_or(0), ttl["granted-ttl"].as_i64().unwrap_or(0), keys));
    }
    leases.sort();
    let mut auth = vec![etcdctl.ok(&["user", "list"])];
    for user in auth[0].clone().lines() {
        auth.push(etcdctl.ok(&["user", "get", user]));
    }
    let roles = etcdctl.ok(&["role", "list"]);
    for role in roles.lines().filter(|r| *r != "root") {
        auth.push(etcdctl.ok(&["role", "get", role]));
    }
    auth.push(roles);
    auth.push(etcdctl.ok(&["auth", "status"]));
    Answers { now: (revision, keys_of(&all)), past, leases, auth }
}

/// Writes into etcd what a migration must carry; returns the compaction point.
fn fill(etcdctl: &Etcdctl) -> i64 {
    for i in 0..20 {
        etcdctl.ok(&["put", &format!("/app/k{i:02}"), &format!("v{i}")]);
    }
    for i in 0..5 {
        etcdctl.ok(&["put", &format!("/app/k{i:02}"), &format!("again{i}")]);
    }
    etcdctl.ok(&["del", "/app/k05"]);
    etcdctl.ok(&["del", "/app/k1", "--prefix"]);
    let grant = |ttl: &str| -> String {
        let said = etcdctl.ok(&["lease", "grant", ttl]);
        said.split_whitespace().nth(1).expect("lease <id> granted").to_string()
    };
    let (kept, empty, moved) = (grant("600"), grant("300"), grant("120"));
    etcdctl.ok(&["put", "/svc/a", "1", &format!("--lease={kept}")]);
    etcdctl.ok(&["put", "/svc/b", "2", &format!("--lease={kept}")]);
    etcdctl.ok(&["put", "/svc/c", "3", &format!("--lease={moved}")]);
    etcdctl.ok(&["put", "/svc/c", "4"]);
    let _ = empty;
    let txn = Command::new(&etcdctl.binary)
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", &etcdctl.endpoint, "--command-timeout=5s", "txn"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().expect("stdin").write_all(b"\nput /txn/1 one\nput /txn/2 two\ndel /app/k06\n\n\n")?;
            child.wait_with_output()
        })
        .expect("etcdctl txn");
    succeeded(&txn, "etcdctl txn");
    let revision = etcdctl.json(&["get", "/app/k00"])["header"]["revision"].as_i64().expect("a revision");
    let compact_at = revision - 4;
    etcdctl.ok(&["compaction", &compact_at.to_string()]);
    etcdctl.ok(&["put", "/after/1", "x"]);
    etcdctl.ok(&["put", "/app/k00", "last"]);
    etcdctl.ok(&["del", "/txn/1"]);
    etcdctl.ok(&["user", "add", ROOT]);
    etcdctl.ok(&["user", "grant-role", "root", "root"]);
    etcdctl.ok(&["role", "add", "reader"]);
    etcdctl.ok(&["role", "grant-permission", "reader", "read", "/app/k00"]);
    etcdctl.ok(&["role", "grant-permission", "reader", "--prefix", "readwrite", "/svc/"]);
    etcdctl.ok(&["role", "add", "writer"]);
    etcdctl.ok(&["role", "grant-permission", "writer", "write", "/a", "/m"]);
    etcdctl.ok(&["user", "add", "alice:alicepw"]);
    etcdctl.ok(&["user", "grant-role", "alice", "reader"]);
    etcdctl.ok(&["user", "grant-role", "alice", "writer"]);
    etcdctl.ok(&["user", "add", "bob", "--no-password"]);
    etcdctl.ok(&["user", "grant-role", "bob", "reader"]);
    etcdctl.ok(&["auth", "enable"]);
    compact_at
}

/// Whether `dir` is missing or empty: what a refused restore must leave.
fn untouched(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut entries| entries.next().is_none())
}

/// A new three-node leasekv cluster from the snapshot `file` (two members restored by
/// `kvserver restore`, one by `kvcli snapshot restore`), started; each restore must report
/// `revision`.
fn leasekv_restored_from(file: &Path, revision: i64) -> Cluster {
    // Its configuration files first: the nodes start once their data dirs are restored.
    let ports = common::free_ports(6);
    let (client_ports, peer_ports) = (ports[..3].to_vec(), ports[3..].to_vec());
    let cluster_dir = tempfile::tempdir().expect("tempdir");
    common::write_configs(cluster_dir.path(), &client_ports, &peer_ports, "paxoslease", "");
    let mut cluster = Cluster { dir: cluster_dir, nodes: vec![None, None, None], client_ports, peer_ports };
    for i in 0..2 {
        let config = cluster.config(i);
        let output = run(KVSERVER, &["restore", file.to_str().unwrap(), "--config", config.to_str().unwrap()]);
        succeeded(&output, "kvserver restore");
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(said.contains(&format!("revision {revision}")), "{said}");
    }
    let data3 = cluster.dir.path().join("data3");
    succeeded(
        &run(KVCLI, &["snapshot", "restore", file.to_str().unwrap(), "--data-dir", data3.to_str().unwrap()]),
        "kvcli snapshot restore",
    );
    for i in 0..3 {
        cluster.start_node(i);
    }
    cluster
}

/// A leasekv cluster restored from `file` ([`leasekv_restored_from`]), once member `i`
/// answers, and etcdctl as root against that member.
fn started_leasekv(file: &Path, revision: i64, etcdctl: &Path, i: usize) -> (Cluster, Etcdctl) {
    let cluster = leasekv_restored_from(file, revision);
    let leasekv = Etcdctl { binary: etcdctl.to_path_buf(), endpoint: cluster.endpoint(i), user: Some(ROOT) };
    leasekv.until_ok(&["get", "/app/k00"], Duration::from_secs(20));
    (cluster, leasekv)
}

/// kvcli as root against `endpoint`: its output, or a panic with what it said.
fn kvcli_as_root(endpoint: &str, args: &[&str]) -> String {
    let mut all = vec!["--endpoints", endpoint, "--user", ROOT];
    all.extend_from_slice(args);
    succeeded(&run(KVCLI, &all), &format!("kvcli {}", args.join(" ")))
}

/// etcd → leasekv → etcd → leasekv through snapshot files, each store answering etcdctl
/// as the one before it did: every key with its revisions, version, value and lease, the
/// store revision, reads in the past down to the compaction point, the leases with their
/// TTLs and keys, users, roles, permissions and the auth switch. leasekv's own lease names
/// survive the trip through etcd.
#[test]
fn a_store_goes_from_etcd_to_leasekv_and_back_with_keys_leases_history_and_users() {
    let Some(binary) = common::tool("etcdctl", "etcd-client") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(etcd) = Etcd::start(dir.path()) else { return };
    let mut etcdctl = Etcdctl { binary, endpoint: etcd.endpoint(), user: None };
    etcdctl.until_ok(&["endpoint", "health"], Duration::from_secs(20));
    let compacted = fill(&etcdctl);
    etcdctl.user = Some(ROOT);
    let from_etcd = answers(&etcdctl, compacted);
    assert_eq!(from_etcd.leases.len(), 3, "{from_etcd:?}");
    assert!(from_etcd.past.len() >= 4, "{from_etcd:?}");
    let file = dir.path().join("etcd.db");
    etcdctl.ok(&["snapshot", "save", file.to_str().unwrap()]);
    drop(etcd);

    // etcd → leasekv.
    let (cluster, leasekv) = started_leasekv(&file, from_etcd.now.0, &etcdctl.binary, 1);
    let from_leasekv = answers(&leasekv, compacted);
    assert_eq!(from_leasekv.now, from_etcd.now, "every key and the store revision");
    assert_eq!(from_leasekv.past, from_etcd.past, "reads in the past");
    assert_eq!(from_leasekv.leases, from_etcd.leases, "leases, TTLs and keys");
    assert_eq!(from_leasekv.auth, from_etcd.auth, "users, roles, permissions and auth");
    // The users' passwords (etcd's bcrypt hashes) work, and permissions hold.
    let alice =
        Etcdctl { binary: leasekv.binary.clone(), endpoint: leasekv.endpoint.clone(), user: Some("alice:alicepw") };
    assert!(alice.ok(&["get", "/app/k00"]).contains("last"));
    let refused = alice.output(&["get", "/app/k01"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("permission denied"), "{refused:?}");
    // The members agree, and the new cluster takes writes after the imported revision.
    let endpoints = (0..3).map(|i| cluster.endpoint(i)).collect::<Vec<_>>().join(",");
    let checked = succeeded(&run(KVCLI, &["--endpoints", &endpoints, "--user", ROOT, "check"]), "kvcli check");
    assert!(checked.contains("all 3 members agree"), "{checked}");
    let all = Etcdctl { binary: leasekv.binary.clone(), endpoint: endpoints, user: Some(ROOT) };
    let hashes = all.ok(&["endpoint", "hashkv"]);
    let hashes: std::collections::BTreeSet<&str> = hashes.lines().filter_map(|line| line.rsplit(", ").next()).collect();
    assert_eq!(hashes.len(), 1, "every member holds the same keys and history: {hashes:?}");
    let put = leasekv.json(&["put", "/after/2", "y"]);
    assert_eq!(put["header"]["revision"].as_i64(), Some(from_etcd.now.0 + 1));
    // A lease with a name, which etcd's format has no field for.
    let kvcli = |args: &[&str]| kvcli_as_root(&leasekv.endpoint, args);
    kvcli(&["put", "/named/1", "x", "--lease", "server1", "--ttl", "600"]);
    let in_leasekv = answers(&leasekv, compacted);

    // leasekv → etcd: leasekv's backup is an etcd snapshot file, which etcdctl reads,
    // checks and restores into an etcd that answers as leasekv did.
    let back = dir.path().join("leasekv.db");
    leasekv.ok(&["snapshot", "save", back.to_str().unwrap()]);
    let status = leasekv.json(&["snapshot", "status", back.to_str().unwrap()]);
    assert_eq!(status["revision"].as_i64(), Some(in_leasekv.now.0), "{status}");
    let own_status = succeeded(&run(KVCLI, &["snapshot", "status", back.to_str().unwrap(), "-w", "json"]), "kvcli");
    let own_status: Value = serde_json::from_str(&own_status).expect("kvcli's JSON");
    for field in ["hash", "revision", "totalKey", "totalSize"] {
        assert_eq!(own_status[field], status[field], "kvcli and etcdctl agree on {field}");
    }
    drop(cluster);
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let etcd = Etcd::start_restored(etcd_dir.path(), &back).expect("etcd is installed");
    let etcd_again = Etcdctl { binary: etcdctl.binary.clone(), endpoint: etcd.endpoint(), user: Some(ROOT) };
    etcd_again.until_ok(&["get", "/app/k00"], Duration::from_secs(20));
    let from_etcd_again = answers(&etcd_again, compacted);
    assert_eq!(from_etcd_again, in_leasekv, "etcd restored from leasekv's backup answers as leasekv did");

    // etcd → leasekv again: the same store, and the lease still has its name.
    let again = dir.path().join("etcd-again.db");
    etcd_again.ok(&["snapshot", "save", again.to_str().unwrap()]);
    drop(etcd);
    let (_cluster, leasekv) = started_leasekv(&again, in_leasekv.now.0, &etcdctl.binary, 0);
    assert_eq!(answers(&leasekv, compacted), in_leasekv, "leasekv restored from etcd's answers as before");
    let kvcli = |args: &[&str]| kvcli_as_root(&leasekv.endpoint, args);
    assert!(kvcli(&["lease", "list"]).contains("server1"), "the lease name came back");
    kvcli(&["put", "/named/2", "y", "--lease", "server1"]);
    let named = leasekv.json(&["get", "/named/", "--prefix"]);
    let leases: Vec<i64> = named["kvs"].as_array().unwrap().iter().map(|kv| kv["lease"].as_i64().unwrap()).collect();
    assert!(leases.len() == 2 && leases[0] == leases[1], "both keys on the named lease: {named}");
}

/// The etcd 3.4.23 snapshot committed as the `etcd_snapshot` fuzz seed.
fn committed_etcd_snapshot() -> Vec<u8> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/etcd_snapshot/etcd-3.4.23-auth-lease-compacted.db");
    std::fs::read(path).expect("the committed etcd snapshot")
}

#[test]
fn a_damaged_cut_or_foreign_etcd_snapshot_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = committed_etcd_snapshot();
    let mut flipped = good.clone();
    flipped[6000] ^= 0x04;
    let mut raw_damaged = good[..good.len() - 32].to_vec();
    let root = u64::from_le_bytes(raw_damaged[32..40].try_into().unwrap()) as usize;
    raw_damaged[root * 4096 + 3] ^= 0x40;
    let mut foreign = vec![0u8; 4096];
    foreign[..16].copy_from_slice(b"SQLite format 3\0");
    let cases: [(&str, Vec<u8>, &str); 5] = [
        ("flipped.db", flipped, "checksum mismatch: the file is damaged"),
        ("cut.db", good[..good.len() - 1000].to_vec(), "truncated"),
        ("page.db", raw_damaged, &format!("page {root}")),
        ("foreign.db", foreign, "not a leasekv snapshot"),
        ("empty.db", Vec::new(), "not a leasekv snapshot"),
    ];
    for (name, bytes, reason) in &cases {
        let file = dir.path().join(name);
        std::fs::write(&file, bytes).expect("file written");
        let data = dir.path().join(format!("data-{name}"));
        let output = run(KVCLI, &["snapshot", "restore", file.to_str().unwrap(), "--data-dir", data.to_str().unwrap()]);
        assert!(!output.status.success(), "{name} restored");
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(said.contains(reason), "{name}: {said:?} should say {reason:?}");
        assert!(untouched(&data), "{name}: the data dir was written");
        let config = dir.path().join("n.toml");
        std::fs::write(&config, format!("id = 1\ndata_dir = \"{}\"\n", data.display())).expect("config");
        let output = run(KVSERVER, &["restore", file.to_str().unwrap(), "--config", config.to_str().unwrap()]);
        assert!(!output.status.success(), "{name} restored by kvserver");
        assert!(String::from_utf8_lossy(&output.stderr).contains(reason), "{name}: {output:?}");
        assert!(untouched(&data), "{name}: the data dir was written by kvserver");
    }
    // The intact file restores, with its revision.
    let file = dir.path().join("good.db");
    std::fs::write(&file, &good).expect("file written");
    let data = dir.path().join("data-good");
    let said = succeeded(
        &run(KVCLI, &["snapshot", "restore", file.to_str().unwrap(), "--data-dir", data.to_str().unwrap()]),
        "kvcli snapshot restore",
    );
    assert!(said.contains("revision 9"), "{said}");
}
