//! The deterministic state machine: the key space with etcd's revisions and the lease table.
//! Every replica applies the same commands in the same order and ends in the same state.

mod compare;
mod digest;
mod graveyard;
mod history;
pub mod import;
mod keyspace;
mod lease_keys;
mod lease_table;
mod machine;
mod snapshot;
mod validate;

pub use history::{HistoryRead, HistoryReader};
pub use lease_keys::LeaseKeys;
pub use machine::{KvHash, Lease, SnapshotError, StateMachine};
pub use validate::{validate_command, validate_range};
