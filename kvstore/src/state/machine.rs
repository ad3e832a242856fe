//! The state machine proper: applies commands to the key space and the lease table with
//! etcd's revision rules.
//!
//! Every command is checked completely before anything is mutated, so that a refused command
//! (or a Txn with one bad operation) leaves the state exactly as it was; after the checks,
//! applying cannot fail.
//!
//! A revoked or expired lease's keys vanish at once for every reader but are removed from
//! memory lazily, [`StateMachine::CLEANUP_PER_APPLY`] per apply (see [`super::graveyard`]), so
//! that revoking a lease with 100,000 keys does not stall the apply loop for tens of
//! milliseconds.

use super::digest;
use super::history::{History, HistoryReader};
use super::keyspace::{Keyspace, Selection};
use super::lease_table::LeaseTable;
use super::snapshot;
use super::stream;
use super::Failure;
use crate::auth::AuthStore;
use crate::command::{
    Alarm, AlarmAction, AlarmKind, Applied, Command, CommandResponse, DeleteRangeRequest, DeleteRangeResponse, Keep,
    LeaseGrantResponse, PutRequest, PutResponse, RangeRequest, RangeResponse, Tenure,
};
use crate::engine::{Engine, EngineError, MemoryEngine, WriteBatch};
use crate::error::KvError;
use crate::membership::Membership;
use crate::types::{Event, KeyValue, LeaseId, Revision, NO_LEASE};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

pub use super::lease_table::Lease;
pub use super::snapshot::SnapshotError;

/// A snapshot decoded and checked ([`StateMachine::check_snapshot_bytes`]), to install.
pub struct CheckedSnapshot(snapshot::Checked);

/// The key space and lease table.
pub struct StateMachine {
    /// Where the key space and the history are stored.
    engine: Arc<dyn Engine>,
    /// The first failure of the engine (see [`Failure`]).
    failure: Failure,
    /// etcd's store revision: the revision of the last write that changed something.
    revision: Revision,
    keys: Keyspace,
    /// Every change since the compaction point (see [`super::history`]).
    history: History,
    leases: LeaseTable,
    /// The tenure of the newest master whose barrier was applied; older expiries are stale.
    tenure: Tenure,
    /// See [`StateMachine::digest`].
    digest: u64,
    /// The raised alarms (see [`Command::Alarm`]).
    alarms: BTreeSet<Alarm>,
    /// The cluster's configuration (see [`Command::ChangeMembers`]); epoch 0 until the first
    /// master records the seed.
    membership: Membership,
    /// Users, roles and whether auth is enabled (see [`Command::Auth`]).
    auth: AuthStore,
    /// Dead keys each apply removes: [`StateMachine::CLEANUP_PER_APPLY`] except in tests,
    /// which lower it to make the lazy path run across many applies. Not replicated: every
    /// replica runs the same build.
    cleanup_budget: usize,
    /// The log slot the state reflects, as of the last flush (0: none, or not tracked).
    applied: u64,
    /// Whether the auth store changed since the last flush (its record is rewritten).
    auth_changed: bool,
    /// Negative control: the applied point goes to the engine in a batch of its own, before
    /// the state it names (a crash between the two skips commands on restart).
    #[cfg(feature = "negative-controls")]
    applied_before_state: bool,
}

impl std::fmt::Debug for StateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachine")
            .field("revision", &self.revision)
            .field("keys", &self.keys)
            .field("history", &self.history)
            .field("leases", &self.leases.len())
            .finish()
    }
}

/// [`StateMachine::copy_in_memory`]: tests compare a state machine with what a copy of it
/// does next.
#[cfg(test)]
impl Clone for StateMachine {
    fn clone(&self) -> Self {
        self.copy_in_memory()
    }
}

