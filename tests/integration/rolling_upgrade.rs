//! A rolling upgrade of a loaded three-node cluster from the previous release to this one,
//! one node at a time (kill -9, switch the version, restart), while clients put and a watch
//! follows the puts. It proves that:
//! - every acknowledged write is in the store afterwards, with its value and revision, and no
//!   write appears that nobody made;
//! - the watch, although the node it runs on goes down (and later the next one), resumes
//!   elsewhere and delivers every revision from its start to the last acknowledged write
//!   exactly once, in order, without a gap;
//! - no stretch without an acknowledged write lasts longer than one failover;
//! - the cluster protocol version (`leasekv_cluster_protocol_version` on each member's
//!   `/metrics`) stays 3 while any member still speaks only 3, and becomes this release's (6)
//!   on every member, with "cluster protocol version changed" in its log, once the last one
//!   is upgraded;
//! - read leases, which version 4 brought, are held by no member while one still speaks 3
//!   (`leasekv_read_lease_held`), and by the followers once every member speaks 4 or later.
//!   (The emulated previous release stays at 3, two versions back, so that the read leases'
//!   arrival is still tried.)
//!
//! How "the previous release" is emulated: the nodes run this build with the top-level config
//! key `peer_protocol_version = 3`, with which a node sends and accepts only version 3
//! messages, as a node of the previous release does. Upgrading a node is restarting it
//! without that line (this release's default, version 6) on the same data dir; the data-dir
//! format did not change in this release, so the same files serve both (`tests/integration/upgrade.rs`
//! opens data dirs of older releases).
//!
//! With `LEASEKV_PREVIOUS_KVSERVER=/path/to/kvserver` (a build of the previous release, e.g.
//! `cargo build --bin kvserver` in a worktree of the commit before; not a test or
//! fault-injection build, whose `negative-controls` feature numbered one membership change
//! differently before this release), the nodes start on that binary instead, with no
//! such line, and an upgrade restarts a node on this build's binary: the same test against
//! the real previous release.

use crate::common;

use common::cluster::{eventually, runtime, Cluster};
use leasekv::client::{prefix_range_end, Client, GetOptions, RetryPolicy, Watch, WatchOptions, WatchUpdate};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The line that holds a node at the previous release's peer protocol. It must come before
/// any `[section]` of the file: it is a top-level key.
const PREVIOUS_RELEASE: &str = "peer_protocol_version = 3\n";

/// The peer protocol version of the previous release, and of this one.
const PREVIOUS_VERSION: i64 = 3;
const THIS_VERSION: i64 = 6;

/// The gauge that says whether a member holds a read lease.
const READ_LEASE_METRIC: &str = "leasekv_read_lease_held";

/// The gauge each member publishes on `/metrics`.
const CLUSTER_VERSION_METRIC: &str = "leasekv_cluster_protocol_version";

/// Concurrent writers of the load: several, so that one writer stuck on a node that has just
/// gone down (until its request fails) does not by itself look like an outage.
const WRITERS: usize = 3;

/// The longest allowed stretch without an acknowledged write: one failover. The master is
/// killed once, last; that costs the rest of its 800 ms lease, which the acceptors still
/// honour, plus the election and the new master's takeover of the log: 0.7 to 1.0 s in
/// twelve runs on this machine. 2.5 s leaves room for a loaded CI machine, and is below
/// what a forward lost with the killed master costs when it waits out its 3 s timeout
/// (which is what happened when the restarted master was elected again, until followers
/// learned to recognise its new log ballot: `Forwards::master_changed`).
const MAX_UNAVAILABILITY: Duration = Duration::from_millis(2500);

/// How long one load put may take before it is given up (and counted as "maybe"): below
/// [`MAX_UNAVAILABILITY`], so that a request hung on a dead node is not mistaken for an
/// outage of the cluster; above a failover, so that a put held by a follower until the next
/// master is elected normally succeeds.
const PUT_TIMEOUT: Duration = Duration::from_secs(2);

/// A put the cluster acknowledged.
#[derive(Debug, Clone)]
struct Ack {
    key: String,
    value: String,
    revision: i64,
    at: Instant,
}

