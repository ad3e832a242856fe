//! Real `kvserver` processes on 127.0.0.1: a three-node cluster per backend, driven through
//! the client library. Every wait is bounded; every process is started by the test and killed
//! by it (by pid, on drop). etcdctl against the cluster, compared with a real etcd, is in
//! `etcdctl_conformance.rs`.

use crate::common;

use common::cluster::{client, eventually, master_index, runtime, value, Cluster, KVSERVER};
use leasekv::client::{Client, GetOptions};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn cluster_carries_on(backend: &str) {
    let mut cluster = Cluster::start(backend);
    let rt = runtime();
    rt.block_on(async {
        let master = master_index(&cluster).await;
        // Writes and reads through every node (followers forward to the master).
        for i in 0..3 {
            let c = client(&cluster.endpoint(i)).await;
            eventually(Duration::from_secs(10), || c.put(format!("/k{i}"), format!("v{i}"), 0, false)).await;
        }
        for i in 0..3 {
            let c = client(&cluster.endpoint(i)).await;
            for j in 0..3 {
                assert_eq!(value(&c, &format!("/k{j}"), false).await, Some(format!("v{j}").into_bytes()));
            }
        }
        // kill -9 the master: the survivors carry on and lose nothing acknowledged.
        let survivor = (master + 1) % 3;
        cluster.kill(master);
        // The lease tracker lives on the lowest id, which grants itself and so is usually
        // master: killing it takes the election down until it is back (the single point of
        // failure this backend exists to show). Restart it at once in that case.
        let tracker_down = backend == "lease-tracker" && master == 0;
        if tracker_down {
            cluster.start_node(master);
        }
        let c = client(&cluster.endpoint(survivor)).await;
        let started = Instant::now();
        eventually(Duration::from_secs(15), || c.put("/after", "failover", 0, false)).await;
        eprintln!("{backend}: first put after kill -9 of the master took {:?}", started.elapsed());

        for j in 0..3 {
            assert_eq!(value(&c, &format!("/k{j}"), false).await, Some(format!("v{j}").into_bytes()));
        }
        // Restart it: it catches up.
        if !tracker_down {
            cluster.start_node(master);
        }
        let back = client(&cluster.endpoint(master)).await;
        eventually(Duration::from_secs(15), || async {
            match value(&back, "/after", true).await {
                Some(v) if v == b"failover" => Ok(()),
                other => Err(format!("restarted node sees {other:?}")),
            }
        })
        .await;
    });
    drop(rt);
    let logs: String = (0..3).map(|i| cluster.log(i)).collect();
    assert!(!logs.contains("panicked"), "a node panicked:\n{logs}");
}

#[test]
fn paxoslease_cluster_survives_kill_9_of_the_master() {
    cluster_carries_on("paxoslease");
}

#[test]
fn lease_tracker_cluster_survives_kill_9_of_the_master() {
    cluster_carries_on("lease-tracker");
}

/// A write sent to a survivor while the killed master's lease still runs (the survivors
/// still name it master) is held until the next master takes it, not forwarded into the
/// dead master's broken stream and answered "may or may not have been applied" later.
#[test]
fn a_write_sent_before_the_next_master_is_elected_waits_for_it() {
    let mut cluster = Cluster::start("paxoslease");
    let rt = runtime();
    rt.block_on(async {
        let master = master_index(&cluster).await;
        let survivor = (master + 1) % 3;
        let c = client(&cluster.endpoint(survivor)).await;
        eventually(Duration::from_secs(10), || c.put("/before", "1", 0, false)).await;
        cluster.kill(master);
        // Long enough for the survivor to see its stream to the master break (a killed
        // process's sockets close at once), far shorter than the lease the acceptors still
        // hold for the dead master (at least 600 of its 800 ms).
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        if let Err(error) = c.put("/during", "election", 0, false).await {
            panic!("a put sent {:?} into the election failed: {error}", started.elapsed());
        }
        eprintln!("a put sent 100 ms after kill -9 of the master took {:?}", started.elapsed());
        assert_eq!(value(&c, "/during", false).await, Some(b"election".to_vec()));
    });
}

