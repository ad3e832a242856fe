//! Tuning of the replica core, and the deliberately broken variants the simulator must catch.

use std::time::Duration;

/// How a replica batches, retries, compacts and expires.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaConfig {
    /// Most client commands in one log slot.
    pub max_batch_commands: usize,
    /// Most bytes of commands in one log slot (a single bigger command still gets a slot).
    pub max_batch_bytes: usize,
    /// Most client commands waiting on the master (queued or in flight); more are refused
    /// with [`super::RequestError::Busy`] rather than growing memory without bound.
    pub max_pending_commands: usize,
    /// Most slots proposed and not yet chosen at once (the pipeline depth). Deep enough that
    /// one slot fills while another replicates, shallow enough that commands arriving
    /// meanwhile share the next slot, so that batches stay large under many clients.
    pub max_inflight_slots: usize,
    /// How often unanswered Prepare/Accept/Fetch messages are sent again, and idle learners
    /// are told the commit index.
    pub retry_interval: Duration,
    /// Take a snapshot after this many slots were applied since the last one, and once the
    /// commands applied since then add up to at least the size of the last snapshot: a
    /// snapshot costs as much as the whole state, so under a write load it is paid for by at
    /// least as many bytes of log (otherwise small slots on a large state snapshot every
    /// few seconds).
    pub snapshot_every: u64,
    /// Leave snapshots to the driver ([`super::Replica::snapshot_if_due`]) instead of taking
    /// them at the end of the apply that makes one due. A snapshot costs time in proportion
    /// to the whole state; the server takes it where that stall cannot hold up its election
    /// renewals (off its async worker), which an apply deep inside a message cannot.
    pub defer_snapshots: bool,
    /// Slots kept in the log behind the snapshot, so a replica slightly behind gets entries
    /// rather than a whole snapshot.
    pub retain_after_snapshot: u64,
    /// Most chosen entries in one `Entries` message.
    pub max_fetch_entries: usize,
    /// Most leases in one LeaseExpire command (bounds how long one apply takes). 100 keeps a
    /// 64-client writer's p99 within 2× during a storm of 100,000 expiries and still clears
    /// them within about a second (scalebench `expiry-storm`). 500 cleared them sooner but
    /// tripled the writer's p99; 100 with one command in the queue took 3 s.
    pub max_expire_batch: usize,
    /// Most LeaseExpire commands waiting in the master's queue at once, so that client
    /// writes keep flowing during an expiry storm.
    pub max_expire_in_queue: usize,
    /// Shortest TTL granted, seconds; shorter requests are raised to it (as etcd does).
    pub min_ttl_secs: i64,
    /// Read leases (docs/read-leases.md): `None` keeps every linearizable read on the
    /// master and waits for no holder, as before read leases existed (the server always
    /// gives one, granting or not: see [`super::ReadLeaseConfig::grant`]).
    pub read_leases: Option<super::ReadLeaseConfig>,
    /// Record every applied slot in the output (for the simulator's oracles).
    pub trace_applies: bool,
    /// Answer a read of one key at the current revision when it is decided, rather than
    /// through a view read later ([`super::ReadJob`]): a lookup costs less than a view. On
    /// by default; the simulator turns it off for half its seeds so that views are tried.
    pub point_reads_in_place: bool,
    /// A deliberately broken variant (simulator negative controls only).
    #[cfg(feature = "negative-controls")]
    pub breakage: LogBreakage,
    /// When this node offers itself as master (see [`super::CandidacyConfig`]).
    pub candidacy: super::CandidacyConfig,
}

impl ReplicaConfig {
    /// Defaults for an election lease time `lease_time`: the minimum TTL is about twice it,
    /// rounded up to whole seconds, so a lease outlives one failover.
    pub fn for_lease_time(lease_time: Duration) -> Self {
        // Saturating: a config may name any lease time, and validation refuses it later
        // with a message rather than this overflowing first.
        let min_ttl_millis = lease_time.as_millis().saturating_mul(2).saturating_add(999);
        let min_ttl_secs = i64::try_from(min_ttl_millis / 1000).unwrap_or(i64::MAX);
        ReplicaConfig {
            max_batch_commands: 256,
            max_batch_bytes: 1 << 20,
            max_pending_commands: 100_000,
            max_inflight_slots: 2,
            retry_interval: lease_time / 10,
            snapshot_every: 10_000,
            defer_snapshots: false,
            retain_after_snapshot: 1_000,
            max_fetch_entries: 256,
            max_expire_batch: 100,
            max_expire_in_queue: 2,
            min_ttl_secs: min_ttl_secs.max(1),
            read_leases: None,
            trace_applies: false,
            point_reads_in_place: true,
            #[cfg(feature = "negative-controls")]
            breakage: LogBreakage::None,
            candidacy: super::CandidacyConfig::for_lease_time(lease_time),
        }
    }
}

