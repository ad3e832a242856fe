//! What a replica reports to its driver: its output, sync tickets, lease status, counts,
//! and why it could not open.

use super::*;

/// One applied slot, reported when [`ReplicaConfig::trace_applies`] is on (simulator oracles).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedTrace {
    /// The slot.
    pub slot: Slot,
    /// The proposals it carried, in order.
    pub proposals: Vec<ProposalId>,
    /// The state machine's digest after it.
    pub digest: u64,
    /// Leases the slot deleted by expiry.
    pub expired: Vec<LeaseId>,
    /// True when the slot arrived inside a snapshot (not applied one command at a time).
    pub from_snapshot: bool,
}

/// Everything the replica produced since the driver last asked.
#[derive(Debug, Default)]
pub struct ReplicaOutput {
    /// Messages to send.
    pub messages: Vec<(NodeId, LogMessage)>,
    /// Finished client proposals of this node.
    pub completions: Vec<Completion>,
    /// Storage holds writes that other outputs wait for: call [`Replica::sync`] soon.
    pub needs_sync: bool,
    /// Applied slots (only with `trace_applies`).
    pub applied: Vec<AppliedTrace>,
}

/// Names one sync begun with [`Replica::begin_sync`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncTicket(pub(in crate::log) u64);

/// The remaining life of a lease, as the master sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaseStatus {
    /// The lease.
    pub id: LeaseId,
    /// Its name, if any.
    pub name: Option<String>,
    /// Granted TTL, seconds.
    pub granted_ttl: i64,
    /// Time left on the master's clock.
    pub remaining: Duration,
    /// Attached keys.
    pub keys: Vec<Vec<u8>>,
}

/// Why a replica could not start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] ReplicaConfigError),
    /// The stored state could not be read.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Events of a replica's life, counted since it opened, for the node's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaCounts {
    /// Snapshots sent to followers whose next entries were compacted away.
    pub snapshots_sent: u64,
    /// Snapshots received and installed.
    pub snapshots_installed: u64,
    /// Lease expiry batches proposed (as master).
    pub expiry_commands: u64,
}
