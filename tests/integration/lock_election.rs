//! etcd's Lock and Election services exclude on leasekv as they do on etcd: checked side by
//! side with a real etcd (Debian's `etcd-server`), over gRPC and over the HTTP/JSON gateway,
//! and the same rules for the client library and `kvcli lock`.
//!
//! The two rules, as etcd's server keeps them (its `v3lock` and `v3election` servers run
//! the `concurrency` recipes):
//! - a Lock or Campaign without a lease (`lease` = 0) gets a lease of its own (60 s, not kept
//!   alive) and the key `NAME/<that lease in hex>`, so a second such caller waits;
//! - a call that ends before it acquired (its deadline passes, the client goes away) deletes
//!   its key: it never holds afterwards, and a later caller does not queue behind it.
//!
//! Every scenario runs against both stores and prints a transcript of what a client can
//! observe (key shapes, who waits, error codes, how many contenders are queued); the two
//! transcripts must be equal. leasekv is reached through a follower, so its calls are
//! forwarded to the master as a client's would be.
//!
//! Without etcd the test skips, except under `CI=true`, where it fails.

use crate::common;

use base64::Engine;
use common::cluster::{runtime, Cluster};
use leasekv::client::proto::etcdserverpb::{
    kv_client::KvClient, lease_client::LeaseClient, LeaseGrantRequest, LeaseTimeToLiveRequest, RangeRequest,
};
use leasekv::client::proto::v3electionpb::{
    election_client::ElectionClient, CampaignRequest, LeaderRequest, ResignRequest,
};
use leasekv::client::proto::v3lockpb::{lock_client::LockClient, LockRequest, UnlockRequest};
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// How long a caller that must wait is watched to be still waiting.
const STILL_WAITING: Duration = Duration::from_millis(700);
/// The deadline of a waiter that gives up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(1);
/// The longest any call that must end may take (a wait that should end at once included).
const CALL_LIMIT: Duration = Duration::from_secs(10);
/// How long a withdrawn key may take to go.
const WITHDRAW_LIMIT: Duration = Duration::from_secs(3);

/// A gRPC channel to `endpoint`, retried while the server starts.
async fn channel(endpoint: &str) -> Channel {
    let endpoint = Channel::from_shared(format!("http://{endpoint}")).expect("a valid endpoint URL");
    common::cluster::eventually(Duration::from_secs(20), || endpoint.connect()).await
}

/// `NAME/<lease hex>` for a key named after the nonzero lease that holds it, else the key.
fn shape(name: &str, key: &[u8], lease: i64) -> String {
    let key = String::from_utf8_lossy(key);
    if lease != 0 && key == format!("{name}/{lease:x}") {
        format!("{name}/<its lease in hex>")
    } else {
        key.into_owned()
    }
}

/// The keys queued under `name/`.
async fn queued(kv: &mut KvClient<Channel>, name: &str) -> usize {
    let request = RangeRequest {
        key: format!("{name}/").into_bytes(),
        range_end: format!("{name}0").into_bytes(),
        count_only: true,
        ..Default::default()
    };
    kv.range(request).await.map(|r| r.into_inner().count as usize).unwrap_or(usize::MAX)
}