impl StateMachine {
    /// A deep copy, engine contents included, on an engine of its own in memory (for tests
    /// and benchmarks: it reads and holds the whole state).
    pub fn copy_in_memory(&self) -> Self {
        use crate::engine::Scan;
        use std::ops::Bound;
        let copy = MemoryEngine::new();
        let mut batch = WriteBatch::new();
        for entry in Scan::new(self.engine.as_ref(), (Bound::Unbounded, Bound::Unbounded), false, 1024) {
            let (key, value) = entry.expect("a memory engine does not fail");
            batch.put(key, value);
        }
        copy.write(batch).expect("a memory engine does not fail");
        let engine: Arc<dyn Engine> = Arc::new(copy);
        let failure = Failure::default();
        StateMachine {
            keys: self.keys.copy_onto(&engine, &failure),
            history: self.history.copy_onto(&engine, &failure),
            engine,
            failure,
            revision: self.revision,
            leases: self.leases.clone(),
            tenure: self.tenure,
            digest: self.digest,
            alarms: self.alarms.clone(),
            membership: self.membership.clone(),
            auth: self.auth.clone(),
            cleanup_budget: self.cleanup_budget,
            applied: self.applied,
            auth_changed: self.auth_changed,
            #[cfg(feature = "negative-controls")]
            applied_before_state: self.applied_before_state,
        }
    }
}

impl Default for StateMachine {
    /// Same as [`StateMachine::new`]: there is no meaningful store at revision 0.
    fn default() -> Self {
        Self::new()
    }
}

impl StateMachine {
    /// How many keys of revoked or expired leases each apply (of any command, refused ones
    /// included) removes from memory. Removing one key costs well under a microsecond, so
    /// this bounds the cleanup's share of an apply to about half a millisecond while still
    /// draining a 100,000-key lease within 100 applies. Changing it changes no result and no
    /// digest, only when memory is released.
    pub const CLEANUP_PER_APPLY: usize = 1000;

    /// An empty store at revision 1 (etcd starts at 1), on an engine of its own in memory.
    pub fn new() -> Self {
        Self::on_engine(Arc::new(MemoryEngine::new())).expect("an empty memory engine does not fail")
    }

    /// An empty store at revision 1 on `engine`, which holds no state.
    pub fn on_engine(engine: Arc<dyn Engine>) -> Result<Self, EngineError> {
        let failure = Failure::default();
        Ok(StateMachine {
            keys: Keyspace::new(Arc::clone(&engine), failure.clone()),
            history: History::load(Arc::clone(&engine), failure.clone(), Vec::new(), 0, 1)?,
            engine,
            failure,
            revision: 1,
            leases: LeaseTable::default(),
            tenure: (0, 0),
            digest: digest::EMPTY,
            alarms: BTreeSet::new(),
            membership: Membership::default(),
            auth: AuthStore::default(),
            cleanup_budget: Self::CLEANUP_PER_APPLY,
            applied: 0,
            auth_changed: false,
            #[cfg(feature = "negative-controls")]
            applied_before_state: false,
        })
    }

    /// [`Self::flush_through`] the slot of the last flush (tests and tools that apply
    /// commands outside a log).
    pub fn flush(&mut self) -> Result<(), EngineError> {
        self.flush_through(self.applied)
    }

    /// The first failure of the state engine met by a read or write, if any: the state
    /// machine may then have answered as if a record were absent, so its driver must stop
    /// before answering anything.
    pub fn engine_failure(&self) -> Option<&str> {
        self.failure.get()
    }

    /// Applies one command, then removes up to [`Self::CLEANUP_PER_APPLY`] keys of dead
    /// leases from memory (invisible already, so this changes nothing observable but
    /// [`Self::pending_cleanup`]). Deterministic.
    pub fn apply(&mut self, command: &Command) -> Applied {
        let result = self.apply_one(command);
        self.digest = digest::fold(self.digest, command, self.revision, result.is_ok());
        self.history.set_head(self.revision);
        // After the command, so that a lease with at most a budget of keys is gone from
        // memory by the end of the apply that revoked it.
        self.keys.sweep(self.cleanup_budget);
        Applied { revision: self.revision, result }
    }

