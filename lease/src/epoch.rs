//! The restart epoch: the single piece of state PaxosLease persists.

use thiserror::Error;

/// The epoch of this run of a node, and whether it is the node's first run ever (no
/// quarantine is needed then: nothing can have been forgotten).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartEpoch {
    /// Incremented on every start; part of every ballot the node issues.
    pub value: u32,
    /// True when no earlier epoch was stored.
    pub first_start: bool,
}

/// Failure to read or write the stored epoch.
#[derive(Debug, Error)]
#[error("restart epoch storage failed: {0}")]
pub struct EpochError(pub String);

/// Where a node keeps its restart epoch. `begin_epoch` must make the new value durable
/// before it returns: a node that restarts twice must never reuse an epoch.
pub trait EpochStore: Send {
    /// Loads the stored epoch, stores it plus one, and returns the new one.
    fn begin_epoch(&mut self) -> Result<RestartEpoch, EpochError>;
}

/// An epoch store in memory, for tests and the simulator (the simulator keeps it across
/// simulated crashes, as a disk would).
#[derive(Debug, Clone, Default)]
pub struct MemoryEpochStore {
    stored: Option<u32>,
}

impl EpochStore for MemoryEpochStore {
    fn begin_epoch(&mut self) -> Result<RestartEpoch, EpochError> {
        let value = match self.stored {
            None => 1,
            Some(v) => v.checked_add(1).ok_or_else(|| EpochError("restart epoch overflow".into()))?,
        };
        let first_start = self.stored.is_none();
        self.stored = Some(value);
        Ok(RestartEpoch { value, first_start })
    }
}