/// Waits (bounded) until `name/` holds `want` keys; says how many it ended with.
async fn queued_becomes(kv: &mut KvClient<Channel>, name: &str, want: usize) -> usize {
    let deadline = Instant::now() + WITHDRAW_LIMIT;
    loop {
        let now = queued(kv, name).await;
        if now == want || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The lease holding `key` and that lease's granted TTL.
async fn lease_of(channel: &Channel, key: &[u8]) -> (i64, i64) {
    let mut kv = KvClient::new(channel.clone());
    let found = kv.range(RangeRequest { key: key.to_vec(), ..Default::default() }).await.expect("range").into_inner();
    let lease = found.kvs.first().map_or(0, |kv| kv.lease);
    let ttl = LeaseClient::new(channel.clone())
        .lease_time_to_live(LeaseTimeToLiveRequest { id: lease, keys: false })
        .await
        .map_or(-1, |r| r.into_inner().granted_ttl);
    (lease, ttl)
}

/// How a call with a deadline that passed ended. etcd answers Cancelled or Unknown (its
/// server's internal client reports the cancellation either way, depending on where the
/// deadline meets it), and a client's own deadline shows as DeadlineExceeded: all three
/// mean it gave up.
fn deadline_outcome(status: &tonic::Status) -> String {
    match status.code() {
        tonic::Code::Cancelled | tonic::Code::Unknown | tonic::Code::DeadlineExceeded => "gave up".to_string(),
        other => format!("{other:?}: {}", status.message()),
    }
}

/// How a call sent with a [`GIVE_UP_AFTER`] deadline ended: `acquired` if it succeeded,
/// else [`deadline_outcome`]; watched for at most three times the deadline.
async fn given_up<T>(
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    acquired: &str,
) -> String {
    match tokio::time::timeout(GIVE_UP_AFTER * 3, call).await {
        Ok(Ok(_)) => acquired.to_string(),
        Ok(Err(status)) => deadline_outcome(&status),
        Err(_) => "still waiting after 3 s".to_string(),
    }
}

/// Two lockers without a lease: the second waits for the first's unlock.
async fn lock_without_lease(channel: &Channel, out: &mut Vec<String>) {
    let name = "nolease";
    let mut lock = LockClient::new(channel.clone());
    let first = lock.lock(LockRequest { name: name.into(), lease: 0 }).await.expect("first lock").into_inner().key;
    let (lease, ttl) = lease_of(channel, &first).await;
    out.push(format!("lock without a lease holds {} (lease TTL {ttl} s)", shape(name, &first, lease)));
    let mut other = lock.clone();
    let second = tokio::spawn(async move { other.lock(LockRequest { name: name.into(), lease: 0 }).await });
    tokio::time::sleep(STILL_WAITING).await;
    out.push(format!("a second locker without a lease waits: {}", !second.is_finished()));
    lock.unlock(UnlockRequest { key: first.clone() }).await.expect("unlock");
    let got = tokio::time::timeout(CALL_LIMIT, second).await.expect("the second lock ends").expect("join");
    let key = got.expect("the second lock").into_inner().key;
    let (lease, _) = lease_of(channel, &key).await;
    out.push(format!("after the unlock it holds {}; another key: {}", shape(name, &key, lease), key != first));
    lock.unlock(UnlockRequest { key }).await.expect("unlock");
}

/// A locker with a deadline gives up while the lock is held; after the unlock, a new
/// locker holds at once. `with_lease`: the waiter brings its own lease.
async fn lock_waiter_gives_up(channel: &Channel, with_lease: bool, out: &mut Vec<String>) {
    let name = if with_lease { "giveup-lease" } else { "giveup" };
    let mut lock = LockClient::new(channel.clone());
    let mut kv = KvClient::new(channel.clone());
    let lease = if with_lease {
        let mut leases = LeaseClient::new(channel.clone());
        leases.lease_grant(LeaseGrantRequest { ttl: 60, id: 0 }).await.expect("grant").into_inner().id
    } else {
        0
    };
    let held = lock.lock(LockRequest { name: name.into(), lease: 0 }).await.expect("lock").into_inner().key;
    let mut request = tonic::Request::new(LockRequest { name: name.into(), lease });
    request.set_timeout(GIVE_UP_AFTER);
    let outcome = given_up(lock.clone().lock(request), "acquired").await;
    out.push(format!("{name}: a waiter with a 1 s deadline: {outcome}"));
    out.push(format!("{name}: keys queued once it gave up: {}", queued_becomes(&mut kv, name, 1).await));
    lock.unlock(UnlockRequest { key: held }).await.expect("unlock");
    let started = Instant::now();
    let next = tokio::time::timeout(CALL_LIMIT, lock.lock(LockRequest { name: name.into(), lease: 0 })).await;
    let next = next.expect("the next lock ends").expect("the next lock").into_inner().key;
    out.push(format!(
        "{name}: after the unlock a new locker holds within 1 s: {}",
        started.elapsed() < Duration::from_secs(1)
    ));
    lock.unlock(UnlockRequest { key: next }).await.expect("unlock");
}

/// Two campaigns without a lease, and a campaigner with a deadline that gives up.
async fn campaign_without_lease(channel: &Channel, out: &mut Vec<String>) {
    let name = "elect";
    let mut election = ElectionClient::new(channel.clone());
    let mut kv = KvClient::new(channel.clone());
    let campaign = |value: &str| CampaignRequest { name: name.into(), lease: 0, value: value.into() };
    let first = election.campaign(campaign("a")).await.expect("campaign").into_inner().leader.expect("leader key");
    let (lease, ttl) = lease_of(channel, &first.key).await;
    out.push(format!(
        "campaign without a lease leads as {} (leader key's lease is the key's: {}, TTL {ttl} s)",
        shape(name, &first.key, first.lease),
        lease == first.lease
    ));
    let mut other = election.clone();
    let request = campaign("b");
    let second = tokio::spawn(async move { other.campaign(request).await });
    tokio::time::sleep(STILL_WAITING).await;
    out.push(format!("a second campaign without a lease waits: {}", !second.is_finished()));
    let mut request = tonic::Request::new(campaign("c"));
    request.set_timeout(GIVE_UP_AFTER);
    let outcome = given_up(election.clone().campaign(request), "leads").await;
    out.push(format!("a third campaign with a 1 s deadline: {outcome}"));
    out.push(format!("candidates once it gave up: {}", queued_becomes(&mut kv, name, 2).await));
    election.resign(ResignRequest { leader: Some(first) }).await.expect("resign");
    let won = tokio::time::timeout(CALL_LIMIT, second).await.expect("the second campaign ends").expect("join");
    let won = won.expect("the second campaign").into_inner().leader.expect("leader key");
    let leader = election.leader(LeaderRequest { name: name.into() }).await.expect("leader").into_inner();
    let value = leader.kv.map(|kv| String::from_utf8_lossy(&kv.value).into_owned());
    out.push(format!("after the resign the second leads, value {value:?}"));
    election.resign(ResignRequest { leader: Some(won) }).await.expect("resign");
    let none = election.leader(LeaderRequest { name: name.into() }).await;
    out.push(format!("after both resigned: {:?}", none.map(|_| ()).map_err(|s| s.message().to_string())));
}

/// An HTTP/JSON gateway call, blocking; the status and the body as JSON (or the error).
fn post(port: u16, path: &str, body: &Value, timeout: Duration) -> Result<(u16, Value), String> {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout)).build().into();
    let url = format!("http://127.0.0.1:{port}{path}");
    let mut response = agent.post(&url).header("content-type", "application/json").send(body.to_string().as_bytes());
    match &mut response {
        Ok(response) => {
            let text = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
            Ok((response.status().as_u16(), serde_json::from_str(&text).unwrap_or(Value::String(text))))
        }
        Err(error) => Err(error.to_string()),
    }
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// How many keys are queued under `name/`, through the gateway.
fn queued_http(port: u16, name: &str) -> usize {
    let body = json!({"key": b64(&format!("{name}/")), "range_end": b64(&format!("{name}0")), "count_only": true});
    match post(port, "/v3/kv/range", &body, CALL_LIMIT) {
        Ok((200, answer)) => match &answer["count"] {
            Value::String(n) => n.parse().unwrap_or(usize::MAX),
            Value::Number(n) => n.as_u64().map_or(usize::MAX, |n| n as usize),
            _ => 0,
        },
        _ => usize::MAX,
    }
}

/// The lock and campaign rules through the HTTP/JSON gateway: two lockers without a lease,
/// a locker that disconnects while it waits, two campaigns without a lease.
fn over_the_gateway(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    let lock = move |name: &str, timeout: Duration| post(port, "/v3/lock/lock", &json!({"name": b64(name)}), timeout);
    let (status, first) = lock("http", CALL_LIMIT).expect("lock over HTTP");
    out.push(format!("HTTP lock without a lease: {status}, key ends in /0: {}", first["key"] == b64("http/0")));
    let waiter = std::thread::spawn(move || lock("http", CALL_LIMIT));
    std::thread::sleep(STILL_WAITING);
    out.push(format!("a second HTTP locker waits: {}", !waiter.is_finished()));
    let unlocked = post(port, "/v3/lock/unlock", &json!({"key": first["key"]}), CALL_LIMIT).map(|(s, _)| s);
    out.push(format!("HTTP unlock: {unlocked:?}"));
    let (status, second) = waiter.join().expect("join").expect("the second HTTP lock");
    out.push(format!("then the second holds: {status}, another key: {}", second["key"] != first["key"]));
    // A client that gives up on the HTTP request: the connection closes while it waits.
    let gave_up = lock("http", GIVE_UP_AFTER);
    out.push(format!(
        "an HTTP locker that disconnects after 1 s: {}",
        if gave_up.is_err() { "gave up" } else { "held" }
    ));
    let deadline = Instant::now() + WITHDRAW_LIMIT;
    while queued_http(port, "http") != 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    out.push(format!("keys queued once it disconnected: {}", queued_http(port, "http")));
    post(port, "/v3/lock/unlock", &json!({"key": second["key"]}), CALL_LIMIT).expect("unlock");
    let started = Instant::now();
    let (status, third) = lock("http", CALL_LIMIT).expect("a third HTTP lock");
    out.push(format!("a new HTTP locker holds within 1 s: {status} {}", started.elapsed() < Duration::from_secs(1)));
    post(port, "/v3/lock/unlock", &json!({"key": third["key"]}), CALL_LIMIT).expect("unlock");
    // Campaigns.
    let campaign = move |value: &str| {
        post(port, "/v3/election/campaign", &json!({"name": b64("httpelect"), "value": b64(value)}), CALL_LIMIT)
    };
    let (status, first) = campaign("a").expect("campaign over HTTP");
    out.push(format!(
        "HTTP campaign without a lease: {status}, lease given: {}",
        first["leader"]["lease"] != json!(null)
    ));
    let waiter = std::thread::spawn(move || campaign("b"));
    std::thread::sleep(STILL_WAITING);
    out.push(format!("a second HTTP campaign waits: {}", !waiter.is_finished()));
    let resigned = post(port, "/v3/election/resign", &json!({"leader": first["leader"]}), CALL_LIMIT).map(|(s, _)| s);
    out.push(format!("HTTP resign: {resigned:?}"));
    let (status, second) = waiter.join().expect("join").expect("the second HTTP campaign");
    out.push(format!("then the second leads: {status}"));
    post(port, "/v3/election/resign", &json!({"leader": second["leader"]}), CALL_LIMIT).expect("resign");
    out
}

/// Every scenario against one store: `endpoint` for gRPC, `http_port` for the gateway.
async fn transcript(endpoint: String, http_port: u16) -> Vec<String> {
    let channel = channel(&endpoint).await;
    let mut out = Vec::new();
    lock_without_lease(&channel, &mut out).await;
    lock_waiter_gives_up(&channel, false, &mut out).await;
    lock_waiter_gives_up(&channel, true, &mut out).await;
    campaign_without_lease(&channel, &mut out).await;
    let gateway = tokio::task::spawn_blocking(move || over_the_gateway(http_port)).await.expect("gateway scenarios");
    out.extend(gateway);
    out
}

/// The tests of this file one at a time: each starts a cluster on ports it picked free and
/// released, which a cluster started at the same moment could pick too.
static ONE_CLUSTER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn lock_and_election_exclude_as_etcds_do() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((etcd, cluster, master)) = common::etcd::beside_leasekv(dir.path()) else { return };
    let follower = (master + 1) % 3;
    let (theirs, ours) = runtime().block_on(async {
        tokio::join!(
            transcript(etcd.endpoint(), etcd.client_port),
            transcript(cluster.endpoint(follower), cluster.client_ports[follower])
        )
    });
    eprintln!("leasekv's transcript:\n  {}", ours.join("\n  "));
    assert_eq!(ours, theirs, "leasekv's Lock/Election transcript (left) differs from etcd's (right)");
}