    /// What [`Self::apply`] does to the state and answers, before its bookkeeping.
    fn apply_one(&mut self, command: &Command) -> Result<CommandResponse, KvError> {
        match command {
            Command::Put(request) => self.apply_put(request).map(CommandResponse::Put),
            Command::PutKeeping(request, keep) => {
                self.resolve_kept(request, *keep).and_then(|put| self.apply_put(&put)).map(CommandResponse::Put)
            }
            Command::DeleteRange(request) => self.apply_delete(request).map(CommandResponse::DeleteRange),
            Command::Txn(txn) => self.apply_txn(txn).map(CommandResponse::Txn),
            Command::LeaseGrant { id, name, ttl } => self
                .leases
                .grant(*id, name.as_deref(), *ttl, self.revision)
                .map(|id| CommandResponse::LeaseGrant(LeaseGrantResponse { id, ttl: *ttl })),
            Command::LeaseRevoke { id } => self.apply_revoke(*id),
            Command::LeaseExpire { ids, tenure } => Ok(self.apply_expire(ids, *tenure)),
            Command::Barrier { tenure } => {
                self.tenure = self.tenure.max(*tenure);
                Ok(CommandResponse::Barrier)
            }
            Command::Compact { revision } => self.apply_compact(*revision),
            Command::Alarm { action, member, kind } => Ok(self.apply_alarm(*action, *member, *kind)),
            Command::ChangeMembers(change) => self.membership.after(change).map(|(membership, added)| {
                self.membership = membership.clone();
                CommandResponse::Members { membership, added }
            }),
            Command::Auth(change) => self.auth.apply(change).map(|()| {
                self.auth_changed = true;
                CommandResponse::Auth { revision: self.auth.revision(), enabled: self.auth.is_enabled() }
            }),
            Command::Authorized(authorized) => {
                self.authorize(authorized).and_then(|()| self.apply_one(authorized.command.unwrapped()))
            }
        }
    }

    /// Lowers the per-apply cleanup so that tests see it span many applies.
    #[cfg(test)]
    pub(in crate::state) fn set_cleanup_budget(&mut self, budget: usize) {
        self.cleanup_budget = budget;
    }

    /// The revision the next write gets.
    fn next_revision(&self) -> Revision {
        self.revision + 1
    }

    fn apply_put(&mut self, request: &PutRequest) -> Result<PutResponse, KvError> {
        self.leases.can_attach(request.lease)?;
        let at = self.next_revision();
        let response = self.put_at(request, at);
        self.revision = at;
        Ok(response)
    }

    /// `request` with the parts `keep` names taken from the key as it is now; the key must
    /// exist (etcd's `ignore_value` / `ignore_lease`).
    fn resolve_kept(&self, request: &PutRequest, keep: Keep) -> Result<PutRequest, KvError> {
        let current = self.keys.get(&request.key).ok_or(KvError::KeyNotFound)?;
        Ok(PutRequest {
            key: request.key.clone(),
            value: if keep.value { current.value.clone() } else { request.value.clone() },
            lease: if keep.lease { current.lease } else { request.lease },
            prev_kv: request.prev_kv,
        })
    }

    fn apply_delete(&mut self, request: &DeleteRangeRequest) -> Result<DeleteRangeResponse, KvError> {
        let selection = Selection::of(&request.range)?;
        let response = self.delete(selection, request.prev_kv, self.next_revision());
        if response.deleted > 0 {
            self.revision = self.next_revision();
        }
        Ok(response)
    }

    fn apply_revoke(&mut self, id: LeaseId) -> Result<CommandResponse, KvError> {
        let lease = self.leases.remove(id).ok_or(KvError::LeaseNotFound(id))?;
        let at = self.next_revision();
        let deleted = self.bury_lease_keys(lease, at);
        if deleted > 0 {
            self.revision = at;
        }
        Ok(CommandResponse::LeaseRevoke { deleted })
    }

    fn apply_expire(&mut self, ids: &[LeaseId], tenure: Tenure) -> CommandResponse {
        let mut expired = Vec::new();
        let mut deleted = 0;
        if tenure < self.tenure {
            // Decided by a master that a newer one has replaced: see `Command::LeaseExpire`.
            return CommandResponse::LeaseExpire { expired, deleted };
        }
        // Every lease's keys vanish at this one revision (used only if some lease had keys).
        let at = self.next_revision();
        for &id in ids {
            // Gone already (revoked, or listed twice): the expiry raced something else.
            if let Some(lease) = self.leases.remove(id) {
                expired.push(id);
                deleted += self.bury_lease_keys(lease, at);
            }
        }
        if deleted > 0 {
            self.revision = at;
        }
        CommandResponse::LeaseExpire { expired, deleted }
    }