#[test]
fn keys_on_a_lease_vanish_after_its_ttl_and_sigterm_hands_over() {
    let mut cluster = Cluster::start("paxoslease");
    let rt = runtime();
    rt.block_on(async {
        let master = master_index(&cluster).await;
        let c = client(&cluster.endpoint((master + 1) % 3)).await;
        let granted = eventually(Duration::from_secs(10), || c.grant_named("server1", 2)).await;
        assert_eq!(granted.ttl, 2);
        eventually(Duration::from_secs(10), || c.put("/servers/1", "{\"addr\":\"10.0.0.7:80\"}", granted.id, false))
            .await;
        let put_at = Instant::now();
        assert!(value(&c, "/servers/1", false).await.is_some(), "present before the TTL");
        // Nobody keeps it alive: gone after the TTL (plus a bounded slack), not before.
        let gone = eventually(Duration::from_secs(8), || async {
            match value(&c, "/servers/1", false).await {
                None => Ok(put_at.elapsed()),
                Some(_) => Err("still there"),
            }
        })
        .await;
        assert!(gone >= Duration::from_millis(1900), "expired after {gone:?}, before its TTL");

        // SIGTERM the master: it releases its lease and another node takes over quickly.
        let master = master_index(&cluster).await;
        let survivor = (master + 1) % 3;
        assert!(cluster.terminate(master), "the master exits cleanly on SIGTERM");
        let c = client(&cluster.endpoint(survivor)).await;
        let started = Instant::now();
        eventually(Duration::from_secs(10), || c.put("/handover", "ok", 0, false)).await;
        eprintln!("first put after SIGTERM of the master took {:?}", started.elapsed());
    });
}

#[test]
fn garbage_on_the_ports_and_a_bad_config_do_no_harm() {
    let cluster = Cluster::start("paxoslease");
    let rt = runtime();
    rt.block_on(master_index(&cluster));
    for port in [cluster.client_ports[0], cluster.peer_ports[0]] {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::Write;
            let _ = s.write_all(b"\x00\x01garbage\r\n\r\nGET / HTTP/1.1\r\n\r\n");
        }
    }
    rt.block_on(async {
        let c = client(&cluster.endpoint(0)).await;
        eventually(Duration::from_secs(10), || c.put("/still", "up", 0, false)).await;
        let err = c.put("", "v", 0, false).await.expect_err("empty key refused");
        assert!(err.to_string().contains("key is not provided"), "{err}");
        let err = c.put("/big", vec![b'x'; 1600 * 1024], 0, false).await.expect_err("oversized value refused");
        assert!(err.to_string().contains("request is too large"), "{err}");
        let err = c.put(vec![b'k'; 2000], "v", 0, false).await.expect_err("oversized key refused");
        assert!(err.to_string().contains("request is too large"), "{err}");
        let err = c.put("/x", "v", 0x1234, false).await.expect_err("unknown lease refused");
        assert!(err.to_string().contains("requested lease not found"), "{err}");
    });
    // A malformed config: one clear line, exit code 1, nothing started.
    let bad = cluster.dir.path().join("bad.toml");
    std::fs::write(&bad, "id = 1\n[election]\nbackend = \"paxos\"\n").expect("written");
    let out = Command::new(KVSERVER).arg("--config").arg(&bad).output().expect("runs");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("unknown election backend \"paxos\"") && text.contains("paxoslease, lease-tracker"),
        "{text}"
    );
    // A client port another process holds: one line that says so once, exit code 1.
    let taken = cluster.endpoint(0);
    let out = Command::new(KVSERVER)
        .args(["--client-addr", &taken, "--data-dir"])
        .arg(cluster.dir.path().join("other"))
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("is already in use"), "{text}");
    assert_eq!(text.trim().lines().count(), 1, "{text}");
    assert_eq!(text.matches("os error").count(), 1, "the cause is named once: {text}");
}

