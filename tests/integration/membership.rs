//! Membership changes on real processes: a learner joins a loaded cluster and is promoted,
//! a dead member is replaced, etcd's errors, a removed node refusing to start, and etcdctl
//! driving the change (docs/membership.md, docs/operations.md "Add a member").

use crate::common;

use common::cluster::{client, eventually, runtime, Cluster, KVSERVER};
use leasekv::client::{Client, ClientError, GetOptions};
use leasekv::node_config::NodeFile;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::Code;

/// The longest pause between two acknowledged puts the acceptance run allows: one failover
/// (about a lease time, 0.8 s here) with room for a slow CI machine. No change in the run
/// takes mastership away (the member killed is not the master), so the measured gap is
/// usually tens of milliseconds.
const MAX_PUT_GAP: Duration = Duration::from_secs(2);

/// A joining node's files and process.
struct Joiner {
    config: PathBuf,
    log: PathBuf,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl Joiner {
    /// Writes the config of a node joining `cluster` (its [[peers]] are the three first
    /// members; no id: the cluster gives it).
    fn new(cluster: &Cluster, name: &str) -> Joiner {
        let ports = common::free_ports(2);
        let dir = cluster.dir.path();
        let data = dir.join(format!("data-{name}"));
        let peers = NodeFile::local_peers(&cluster.client_ports, &cluster.peer_ports);
        let mut file = NodeFile::member(1, &peers, &data, "paxoslease");
        file.id = None;
        file.client_addr = std::net::SocketAddr::from(([127, 0, 0, 1], ports[0]));
        file.peer_addr = std::net::SocketAddr::from(([127, 0, 0, 1], ports[1]));
        file.initial_cluster_state = Some("existing".into());
        let config = dir.join(format!("{name}.toml"));
        file.write(&config).expect("joiner config written");
        Joiner { config, log: dir.join(format!("log-{name}")), client_port: ports[0], peer_port: ports[1], child: None }
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    fn start(&mut self) {
        let log = std::fs::File::create(&self.log).expect("log file");
        let child = Command::new(KVSERVER)
            .arg("--config")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kvserver starts");
        self.child = Some(child);
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Joiner {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn code(error: &ClientError) -> Option<Code> {
    match error {
        ClientError::Rpc { status, .. } => Some(status.code()),
        ClientError::Unavailable { .. } => Some(Code::Unavailable),
        _ => None,
    }
}

/// Runs a membership change, retrying (bounded) while the cluster answers UNAVAILABLE
/// ("unhealthy cluster" while the previous change settles, or no master for a moment).
async fn retry_busy<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() < deadline && matches!(code(&e), Some(Code::Unavailable)) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) if Instant::now() < deadline && e.to_string().contains("in sync with leader") => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// A task putting sequential keys until told to stop: the acked keys and the longest gap
/// between successive acks.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<Duration>,
}

impl Load {
    fn start(endpoints: Vec<String>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let (stop2, acked2) = (stop.clone(), acked.clone());
        let task = tokio::spawn(async move {
            let c = Client::connect(&endpoints).await.expect("load client connects");
            let mut last = Instant::now();
            let mut longest = Duration::ZERO;
            let mut i = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                let key = format!("load/{i:08}");
                if c.put(key.clone(), format!("v{i}"), 0, false).await.is_ok() {
                    longest = longest.max(last.elapsed());
                    last = Instant::now();
                    acked2.lock().unwrap_or_else(|e| e.into_inner()).push(key);
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            longest
        });
        Load { stop, acked, task }
    }

    async fn finish(self) -> (Vec<String>, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        let longest = self.task.await.expect("load task");
        let acked = self.acked.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (acked, longest)
    }
}

/// `leasekv_snapshots_installed_total` as a member's `/metrics` reports it.
fn snapshots_installed(url: &str) -> f64 {
    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(10))).build().into();
    let text = agent.get(url).call().expect("a scrape").body_mut().read_to_string().expect("the exposition");
    text.lines()
        .find_map(|l| l.strip_prefix("leasekv_snapshots_installed_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn member_list(c: &Client) -> Vec<leasekv::client::proto::etcdserverpb::Member> {
    eventually(Duration::from_secs(10), || c.member_list()).await.members
}

/// Waits until `endpoint` has applied up to revision `revision` (serializable reads).
async fn caught_up(endpoint: &str, revision: i64) {
    let c = client(endpoint).await;
    eventually(Duration::from_secs(30), || async {
        let r = c
            .get("load/", GetOptions { serializable: true, prefix: true, count_only: true, ..Default::default() })
            .await
            .map_err(|e| e.to_string())?;
        let header = r.header.ok_or("no header")?;
        if header.revision >= revision {
            Ok(())
        } else {
            Err(format!("at {} of {revision}", header.revision))
        }
    })
    .await
}

#[test]
fn a_learner_joins_a_loaded_cluster_is_promoted_and_a_dead_member_is_replaced() {
    let rt = runtime();
    // Snapshots every 100 slots, keeping 10 behind: by the time a member joins, the log it
    // needs is gone and it must catch up from a snapshot, as in a long-running cluster.
    let mut cluster = Cluster::start_with("paxoslease", "[log]\nsnapshot_every = 100\nretain_after_snapshot = 10\n");
    let mut n4 = Joiner::new(&cluster, "n4");
    let mut n5 = Joiner::new(&cluster, "n5");
    rt.block_on(async {
        let endpoints: Vec<String> = (0..3).map(|i| cluster.endpoint(i)).collect();
        let c = client(&cluster.endpoint(0)).await;
        eventually(Duration::from_secs(10), || c.put("warmup", "1", 0, false)).await;
        let load = Load::start(endpoints.clone());
        caught_up(&cluster.endpoint(0), 300).await;

        // Add n4 as a learner and start it.
        let added = retry_busy("add n4", || c.member_add(vec![n4.peer_url()], true)).await;
        let id4 = added.member.expect("the added member").id;
        assert_eq!(id4, 4);
        n4.start();
        let promoted = retry_busy("promote n4", || c.member_promote(id4)).await;
        assert!(promoted.members.iter().any(|m| m.id == id4 && !m.is_learner), "{promoted:?}");
        let metrics = format!("http://{}/metrics", n4.endpoint());
        let installed = tokio::task::spawn_blocking(move || snapshots_installed(&metrics)).await.expect("scrape");
        assert!(installed >= 1.0, "n4 caught up without a snapshot ({installed})");
        let members = member_list(&c).await;
        eprintln!("after promoting n4: {members:?}");

        // kill -9 an old member that is not master, and remove it.
        let master = common::cluster::master_index(&cluster).await;
        let victim = (0..3).find(|i| *i != master && *i != 0).expect("a non-master member");
        cluster.kill(victim);
        retry_busy("remove the dead member", || c.member_remove(victim as u64 + 1)).await;

        // Add n5, start it, promote it.
        let added = retry_busy("add n5", || c.member_add(vec![n5.peer_url()], true)).await;
        let id5 = added.member.expect("the added member").id;
        assert_eq!(id5, 5, "ids are never reused");
        n5.start();
        retry_busy("promote n5", || c.member_promote(id5)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (acked, longest) = load.finish().await;
        eprintln!("acked puts: {}, longest gap between acks: {longest:?}", acked.len());
        assert!(!acked.is_empty());

        // Every live member has every acked write, and the same hash at one revision.
        let live: Vec<String> = (0..3)
            .filter(|i| *i != victim)
            .map(|i| cluster.endpoint(i))
            .chain([n4.endpoint(), n5.endpoint()])
            .collect();
        let revision =
            c.get("warmup", GetOptions::default()).await.expect("a linearizable read").header.expect("header").revision;
        let mut hashes = Vec::new();
        for endpoint in &live {
            caught_up(endpoint, revision).await;
            let m = client(endpoint).await;
            let all = m
                .get("load/", GetOptions { serializable: true, prefix: true, ..Default::default() })
                .await
                .expect("serializable read");
            let keys: std::collections::HashSet<String> =
                all.kvs.iter().map(|kv| String::from_utf8_lossy(&kv.key).into_owned()).collect();
            let missing: Vec<&String> = acked.iter().filter(|k| !keys.contains(*k)).collect();
            assert!(missing.is_empty(), "{endpoint} lacks {} acked keys, e.g. {:?}", missing.len(), missing.first());
            let hash = eventually(Duration::from_secs(10), || m.hash_kv(revision)).await;
            hashes.push((endpoint.clone(), hash.hash));
        }
        assert!(hashes.windows(2).all(|w| w[0].1 == w[1].1), "hashes differ at revision {revision}: {hashes:?}");

        // Both joiners published their names and client URLs.
        let members = eventually(Duration::from_secs(10), || async {
            let members = member_list(&c).await;
            match members.iter().all(|m| !m.name.is_empty()) {
                true => Ok(members),
                false => Err(format!("{members:?}")),
            }
        })
        .await;
        assert_eq!(members.len(), 4, "{members:?}");
        assert!(members
            .iter()
            .any(|m| m.id == 5 && m.name == "n5" && m.client_urls == [format!("http://{}", n5.endpoint())]));
        eprintln!("longest put gap: {longest:?}");
        assert!(longest < MAX_PUT_GAP, "the longest gap between acked puts was {longest:?}");
    });
    if n4.log().contains("panicked") || n5.log().contains("panicked") {
        panic!("a joiner panicked: {}\n{}", n4.log(), n5.log());
    }
}

#[test]
fn member_list_shows_learners_and_changes_are_refused_with_etcds_errors() {
    let rt = runtime();
    let cluster = Cluster::start("paxoslease");
    rt.block_on(async {
        let c = client(&cluster.endpoint(0)).await;
        eventually(Duration::from_secs(10), || c.put("warmup", "1", 0, false)).await;
        let members = member_list(&c).await;
        assert_eq!(members.len(), 3);
        for m in &members {
            assert!(!m.is_learner);
            assert_eq!(m.name, format!("n{}", m.id));
            assert_eq!(m.peer_urls, [format!("http://127.0.0.1:{}", cluster.peer_ports[m.id as usize - 1])]);
            assert_eq!(m.client_urls, [format!("http://127.0.0.1:{}", cluster.client_ports[m.id as usize - 1])]);
        }
        let learner_url = format!("http://127.0.0.1:{}", common::free_ports(1)[0]);
        let added = retry_busy("add a learner", || c.member_add(vec![learner_url.clone()], true)).await;
        let learner = added.member.expect("the added member");
        assert!(learner.is_learner && learner.name.is_empty() && learner.client_urls.is_empty(), "{learner:?}");
        // Every member, followers included, shows it once they applied the change.
        for i in 0..3 {
            let m = client(&cluster.endpoint(i)).await;
            eventually(Duration::from_secs(10), || async {
                let members = member_list(&m).await;
                match members.iter().find(|x| x.id == learner.id) {
                    Some(x) if x.is_learner && x.name.is_empty() => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
        }

        fn refused<T>(r: Result<T, ClientError>) -> Option<Code> {
            r.err().and_then(|e| code(&e))
        }
        // Promote a voter.
        let error = loop_until_not_busy(|| c.member_promote(1)).await;
        assert_eq!(refused(error), Some(Code::FailedPrecondition));
        // Remove an unknown member.
        let error = loop_until_not_busy(|| c.member_remove(99)).await;
        assert_eq!(refused(error), Some(Code::NotFound));
        // Add an existing peer URL.
        let existing = format!("http://127.0.0.1:{}", cluster.peer_ports[1]);
        let error = loop_until_not_busy(|| c.member_add(vec![existing.clone()], true)).await;
        assert_eq!(refused(error), Some(Code::FailedPrecondition));
        // A bad URL.
        let error = loop_until_not_busy(|| c.member_add(vec!["127.0.0.1:1".into()], true)).await;
        assert_eq!(refused(error), Some(Code::InvalidArgument));
    });
}

/// Runs `f` until it answers something other than UNAVAILABLE (bounded), and returns that.
async fn loop_until_not_busy<T, F, Fut>(mut f: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let result = f().await;
        match &result {
            Err(e) if Instant::now() < deadline && code(e) == Some(Code::Unavailable) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            _ => return result,
        }
    }
}

/// A member removed while it runs stops by itself: it applies its own removal, or (when the
/// others stopped sending it the log first) the others answer it "removed", as etcd's peers
/// do. Restarted with its data dir, it refuses to start and names the epoch.
#[test]
fn a_removed_node_refuses_to_start() {
    let rt = runtime();
    let mut cluster = Cluster::start("paxoslease");
    let removed = rt.block_on(async {
        let c = client(&cluster.endpoint(0)).await;
        eventually(Duration::from_secs(10), || c.put("warmup", "1", 0, false)).await;
        let master = common::cluster::master_index(&cluster).await;
        let victim = (0..3).find(|i| *i != master).expect("a non-master member");
        // Ask through the master: the victim itself answers "no leader" once removed.
        let c = client(&cluster.endpoint(master)).await;
        // Wait for the victim to have applied the warmup write, then remove it while it runs:
        // it applies its own removal and stops.
        caught_up(&cluster.endpoint(victim), 2).await;
        let removed = loop_until_not_busy(|| c.member_remove(victim as u64 + 1)).await;
        (victim, removed.err().map(|e| e.to_string()))
    });
    let (removed, error) = removed;
    if let Some(error) = error {
        panic!("remove: {error}\n{}\n{}\n{}", cluster.log(0), cluster.log(1), cluster.log(2));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let stopped = loop {
        if let Some(child) = cluster.nodes[removed].as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                break Some(status);
            }
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(stopped.is_some(), "the removed node stops by itself: {}", cluster.log(removed));
    cluster.nodes[removed] = None;
    assert!(cluster.log(removed).contains("removed from the cluster"), "{}", cluster.log(removed));
    // Restarted with its data dir: refuses, naming the epoch.
    let output = Command::new(KVSERVER).arg("--config").arg(cluster.config(removed)).output().expect("kvserver runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a removed node must not start: {stderr}");
    assert!(stderr.contains("was removed from the cluster (membership epoch"), "{stderr}");
}

#[test]
fn etcdctl_adds_promotes_and_lists_a_learner() {
    let Some(etcdctl) = common::tool("etcdctl", "etcd-client") else {
        eprintln!("etcdctl is not installed; skipped");
        return;
    };
    let rt = runtime();
    let cluster = Cluster::start("paxoslease");
    let mut n4 = Joiner::new(&cluster, "n4");
    let endpoints = (0..3).map(|i| cluster.endpoint(i)).collect::<Vec<_>>().join(",");
    let etcdctl_run = |args: &[&str]| {
        let output = Command::new(&etcdctl)
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoints}"))
            .args(args)
            .output()
            .expect("etcdctl runs");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr),
        )
    };
    rt.block_on(async {
        let c = client(&cluster.endpoint(0)).await;
        eventually(Duration::from_secs(10), || c.put("warmup", "1", 0, false)).await;
    });
    // Retried while the change settles ("unhealthy cluster") or the learner catches up.
    let until_ok = |args: &[&str]| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (ok, out) = etcdctl_run(args);
            if ok {
                return out;
            }
            assert!(Instant::now() < deadline, "etcdctl {args:?}: {out}");
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    let added = until_ok(&["member", "add", "n4", "--learner", &format!("--peer-urls={}", n4.peer_url())]);
    assert!(added.contains("Member") && added.contains("added"), "{added}");
    n4.start();
    let out = until_ok(&["member", "promote", "4"]);
    assert!(out.contains("promoted"), "{out}");
    let (ok, out) = etcdctl_run(&["member", "list"]);
    assert!(ok, "{out}");
    assert!(out.lines().any(|l| l.starts_with("4,") && l.ends_with("false")), "{out}");
    // MemberUpdate (to the URL it has: n4 keeps listening there) and MemberRemove.
    let (ok, out) = etcdctl_run(&["member", "update", "4", &format!("--peer-urls={}", n4.peer_url())]);
    assert!(ok && out.contains("updated"), "etcdctl member update: {out}");
    let out = until_ok(&["member", "remove", "4"]);
    assert!(out.contains("removed"), "{out}");
    let (ok, out) = etcdctl_run(&["member", "list"]);
    assert!(ok && out.lines().count() == 3 && !out.lines().any(|l| l.starts_with("4,")), "{out}");
}

#[test]
fn the_lease_tracker_backend_refuses_to_remove_its_tracker() {
    let rt = runtime();
    let cluster = Cluster::start("lease-tracker");
    rt.block_on(async {
        let c = client(&cluster.endpoint(0)).await;
        eventually(Duration::from_secs(10), || c.put("warmup", "1", 0, false)).await;
        // The tracker is the lowest id unless configured.
        let refused = c.member_remove(1).await.expect_err("removing the tracker is refused");
        assert_eq!(code(&refused), Some(Code::FailedPrecondition), "{refused}");
        assert!(refused.to_string().contains("lease tracker"), "{refused}");
        // Any other member can go.
        let removed = retry_busy("remove n3", || c.member_remove(3)).await;
        assert!(removed.members.iter().all(|m| m.id != 3), "{removed:?}");
    });
}

#[test]
fn a_restarted_member_follows_its_data_dir_not_its_config_file() {
    let rt = runtime();
    let mut cluster = Cluster::start("paxoslease");
    let master = rt.block_on(async {
        let c = client(&cluster.endpoint(0)).await;
        eventually(Duration::from_secs(10), || c.put("warmup", "1", 0, false)).await;
        common::cluster::master_index(&cluster).await
    });
    // Remove a member that is not master (killed first), then restart another one whose
    // config file still lists all three.
    let others: Vec<usize> = (0..3).filter(|i| *i != master).collect();
    let (gone, restarted) = (others[0], others[1]);
    cluster.kill(gone);
    rt.block_on(async {
        let c = client(&cluster.endpoint(master)).await;
        retry_busy("remove", || c.member_remove(gone as u64 + 1)).await;
        // Writes after the removal: the member to restart accepts them, and the sync that
        // makes them durable also records a commit index past the removal (a commit index
        // is written lazily, with the next sync), so its data dir holds the removal.
        for i in 0..3 {
            eventually(Duration::from_secs(10), || c.put(format!("after-removal/{i}"), "v", 0, false)).await;
        }
        caught_up(&cluster.endpoint(restarted), 5).await;
        // Its applied configuration has two members before the restart.
        let m = client(&cluster.endpoint(restarted)).await;
        eventually(Duration::from_secs(10), || async {
            match member_list(&m).await.len() {
                2 => Ok(()),
                n => Err(format!("{n} members")),
            }
        })
        .await;
    });
    cluster.kill(restarted);
    // The operator edits its file to list the two members left, as after any removal. The
    // cluster id derived from that list differs from the one the cluster started with; the
    // one the data dir recorded stays, or the master would refuse the restarted member's
    // requests as another cluster's and the two voters could not make progress.
    let left: Vec<_> = NodeFile::local_peers(&cluster.client_ports, &cluster.peer_ports)
        .into_iter()
        .filter(|p| p.id != gone as u32 + 1)
        .collect();
    let data_dir = cluster.dir.path().join(format!("data{}", restarted + 1));
    NodeFile::member(restarted as u32 + 1, &left, &data_dir, "paxoslease")
        .write(&cluster.config(restarted))
        .expect("the edited config");
    cluster.start_node(restarted);
    rt.block_on(async {
        let m = client(&cluster.endpoint(restarted)).await;
        let members = member_list(&m).await;
        assert_eq!(members.len(), 2, "the data dir's membership, not the file's three: {members:?}");
        assert!(members.iter().all(|x| x.id != gone as u64 + 1), "{members:?}");
        // And the two voters make progress together.
        let c = client(&cluster.endpoint(master)).await;
        eventually(Duration::from_secs(10), || c.put("after", "restart", 0, false)).await;
    });
}

/// A node of another cluster whose configuration lists a member's peer address (a copied
/// file, a reused address) is refused by that member, which says so in its log, and the two
/// clusters' data never mix: each keeps its own keys and goes on writing.
#[test]
fn a_node_of_another_cluster_is_refused_on_the_peer_port_and_the_clusters_never_mix() {
    let rt = runtime();
    let ours = Cluster::start("paxoslease");
    rt.block_on(async {
        let c = client(&ours.endpoint(0)).await;
        eventually(Duration::from_secs(10), || c.put("/ours", "1", 0, false)).await;
    });
    // The other cluster's third member is, by mistake, our third member's addresses; only
    // its first two nodes run.
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = common::free_ports(4);
    let client_ports = vec![ports[0], ports[1], ours.client_ports[2]];
    let peer_ports = vec![ports[2], ports[3], ours.peer_ports[2]];
    common::write_configs(dir.path(), &client_ports, &peer_ports, "paxoslease", "");
    let mut theirs = Cluster { dir, nodes: vec![None, None, None], client_ports, peer_ports };
    theirs.start_node(0);
    theirs.start_node(1);
    rt.block_on(async {
        let c = client(&theirs.endpoint(0)).await;
        eventually(Duration::from_secs(10), || c.put("/theirs", "1", 0, false)).await;
    });
    let refused = |log: String| log.contains("request cluster ID mismatch");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(refused(ours.log(2)) && theirs.log(0).contains("belongs to another cluster")) {
        assert!(Instant::now() < deadline, "no refusal logged:\n{}\n---\n{}", ours.log(2), theirs.log(0));
        std::thread::sleep(Duration::from_millis(100));
    }
    rt.block_on(async {
        // Our member the strangers wrote to has our data only, and ours goes on writing.
        let third = client(&ours.endpoint(2)).await;
        eventually(Duration::from_secs(10), || third.put("/ours/after", "2", 0, false)).await;
        let own = GetOptions { serializable: true, ..Default::default() };
        let mine = third.get("/", GetOptions { prefix: true, ..own }).await.expect("a read");
        let keys: Vec<&[u8]> = mine.kvs.iter().map(|kv| kv.key.as_slice()).collect();
        assert_eq!(keys, vec![&b"/ours"[..], b"/ours/after"], "our third member's keys");
        // The other cluster keeps its own data, and keeps writing with its two nodes.
        let other = client(&theirs.endpoint(0)).await;
        eventually(Duration::from_secs(10), || other.put("/theirs/after", "2", 0, false)).await;
        let kvs = other.get("/", GetOptions { prefix: true, ..Default::default() }).await.expect("a read").kvs;
        let keys: Vec<&[u8]> = kvs.iter().map(|kv| kv.key.as_slice()).collect();
        assert_eq!(keys, vec![&b"/theirs"[..], b"/theirs/after"], "the other cluster's keys");
    });
}
