//! A node flooded by clients keeps serving its peers: client requests beyond
//! `[limits] max_queued_requests` are refused with etcd's "too many requests", while the
//! log's messages and the answers to forwards, on a queue of their own that the node serves
//! first, keep flowing (no takeover, no write of unknown outcome). A request a follower
//! forwards takes a place in the master's client queue like a client's own (peer protocol
//! version 3): refused the same way when it is full, and then never applied.

use crate::common;

use common::cluster::{client, eventually, master_index, runtime, Cluster};
use leasekv::client::proto::etcdserverpb as pb;
use leasekv::client::GetOptions;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the flood lasts.
const FLOOD: Duration = Duration::from_secs(4);
/// Concurrent flooding callers, over a few connections.
const CALLERS: usize = 256;
const CONNECTIONS: usize = 4;

/// The master's term and id, as a linearizable read's header states them.
async fn term_and_member(kv: &mut pb::kv_client::KvClient<tonic::transport::Channel>) -> (u64, u64) {
    let header = kv
        .range(pb::RangeRequest { key: b"/probe".to_vec(), ..Default::default() })
        .await
        .expect("a read outside the flood")
        .into_inner()
        .header
        .expect("a header");
    (header.raft_term, header.member_id)
}

/// One of a node's metrics, from its `/metrics` page.
fn metric(endpoint: &str, name: &str) -> f64 {
    let mut response = ureq::get(&format!("http://{endpoint}/metrics")).call().expect("a scrape");
    let page = response.body_mut().read_to_string().expect("the exposition");
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not on the metrics page"))
}

