//! `etcdctl make-mirror` moves a live key space between etcd and leasekv, in both
//! directions: the keys already there, then every change as it happens (docs/operations.md,
//! "Move from etcd"). etcdctl's mirror reads the source with paginated ranges at one
//! revision and then watches it from the next; it writes the destination with plain puts
//! and deletes.
//!
//! Needs etcd and etcdctl (Debian: etcd-server, etcd-client); without them the test skips,
//! except under `CI=true`, where it fails.

use crate::common;

use common::cluster::{runtime, Cluster};
use common::etcd::Etcd;
use leasekv::client::{Client, GetOptions};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a mirrored change may take to show at the destination.
const MIRROR_LIMIT: Duration = Duration::from_secs(15);

/// An `etcdctl make-mirror` process, killed (by pid) when dropped.
struct Mirror(Child);

impl Mirror {
    fn start(etcdctl: &Path, from: &str, to: &str) -> Mirror {
        let child = Command::new(etcdctl)
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", from, "make-mirror", "--prefix", "/app/", to])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcdctl make-mirror starts");
        Mirror(child)
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every key under `/app/` with its value.
async fn keys(client: &Client) -> Vec<(String, String)> {
    let found = client.get("/app/", GetOptions { prefix: true, ..Default::default() }).await.expect("a range");
    found
        .kvs
        .iter()
        .map(|kv| (String::from_utf8_lossy(&kv.key).into_owned(), String::from_utf8_lossy(&kv.value).into_owned()))
        .collect()
}

/// Waits until `to` holds exactly what `from` holds under `/app/`.
async fn mirrored(from: &Client, to: &Client, what: &str) {
    let deadline = Instant::now() + MIRROR_LIMIT;
    let expected = keys(from).await;
    loop {
        let now = keys(to).await;
        if now == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not mirrored within {MIRROR_LIMIT:?}\nsource: {expected:?}\ndestination: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes the key space the mirror starts from, then, with the mirror running, changes it.
async fn mirror_one_way(etcdctl: &Path, source: (&Client, &str), destination: (&Client, &str), what: &str) {
    let (from, from_endpoint) = source;
    let (to, to_endpoint) = destination;
    for i in 0..250 {
        from.put(format!("/app/{i:03}"), format!("v{i}"), 0, false).await.expect("a put at the source");
    }
    from.put("/app/000", "overwritten", 0, false).await.expect("an overwrite");
    from.delete("/app/001", false, false).await.expect("a delete");
    let outside_key = format!("/other/{}", what.replace(' ', "-"));
    from.put(outside_key.clone(), "x", 0, false).await.expect("a put outside the prefix");
    let _mirror = Mirror::start(etcdctl, from_endpoint, to_endpoint);
    mirrored(from, to, &format!("{what}: the existing keys")).await;
    from.put("/app/new", "live", 0, false).await.expect("a live put");
    from.put("/app/002", "changed", 0, false).await.expect("a live overwrite");
    from.delete("/app/003", false, false).await.expect("a live delete");
    mirrored(from, to, &format!("{what}: live changes")).await;
    let outside = to.get(outside_key, GetOptions::default()).await.expect("a read");
    assert!(outside.kvs.is_empty(), "{what}: a key outside the prefix was mirrored");
}

#[test]
fn make_mirror_moves_a_live_key_space_both_ways() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (Some(etcd), Some(etcdctl)) = (Etcd::start(dir.path()), common::tool("etcdctl", "etcd-client")) else {
        eprintln!(
            "skipped: etcd or etcdctl is not installed (Debian: etcd-server, etcd-client); required under CI=true"
        );
        return;
    };
    let cluster = Cluster::start("paxoslease");
    runtime().block_on(async {
        let ours = common::cluster::client(&cluster.endpoint(1)).await;
        common::cluster::master_index(&cluster).await;
        let theirs = common::cluster::client(&etcd.endpoint()).await;
        common::cluster::eventually(Duration::from_secs(20), || theirs.status()).await;
        let (ours_at, theirs_at) = (cluster.endpoint(1), etcd.endpoint());
        mirror_one_way(&etcdctl, (&theirs, &theirs_at), (&ours, &ours_at), "etcd to leasekv").await;
        // And back: leasekv's key space (now etcd's, mirrored) into a fresh prefix of etcd.
        theirs.delete("/app/", true, false).await.expect("etcd's prefix emptied");
        let emptied = theirs.get("/app/", GetOptions { prefix: true, ..Default::default() }).await.expect("a read");
        assert!(emptied.kvs.is_empty());
        ours.delete("/app/", true, false).await.expect("leasekv's prefix emptied");
        mirror_one_way(&etcdctl, (&ours, &ours_at), (&theirs, &theirs_at), "leasekv to etcd").await;
    });
}