/// What the load did: acknowledged puts, and puts whose outcome is unknown (an error of any
/// kind: the put may or may not have been applied, so it is never counted as acknowledged).
#[derive(Debug, Default)]
struct LoadLog {
    acks: Vec<Ack>,
    maybe: Vec<(String, String)>,
}

/// What the watch delivered.
#[derive(Debug, Default)]
struct Watched {
    /// (mod revision, key, value) of every event, in delivery order.
    events: Vec<(i64, String, String)>,
    /// (endpoint it resumed on, revision it resumed from, why the stream ended).
    resumed: Vec<(String, i64, String)>,
    /// Why the watch stopped for good, if it did.
    ended: Option<String>,
}

/// A sample of one member's cluster version: when the scrape had completed, the member,
/// what it said.
type Sample = (Instant, usize, Result<i64, String>);

/// Locks, carrying on past a poisoned lock (a panicking task already failed the test).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The binary of the previous release, when one is given (see the module docs).
fn previous_binary() -> Option<std::path::PathBuf> {
    std::env::var_os("LEASEKV_PREVIOUS_KVSERVER").map(std::path::PathBuf::from)
}

/// Writes the three configs of a cluster of the previous release (every file beginning
/// with [`PREVIOUS_RELEASE`], unless the previous release's own binary runs) without
/// starting any node.
fn configure_previous_release() -> Cluster {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = common::free_ports(6);
    let (client_ports, peer_ports) = (ports[..3].to_vec(), ports[3..].to_vec());
    for path in common::write_configs(dir.path(), &client_ports, &peer_ports, "paxoslease", "") {
        if previous_binary().is_none() {
            let config = std::fs::read_to_string(&path).expect("config read");
            std::fs::write(&path, format!("{PREVIOUS_RELEASE}{config}")).expect("config written");
        }
    }
    Cluster { dir, nodes: vec![None, None, None], client_ports, peer_ports }
}

/// Starts node `i` of the previous release: on its own binary when one is given.
fn start_previous(cluster: &mut Cluster, i: usize) {
    let Some(binary) = previous_binary() else { return cluster.start_node(i) };
    let log = std::fs::File::create(cluster.dir.path().join(format!("log{}", i + 1))).expect("log file");
    let child = std::process::Command::new(&binary)
        .arg("--config")
        .arg(cluster.config(i))
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{} starts: {e}", binary.display()));
    cluster.nodes[i] = Some(child);
}

/// Upgrades node `i`'s config to this release: its default peer protocol version.
fn upgrade_config(cluster: &Cluster, i: usize) {
    if previous_binary().is_some() {
        return;
    }
    let path = cluster.config(i);
    let config = std::fs::read_to_string(&path).expect("config read");
    let upgraded =
        config.strip_prefix(PREVIOUS_RELEASE).unwrap_or_else(|| panic!("n{} is not held at {PREVIOUS_VERSION}", i + 1));
    std::fs::write(&path, upgraded).expect("config written");
}

/// The last `lines` lines of every node's log, for failure messages.
fn log_tails(cluster: &Cluster, lines: usize) -> String {
    (0..3)
        .map(|i| {
            let log = cluster.log(i);
            let all: Vec<&str> = log.lines().collect();
            let tail = all[all.len().saturating_sub(lines)..].join("\n");
            format!("--- log of n{} (last {lines} lines) ---\n{tail}\n", i + 1)
        })
        .collect()
}

/// A member's `leasekv_cluster_protocol_version`, scraped from its `/metrics` (plain HTTP on
/// the client port, as Prometheus reads it).
fn scrape_cluster_version(endpoint: &str) -> Result<i64, String> {
    scrape_metric(endpoint, CLUSTER_VERSION_METRIC)
}

/// A gauge `name` (without labels) from a member's `/metrics`.
fn scrape_metric(endpoint: &str, name: &str) -> Result<i64, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(2))).build().into();
    let mut response =
        agent.get(&format!("http://{endpoint}/metrics")).call().map_err(|e| format!("{endpoint}: {e}"))?;
    let page = response.body_mut().read_to_string().map_err(|e| format!("{endpoint}: {e}"))?;
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
        .map(|v| v as i64)
        .ok_or_else(|| format!("{name} is not on {endpoint}'s metrics page"))
}

