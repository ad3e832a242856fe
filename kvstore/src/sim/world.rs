//! One simulated cluster of whole replicas, its clients, its fault schedule and its oracles.

use super::linearizability::{self, CheckBudget, CheckResult, History, KvOp, KvOutcome, Operation};
use super::oracle::{Oracles, ViolationKind};
use super::workload::{Client, HeldLease, Reply, Request, CHECKED_KEYS};
use crate::command::{
    Applied, Command, CommandResponse, Compare, CompareResult, CompareTarget, DeleteRangeRequest, PutRequest,
    RangeRequest, TxnOp, TxnRequest,
};
use crate::limits::Limits;
#[cfg(feature = "negative-controls")]
use crate::log::LogBreakage;
use crate::log::{CheckpointTicket, LogMessage, Replica, ReplicaConfig, RequestError, Slot, SyncTicket};
use crate::membership::Membership;
use crate::node::{
    Driver, ElectionGauges, ElectionView, ForwardMessage, Input, MasterAnswer, MasterRequest, MasterResult,
    NodeBreakage, TurnFacts,
};
use crate::storage::MemoryStorage;
use crate::types::{KeyRange, NO_LEASE};
use crate::watch::StreamConfig;
use leasekv_lease::rng::SplitMix64;
use leasekv_lease::sim::{DrillHold, EventQueue, Network, NetworkFaults, SimClock};
use leasekv_lease::{
    BackendKind, ElectionCore, ElectionMessage, EpochStore, LeadershipChange, LeaseConfig, LossReason,
    MemoryEpochStore, NodeId,
};
use std::collections::BTreeMap;
use std::time::Duration;

mod clients;
mod faults;
mod membership;
mod nodes;
mod report;
mod sim_io;
mod stale_majority;
mod watchers;

pub use report::{SeedReport, SimSummary};

const MS: u64 = 1_000_000;
/// A microsecond, in the simulator's nanoseconds.
const US: u64 = 1_000;

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
        // Read leases on, as in a server's default: every node answers linearizable reads.
        replica.read_leases = Some(crate::log::ReadLeaseConfig::new(lease.lease_time / 2, drift));
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
    /// The node's loop ends its long turn: it takes the status published meanwhile, if its
    /// inputs did not take it first.
    LoopIdle {
        node: usize,
        incarnation: u64,
    },
    Deliver {
        to: usize,
        from: NodeId,
        incarnation: u64,
        wire: Wire,
    },
    ElectionTimer {
        node: usize,
        generation: u64,
    },
    ReplicaTimer {
        node: usize,
        generation: u64,
    },
    /// A renewal held back (seeds 4 mod 5) reaches the node.
    StatusDelivered {
        node: usize,
        incarnation: u64,
    },
    SyncDone {
        node: usize,
        incarnation: u64,
    },
    CheckpointDone {
        node: usize,
        incarnation: u64,
    },
    ClientArrive {
        node: usize,
        incarnation: u64,
        client: usize,
        request_id: u64,
        request: Request,
    },
    ClientReply {
        client: usize,
        request_id: u64,
        reply: Reply,
    },
    ClientTimeout {
        client: usize,
        request_id: u64,
    },
    /// A read the node decided runs on its reader thread (after a random delay, so reads
    /// overtake each other and the writes applied meanwhile, as on the server's pool).
    ReadRun {
        node: usize,
        incarnation: u64,
        job: Box<(crate::log::ReadJob, crate::node::Asker<Waiter>)>,
    },
    ClientNext {
        client: usize,
    },
    Restart {
        node: usize,
    },
    /// The end of a sick-disk drill (see `World::sicken_disk`): the node crashes.
    DrillCrash {
        node: usize,
        incarnation: u64,
    },
    WatchTick {
        client: usize,
    },
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
    /// The node's loop is busy (a long turn) until then: its inputs wait, and a status
    /// published meanwhile is taken by the next of them (see `World::after_election`).
    loop_busy_until: u64,
    /// What the election reported after its latest step, for the node.
    gauges: ElectionGauges,
    /// The election status the node was last handed.
    delivered: ElectionView,
    /// A renewal held back from the node (as a busy node loop takes a status late).
    pending_view: Option<ElectionView>,
    /// Whether the held-back renewal has reached the node's queue: its next input takes it.
    pending_visible: bool,
    /// For a spare node the log added: the configuration it joins with (its seed).
    join_seed: Option<Membership>,
    /// The configuration epoch its election was last given.
    election_epoch: u64,
    /// A sick-disk drill waits for this node's next checkpoint (see `World::sicken_disk`).
    sick_disk: bool,
}

