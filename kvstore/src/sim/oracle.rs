//! The log and lease oracles, fed by the replicas' apply traces and the clients' answers.

use crate::log::{AppliedTrace, ProposalId, Slot};
use crate::types::LeaseId;
use leasekv_lease::NodeId;
use std::collections::{BTreeMap, HashMap};

/// Which oracle found a violation: tests match on it, reports print its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// A client saw answers no sequential order of the operations explains.
    Linearizability,
    /// A write acknowledged to its client is missing from the log that was chosen.
    AckedWriteLost,
    /// Two replicas hold different states after applying the same slot.
    ReplicasDiverge,
    /// A TTL lease expired before its TTL had passed since the last acknowledged keepalive.
    LeaseExpiredEarly,
    /// A TTL lease outlived its TTL by more than the drift bound allows.
    LeaseOutlived,
    /// The replicas did not agree within the liveness bound once the faults stopped.
    NoConvergence,
    /// The seed's event budget ran out before its end (a livelock).
    EventStorm,
    /// A replica did not reopen its own storage after a crash.
    RestartFailed,
    /// A restarted replica's state is behind the log point it claims.
    StateBehindLog,
    /// A snapshot could not be written.
    SnapshotUnwritten,
    /// A snapshot could not be built from a view.
    SnapshotUnbuilt,
    /// A replica's history differs from the reference at a revision both hold.
    WatchHistoryDiverge,
    /// The election used a configuration the log had not chosen.
    ElectionAheadOfLog,
    /// Two replicas applied different configurations at one epoch.
    ConfigurationDiverged,
    /// Two nodes believed they were master at the same real instant.
    MastersOverlap,
    /// A watch response for a watch id the client never opened.
    WatchUnknownId,
    /// A watch event beyond the store's revision.
    WatchFuture,
    /// A progress notification for a revision the watcher had not fully received.
    WatchBookmark,
    /// A watch cancelled without cause, or its cancellation malformed.
    WatchCancel,
    /// A watcher's events skipped, repeated or reordered a revision.
    WatchSequence,
    /// An event's create flag wrong for the key's previous state.
    WatchIsCreate,
    /// A wrong previous key-value on an event (or one not asked for).
    WatchPrevKv,
    /// A client sent again a write whose answer said its outcome was unknown.
    IndeterminateRetried,
    /// A master gave up leading the log at a timeout that came with a renewal of its lease.
    RoundGivenUpWhileRenewed,
    /// A slot was applied while a node whose read lease was valid had not received it: a
    /// read answered there could miss a chosen write (rule R2 of docs/read-leases.md).
    ReadLeaseMissedWrite,
    /// A node acted as master (its view said so after an input) while another node's
    /// election held mastership: it decided on a status older than its own release.
    MasterAfterRelease,
}

impl ViolationKind {
    /// The oracle's name, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::Linearizability => "linearizability",
            ViolationKind::AckedWriteLost => "acked-write-lost",
            ViolationKind::ReplicasDiverge => "replicas-diverge",
            ViolationKind::LeaseExpiredEarly => "lease-expired-early",
            ViolationKind::LeaseOutlived => "lease-outlived",
            ViolationKind::NoConvergence => "no-convergence",
            ViolationKind::EventStorm => "event-storm",
            ViolationKind::RestartFailed => "restart-failed",
            ViolationKind::StateBehindLog => "state-behind-log",
            ViolationKind::SnapshotUnwritten => "snapshot-unwritten",
            ViolationKind::SnapshotUnbuilt => "snapshot-unbuilt",
            ViolationKind::WatchHistoryDiverge => "watch-history-diverge",
            ViolationKind::ElectionAheadOfLog => "election-ahead-of-log",
            ViolationKind::ConfigurationDiverged => "configuration-diverged",
            ViolationKind::MastersOverlap => "masters-overlap",
            ViolationKind::WatchUnknownId => "watch-unknown-id",
            ViolationKind::WatchFuture => "watch-future",
            ViolationKind::WatchBookmark => "watch-bookmark",
            ViolationKind::WatchCancel => "watch-cancel",
            ViolationKind::WatchSequence => "watch-sequence",
            ViolationKind::WatchIsCreate => "watch-iscreate",
            ViolationKind::WatchPrevKv => "watch-prevkv",
            ViolationKind::IndeterminateRetried => "indeterminate-retried",
            ViolationKind::ReadLeaseMissedWrite => "read-lease-missed-write",
            ViolationKind::RoundGivenUpWhileRenewed => "round-given-up-while-renewed",
            ViolationKind::MasterAfterRelease => "master-after-release",
        }
    }
}

impl std::fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken promise, with enough context to replay it.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// The seed (replay with `--seed-base SEED --seeds 1 --trace`).
    pub seed: u64,
    /// Real (simulated) time, ms.
    pub at_ms: f64,
    /// Which oracle.
    pub kind: ViolationKind,
    /// What exactly.
    pub detail: String,
}