/// A [`ReplicaConfig`] that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid replica config: {field} must be {rule}, got {value}")]
pub struct ReplicaConfigError {
    /// The offending setting.
    pub field: &'static str,
    /// What it must be.
    pub rule: &'static str,
    /// What it was.
    pub value: String,
}

impl ReplicaConfig {
    /// Whether the negative control `breakage` is on. Without the `negative-controls`
    /// feature there is no control to turn on: this is the constant `false` and the broken
    /// branches compile away.
    #[inline(always)]
    pub fn broken(&self, breakage: LogBreakage) -> bool {
        #[cfg(feature = "negative-controls")]
        {
            self.breakage == breakage
        }
        #[cfg(not(feature = "negative-controls"))]
        {
            let _ = breakage;
            false
        }
    }

    /// Checks that every setting lets the replica make progress.
    pub fn validate(&self) -> Result<(), ReplicaConfigError> {
        let positive = [
            ("max_batch_commands", self.max_batch_commands as u64),
            ("max_batch_bytes", self.max_batch_bytes as u64),
            ("max_inflight_slots", self.max_inflight_slots as u64),
            ("max_pending_commands", self.max_pending_commands as u64),
            ("snapshot_every", self.snapshot_every),
            ("max_fetch_entries", self.max_fetch_entries as u64),
            ("max_expire_batch", self.max_expire_batch as u64),
            ("max_expire_in_queue", self.max_expire_in_queue as u64),
            ("retry_interval (ns)", self.retry_interval.as_nanos() as u64),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(ReplicaConfigError { field, rule: "at least 1", value: "0".into() });
            }
        }
        if self.min_ttl_secs < 1 {
            return Err(ReplicaConfigError {
                field: "min_ttl_secs",
                rule: "at least 1",
                value: self.min_ttl_secs.to_string(),
            });
        }
        Ok(())
    }
}

/// Deliberately broken variants of the replica, each of which one simulator oracle must
/// catch. Only a build with the `negative-controls` feature can turn one on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogBreakage {
    /// The real thing.
    #[default]
    None,
    /// "Linearizable" reads are answered by any replica from its local state.
    FollowerReads,
    /// Accepted (and Promise) go out before the write is durable.
    EarlyAck,
    /// A new master skips phase 1 and proposes from its own commit index.
    SkipPhase1,
    /// The lease tracker survives loss of mastership: it keeps its old deadlines and the
    /// expiries it finds while deposed are proposed when the node is master again.
    DeposedExpiry,
    /// Learners' acks and promises count toward the log's majorities.
    LearnerCounted,
    /// The election is given a membership change as soon as this node accepts it, before it
    /// is chosen: its acceptor set switches to a configuration that may never be chosen.
    EarlySwitch,
    /// A voter change goes out without rule 5's round and wait.
    NoChangeWait,
    /// A change adds two voters at once (rule 1 broken).
    TwoVotersAtOnce,
    /// A checkpoint drops the log behind the applied slot without syncing the state
    /// engine first: a crash then leaves a state older than the log's start.
    LogDroppedBeforeStateSynced,
    /// The applied slot reaches the state engine in a batch of its own, before the state
    /// it names: a crash between the two restarts past commands it never stored.
    AppliedBeforeState,
    /// A checkpoint whose engine sync ran before a snapshot install finishes anyway: it
    /// drops the install's stored snapshot while the installed state is not yet synced.
    CheckpointOvertaken,
    /// The state machine's cache of recent writes keeps a key's older key-value when the key
    /// is written again, so reads and the next put of it see a key-value the engine no
    /// longer holds.
    StaleRecentWrite,
    /// A snapshot installed into a staged engine is adopted although its stream was cut
    /// short and the install failed midway: the state adopted lacks what came after.
    StagedCutShort,
    /// A checkpoint syncs the state engine without first writing to it the commands applied
    /// since the last engine write, and drops the log through the applied slot: a crash
    /// then restarts from a state that lacks them, with the log that held them gone.
    CheckpointBeforeFlush,
    /// The history's tail, which watch streams read before the engine write, is published
    /// without the compaction point: a compaction that dropped changes still pending lets a
    /// stream read on past them, a gap in what it sends.
    TailWithoutCompaction,
    /// A read-lease holder goes on answering reads after its lease ran out (until a higher
    /// ballot reaches it).
    ReadLeaseExpired,
    /// The master chooses a slot once a quorum accepted it, without waiting for the
    /// read-lease holders that have not.
    AckWithoutHolder,
    /// A read-lease holder answers from what it applied, without first applying the slots
    /// it accepted in the lease's ballot.
    ReadThroughPending,
    /// A new master does not count the earlier master's read-lease holders as holders.
    NoTakeoverWait,
    /// A read handed to a reader thread gets a view one revision before the one it was
    /// decided at (the read index, or the revision under a read lease).
    StaleReadView,
    /// Compaction deletes a history page wholly below its point although a key's record
    /// names a change in it as its value: the key's value is lost.
    LiveValueDropped,
    /// The state engine's value log hands a batch to the engine underneath before the
    /// history pages it names are synced: a power loss may keep a record whose page is gone
    /// ([`crate::engine::ValueLogBreakage::PointerBeforeValue`]).
    PageAfterPointer,
    /// The state engine's value log deletes a file of history pages as soon as no record
    /// names it, before that is durable: a crash brings back records naming pages in a file
    /// that is gone ([`crate::engine::ValueLogBreakage::FileRemovedEarly`]).
    PageFileRemovedEarly,
}

