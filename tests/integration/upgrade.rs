//! Data directories written by earlier releases open with this build, with every key, lease,
//! revision and retained change there, before and after a restart:
//! - `data-dir-977dc1a.tar.gz`, the release before the state engine and the segment log (the
//!   state machine in memory, rebuilt at every start from a snapshot and the log, both in
//!   one sled database): the log moves to its segment files, the snapshot is installed into
//!   the state engine and the log after it replayed;
//! - `data-dir-9d37095.tar.gz`, the release before history pages (the state engine with one
//!   record per change of the history): its changes are read as they are, and compacted
//!   change by change; new changes are written in pages;
//! - `data-dir-d869768.tar.gz`, the release before values were stored once (every key's
//!   record holding its value, the history its changes): the key records are read as they
//!   are, and the keys written after take the new record that names the change holding the
//!   value.
//!
//! The fixtures were written by their release's kvserver and `kvcli` (the last one with
//! `tests/fixtures/make-data-dir.sh`; single node,
//! `[log] snapshot_every = 40`, `retain_after_snapshot = 10`):
//! a lease `server1` (TTL 3600 s) holding `/servers/lease1`; `/servers/1` … `/servers/60`;
//! `/big` (133,336 bytes, over the engine's piece size); `/servers/1` written three more
//! times; `/servers/2` deleted; compacted at revision 30; `/after-compact`. Store revision
//! 68, with a snapshot taken and slots logged after it.

use crate::common;

use common::cluster::{client, eventually, runtime, KVSERVER};
use leasekv::client::{GetOptions, WatchOptions, WatchUpdate};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BEFORE_ENGINE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/data-dir-977dc1a.tar.gz");
const BEFORE_PAGES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/data-dir-9d37095.tar.gz");
const BEFORE_VALUES_ONCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/data-dir-d869768.tar.gz");
/// Written by 6ef263f, the release before the history's pages moved to value files: its
/// pages are inline in sled, `/big`'s (133 KB) among them.
const BEFORE_VALUE_FILES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/data-dir-6ef263f.tar.gz");

struct Node(Child);

