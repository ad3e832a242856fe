//! One simulated cluster of election cores, its fault schedule and its oracles.
//!
//! With membership changes on, the world also plays the replicated log: it keeps the
//! configuration history ([`super::membership::History`]), lets the master propose the next
//! change when rules 2 and 5 of docs/membership.md allow it, and has every member apply each
//! change after its own delay (0–300 ms, or 0.3–3 s for 15% of them; a restarted member reads
//! the whole history from its data dir). New learners are nodes started for the first time.
//! A removed voter crashes before it applies its removal half of the time and comes back
//! later with the configuration it had; it must never win. In the quiet phase a majority of
//! the latest configuration's voters is up, learners are up, removed nodes are down, and the
//! log reaches every live member at once.

use super::clock::SimClock;
use super::membership::{self, Change, Configuration, History, MembershipStats};
use super::network::{DrillHold, Network, NetworkFaults};
use super::queue::EventQueue;
use super::stats::Summary;
use crate::backend::BackendKind;
use crate::config::{Breakage, LeaseConfig};
use crate::core::{ElectionCore, LeadershipChange};
use crate::epoch::{EpochStore, MemoryEpochStore};
use crate::ids::NodeId;
use crate::message::ElectionMessage;
use crate::rng::SplitMix64;
use std::time::Duration;

const MS: u64 = 1_000_000;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The election backend under test.
    pub backend: BackendKind,
    /// Cluster size.
    pub nodes: usize,
    /// Lease timing; its `drift_bound` is also the drift the simulated clocks have, and its
    /// `breakage` selects a negative control.
    pub lease: LeaseConfig,
    /// Network faults outside the quiet phase (the quiet phase is loss-free).
    pub faults: NetworkFaults,
    /// Length of the chaos phase (partitions, crashes, restarts, step-downs, clogs).
    pub chaos: Duration,
    /// Record a readable trace of every event (for replaying one failing seed).
    pub trace: bool,
    /// Change the membership at run time (docs/membership.md): the master adds learners,
    /// promotes them and removes voters as rules 2 and 5 allow, during the chaos too. On by
    /// default for PaxosLease, the backend that implements the rules.
    pub membership: bool,
}

impl SimConfig {
    /// The defaults of the `sim` example: 1 s leases, 5% duplicates, 0.1–2 ms delays, 10%
    /// of messages slowed by up to 100 ms and 1% stalled by up to 1.5 s, 15 s of chaos, and
    /// membership changes for PaxosLease (see [`SimConfig::membership`]).
    pub fn new(backend: BackendKind, nodes: usize, loss: f64, drift: f64) -> Self {
        let mut lease = LeaseConfig::with_lease_time(Duration::from_secs(1));
        lease.drift_bound = drift;
        SimConfig {
            backend,
            nodes,
            lease,
            faults: NetworkFaults {
                loss,
                duplicate: 0.05,
                min_delay: MS / 10,
                max_delay: 2 * MS,
                slow: 0.1,
                slow_max: 100 * MS,
                stall: 0.01,
                stall_max: 1500 * MS,
            },
            chaos: Duration::from_secs(15),
            trace: false,
            membership: backend == BackendKind::PaxosLease,
        }
    }

    /// When the master may first change the membership (a master is elected by then).
    fn membership_start(&self) -> u64 {
        1000 * MS
    }

    /// The interval between two looks at whether the master may propose a change: fast under
    /// the `no-change-wait` control, which proposes whenever the master has applied the
    /// latest configuration, so that epochs pile up within one lease time.
    fn change_tick(&self, rng: &mut SplitMix64) -> u64 {
        if self.lease.broken(Breakage::NoChangeWait) {
            rng.range_u64(10, 60) * MS
        } else {
            rng.range_u64(100, 600) * MS
        }
    }

    /// When the master is crashed to measure failover.
    fn crash_master_at(&self) -> u64 {
        3000 * MS
    }

    fn chaos_start(&self) -> u64 {
        6000 * MS
    }