/// Which members hold a read lease now (`leasekv_read_lease_held`), off the runtime's
/// worker threads.
async fn read_lease_holders(endpoints: &[String]) -> Vec<bool> {
    let endpoints = endpoints.to_vec();
    tokio::task::spawn_blocking(move || {
        endpoints.iter().map(|e| scrape_metric(e, READ_LEASE_METRIC).is_ok_and(|held| held == 1)).collect()
    })
    .await
    .expect("the scrape")
}

/// [`scrape_cluster_version`] off the runtime's worker threads (ureq blocks).
async fn cluster_version(endpoint: String) -> Result<i64, String> {
    tokio::task::spawn_blocking(move || scrape_cluster_version(&endpoint)).await.map_err(|e| e.to_string())?
}

/// Every member's cluster version, once each publishes one (the gauge reads 0 until a node
/// has taken its membership in) that is at least the previous release's (a member it has
/// not reached yet counts as the oldest version it speaks).
async fn cluster_versions(cluster: &Cluster) -> Vec<i64> {
    let mut versions = Vec::new();
    for i in 0..3 {
        let endpoint = cluster.endpoint(i);
        versions.push(
            eventually(Duration::from_secs(10), || async {
                match cluster_version(endpoint.clone()).await? {
                    0 => Err(format!("n{} has not published its cluster version yet", i + 1)),
                    // A member not reached yet counts as the oldest version a node speaks.
                    v if v < PREVIOUS_VERSION => Err(format!("n{} has not reached every member yet: {v}", i + 1)),
                    v => Ok(v),
                }
            })
            .await,
        );
    }
    versions
}