    /// Writes one key at revision `at`; the lease was checked.
    fn put_at(&mut self, request: &PutRequest, at: Revision) -> PutResponse {
        let (create_revision, version, old_lease) = match self.keys.get(&request.key) {
            Some(old) => (old.create_revision, old.version + 1, old.lease),
            None => (at, 1, NO_LEASE),
        };
        if old_lease != request.lease {
            self.leases.detach(old_lease, &request.key);
            self.leases.attach(request.lease, &request.key);
        }
        let kv = KeyValue {
            key: request.key.clone(),
            value: request.value.clone(),
            create_revision,
            mod_revision: at,
            version,
            lease: request.lease,
        };
        let old = self.keys.replace(kv.clone());
        let response = PutResponse { prev_kv: old.clone().filter(|_| request.prev_kv) };
        self.history.put(kv, old);
        response
    }

    /// Deletes the selected keys at revision `at`; the caller moves the store revision to
    /// `at` if anything was deleted.
    fn delete(&mut self, selection: Selection<'_>, prev_kv: bool, at: Revision) -> DeleteRangeResponse {
        let mut response = DeleteRangeResponse::default();
        let taken = match selection {
            Selection::Single(key) => self.keys.take(key).into_iter().collect(),
            Selection::Interval(bounds) => self.keys.take_range(bounds),
        };
        for kv in taken {
            self.leases.detach(kv.lease, &kv.key);
            response.deleted += 1;
            if prev_kv {
                response.prev_kvs.push(kv.clone());
            }
            self.history.delete(kv, at);
        }
        response
    }

    /// Deletes, as of revision `at`, every key of a lease already removed from the table;
    /// returns how many. The keys become invisible now and are swept from memory over the
    /// following applies, so this is O(log leases) however many keys the lease had.
    fn bury_lease_keys(&mut self, lease: Lease, at: Revision) -> i64 {
        // The table keeps a lease's key set equal to the live keys attached to it, so every
        // one of them is deleted (and each was written before `at`, as the graveyard needs).
        let deleted = i64::try_from(lease.keys.len()).unwrap_or(i64::MAX);
        // Watchers see one delete per key, in key order, all at `at`; the history needs each
        // key's last value (prev_kv) while it is still readable.
        for kv in self.keys.get_all(lease.keys.iter()).into_iter().flatten() {
            self.history.delete(kv, at);
        }
        self.keys.bury(lease.id, at, lease.keys.into_set());
        deleted
    }

    /// Forgets the history below `revision`; see [`Command::Compact`].
    fn apply_compact(&mut self, revision: Revision) -> Result<CommandResponse, KvError> {
        if revision > self.revision {
            return Err(KvError::FutureRevision { requested: revision, current: self.revision });
        }
        if revision <= self.history.compacted() {
            return Err(KvError::Compacted { requested: revision, compacted: self.history.compacted() });
        }
        let dropped = self.history.compact(revision);
        Ok(CommandResponse::Compact { dropped: u64::try_from(dropped).unwrap_or(u64::MAX) })
    }

    /// Lists, raises or disarms alarms; `member` 0 and `kind` `None` match every member and
    /// every kind when listing and disarming.
    fn apply_alarm(&mut self, action: AlarmAction, member: u64, kind: Option<AlarmKind>) -> CommandResponse {
        let matches = |a: &Alarm| (member == 0 || a.member == member) && kind.is_none_or(|k| a.kind == k);
        let alarms = match (action, kind) {
            (AlarmAction::List, _) => self.alarms.iter().filter(|a| matches(a)).copied().collect(),
            (AlarmAction::Raise, Some(kind)) => {
                let alarm = Alarm { member, kind };
                self.alarms.insert(alarm);
                vec![alarm]
            }
            // Refused before proposing; applied, it raises nothing.
            (AlarmAction::Raise, None) => Vec::new(),
            (AlarmAction::Disarm, _) => {
                let disarmed: Vec<Alarm> = self.alarms.iter().filter(|a| matches(a)).copied().collect();
                self.alarms.retain(|a| !matches(a));
                disarmed
            }
        };
        CommandResponse::Alarm { alarms }
    }