/// The client library: a lock call dropped while it waits (here by a timeout around it)
/// withdraws its key, so the next locker holds at once after the unlock.
#[test]
fn a_dropped_client_lock_call_leaves_no_key() {
    let _turn = one_at_a_time();
    let cluster = Cluster::start("paxoslease");
    runtime().block_on(async {
        let client = common::cluster::client(&cluster.endpoint(0)).await;
        let channel = channel(&cluster.endpoint(0)).await;
        let mut kv = KvClient::new(channel);
        let held = client.lock("lib", 0).await.expect("lock").key;
        let gave_up = tokio::time::timeout(GIVE_UP_AFTER, client.lock("lib", 0)).await;
        assert!(gave_up.is_err(), "the second lock must wait while the first holds: {gave_up:?}");
        assert_eq!(queued_becomes(&mut kv, "lib", 1).await, 1, "the dropped call's key must be withdrawn");
        client.unlock(held).await.expect("unlock");
        let next = tokio::time::timeout(Duration::from_secs(1), client.lock("lib", 0)).await;
        assert!(next.is_ok_and(|r| r.is_ok()), "after the unlock a new locker holds at once");
    });
}

/// `kvcli lock`: a waiting kvcli killed with SIGKILL (no chance to revoke its session)
/// leaves no key behind, so the next kvcli holds as soon as the holder lets go, not when
/// the killed one's session lease (10 s) runs out.
#[test]
fn a_killed_kvcli_waiter_leaves_no_key() {
    let _turn = one_at_a_time();
    let cluster = Cluster::start("paxoslease");
    let endpoints = (0..3).map(|i| cluster.endpoint(i)).collect::<Vec<_>>().join(",");
    let kvcli = |command: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kvcli"))
            .args(["--endpoints", &endpoints, "lock", "cli", "--"])
            .args(command)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("kvcli starts")
    };
    let rt = runtime();
    rt.block_on(common::cluster::master_index(&cluster));
    let channel = rt.block_on(channel(&cluster.endpoint(0)));
    let mut kv = KvClient::new(channel);
    let mut holder = kvcli(&["sleep", "3"]);
    assert_eq!(rt.block_on(queued_becomes(&mut kv, "cli", 1)), 1, "the first kvcli holds the lock");
    let mut waiter = kvcli(&["true"]);
    assert_eq!(rt.block_on(queued_becomes(&mut kv, "cli", 2)), 2, "the second kvcli queues");
    let _ = waiter.kill();
    let _ = waiter.wait();
    assert_eq!(rt.block_on(queued_becomes(&mut kv, "cli", 1)), 1, "the killed waiter's key must be withdrawn");
    let status = holder.wait().expect("the holder ends");
    assert!(status.success(), "the holder's command ran: {status}");
    let started = Instant::now();
    let mut next = kvcli(&["true"]);
    let deadline = Instant::now() + CALL_LIMIT;
    let status = loop {
        if let Some(status) = next.try_wait().expect("wait for kvcli") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = next.kill();
            panic!("the next kvcli lock did not end within {CALL_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "the next kvcli lock: {status}");
    assert!(started.elapsed() < Duration::from_secs(3), "held after {:?}, not at once", started.elapsed());
}
