//! One simulated cluster of whole replicas, its clients, its fault schedule and its oracles.

use super::linearizability::{self, CheckBudget, CheckResult, History, KvOp, KvOutcome, Operation};
use super::oracle::{Oracles, Violation, ViolationKind};
use super::workload::{Client, HeldLease, Reply, Request, CHECKED_KEYS};
use crate::command::{
    Applied, Command, CommandResponse, Compare, CompareResult, CompareTarget, DeleteRangeRequest, PutRequest,
    RangeRequest, TxnOp, TxnRequest,
};
use crate::limits::Limits;
#[cfg(feature = "negative-controls")]
use crate::log::LogBreakage;
use crate::log::{
    CheckpointTicket, LogMessage, ReadConsistency, Replica, ReplicaConfig, RequestError, Slot, SyncTicket,
};
use crate::membership::Membership;
use crate::node::{
    ElectionGauges, ElectionView, ForwardMessage, MasterAnswer, MasterRequest, MasterResult, NodeBreakage,
};
use crate::storage::MemoryStorage;
use crate::types::{KeyRange, NO_LEASE};
use crate::watch::StreamConfig;
use leasekv_lease::rng::SplitMix64;
use leasekv_lease::sim::{EventQueue, Network, NetworkFaults, SimClock};
use leasekv_lease::{BackendKind, ElectionCore, ElectionMessage, EpochStore, LeaseConfig, MemoryEpochStore, NodeId};
use std::collections::BTreeMap;
use std::time::Duration;

mod membership;
mod watchers;

const MS: u64 = 1_000_000;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct KvSimConfig {
    /// Cluster size.
    pub nodes: usize,
    /// Client operations per seed (issued during the chaos phase).
    pub ops: usize,
    /// Concurrent clients.
    pub clients: usize,
    /// The election backend.
    pub backend: BackendKind,
    /// Election timing; its drift bound is also the drift of the simulated clocks.
    pub lease: LeaseConfig,
    /// The replica's tuning (small snapshot interval, so compaction and snapshot transfer
    /// happen in every run) and the negative control under test.
    pub replica: ReplicaConfig,
    /// Network faults in the chaos phase.
    pub faults: NetworkFaults,
    /// Length of the chaos phase.
    pub chaos: Duration,
    /// Record a readable trace (for replaying one seed).
    pub trace: bool,
    /// Simulated watch clients, each with one stream and a few watchers (0: none).
    pub watch_clients: usize,
    /// The watch streams' limits, and the watch negative control under test.
    pub watch: StreamConfig,
    /// Whether the master is asked to add, promote and remove members during the chaos
    /// phase (see `world/membership.rs`).
    pub membership_changes: bool,
    /// Nodes beyond `nodes` that the log may add as members (each starts when added).
    pub spare_nodes: usize,
    /// A negative control of the node (forwarding, the order of a turn's inputs).
    pub node_breakage: NodeBreakage,
    /// A negative control of the simulated client.
    pub client_breakage: ClientBreakage,
}

/// A deliberately broken client, for the simulator's negative controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientBreakage {
    /// The real thing: a write answered "indeterminate" is never sent again.
    #[default]
    None,
    /// A write answered "indeterminate" is sent again, as if it had failed.
    RetryIndeterminate,
}

impl KvSimConfig {
    /// The defaults of the `sim` example: 1 s election leases, 12 s of chaos.
    pub fn new(nodes: usize, ops: usize, loss: f64, drift: f64) -> Self {
        let mut lease = LeaseConfig::with_lease_time(Duration::from_secs(1));
        lease.drift_bound = drift;
        let mut replica = ReplicaConfig::for_lease_time(lease.lease_time);
        replica.snapshot_every = 64;
        replica.retain_after_snapshot = 16;
        replica.max_fetch_entries = 32;
        replica.max_expire_batch = 4;
        replica.trace_applies = true;
        KvSimConfig {
            nodes,
            ops,
            clients: 5,
            backend: BackendKind::PaxosLease,
            lease,
            replica,
            faults: NetworkFaults {
                loss,
                duplicate: 0.05,
                min_delay: MS / 10,
                max_delay: 2 * MS,
                slow: 0.1,
                slow_max: 50 * MS,
                stall: 0.005,
                stall_max: 1000 * MS,
            },
            chaos: Duration::from_secs(12),
            trace: false,
            watch_clients: 3,
            // Small batches, so that catching up takes several polls.
            watch: StreamConfig { batch_events: 8, ..StreamConfig::default() },
            membership_changes: true,
            spare_nodes: 3,
            node_breakage: NodeBreakage::None,
            client_breakage: ClientBreakage::None,
        }
    }

    /// Selects a negative control.
    #[cfg(feature = "negative-controls")]
    pub fn with_breakage(mut self, breakage: LogBreakage) -> Self {
        self.replica.breakage = breakage;
        self
    }

    /// Selects a negative control of the node.
    #[cfg(feature = "negative-controls")]
    pub fn with_node_breakage(mut self, breakage: NodeBreakage) -> Self {
        self.node_breakage = breakage;
        self
    }

    /// Selects a negative control of the client.
    #[cfg(feature = "negative-controls")]
    pub fn with_client_breakage(mut self, breakage: ClientBreakage) -> Self {
        self.client_breakage = breakage;
        self
    }

    /// Selects a negative control of the watch path.
    #[cfg(feature = "negative-controls")]
    pub fn with_watch_breakage(mut self, breakage: crate::watch::WatchBreakage) -> Self {
        self.watch.breakage = breakage;
        self
    }

    fn chaos_start(&self) -> u64 {
        1000 * MS
    }

    fn quiet_start(&self) -> u64 {
        self.chaos_start() + self.chaos.as_nanos() as u64
    }

    /// How long the quiet phase lasts: a master within the election's liveness bound, then
    /// every abandoned lease expires (longest TTL, stretched by drift), with two seconds for
    /// catch-up and the expiry batches. This is the stated upper bound of the lease oracle.
    pub fn quiet_length(&self) -> Duration {
        let election = self.lease.max_lease_time + self.lease.lease_time + Duration::from_millis(1500);
        let longest_ttl = Duration::from_secs(4.max(self.replica.min_ttl_secs as u64));
        election
            + longest_ttl.mul_f64((1.0 + self.lease.drift_bound) / (1.0 - self.lease.drift_bound))
            + Duration::from_secs(2)
    }