/// A node that was down while the log was compacted past it catches up from a snapshot
/// pulled in chunks (`Peer.FetchParked`), not one message on the log stream.
#[test]
fn a_node_behind_log_compaction_catches_up_from_a_chunked_snapshot() {
    let started = Instant::now();
    // A short log: a snapshot every 10 slots, 2 slots kept behind it.
    let mut cluster = Cluster::start_with("paxoslease", "[log]\nsnapshot_every = 10\nretain_after_snapshot = 2\n");
    let rt = runtime();
    let (lagging, log) = rt.block_on(async {
        let master = master_index(&cluster).await;
        let lagging = (master + 1) % 3;
        let c = client(&cluster.endpoint(master)).await;
        eventually(Duration::from_secs(10), || c.put("/before", "1", 0, false)).await;
        cluster.kill(lagging);
        // About 4 MiB of state in 40 slots (one put each): the log moves on by four
        // snapshots, and the snapshot takes several 1 MiB chunks.
        let big = vec![b'x'; 100 << 10];
        for i in 0..40 {
            eventually(Duration::from_secs(10), || c.put(format!("/bulk/{i:02}"), big.clone(), 0, false)).await;
        }
        eventually(Duration::from_secs(10), || c.put("/last", "done", 0, false)).await;

        cluster.start_node(lagging);
        let back = client(&cluster.endpoint(lagging)).await;
        eventually(Duration::from_secs(10), || async {
            match value(&back, "/last", true).await {
                Some(v) if v == b"done" => Ok(()),
                other => Err(format!("restarted node sees /last = {other:?}")),
            }
        })
        .await;
        assert_eq!(value(&back, "/bulk/00", true).await, Some(big.clone()), "the whole state came over");
        assert_eq!(value(&back, "/before", true).await, Some(b"1".to_vec()));
        // The snapshot arrived as a file in the data dir (never whole in memory): nothing
        // of the transfer is left behind, and at most the installed one is kept.
        let data = cluster.dir.path().join(format!("data{}", lagging + 1));
        let files = |sub: &str| std::fs::read_dir(data.join(sub)).map_or(0, |d| d.count());
        assert_eq!(files("incoming"), 0, "a finished transfer leaves no file in incoming/");
        assert!(files("snapshots") <= 1, "only the installed snapshot is kept");
        // Killed right after the install, it restarts from what it installed.
        let log = cluster.log(lagging);
        cluster.kill(lagging);
        cluster.start_node(lagging);
        let again = client(&cluster.endpoint(lagging)).await;
        eventually(Duration::from_secs(10), || async {
            match value(&again, "/bulk/39", true).await {
                Some(v) if v == big => Ok(()),
                other => Err(format!("restarted node sees /bulk/39 = {:?} bytes", other.map(|v| v.len()))),
            }
        })
        .await;
        (lagging, log)
    });
    drop(rt);
    let line = log.lines().find(|l| l.contains("snapshot received in chunks")).unwrap_or_else(|| {
        panic!("node {} caught up without a chunked snapshot:\n{log}", lagging + 1);
    });
    let chunks: u64 = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("chunks="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no chunk count in {line:?}"));
    assert!(chunks >= 3, "a snapshot of about 4 MiB came in {chunks} chunks: {line}");
    let logs: String = (0..3).map(|i| cluster.log(i)).collect();
    assert!(!logs.contains("panicked"), "a node panicked:\n{logs}");
    assert!(!logs.contains("transfer from peer failed"), "a transfer failed:\n{logs}");
    eprintln!("chunked snapshot catch-up: {line}\n(test took {:?})", started.elapsed());
}

/// One event as a watcher saw it: (revision, type, key, value).
type Seen = (i64, i32, String, String);

fn seen(e: &leasekv::client::proto::mvccpb::Event) -> Seen {
    let kv = e.kv.clone().unwrap_or_default();
    (
        kv.mod_revision,
        e.r#type,
        String::from_utf8_lossy(&kv.key).into_owned(),
        String::from_utf8_lossy(&kv.value).into_owned(),
    )
}

/// Collects what a resuming watch delivers until `stop` is set, then for a grace period.
async fn collect(mut watch: leasekv::client::Watch, stop: tokio::sync::watch::Receiver<bool>) -> (Vec<Seen>, usize) {
    let mut events = Vec::new();
    let mut resumed = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if *stop.borrow() {
            break;
        }
        match tokio::time::timeout(Duration::from_millis(200), watch.next()).await {
            Ok(Ok(leasekv::client::WatchUpdate::Response(r))) => events.extend(r.events.iter().map(seen)),
            Ok(Ok(leasekv::client::WatchUpdate::Resumed { .. })) => resumed += 1,
            Ok(Err(e)) => panic!("a watch ended: {e}"),
            Err(_) => {}
        }
    }
    (events, resumed)
}