    /// The cluster's configuration as the log recorded it (epoch 0: not recorded yet).
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// Users, roles and whether auth is enabled, as the log recorded them.
    pub fn auth(&self) -> &AuthStore {
        &self.auth
    }

    /// The raised alarms, in (member, kind) order.
    pub fn alarms(&self) -> impl Iterator<Item = &Alarm> + '_ {
        self.alarms.iter()
    }

    /// Whether an alarm of `kind` is raised on any member.
    pub fn has_alarm(&self, kind: AlarmKind) -> bool {
        self.alarms.iter().any(|a| a.kind == kind)
    }

    /// Bytes of data the store holds: every stored key and value and every retained change,
    /// each with a fixed allowance for its revisions and bookkeeping. What the space quota
    /// (etcd's `--quota-backend-bytes`) measures, and `Status.dbSizeInUse`: it grows with
    /// writes and shrinks with deletes and compaction, the same on every member.
    pub fn bytes_in_use(&self) -> u64 {
        self.keys.bytes() + self.history.bytes()
    }

    /// Reads at the current revision.
    pub fn range(&self, request: &RangeRequest) -> Result<RangeResponse, KvError> {
        self.keys.range(request)
    }

    /// Reads at `revision` (etcd's `RangeRequest.revision`): `revision <= 0` or the current
    /// revision reads the current state; below the compaction point is
    /// [`KvError::Compacted`], above the current revision [`KvError::FutureRevision`].
    /// A past read costs the live keys in the range plus the changes since `revision`.
    pub fn range_at(&self, request: &RangeRequest, revision: Revision) -> Result<RangeResponse, KvError> {
        if revision <= 0 || revision == self.revision {
            return self.range(request);
        }
        self.check_readable(revision)?;
        self.rewound(request, revision)
    }

    /// A view to answer reads at `revision` (0 or less: the store revision) on any thread
    /// while this state machine goes on applying ([`super::ReadView`]); a compacted or
    /// future revision is etcd's error. O(1): nothing is flushed or copied but the lease
    /// deaths whose keys are still being swept. Called between commands.
    pub fn read_view(&mut self, revision: Revision) -> Result<super::ReadView, KvError> {
        let revision = if revision <= 0 { self.revision } else { revision };
        self.check_readable(revision)?;
        // The view reads every change after the engine's head from the history: the ones
        // applied since the last flush must be published first.
        self.history.publish_tail();
        Ok(super::ReadView::new(super::read_view::ReadViewParts {
            engine: Arc::clone(&self.engine),
            published: Arc::clone(self.history.published_state()),
            failure: self.failure.clone(),
            revision,
            live_keys: (revision == self.revision).then(|| self.keys.len()),
            index: self.keys.live_index(),
            latest: self.revision,
            deaths: self.keys.deaths().collect(),
            #[cfg(feature = "negative-controls")]
            damaged: self.keys.damaged().map(<[u8]>::to_vec),
        }))
    }

    /// The keys of `request` as they were at `revision` (readable: checked), with every
    /// later change undone, including those of a transaction being applied.
    pub(super) fn rewound(&self, request: &RangeRequest, revision: Revision) -> Result<RangeResponse, KvError> {
        let selection = Selection::of(&request.range)?;
        let now: BTreeMap<Vec<u8>, KeyValue> = self.keys.select(selection).map(|kv| (kv.key.clone(), kv)).collect();
        let then = self.history.rewind(now, &request.range, revision);
        Ok(Keyspace::read_from(then.into_values(), request))
    }

    /// Whether a read at `revision` can be served: not above the store revision, not below
    /// the compaction point.
    pub(super) fn check_readable(&self, revision: Revision) -> Result<(), KvError> {
        if revision > self.revision {
            return Err(KvError::FutureRevision { requested: revision, current: self.revision });
        }
        if revision < self.history.compacted() {
            return Err(KvError::Compacted { requested: revision, compacted: self.history.compacted() });
        }
        Ok(())
    }

    /// Every change at revision `from` and later, oldest first (the events of one revision
    /// in their order within it); [`KvError::Compacted`] when `from` is below the compaction
    /// point. A `from` above the current revision gives nothing. Watch streams read through
    /// a [`HistoryReader`] instead, in bounded batches.
    pub fn events_since(&self, from: Revision) -> Result<Vec<Event>, KvError> {
        if from < self.history.compacted() {
            return Err(KvError::Compacted { requested: from, compacted: self.history.compacted() });
        }
        Ok(self.history.events_from(from).collect())
    }

    /// A handle on this state machine's history for watch streams (see [`HistoryReader`]).
    pub fn history_reader(&self) -> HistoryReader {
        self.history.reader()
    }

    /// The compaction point: the oldest revision still readable (0 if never compacted:
    /// everything since revision 1 is).
    pub fn compacted_revision(&self) -> Revision {
        self.history.compacted()
    }

    /// Number of changes held in the history window.
    pub fn history_len(&self) -> usize {
        self.history.len()
    }

    /// The current revision.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// How many key records name their change for their value (tests).
    #[cfg(test)]
    pub(super) fn named_changes(&mut self) -> Option<usize> {
        self.keys.live_changes().len()
    }

    /// One live key.
    pub fn get(&self, key: &[u8]) -> Option<KeyValue> {
        self.keys.get(key)
    }

    /// One lease.
    pub fn lease(&self, id: LeaseId) -> Option<&Lease> {
        self.leases.get(id)
    }

    /// Resolves a lease name.
    pub fn lease_id_by_name(&self, name: &str) -> Option<LeaseId> {
        self.leases.id_by_name(name)
    }

    /// All live leases in id order.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> + '_ {
        self.leases.iter()
    }

    /// Number of live leases.
    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    /// Number of live keys (keys of revoked or expired leases not yet swept from memory are
    /// not counted: they no longer exist).
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// Number of keys of revoked or expired leases that are already deleted (invisible to
    /// every read, compare and write) but still held in memory. Each apply lowers it by at
    /// most [`Self::CLEANUP_PER_APPLY`]; replicas that applied the same commands agree on it,
    /// snapshots included. For tests and metrics.
    pub fn pending_cleanup(&self) -> usize {
        self.keys.pending()
    }

    /// A running digest of everything applied so far: each command, the revision it left
    /// and whether it succeeded. Equal digests mean equal applied histories (up to hash
    /// collisions); it survives snapshots.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Serialises the whole state. Empty if the state engine failed while it was read,
    /// which [`Self::engine_failure`] then reports.
    pub fn to_snapshot_bytes(&self) -> Vec<u8> {
        let encoded = snapshot::encode(&snapshot::Parts {
            revision: self.revision,
            tenure: self.tenure,
            digest: self.digest,
            keys: &self.keys,
            leases: &self.leases,
            history: &self.history,
            alarms: &self.alarms,
            membership: &self.membership,
            auth: &self.auth,
        });
        match encoded {
            Ok(bytes) => bytes,
            Err(error) => {
                let error =
                    EngineError::Corrupt { what: "the state, read for a snapshot".into(), detail: error.to_string() };
                self.failure.check::<()>(Err(error));
                Vec::new()
            }
        }
    }

    /// Restores a state serialised by [`StateMachine::to_snapshot_bytes`], on an engine of
    /// its own in memory.
    pub fn from_snapshot_bytes(bytes: &[u8]) -> Result<Self, SnapshotError> {
        Self::from_snapshot_bytes_on(bytes, Arc::new(MemoryEngine::new()))
    }

    /// Restores a state serialised by [`StateMachine::to_snapshot_bytes`] onto `engine`,
    /// whose state is replaced once the snapshot decoded and passed its checks (an invalid
    /// snapshot leaves the engine as it was).
    pub fn from_snapshot_bytes_on(bytes: &[u8], engine: Arc<dyn Engine>) -> Result<Self, SnapshotError> {
        Self::install_snapshot(Self::check_snapshot_bytes(bytes)?, engine)
    }

    /// Decodes and checks a snapshot without writing it anywhere.
    pub fn check_snapshot_bytes(bytes: &[u8]) -> Result<CheckedSnapshot, SnapshotError> {
        snapshot::decode(bytes).map(CheckedSnapshot)
    }

    /// Checks the snapshot in the file at `path` without writing it anywhere. Format 8 is
    /// read frame by frame, in bounded memory; an older format is read whole.
    pub fn check_snapshot_file(path: &Path) -> Result<(), SnapshotError> {
        if stream::starts_streamed(open_snapshot(path)?) {
            stream::check_from(open_snapshot(path)?)
        } else {
            Self::check_snapshot_bytes(&read_snapshot(path)?).map(|_| ())
        }
    }

    /// Replaces `engine`'s state with the snapshot in the file at `path` (not flushed, as
    /// [`Self::install_snapshot`]). Format 8 is written to the engine as it is read, in
    /// bounded memory; check the file first ([`Self::check_snapshot_file`]): a file that
    /// fails midway leaves the engine holding part of it.
    pub fn install_snapshot_file(path: &Path, engine: Arc<dyn Engine>) -> Result<Self, SnapshotError> {
        if !stream::starts_streamed(open_snapshot(path)?) {
            return Self::from_snapshot_bytes_on(&read_snapshot(path)?, engine);
        }
        let failure = Failure::default();
        engine.clear().map_err(|e| SnapshotError::Corrupt(format!("cannot clear the state engine: {e}")))?;
        let restored = stream::load_from(open_snapshot(path)?, &engine, &failure)?;
        Ok(Self::restored(engine, failure, restored))
    }

    /// Writes the format 8 snapshot read from `reader` into `engine`, which holds nothing,
    /// checking it as it goes (every check [`Self::check_snapshot_file`] makes), in bounded
    /// memory; not flushed. An error leaves part of it in `engine`: install into an engine
    /// to be given up then (a staged one, [`crate::log::StagedSnapshot`]).
    pub fn install_snapshot_stream(reader: impl std::io::Read, engine: Arc<dyn Engine>) -> Result<Self, SnapshotError> {
        let failure = Failure::default();
        let restored = stream::load_from(reader, &engine, &failure)?;
        Ok(Self::restored(engine, failure, restored))
    }

    /// Whether `bytes` begin a format 8 snapshot ([`Self::install_snapshot_stream`] reads
    /// it; older formats are read whole).
    pub fn is_streamed_snapshot(bytes: &[u8]) -> bool {
        stream::starts_streamed(bytes)
    }

    /// Replaces `engine`'s state with the checked snapshot's (not flushed: the caller names
    /// the slot it reaches with [`Self::flush_through`]).
    pub fn install_snapshot(checked: CheckedSnapshot, engine: Arc<dyn Engine>) -> Result<Self, SnapshotError> {
        let failure = Failure::default();
        engine.clear().map_err(|e| SnapshotError::Corrupt(format!("cannot clear the state engine: {e}")))?;
        let restored = checked.0.load(&engine, &failure)?;
        Ok(Self::restored(engine, failure, restored))
    }

    fn restored(engine: Arc<dyn Engine>, failure: Failure, restored: snapshot::Restored) -> Self {
        StateMachine {
            engine,
            failure,
            revision: restored.revision,
            tenure: restored.tenure,
            keys: restored.keys,
            history: restored.history,
            leases: restored.leases,
            digest: restored.digest,
            alarms: restored.alarms,
            membership: restored.membership,
            auth: restored.auth,
            cleanup_budget: Self::CLEANUP_PER_APPLY,
            applied: 0,
            auth_changed: true,
            #[cfg(feature = "negative-controls")]
            applied_before_state: false,
        }
    }
}

/// A snapshot file opened for reading, buffered.
fn open_snapshot(path: &Path) -> Result<std::io::BufReader<std::fs::File>, SnapshotError> {
    std::fs::File::open(path)
        .map(|file| std::io::BufReader::with_capacity(1 << 20, file))
        .map_err(|e| SnapshotError::Corrupt(format!("cannot open the snapshot file {}: {e}", path.display())))
}

/// A snapshot file read whole (formats before 8, which are decoded from one buffer).
fn read_snapshot(path: &Path) -> Result<Vec<u8>, SnapshotError> {
    std::fs::read(path)
        .map_err(|e| SnapshotError::Corrupt(format!("cannot read the snapshot file {}: {e}", path.display())))
}

mod authorize;
pub(super) mod consistency;
mod durable;
#[cfg(test)]
mod tests;
mod txn;

pub use consistency::KvHash;
