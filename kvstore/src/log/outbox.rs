//! Where a replica's outputs wait: messages ready to go, messages held until the writes
//! before them are durable, the sync that will release them, and messages to itself.

use super::message::LogMessage;
use super::replica::{AppliedTrace, ReplicaOutput, SyncTicket};
use super::request::Completion;
use leasekv_lease::NodeId;
use std::collections::VecDeque;

/// A replica's outgoing traffic and the durability gate in front of part of it.
///
/// Promise and Accepted promise something about stored state, so they are *held* until the
/// sync that covers the writes before them; everything else goes out at once. Messages to
/// the replica itself are kept apart and handled on the same call, never sent.
#[derive(Debug)]
pub(super) struct Outbox {
    me: NodeId,
    /// What the driver collects next (messages, completions, traces).
    out: ReplicaOutput,
    held: Vec<(NodeId, LogMessage)>,
    /// Messages a sync in flight will release.
    syncing: Option<(SyncTicket, Vec<(NodeId, LogMessage)>)>,
    next_ticket: u64,
    local: VecDeque<LogMessage>,
}

impl Outbox {
    /// An empty outbox of node `me`.
    pub(super) fn new(me: NodeId) -> Self {
        Outbox {
            me,
            out: ReplicaOutput::default(),
            held: Vec::new(),
            syncing: None,
            next_ticket: 0,
            local: VecDeque::new(),
        }
    }

    /// Sends a message that needs no durable state behind it.
    pub(super) fn send(&mut self, to: NodeId, message: LogMessage) {
        if to == self.me {
            self.local.push_back(message);
        } else {
            self.out.messages.push((to, message));
        }
    }

    /// Reports a finished client proposal of this node.
    pub(super) fn complete(&mut self, completion: Completion) {
        self.out.completions.push(completion);
    }

    /// Reports an applied slot (only with `trace_applies`).
    pub(super) fn trace(&mut self, applied: AppliedTrace) {
        self.out.applied.push(applied);
    }

    /// Holds a message until the next sync covers the writes made before it.
    pub(super) fn hold(&mut self, to: NodeId, message: LogMessage) {
        self.held.push((to, message));
    }

    /// The next message this replica sent itself.
    pub(super) fn next_local(&mut self) -> Option<LogMessage> {
        self.local.pop_front()
    }

    /// Starts a sync covering every held message, unless nothing is held or a sync is
    /// already in flight.
    pub(super) fn begin_sync(&mut self) -> Option<SyncTicket> {
        if self.syncing.is_some() || self.held.is_empty() {
            return None;
        }
        self.next_ticket += 1;
        let ticket = SyncTicket(self.next_ticket);
        self.syncing = Some((ticket, std::mem::take(&mut self.held)));
        Some(ticket)
    }

    /// Ends the sync `ticket`, giving back the messages it covered; `None` if it is not the
    /// sync in flight.
    pub(super) fn end_sync(&mut self, ticket: SyncTicket) -> Option<Vec<(NodeId, LogMessage)>> {
        if !self.syncing.as_ref().is_some_and(|(current, _)| *current == ticket) {
            return None;
        }
        self.syncing.take().map(|(_, released)| released)
    }

    /// Drops every held message and the sync in flight: the writes behind them may never
    /// become durable.
    pub(super) fn drop_held(&mut self) {
        self.held.clear();
        self.syncing = None;
    }

    /// Takes what the driver collects, noting whether held messages wait for a sync.
    pub(super) fn take(&mut self) -> ReplicaOutput {
        let mut out = std::mem::take(&mut self.out);
        out.needs_sync = !self.held.is_empty() && self.syncing.is_none();
        out
    }
}