#[test]
fn a_node_flooded_by_clients_refuses_them_and_keeps_serving_its_peers() {
    let cluster = Cluster::start_with("paxoslease", "[limits]\nmax_queued_requests = 16\n");
    let rt = runtime();
    rt.block_on(async {
        let master = master_index(&cluster).await;
        let follower = (master + 1) % 3;
        let master_url = format!("http://{}", cluster.endpoint(master));
        let mut probe = pb::kv_client::KvClient::connect(master_url.clone()).await.expect("connects");
        let (term_before, master_before) = term_and_member(&mut probe).await;

        // The writer: puts through a follower, each forwarded to the flooded master.
        let writer = client(&cluster.endpoint(follower)).await;
        eventually(Duration::from_secs(10), || writer.put("/overload/warm-up", "x", 0, false)).await;

        let refused = Arc::new(AtomicUsize::new(0));
        let served = Arc::new(AtomicUsize::new(0));
        let deadline = Instant::now() + FLOOD;
        let mut flood = Vec::new();
        for connection in 0..CONNECTIONS {
            let channel = tonic::transport::Endpoint::from_shared(master_url.clone())
                .expect("url")
                .connect()
                .await
                .expect("connects");
            for caller in 0..CALLERS / CONNECTIONS {
                let mut kv = pb::kv_client::KvClient::new(channel.clone());
                let (refused, served) = (refused.clone(), served.clone());
                let key = format!("/overload/{connection}/{caller}").into_bytes();
                flood.push(tokio::spawn(async move {
                    while Instant::now() < deadline {
                        match kv.range(pb::RangeRequest { key: key.clone(), ..Default::default() }).await {
                            Ok(_) => served.fetch_add(1, Ordering::Relaxed),
                            Err(status) => {
                                assert_eq!(
                                    (status.code(), status.message()),
                                    (tonic::Code::ResourceExhausted, "etcdserver: too many requests"),
                                    "a flooding read failed otherwise"
                                );
                                refused.fetch_add(1, Ordering::Relaxed)
                            }
                        };
                    }
                }));
            }
        }

        // Each attempt has a key of its own, so that a refused one can be checked absent.
        let (mut writes, mut attempts, mut refused_writes) = (0, 0, Vec::new());
        while Instant::now() < deadline {
            let key = format!("/overload/write/{attempts}");
            attempts += 1;
            match writer.put(key.as_str(), "v", 0, false).await {
                Ok(_) => writes += 1,
                Err(error) if error.to_string().contains("etcdserver: too many requests") => {
                    refused_writes.push(key);
                    // What a client does with "too many requests": back off a little.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(error) => panic!("a put forwarded to the flooded master failed after {writes}: {error}"),
            }
        }
        for caller in flood {
            caller.await.expect("a flooding caller");
        }

        let (refused, served) = (refused.load(Ordering::Relaxed), served.load(Ordering::Relaxed));
        eprintln!(
            "flood: {served} reads served, {refused} refused; {writes} forwarded puts, {} refused",
            refused_writes.len()
        );
        assert!(refused > 0, "the flood never filled the queue of 16: the test proves nothing ({served} served)");
        assert!(writes >= 20, "only {writes} forwarded puts in {FLOOD:?}");
        let (term_after, master_after) = term_and_member(&mut probe).await;
        assert_eq!((term_after, master_after), (term_before, master_before), "a takeover during the flood");
        let endpoint = cluster.endpoint(master);
        assert_eq!(metric(&endpoint, "leasekv_peer_messages_dropped_total"), 0.0);
        assert!(metric(&endpoint, "leasekv_client_requests_refused_total") >= refused as f64);
        assert!(metric(&endpoint, "leasekv_forwards_refused_total") >= refused_writes.len() as f64);
        // Every forwarded put that succeeded is there, and none that was refused.
        let written = writer
            .get("/overload/write/", GetOptions { prefix: true, keys_only: true, ..Default::default() })
            .await
            .expect("a read after the flood");
        let written: std::collections::HashSet<Vec<u8>> = written.kvs.into_iter().map(|kv| kv.key).collect();
        assert_eq!(written.len(), writes, "forwarded puts acknowledged and found");
        for key in &refused_writes {
            assert!(!written.contains(key.as_bytes()), "{key} was refused as 'too many requests' but applied");
        }
    });
}

/// A flood sent only through the followers: every write is forwarded, and the master's
/// client queue bounds them as it would bound the same flood sent to it. The refusals are
/// etcd's "too many requests" and nothing refused is applied; the master keeps its lease
/// (no takeover), drops no peer message, and a lease kept alive through a follower during
/// the flood stays alive (a forwarded keepalive is not refused while the peer queue has
/// room).
#[test]
fn a_flood_through_the_followers_only_is_bounded_by_the_masters_queue() {
    let cluster = Cluster::start_with("paxoslease", "[limits]\nmax_queued_requests = 16\n");
    let rt = runtime();
    rt.block_on(async {
        let master = master_index(&cluster).await;
        let followers = [(master + 1) % 3, (master + 2) % 3];
        let mut probe =
            pb::kv_client::KvClient::connect(format!("http://{}", cluster.endpoint(master))).await.expect("connects");
        let (term_before, master_before) = term_and_member(&mut probe).await;
        let holder = client(&cluster.endpoint(followers[0])).await;
        let lease = eventually(Duration::from_secs(10), || holder.lease_grant(2, 0)).await.id;

        let refused = Arc::new(AtomicUsize::new(0));
        let applied = Arc::new(std::sync::Mutex::new(Vec::new()));
        let refused_keys = Arc::new(std::sync::Mutex::new(Vec::new()));
        let deadline = Instant::now() + FLOOD;
        let mut flood = Vec::new();
        for (side, follower) in followers.into_iter().enumerate() {
            let url = format!("http://{}", cluster.endpoint(follower));
            let channel = tonic::transport::Endpoint::from_shared(url).expect("url").connect().await.expect("connects");
            for caller in 0..CALLERS / 2 {
                let mut kv = pb::kv_client::KvClient::new(channel.clone());
                let (refused, applied, refused_keys) = (refused.clone(), applied.clone(), refused_keys.clone());
                flood.push(tokio::spawn(async move {
                    let mut attempt = 0;
                    while Instant::now() < deadline {
                        let key = format!("/follower-flood/{side}/{caller}/{attempt}").into_bytes();
                        attempt += 1;
                        let put = pb::PutRequest { key: key.clone(), value: b"v".to_vec(), ..Default::default() };
                        match kv.put(put).await {
                            Ok(_) => applied.lock().expect("not poisoned").push(key),
                            Err(status) => {
                                assert_eq!(
                                    (status.code(), status.message()),
                                    (tonic::Code::ResourceExhausted, "etcdserver: too many requests"),
                                    "a put through a follower failed otherwise"
                                );
                                refused.fetch_add(1, Ordering::Relaxed);
                                refused_keys.lock().expect("not poisoned").push(key);
                            }
                        }
                    }
                }));
            }
        }
        // The lease's holder renews it through a follower every 500 ms during the flood.
        let mut renewals = 0;
        while Instant::now() < deadline {
            let ttl = holder.lease_keep_alive_once(lease).await.expect("a keepalive during the flood").ttl;
            assert!(ttl > 0, "the lease expired during the flood");
            renewals += 1;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        for caller in flood {
            caller.await.expect("a flooding caller");
        }

        let refused = refused.load(Ordering::Relaxed);
        let applied = std::mem::take(&mut *applied.lock().expect("not poisoned"));
        let refused_keys = std::mem::take(&mut *refused_keys.lock().expect("not poisoned"));
        eprintln!("follower flood: {} puts applied, {refused} refused, {renewals} renewals", applied.len());
        assert!(refused > 0, "the flood never filled the master's queue of 16: the test proves nothing");
        assert!(!applied.is_empty(), "no forwarded put got through in {FLOOD:?}");
        let (term_after, master_after) = term_and_member(&mut probe).await;
        assert_eq!((term_after, master_after), (term_before, master_before), "a takeover during the flood");
        let endpoint = cluster.endpoint(master);
        assert_eq!(metric(&endpoint, "leasekv_peer_messages_dropped_total"), 0.0);
        // A follower's own queue (16 too) refuses some; the master refuses forwards.
        assert!(metric(&endpoint, "leasekv_forwards_refused_total") > 0.0, "the master refused no forward");
        let ttl = holder.lease_time_to_live(lease, false).await.expect("the lease after the flood").ttl;
        assert!(ttl > 0, "the lease kept alive through a follower expired");
        let written = holder
            .get("/follower-flood/", GetOptions { prefix: true, keys_only: true, ..Default::default() })
            .await
            .expect("a read after the flood");
        let written: std::collections::HashSet<Vec<u8>> = written.kvs.into_iter().map(|kv| kv.key).collect();
        assert_eq!(written.len(), applied.len(), "forwarded puts acknowledged and found");
        for key in &refused_keys {
            assert!(!written.contains(key), "{} was refused but applied", String::from_utf8_lossy(key));
        }
    });
}
