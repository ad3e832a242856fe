//! The deterministic state machine: the key space with etcd's revisions and the lease table.
//! Every replica applies the same commands in the same order and ends in the same state.

mod change_pages;
mod compare;
mod digest;
#[cfg(test)]
pub(crate) mod golden_access;
mod graveyard;
mod history;
pub mod import;
mod key_index;
mod keyspace;
mod layout;
mod lease_keys;
mod lease_table;
mod live_changes;
mod machine;
pub mod read_view;
mod recent_writes;
mod size_runs;
mod snapshot;
pub mod stream;
mod validate;
pub mod view;

pub use history::{HistoryRead, HistoryReader};

/// Where the state engine keeps the history's pages: in the value files of a
/// [`crate::engine::ValueLog`] over the keys of the history's records (a page is written
/// once, read by watches and past-revision reads, and deleted whole once retired).
pub fn value_log_config() -> crate::engine::ValueLogConfig {
    crate::engine::ValueLogConfig::for_prefix(layout::EVENT)
}

/// [`value_log_config`] with files of 16 KiB and values from 64 bytes on, for the
/// simulator and the tests: their histories are small, and every page should go through
/// files that fill, seal, get rewritten and deleted.
pub fn small_value_log_config() -> crate::engine::ValueLogConfig {
    crate::engine::ValueLogConfig { prefix: layout::EVENT, min_separated: 64, file_bytes: 16 << 10 }
}
pub use lease_keys::LeaseKeys;
pub use machine::{CheckedSnapshot, KvHash, Lease, SnapshotError, StateMachine};
pub use read_view::ReadView;
pub use validate::{validate_command, validate_range};
pub use view::{StateView, ViewMeta};

use crate::engine::EngineError;
use std::sync::{Arc, OnceLock};

/// The first failure of the state engine that a read or write of the state machine met,
/// shared by its parts. Applying a command cannot fail by design (everything is checked
/// first), but reading a key from disk can: the part that met the failure goes on as if
/// the record were absent, and the replica stops before answering anything
/// ([`StateMachine::engine_failure`]), as it does when its log storage fails.
#[derive(Debug, Clone, Default)]
pub(crate) struct Failure(Arc<OnceLock<String>>);

impl Failure {
    /// `result`'s value, or `None` after recording its error (the first one is kept).
    pub(crate) fn check<T>(&self, result: Result<T, EngineError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(error) => {
                tracing::error!(%error, "the state engine failed");
                let _ = self.0.set(error.to_string());
                None
            }
        }
    }

    /// The first failure, if any.
    pub(crate) fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}