/// Watchers on a follower and on the master (through the client library, and `kvcli watch`
/// as a process) while a writer puts and a lease expires; the master is killed with -9 in the
/// middle. Every watcher must see every change exactly once, in revision order, without a
/// gap: the same sequence a fresh watch replays from the history afterwards, which holds
/// every acknowledged put and the DELETE of the expired lease's key.
#[test]
fn watchers_see_every_change_once_through_kill_9_of_the_master() {
    let mut cluster = Cluster::start("paxoslease");
    let rt = runtime();
    let kvcli_out = cluster.dir.path().join("kvcli-watch.out");
    let kvcli_err = cluster.dir.path().join("kvcli-watch.err");
    let mut kvcli: Option<Child> = None;
    rt.block_on(async {
        let master = master_index(&cluster).await;
        let follower = (master + 1) % 3;
        let other = (master + 2) % 3;
        let endpoints: Vec<String> = (0..3).map(|i| cluster.endpoint(i)).collect();
        let order = |first: usize| (0..3).map(|k| endpoints[(first + k) % 3].clone()).collect::<Vec<_>>();
        let c = client(&cluster.endpoint(follower)).await;
        let start = eventually(Duration::from_secs(10), || c.put("/w/start", "0", 0, false)).await;
        let start = start.header.map_or(0, |h| h.revision);
        let options = leasekv::client::WatchOptions {
            range_end: leasekv::client::prefix_range_end(b"/w/"),
            start_revision: start,
            prev_kv: true,
            ..Default::default()
        };
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let mut watchers = Vec::new();
        for first in [follower, master] {
            let wc = Client::connect(&order(first)).await.expect("watch client");
            let watch = wc.watch("/w/", options.clone()).await.expect("watch opens");
            watchers.push(tokio::spawn(collect(watch, stop.clone())));
        }
        kvcli = Some(
            Command::new(env!("CARGO_BIN_EXE_kvcli"))
                .arg("--endpoints")
                .arg(order(master).join(","))
                .args(["watch", "/w/", "--prefix", "--rev", &start.to_string(), "-w", "json"])
                .stdout(std::fs::File::create(&kvcli_out).expect("kvcli output file"))
                .stderr(std::fs::File::create(&kvcli_err).expect("kvcli error file"))
                .spawn()
                .expect("kvcli watch starts"),
        );
        // A lease nobody keeps alive: its key's DELETE must reach every watcher.
        let lease = eventually(Duration::from_secs(10), || c.lease_grant(2, 0)).await;
        eventually(Duration::from_secs(10), || c.put("/w/leased", "x", lease.id, false)).await;
        let writer = Client::connect(&order(follower)).await.expect("writer");
        let mut acknowledged = Vec::new();
        for i in 0..120 {
            if i == 40 {
                cluster.kill(master);
            }
            let value = format!("v{i}");
            // Retried until acknowledged; a retry after an unknown outcome may write twice,
            // which the watchers must then show twice too.
            let put =
                eventually(Duration::from_secs(15), || writer.put(format!("/w/k{}", i % 7), value.clone(), 0, false))
                    .await;
            acknowledged.push((put.header.map_or(0, |h| h.revision), value));
        }
        // The lease expires (TTL 2 s, counted again by the new master).
        eventually(Duration::from_secs(15), || async {
            match value(&writer, "/w/leased", false).await {
                None => Ok(()),
                Some(_) => Err("the leased key is still there"),
            }
        })
        .await;
        cluster.start_node(master);
        let last = eventually(Duration::from_secs(10), || writer.put("/w/end", "1", 0, false)).await;
        let last = last.header.map_or(0, |h| h.revision);
        // Let every watcher reach the last revision, then stop them.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let _ = stop_tx.send(true);
        let mut results = Vec::new();
        for w in watchers {
            results.push(w.await.expect("watcher task"));
        }
        // The truth: a fresh watch replaying the history from a survivor.
        let replay_client = Client::connect(&order(other)).await.expect("replay client");
        let truth: Vec<Seen> = {
            let again = replay_client.watch("/w/", options.clone()).await.expect("replay watch");
            let (tx, rx) = tokio::sync::watch::channel(false);
            let task = tokio::spawn(collect(again, rx));
            tokio::time::sleep(Duration::from_secs(2)).await;
            let _ = tx.send(true);
            task.await.expect("replay").0
        };
        assert_eq!(truth.last().map(|e| e.0), Some(last), "the replay reaches the last write");
        for (revision, value) in &acknowledged {
            assert!(
                truth.iter().any(|e| e.0 == *revision && &e.3 == value),
                "acknowledged put {value} at {revision} missing"
            );
        }
        assert!(truth.iter().any(|e| e.1 == 1 && e.2 == "/w/leased"), "the expired lease's key has no DELETE event");
        eprintln!(
            "history: {} events from revision {start} to {last}; watchers resumed {:?} times",
            truth.len(),
            results.iter().map(|r| r.1).collect::<Vec<_>>()
        );
        for (n, (events, resumed)) in results.iter().enumerate() {
            assert_eq!(events, &truth, "watcher {n} (resumed {resumed} times) differs from the history");
        }
        assert!(results[1].1 >= 1, "the watcher on the killed master resumed elsewhere");
        // kvcli: one JSON object per event, the same sequence.
        let text = std::fs::read_to_string(&kvcli_out).unwrap_or_default();
        let printed: Vec<Seen> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| {
                let kind = if v["type"] == "DELETE" { 1 } else { 0 };
                let kv = &v["kv"];
                (
                    kv["mod_revision"].as_i64().unwrap_or(0),
                    kind,
                    kv["key"].as_str().unwrap_or("").to_string(),
                    kv["value"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        let errors = std::fs::read_to_string(&kvcli_err).unwrap_or_default();
        assert_eq!(printed, truth, "kvcli watch printed a different sequence; its stderr:\n{errors}");
        assert!(errors.contains("resumed on"), "kvcli watch should say it resumed: {errors}");
    });
    if let Some(mut child) = kvcli {
        let _ = child.kill();
        let _ = child.wait();
    }
    drop(rt);
    let logs: String = (0..3).map(|i| cluster.log(i)).collect();
    assert!(!logs.contains("panicked"), "a node panicked:\n{logs}");
}

/// `etcdctl` with `args` against every node of `cluster`, its output going to `out`.
fn etcdctl_spawn(bin: &std::path::Path, cluster: &Cluster, args: &[&str], out: &std::path::Path) -> Child {
    let endpoints: Vec<String> = (0..3).map(|i| cluster.endpoint(i)).collect();
    Command::new(bin)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out).expect("etcdctl output file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("etcdctl starts")
}

/// Waits (bounded) until `file` holds a line equal to `line`.
fn wait_for_line(file: &std::path::Path, line: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if std::fs::read_to_string(file).unwrap_or_default().lines().any(|l| l == line) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn kill_child(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// etcd's own recipes through etcdctl (they run client-side on KV, leases and watch): a lock
/// passes to the second contender only when the first releases it, or when the first is
/// killed with -9 and its session lease runs out, also after kill -9 of the leasekv master;
/// an election's observer sees the leader change when the leader is killed.
#[test]
fn etcdctl_lock_and_elect_hand_over_through_kill_9() {
    let Some(bin) = common::tool("etcdctl", "etcd-client") else {
        eprintln!("etcdctl not installed (Debian: etcd-client); skipping (required under CI=true)");
        return;
    };
    let mut cluster = Cluster::start("paxoslease");
    let rt = runtime();
    let master = rt.block_on(master_index(&cluster));
    let dir = cluster.dir.path().to_path_buf();
    let log = dir.join("lock.log");
    let log_arg = log.display().to_string();
    let mut children: Vec<Child> = Vec::new();
    // Release: B runs only after A's command finished.
    let a = format!("echo A >> {log_arg}; sleep 1; echo A-done >> {log_arg}");
    children.push(etcdctl_spawn(&bin, &cluster, &["lock", "--ttl=2", "L", "--", "sh", "-c", &a], &dir.join("a.out")));
    assert!(wait_for_line(&log, "A", Duration::from_secs(15)), "the first contender never got the lock");
    let b = format!("echo B >> {log_arg}");
    children.push(etcdctl_spawn(&bin, &cluster, &["lock", "--ttl=2", "L", "--", "sh", "-c", &b], &dir.join("b.out")));
    assert!(wait_for_line(&log, "B", Duration::from_secs(15)), "the second contender never got the lock");
    let order: Vec<String> = std::fs::read_to_string(&log).unwrap_or_default().lines().map(str::to_string).collect();
    assert_eq!(order, ["A", "A-done", "B"], "the lock was held by two at once");

    // kill -9 of the leasekv master, then of the lock holder: the lease ends, C gets it.
    cluster.kill(master);
    let holder_out = dir.join("holder.out");
    let mut holder = etcdctl_spawn(&bin, &cluster, &["lock", "--ttl=2", "L2"], &holder_out);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&holder_out).unwrap_or_default().trim().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !std::fs::read_to_string(&holder_out).unwrap_or_default().trim().is_empty(),
        "no holder after the failover"
    );
    let c = format!("echo C >> {log_arg}");
    children.push(etcdctl_spawn(&bin, &cluster, &["lock", "--ttl=2", "L2", "--", "sh", "-c", &c], &dir.join("c.out")));
    std::thread::sleep(Duration::from_secs(3));
    assert!(!wait_for_line(&log, "C", Duration::from_millis(10)), "C got the lock while it was held");
    kill_child(&mut holder);
    let killed_at = Instant::now();
    assert!(wait_for_line(&log, "C", Duration::from_secs(15)), "the lock never passed on after kill -9 of its holder");
    eprintln!("the lock passed on {:?} after kill -9 of its holder (session TTL 2 s)", killed_at.elapsed());
    cluster.start_node(master);

    // Elections: the observer follows the leader when it is killed.
    let seen = dir.join("observe.out");
    children.push(etcdctl_spawn(&bin, &cluster, &["elect", "-l", "E"], &seen));
    let mut p1 = etcdctl_spawn(&bin, &cluster, &["elect", "E", "p1"], &dir.join("p1.out"));
    assert!(
        wait_for_line(&seen, "p1", Duration::from_secs(15)),
        "the observer never saw p1 lead; it printed {:?}, p1 printed {:?}",
        std::fs::read_to_string(&seen).unwrap_or_default(),
        std::fs::read_to_string(dir.join("p1.out")).unwrap_or_default()
    );
    children.push(etcdctl_spawn(&bin, &cluster, &["elect", "E", "p2"], &dir.join("p2.out")));
    std::thread::sleep(Duration::from_secs(1));
    assert!(!wait_for_line(&seen, "p2", Duration::from_millis(10)), "p2 led while p1 was alive");
    kill_child(&mut p1);
    std::thread::sleep(Duration::from_secs(1));
    assert!(!wait_for_line(&seen, "p2", Duration::from_millis(10)), "p2 led while p1's session lease was alive");
    // etcdctl 3.4's elect has no --ttl: its session lease lasts 60 s. Rather than wait that
    // out, revoke the dead leader's lease, as an operator would; its key goes, p2 leads.
    let leader = rt.block_on(async {
        let c = client(&cluster.endpoint((master + 1) % 3)).await;
        let options = GetOptions { prefix: true, ..Default::default() };
        let found = eventually(Duration::from_secs(10), || c.get("E/", options)).await;
        let first = found.kvs.iter().min_by_key(|kv| kv.create_revision).map(|kv| kv.lease).expect("a leader key");
        eventually(Duration::from_secs(10), || c.lease_revoke(first)).await;
        first
    });
    assert!(
        wait_for_line(&seen, "p2", Duration::from_secs(15)),
        "the observer never saw p2 take over after the lease {leader:x} of the killed leader was revoked"
    );
    for child in &mut children {
        kill_child(child);
    }
    drop(rt);
    let logs: String = (0..3).map(|i| cluster.log(i)).collect();
    assert!(!logs.contains("panicked"), "a node panicked:\n{logs}");
}

/// `kvcli lock` runs commands one at a time, each with a larger fencing token, passes the
/// command's exit status on; `kvcli elect --listen` sees a `kvcli elect` campaigner lead.
#[test]
fn kvcli_lock_serialises_commands_and_elect_leads() {
    let cluster = Cluster::start("paxoslease");
    let rt = runtime();
    rt.block_on(master_index(&cluster));
    let endpoints: Vec<String> = (0..3).map(|i| cluster.endpoint(i)).collect();
    let log = cluster.dir.path().join("tokens.log");
    let kvcli = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kvcli"));
        c.arg("--endpoints").arg(endpoints.join(",")).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    };
    let script = format!(
        "echo start $LEASEKV_LOCK_TOKEN >> {0}; sleep 0.5; echo end $LEASEKV_LOCK_TOKEN >> {0}; exit 7",
        log.display()
    );
    let mut holders: Vec<Child> = (0..3)
        .map(|_| kvcli(&["lock", "L", "--ttl", "3", "--", "sh", "-c", &script]).spawn().expect("kvcli lock"))
        .collect();
    let mut codes = Vec::new();
    for h in &mut holders {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = h.try_wait() {
                codes.push(status.code());
                break;
            }
            assert!(Instant::now() < deadline, "kvcli lock did not finish");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_eq!(codes, [Some(7), Some(7), Some(7)], "the command's exit status is kvcli's");
    let lines: Vec<(String, i64)> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' ').and_then(|(what, token)| Some((what.to_string(), token.parse().ok()?))))
        .collect();
    assert_eq!(lines.len(), 6, "{lines:?}");
    for pair in lines.chunks(2) {
        assert_eq!((pair[0].0.as_str(), pair[1].0.as_str()), ("start", "end"), "two commands overlapped: {lines:?}");
        assert_eq!(pair[0].1, pair[1].1);
    }
    assert!(lines.windows(3).all(|w| w[0].1 <= w[2].1) && lines[0].1 < lines[4].1, "tokens must grow: {lines:?}");

    let mut listener = kvcli(&["elect", "E", "--listen"]).spawn().expect("kvcli elect --listen");
    let mut campaigner = kvcli(&["elect", "E", "the-one"]).spawn().expect("kvcli elect");
    std::thread::sleep(Duration::from_secs(2));
    let _ = campaigner.kill();
    let won = campaigner.wait_with_output().expect("campaigner output");
    let _ = listener.kill();
    let seen = listener.wait_with_output().expect("listener output");
    let won = String::from_utf8_lossy(&won.stdout).into_owned();
    let seen = String::from_utf8_lossy(&seen.stdout).into_owned();
    assert!(won.lines().nth(1) == Some("the-one"), "the campaigner should print its key and value: {won:?}");
    assert!(seen.lines().any(|l| l == "the-one"), "the listener should print the leader: {seen:?}");
}

/// Many watchers on one stream, created in one burst before the client reads anything,
/// each on its own key, all get their key's live events (on a follower).
#[test]
fn a_burst_of_watchers_on_one_stream_all_see_their_events() {
    use leasekv::client::proto::etcdserverpb::watch_client::WatchClient;
    use leasekv::client::proto::etcdserverpb::watch_request::RequestUnion;
    use leasekv::client::proto::etcdserverpb::{WatchCreateRequest, WatchRequest};
    let cluster = Cluster::start("paxoslease");
    let rt = runtime();
    rt.block_on(async {
        let master = master_index(&cluster).await;
        let follower = (master + 1) % 3;
        let (tx, rx) = tokio::sync::mpsc::channel(256);
        for i in 0..200 {
            let create = WatchCreateRequest { key: format!("/burst/{}", i % 20).into_bytes(), ..Default::default() };
            tx.send(WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) }).await.expect("queue");
        }
        // The follower may still be starting (the master was found through another node).
        let url = format!("http://{}", cluster.endpoint(follower));
        let mut watch = eventually(Duration::from_secs(10), || WatchClient::connect(url.clone())).await;
        let mut stream =
            watch.watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("watch").into_inner();
        let mut created = 0;
        while created < 200 {
            let r = tokio::time::timeout(Duration::from_secs(10), stream.message()).await;
            let r = r.expect("created in time").expect("stream ok").expect("stream open");
            created += usize::from(r.created);
        }
        let c = client(&cluster.endpoint(master)).await;
        for k in 0..20 {
            eventually(Duration::from_secs(10), || c.put(format!("/burst/{k}"), "v", 0, false)).await;
        }
        let mut events = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while events < 200 && Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_secs(5), stream.message()).await {
                Ok(Ok(Some(r))) => events += r.events.len(),
                other => panic!("the stream ended after {events} events: {other:?}"),
            }
        }
        assert_eq!(events, 200, "every watcher gets its key's put");
        drop(tx);
    });
}