    fn end(&self) -> u64 {
        self.quiet_start() + self.quiet_length().as_nanos() as u64
    }
}

/// The outcome of one seed.
#[derive(Debug, Clone, Default)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Broken promises.
    pub violations: Vec<Violation>,
    /// Operations in the checked history.
    pub ops_checked: usize,
    /// Keys whose check ran out of budget (not counted as passing).
    pub inconclusive: usize,
    /// Acknowledged writes.
    pub acked_writes: u64,
    /// Acknowledged writes lost.
    pub acked_lost: u64,
    /// Client operations that completed successfully.
    pub ops_ok: u64,
    /// Highest slot applied anywhere.
    pub slots: Slot,
    /// Snapshots installed from peers.
    pub snapshots_installed: u64,
    /// Leases that expired.
    pub leases_expired: u64,
    /// Watch responses the watch oracle checked.
    pub watch_responses: u64,
    /// Watch streams reopened on another node.
    pub watch_resumed: u64,
    /// Membership changes the master took (proposed).
    pub changes_proposed: u64,
    /// The highest configuration epoch any node applied.
    pub configurations: u64,
    /// The trace, when asked for.
    pub trace: Vec<String>,
}

/// Totals over many seeds.
#[derive(Debug, Clone, Default)]
pub struct SimSummary {
    /// Seeds run.
    pub seeds: u64,
    /// Violations found.
    pub violations: u64,
    /// Seeds with a violation.
    pub failing_seeds: Vec<u64>,
    /// Operations checked for linearizability.
    pub ops_checked: u64,
    /// Inconclusive key checks.
    pub inconclusive: u64,
    /// Acknowledged writes.
    pub acked_writes: u64,
    /// Acknowledged writes lost.
    pub acked_lost: u64,
    /// Snapshots installed from peers.
    pub snapshots_installed: u64,
    /// Leases expired.
    pub leases_expired: u64,
    /// Watch responses checked.
    pub watch_responses: u64,
    /// Membership changes proposed.
    pub changes_proposed: u64,
    /// Configurations applied (summed over seeds: the highest epoch of each).
    pub configurations: u64,
    /// The first violations, for the report.
    pub first: Vec<Violation>,
}

impl SimSummary {
    fn add(&mut self, report: &SeedReport) {
        self.seeds += 1;
        self.violations += report.violations.len() as u64;
        if !report.violations.is_empty() {
            self.failing_seeds.push(report.seed);
            if self.first.len() < 5 {
                self.first.extend(report.violations.iter().take(2).cloned());
            }
        }
        self.ops_checked += report.ops_checked as u64;
        self.inconclusive += report.inconclusive as u64;
        self.acked_writes += report.acked_writes;
        self.acked_lost += report.acked_lost;
        self.snapshots_installed += report.snapshots_installed;
        self.leases_expired += report.leases_expired;
        self.watch_responses += report.watch_responses;
        self.changes_proposed += report.changes_proposed;
        self.configurations += report.configurations;
    }

    /// The summary line the example prints last.
    pub fn line(&self) -> String {
        format!(
            "seeds={} violations={} ops_checked={} acked_writes_lost={} watch_responses_checked={} \
             membership_changes={} configurations={}",
            self.seeds,
            self.violations,
            self.ops_checked,
            self.acked_lost,
            self.watch_responses,
            self.changes_proposed,
            self.configurations
        )
    }
}

/// Runs one seed.
pub fn run_seed(config: &KvSimConfig, seed: u64) -> SeedReport {
    let mut config = config.clone();
    // Odd seeds leave snapshots to the driver, as the server does, so both ways of taking
    // them run under the oracles.
    config.replica.defer_snapshots |= seed % 2 == 1;
    let mut world = World::new(config, seed);
    world.run();
    world.finish()
}

/// Runs `count` seeds from `base`, calling `progress` after each.
pub fn run_seeds(config: &KvSimConfig, base: u64, count: u64, mut progress: impl FnMut(&SeedReport)) -> SimSummary {
    let mut summary = SimSummary::default();
    for seed in base..base + count {
        let report = run_seed(config, seed);
        progress(&report);
        summary.add(&report);
    }
    summary
}

/// A message on the wire between nodes.
#[derive(Debug, Clone)]
enum Wire {
    Election(ElectionMessage),
    Log(LogMessage),
    /// A master request forwarded by a follower, or the master's answer to one.
    Forward(ForwardMessage),
}

/// A simulated client's waiter at a node: the client, its request id, the request.
type Waiter = (usize, u64, Request);
/// The production node, driven by the simulator.
type KvNode = crate::node::Node<MemoryStorage, Waiter>;

#[derive(Debug)]
enum Event {
    Deliver { to: usize, from: NodeId, incarnation: u64, wire: Wire },
    ElectionTimer { node: usize, generation: u64 },
    ReplicaTimer { node: usize, generation: u64 },
    SyncDone { node: usize, incarnation: u64 },
    CheckpointDone { node: usize, incarnation: u64 },
    ClientArrive { node: usize, incarnation: u64, client: usize, request_id: u64, request: Request },
    ClientReply { client: usize, request_id: u64, reply: Reply },
    ClientTimeout { client: usize, request_id: u64 },
    ClientNext { client: usize },
    Restart { node: usize },
    WatchTick { client: usize },
    WatchWrite,
    Heal,
    Chaos,
    Quiet,
    MemberChange,
}

struct Node {
    id: NodeId,
    clock: SimClock,
    /// Bumped on every crash: events addressed to an older incarnation are dropped.
    incarnation: u64,
    election: Option<Box<dyn ElectionCore>>,
    /// The node (replica and forwarding) while it runs.
    kv: Option<KvNode>,
    disk: Option<MemoryStorage>,
    epochs: MemoryEpochStore,
    /// The sync the replica began and the simulated disk is working on.
    sync_in_flight: Option<SyncTicket>,
    /// The checkpoint whose engine sync the simulated disk is working on (odd seeds, as
    /// the server runs it on a blocking thread while the replica goes on).
    /// The sync either ran when the checkpoint began (covering only the writes before it)
    /// or runs when it ends (covering those made meanwhile too): both happen on a real disk.
    checkpoint_in_flight: Option<(CheckpointTicket, Option<Result<(), crate::engine::EngineError>>)>,
    election_generation: u64,
    replica_generation: u64,
    paused_until: u64,
    /// What the election reported after its latest step, for the node.
    gauges: ElectionGauges,
    /// For a spare node the log added: the configuration it joins with (its seed).
    join_seed: Option<Membership>,
    /// The configuration epoch its election was last given.
    election_epoch: u64,
}