    fn quiet_start(&self) -> u64 {
        self.chaos_start() + self.chaos.as_nanos() as u64
    }

    /// The liveness bound, stated: once the quiet phase starts (every link loss-free and
    /// connected among the live majority, no more faults), some node is master within
    /// `M + T + stall_max + 1 s`: M for the quarantine of nodes restarted at that moment,
    /// T for leases granted just before, the longest stalled message (a stale proposal may
    /// still land), and a second for rounds and back-off.
    pub fn liveness_bound(&self) -> Duration {
        self.lease.max_lease_time
            + self.lease.lease_time
            + Duration::from_nanos(self.faults.stall_max)
            + Duration::from_secs(1)
    }

    fn end(&self) -> u64 {
        self.quiet_start() + self.liveness_bound().as_nanos() as u64 + 500 * MS
    }
}

/// Two or more nodes believing they are master at the same real instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// The seed that produced it (replay with `--seed-base SEED --seeds 1`).
    pub seed: u64,
    /// Real time in ms.
    pub at_ms: f64,
    /// The nodes that believed at once.
    pub masters: Vec<NodeId>,
}

/// The outcome of one seed.
#[derive(Debug, Clone, Default)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Safety violations (each episode of overlapping masters counts once).
    pub violations: Vec<Violation>,
    /// Real time from the simultaneous start to the first master.
    pub first_acquire: Option<Duration>,
    /// Real time from crashing the master to the next master.
    pub failover: Option<Duration>,
    /// Real time from the start of the quiet phase to a master, if within the bound.
    pub elected_in_quiet: Option<Duration>,
    /// Whether the quiet phase's live majority could elect at all (for the lease tracker:
    /// only if the tracker node is among it).
    pub liveness_expected: bool,
    /// Messages sent.
    pub messages: u64,
    /// The membership changes made and applied.
    pub membership: MembershipStats,
    /// The epoch of the last configuration.
    pub final_epoch: u64,
    /// The event trace, if asked for.
    pub trace: Vec<String>,
}

#[derive(Debug)]
enum Event {
    Deliver {
        to: NodeId,
        from: NodeId,
        msg: ElectionMessage,
    },
    Timer {
        node: usize,
        generation: u64,
    },
    Start {
        node: usize,
    },
    CrashMaster,
    Restart {
        node: usize,
    },
    Chaos,
    Heal,
    Quiet,
    /// A look at whether the master may propose the next configuration change.
    ChangeTick,
    /// `node` applies configuration `epoch` from the log.
    Apply {
        node: usize,
        epoch: u64,
    },
}

struct Slot {
    id: NodeId,
    core: Option<Box<dyn ElectionCore>>,
    epochs: MemoryEpochStore,
    clock: SimClock,
    timer_generation: u64,
    /// The configuration epoch the node has applied (its data dir's).
    applied: u64,
    /// A removed node that came back with the configuration it had before its removal: the
    /// log no longer reaches it, so it applies nothing more.
    stale: bool,
}

struct World {
    config: SimConfig,
    seed: u64,
    rng: SplitMix64,
    slots: Vec<Slot>,
    ids: Vec<NodeId>,
    network: Network,
    queue: EventQueue<Event>,
    now: u64,
    report: SeedReport,
    /// Whether the last check saw more than one master (to count episodes once).
    overlapping: bool,
    crashed_master: Option<(NodeId, u64)>,
    quiet: bool,
    down_for_good: Vec<usize>,
    /// The log's configuration history.
    history: History,
    /// The master a takeover drill waits on: cut off once its next round lands.
    drill: Option<NodeId>,
}

/// Runs one seed and reports what the oracles saw.
pub fn run_seed(config: &SimConfig, seed: u64) -> SeedReport {
    let mut world = World::new(config.clone(), seed);
    world.run();
    world.report
}

/// Runs seeds `base..base+count`, calling `progress` after each.
pub fn run_seeds(config: &SimConfig, base: u64, count: u64, mut progress: impl FnMut(&SeedReport)) -> Summary {
    let mut summary = Summary::default();
    for seed in base..base + count {
        let report = run_seed(config, seed);
        progress(&report);
        summary.add(report);
    }
    summary
}