/// A watch created right after a put was answered, on the same node and without a start
/// revision, starts after that put (as etcd's does), with a header no older than the put's:
/// the node answers a turn's writes before their engine write, which watch streams read.
#[test]
fn a_watch_created_after_an_answered_put_starts_after_it() {
    use leasekv::client::proto::etcdserverpb as pb;
    use pb::watch_request::RequestUnion;
    let cluster = Cluster::start("paxoslease");
    let rt = runtime();
    rt.block_on(async {
        let master = master_index(&cluster).await;
        let url = format!("http://{}", cluster.endpoint(master));
        let mut kv = eventually(Duration::from_secs(10), || pb::kv_client::KvClient::connect(url.clone())).await;
        let mut watch = pb::watch_client::WatchClient::connect(url).await.expect("connects");
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let mut stream =
            watch.watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("watch").into_inner();
        const WATCHES: usize = 100;
        let mut keys = std::collections::HashMap::new();
        for i in 0..WATCHES {
            let key = format!("/after/{i}").into_bytes();
            let put = pb::PutRequest { key: key.clone(), value: b"first".to_vec(), ..Default::default() };
            let put = eventually(Duration::from_secs(10), || {
                let (mut kv, put) = (kv.clone(), put.clone());
                async move { kv.put(put).await }
            })
            .await
            .into_inner();
            let put_revision = put.header.expect("a header").revision;
            let create = pb::WatchCreateRequest { key: key.clone(), ..Default::default() };
            tx.send(pb::WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) })
                .await
                .expect("queue");
            let created = tokio::time::timeout(Duration::from_secs(10), stream.message()).await;
            let created = created.expect("created in time").expect("stream ok").expect("stream open");
            assert!(created.created && created.events.is_empty(), "{created:?}");
            let header = created.header.expect("a header").revision;
            assert!(header >= put_revision, "watch {i} created at {header}, after a put answered at {put_revision}");
            keys.insert(created.watch_id, key);
        }
        for key in keys.values() {
            let put = pb::PutRequest { key: key.clone(), value: b"second".to_vec(), ..Default::default() };
            kv.put(put).await.expect("a second put");
        }
        let mut first = std::collections::HashMap::new();
        while first.len() < WATCHES {
            let r = tokio::time::timeout(Duration::from_secs(10), stream.message()).await;
            let r = r.expect("events in time").expect("stream ok").expect("stream open");
            for event in r.events {
                let value = event.kv.expect("a key-value").value;
                first.entry(r.watch_id).or_insert(value);
            }
        }
        assert!(first.values().all(|v| v == b"second"), "a watch saw the put made before it was created");
        drop(tx);
    });
}

