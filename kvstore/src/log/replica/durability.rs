//! The replica's output and durability: syncs begun, run and finished by the driver, and
//! the applied commands' writes to the state engine after the answers.

use super::*;

impl<S: Storage> Replica<S> {
    /// Makes pending storage writes durable and releases what waited for them: the
    /// driver's sync in one step, for drivers that may block (the simulator).
    pub fn sync(&mut self, now: Instant) {
        let Some(ticket) = self.begin_sync() else { return };
        let result = self.storage.sync();
        self.finish_sync(now, ticket, result);
    }

    /// Starts a sync that the driver runs off the replica's thread (group commit: the
    /// replica goes on accepting while the disk works, and the next sync covers everything
    /// that arrived meanwhile). Every write made before this call must be durable before
    /// the driver calls [`Replica::finish_sync`] with the ticket; the messages held for
    /// those writes are released then. Returns `None` when nothing waits for a sync, a sync
    /// is already in flight (one at a time), or the replica stopped.
    pub fn begin_sync(&mut self) -> Option<SyncTicket> {
        if self.stopped.is_some() {
            return None;
        }
        self.outbox.begin_sync()
    }

    /// Syncs the storage in place, for a driver that begins a sync and later finishes it on
    /// the replica's own thread (the simulator's disk, which takes time but not a thread).
    pub fn sync_storage(&mut self) -> Result<(), StorageError> {
        self.storage.sync()
    }

    /// Ends the sync `ticket` with its outcome: releases what it covered, or stops the
    /// replica if the storage failed. A ticket that is not the one in flight is ignored.
    pub fn finish_sync(&mut self, now: Instant, ticket: SyncTicket, result: Result<(), StorageError>) {
        let Some(released) = self.outbox.end_sync(ticket) else { return };
        if self.stopped.is_some() {
            return;
        }
        if let Err(e) = result {
            self.fail(e);
            return;
        }
        for (to, message) in released {
            self.send(to, message);
        }
        self.drain_local(now);
    }

    /// Takes everything produced since the last call.
    pub fn take_output(&mut self) -> ReplicaOutput {
        self.flush_applied();
        self.take_output_before_flush()
    }

    /// What [`Self::take_output`] returns, without writing the commands applied since the
    /// last flush to the state engine first: the driver answers the completions and then
    /// calls [`Self::flush_applied`], so that a client's answer does not wait for the
    /// engine's write. An answered command is chosen (in a majority's durable logs) and
    /// applied in memory, where every read through the replica sees it; a crash before the
    /// flush loses only the engine's copy, which the restart replays from the log. Watch
    /// streams see the commands once they are published ([`Self::publish_applied`]).
    pub fn take_output_before_flush(&mut self) -> ReplicaOutput {
        self.announce_commit();
        self.outbox.take()
    }

    /// Writes the commands applied since the last flush to the state engine, as one batch
    /// naming the last slot applied (etcd's consistent index in the transaction of its
    /// data); `false` if the engine failed, which stops the replica.
    pub fn flush_applied(&mut self) -> bool {
        if self.stopped.is_some() {
            return false;
        }
        let flushed = self
            .learner
            .flush_if_applied()
            .map_err(|e| StorageError::backend("writing applied commands to the state engine", e));
        self.persist(flushed)
    }

    /// Publishes the changes of the commands applied since the last call to the state
    /// machine's history readers (watch streams), ahead of their engine write
    /// ([`crate::state::HistoryReader`]). The driver calls it once a turn, after the answers.
    pub fn publish_applied(&mut self) {
        self.learner.publish_applied();
    }

    /// Whether commands were applied since the last [`Self::flush_applied`]: reads through
    /// the replica and watch readers see them (once published), the engine does not yet.
    pub fn unflushed(&self) -> bool {
        self.learner.unflushed()
    }
}