impl World {
    fn new(config: SimConfig, seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0x5EED);
        let eps = config.lease.drift_bound;
        let ids: Vec<NodeId> = (1..=config.nodes as u32).map(NodeId).collect();
        let slots = ids.iter().map(|&id| new_slot(id, eps, &mut rng)).collect();
        let mut clean = config.faults.clone();
        clean.slow = 0.0;
        clean.stall = 0.0;
        let history = History::new(&ids);
        let mut world = World {
            network: Network::new(clean),
            report: SeedReport { seed, ..SeedReport::default() },
            config,
            seed,
            rng,
            slots,
            ids,
            queue: EventQueue::default(),
            now: 0,
            overlapping: false,
            crashed_master: None,
            quiet: false,
            down_for_good: Vec::new(),
            history,
            drill: None,
        };
        for node in 0..world.slots.len() {
            world.queue.push(0, Event::Start { node });
        }
        if world.config.membership {
            world.queue.push(world.config.membership_start(), Event::ChangeTick);
        }
        world.queue.push(world.config.crash_master_at(), Event::CrashMaster);
        world.queue.push(world.config.chaos_start(), Event::Chaos);
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
        // Bounded: the event count is limited as well as virtual time.
        let mut budget: u64 = 5_000_000;
        while let Some((at, event)) = self.queue.pop() {
            if at > end || budget == 0 {
                break;
            }
            budget -= 1;
            self.now = at;
            self.handle(event);
            self.check();
        }
        let bound = self.config.liveness_bound();
        self.report.elected_in_quiet = self.report.elected_in_quiet.filter(|d| *d <= bound);
        self.report.final_epoch = self.history.latest().epoch;
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver { to, from, msg } => {
                let node = self.index(to);
                let now = self.local(node);
                if self.slots[node].core.is_none() {
                    return;
                }
                if self.config.trace {
                    let line = format!("{from} -> {to}: {msg:?}");
                    self.trace(|| line);
                }
                if let Some(core) = self.slots[node].core.as_mut() {
                    core.handle_message(now, from, msg);
                }
                self.after_step(node);
            }
            Event::Timer { node, generation } => {
                if self.slots[node].timer_generation != generation {
                    return;
                }
                let now = self.local(node);
                if let Some(core) = self.slots[node].core.as_mut() {
                    core.handle_timeout(now);
                    self.after_step(node);
                }
            }
            Event::Start { node } | Event::Restart { node } => self.start(node),
            Event::CrashMaster => {
                if let Some(master) = self.masters().first().copied() {
                    let node = self.index(master);
                    self.crash(node);
                    self.crashed_master = Some((master, self.now));
                    // Down until the chaos starts, so failover is measured among the survivors.
                    self.queue.push(self.config.chaos_start(), Event::Restart { node });
                }
            }
            Event::Chaos => self.chaos(),
            Event::Heal => {
                self.trace(|| "heal".to_string());
                self.network.heal();
            }
            Event::Quiet => self.begin_quiet(),
            Event::ChangeTick => self.change_tick(),
            Event::Apply { node, epoch } => self.apply(node, epoch),
        }
    }

    fn index(&self, id: NodeId) -> usize {
        (id.0 - 1) as usize
    }

    fn local(&self, node: usize) -> crate::time::Instant {
        self.slots[node].clock.local(self.now)
    }

    fn start(&mut self, node: usize) {
        if self.slots[node].core.is_some() || self.down_for_good.contains(&node) {
            return;
        }
        let Some(configuration) = self.configuration_at_start(node) else {
            let id = self.slots[node].id;
            self.trace(|| format!("{id} refuses to start: its data dir says it was removed"));
            return;
        };
        let now = self.local(node);
        let epoch = match self.slots[node].epochs.begin_epoch() {
            Ok(e) => e,
            Err(_) => return,
        };
        let seed = self.rng.next_u64();
        let id = self.slots[node].id;
        self.trace(|| format!("start {id} epoch {}", epoch.value));
        let core = self.config.backend.build_core(id, &self.ids, None, self.config.lease.clone(), epoch, now, seed);
        match core {
            Ok(mut core) => {
                if let Some(c) = configuration.filter(|c| c.epoch > 0) {
                    // The driver configures the core from the data dir before it connects:
                    // whatever the constructor queued for the initial peer list (epoch 0)
                    // is dropped.
                    let _ = core.take_output();
                    core.set_configuration(now, &crate::members::Configuration::new(c.epoch, &c.voters, &c.learners));
                    self.slots[node].applied = c.epoch;
                    self.trace(|| format!("{id} starts at configuration {c:?}"));
                }
                self.slots[node].core = Some(core);
                self.after_step(node);
            }
            Err(e) => panic!("simulator built an invalid lease config: {e}"),
        }
    }

    /// The configuration a starting node reads from its data dir: `Some(None)` without
    /// membership changes (the constructor's peer list is epoch 0), the latest for a member
    /// (a restarted node has everything the log holds), the one before its removal for a
    /// removed node that crashed before it applied its removal (it comes back, stale), and
    /// `None` for a removed node that knows it (it refuses to start).
    fn configuration_at_start(&mut self, node: usize) -> Option<Option<Configuration>> {
        if !self.config.membership {
            return Some(None);
        }
        let id = self.slots[node].id;
        let latest = self.history.latest();
        if latest.contains(id) && !self.slots[node].stale {
            return Some(Some(latest.clone()));
        }
        let removed_at = self.history.removed_at(id)?;
        if self.slots[node].applied >= removed_at {
            return None;
        }
        // Its data dir holds every configuration before the one that removed it: the log
        // replicated to it until then.
        let before = self.history.get(removed_at - 1)?.clone();
        if !self.slots[node].stale {
            self.slots[node].stale = true;
            self.report.membership.returned += 1;
            self.trace(|| format!("removed {id} comes back with epoch {}", before.epoch));
        }
        Some(Some(before))
    }

    /// The master proposes the next configuration change if rules 2 and 5 allow it (under
    /// the `no-change-wait` control: as soon as it has applied the latest one).
    fn change_tick(&mut self) {
        if self.quiet {
            return;
        }
        let next = self.config.change_tick(&mut self.rng);
        self.queue.push(self.now + next, Event::ChangeTick);
        let masters = self.masters();
        let [master] = masters[..] else { return };
        let node = self.index(master);
        let latest = self.history.latest().epoch;
        let allowed = if self.config.lease.broken(Breakage::NoChangeWait) {
            self.slots[node].applied == latest
        } else {
            let now = self.local(node);
            let rule_5 = self.slots[node].core.as_ref().and_then(|c| c.change_allowed_after());
            rule_5.is_some_and(|(epoch, at)| epoch == latest && now >= at)
        };
        if !allowed {
            return;
        }
        let fresh = NodeId(self.slots.len() as u32 + 1);
        let change =
            membership::pick(self.history.latest(), master, fresh, self.config.lease.breakage(), &mut self.rng);
        let previous = self.history.latest().clone();
        let next = self.history.append(change).clone();
        self.trace(|| format!("{master} proposes {change:?}: {next:?}"));
        let stats = &mut self.report.membership;
        match change {
            Change::AddLearner(_) => stats.learners_added += 1,
            Change::Promote(_) => stats.promoted += 1,
            Change::PromoteTwo(..) => stats.two_voters_added += 1,
            Change::Remove(n) => {
                stats.removed += 1;
                if n == master {
                    stats.removed_master += 1;
                }
            }
        }
        // Every member of the old or the new configuration applies it after its own delay;
        // now and then one lags far behind (a slow disk, a partition of the log).
        for node in 0..self.slots.len() {
            let id = self.slots[node].id;
            if !(previous.contains(id) || next.contains(id)) || self.slots[node].stale {
                continue;
            }
            let delay = if self.rng.chance(0.15) { self.rng.range_u64(300, 3000) } else { self.rng.range_u64(0, 300) };
            self.queue.push(self.now + delay * MS, Event::Apply { node, epoch: next.epoch });
        }
        match change {
            Change::AddLearner(id) => {
                let slot = new_slot(id, self.config.lease.drift_bound, &mut self.rng);
                self.slots.push(slot);
                self.start(self.slots.len() - 1);
            }
            Change::Remove(id) if self.rng.chance(0.5) => {
                // It crashes before it applies its removal, and comes back later with the
                // configuration it had: it must not win.
                let node = self.index(id);
                if self.slots[node].core.is_some() {
                    self.crash(node);
                    let back = self.rng.range_u64(500, 5000) * MS;
                    self.queue.push(self.now + back, Event::Restart { node });
                }
            }
            _ => {}
        }
    }

    /// `node` applies configuration `epoch` (if running and not already further).
    fn apply(&mut self, node: usize, epoch: u64) {
        if self.slots[node].stale || self.slots[node].applied >= epoch {
            return;
        }
        let Some(c) = self.history.get(epoch).cloned() else { return };
        let now = self.local(node);
        let Some(core) = self.slots[node].core.as_mut() else { return };
        core.set_configuration(now, &crate::members::Configuration::new(c.epoch, &c.voters, &c.learners));
        self.slots[node].applied = epoch;
        self.report.membership.applied += 1;
        let id = self.slots[node].id;
        self.trace(|| format!("{id} applies epoch {epoch}"));
        self.after_step(node);
    }

    /// The nodes chaos picks from: the members of the latest configuration (all nodes
    /// without membership changes).
    fn members(&self) -> Vec<usize> {
        let latest = self.history.latest();
        (0..self.slots.len()).filter(|&i| !self.config.membership || latest.contains(self.slots[i].id)).collect()
    }

    fn all_ids(&self) -> Vec<NodeId> {
        self.slots.iter().map(|s| s.id).collect()
    }

    fn crash(&mut self, node: usize) {
        let id = self.slots[node].id;
        self.trace(|| format!("crash {id}"));
        self.slots[node].core = None;
        self.slots[node].timer_generation += 1;
    }

    /// Sends what the core produced and re-arms its timer.
    fn after_step(&mut self, node: usize) {
        let Some(core) = self.slots[node].core.as_mut() else { return };
        let output = core.take_output();
        let deadline = core.poll_timeout();
        let from = self.slots[node].id;
        for change in output.changes {
            self.trace(|| format!("{from} {change:?}"));
            if let LeadershipChange::Elected { .. } = change {
                self.on_elected(from);
            }
            if matches!(change, LeadershipChange::Elected { .. } | LeadershipChange::Extended { .. }) {
                self.cut_off_drilled(from);
            }
        }
        for env in output.messages {
            self.report.messages += 1;
            for delay in self.network.deliveries(self.now, from, env.to, &mut self.rng) {
                self.queue.push(self.now + delay, Event::Deliver { to: env.to, from, msg: env.msg.clone() });
            }
        }
        self.slots[node].timer_generation += 1;
        if let Some(deadline) = deadline {
            let at = self.slots[node].clock.real_at(deadline).max(self.now);
            let generation = self.slots[node].timer_generation;
            self.queue.push(at, Event::Timer { node, generation });
        }
    }

    fn on_elected(&mut self, who: NodeId) {
        if self.slots[self.index(who)].stale {
            self.trace(|| format!("{who}, removed and back with an old configuration, was elected"));
            self.report.membership.won_by_returned += 1;
        }
        let since = Duration::from_nanos(self.now);
        if self.report.first_acquire.is_none() {
            self.report.first_acquire = Some(since);
        }
        if let Some((crashed, at)) = self.crashed_master {
            if crashed != who && self.report.failover.is_none() {
                self.report.failover = Some(Duration::from_nanos(self.now - at));
            }
        }
        if self.quiet && self.report.elected_in_quiet.is_none() {
            self.report.elected_in_quiet = Some(Duration::from_nanos(self.now - self.config.quiet_start()));
        }
    }

    fn masters(&self) -> Vec<NodeId> {
        self.slots
            .iter()
            .filter(|s| s.core.as_ref().is_some_and(|c| c.mastership(s.clock.local(self.now)).is_some()))
            .map(|s| s.id)
            .collect()
    }

    /// The safety oracle, after every event: at most one node believes it is master.
    fn check(&mut self) {
        let masters = self.masters();
        if masters.len() > 1 {
            if !self.overlapping {
                self.trace(|| format!("VIOLATION: {masters:?} are master at once"));
                self.report.violations.push(Violation {
                    seed: self.seed,
                    at_ms: self.now as f64 / MS as f64,
                    masters: masters.clone(),
                });
            }
            self.overlapping = true;
        } else {
            self.overlapping = false;
        }
        if self.quiet && self.report.elected_in_quiet.is_none() && !masters.is_empty() {
            self.report.elected_in_quiet = Some(Duration::from_nanos(self.now - self.config.quiet_start()));
        }
    }

    /// One fault, then the next one scheduled, until the quiet phase.
    fn chaos(&mut self) {
        if self.quiet {
            return;
        }
        self.network.faults = self.config.faults.clone();
        if self.drill.take().is_some() {
            // The drilled master never renewed (it stepped down or crashed): the drill is over.
            self.network.end_drill();
        }
        let mut next = self.rng.range_u64(100, 1500) * MS;
        let n = self.slots.len();
        let members = self.members();
        let masters = self.masters();
        let pick_master = !masters.is_empty() && self.rng.chance(0.5);
        let victim = if pick_master {
            self.index(masters[0])
        } else {
            members[self.rng.range_u64(0, members.len() as u64 - 1) as usize]
        };
        match self.rng.range_u64(0, 10) {
            0 | 1 => {
                // Partition into two random sides, healed later.
                let mut order: Vec<NodeId> = self.all_ids();
                for i in (1..order.len()).rev() {
                    let j = self.rng.range_u64(0, i as u64) as usize;
                    order.swap(i, j);
                }
                let cut = self.rng.range_u64(1, n as u64 - 1) as usize;
                let (a, b) = order.split_at(cut);
                let (a, b) = (a.to_vec(), b.to_vec());
                self.trace(|| format!("partition {a:?} | {b:?}"));
                self.network.partition(&a, &b);
                let heal = self.rng.range_u64(300, 3000) * MS;
                self.queue.push(self.now + heal, Event::Heal);
            }
            // Crash one node; sometimes it is back almost at once.
            2 | 3 if self.slots[victim].core.is_some() => {
                self.crash(victim);
                let back = if self.rng.chance(0.3) { self.rng.range_u64(1, 50) } else { self.rng.range_u64(200, 3000) };
                self.queue.push(self.now + back * MS, Event::Restart { node: victim });
            }
            4 => {
                // Restart storm: a majority of the nodes other than the master restart quickly.
                let majority = crate::members::Members::majority_of(members.len());
                let mut others: Vec<usize> =
                    members.iter().copied().filter(|i| !masters.contains(&self.slots[*i].id)).collect();
                for i in (1..others.len()).rev() {
                    let j = self.rng.range_u64(0, i as u64) as usize;
                    others.swap(i, j);
                }
                for &node in others.iter().take(majority) {
                    if self.slots[node].core.is_some() {
                        self.crash(node);
                        let back = self.rng.range_u64(1, 100) * MS;
                        self.queue.push(self.now + back, Event::Restart { node });
                    }
                }
            }
            5 | 6 => {
                // Step-down of the master, if any, or of a random node; half of the time a
                // hand-over to another node (etcd's leader transfer).
                let now = self.local(victim);
                let to = self.slots[members[self.rng.range_u64(0, members.len() as u64 - 1) as usize]].id;
                let hand_over = self.rng.chance(0.5);
                let id = self.slots[victim].id;
                if let Some(core) = self.slots[victim].core.as_mut() {
                    if hand_over {
                        core.hand_over(now, to);
                        self.trace(|| format!("hand over {id} -> {to}"));
                    } else {
                        core.step_down(now);
                        self.trace(|| format!("step down {id}"));
                    }
                    self.after_step(victim);
                }
            }
            7 => {
                // Clog one sender: its messages of the next while arrive late, out of order.
                let window = self.rng.range_u64(100, 1000) * MS;
                let extra = window + self.rng.range_u64(100, 1500) * MS;
                let id = self.slots[victim].id;
                self.trace(|| format!("clog {id} for {}ms", window / MS));
                self.network.clog(id, self.now + window, extra);
                self.queue.push(self.now + window + extra, Event::Heal);
            }
            8 => {
                // Cut the master (or a random node) off from everyone else.
                let id = self.slots[victim].id;
                let rest: Vec<NodeId> = self.all_ids().into_iter().filter(|&n| n != id).collect();
                self.trace(|| format!("isolate {id}"));
                self.network.partition(&[id], &rest);
                let heal = self.rng.range_u64(500, 3000) * MS;
                self.queue.push(self.now + heal, Event::Heal);
            }
            9 if !masters.is_empty() => next = self.begin_drill(masters[0]),
            10 if !masters.is_empty() => next = self.stale_release_drill(masters[0]),
            _ => {}
        }
        self.queue.push(self.now + next, Event::Chaos);
    }

    /// A takeover drill, the fault shaped for the instant a holder's own timer is all that
    /// keeps two masters apart (the `late-timer` and `no-drift-margin` controls): random
    /// faults rarely reach it, since a lost, partitioned or backing-off majority seldom
    /// takes over within a few ms of the acceptors' expiry. Every other fault stops, what
    /// the master receives comes late by 60–95% of a round timeout (so its next round
    /// lands that late), and once that round lands the master is cut off; the rest, on
    /// loss-free links, take over as soon as the acceptors let them. The clocks drift apart
    /// as far as the bound allows (the master's slowest, the others' fastest), so the
    /// holder's margin is all there is between the two leases. Returns how long the drill
    /// keeps the next fault away: one renewal, one lease time and the takeover.
    fn begin_drill(&mut self, master: NodeId) -> u64 {
        let eps = self.config.lease.drift_bound;
        for node in 0..self.slots.len() {
            let rate = if self.slots[node].id == master { 1.0 - eps } else { 1.0 + eps };
            self.slots[node].clock.set_rate(self.now, rate);
            // Timers armed at the old rate would fire at the wrong real time.
            self.after_step(node);
        }
        self.calm_network();
        let round = self.config.lease.round_timeout.as_nanos() as u64;
        let late = self.rng.range_u64(round * 6 / 10, round * 95 / 100);
        self.network.drill(&[master], DrillHold::LateInbound(late));
        self.drill = Some(master);
        self.trace(|| format!("drill: {master} receives {}ms late", late / MS));
        let lease = &self.config.lease;
        (lease.renew_interval + lease.lease_time).as_nanos() as u64 + 5 * round
    }

    /// A stale-release drill, the fault shaped for an acceptor that must not let an old
    /// ballot's Release free a newer one (the `release-any-ballot` control): the master
    /// steps down while what it sends is held back for 3–6 round timeouts, so its Release
    /// arrives after it has won the lease back with a newer ballot once its hold-off ended.
    /// The others, told of the release, compete at once. Other faults stop meanwhile, so
    /// the win back is prompt. Returns how long the drill keeps the next fault away.
    fn stale_release_drill(&mut self, master: NodeId) -> u64 {
        self.calm_network();
        let round = self.config.lease.round_timeout.as_nanos() as u64;
        let held_back = self.rng.range_u64(3, 6) * round;
        // Only what it sends at this instant: its next round goes out on time.
        self.network.clog(master, self.now + 1, held_back);
        let node = self.index(master);
        let now = self.local(node);
        if let Some(core) = self.slots[node].core.as_mut() {
            core.step_down(now);
        }
        self.trace(|| format!("drill: {master} steps down, its release held back {}ms", held_back / MS));
        self.after_step(node);
        self.config.lease.lease_time.as_nanos() as u64 + 2 * held_back
    }

    /// Every other fault stops for a drill: links heal, and no message is lost, slowed or
    /// stalled until the next chaos event restores the configured rates.
    fn calm_network(&mut self) {
        self.network.heal();
        self.network.faults.loss = 0.0;
        self.network.faults.slow = 0.0;
        self.network.faults.stall = 0.0;
    }

    /// The drilled master's round landed: cut it off until the others have taken over.
    fn cut_off_drilled(&mut self, node: NodeId) {
        if self.drill != Some(node) {
            return;
        }
        self.drill = None;
        let until = self.now + self.config.lease.lease_time.as_nanos() as u64 + self.rng.range_u64(300, 2000) * MS;
        self.network.drill(&[node], DrillHold::Isolated(until));
        self.trace(|| format!("drill: isolate {node}"));
    }

    /// The quiet phase: faults stop; a random majority (or more) is up and connected by
    /// loss-free links; the rest stays down. The liveness oracle then expects a master
    /// within the stated bound.
    fn begin_quiet(&mut self) {
        self.quiet = true;
        self.network.heal();
        self.network.end_drill();
        self.drill = None;
        self.network.faults.loss = 0.0;
        self.network.faults.stall = 0.0;
        let n = self.slots.len();
        // A minority of the voters (of every node, without membership changes) stays down;
        // learners stay up, and nodes removed from the cluster are down for good.
        let latest = self.history.latest().clone();
        let membership = self.config.membership;
        let voters: Vec<usize> = (0..n).filter(|&i| !membership || latest.voters.contains(&self.slots[i].id)).collect();
        let majority = crate::members::Members::majority_of(voters.len());
        let down_count = self.rng.range_u64(0, (voters.len() - majority) as u64) as usize;
        let mut order: Vec<usize> = voters;
        for i in (1..order.len()).rev() {
            let j = self.rng.range_u64(0, i as u64) as usize;
            order.swap(i, j);
        }
        let mut down: Vec<usize> = order[..down_count].to_vec();
        down.extend((0..n).filter(|&i| membership && !latest.contains(self.slots[i].id)));
        if membership {
            // In a quiet, connected network the log reaches every live member at once.
            for node in 0..n {
                if !down.contains(&node) {
                    self.apply(node, latest.epoch);
                }
            }
        }
        for node in 0..n {
            if down.contains(&node) {
                if self.slots[node].core.is_some() {
                    self.crash(node);
                }
            } else {
                self.start(node);
            }
        }
        // Restarts still queued from the chaos phase must not revive the nodes kept down.
        self.down_for_good = down.clone();
        self.report.liveness_expected = match self.config.backend {
            // The tracker is the lowest id; if it stays down nobody can be elected.
            BackendKind::LeaseTracker => !down.contains(&0),
            _ if membership => !latest.voters.is_empty(),
            _ => true,
        };
        self.trace(|| format!("quiet phase, kept down: {down:?}"));
        if !self.masters().is_empty() {
            self.report.elected_in_quiet = Some(Duration::ZERO);
        }
    }
}

/// A node that has never run, with a clock of its own. Clocks at the extremes of the drift
/// bound are where drift bugs show, so half of the nodes get an extreme rate.
fn new_slot(id: NodeId, eps: f64, rng: &mut SplitMix64) -> Slot {
    let rate = match rng.range_u64(0, 3) {
        0 => 1.0 - eps,
        1 => 1.0 + eps,
        _ => 1.0 - eps + 2.0 * eps * rng.next_f64(),
    };
    let offset = rng.range_u64(0, 1_000_000 * MS);
    Slot {
        id,
        core: None,
        epochs: MemoryEpochStore::default(),
        clock: SimClock::new(offset, rate),
        timer_generation: 0,
        applied: 0,
        stale: false,
    }
}