/// The client-port limits of `[limits]` and the peer protocol version, on real processes:
/// each excess gets its clear error and the node goes on serving.
#[test]
fn client_limits_and_a_peer_of_another_protocol_version_get_clear_errors() {
    use leasekv::client::proto::etcdserverpb as pb;
    use leasekv::server::peer::proto::{peer_client::PeerClient, PeerEnvelope};
    use std::io::{Read, Write};
    let limits = "[limits]\nmax_leases = 2\nmax_client_connections = 16\nmax_request_bytes = 65536\n";
    let cluster = Cluster::start_with("paxoslease", limits);
    let rt = runtime();
    rt.block_on(async {
        let master = master_index(&cluster).await;
        let url = format!("http://{}", cluster.endpoint(master));
        let mut kv = pb::kv_client::KvClient::connect(url.clone()).await.expect("connects");
        let mut lease = pb::lease_client::LeaseClient::connect(url).await.expect("connects");
        // [limits] max_leases: the third live lease is refused.
        for _ in 0..2 {
            eventually(Duration::from_secs(10), || {
                let mut lease = lease.clone();
                async move { lease.lease_grant(pb::LeaseGrantRequest { ttl: 60, id: 0 }).await }
            })
            .await;
        }
        let err = lease.lease_grant(pb::LeaseGrantRequest { ttl: 60, id: 0 }).await.expect_err("a third lease");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
        assert!(err.message().contains("too many leases") && err.message().contains("max_leases"), "{err:?}");
        // [limits] max_request_bytes: etcd's error within the framing allowance, refused
        // unread beyond it.
        let put = |len: usize| pb::PutRequest { key: b"/big".to_vec(), value: vec![b'x'; len], ..Default::default() };
        let err = kv.put(put(70_000)).await.expect_err("over max_request_bytes");
        assert_eq!((err.code(), err.message()), (tonic::Code::InvalidArgument, "etcdserver: request is too large"));
        let err = kv.put(put(700_000)).await.expect_err("over the gRPC message limit");
        assert_eq!(err.code(), tonic::Code::OutOfRange, "{err:?}");
        kv.put(put(1000)).await.expect("a put within the limit");
    });
    // The gateway's body limit follows max_request_bytes.
    let port = cluster.client_ports[0];
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects");
    let body = format!("{{\"key\":\"Zm9v\",\"value\":\"{}\"}}", "A".repeat(200_000));
    let head =
        format!("POST /v3/kv/put HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
    s.write_all(head.as_bytes()).and_then(|_| s.write_all(body.as_bytes())).expect("sent");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("request is too large"), "{answer}");
    // [limits] max_client_connections: connections beyond it are closed at once.
    let held: Vec<_> = (0..24).filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).ok()).collect();
    // A refused connection reads EOF (or a reset) at once; an admitted one waits for a
    // request, so its read times out.
    let closed = held
        .iter()
        .filter(|s| {
            let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
            let mut reader: &std::net::TcpStream = s;
            match reader.read(&mut [0u8; 64]) {
                Ok(n) => n == 0,
                Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
            }
        })
        .count();
    // Beyond 16, less the ones the earlier clients may still hold.
    assert!(closed >= 6, "{closed} of 24 connections were closed, expected those beyond 16");
    drop(held);
    rt.block_on(async {
        // A peer speaking another protocol version is disconnected with a clear error.
        let peer = format!("http://127.0.0.1:{}", cluster.peer_ports[0]);
        for version in [0, 99] {
            let channel = tonic::transport::Endpoint::from_shared(peer.clone()).expect("endpoint").connect_lazy();
            let envelope = PeerEnvelope { from: 2, payload: vec![0xff; 4], more: vec![], version };
            let err = PeerClient::new(channel).send(tokio_stream::iter(vec![envelope])).await.expect_err("refused");
            assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
            assert!(err.message().contains("peer protocol version mismatch"), "{err:?}");
        }
        // And the node still serves.
        let c = client(&cluster.endpoint(0)).await;
        eventually(Duration::from_secs(10), || c.put("/still", "up", 0, false)).await;
    });
}

