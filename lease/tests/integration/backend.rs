//! The tokio driver end to end: election cores run as `ElectionBackend`s over a
//! `LocalNetwork`, in paused (virtual) time so lease timing is real but tests are fast.
//!
//! Every wait is a bounded loop that polls every `POLL` of virtual time, and every poll
//! checks the safety property: at most one node reports mastership at a time.

use leasekv_lease::backend::{DrivenBackend, ElectionError, ElectionStatus, LocalNetwork, MonotonicClock};
use leasekv_lease::paxos::PaxosLeaseElection;
use leasekv_lease::{
    BackendKind, ElectionBackend, ElectionCore, ElectionMessage, Instant, LeaseConfig, Mastership, NodeId, Output,
    RestartEpoch, Term, Transport,
};
use std::sync::Arc;
use std::time::Duration;

const POLL: Duration = Duration::from_millis(10);
const FIRST_START: RestartEpoch = RestartEpoch { value: 1, first_start: true };

struct Cluster {
    net: LocalNetwork,
    nodes: Vec<Arc<DrivenBackend>>,
}

fn ids(n: u32) -> Vec<NodeId> {
    (1..=n).map(NodeId).collect()
}

fn paxos_cluster(n: u32) -> Cluster {
    let peers = ids(n);
    let net = LocalNetwork::new();
    let nodes = peers
        .iter()
        .map(|&me| {
            let clock = MonotonicClock::new();
            let core = PaxosLeaseElection::new(
                me,
                &peers,
                LeaseConfig::default(),
                FIRST_START,
                clock.now(),
                u64::from(me.0) * 7919,
            )
            .expect("default config is valid");
            let (transport, inbox) = net.join(me);
            DrivenBackend::start("paxoslease", core, clock, Arc::new(transport), inbox)
        })
        .collect();
    Cluster { net, nodes }
}

fn kind_cluster(kind: BackendKind, n: u32) -> Cluster {
    let peers = ids(n);
    let net = LocalNetwork::new();
    let nodes = peers
        .iter()
        .map(|&me| {
            let clock = MonotonicClock::new();
            let core = kind
                .build_core(me, &peers, None, LeaseConfig::default(), FIRST_START, clock.now(), u64::from(me.0))
                .expect("default config is valid");
            let (transport, inbox) = net.join(me);
            DrivenBackend::start(kind.name(), core, clock, Arc::new(transport), inbox)
        })
        .collect();
    Cluster { net, nodes }
}

impl Cluster {
    /// The masters at this instant; panics (fails the test) if there is more than one.
    fn master(&self) -> Option<usize> {
        let masters: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.nodes[i].status().master.is_some()).collect();
        assert!(masters.len() <= 1, "two masters at once: nodes {masters:?}");
        masters.first().copied()
    }

    /// Polls until `done` holds, checking safety at every poll; returns the virtual time
    /// it took, or fails the test after `limit`.
    /// Waits (at most 5 s of virtual time) until a node other than `old` is master.
    async fn wait_for_master_other_than(&self, old: usize, what: &str) -> usize {
        let mut new = None;
        self.wait_for(Duration::from_secs(5), what, |c| {
            new = c.master().filter(|&m| m != old);
            new.is_some()
        })
        .await;
        new.unwrap_or_else(|| panic!("{what}: wait_for returned without a new master"))
    }

    async fn wait_for(&self, limit: Duration, what: &str, mut done: impl FnMut(&Self) -> bool) -> Duration {
        let start = tokio::time::Instant::now();
        let max_polls = limit.as_millis() / POLL.as_millis() + 1;
        for _ in 0..max_polls {
            self.master();
            if done(self) {
                return start.elapsed();
            }
            tokio::time::sleep(POLL).await;
        }
        panic!("{what}: not reached within {limit:?}");
    }

    /// Lets `d` of virtual time pass, checking safety at every poll.
    async fn observe(&self, d: Duration) {
        let polls = d.as_millis() / POLL.as_millis();
        for _ in 0..polls {
            self.master();
            tokio::time::sleep(POLL).await;
        }
        self.master();
    }

    /// Waits until one node is master and every other live node's hint names it.
    async fn wait_for_settled_master(&self, limit: Duration, skip: &[usize]) -> usize {
        let mut found = None;
        self.wait_for(limit, "settled master", |c| {
            found = c.master().filter(|&m| {
                (0..c.nodes.len())
                    .filter(|i| !skip.contains(i) && *i != m)
                    .all(|i| c.nodes[i].status().hint == Some(c.nodes[m].node_id()))
            });
            found.is_some()
        })
        .await;
        found.expect("wait_for returned, so found is set")
    }
}