struct World {
    config: KvSimConfig,
    rng: SplitMix64,
    now: u64,
    queue: EventQueue<Event>,
    network: Network,
    nodes: Vec<Node>,
    ids: Vec<NodeId>,
    clients: Vec<Client>,
    ops_issued: usize,
    history: History,
    oracles: Oracles,
    report: SeedReport,
    quiet: bool,
    watch: watchers::WatchSide,
    /// The log's configuration history, epoch by epoch, as first applied anywhere.
    configurations: BTreeMap<u64, Membership>,
    /// Whether the last check saw more than one master (each episode counts once).
    overlapping: bool,
    /// Writes answered "indeterminate", by client: never to be sent again.
    indeterminate_writes: std::collections::HashSet<(usize, u64)>,
    /// Seeds 1 mod 4 hand the driver's snapshots to replicas as files (the way
    /// `kvserver restore` and a restart install one); seeds 3 mod 4 hand them whole, and
    /// the replica installs them through a staged engine, as the server installs what it
    /// pulls from a peer: the directory the files are written to, and how many were.
    snapshot_files: Option<(std::path::PathBuf, u64)>,
    /// Seeds 2 mod 3 write what a replica applied to its engine only now and then (a step
    /// writes with chance 1/50, so that a restart's replay and a compaction meet changes
    /// still pending), as the server writes at most every few milliseconds: the
    /// commands answered and not yet written must survive crashes, checkpoints and views,
    /// and watch streams read them from the history's published tail.
    defer_engine_writes: bool,
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some((dir, _)) = &self.snapshot_files {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl World {
    fn new(config: KvSimConfig, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed ^ 0x6b76_7374_6f72_6521);
        let drift = config.lease.drift_bound;
        let ids: Vec<NodeId> = (1..=config.nodes as u32).map(NodeId).collect();
        let spares = if config.membership_changes { config.spare_nodes } else { 0 };
        let all: Vec<NodeId> = (1..=(config.nodes + spares) as u32).map(NodeId).collect();
        let nodes = all
            .iter()
            .map(|&id| {
                let rate = 1.0 + drift * (2.0 * rng.next_f64() - 1.0);
                let offset = rng.range_u64(0, 1_000_000 * MS);
                Node {
                    id,
                    clock: SimClock::new(offset, rate),
                    incarnation: 0,
                    election: None,
                    kv: None,
                    disk: Some(MemoryStorage::new()),
                    epochs: MemoryEpochStore::default(),
                    sync_in_flight: None,
                    checkpoint_in_flight: None,
                    election_generation: 0,
                    replica_generation: 0,
                    paused_until: 0,
                    gauges: ElectionGauges::default(),
                    join_seed: None,
                    election_epoch: 0,
                }
            })
            .collect();
        let mut faults = config.faults.clone();
        faults.loss = 0.0;
        faults.stall = 0.0;
        let clients = (0..config.clients)
            .map(|c| Client::new(c as u32 + 1, rng.range_u64(0, config.nodes as u64 - 1) as usize))
            .collect();
        let watch = watchers::WatchSide::new(config.watch_clients, all.len(), config.watch.clone(), |c| c % 3 == 2);
        let mut world = World {
            watch,
            network: Network::new(faults),
            oracles: Oracles::new(seed, drift),
            report: SeedReport { seed, ..Default::default() },
            snapshot_files: (seed % 4 == 1)
                .then(|| (std::env::temp_dir().join(format!("leasekv-sim-{}-seed-{seed}", std::process::id())), 0)),
            config,
            rng,
            now: 0,
            queue: EventQueue::default(),
            nodes,
            ids,
            clients,
            ops_issued: 0,
            history: History::new(),
            quiet: false,
            configurations: BTreeMap::new(),
            overlapping: false,
            indeterminate_writes: std::collections::HashSet::new(),
            defer_engine_writes: seed % 3 == 2,
        };
        for node in 0..world.nodes.len() {
            world.start(node);
        }
        for client in 0..world.clients.len() {
            let at = 200 * MS + world.rng.range_u64(0, 50) * MS;
            world.queue.push(at, Event::ClientNext { client });
        }
        for client in 0..world.watch.clients() {
            let at = 300 * MS + world.rng.range_u64(0, 50) * MS;
            world.queue.push(at, Event::WatchTick { client });
        }
        if world.watch.clients() > 0 {
            world.queue.push(world.config.chaos_start(), Event::WatchWrite);
        }
        world.queue.push(world.config.chaos_start(), Event::Chaos);
        if world.config.membership_changes {
            world.queue.push(world.config.chaos_start() + 500 * MS, Event::MemberChange);
        }
        world.queue.push(world.config.quiet_start(), Event::Quiet);
        world
    }

    fn trace(&mut self, what: impl FnOnce() -> String) {
        if self.config.trace {
            let line = format!("{:>10.3}ms {}", self.now as f64 / MS as f64, what());
            self.report.trace.push(line);
        }
    }

    fn run(&mut self) {
        let end = self.config.end();
        // Bounded in events as well as in virtual time.
        let mut budget: u64 = 20_000_000;
        while let Some((at, event)) = self.queue.pop() {
            if at > end || budget == 0 {
                break;
            }
            budget -= 1;
            self.now = at;
            self.handle(event);
        }
        if budget == 0 {
            // Something loops without letting time pass: a liveness bug, not a pass.
            self.oracles.violation(
                self.now,
                ViolationKind::EventStorm,
                "the event budget ran out before the end".into(),
            );
        }
        self.now = end;
    }

    fn local(&self, node: usize) -> leasekv_lease::Instant {
        self.nodes[node].clock.local(self.now)
    }

    fn target_of(event: &Event) -> Option<usize> {
        match event {
            Event::Deliver { to, .. } => Some(*to),
            Event::ElectionTimer { node, .. }
            | Event::ReplicaTimer { node, .. }
            | Event::SyncDone { node, .. }
            | Event::CheckpointDone { node, .. }
            | Event::ClientArrive { node, .. } => Some(*node),
            _ => None,
        }
    }

    fn handle(&mut self, event: Event) {
        if let Some(node) = World::target_of(&event) {
            // A paused process handles nothing until it resumes; then everything at once,
            // with its clock jumped forward.
            if self.nodes[node].paused_until > self.now {
                let resume = self.nodes[node].paused_until;
                self.queue.push(resume, event);
                return;
            }
        }
        match event {
            Event::Deliver { to, from, incarnation, wire } => {
                if incarnation != self.nodes[to].incarnation {
                    return;
                }
                let now = self.local(to);
                if self.config.trace {
                    let line = format!("{from} -> {}: {wire:?}", self.nodes[to].id);
                    self.trace(|| line);
                }
                match wire {
                    Wire::Election(msg) => {
                        if let Some(core) = self.nodes[to].election.as_mut() {
                            core.handle_message(now, from, msg);
                            self.after_election(to);
                        }
                    }
                    Wire::Log(LogMessage::Snapshot { index, data }) if self.snapshot_files.is_some() => {
                        let Some(path) = self.snapshot_file(to, &data) else { return };
                        if let Some(replica) = self.nodes[to].kv.as_mut().map(KvNode::replica_mut) {
                            replica.handle_snapshot_file(now, index, path);
                            self.after_replica(to);
                        }
                    }
                    Wire::Log(msg) => {
                        if let Some(kv) = self.nodes[to].kv.as_mut() {
                            kv.handle_message(now, from, msg);
                            self.after_replica(to);
                        }
                    }
                    Wire::Forward(message) => {
                        if let Some(kv) = self.nodes[to].kv.as_mut() {
                            match message {
                                ForwardMessage::Request(id, request) => kv.handle_forwarded(now, from, id, request),
                                ForwardMessage::Answer(id, result) => kv.handle_answer(from, id, result),
                            }
                            self.after_replica(to);
                        }
                    }
                }
            }
            Event::ElectionTimer { node, generation } => {
                if self.nodes[node].election_generation != generation {
                    return;
                }
                let now = self.local(node);
                if let Some(core) = self.nodes[node].election.as_mut() {
                    core.handle_timeout(now);
                    self.after_election(node);
                }
            }
            Event::ReplicaTimer { node, generation } => {
                if self.nodes[node].replica_generation != generation {
                    return;
                }
                let now = self.local(node);
                if let Some(kv) = self.nodes[node].kv.as_mut() {
                    kv.handle_timeout(now, None);
                    self.after_replica(node);
                }
            }
            Event::SyncDone { node, incarnation } => {
                if incarnation != self.nodes[node].incarnation {
                    return;
                }
                let Some(ticket) = self.nodes[node].sync_in_flight.take() else { return };
                let now = self.local(node);
                if let Some(replica) = self.nodes[node].kv.as_mut().map(KvNode::replica_mut) {
                    // The disk finishes now, covering every write up to now: more than the
                    // ticket covers, as with a real fsync; only the ticket's messages go out.
                    let result = replica.sync_storage();
                    replica.finish_sync(now, ticket, result);
                    self.after_replica(node);
                }
            }
            Event::CheckpointDone { node, incarnation } => {
                if incarnation != self.nodes[node].incarnation {
                    return;
                }
                let Some((ticket, early)) = self.nodes[node].checkpoint_in_flight.take() else { return };
                if let Some(replica) = self.nodes[node].kv.as_mut().map(KvNode::replica_mut) {
                    let synced = early.unwrap_or_else(|| ticket.sync());
                    replica.finish_checkpoint(ticket, synced);
                    self.after_replica(node);
                }
            }
            Event::ClientArrive { node, incarnation, client, request_id, request } => {
                if incarnation == self.nodes[node].incarnation {
                    self.serve(node, client, request_id, request);
                }
            }
            Event::ClientReply { client, request_id, reply } => self.on_reply(client, request_id, reply),
            Event::ClientTimeout { client, request_id } => {
                let matches = self.clients[client].in_flight.as_ref().is_some_and(|(id, _, _)| *id == request_id);
                if matches {
                    self.on_reply(client, request_id, Reply::Indeterminate);
                    let n = self.nodes.len() as u64;
                    self.clients[client].target = self.rng.range_u64(0, n - 1) as usize;
                }
            }
            Event::ClientNext { client } => self.client_next(client),
            Event::Restart { node } => self.start(node),
            Event::WatchTick { client } => self.watch_tick(client),
            Event::WatchWrite => self.watch_write(),
            Event::Heal => {
                self.trace(|| "heal".to_string());
                self.network.heal();
            }
            Event::Chaos => self.chaos(),
            Event::MemberChange => self.membership_step(),
            Event::Quiet => self.begin_quiet(),
        }
    }

    // ---- nodes ----

    fn start(&mut self, node: usize) {
        if self.nodes[node].kv.is_some() || !self.has_joined(node) {
            return;
        }
        let Some(disk) = self.nodes[node].disk.take() else { return };
        let removed_through = disk.removed_through();
        let epoch = match self.nodes[node].epochs.begin_epoch() {
            Ok(epoch) => epoch,
            Err(e) => {
                self.oracles.violation(self.now, ViolationKind::RestartFailed, e.to_string());
                return;
            }
        };
        let now = self.local(node);
        let id = self.nodes[node].id;
        self.trace(|| format!("start {id} epoch {}", epoch.value));
        let seed = self.rng.next_u64();
        // A spare starts from the configuration that added it (a node joining an existing
        // cluster learns it from a member); the initial nodes from the shared seed.
        let membership = match &self.nodes[node].join_seed {
            Some(joined) => joined.clone(),
            None => Membership::of_voters(&self.ids),
        };
        let peers = membership.voters();
        let core = match self.config.backend.build_core(id, &peers, None, self.config.lease.clone(), epoch, now, seed) {
            Ok(core) => core,
            Err(e) => panic!("simulator built an invalid lease config: {e}"),
        };
        let opened =
            Replica::open_with_seed(id, membership, self.config.replica.clone(), Limits::default(), disk, epoch.value);
        let replica = match opened {
            Ok(replica) => replica,
            Err(e) => {
                self.oracles.violation(self.now, ViolationKind::RestartFailed, format!("{id}: {e}"));
                return;
            }
        };
        if replica.state_slot_at_open() < removed_through {
            let detail = format!(
                "{id} restarted with its state at slot {} and its log dropped through slot {removed_through}",
                replica.state_slot_at_open()
            );
            self.oracles.violation(self.now, ViolationKind::StateBehindLog, detail);
        }
        self.nodes[node].election = Some(core);
        let mut kv = KvNode::new(replica);
        kv.set_breakage(self.config.node_breakage);
        self.nodes[node].kv = Some(kv);
        self.nodes[node].paused_until = 0;
        self.nodes[node].election_epoch = 0;
        self.sync_configuration(node);
        self.after_election(node);
        self.after_replica(node);
    }

    fn crash(&mut self, node: usize) {
        let Some(kv) = self.nodes[node].kv.take() else { return };
        let replica = kv.into_replica();
        let id = self.nodes[node].id;
        self.trace(|| format!("crash {id}"));
        let mut disk = replica.into_storage();
        if self.rng.chance(0.3) {
            // A torn write: some prefix of the unsynced writes made it to disk, in the log
            // and, at a point of its own, in the state engine.
            let keep = self.rng.range_u64(0, disk.pending_len() as u64) as usize;
            let state_kept = self.rng.range_u64(0, disk.state_pending_len() as u64 + 1) as usize;
            disk.crash_torn(keep, state_kept);
        } else {
            disk.crash();
        }
        let n = &mut self.nodes[node];
        n.disk = Some(disk);
        n.election = None;
        n.incarnation += 1;
        n.election_generation += 1;
        n.replica_generation += 1;
        n.sync_in_flight = None;
        n.checkpoint_in_flight = None;
        n.paused_until = 0;
    }

    fn is_up(&self, node: usize) -> bool {
        self.nodes[node].kv.is_some()
    }

    fn send_wire(&mut self, from_node: usize, to: NodeId, wire: Wire) {
        let from = self.nodes[from_node].id;
        let to_node = (to.0 as usize).wrapping_sub(1);
        if to_node >= self.nodes.len() {
            return;
        }
        let incarnation = self.nodes[to_node].incarnation;
        for delay in self.network.deliveries(self.now, from, to, &mut self.rng) {
            self.queue.push(self.now + delay, Event::Deliver { to: to_node, from, incarnation, wire: wire.clone() });
        }
    }

    fn after_election(&mut self, node: usize) {
        let now = self.local(node);
        let Some(core) = self.nodes[node].election.as_mut() else { return };
        let output = core.take_output();
        let deadline = core.poll_timeout();
        let mastership = core.mastership(now);
        let hint = core.master_hint(now);
        let gate = core.change_allowed_after();
        let seen = core.configuration_seen();
        let id = self.nodes[node].id;
        for change in &output.changes {
            let line = format!("{id} {change:?}");
            self.trace(|| line);
        }
        for envelope in output.messages {
            self.send_wire(node, envelope.to, Wire::Election(envelope.msg));
        }
        self.nodes[node].election_generation += 1;
        if let Some(deadline) = deadline {
            let at = self.nodes[node].clock.real_at(deadline).max(self.now);
            let generation = self.nodes[node].election_generation;
            self.queue.push(at, Event::ElectionTimer { node, generation });
        }
        self.check_single_master();
        self.nodes[node].gauges = ElectionGauges { change_gate: gate, configuration_seen: seen };
        if let Some(kv) = self.nodes[node].kv.as_mut() {
            // The simulator's own proposals of configuration changes go straight to the
            // replica (membership.rs): they check this gate.
            kv.replica_mut().set_change_gate(gate);
            kv.handle_election(now, ElectionView { master: mastership, hint });
            self.after_replica(node);
        }
    }

    /// Writes a snapshot for node `to` to a file of its own, as the server's pull does.
    fn snapshot_file(&mut self, to: usize, data: &[u8]) -> Option<std::path::PathBuf> {
        let (dir, written) = self.snapshot_files.as_mut()?;
        *written += 1;
        let path = dir.join(format!("to-{to}-{written}.snap"));
        match std::fs::create_dir_all(&*dir).and_then(|()| std::fs::write(&path, data)) {
            Ok(()) => Some(path),
            Err(e) => {
                self.oracles.violation(self.now, ViolationKind::SnapshotUnwritten, e.to_string());
                None
            }
        }
    }

    fn after_replica(&mut self, node: usize) {
        let now = self.local(node);
        let checkpoint_idle = self.nodes[node].checkpoint_in_flight.is_none();
        let Some(replica) = self.nodes[node].kv.as_mut().map(KvNode::replica_mut) else { return };
        // Snapshots for peers the way the server builds them: a view serialized by the
        // driver (format 8, dead keys left out), sent beside the replica's output.
        let mut built = Vec::new();
        let mut checkpoint = None;
        if replica.snapshot_due() {
            if checkpoint_idle {
                checkpoint = replica.begin_checkpoint();
            }
            if let Some(job) = replica.take_snapshot_job(now) {
                let mut data = Vec::new();
                match crate::state::stream::write(&job.view, &mut data) {
                    Ok(_) => built.extend(job.peers.into_iter().map(|peer| (peer, job.index, data.clone()))),
                    Err(e) => self.oracles.violation(self.now, ViolationKind::SnapshotUnbuilt, e.to_string()),
                }
            }
        }
        if let Some(ticket) = checkpoint {
            let early = self.rng.chance(0.5).then(|| ticket.sync());
            self.nodes[node].checkpoint_in_flight = Some((ticket, early));
            let latency = self.rng.range_u64(100, 3000) * 1000;
            let incarnation = self.nodes[node].incarnation;
            self.queue.push(self.now + latency, Event::CheckpointDone { node, incarnation });
        }
        let gauges = self.nodes[node].gauges;
        let Some(kv) = self.nodes[node].kv.as_mut() else { return };
        // As the server: the answers first, then the engine write of what they applied.
        kv.set_election_gauges(gauges);
        let output = kv.take_output(now);
        let deadline = kv.poll_timeout();
        let id = self.nodes[node].id;
        for trace in &output.applied {
            if trace.from_snapshot {
                self.report.snapshots_installed += 1;
            }
            self.report.leases_expired += trace.expired.len() as u64;
            self.report.slots = self.report.slots.max(trace.slot);
            self.oracles.on_applied(self.now, id, trace);
        }
        for (to, message) in output.log {
            self.send_wire(node, to, Wire::Log(message));
        }
        for (to, message) in output.forwards {
            self.send_wire(node, to, Wire::Forward(message));
        }
        for (to, index, data) in built {
            self.send_wire(node, to, Wire::Log(crate::log::LogMessage::Snapshot { index, data }));
        }
        for (id, slot) in output.chosen {
            self.oracles.on_acked_write(self.now, slot, id);
        }
        for ((client, request_id, request), result) in output.answers {
            self.reply(client, request_id, reply_for_result(&request, result));
        }
        for asker in output.step_downs {
            // The simulated clients never ask for a step-down.
            if let Some(kv) = self.nodes[node].kv.as_mut() {
                kv.step_down_finished(asker, Err(RequestError::ShuttingDown));
            }
        }
        let write_now = !self.defer_engine_writes || self.rng.chance(0.02);
        if let Some(replica) = self.nodes[node].kv.as_mut().map(KvNode::replica_mut) {
            // As the server: the watch streams see the step's changes at once, the engine
            // write may wait.
            replica.publish_applied();
            if write_now {
                replica.flush_applied();
            }
        }
        let n = &mut self.nodes[node];
        let ticket = match (output.needs_sync && n.sync_in_flight.is_none(), n.kv.as_mut().map(KvNode::replica_mut)) {
            (true, Some(replica)) => replica.begin_sync(),
            _ => None,
        };
        if let Some(ticket) = ticket {
            self.nodes[node].sync_in_flight = Some(ticket);
            let latency = self.rng.range_u64(100, 3000) * 1000;
            let incarnation = self.nodes[node].incarnation;
            self.queue.push(self.now + latency, Event::SyncDone { node, incarnation });
        }
        self.nodes[node].replica_generation += 1;
        if let Some(deadline) = deadline {
            let at = self.nodes[node].clock.real_at(deadline).max(self.now);
            let generation = self.nodes[node].replica_generation;
            self.queue.push(at, Event::ReplicaTimer { node, generation });
        }
        if self.watch.clients() > 0 {
            self.observe_history(node);
        }
        if self.sync_configuration(node) {
            self.after_election(node);
        }
    }

    // ---- clients ----

    fn client_next(&mut self, client: usize) {
        if self.quiet || self.ops_issued >= self.config.ops || self.clients[client].in_flight.is_some() {
            return;
        }
        self.ops_issued += 1;
        let (request_id, request) = match self.clients[client].resend.take() {
            Some(again) => again,
            None => {
                let request = self.clients[client].next(&mut self.rng);
                self.clients[client].next_request += 1;
                (self.clients[client].next_request, request)
            }
        };
        if self.indeterminate_writes.contains(&(client, request_id)) {
            let detail = format!("client {} sent again a write answered indeterminate: {request:?}", client + 1);
            self.oracles.violation(self.now, ViolationKind::IndeterminateRetried, detail);
        }
        let c = &mut self.clients[client];
        c.in_flight = Some((request_id, request.clone(), self.now));
        let node = c.target;
        let incarnation = self.nodes[node].incarnation;
        let delay = self.rng.range_u64(50, 500) * 1000;
        self.queue.push(self.now + delay, Event::ClientArrive { node, incarnation, client, request_id, request });
        self.queue.push(self.now + 1500 * MS, Event::ClientTimeout { client, request_id });
    }

    fn reply(&mut self, client: usize, request_id: u64, reply: Reply) {
        if self.config.trace {
            let line = format!("reply to client {} request {request_id}: {reply:?}", client + 1);
            self.trace(|| line);
        }
        let delay = self.rng.range_u64(50, 500) * 1000;
        self.queue.push(self.now + delay, Event::ClientReply { client, request_id, reply });
    }

    /// A request reaches a node: a serializable read is answered from its state; anything
    /// else goes to the node as a master request, served there as master or forwarded once
    /// to the master (the server's path).
    fn serve(&mut self, node: usize, client: usize, request_id: u64, request: Request) {
        let now = self.local(node);
        if self.config.trace {
            let line = format!("client {} request {request_id} at {}: {request:?}", client + 1, self.nodes[node].id);
            self.trace(|| line);
        }
        let Some(kv) = self.nodes[node].kv.as_mut() else { return };
        let master_request = match &request {
            Request::Get { key, linearizable } => {
                let range = RangeRequest { range: KeyRange::single(key_name(*key)), ..Default::default() };
                if *linearizable {
                    MasterRequest::Read(range, 0)
                } else {
                    let reply = match kv.replica().read(now, &range, ReadConsistency::Serializable) {
                        Ok((response, _)) => Reply::Value(response.kvs.first().and_then(|kv| decode_value(&kv.value))),
                        Err(error) => reply_for_error(error),
                    };
                    self.reply(client, request_id, reply);
                    return;
                }
            }
            Request::KeepAlive { lease } => MasterRequest::KeepAlive(*lease),
            Request::Put { key, value } => {
                MasterRequest::Propose(put(key_name(*key), value.to_le_bytes().to_vec(), NO_LEASE))
            }
            Request::Delete { key } => MasterRequest::Propose(Command::DeleteRange(DeleteRangeRequest {
                range: KeyRange::single(key_name(*key)),
                prev_kv: false,
            })),
            Request::Cas { key, expected, new } => {
                let range = KeyRange::single(key_name(*key));
                let compare = match expected {
                    Some(v) => Compare {
                        range,
                        target: CompareTarget::Value(v.to_le_bytes().to_vec()),
                        result: CompareResult::Equal,
                    },
                    None => Compare { range, target: CompareTarget::Version(0), result: CompareResult::Equal },
                };
                let Command::Put(put) = put(key_name(*key), new.to_le_bytes().to_vec(), NO_LEASE) else {
                    unreachable!("put() builds a Put")
                };
                MasterRequest::Propose(Command::Txn(TxnRequest {
                    compare: vec![compare],
                    success: vec![TxnOp::Put(put)],
                    failure: Vec::new(),
                }))
            }
            Request::Grant { name, ttl } => {
                MasterRequest::Propose(Command::LeaseGrant { id: 0, name: Some(name.clone()), ttl: *ttl })
            }
            Request::PutOnLease { client, lease } => {
                MasterRequest::Propose(put(format!("/lease/c{client}"), b"up".to_vec(), *lease))
            }
            Request::Revoke { lease } => MasterRequest::Propose(Command::LeaseRevoke { id: *lease }),
        };
        kv.handle_client(now, master_request, (client, request_id, request), |_| false);
        self.after_replica(node);
    }

    fn on_reply(&mut self, client: usize, request_id: u64, reply: Reply) {
        let c = &mut self.clients[client];
        let Some((id, request, call)) = c.in_flight.clone() else { return };
        if id != request_id {
            return;
        }
        c.in_flight = None;
        let ret = self.now;
        if let Reply::NotMaster(Some(hint)) = &reply {
            c.target = (hint.0 - 1) as usize;
        }
        if matches!(reply, Reply::Indeterminate | Reply::NotMaster(None)) {
            let n = self.nodes.len() as u64;
            c.target = self.rng.range_u64(0, n - 1) as usize;
        }
        if matches!(reply, Reply::Indeterminate) && request.is_write() {
            // Its outcome is unknown: our client hands it back to the caller and never sends
            // it again (a retry could apply it twice).
            if self.config.client_breakage == ClientBreakage::RetryIndeterminate {
                c.resend = Some((request_id, request.clone()));
            }
            self.indeterminate_writes.insert((client, request_id));
        }
        if !matches!(reply, Reply::NotMaster(_) | Reply::Refused(_) | Reply::Indeterminate) {
            self.report.ops_ok += 1;
        }
        self.record(client, &request, &reply, call, ret);
        let think = self.rng.range_u64(0, 40) * MS;
        self.queue.push(self.now + think, Event::ClientNext { client });
    }

    /// Adds an operation on a checked key to the history, and lease answers to the oracle.
    fn record(&mut self, client: usize, request: &Request, reply: &Reply, call: u64, ret: u64) {
        let cid = self.clients[client].id;
        let unknown = matches!(reply, Reply::Indeterminate);
        let (op, outcome) = match (request, reply) {
            (Request::Put { key, value }, Reply::Done) => {
                (KvOp::Put { key: key_name(*key).into_bytes(), value: *value }, KvOutcome::Put)
            }
            (Request::Put { key, value }, _) if unknown => {
                (KvOp::Put { key: key_name(*key).into_bytes(), value: *value }, KvOutcome::Unknown)
            }
            (Request::Get { key, linearizable: true }, Reply::Value(v)) => {
                self.clients[client].seen[*key] = *v;
                (KvOp::Get { key: key_name(*key).into_bytes() }, KvOutcome::Get(*v))
            }
            (Request::Get { key, linearizable: false }, Reply::Value(v)) => {
                self.clients[client].seen[*key] = *v;
                return;
            }
            (Request::Delete { key }, Reply::Deleted(d)) => {
                (KvOp::Delete { key: key_name(*key).into_bytes() }, KvOutcome::Delete { deleted: *d })
            }
            (Request::Delete { key }, _) if unknown => {
                (KvOp::Delete { key: key_name(*key).into_bytes() }, KvOutcome::Unknown)
            }
            (Request::Cas { key, expected, new }, Reply::Swapped(s)) => {
                if *s {
                    self.clients[client].seen[*key] = Some(*new);
                }
                (
                    KvOp::Cas { key: key_name(*key).into_bytes(), expected: *expected, new: *new },
                    KvOutcome::Cas { succeeded: *s },
                )
            }
            (Request::Cas { key, expected, new }, _) if unknown => {
                (KvOp::Cas { key: key_name(*key).into_bytes(), expected: *expected, new: *new }, KvOutcome::Unknown)
            }
            (Request::Grant { .. }, Reply::Granted { id, ttl }) => {
                // The countdown starts when the master that tracks the lease applies the
                // grant (or takes over after it), which is after the call; the answer may come
                // later still, from a node that applied it as a follower. So the call is the
                // instant the oracle can hold the store to.
                self.oracles.on_lease_ack(call, *id, *ttl);
                self.clients[client].lease = Some(HeldLease { id: *id, keep_alive: true });
                return;
            }
            (Request::KeepAlive { lease }, Reply::Ttl(ttl)) => {
                // The master renewed it at some instant between the call and the answer
                // (a follower forwards it, and the answer travels back): the call is the
                // instant the oracle can hold the store to, as for a grant.
                self.oracles.on_lease_ack(call, *lease, *ttl);
                return;
            }
            (Request::KeepAlive { .. }, Reply::Refused(_)) | (Request::Revoke { .. }, Reply::Done) => {
                // Gone (expired or revoked): take another one later.
                self.clients[client].lease = None;
                return;
            }
            _ => return,
        };
        self.history.push(Operation { client: cid, op, call, ret, outcome });
    }

    // ---- faults ----

    fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                let now = self.local(i);
                self.nodes[i].election.as_ref().is_some_and(|c| c.mastership(now).is_some())
            })
            .collect()
    }

    fn shuffled(&mut self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        for i in (1..order.len()).rev() {
            let j = self.rng.range_u64(0, i as u64) as usize;
            order.swap(i, j);
        }
        order
    }

    fn chaos(&mut self) {
        if self.quiet {
            return;
        }
        self.network.faults = self.config.faults.clone();
        let n = self.nodes.len();
        let masters = self.masters();
        let victim = match masters.first() {
            Some(&m) if self.rng.chance(0.6) => m,
            _ => self.rng.range_u64(0, n as u64 - 1) as usize,
        };
        match self.rng.range_u64(0, 19) {
            0..=2 => {
                let order = self.shuffled();
                let cut = self.rng.range_u64(1, n as u64 - 1) as usize;
                let side_a: Vec<NodeId> = order[..cut].iter().map(|&i| self.nodes[i].id).collect();
                let side_b: Vec<NodeId> = order[cut..].iter().map(|&i| self.nodes[i].id).collect();
                self.trace(|| format!("partition {side_a:?} | {side_b:?}"));
                self.network.partition(&side_a, &side_b);
                let heal = self.rng.range_u64(300, 3000) * MS;
                self.queue.push(self.now + heal, Event::Heal);
            }
            3..=5 => {
                let id = self.nodes[victim].id;
                let rest: Vec<NodeId> = self.ids.iter().copied().filter(|&x| x != id).collect();
                self.trace(|| format!("isolate {id}"));
                self.network.partition(&[id], &rest);
                let heal = self.rng.range_u64(500, 4000) * MS;
                self.queue.push(self.now + heal, Event::Heal);
            }
            6..=8 if self.is_up(victim) => {
                self.crash(victim);
                let back = if self.rng.chance(0.3) { self.rng.range_u64(1, 50) } else { self.rng.range_u64(200, 3000) };
                self.queue.push(self.now + back * MS, Event::Restart { node: victim });
            }
            9 | 10 => {
                // Power loss: every node at once; unsynced writes are gone everywhere.
                self.trace(|| "crash all".to_string());
                for node in 0..n {
                    self.crash(node);
                    let back = self.rng.range_u64(20, 800) * MS;
                    self.queue.push(self.now + back, Event::Restart { node });
                }
            }
            11..=13 if self.is_up(victim) => {
                // A process pause (GC, swapped out, SIGSTOP): nothing runs, then the clock has jumped.
                let pause = self.rng.range_u64(200, 3500) * MS;
                let id = self.nodes[victim].id;
                self.trace(|| format!("pause {id} for {}ms", pause / MS));
                self.nodes[victim].paused_until = self.now + pause;
            }
            14 | 15 => {
                let now = self.local(victim);
                if let Some(core) = self.nodes[victim].election.as_mut() {
                    core.step_down(now);
                    let id = self.nodes[victim].id;
                    self.trace(|| format!("step down {id}"));
                    self.after_election(victim);
                }
            }
            16 => {
                let window = self.rng.range_u64(100, 1000) * MS;
                let extra = self.rng.range_u64(100, 1000) * MS;
                let id = self.nodes[victim].id;
                self.trace(|| format!("clog {id}"));
                self.network.clog(id, self.now + window, extra);
                self.queue.push(self.now + window + extra, Event::Heal);
            }
            _ => {}
        }
        let next = self.rng.range_u64(200, 1500) * MS;
        self.queue.push(self.now + next, Event::Chaos);
    }

    /// Faults stop, every node comes back, the network is healed and loss-free; clients
    /// stop. By the end every replica must have caught up and every lease expired.
    fn begin_quiet(&mut self) {
        self.quiet = true;
        self.trace(|| "quiet".to_string());
        self.network.heal();
        self.network.faults.loss = 0.0;
        self.network.faults.stall = 0.0;
        for node in 0..self.nodes.len() {
            self.nodes[node].paused_until = 0;
            self.start(node);
        }
    }

    // ---- the end ----

    fn finish(mut self) -> SeedReport {
        // Convergence: every replica has applied the same slots into the same state.
        // Among the members of the last configuration: removed nodes stopped where they
        // learned of their removal (or earlier), and spares the log never added never ran.
        let members = match self.configurations.values().next_back() {
            Some(last) => last.ids(),
            None => self.ids.clone(),
        };
        // The digest says the same commands were applied; the hash of the whole state says
        // they left the same keys, leases and history (a state engine that lost writes
        // behind an applied point it kept has the digest right and the keys wrong).
        let states: Vec<(NodeId, Slot, u64, usize, u32)> = self
            .nodes
            .iter()
            .filter(|n| members.contains(&n.id))
            .filter_map(|n| {
                n.kv.as_ref()
                    .map(KvNode::replica)
                    .map(|r| (n.id, r.applied_index(), r.state().digest(), r.state().lease_count(), r.state().hash()))
            })
            .collect();
        let first = states.first().copied();
        let same = |s: &(NodeId, Slot, u64, usize, u32)| first.is_some_and(|f| (s.1, s.2, s.4) == (f.1, f.2, f.4));
        if states.len() != members.len() || !states.iter().all(same) {
            let detail = format!("replicas at the end (node, applied, digest, leases): {states:?}");
            self.oracles.violation(self.now, ViolationKind::NoConvergence, detail);
        }
        if let Some(leftover) = states.iter().find(|s| s.3 > 0) {
            let detail = format!(
                "{} still holds {} lease(s) {:.1}s after clients stopped keeping them alive",
                leftover.0,
                leftover.3,
                self.config.quiet_length().as_secs_f64()
            );
            self.oracles.violation(self.now, ViolationKind::LeaseOutlived, detail);
        }
        self.report.ops_checked = self.history.len();
        match linearizability::check(&self.history, CheckBudget { max_steps: 2_000_000 }) {
            CheckResult::Linearizable { .. } => {}
            CheckResult::Violation(v) => {
                let detail = v.explanation.clone();
                self.oracles.violation(self.now, ViolationKind::Linearizability, detail);
            }
            CheckResult::Inconclusive { .. } => self.report.inconclusive += 1,
        }
        self.report.watch_responses = self.watch.responses;
        self.report.watch_resumed = self.watch.resumed;
        self.report.acked_writes = self.oracles.acked_writes;
        self.report.acked_lost = self.oracles.acked_lost;
        self.report.violations = std::mem::take(&mut self.oracles.violations);
        std::mem::take(&mut self.report)
    }
}

