//! What a node asks of its driver: one [`Effects`] value, taken after each input (the
//! answers it can give at once) and at the end of each turn (everything), and what the
//! driver reports back about the turn ([`TurnFacts`]).

use super::{Asker, ForwardMessage, MasterResult};
use crate::auth::AuthStore;
use crate::log::{AppliedTrace, CheckpointTicket, LogMessage, ProposalId, ReadJob, Slot, SnapshotJob, SyncTicket};
use crate::membership::Membership;
use leasekv_lease::NodeId;

/// Everything the node produced since the driver last took its effects.
pub struct Effects<W> {
    /// Log messages to send, on the log's lane.
    pub log: Vec<(NodeId, LogMessage)>,
    /// Forwards and answers to forwards to send, on the forwards' lane.
    pub forwards: Vec<(NodeId, ForwardMessage)>,
    /// Answers for this node's own callers.
    pub answers: Vec<(W, MasterResult)>,
    /// Reads decided and not yet read: the driver runs each job off its loop (a reader
    /// thread) and answers its asker with [`super::run_read`]'s result.
    pub reads: Vec<(ReadJob, Asker<W>)>,
    /// Step-downs asked of this node as master: the driver has the election give up
    /// mastership and then answers the asker.
    pub step_downs: Vec<Asker<W>>,
    /// The configuration in force changed: hand it to the election and the peer network
    /// before anything is sent (a member just added must be reachable).
    pub configuration: Option<Membership>,
    /// Whether this node should offer itself as master changed: hand it to the election's
    /// candidacy switch; the reason is [`crate::log::Replica::withdrawal`].
    pub candidacy: Option<bool>,
    /// This node applied its own removal, at this configuration epoch (reported once).
    pub removed: Option<u64>,
    /// The auth store changed (an applied command or a snapshot): publish it before the
    /// answers go out, so a client told its user was added can authenticate at once.
    pub auth: Option<AuthStore>,
    /// The storage failed, with why (reported once): the node serves nothing more and its
    /// process should stop.
    pub storage_failed: Option<String>,
    /// A sync of the storage to run ([`SyncJob`]); its end comes back as
    /// [`super::Node::on_synced`].
    pub sync: Option<SyncJob>,
    /// A checkpoint to run off the loop ([`CheckpointTicket::sync`]); its end comes back as
    /// [`super::Node::on_checkpoint_synced`].
    pub checkpoint: Option<CheckpointTicket>,
    /// A snapshot for peers behind the log's start, to build off the loop in this format
    /// and send to each peer it names.
    pub snapshot: Option<(SnapshotJob, SnapshotFormat)>,
    /// The engine write of what was applied is due: the driver calls
    /// [`super::Node::write_applied`] once the answers above are sent.
    pub write_applied: bool,
    /// Applied slots (only with the replica's `trace_applies`: the simulator's oracles).
    pub applied: Vec<AppliedTrace>,
    /// Proposals of this node chosen and applied successfully, with their slot (only with
    /// the replica's `trace_applies`: the simulator's acknowledged-write oracle).
    pub chosen: Vec<(ProposalId, Slot)>,
}

impl<W> Default for Effects<W> {
    fn default() -> Self {
        Effects {
            log: Vec::new(),
            forwards: Vec::new(),
            answers: Vec::new(),
            reads: Vec::new(),
            step_downs: Vec::new(),
            configuration: None,
            candidacy: None,
            removed: None,
            auth: None,
            storage_failed: None,
            sync: None,
            checkpoint: None,
            snapshot: None,
            write_applied: false,
            applied: Vec::new(),
            chosen: Vec::new(),
        }
    }
}

impl<W> Effects<W> {
    /// Whether nothing is to be sent or answered: a sync would hold nothing up.
    pub fn holds_nothing(&self) -> bool {
        self.log.is_empty() && self.forwards.is_empty() && self.answers.is_empty() && self.reads.is_empty()
    }
}

/// A sync of the storage the node began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncJob {
    /// Names the sync; every write before it must be durable when it is reported done.
    pub ticket: SyncTicket,
    /// Where it runs. [`SyncPlace::OnLoop`]: the driver reports it done at once
    /// ([`super::Node::on_synced`] with no result: the node syncs in place), since the
    /// hand-off to a sync thread and back would cost as much as the sync.
    pub place: SyncPlace,
}

/// Where a sync runs (see [`SyncJob::place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPlace {
    /// On the driver's loop, now.
    OnLoop,
    /// Off the loop (a sync thread, a simulated disk): the loop goes on, and whatever
    /// arrives meanwhile is covered by the next sync (group commit).
    Background,
}

/// The format of a snapshot built for peers: what every member of the cluster reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotFormat {
    /// Format 8: dead keys left out, values inline.
    WithValues,
    /// Format 9: the history's pages below the compaction point sent as stored.
    WithPages,
}

/// What the driver knows about the turn that ends, for the node's decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TurnFacts {
    /// The turn handled one input after the loop had nothing to do for a while, and
    /// nothing waits: a sync may run on the loop (see [`SyncPlace::OnLoop`]).
    pub woke_from_idle: bool,
    /// The driver can run a sync off its loop; without, every sync runs on it.
    pub background_sync: bool,
}
