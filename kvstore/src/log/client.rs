//! What the replica core tells the code that took a client request.

use super::types::{ProposalId, Slot};
use crate::command::Applied;
use crate::error::KvError;
use leasekv_lease::NodeId;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why a client request was not served. All but `Invalid` are retryable elsewhere or later.
/// Serializable: a master answers requests a follower forwarded with it.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum ClientError {
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
    /// The request itself is wrong; retrying will not help.
    #[error(transparent)]
    Invalid(#[from] KvError),
    /// The replica stopped after a storage failure.
    #[error("replica stopped after a storage failure: {0}")]
    Stopped(String),
}

impl ClientError {
    /// Whether retrying (elsewhere or later) can succeed.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, ClientError::Invalid(_))
    }
}

/// The outcome of a proposal this node took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The id [`super::Replica::propose`] returned.
    pub id: ProposalId,
    /// Where it was applied and what it produced, or why it failed.
    pub result: Result<(Slot, Applied), ClientError>,
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
