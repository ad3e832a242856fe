//! The log and lease oracles, fed by the replicas' apply traces and the clients' answers.

use crate::log::{AppliedTrace, ProposalId, Slot};
use crate::types::LeaseId;
use leasekv_lease::NodeId;
use std::collections::{BTreeMap, HashMap};

/// One broken promise, with enough context to replay it.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// The seed (replay with `--seed-base SEED --seeds 1 --trace`).
    pub seed: u64,
    /// Real (simulated) time, ms.
    pub at_ms: f64,
    /// Which oracle: "linearizability", "acked-write-lost", "replicas-diverge",
    /// "lease-expired-early", "lease-outlived", "no-convergence".
    pub kind: &'static str,
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
    pub fn violation(&mut self, now: u64, kind: &'static str, detail: String) {
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(Violation { seed: self.seed, at_ms: now as f64 / 1e6, kind, detail });
        }
    }

    /// A replica applied a slot (or installed a snapshot ending at it).
    pub fn on_applied(&mut self, now: u64, node: NodeId, trace: &AppliedTrace) {
        match self.digests.get(&trace.slot) {
            Some(&digest) if digest != trace.digest => {
                self.violation(
                    now,
                    "replicas-diverge",
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
                self.violation(now, "acked-write-lost", detail);
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
                    "acked-write-lost",
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
            self.violation(now, "lease-expired-early", detail);
        }
    }
}