struct World {
    config: KvSimConfig,
    rng: SplitMix64,
    /// A sick-disk drill under way: the node, its incarnation and the slot it had applied
    /// when it was cut off (see `World::sicken_disk`).
    sick: Option<(usize, u64, Slot)>,
    /// A stale-majority drill under way (see `stale_majority.rs`).
    stale_majority: Option<stale_majority::StaleMajority>,
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
    /// Seeds 4 mod 5 hand a renewal of mastership to the node up to 800 ms late, as a busy
    /// node loop takes the election's status late: a timeout then meets the renewal.
    delay_renewals: bool,
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
    fn new(mut config: KvSimConfig, seed: u64) -> Self {
        // Half the seeds read single keys through views too, as the server reads ranges.
        config.replica.point_reads_in_place = seed.is_multiple_of(2);
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
                    disk: Some(storage_for(&config.replica)),
                    epochs: MemoryEpochStore::default(),
                    sync_in_flight: None,
                    checkpoint_in_flight: None,
                    election_generation: 0,
                    replica_generation: 0,
                    paused_until: 0,
                    loop_busy_until: 0,
                    gauges: ElectionGauges::default(),
                    delivered: ElectionView::default(),
                    pending_view: None,
                    pending_visible: false,
                    join_seed: None,
                    election_epoch: 0,
                    sick_disk: false,
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
            sick: None,
            stale_majority: None,
            configurations: BTreeMap::new(),
            overlapping: false,
            delay_renewals: seed % 5 == 4,
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
            | Event::StatusDelivered { node, .. }
            | Event::ReadRun { node, .. }
            | Event::LoopIdle { node, .. }
            | Event::ClientArrive { node, .. } => Some(*node),
            _ => None,
        }
    }

    /// Whether `event` is an input of the node's loop (not of its election or readers).
    fn is_loop_input(event: &Event) -> bool {
        match event {
            Event::Deliver { wire, .. } => !matches!(wire, Wire::Election(_)),
            Event::ReplicaTimer { .. }
            | Event::SyncDone { .. }
            | Event::CheckpointDone { .. }
            | Event::ClientArrive { .. } => true,
            _ => false,
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
            // A busy loop takes its own inputs when its turn ends, before it looks at the
            // status (the election's thread and the readers go on meanwhile).
            if self.nodes[node].loop_busy_until > self.now && World::is_loop_input(&event) {
                let idle = self.nodes[node].loop_busy_until;
                self.queue.push(idle, event);
                return;
            }
            // A status that arrived is taken by the driver before the node's next input
            // (`Driver::handle`), as on the server.
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
                        self.drive(to, Some(Input::SnapshotFile(index, path)));
                    }
                    Wire::Log(msg) => {
                        self.drive(to, Some(Input::Log(from, msg)));
                    }
                    Wire::Forward(message) => {
                        let input = match message {
                            ForwardMessage::Request(id, request) => Input::Forwarded(from, id, request),
                            ForwardMessage::Answer(id, result) => Input::Answered(from, id, result),
                        };
                        self.drive(to, Some(input));
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
                let Some(led) = self.nodes[node].kv.as_ref().map(|kv| kv.replica().leads_the_log()) else { return };
                let now = self.local(node);
                let before = self.nodes[node].delivered.master;
                let taken = self.drive(node, Some(Input::Timeout));
                // Only a renewal counts: the same tenure, extended (a loop busy through a
                // release may take a new tenure with its timeout, and a new tenure takes
                // the log over again).
                let renewal = taken.filter(|view| match (before, view.master) {
                    (Some(old), Some(new)) => old.term == new.term && new.valid_until > old.valid_until,
                    _ => false,
                });
                if let Some(view) = renewal {
                    let id = self.nodes[node].id;
                    self.trace(|| format!("{id} takes a held-back renewal with a timeout {view:?}"));
                }
                let leads = self.nodes[node].kv.as_ref().is_some_and(|kv| kv.replica().leads_the_log());
                if led && !leads && renewal.is_some_and(|v| v.master.is_some_and(|m| now < m.valid_until)) {
                    let id = self.nodes[node].id;
                    let detail =
                        format!("{id} gave up leading the log at a timeout that came with a renewal of its lease");
                    self.oracles.violation(self.now, ViolationKind::RoundGivenUpWhileRenewed, detail);
                }
            }
            Event::LoopIdle { node, incarnation } => {
                if incarnation == self.nodes[node].incarnation {
                    self.nodes[node].loop_busy_until = 0;
                    self.drive(node, Some(Input::Election));
                }
            }
            Event::StatusDelivered { node, incarnation } => {
                // In the node's queue from now on: the next input of the node takes it.
                if incarnation == self.nodes[node].incarnation && self.nodes[node].pending_view.is_some() {
                    self.nodes[node].pending_visible = true;
                }
            }
            Event::ReadRun { node, incarnation, job } => {
                if incarnation != self.nodes[node].incarnation {
                    return;
                }
                let (job, asker) = *job;
                self.run_read(node, job, asker);
            }
            Event::SyncDone { node, incarnation } => {
                if incarnation != self.nodes[node].incarnation {
                    return;
                }
                let Some(ticket) = self.nodes[node].sync_in_flight.take() else { return };
                // The disk finishes now, covering every write up to now: more than the
                // ticket covers, as with a real fsync; only the ticket's messages go out.
                self.drive(node, Some(Input::Synced(ticket, None)));
            }
            Event::CheckpointDone { node, incarnation } => {
                if incarnation != self.nodes[node].incarnation {
                    return;
                }
                let Some((ticket, early)) = self.nodes[node].checkpoint_in_flight.take() else { return };
                let synced = early.unwrap_or_else(|| ticket.sync());
                self.drive(node, Some(Input::CheckpointSynced(ticket, synced)));
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
            Event::DrillCrash { node, incarnation } => {
                // The quiet phase has no faults: a drill's crash planned for later is off.
                if !self.quiet && incarnation == self.nodes[node].incarnation && self.is_up(node) {
                    self.crash(node);
                    let back = self.rng.range_u64(50, 500) * MS;
                    self.queue.push(self.now + back, Event::Restart { node });
                }
            }
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
        for node in &self.nodes {
            if let Some(kv) = &node.kv {
                self.report.lease_reads.add(kv.lease_read_counts());
            }
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

/// A node's blank disk, its state engine running the value log's negative control if the
/// seed's control is one of them.
fn storage_for(replica: &crate::log::ReplicaConfig) -> MemoryStorage {
    let mut disk = MemoryStorage::new();
    let value_log = if replica.broken(crate::log::LogBreakage::PageAfterPointer) {
        crate::engine::ValueLogBreakage::PointerBeforeValue
    } else if replica.broken(crate::log::LogBreakage::PageFileRemovedEarly) {
        crate::engine::ValueLogBreakage::FileRemovedEarly
    } else {
        crate::engine::ValueLogBreakage::None
    };
    disk.break_value_log(value_log);
    disk
}
