//! Benchmarks of the PaxosLease core, plus the figures the README quotes.
//!
//! Criterion groups (wall-clock, one core):
//! - `acceptor`: `Acceptor::on_prepare` / `on_propose` with increasing ballots.
//! - `proposer`: one `Proposer` round driven by hand (prepare and propose responses).
//! - `cluster`: a 3-node cluster of `LeaseNode`s with messages delivered by hand; every
//!   `handle_message` call is one step.
//!
//! Printed summary (lines prefixed `leasekv-bench:`), for what criterion does not fit:
//! - step rates of the same workloads, measured once more with a plain timer;
//! - bytes per idle acceptor instance, from a counting global allocator;
//! - acquire and failover latency from the deterministic simulator (virtual time);
//! - the uncontended acquire, in virtual time, with a fixed one-way delay.
//!
//! ```text
//! cargo bench -p leasekv-lease --bench lease            # everything
//! cargo bench -p leasekv-lease --bench lease -- --quick # shorter criterion runs
//! ```

use criterion::{Criterion, Throughput};
use leasekv_lease::backend::BackendKind;
use leasekv_lease::paxos::{Acceptor, Body, LeaseNode, Message, Proposal, Proposer, ProposerOutput};
use leasekv_lease::rng::SplitMix64;
use leasekv_lease::sim::{percentile, run_seeds, SimConfig};
use leasekv_lease::{
    Ballot, ElectionMessage, Envelope, Instant, LeadershipChange, LeaseConfig, NodeId, ResourceId, RestartEpoch,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::time::Duration;

/// Prefix of every summary line, so they are easy to grep and copy.
const PREFIX: &str = "leasekv-bench:";

/// Steps per iteration of the acceptor benchmarks.
const ACCEPTOR_BATCH: u64 = 1_000;

/// Idle acceptor instances created for the memory figure.
const IDLE_INSTANCES: u64 = 100_000;

/// Target figures from the brief, checked in the summary.
const TARGET_STEPS_PER_SEC: f64 = 1_000_000.0;
/// Target bytes per idle acceptor instance (PaxosLease section 8 says ~100).
const TARGET_IDLE_BYTES: f64 = 128.0;

/// Seeds per simulator configuration (`cargo bench`).
const SIM_SEEDS: u64 = 300;
/// Seeds per simulator configuration when run as a test (`cargo test --benches`).
const SIM_SEEDS_SMOKE: u64 = 10;
/// Cluster size in the simulator runs.
const SIM_NODES: usize = 5;
/// Clock drift bound in the simulator runs (the `sim` example's default).
const SIM_DRIFT: f64 = 0.01;

// ---------------------------------------------------------------------------------------
// Counting allocator
// ---------------------------------------------------------------------------------------

/// Whether allocations are being counted. Off except while the memory figure is measured,
/// so that the throughput benchmarks pay one relaxed load per allocation and nothing more.
static COUNTING: AtomicBool = AtomicBool::new(false);
/// Net bytes allocated (allocated minus freed) since counting was switched on. Signed: a
/// block allocated before and freed during the window counts negative, which is right for
/// a delta of currently allocated bytes.
static NET_BYTES: AtomicIsize = AtomicIsize::new(0);
/// Net number of live blocks since counting was switched on.
static NET_BLOCKS: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting currently allocated bytes while [`COUNTING`] is on.
struct CountingAlloc;

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

impl CountingAlloc {
    /// Records `bytes` (and `blocks`) more live memory, if counting.
    fn record(bytes: isize, blocks: isize) {
        if COUNTING.load(Ordering::Relaxed) {
            NET_BYTES.fetch_add(bytes, Ordering::Relaxed);
            NET_BLOCKS.fetch_add(blocks, Ordering::Relaxed);
        }
    }

    /// A block size as a signed byte count (block sizes never exceed `isize::MAX`).
    fn signed(size: usize) -> isize {
        isize::try_from(size).unwrap_or(isize::MAX)
    }
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the `GlobalAlloc`
// contract; the wrapper only updates counters and never touches the memory.
unsafe impl GlobalAlloc for CountingAlloc {
    /// Allocates through `System` and counts the block.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract; forwarded as is.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            CountingAlloc::record(CountingAlloc::signed(layout.size()), 1);
        }
        ptr
    }

    /// Allocates zeroed memory through `System` and counts the block.
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc_zeroed`'s contract; forwarded as is.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            CountingAlloc::record(CountingAlloc::signed(layout.size()), 1);
        }
        ptr
    }

    /// Frees through `System` and uncounts the block.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `dealloc`'s contract; forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        CountingAlloc::record(-CountingAlloc::signed(layout.size()), -1);
    }

    /// Reallocates through `System` and counts the change in size.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `realloc`'s contract; forwarded as is.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            CountingAlloc::record(CountingAlloc::signed(new_size) - CountingAlloc::signed(layout.size()), 0);
        }
        new
    }
}

/// Runs `f` with allocation counting on; returns its result, the net bytes and the net
/// blocks it left allocated.
fn count_allocations<T>(f: impl FnOnce() -> T) -> (T, isize, isize) {
    NET_BYTES.store(0, Ordering::SeqCst);
    NET_BLOCKS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    let value = f();
    COUNTING.store(false, Ordering::SeqCst);
    (value, NET_BYTES.load(Ordering::SeqCst), NET_BLOCKS.load(Ordering::SeqCst))
}

// ---------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------

/// Node ids `1..=n`.
fn node_ids(n: u32) -> Vec<NodeId> {
    (1..=n).map(NodeId).collect()
}

/// A first-start restart epoch (no quarantine).
fn first_epoch() -> RestartEpoch {
    RestartEpoch { value: 1, first_start: true }
}

/// A fresh cluster of `LeaseNode`s with the default configuration, started at `now`.
fn lease_cluster(n: u32, now: Instant) -> Vec<LeaseNode> {
    let peers = node_ids(n);
    peers
        .iter()
        .map(|&id| LeaseNode::new(id, &peers, LeaseConfig::default(), first_epoch(), now, u64::from(id.0)))
        .collect()
}

/// The index of node `id` in a cluster built by [`lease_cluster`].
fn index_of(id: NodeId) -> usize {
    id.0 as usize - 1
}

/// The PaxosLease message inside an envelope; `LeaseNode` sends nothing else.
fn paxos_message(env: Envelope) -> Message {
    match env.msg {
        ElectionMessage::PaxosLease(m) => m,
        other => unreachable!("a LeaseNode sent a non-PaxosLease message: {other:?}"),
    }
}

/// Calls `step` (which returns the steps it performed) until `budget` has passed, after a
/// short warm-up; returns steps per second.
fn steps_per_sec(budget: Duration, mut step: impl FnMut() -> u64) -> f64 {
    let warm_up = std::time::Instant::now();
    while warm_up.elapsed() < budget / 5 {
        step();
    }
    let start = std::time::Instant::now();
    let mut steps = 0u64;
    while start.elapsed() < budget {
        steps += step();
    }
    steps as f64 / start.elapsed().as_secs_f64()
}

/// Milliseconds with one decimal, or `none`.
fn ms(d: Option<Duration>) -> String {
    d.map_or_else(|| "none".to_string(), |d| format!("{:.1}", d.as_secs_f64() * 1e3))
}

// ---------------------------------------------------------------------------------------
// Workloads (shared by criterion and the printed summary)
// ---------------------------------------------------------------------------------------

/// One acceptor fed requests with ever higher ballots, as a busy lease instance sees them.
struct AcceptorSteps {
    acceptor: Acceptor,
    counter: u64,
    now: Instant,
    max_lease_time: Duration,
    proposal: Proposal,
}

impl AcceptorSteps {
    /// A fresh acceptor; proposals come from node 2 for the default lease time.
    fn new() -> Self {
        let config = LeaseConfig::default();
        AcceptorSteps {
            acceptor: Acceptor::new(),
            counter: 0,
            now: Instant::from_nanos(1_000_000_000),
            max_lease_time: config.max_lease_time,
            proposal: Proposal { owner: NodeId(2), duration: config.lease_time },
        }
    }

    /// The next, higher ballot of node 2.
    fn next_ballot(&mut self) -> Ballot {
        self.counter += 1;
        Ballot { counter: self.counter, epoch: 1, node: NodeId(2) }
    }

    /// `ACCEPTOR_BATCH` prepares; returns the step count.
    fn prepares(&mut self) -> u64 {
        for _ in 0..ACCEPTOR_BATCH {
            let ballot = self.next_ballot();
            black_box(self.acceptor.on_prepare(self.now, black_box(ballot)));
        }
        ACCEPTOR_BATCH
    }

    /// `ACCEPTOR_BATCH` proposes; returns the step count.
    fn proposes(&mut self) -> u64 {
        for _ in 0..ACCEPTOR_BATCH {
            let ballot = self.next_ballot();
            black_box(self.acceptor.on_propose(self.now, black_box(ballot), self.proposal, self.max_lease_time));
        }
        ACCEPTOR_BATCH
    }

    /// `ACCEPTOR_BATCH` prepare/propose pairs (a full round at one acceptor); returns the
    /// step count (two per pair).
    fn rounds(&mut self) -> u64 {
        for _ in 0..ACCEPTOR_BATCH {
            let ballot = self.next_ballot();
            black_box(self.acceptor.on_prepare(self.now, black_box(ballot)));
            black_box(self.acceptor.on_propose(self.now, ballot, self.proposal, self.max_lease_time));
        }
        2 * ACCEPTOR_BATCH
    }
}

/// One proposer of a 3-node cluster, holding and extending a lease, with the acceptors'
/// answers fed by hand.
struct ProposerRounds {
    proposer: Proposer,
    rng: SplitMix64,
    out: ProposerOutput,
    now: Instant,
    peers: Vec<NodeId>,
}

impl ProposerRounds {
    /// Responses fed per round: a prepare and a propose response from each of 3 acceptors.
    const STEPS: u64 = 6;

    /// A proposer of node 1 that wants the lease; the first round elects it.
    fn new() -> Self {
        let mut proposer =
            Proposer::new(NodeId(1), 1, leasekv_lease::Members::from_ids(&node_ids(3)), LeaseConfig::default());
        proposer.acquire(Instant::ZERO);
        let mut rounds = ProposerRounds {
            proposer,
            rng: SplitMix64::new(7),
            out: ProposerOutput::default(),
            now: Instant::ZERO,
            peers: node_ids(3),
        };
        rounds.round();
        let elected = rounds.out.changes.iter().any(|c| matches!(c, LeadershipChange::Elected { .. }));
        assert!(elected, "the first proposer round did not elect: {:?}", rounds.out.changes);
        rounds
    }

    /// One round (acquire or extend) at the instant the proposer asks for: its timeout,
    /// then 3 prepare responses and 3 propose responses (the third of each arrives after the
    /// majority, as in a real cluster). Returns the number of responses fed.
    fn round(&mut self) -> u64 {
        let Some(at) = self.proposer.poll_timeout() else {
            unreachable!("a proposer that wants the lease always has a timeout")
        };
        self.now = at;
        self.out.messages.clear();
        self.out.changes.clear();
        self.proposer.on_timeout(self.now, &mut self.rng, &mut self.out);
        let ballot = self
            .out
            .messages
            .iter()
            .find_map(|(_, body)| match body {
                Body::PrepareRequest { ballot } => Some(*ballot),
                _ => None,
            })
            .unwrap_or_else(|| unreachable!("the timeout did not start a round: {:?}", self.out.messages));
        for &from in &self.peers {
            let body = Body::PrepareResponse { ballot, accepted: None };
            self.proposer.on_message(self.now, from, 0, body, &mut self.rng, &mut self.out);
        }
        for &from in &self.peers {
            let body = Body::ProposeResponse { ballot, accepted: true, promised: ballot };
            self.proposer.on_message(self.now, from, 0, body, &mut self.rng, &mut self.out);
        }
        Self::STEPS
    }
}

/// A cluster of `LeaseNode`s with zero-delay, in-order delivery done by hand.
struct HandCluster {
    nodes: Vec<LeaseNode>,
    now: Instant,
    in_flight: VecDeque<(NodeId, Envelope)>,
    /// Leadership changes seen so far (kept only until the caller clears them).
    changes: Vec<(NodeId, LeadershipChange)>,
}

impl HandCluster {
    /// A fresh `n`-node cluster at virtual time zero, nobody competing yet.
    fn new(n: u32) -> Self {
        HandCluster {
            nodes: lease_cluster(n, Instant::ZERO),
            now: Instant::ZERO,
            in_flight: VecDeque::new(),
            changes: Vec::new(),
        }
    }

    /// Queues whatever node `i` produced.
    fn collect(&mut self, i: usize) {
        let from = self.nodes[i].id();
        let (messages, changes) = self.nodes[i].take_output();
        self.in_flight.extend(messages.into_iter().map(|env| (from, env)));
        self.changes.extend(changes.into_iter().map(|(_, c)| (from, c)));
    }

    /// Delivers messages until none is left; returns the `handle_message` calls made.
    fn deliver_all(&mut self) -> u64 {
        for i in 0..self.nodes.len() {
            self.collect(i);
        }
        let mut steps = 0;
        while let Some((from, env)) = self.in_flight.pop_front() {
            let to = index_of(env.to);
            self.nodes[to].handle_message(self.now, from, paxos_message(env));
            steps += 1;
            self.collect(to);
        }
        steps
    }

    /// Node 1 acquires the master lease; delivers until quiet. Returns the steps.
    fn acquire(&mut self) -> u64 {
        self.nodes[0].acquire(self.now, ResourceId::MASTER);
        self.deliver_all()
    }

    /// Advances to node 1's next timeout (its renewal), fires it and delivers until quiet.
    /// Returns the steps.
    fn renewal(&mut self) -> u64 {
        let Some(at) = self.nodes[0].poll_timeout() else {
            unreachable!("the lease holder always has a renewal timeout")
        };
        self.now = at;
        self.nodes[0].on_timeout(self.now);
        let steps = self.deliver_all();
        self.changes.clear();
        steps
    }

    /// A 3-node cluster whose node 1 holds the master lease.
    fn with_master() -> Self {
        let mut cluster = HandCluster::new(3);
        cluster.acquire();
        let elected =
            cluster.changes.iter().any(|(n, c)| *n == NodeId(1) && matches!(c, LeadershipChange::Elected { .. }));
        assert!(elected, "node 1 was not elected: {:?}", cluster.changes);
        cluster.changes.clear();
        cluster
    }
}

/// A fresh 3-node cluster in which node 1 acquires the master lease; returns the steps.
fn fresh_acquire() -> u64 {
    let mut cluster = HandCluster::new(3);
    let steps = cluster.acquire();
    black_box(&cluster.changes);
    steps
}

// ---------------------------------------------------------------------------------------
// Criterion
// ---------------------------------------------------------------------------------------

/// Acceptor message steps: prepare, propose, and both, with increasing ballots.
fn bench_acceptor(c: &mut Criterion) {
    let mut group = c.benchmark_group("acceptor");
    group.throughput(Throughput::Elements(ACCEPTOR_BATCH));
    let mut prepare = AcceptorSteps::new();
    group.bench_function("on_prepare", |b| b.iter(|| prepare.prepares()));
    let mut propose = AcceptorSteps::new();
    group.bench_function("on_propose", |b| b.iter(|| propose.proposes()));
    group.throughput(Throughput::Elements(2 * ACCEPTOR_BATCH));
    let mut rounds = AcceptorSteps::new();
    group.bench_function("prepare_then_propose", |b| b.iter(|| rounds.rounds()));
    group.finish();
}

/// Proposer message steps: one round of responses fed to `Proposer::on_message`.
fn bench_proposer(c: &mut Criterion) {
    let mut group = c.benchmark_group("proposer");
    group.throughput(Throughput::Elements(ProposerRounds::STEPS));
    let mut rounds = ProposerRounds::new();
    group.bench_function("on_message_round", |b| b.iter(|| rounds.round()));
    group.finish();
}

/// Cluster message steps: every `handle_message` call of a 3-node `LeaseNode` cluster.
fn bench_cluster(c: &mut Criterion) {
    let mut group = c.benchmark_group("cluster");
    let mut cluster = HandCluster::with_master();
    group.throughput(Throughput::Elements(cluster.renewal()));
    group.bench_function("renewal_round_3_nodes", |b| b.iter(|| cluster.renewal()));
    group.throughput(Throughput::Elements(fresh_acquire()));
    group.bench_function("fresh_acquire_3_nodes", |b| b.iter(fresh_acquire));
    group.finish();
}

/// Short criterion runs, so the whole bench finishes in about a minute on two cores.
fn criterion_config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .configure_from_args()
}

// ---------------------------------------------------------------------------------------
// Printed summary
// ---------------------------------------------------------------------------------------

/// What the idle-acceptor measurement found.
struct IdleFootprint {
    bytes: isize,
    blocks: isize,
    instances: usize,
    all_idle: bool,
}

/// Creates `IDLE_INSTANCES` idle acceptors in one `LeaseNode` (a prepare each, nothing
/// accepted) and measures the memory they keep allocated.
fn idle_acceptor_footprint() -> IdleFootprint {
    let peers = node_ids(3);
    let now = Instant::from_nanos(1_000_000_000);
    let mut node = LeaseNode::new(NodeId(1), &peers, LeaseConfig::default(), first_epoch(), Instant::ZERO, 1);
    let ballot = Ballot { counter: 1, epoch: 1, node: NodeId(2) };
    let ((), bytes, blocks) = count_allocations(|| {
        for i in 0..IDLE_INSTANCES {
            let msg = Message { resource: ResourceId(i), epoch: 0, body: Body::PrepareRequest { ballot } };
            node.handle_message(now, NodeId(2), msg);
            drop(node.take_output());
        }
    });
    let all_idle = (0..IDLE_INSTANCES).all(|i| node.acceptor(ResourceId(i)).is_some_and(|a| a.is_idle(now)));
    IdleFootprint { bytes, blocks, instances: node.acceptor_count(), all_idle }
}

/// Prints the idle-acceptor memory figure.
fn report_idle(footprint: &IdleFootprint) {
    let per = footprint.bytes as f64 / IDLE_INSTANCES as f64;
    println!(
        "{PREFIX} idle_acceptor_bytes={per:.1} (size_of::<Acceptor>={} size_of::<(ResourceId, Acceptor)>={} \
         instances={} all_idle={} net_blocks={}) target<=128 {}",
        std::mem::size_of::<Acceptor>(),
        std::mem::size_of::<(ResourceId, Acceptor)>(),
        footprint.instances,
        footprint.all_idle,
        footprint.blocks,
        verdict(per <= TARGET_IDLE_BYTES),
    );
}

/// `ok` or `MISSED`.
fn verdict(met: bool) -> &'static str {
    if met {
        "ok"
    } else {
        "MISSED"
    }
}

/// How much work the printed summary does: full under `cargo bench`, a quick smoke run
/// under `cargo test --benches` (criterion's test mode), so test runs stay fast.
#[derive(Debug, Clone, Copy)]
struct Scale {
    /// Timer budget of each step-rate measurement.
    rate_budget: Duration,
    /// Seeds per simulator configuration.
    sim_seeds: u64,
    /// Whether the figures are meant to be compared against the targets.
    full: bool,
}

impl Scale {
    /// The scale for this invocation: full only when cargo passed `--bench`.
    fn from_args() -> Scale {
        if std::env::args().any(|a| a == "--bench") {
            Scale { rate_budget: Duration::from_millis(400), sim_seeds: SIM_SEEDS, full: true }
        } else {
            println!("{PREFIX} test mode (no --bench): reduced summary, figures not representative");
            Scale { rate_budget: Duration::from_millis(20), sim_seeds: SIM_SEEDS_SMOKE, full: false }
        }
    }
}

/// Prints the step rates of the criterion workloads, measured with a plain timer.
fn report_rates(scale: Scale) {
    let budget = scale.rate_budget;
    let mut rows: Vec<(&str, f64)> = Vec::new();
    let mut prepare = AcceptorSteps::new();
    rows.push(("acceptor_on_prepare", steps_per_sec(budget, || prepare.prepares())));
    let mut propose = AcceptorSteps::new();
    rows.push(("acceptor_on_propose", steps_per_sec(budget, || propose.proposes())));
    let mut rounds = AcceptorSteps::new();
    rows.push(("acceptor_prepare_then_propose", steps_per_sec(budget, || rounds.rounds())));
    let mut proposer = ProposerRounds::new();
    rows.push(("proposer_on_message", steps_per_sec(budget, || proposer.round())));
    let mut cluster = HandCluster::with_master();
    rows.push(("cluster3_renewal_handle_message", steps_per_sec(budget, || cluster.renewal())));
    rows.push(("cluster3_fresh_acquire_handle_message", steps_per_sec(budget, fresh_acquire)));
    for (name, rate) in rows {
        println!(
            "{PREFIX} {name}_steps_per_sec={rate:.0} target>=1000000 {}",
            if scale.full { verdict(rate >= TARGET_STEPS_PER_SEC) } else { "(not checked in test mode)" }
        );
    }
}

/// Runs the simulator for every backend at loss 0 and 0.2 and prints a table.
fn report_sim(scale: Scale) {
    let seeds = scale.sim_seeds;
    println!(
        "{PREFIX} simulator: nodes={SIM_NODES} seeds={seeds} drift={SIM_DRIFT}, virtual time, all nodes \
         contend from t=0; failover = master crash at 3 s -> next master"
    );
    println!(
        "{PREFIX} {:<15} {:>4} {:>8} {:>8} {:>10} {:>10} {:>8} {:>11} {:>11} {:>10} {:>9} {:>6}",
        "backend",
        "loss",
        "elected",
        "acquired",
        "acq_p50ms",
        "acq_p99ms",
        "failover",
        "fail_p50ms",
        "fail_p99ms",
        "violations",
        "msgs/seed",
        "wall_s"
    );
    for backend in [BackendKind::PaxosLease, BackendKind::NaiveMajority, BackendKind::LeaseTracker] {
        for loss in [0.0, 0.2] {
            let config = SimConfig::new(backend, SIM_NODES, loss, SIM_DRIFT);
            let started = std::time::Instant::now();
            let summary = run_seeds(&config, 0, seeds, |_| {});
            println!(
                "{PREFIX} {:<15} {:>4.1} {:>8} {:>8} {:>10} {:>10} {:>8} {:>11} {:>11} {:>10} {:>9} {:>6.1}",
                backend.name(),
                loss,
                format!("{}/{}", summary.elected_seeds, summary.seeds),
                format!("{}/{}", summary.acquire.len(), summary.seeds),
                ms(percentile(&summary.acquire, 50.0)),
                ms(percentile(&summary.acquire, 99.0)),
                format!("{}/{}", summary.failover.len(), summary.seeds),
                ms(percentile(&summary.failover, 50.0)),
                ms(percentile(&summary.failover, 99.0)),
                summary.violations,
                summary.messages / summary.seeds.max(1),
                started.elapsed().as_secs_f64(),
            );
        }
    }
}

/// Virtual time from node 1's acquire to its `Elected`, in an `n`-node `LeaseNode` cluster
/// where nobody else competes and every message takes exactly `delay`; also the messages
/// sent until then. `None` if no election within a second.
fn uncontended_acquire(n: u32, delay: Duration) -> Option<(Duration, u64)> {
    let start = Instant::ZERO;
    let give_up = start.saturating_add(Duration::from_secs(1));
    let mut nodes = lease_cluster(n, start);
    // A constant delay keeps the in-flight queue in delivery order.
    let mut in_flight: VecDeque<(Instant, NodeId, Envelope)> = VecDeque::new();
    let mut sent = 0u64;
    let mut now = start;
    nodes[0].acquire(now, ResourceId::MASTER);
    loop {
        for node in nodes.iter_mut() {
            let from = node.id();
            let (messages, changes) = node.take_output();
            if changes.iter().any(|(_, c)| matches!(c, LeadershipChange::Elected { .. })) {
                return Some((now.saturating_since(start), sent));
            }
            sent += messages.len() as u64;
            in_flight.extend(messages.into_iter().map(|env| (now.saturating_add(delay), from, env)));
        }
        let next_message = in_flight.front().map(|(at, _, _)| *at);
        let next_timer = nodes.iter().filter_map(LeaseNode::poll_timeout).min();
        now = match (next_message, next_timer) {
            (Some(m), Some(t)) => m.min(t),
            (m, t) => m.or(t)?,
        };
        if now > give_up {
            return None;
        }
        if next_message == Some(now) {
            if let Some((_, from, env)) = in_flight.pop_front() {
                nodes[index_of(env.to)].handle_message(now, from, paxos_message(env));
            }
        } else {
            for node in nodes.iter_mut().filter(|n| n.poll_timeout().is_some_and(|t| t <= now)) {
                node.on_timeout(now);
            }
        }
    }
}

/// Prints the uncontended acquire in virtual time and round trips.
fn report_uncontended() {
    let delay = Duration::from_millis(1);
    for n in [3, 5] {
        match uncontended_acquire(n, delay) {
            Some((took, sent)) => println!(
                "{PREFIX} uncontended_acquire nodes={n} one_way_delay=1ms: {:.3} ms = {:.2} round trips \
                 (messages={sent})",
                took.as_secs_f64() * 1e3,
                took.as_secs_f64() / (2.0 * delay.as_secs_f64()),
            ),
            None => println!("{PREFIX} uncontended_acquire nodes={n}: NOT ELECTED within 1 s"),
        }
    }
}

/// Measures the memory figure first (before criterion allocates anything), runs the
/// criterion groups, then prints the summary.
fn main() {
    let listing = std::env::args().any(|a| a == "--list");
    let footprint = (!listing).then(idle_acceptor_footprint);

    let mut criterion = criterion_config();
    bench_acceptor(&mut criterion);
    bench_proposer(&mut criterion);
    bench_cluster(&mut criterion);
    criterion.final_summary();

    if let Some(footprint) = footprint {
        println!();
        report_idle(&footprint);
        let scale = Scale::from_args();
        report_rates(scale);
        report_uncontended();
        report_sim(scale);
    }
}
