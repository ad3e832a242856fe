//! Requests only the master can answer, as the server's callers hand them to the node loop.
//!
//! The decisions (serve here or forward once, what a lost forward tells its caller) are
//! the sans-IO node's (`leasekv_kvstore::node`), which the simulator runs too; what is left
//! here is the server's waiter: the channel a client's task waits on.

pub use leasekv_kvstore::node::{expect_answer, ForwardId, MasterAnswer, MasterRequest, MasterResult};
use tokio::sync::oneshot;

/// Where the answer to a [`MasterRequest`] goes: the task of the client that asked.
pub type Reply = oneshot::Sender<MasterResult>;