impl LogBreakage {
    /// Every broken variant, for tests.
    pub const ALL: [LogBreakage; 23] = [
        LogBreakage::FollowerReads,
        LogBreakage::EarlyAck,
        LogBreakage::SkipPhase1,
        LogBreakage::DeposedExpiry,
        LogBreakage::LearnerCounted,
        LogBreakage::EarlySwitch,
        LogBreakage::NoChangeWait,
        LogBreakage::TwoVotersAtOnce,
        LogBreakage::LogDroppedBeforeStateSynced,
        LogBreakage::AppliedBeforeState,
        LogBreakage::CheckpointOvertaken,
        LogBreakage::StaleRecentWrite,
        LogBreakage::StagedCutShort,
        LogBreakage::CheckpointBeforeFlush,
        LogBreakage::TailWithoutCompaction,
        LogBreakage::ReadLeaseExpired,
        LogBreakage::AckWithoutHolder,
        LogBreakage::ReadThroughPending,
        LogBreakage::NoTakeoverWait,
        LogBreakage::StaleReadView,
        LogBreakage::LiveValueDropped,
        LogBreakage::PageAfterPointer,
        LogBreakage::PageFileRemovedEarly,
    ];

    /// The variant's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            LogBreakage::None => "none",
            LogBreakage::FollowerReads => "follower-reads",
            LogBreakage::EarlyAck => "early-ack",
            LogBreakage::SkipPhase1 => "skip-phase1",
            LogBreakage::DeposedExpiry => "deposed-expiry",
            LogBreakage::LearnerCounted => "learner-counted",
            LogBreakage::EarlySwitch => "early-switch",
            LogBreakage::NoChangeWait => "no-change-wait",
            LogBreakage::TwoVotersAtOnce => "two-voters-at-once",
            LogBreakage::LogDroppedBeforeStateSynced => "log-dropped-before-state-synced",
            LogBreakage::AppliedBeforeState => "applied-before-state",
            LogBreakage::CheckpointOvertaken => "checkpoint-overtaken",
            LogBreakage::StaleRecentWrite => "stale-recent-write",
            LogBreakage::StagedCutShort => "staged-cut-short",
            LogBreakage::CheckpointBeforeFlush => "checkpoint-before-flush",
            LogBreakage::TailWithoutCompaction => "tail-without-compaction",
            LogBreakage::ReadLeaseExpired => "read-lease-expired",
            LogBreakage::AckWithoutHolder => "ack-without-holder",
            LogBreakage::ReadThroughPending => "read-through-pending",
            LogBreakage::NoTakeoverWait => "no-takeover-wait",
            LogBreakage::StaleReadView => "stale-read-view",
            LogBreakage::LiveValueDropped => "live-value-dropped",
            LogBreakage::PageAfterPointer => "page-after-pointer",
            LogBreakage::PageFileRemovedEarly => "page-file-removed-early",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(name: &str) -> Option<Self> {
        std::iter::once(LogBreakage::None).chain(LogBreakage::ALL).find(|b| b.name() == name)
    }
}