/// Samples every member's cluster version every 200 ms until `stop`: the proof that no
/// member claims 3 while another still speaks only 2 covers the whole run, not a few
/// instants.
async fn sample_versions(endpoints: Vec<String>, samples: Arc<Mutex<Vec<Sample>>>, stop: Arc<AtomicBool>) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        for (i, endpoint) in endpoints.iter().enumerate() {
            let version = cluster_version(endpoint.clone()).await;
            lock(&samples).push((Instant::now(), i, version));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One writer of the load: puts `/load/<n>` (n from the shared counter, so every key is
/// written at most once) through node after node in turn. A put that fails is recorded as
/// "maybe" and the writer moves on to the next node after a short pause; it does not retry
/// the same key, so that no key is ever written twice and every key's revision is that of
/// the one put that wrote it.
async fn write_load(
    writer: usize,
    clients: Arc<Vec<Client>>,
    next: Arc<AtomicU64>,
    log: Arc<Mutex<LoadLog>>,
    stop: Arc<AtomicBool>,
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut node = writer % clients.len();
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let n = next.fetch_add(1, Ordering::Relaxed);
        let key = format!("/load/{n:06}");
        let value = format!("w{writer}-{n}");
        match clients[node].put(key.as_str(), value.as_str(), 0, false).await {
            Ok(response) => {
                let revision = response.header.map_or(0, |h| h.revision);
                lock(&log).acks.push(Ack { key, value, revision, at: Instant::now() });
            }
            Err(error) => {
                lock(&log).maybe.push((key, format!("through n{}: {error}", node + 1)));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        node = (node + 1) % clients.len();
    }
}

/// Collects what the watch delivers until the task is aborted.
async fn follow(mut watch: Watch, watched: Arc<Mutex<Watched>>) {
    loop {
        match watch.next().await {
            Ok(WatchUpdate::Response(response)) => {
                let mut watched = lock(&watched);
                for event in response.events {
                    let kv = event.kv.unwrap_or_default();
                    watched.events.push((
                        kv.mod_revision,
                        String::from_utf8_lossy(&kv.key).into_owned(),
                        String::from_utf8_lossy(&kv.value).into_owned(),
                    ));
                }
            }
            Ok(WatchUpdate::Resumed { endpoint, from_revision, cause }) => {
                lock(&watched).resumed.push((endpoint, from_revision, cause));
            }
            Err(error) => {
                lock(&watched).ended = Some(error.to_string());
                return;
            }
        }
    }
}

/// The index of the master, asked through the nodes in `up`.
async fn master_among(cluster: &Cluster, up: &[usize]) -> usize {
    let endpoints: Vec<String> = up.iter().map(|&i| cluster.endpoint(i)).collect();
    let c = eventually(Duration::from_secs(10), || Client::connect(&endpoints)).await;
    let leader = eventually(Duration::from_secs(10), || async {
        match c.status().await.map_err(|e| e.to_string())?.leader {
            0 => Err("no master yet".to_string()),
            leader => Ok(leader),
        }
    })
    .await;
    leader as usize - 1
}

/// Waits until node `i` serves again: its own (serializable) reads reach `revision`, a
/// revision the cluster acknowledged while it was down, so it has caught up.
async fn serves_again(cluster: &Cluster, i: usize, revision: i64) {
    let endpoints = vec![cluster.endpoint(i)];
    let c = eventually(Duration::from_secs(10), || Client::connect(&endpoints)).await;
    let options = GetOptions { serializable: true, prefix: true, count_only: true, ..Default::default() };
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(15),
        // The timeout above ends the wait, with the logs; this limit only keeps `eventually`
        // from giving up first.
        eventually(Duration::from_secs(60), || async {
            let header = c.get("/load/", options).await.map_err(|e| e.to_string())?.header.ok_or("no header")?;
            if header.revision >= revision {
                Ok(())
            } else {
                Err(format!("at revision {} of {revision}", header.revision))
            }
        }),
    )
    .await;
    if outcome.is_err() {
        panic!(
            "n{} did not serve up to revision {revision} within {:?} of its restart\n{}",
            i + 1,
            started.elapsed(),
            log_tails(cluster, 40)
        );
    }
}

/// Waits (bounded) until node `i`'s log says it agreed a peer protocol version with each
/// of the two other members: the cluster version it then publishes is the outcome of
/// agreements, not merely "not reached yet, so the oldest".
async fn agreed_with_both_peers(cluster: &Cluster, i: usize) {
    let peers: Vec<String> = (0..3).filter(|&p| p != i).map(|p| format!("peer=n{}", p + 1)).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = cluster.log(i);
        let agreed = |peer: &String| {
            log.lines().any(|l| l.contains("peer protocol version agreed") && l.contains(peer.as_str()))
        };
        if peers.iter().all(agreed) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "n{} did not log \"peer protocol version agreed\" for both {peers:?} within 10 s of serving\n{}",
            i + 1,
            log_tails(cluster, 40)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (bounded) until `more` puts beyond those acknowledged so far are acknowledged.
async fn more_acks(log: &Mutex<LoadLog>, more: usize, what: &str) {
    let target = lock(log).acks.len() + more;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (acked, maybe) = {
            let log = lock(log);
            (log.acks.len(), log.maybe.len())
        };
        if acked >= target {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: expected {more} more acknowledged puts within 10 s, got {} \
             ({maybe} puts of unknown outcome so far; last: {:?})",
            more - (target - acked),
            lock(log).maybe.last()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The longest stretch without an acknowledged put between `from` and `to`, and when (after
/// `from`) it ended.
fn longest_gap(acks: &[Ack], from: Instant, to: Instant) -> (Duration, Duration) {
    let mut times: Vec<Instant> = acks.iter().map(|a| a.at).collect();
    times.sort();
    let mut longest = (Duration::ZERO, Duration::ZERO);
    let mut previous = from;
    for at in times.into_iter().chain([to]) {
        let gap = at.saturating_duration_since(previous);
        if gap > longest.0 {
            longest = (gap, at.saturating_duration_since(from));
        }
        previous = previous.max(at);
    }
    longest
}

#[test]
fn a_loaded_cluster_upgraded_one_node_at_a_time_loses_nothing_and_moves_to_the_new_version() {
    let test_started = Instant::now();
    let mut cluster = configure_previous_release();
    for i in 0..3 {
        start_previous(&mut cluster, i);
    }
    let rt = runtime();
    rt.block_on(async {
        let all: Vec<String> = (0..3).map(|i| cluster.endpoint(i)).collect();
        // The previous release, everywhere: its version on every member, and no read lease.
        let versions = cluster_versions(&cluster).await;
        assert_eq!(versions, vec![PREVIOUS_VERSION; 3], "cluster versions before the upgrade\n{}", log_tails(&cluster, 20));
        assert_eq!(read_lease_holders(&all).await, vec![false; 3], "read leases before the upgrade");
        let initial_master = master_among(&cluster, &[0, 1, 2]).await;

        // The revision the watch starts after: the load is the only writer from here on, so
        // every later revision is one of its puts.
        let reader = eventually(Duration::from_secs(10), || Client::connect(&all)).await;
        let count = GetOptions { prefix: true, count_only: true, ..Default::default() };
        let before = eventually(Duration::from_secs(10), || reader.get("/load/", count)).await;
        let start_revision = before.header.map_or(0, |h| h.revision) + 1;

        // The watch runs on n1 first (n2, n3 after it): n1 is upgraded, so the watch must
        // resume on another node at least once.
        let watch_client = eventually(Duration::from_secs(10), || Client::connect(&all)).await;
        let options = WatchOptions { range_end: prefix_range_end(b"/load/"), start_revision, ..Default::default() };
        let watch = watch_client.watch("/load/", options).await.expect("the watch opens on n1");
        assert_eq!(watch.endpoint(), Some(format!("http://{}", all[0]).as_str()), "the watch runs on n1");
        let watched = Arc::new(Mutex::new(Watched::default()));
        let watcher = tokio::spawn(follow(watch, watched.clone()));

        // The load: one client per node, each trying once per put (the client's own retry
        // would write a key twice after an unknown outcome).
        let policy = RetryPolicy {
            attempts: 1,
            connect_timeout: Duration::from_millis(500),
            request_timeout: PUT_TIMEOUT,
            ..RetryPolicy::default()
        };
        let mut clients = Vec::new();
        for endpoint in &all {
            let endpoints = vec![endpoint.clone()];
            clients.push(eventually(Duration::from_secs(10), || Client::connect_with(&endpoints, policy)).await);
        }
        let clients = Arc::new(clients);
        let load_log = Arc::new(Mutex::new(LoadLog::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicU64::new(0));
        let load_started = Instant::now();
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| tokio::spawn(write_load(w, clients.clone(), next.clone(), load_log.clone(), stop.clone())))
            .collect();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sampler = tokio::spawn(sample_versions(all.clone(), samples.clone(), stop.clone()));
        more_acks(&load_log, 100, "the load on the previous release").await;

        // Followers first, the master last: a follower's restart leaves the master its
        // quorum (no unavailability at all), and upgrading the master last makes the run
        // cost exactly one failover, to an already upgraded node. The master is asked again
        // before each step, in case it moved.
        let mut timeline = vec![(load_started.elapsed(), format!("load started; n{} is master", initial_master + 1))];
        let mut pending = vec![0, 1, 2];
        let mut last_started = Instant::now();
        while !pending.is_empty() {
            let up: Vec<usize> = (0..3).collect();
            let master = master_among(&cluster, &up).await;
            let i = pending.iter().copied().find(|&i| i != master).unwrap_or(master);
            pending.retain(|&p| p != i);
            let role = if i == master { "master" } else { "follower" };
            cluster.kill(i);
            timeline.push((load_started.elapsed(), format!("killed n{} ({role})", i + 1)));
            // The time it takes to swap the binary: the node is really gone for a moment.
            tokio::time::sleep(Duration::from_millis(200)).await;
            upgrade_config(&cluster, i);
            let acked_while_down = lock(&load_log).acks.iter().map(|a| a.revision).max().unwrap_or(0);
            last_started = Instant::now();
            cluster.start_node(i);
            timeline.push((load_started.elapsed(), format!("restarted n{} at version {THIS_VERSION}", i + 1)));
            serves_again(&cluster, i, acked_while_down).await;
            timeline.push((load_started.elapsed(), format!("n{} serves again", i + 1)));
            agreed_with_both_peers(&cluster, i).await;
            timeline.push((load_started.elapsed(), format!("n{} agreed versions with both peers", i + 1)));
            more_acks(&load_log, 100, &format!("after the upgrade of n{}", i + 1)).await;
            if !pending.is_empty() {
                // A member of the previous release is still there: everyone must stay at its
                // version, and nobody may hold a read lease (that member would not hold its
                // writes back for holders).
                let versions = cluster_versions(&cluster).await;
                assert_eq!(
                    versions,
                    vec![PREVIOUS_VERSION; 3],
                    "cluster versions with n{} upgraded and {:?} still at {PREVIOUS_VERSION}\n{}",
                    i + 1,
                    pending.iter().map(|p| p + 1).collect::<Vec<_>>(),
                    log_tails(&cluster, 20)
                );
                assert_eq!(read_lease_holders(&all).await, vec![false; 3], "read leases with n{} upgraded", i + 1);
            }
        }

        // Every member upgraded: every one moves to the new version, and says so in its log.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let versions: Vec<Result<i64, String>> = {
                let mut v = Vec::new();
                for endpoint in &all {
                    v.push(cluster_version(endpoint.clone()).await);
                }
                v
            };
            if versions.iter().all(|v| v == &Ok(THIS_VERSION)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "every member upgraded, yet the cluster versions are not all {THIS_VERSION} after 15 s: {versions:?}\n{}",
                log_tails(&cluster, 40)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        timeline.push((load_started.elapsed(), format!("every member at cluster version {THIS_VERSION}")));
        for i in 0..3 {
            let log = cluster.log(i);
            assert!(
                log.lines().any(|l| l.contains("cluster protocol version changed")
                    && l.contains(&format!("version={THIS_VERSION}"))),
                "n{}'s log does not say the cluster protocol version changed to {THIS_VERSION}\n{}",
                i + 1,
                log_tails(&cluster, 40)
            );
        }
        more_acks(&load_log, 100, &format!("at version {THIS_VERSION}")).await;
        // Read leases now: the two followers hold one.
        let holders = eventually(Duration::from_secs(10), || async {
            let held = read_lease_holders(&all).await;
            match held.iter().filter(|h| **h).count() {
                2 => Ok(held),
                _ => Err(format!("read leases held: {held:?}")),
            }
        })
        .await;
        timeline.push((load_started.elapsed(), format!("read leases held: {holders:?}")));

        // Stop the load.
        stop.store(true, Ordering::Relaxed);
        let load_stopped = Instant::now();
        for writer in writers {
            writer.await.expect("a writer");
        }
        sampler.await.expect("the version sampler");
        let load = std::mem::take(&mut *lock(&load_log));
        let acks = &load.acks;
        assert!(acks.iter().all(|a| a.revision > 0), "an acknowledged put without a revision");
        let last_revision = acks.iter().map(|a| a.revision).max().expect("acknowledged puts");

        // No member claimed the new version while one still spoke only the previous one
        // (before the last one restarted).
        let early: Vec<(Duration, usize)> = lock(&samples)
            .iter()
            .filter(|(at, _, v)| *at < last_started && v == &Ok(THIS_VERSION))
            .map(|(at, i, _)| (at.duration_since(load_started), i + 1))
            .collect();
        assert!(
            early.is_empty(),
            "members reported cluster version {THIS_VERSION} before the last one was upgraded (time after the load started, \
             node): {early:?}\ntimeline: {timeline:?}"
        );

        // Every acknowledged put is there, with its value and revision; nothing else is.
        let whole_load = GetOptions { prefix: true, ..Default::default() };
        let everything = eventually(Duration::from_secs(10), || reader.get("/load/", whole_load)).await;
        let stored: HashMap<String, (String, i64)> = everything
            .kvs
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(&kv.key).into_owned(),
                    (String::from_utf8_lossy(&kv.value).into_owned(), kv.mod_revision),
                )
            })
            .collect();
        let lost: Vec<&Ack> =
            acks.iter().filter(|a| stored.get(&a.key) != Some(&(a.value.clone(), a.revision))).collect();
        assert!(
            lost.is_empty(),
            "{} of {} acknowledged puts are missing or differ, e.g. {:?} (stored: {:?})\n{}",
            lost.len(),
            acks.len(),
            lost.first(),
            lost.first().and_then(|a| stored.get(&a.key)),
            log_tails(&cluster, 40)
        );
        let maybe: HashMap<&str, &str> = load.maybe.iter().map(|(k, e)| (k.as_str(), e.as_str())).collect();
        let acked: HashMap<&str, &Ack> = acks.iter().map(|a| (a.key.as_str(), a)).collect();
        let phantoms: Vec<&String> =
            stored.keys().filter(|k| !acked.contains_key(k.as_str()) && !maybe.contains_key(k.as_str())).collect();
        assert!(phantoms.is_empty(), "keys in the store that no put wrote: {phantoms:?}");

        // The watch: every revision from its start to the last acknowledged put, once each,
        // in order (the load being the only writer, each of them is a /load/ put).
        let waited = Instant::now();
        loop {
            let (reached, ended) = {
                let w = lock(&watched);
                (w.events.last().map_or(0, |e| e.0), w.ended.clone())
            };
            if reached >= last_revision {
                break;
            }
            assert!(
                ended.is_none() && waited.elapsed() < Duration::from_secs(10),
                "the watch reached revision {reached}, not {last_revision} (stopped: {ended:?})\n{}",
                log_tails(&cluster, 40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        watcher.abort();
        let watched = std::mem::take(&mut *lock(&watched));
        let revisions: Vec<i64> = watched.events.iter().map(|e| e.0).filter(|&r| r <= last_revision).collect();
        let expected: Vec<i64> = (start_revision..=last_revision).collect();
        if revisions != expected {
            let missing: Vec<i64> = expected.iter().copied().filter(|r| !revisions.contains(r)).take(10).collect();
            let out_of_order: Vec<(i64, i64)> =
                revisions.windows(2).filter(|w| w[1] != w[0] + 1).map(|w| (w[0], w[1])).take(10).collect();
            panic!(
                "the watch delivered {} events for revisions {start_revision}..={last_revision} ({} expected): \
                 missing (first 10) {missing:?}, non-consecutive steps {out_of_order:?}; resumed {:?}",
                revisions.len(),
                expected.len(),
                watched.resumed
            );
        }
        for (revision, key, value) in &watched.events {
            if let Some(ack) = acked.get(key.as_str()) {
                assert_eq!(
                    (revision, value),
                    (&ack.revision, &ack.value),
                    "the watch's event for {key} differs from its acknowledged put"
                );
            }
        }
        assert!(
            !watched.resumed.is_empty(),
            "the watch never resumed although n1, where it ran, was restarted: the test proves nothing"
        );

        // Unavailability: the longest stretch without an acknowledged put.
        let (gap, ended_at) = longest_gap(acks, load_started, load_stopped);
        eprintln!(
            "rolling upgrade: {} puts acknowledged, {} of unknown outcome, \
             revisions {start_revision}..={last_revision}; watch resumed {} times {:?}; \
             longest stretch without an acknowledged put {gap:?} (ended {ended_at:?} after the load started); \
             test took {:?}",
            acks.len(),
            load.maybe.len(),
            watched.resumed.len(),
            watched.resumed.iter().map(|r| (&r.0, r.1)).collect::<Vec<_>>(),
            test_started.elapsed()
        );
        eprintln!("timeline: {timeline:#?}");
        assert!(
            gap < MAX_UNAVAILABILITY,
            "no put was acknowledged for {gap:?} (until {ended_at:?} after the load started), more than one failover \
             ({MAX_UNAVAILABILITY:?}); timeline: {timeline:?}; puts of unknown outcome: {:?}\n{}",
            load.maybe.iter().rev().take(10).collect::<Vec<_>>(),
            log_tails(&cluster, 40)
        );
    });
    drop(rt);
    let logs: String = (0..3).map(|i| cluster.log(i)).collect();
    assert!(!logs.contains("panicked"), "a node panicked:\n{}", log_tails(&cluster, 60));
}