/// A node writes what it applied to its state engine at most every few milliseconds (one
/// batch for many puts), so puts must be readable at once from the replica, and a watch
/// created afterwards, from an old revision, must still get every event, on the master and
/// on a follower, without another write to push them out.
#[test]
fn puts_not_yet_in_the_engine_are_read_at_once_and_reach_a_later_watch() {
    use leasekv::client::proto::etcdserverpb as pb;
    use pb::watch_request::RequestUnion;
    let cluster = Cluster::start("paxoslease");
    let rt = runtime();
    rt.block_on(async {
        let master = master_index(&cluster).await;
        let url = |i: usize| format!("http://{}", cluster.endpoint(i));
        let mut kv = eventually(Duration::from_secs(10), || pb::kv_client::KvClient::connect(url(master))).await;
        const PUTS: usize = 50;
        let mut first_revision = 0;
        for i in 0..PUTS {
            let key = format!("/unwatched/{i}").into_bytes();
            let put = pb::PutRequest { key: key.clone(), value: format!("v{i}").into_bytes(), ..Default::default() };
            let put = eventually(Duration::from_secs(10), || {
                let (mut kv, put) = (kv.clone(), put.clone());
                async move { kv.put(put).await }
            })
            .await
            .into_inner();
            let revision = put.header.expect("a header").revision;
            if i == 0 {
                first_revision = revision;
            }
            let got = kv.range(pb::RangeRequest { key: key.clone(), ..Default::default() }).await.expect("a get");
            let got = got.into_inner();
            assert_eq!(got.kvs.len(), 1, "put {i} is read back at once");
            assert_eq!(got.kvs[0].value, format!("v{i}").into_bytes());
            assert_eq!(got.kvs[0].mod_revision, revision);
        }
        for node in [master, (master + 1) % 3] {
            let mut watch =
                eventually(Duration::from_secs(10), || pb::watch_client::WatchClient::connect(url(node))).await;
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            let create = pb::WatchCreateRequest {
                key: b"/unwatched/".to_vec(),
                range_end: b"/unwatched0".to_vec(),
                start_revision: first_revision,
                ..Default::default()
            };
            tx.send(pb::WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) })
                .await
                .expect("queue");
            let mut stream =
                watch.watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await.expect("watch").into_inner();
            let mut events = 0;
            while events < PUTS {
                let r = tokio::time::timeout(Duration::from_secs(10), stream.message()).await;
                let r = r.unwrap_or_else(|_| panic!("node {node}: only {events} of {PUTS} events in 10 s"));
                events += r.expect("stream ok").expect("stream open").events.len();
            }
            assert_eq!(events, PUTS, "node {node}: every put once");
            drop(tx);
        }
    });
}