#[tokio::test(start_paused = true)]
async fn paxos_elects_exactly_one_master_and_everyone_knows_it() {
    let cluster = paxos_cluster(3);
    let m = cluster.wait_for_settled_master(Duration::from_secs(5), &[]).await;
    let master = &cluster.nodes[m];
    assert_eq!(master.name(), "paxoslease");
    assert_eq!(master.status().hint, Some(master.node_id()));
    let mastership = master.status().master.expect("master");
    assert!(master.now() < mastership.valid_until);
    assert!(master.status().is_master_at(master.now()));

    // The lease is extended: the same node stays master, in the same term, for several
    // lease times.
    let term = mastership.term;
    cluster.observe(Duration::from_secs(3)).await;
    assert_eq!(cluster.master(), Some(m));
    assert_eq!(master.status().term(), Some(term));
}

#[tokio::test(start_paused = true)]
async fn step_down_hands_mastership_over_quickly() {
    let cluster = paxos_cluster(3);
    let old = cluster.wait_for_settled_master(Duration::from_secs(5), &[]).await;
    let old_term = cluster.nodes[old].status().term().expect("master");

    let start = tokio::time::Instant::now();
    cluster.nodes[old].step_down().await.expect("running backend steps down");
    assert!(cluster.nodes[old].status().master.is_none(), "still master after step_down");
    assert!(cluster.nodes[old].subscribe().borrow().master.is_none());

    let new = cluster.wait_for_master_other_than(old, "new master after step-down").await;
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "takeover took {took:?}");
    let new_term = cluster.nodes[new].status().term().expect("master");
    assert!(new_term > old_term, "terms must grow: {old_term} then {new_term}");
}

