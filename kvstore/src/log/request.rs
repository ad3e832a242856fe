//! What the replica core tells the code that took a client request: its outcome
//! ([`Completion`]), why it was not served ([`RequestError`]), and how a read must relate
//! to writes ([`ReadConsistency`]).

use super::types::{ProposalId, Slot};
use crate::command::Applied;
use crate::error::KvError;
use crate::storage::StorageError;
use leasekv_lease::NodeId;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use thiserror::Error;

/// Why a client request was not served. All but `Invalid` are retryable elsewhere or later.
/// Serializable: a master answers requests a follower forwarded with it. New variants go
/// at the end (postcard numbers variants by position), with a peer protocol version that
/// allows them (`server/src/peer/version.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum RequestError {
    /// This node is not the master; nothing was proposed. Retry at the hinted master.
    #[error("not master (master hint: {hint:?}); retry at the master")]
    NotMaster {
        /// The node this one believes is master, if any.
        hint: Option<NodeId>,
    },
    /// This node lost mastership after proposing the command: it may or may not have been
    /// applied. A retry must be idempotent or check first.
    #[error("mastership lost while the request was in flight; its outcome is unknown (master hint: {hint:?})")]
    Indeterminate {
        /// The node this one believes is master, if any.
        hint: Option<NodeId>,
    },
    /// This node is master but has not finished taking over the log yet; retry shortly.
    #[error("master is still catching up with the log; retry shortly")]
    NotReady,
    /// The master has too many commands waiting; retry after a short back-off.
    #[error("too many requests in flight on the master ({pending}); retry shortly")]
    Busy {
        /// Commands waiting.
        pending: usize,
    },
    /// This node's queue of client requests is full (`[limits] max_queued_requests`), or
    /// the master's, for a request forwarded to it: nothing was done. Retry after a short
    /// back-off. A master answers a forward with it from peer protocol version 3 on. Its
    /// place is fixed: it came in the middle (after `Busy`) in 6baa79d, without a new
    /// protocol version, so builds before that number the variants after it one lower;
    /// every build since numbers them as here, and the golden files hold it so.
    #[error("this node's queue of client requests is full ({queued}, [limits] max_queued_requests); retry shortly")]
    Overloaded {
        /// The queue's capacity.
        queued: usize,
    },
    /// The request itself is wrong; retrying will not help.
    #[error(transparent)]
    Invalid(#[from] KvError),
    /// This node is shutting down (its node loop or election has stopped); another node
    /// may answer.
    #[error("node is shutting down")]
    ShuttingDown,
    /// The replica stopped after its storage failed; this node answers nothing more until
    /// it is restarted.
    #[error("replica stopped after a storage failure: {0}")]
    StorageFailed(StorageFailure),
    /// A peer answered against the protocol (e.g. the master answered a forwarded request
    /// with an answer of another kind).
    #[error("peer protocol error: {0}")]
    PeerProtocol(String),
}

/// The storage failure that stopped a replica. On the node where it happened it keeps the
/// storage's error as its source; a copy sent to another node (the answer to a forwarded
/// request) carries its message only.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StorageFailure {
    message: String,
    #[serde(skip)]
    source: Option<Arc<StorageError>>,
}

impl StorageFailure {
    /// The failure `error`, kept as the source.
    pub fn new(error: StorageError) -> Self {
        StorageFailure { message: error.to_string(), source: Some(Arc::new(error)) }
    }

    /// The failure as another node reports it (the answer to a forwarded request): its
    /// message only.
    pub fn reported(message: impl Into<String>) -> Self {
        StorageFailure { message: message.into(), source: None }
    }

    /// What failed, as the storage said it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for StorageFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StorageFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Two failures are the same when they say the same; whether the source travelled with one
/// of them does not matter.
impl PartialEq for StorageFailure {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl Eq for StorageFailure {}

/// Whether an error ends a node's service or concerns one call (openraft's `Fatal` and
/// `APIError`), for the caller deciding where to go next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The node that answered serves nothing more until it is restarted: every other call
    /// to it fails the same way, and another member must serve them.
    Fatal,
    /// This call failed (refused, too early, too many, unknown outcome); the node serves
    /// others.
    Call,
}

impl RequestError {
    /// Whether the error ends the answering node's service or concerns this call only.
    /// The class is not on the wire: it follows from the variant, whose encoding is fixed.
    pub fn class(&self) -> ErrorClass {
        match self {
            RequestError::ShuttingDown | RequestError::StorageFailed(_) => ErrorClass::Fatal,
            RequestError::NotMaster { .. }
            | RequestError::Indeterminate { .. }
            | RequestError::NotReady
            | RequestError::Busy { .. }
            | RequestError::Overloaded { .. }
            | RequestError::Invalid(_)
            | RequestError::PeerProtocol(_) => ErrorClass::Call,
        }
    }
}

/// The outcome of a proposal this node took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The id [`super::Replica::propose`] returned.
    pub id: ProposalId,
    /// Where it was applied and what it produced, or why it failed.
    pub result: Result<(Slot, Applied), RequestError>,
}

/// How a read must relate to writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadConsistency {
    /// Sees every write acknowledged before the read started: served by the ready master
    /// while its election lease is valid.
    Linearizable,
    /// Any replica's local state; possibly stale.
    Serializable,
}