impl Node {
    /// Stops the node as an operator does (SIGTERM), waiting up to 20 s for it to exit. The
    /// engine write of an answered command waits up to 5 ms after the answer
    /// (`ENGINE_WRITE_DELAY`): a kill right after a write can come first (seen in CI, a
    /// debug build under load), while a clean stop takes 150 ms and more.
    fn stop(mut self) {
        let term = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        assert!(term.is_ok_and(|s| s.success()), "kill -TERM failed");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the node did not stop within 20 s of SIGTERM");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(config: &std::path::Path, log: &std::path::Path) -> Node {
    let log = std::fs::File::create(log).expect("log file");
    let child = Command::new(KVSERVER)
        .arg("--config")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("kvserver starts");
    Node(child)
}

/// Everything the fixture holds, read through `endpoint`.
async fn check_state(endpoint: &str) {
    let c = client(endpoint).await;
    let all = GetOptions { prefix: true, ..Default::default() };
    let everything = eventually(Duration::from_secs(10), || async { c.get("/", all).await }).await;
    assert_eq!(everything.kvs.len(), 62, "every key is there");
    assert_eq!(everything.header.map(|h| h.revision), Some(68));
    let one = c.get("/servers/1", GetOptions::default()).await.expect("get").kvs;
    assert_eq!((one[0].value.as_slice(), one[0].mod_revision, one[0].version), (&b"v3"[..], 66, 4));
    assert!(c.get("/servers/2", GetOptions::default()).await.expect("get").kvs.is_empty());
    let big = c.get("/big", GetOptions::default()).await.expect("get").kvs;
    assert_eq!(big[0].value.len(), 133_336);
    // The lease and its key.
    let lease = c.resolve_name("server1").await.expect("the lease's name resolves");
    let ttl = c.lease_time_to_live(lease, true).await.expect("TimeToLive");
    assert_eq!(ttl.keys, vec![b"/servers/lease1".to_vec()]);
    assert_eq!(ttl.granted_ttl, 3600);
    // The history from the compaction point on, and nothing before it.
    let past = GetOptions { revision: 40, ..Default::default() };
    let then = c.get("/servers/1", past).await.expect("a read at revision 40").kvs;
    assert_eq!(then[0].value, b"{\"addr\":\"10.0.0.1:80\"}");
    let compacted = GetOptions { revision: 20, ..Default::default() };
    let refused = c.get("/servers/1", compacted).await.expect_err("below the compaction point");
    assert!(refused.to_string().contains("required revision has been compacted"), "{refused}");
    let from_64 = WatchOptions { start_revision: 64, ..Default::default() };
    assert_eq!(watched_revisions(&c, "/servers/1", from_64, 3).await, vec![64, 65, 66]);
}

/// The mod revisions of the first `count` events a watch of `key` with `options` delivers.
async fn watched_revisions(c: &leasekv::client::Client, key: &str, options: WatchOptions, count: usize) -> Vec<i64> {
    let from = options.start_revision;
    let mut watch = c.watch(key, options).await.expect("a watch");
    let mut revisions = Vec::new();
    while revisions.len() < count {
        let update = tokio::time::timeout(Duration::from_secs(10), watch.next()).await;
        match update.unwrap_or_else(|_| panic!("the history since {from} in time")).expect("a watch update") {
            WatchUpdate::Response(response) => {
                revisions.extend(response.events.iter().filter_map(|e| e.kv.as_ref().map(|kv| kv.mod_revision)))
            }
            WatchUpdate::Resumed { cause, .. } => panic!("the watch broke: {cause}"),
        }
    }
    revisions
}

#[test]
fn a_data_dir_of_the_release_before_the_state_engine_opens_with_everything_in_it() {
    opens_with_everything_in_it(BEFORE_ENGINE);
}

#[test]
fn a_data_dir_of_the_release_before_history_pages_opens_with_everything_in_it() {
    opens_with_everything_in_it(BEFORE_PAGES);
}

#[test]
fn a_data_dir_of_the_release_before_values_were_stored_once_opens_with_everything_in_it() {
    opens_with_everything_in_it(BEFORE_VALUES_ONCE);
}

#[test]
fn a_data_dir_of_the_release_before_value_files_opens_with_everything_in_it() {
    opens_with_everything_in_it(BEFORE_VALUE_FILES);
}

/// Starts a node on the data dir of `fixture`, checks it, writes, restarts and checks again.
fn opens_with_everything_in_it(fixture: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let untar = Command::new("tar").arg("xzf").arg(fixture).arg("-C").arg(dir.path()).status();
    assert!(untar.is_ok_and(|s| s.success()), "tar could not unpack {fixture}");
    let ports = common::free_ports(2);
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        format!(
            "id = 1\nclient_addr = \"127.0.0.1:{}\"\npeer_addr = \"127.0.0.1:{}\"\ndata_dir = \"{}\"\n",
            ports[0],
            ports[1],
            dir.path().join("data").display()
        ),
    )
    .expect("config written");
    let endpoint = format!("127.0.0.1:{}", ports[0]);
    let rt = runtime();
    {
        let node = start(&config, &dir.path().join("log1"));
        rt.block_on(check_state(&endpoint));
        // A write after the upgrade, then a clean stop.
        rt.block_on(async {
            let c = client(&endpoint).await;
            c.put("/upgraded", "yes", 0, false).await.expect("a write after the upgrade");
        });
        node.stop();
    }
    let data = dir.path().join("data");
    assert!(data.join("log").is_dir(), "the log moved to its segment files");
    assert!(data.join("state").is_dir(), "the state is in the state engine");
    // The history's pages went to value files: written there, or moved there by the write.
    let value_files = std::fs::read_dir(data.join("state").join("values")).map_or(0, |d| d.count());
    assert!(value_files > 0, "no value file in state/values after a write");
    // Second start: from the state engine this time, with the log after it.
    let _node = start(&config, &dir.path().join("log2"));
    rt.block_on(async {
        let c = client(&endpoint).await;
        let all = GetOptions { prefix: true, keys_only: true, ..Default::default() };
        let everything = eventually(Duration::from_secs(10), || async { c.get("/", all).await }).await;
        assert_eq!(everything.kvs.len(), 63);
    });
    rt.block_on(check_state_after_restart(&endpoint));
}

/// What [`check_state`] checks, less the key count (one more key was written).
async fn check_state_after_restart(endpoint: &str) {
    let c = client(endpoint).await;
    let one = c.get("/servers/1", GetOptions::default()).await.expect("get").kvs;
    assert_eq!((one[0].value.as_slice(), one[0].mod_revision), (&b"v3"[..], 66));
    let past = GetOptions { revision: 40, ..Default::default() };
    let then = c.get("/servers/1", past).await.expect("a read at revision 40").kvs;
    assert_eq!(then[0].value, b"{\"addr\":\"10.0.0.1:80\"}");
    let lease = c.resolve_name("server1").await.expect("the lease's name resolves");
    assert_eq!(c.lease_time_to_live(lease, true).await.expect("TimeToLive").keys, vec![b"/servers/lease1".to_vec()]);
    // A compaction through the history the old release wrote, and past the write of this one.
    c.compact(65, true).await.expect("a compaction at 65");
    let refused = c.get("/servers/1", GetOptions { revision: 64, ..Default::default() }).await;
    assert!(refused.expect_err("compacted").to_string().contains("required revision has been compacted"));
    let at65 = c.get("/servers/1", GetOptions { revision: 65, ..Default::default() }).await.expect("a read at 65").kvs;
    assert_eq!(at65[0].value, b"v2");
    let everything_from_65 =
        WatchOptions { range_end: leasekv::client::prefix_range_end(b"/"), start_revision: 65, ..Default::default() };
    assert_eq!(
        watched_revisions(&c, "/", everything_from_65, 5).await,
        vec![65, 66, 67, 68, 69],
        "the old release's changes, then this build's"
    );
}