/// The candidacy switch, on both configurable backends: a master that withdraws gives up
/// at once and is not elected again while withdrawn (the others still elect among
/// themselves, so it keeps voting); resumed, it can win again.
#[tokio::test(start_paused = true)]
async fn a_withdrawn_candidate_gives_up_mastership_and_never_takes_it_until_it_resumes() {
    for kind in BackendKind::CONFIGURABLE {
        let cluster = kind_cluster(kind, 3);
        let old = cluster.wait_for_settled_master(Duration::from_secs(10), &[]).await;
        cluster.nodes[old].set_candidacy(false);
        let new = cluster.wait_for_master_other_than(old, "a master other than the withdrawn one").await;
        // The next master steps down over and over: the withdrawn node never takes over.
        let mut current = new;
        for _ in 0..3 {
            cluster.nodes[current].step_down().await.expect("running backend steps down");
            current = cluster.wait_for_master_other_than(old, "another master, never the withdrawn one").await;
            assert_ne!(current, old, "{}: a withdrawn candidate became master", kind.name());
        }
        cluster.observe(Duration::from_secs(2)).await;
        assert!(cluster.nodes[old].status().master.is_none(), "{}: withdrawn and master", kind.name());
        // Resumed: with every other node withdrawn, the old master is elected again.
        cluster.nodes[old].set_candidacy(true);
        for (i, node) in cluster.nodes.iter().enumerate() {
            if i != old {
                node.set_candidacy(false);
            }
        }
        cluster.wait_for(Duration::from_secs(10), "the resumed candidate elected", |c| c.master() == Some(old)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn isolated_master_expires_and_another_takes_over() {
    let cluster = paxos_cluster(3);
    let old = cluster.wait_for_settled_master(Duration::from_secs(5), &[]).await;
    let old_node = &cluster.nodes[old];
    let mut updates = old_node.subscribe();
    cluster.net.isolate(old_node.node_id());
    let valid_until = old_node.status().master.expect("master").valid_until;

    let mut new = None;
    cluster
        .wait_for(Duration::from_secs(5), "new master after isolation", |c| {
            let status = old_node.status();
            if old_node.now() >= valid_until {
                assert!(status.master.is_none(), "isolated node master past valid_until");
            }
            new = c.master().filter(|&m| m != old);
            new.is_some()
        })
        .await;
    assert!(old_node.status().master.is_none());

    // The driver published the loss by itself, without anyone calling status().
    assert!(updates.borrow_and_update().master.is_none());

    // Healing does not produce a second master: the old one rejoins as a follower.
    cluster.net.heal();
    let settled = cluster.wait_for_settled_master(Duration::from_secs(5), &[]).await;
    assert_eq!(Some(settled), new);
}

#[tokio::test(start_paused = true)]
async fn isolated_master_publishes_loss_at_valid_until() {
    let cluster = paxos_cluster(3);
    let old = cluster.wait_for_settled_master(Duration::from_secs(5), &[]).await;
    let old_node = &cluster.nodes[old];
    let mut updates = old_node.subscribe();
    cluster.net.isolate(old_node.node_id());

    // Follow the published updates (no polling): the update that withdraws mastership must
    // come at the end of the last one that claimed it, neither earlier nor later.
    let mut last_valid_until = updates.borrow_and_update().master.map(|m| m.valid_until);
    for _ in 0..100 {
        tokio::time::timeout(Duration::from_secs(5), updates.changed())
            .await
            .expect("an update within a lease time")
            .expect("backend is running");
        let status = *updates.borrow_and_update();
        match status.master {
            Some(m) => last_valid_until = Some(m.valid_until),
            None => {
                let valid_until = last_valid_until.expect("was master when isolated");
                let now = old_node.now();
                assert!(now >= valid_until, "lost at {now:?}, before valid_until {valid_until:?}");
                assert!(
                    now.saturating_since(valid_until) < POLL,
                    "loss published {:?} after valid_until",
                    now.saturating_since(valid_until)
                );
                return;
            }
        }
    }
    panic!("isolated master never published its loss");
}

#[tokio::test(start_paused = true)]
async fn stop_releases_mastership_and_is_idempotent() {
    let cluster = paxos_cluster(3);
    let old = cluster.wait_for_settled_master(Duration::from_secs(5), &[]).await;
    let old_node = &cluster.nodes[old];

    let start = tokio::time::Instant::now();
    old_node.stop().await.expect("stop");
    assert!(old_node.status().master.is_none());
    assert!(old_node.is_stopped());

    let new = cluster.wait_for_master_other_than(old, "new master after stop").await;
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "takeover after stop took {took:?}");

    old_node.stop().await.expect("second stop is fine");
    assert!(matches!(old_node.step_down().await, Err(ElectionError::Stopped)));
    // A stopped node never competes again.
    cluster.observe(Duration::from_secs(2)).await;
    assert!(old_node.status().master.is_none());
    assert_eq!(cluster.master(), Some(new));
}

#[tokio::test(start_paused = true)]
async fn stopping_a_follower_keeps_the_master() {
    let cluster = paxos_cluster(3);
    let m = cluster.wait_for_settled_master(Duration::from_secs(5), &[]).await;
    let follower = (m + 1) % 3;
    cluster.nodes[follower].stop().await.expect("stop");
    cluster.observe(Duration::from_secs(2)).await;
    assert_eq!(cluster.master(), Some(m), "two of three nodes keep the master");
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_releases_mastership() {
    let mut cluster = paxos_cluster(3);
    let old = cluster.wait_for_settled_master(Duration::from_secs(5), &[]).await;
    let mut updates = cluster.nodes[old].subscribe();
    let dropped = cluster.nodes.remove(old);
    drop(dropped);

    // The task ends: its status sender goes away after withdrawing the mastership.
    let ended = tokio::time::timeout(Duration::from_secs(1), async { while updates.changed().await.is_ok() {} }).await;
    assert!(ended.is_ok(), "driver task still running after every handle was dropped");
    assert!(updates.borrow().master.is_none());

    // The release went out, so the other two take over before the lease would run out.
    let took = cluster.wait_for(Duration::from_secs(5), "new master", |c| c.master().is_some()).await;
    assert!(took < Duration::from_secs(1), "takeover took {took:?}");
}

#[tokio::test(start_paused = true)]
async fn removing_the_master_through_the_driver_moves_mastership() {
    let cluster = paxos_cluster(4);
    let old = cluster.wait_for_settled_master(Duration::from_secs(5), &[]).await;
    // Rule 5's round at epoch 0 is reported once the master has extended or won.
    let (epoch, _) = cluster.nodes[old].change_allowed_after().expect("the master completed a round");
    assert_eq!(epoch, 0);
    let removed = cluster.nodes[old].node_id();
    let voters: Vec<NodeId> = ids(4).into_iter().filter(|&n| n != removed).collect();
    for node in &cluster.nodes {
        node.configure(leasekv_lease::Configuration::new(1, &voters, &[]));
    }
    // The drivers take it before their next step, at once: well within a lease round.
    for _ in 0..1000 {
        if cluster.nodes[old].status().master.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(cluster.nodes[old].status().master.is_none(), "a removed master gives the lease up at once");
    let new = cluster.wait_for_master_other_than(old, "a voter of epoch 1 takes over").await;
    cluster
        .wait_for(Duration::from_secs(5), "rule 5 at epoch 1", |c| {
            c.nodes[new].change_allowed_after().is_some_and(|(e, at)| e == 1 && at > c.nodes[new].now())
        })
        .await;
    // The removed node never competes again.
    cluster.observe(Duration::from_secs(3)).await;
    assert_ne!(cluster.master(), Some(old));
}

#[tokio::test(start_paused = true)]
async fn lease_tracker_backend_elects_one_master() {
    let cluster = kind_cluster(BackendKind::LeaseTracker, 3);
    let m = cluster.wait_for_settled_master(Duration::from_secs(5), &[]).await;
    assert_eq!(cluster.nodes[m].name(), "lease-tracker");
    cluster.observe(Duration::from_secs(3)).await;
    assert_eq!(cluster.master(), Some(m));

    cluster.nodes[m].step_down().await.expect("step down");
    assert!(cluster.nodes[m].status().master.is_none());
    cluster.wait_for(Duration::from_secs(5), "new master", |c| c.master().is_some_and(|n| n != m)).await;
}

#[tokio::test(start_paused = true)]
async fn paxoslease_via_build_core_elects_one_master() {
    let cluster = kind_cluster(BackendKind::PaxosLease, 5);
    cluster.wait_for_settled_master(Duration::from_secs(5), &[]).await;
}

#[test]
fn unknown_backend_name_lists_valid_ones() {
    let err = "raft".parse::<BackendKind>().expect_err("raft is not a backend");
    let text = err.to_string();
    assert!(text.contains("raft"), "{text}");
    assert!(text.contains("paxoslease, lease-tracker"), "{text}");
    assert_eq!("lease-tracker".parse::<BackendKind>(), Ok(BackendKind::LeaseTracker));
    assert_eq!("paxoslease".parse::<BackendKind>(), Ok(BackendKind::PaxosLease));
}

// --- The driver against a scripted core -------------------------------------------------

/// A core that claims mastership until a fixed instant and never asks for a timer: the
/// driver alone must notice the expiry. `honest == false` keeps claiming it afterwards.
struct ScriptedCore {
    id: NodeId,
    valid_until: Instant,
    honest: bool,
    stepped_down: bool,
    shut_down: bool,
    /// Messages to hand the driver at its next `take_output` (a step-down queues its
    /// release to node 2).
    out: Vec<leasekv_lease::Envelope>,
}

impl ElectionCore for ScriptedCore {
    fn id(&self) -> NodeId {
        self.id
    }
    fn handle_message(&mut self, _: Instant, _: NodeId, _: ElectionMessage) {}
    fn handle_timeout(&mut self, _: Instant) {}
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn take_output(&mut self) -> Output {
        Output { messages: std::mem::take(&mut self.out), ..Output::default() }
    }
    fn mastership(&self, now: Instant) -> Option<Mastership> {
        let live = !self.stepped_down && !self.shut_down && (!self.honest || now < self.valid_until);
        live.then_some(Mastership { term: Term::ZERO, valid_until: self.valid_until })
    }
    fn master_hint(&self, now: Instant) -> Option<NodeId> {
        self.mastership(now).map(|_| self.id)
    }
    fn step_down(&mut self, _: Instant) {
        self.stepped_down = true;
        self.out.push(leasekv_lease::Envelope { to: NodeId(2), msg: msg() });
    }
    fn shut_down(&mut self, _: Instant) {
        self.shut_down = true;
    }
    fn set_configuration(&mut self, _: Instant, _: &leasekv_lease::Configuration) {}
    fn set_candidacy(&mut self, _: Instant, _: bool) {}
    fn change_allowed_after(&self) -> Option<(u64, Instant)> {
        None
    }
}

fn scripted(honest: bool, valid_for: Duration) -> (Arc<DrivenBackend>, LocalNetwork) {
    let net = LocalNetwork::new();
    let clock = MonotonicClock::new();
    let core = ScriptedCore {
        id: NodeId(1),
        valid_until: clock.now().saturating_add(valid_for),
        honest,
        stepped_down: false,
        shut_down: false,
        out: Vec::new(),
    };
    let (transport, inbox) = net.join(NodeId(1));
    (DrivenBackend::start("scripted", core, clock, Arc::new(transport), inbox), net)
}

/// A transport that records, at every send, whether the status the backend published
/// still claimed mastership.
#[derive(Default)]
struct StatusAtSend {
    status: std::sync::OnceLock<tokio::sync::watch::Receiver<ElectionStatus>>,
    claimed: std::sync::Mutex<Vec<bool>>,
}

#[async_trait::async_trait]
impl Transport for StatusAtSend {
    async fn send(&self, _to: NodeId, _msg: ElectionMessage) {
        let claimed = self.status.get().is_some_and(|status| status.borrow().master.is_some());
        self.claimed.lock().unwrap_or_else(|e| e.into_inner()).push(claimed);
    }
}

/// A node loop takes the election's status before each input; a release must therefore be
/// published before it is sent, or a busy loop could act as master after another node took
/// over (the store simulator models the busy loop, not this order: it does not run this
/// driver).
#[tokio::test(start_paused = true)]
async fn a_step_down_is_published_before_its_release_is_sent() {
    let clock = MonotonicClock::new();
    let core = ScriptedCore {
        id: NodeId(1),
        valid_until: clock.now().saturating_add(Duration::from_secs(10)),
        honest: true,
        stepped_down: false,
        shut_down: false,
        out: Vec::new(),
    };
    let transport = Arc::new(StatusAtSend::default());
    let (_inbox_tx, inbox) = tokio::sync::mpsc::channel(8);
    let backend = DrivenBackend::start("scripted", core, clock, Arc::clone(&transport) as _, inbox);
    let _ = transport.status.set(backend.subscribe());
    assert!(backend.status().master.is_some());
    backend.step_down().await.expect("step down");
    let claimed = transport.claimed.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(claimed, [false], "the release went out while the status still claimed mastership");
}

#[tokio::test(start_paused = true)]
async fn driver_publishes_expiry_without_a_core_timer() {
    let (backend, _net) = scripted(true, Duration::from_millis(300));
    let mut updates = backend.subscribe();
    let valid_until = updates.borrow_and_update().master.expect("master at start").valid_until;
    tokio::time::timeout(Duration::from_secs(1), updates.changed())
        .await
        .expect("expiry published")
        .expect("backend running");
    assert!(updates.borrow().master.is_none());
    assert!(backend.now() >= valid_until);
    assert!(backend.now().saturating_since(valid_until) < Duration::from_millis(2));
}

#[tokio::test(start_paused = true)]
async fn status_never_claims_mastership_past_valid_until() {
    let (backend, _net) = scripted(false, Duration::from_millis(300));
    assert!(backend.status().master.is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(backend.status().master.is_none(), "claimed mastership at valid_until");
    // The driver does not spin on the expired claim either: time still advances and the
    // backend still answers commands.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(backend.subscribe().borrow().master.is_none());
    backend.step_down().await.expect("step down");
    backend.stop().await.expect("stop");
    backend.stop().await.expect("stop again");
    assert!(matches!(backend.step_down().await, Err(ElectionError::Stopped)));
}

#[tokio::test(start_paused = true)]
async fn step_down_and_stop_publish_before_returning() {
    let (backend, _net) = scripted(true, Duration::from_secs(10));
    assert!(backend.status().master.is_some());
    backend.step_down().await.expect("step down");
    assert_eq!(backend.status(), ElectionStatus { master: None, hint: None });
    let (backend, _net) = scripted(true, Duration::from_secs(10));
    backend.stop().await.expect("stop");
    assert!(backend.status().master.is_none());
    assert!(backend.subscribe().borrow().master.is_none());
}

#[tokio::test(start_paused = true)]
async fn monotonic_clock_follows_tokio_time() {
    let clock = MonotonicClock::new();
    let t0 = clock.now();
    tokio::time::advance(Duration::from_millis(1500)).await;
    let t1 = clock.now();
    assert_eq!(t1.saturating_since(t0), Duration::from_millis(1500));
    let target = t1.saturating_add(Duration::from_millis(250));
    tokio::time::sleep_until(clock.to_tokio(target)).await;
    assert_eq!(clock.now(), target);
    // An unrepresentable instant means "never", not a panic.
    assert!(clock.to_tokio(Instant::from_nanos(u64::MAX)) > tokio::time::Instant::now());
}

// --- LocalNetwork -----------------------------------------------------------------------

fn msg() -> ElectionMessage {
    ElectionMessage::Naive(leasekv_lease::naive::NaiveMessage::Grant { attempt: leasekv_lease::Ballot::ZERO })
}

#[tokio::test]
async fn local_network_delivers_cuts_heals_and_forgets() {
    let net = LocalNetwork::new();
    let (a, mut inbox_a) = net.join(NodeId(1));
    let (b, mut inbox_b) = net.join(NodeId(2));
    let (c, mut inbox_c) = net.join(NodeId(3));
    assert_eq!(a.node_id(), NodeId(1));

    a.send(NodeId(2), msg()).await;
    assert_eq!(inbox_b.try_recv().ok(), Some((NodeId(1), msg())));

    // Symmetric cut of one link.
    net.set_link(NodeId(2), NodeId(1), false);
    a.send(NodeId(2), msg()).await;
    b.send(NodeId(1), msg()).await;
    c.send(NodeId(1), msg()).await;
    assert!(inbox_b.try_recv().is_err());
    assert_eq!(inbox_a.try_recv().ok(), Some((NodeId(3), msg())));
    assert!(inbox_a.try_recv().is_err());
    net.set_link(NodeId(1), NodeId(2), true);
    b.send(NodeId(1), msg()).await;
    assert_eq!(inbox_a.try_recv().ok(), Some((NodeId(2), msg())));

    // Isolation cuts every link, also to nodes joining later; a later set_link reopens one.
    net.isolate(NodeId(3));
    let (d, mut inbox_d) = net.join(NodeId(4));
    c.send(NodeId(1), msg()).await;
    d.send(NodeId(3), msg()).await;
    assert!(inbox_a.try_recv().is_err());
    assert!(inbox_c.try_recv().is_err());
    assert!(!net.is_connected(NodeId(3), NodeId(4)));
    net.set_link(NodeId(3), NodeId(4), true);
    c.send(NodeId(4), msg()).await;
    assert_eq!(inbox_d.try_recv().ok(), Some((NodeId(3), msg())));
    net.heal();
    c.send(NodeId(1), msg()).await;
    assert_eq!(inbox_a.try_recv().ok(), Some((NodeId(3), msg())));

    // A node that left receives nothing and sends nothing; its inbox is closed.
    net.leave(NodeId(2));
    a.send(NodeId(2), msg()).await;
    b.send(NodeId(1), msg()).await;
    assert!(matches!(inbox_b.try_recv(), Err(tokio::sync::mpsc::error::TryRecvError::Disconnected)));
    assert!(inbox_a.try_recv().is_err());

    // Rejoining makes a new incarnation; the old transport stays dead.
    let (b2, mut inbox_b2) = net.join(NodeId(2));
    b.send(NodeId(1), msg()).await;
    assert!(inbox_a.try_recv().is_err());
    b2.send(NodeId(1), msg()).await;
    a.send(NodeId(2), msg()).await;
    assert_eq!(inbox_a.try_recv().ok(), Some((NodeId(2), msg())));
    assert_eq!(inbox_b2.try_recv().ok(), Some((NodeId(1), msg())));

    // Sending to an unknown node is silently dropped.
    a.send(NodeId(99), msg()).await;
}

#[tokio::test]
async fn local_network_drops_instead_of_blocking_when_full() {
    let net = LocalNetwork::new();
    let (a, _inbox_a) = net.join(NodeId(1));
    let (_b, mut inbox_b) = net.join(NodeId(2));
    // Far more than the inbox holds; each send must return at once.
    let sends = tokio::time::timeout(Duration::from_secs(5), async {
        for _ in 0..5000 {
            a.send(NodeId(2), msg()).await;
        }
    })
    .await;
    assert!(sends.is_ok(), "send blocked on a full inbox");
    let mut received = 0;
    while inbox_b.try_recv().is_ok() {
        received += 1;
    }
    assert!(received > 0 && received < 5000, "received {received}");
}