/// What the clients learned about one lease.
#[derive(Debug, Clone)]
struct LeaseTrack {
    ttl_secs: i64,
    /// Real time of the last acknowledged grant or keepalive (when the master answered).
    last_ack: u64,
    expired: bool,
}

/// Checks the replicas' apply traces and the lease timing.
#[derive(Debug, Default)]
pub struct Oracles {
    /// Digest of the state after each slot, as first seen.
    digests: HashMap<Slot, u64>,
    /// The proposals of each slot, as first applied.
    first_applied: HashMap<Slot, Vec<ProposalId>>,
    /// Client-acknowledged proposals by slot.
    acked: HashMap<Slot, Vec<ProposalId>>,
    /// Acknowledged writes found missing.
    pub acked_lost: u64,
    /// Acknowledged writes in all.
    pub acked_writes: u64,
    leases: BTreeMap<LeaseId, LeaseTrack>,
    /// The drift bound ε.
    drift: f64,
    /// Found violations (capped).
    pub violations: Vec<Violation>,
    seed: u64,
}

const MAX_VIOLATIONS: usize = 20;

impl Oracles {
    /// Oracles for one seed.
    pub fn new(seed: u64, drift: f64) -> Self {
        Oracles { seed, drift, ..Default::default() }
    }

    /// Records a violation.
    pub fn violation(&mut self, now: u64, kind: ViolationKind, detail: String) {
        // Capped per oracle, so that one firing often does not hide another's finding.
        if self.violations.iter().filter(|v| v.kind == kind).count() < MAX_VIOLATIONS {
            self.violations.push(Violation { seed: self.seed, at_ms: now as f64 / 1e6, kind, detail });
        }
    }

    /// A replica applied a slot (or installed a snapshot ending at it).
    pub fn on_applied(&mut self, now: u64, node: NodeId, trace: &AppliedTrace) {
        match self.digests.get(&trace.slot) {
            Some(&digest) if digest != trace.digest => {
                self.violation(
                    now,
                    ViolationKind::ReplicasDiverge,
                    format!(
                        "{node} has digest {:x} after slot {}, another replica had {digest:x}",
                        trace.digest, trace.slot
                    ),
                );
            }
            Some(_) => {}
            None => {
                self.digests.insert(trace.slot, trace.digest);
            }
        }
        if trace.from_snapshot {
            return;
        }
        self.first_applied.entry(trace.slot).or_insert_with(|| trace.proposals.clone());
        if let Some(acked) = self.acked.get(&trace.slot) {
            let missing = acked.iter().filter(|id| !trace.proposals.contains(id)).count();
            if missing > 0 {
                self.acked_lost += missing as u64;
                let detail = format!("{node} applied slot {} without {missing} acknowledged write(s)", trace.slot);
                self.violation(now, ViolationKind::AckedWriteLost, detail);
            }
        }
        for id in &trace.expired {
            self.on_expired(now, node, *id);
        }
    }

    /// A client got an acknowledgement for a write applied in `slot`.
    pub fn on_acked_write(&mut self, now: u64, slot: Slot, id: ProposalId) {
        self.acked_writes += 1;
        if let Some(applied) = self.first_applied.get(&slot) {
            if !applied.contains(&id) {
                self.acked_lost += 1;
                self.violation(
                    now,
                    ViolationKind::AckedWriteLost,
                    format!("{id:?} acknowledged in slot {slot}, which holds others"),
                );
            }
        }
        self.acked.entry(slot).or_default().push(id);
    }

    /// A grant or keepalive was acknowledged by the master at real time `at`.
    pub fn on_lease_ack(&mut self, at: u64, id: LeaseId, ttl_secs: i64) {
        let track = self.leases.entry(id).or_insert(LeaseTrack { ttl_secs, last_ack: at, expired: false });
        track.ttl_secs = ttl_secs;
        track.last_ack = track.last_ack.max(at);
    }

    fn on_expired(&mut self, now: u64, node: NodeId, id: LeaseId) {
        let drift = self.drift;
        let Some(track) = self.leases.get_mut(&id) else { return };
        if track.expired {
            return;
        }
        track.expired = true;
        // The master counts the TTL on its own clock, which runs at most (1 + ε) times
        // real time: at least TTL / (1 + ε) of real time has passed.
        let earliest = track.last_ack + (track.ttl_secs as f64 * 1e9 / (1.0 + drift)) as u64;
        if now < earliest {
            let detail = format!(
                "lease {id:x} (TTL {}s) expired on {node} {:.1} ms after its last acknowledged keepalive",
                track.ttl_secs,
                (now - track.last_ack) as f64 / 1e6
            );
            self.violation(now, ViolationKind::LeaseExpiredEarly, detail);
        }
    }
}