fn key_name(key: usize) -> String {
    debug_assert!(key < CHECKED_KEYS);
    format!("k{key}")
}

fn decode_value(bytes: &[u8]) -> Option<u64> {
    bytes.try_into().ok().map(u64::from_le_bytes)
}

fn put(key: impl Into<Vec<u8>>, value: Vec<u8>, lease: crate::types::LeaseId) -> Command {
    Command::Put(PutRequest { key: key.into(), value, lease, prev_kv: false })
}

fn reply_for(request: &Request, applied: Applied) -> Reply {
    match applied.result {
        Err(error) => Reply::Refused(error.to_string()),
        Ok(CommandResponse::DeleteRange(d)) => Reply::Deleted(d.deleted > 0),
        Ok(CommandResponse::Txn(t)) => Reply::Swapped(t.succeeded),
        Ok(CommandResponse::LeaseGrant(g)) => Reply::Granted { id: g.id, ttl: g.ttl },
        Ok(_) => {
            debug_assert!(request.is_write());
            Reply::Done
        }
    }
}

fn reply_for_result(request: &Request, result: MasterResult) -> Reply {
    match result {
        Ok(MasterAnswer::Propose(applied)) => reply_for(request, applied),
        Ok(MasterAnswer::Read(response, _)) => {
            Reply::Value(response.kvs.first().and_then(|kv| decode_value(&kv.value)))
        }
        Ok(MasterAnswer::KeepAlive(ttl)) => Reply::Ttl(ttl),
        Ok(other) => Reply::Refused(format!("an answer of another kind: {other:?}")),
        Err(error) => reply_for_error(error),
    }
}

fn reply_for_error(error: RequestError) -> Reply {
    match error {
        RequestError::NotMaster { hint } => Reply::NotMaster(hint),
        RequestError::Indeterminate { .. } => Reply::Indeterminate,
        RequestError::NotReady => Reply::NotMaster(None),
        other => Reply::Refused(other.to_string()),
    }
}
