//! The commands that go through the replicated log and the reads served beside it, with
//! their responses. They mirror etcd's v3 requests field for field where etcd has one.

use crate::error::KvError;
use crate::types::{KeyRange, KeyValue, LeaseId, Revision};
use serde::{Deserialize, Serialize};

/// Which master's tenure issued a command: its log ballot as `(round, node)`, ordered the
/// same way. The state machine uses it to recognise a lease expiry decided by a master that
/// a newer one has since replaced (see [`Command::LeaseExpire`]).
pub type Tenure = (u64, u32);

/// Write a key (etcd `PutRequest`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PutRequest {
    /// The key.
    pub key: Vec<u8>,
    /// The new value.
    pub value: Vec<u8>,
    /// The lease to attach the key to, or [`crate::NO_LEASE`] to detach it.
    pub lease: LeaseId,
    /// Return the previous key-value in the response.
    pub prev_kv: bool,
}

/// Which parts of the existing key a put keeps (etcd's `ignore_value` and `ignore_lease`):
/// the put then fails with [`KvError::KeyNotFound`] if the key does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Keep {
    /// Keep the current value (etcd's `ignore_value`); the request's value must be empty.
    pub value: bool,
    /// Keep the current lease (etcd's `ignore_lease`); the request's lease must be 0.
    pub lease: bool,
}

/// Delete one key, a range or a prefix (etcd `DeleteRangeRequest`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeleteRangeRequest {
    /// The keys to delete.
    pub range: KeyRange,
    /// Return the deleted key-values in the response.
    pub prev_kv: bool,
}

/// Read keys at the current revision (etcd `RangeRequest`, without MVCC history).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct RangeRequest {
    /// The keys to read.
    pub range: KeyRange,
    /// At most this many keys in the response; 0 means no limit.
    pub limit: i64,
    /// Return only the count of matching keys.
    pub count_only: bool,
    /// Return keys without values.
    pub keys_only: bool,
}

/// What a [`Compare`] looks at.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CompareTarget {
    /// The value (a missing key has none and fails every value comparison, as in etcd).
    Value(Vec<u8>),
    /// The version (0 for a missing key).
    Version(i64),
    /// The create revision (0 for a missing key).
    CreateRevision(Revision),
    /// The mod revision (0 for a missing key).
    ModRevision(Revision),
    /// The lease (0 for a missing key or none).
    Lease(LeaseId),
}

/// How a [`Compare`] compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CompareResult {
    /// Stored == given.
    Equal,
    /// Stored > given.
    Greater,
    /// Stored < given.
    Less,
    /// Stored != given.
    NotEqual,
}

/// One condition of a Txn (etcd `Compare`); with a range, every key in it must match.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Compare {
    /// The key or keys compared.
    pub range: KeyRange,
    /// The attribute and the given value.
    pub target: CompareTarget,
    /// The comparison.
    pub result: CompareResult,
}

/// One operation in a Txn branch (etcd `RequestOp`). Variants are only ever appended, so
/// that log records written by an older build still decode.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TxnOp {
    /// A read, at the revision the Txn sees.
    Range(RangeRequest),
    /// A write.
    Put(PutRequest),
    /// A delete.
    DeleteRange(DeleteRangeRequest),
    /// A put that keeps the key's current value and/or lease.
    PutKeeping(PutRequest, Keep),
    /// A nested transaction: its compares are evaluated, like the outer ones, against the
    /// state before the outer transaction (etcd's rule), and its writes share the outer
    /// transaction's revision.
    Txn(TxnRequest),
    /// A read at a past revision (etcd's `RangeRequest.revision` inside a Txn): refused
    /// with the whole transaction if the revision is compacted or in the future.
    RangeAt(RangeRequest, Revision),
}

/// A transaction (etcd `TxnRequest`): if every compare holds, run `success`, else `failure`,
/// atomically, in one revision.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct TxnRequest {
    /// The conditions.
    pub compare: Vec<Compare>,
    /// Run when every compare holds.
    pub success: Vec<TxnOp>,
    /// Run otherwise.
    pub failure: Vec<TxnOp>,
}

impl TxnRequest {
    /// Whether every operation of both branches, nested Txns' included, is a read (etcd's
    /// `isTxnReadonly`): such a Txn changes nothing and is answered from reads at one
    /// revision instead of through the log.
    pub fn reads_only(&self) -> bool {
        self.success.iter().chain(&self.failure).all(|op| match op {
            TxnOp::Range(_) | TxnOp::RangeAt(..) => true,
            TxnOp::Txn(inner) => inner.reads_only(),
            TxnOp::Put(_) | TxnOp::PutKeeping(..) | TxnOp::DeleteRange(_) => false,
        })
    }
}

/// Everything that changes the store. Applied in log order, identically on every replica.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Command {
    /// Write a key.
    Put(PutRequest),
    /// Delete keys.
    DeleteRange(DeleteRangeRequest),
    /// A transaction.
    Txn(TxnRequest),
    /// Create a lease. `id == 0` lets the state machine pick a fresh id (deterministically).
    /// `ttl` is final here: the master raised it to the minimum before proposing.
    LeaseGrant {
        /// The lease id, or 0.
        id: LeaseId,
        /// An optional name, unique among live leases.
        name: Option<String>,
        /// Time to live, seconds.
        ttl: i64,
    },
    /// Delete a lease and every key attached to it, in one revision.
    LeaseRevoke {
        /// The lease.
        id: LeaseId,
    },
    /// Leases whose TTL ran out on the master: each is deleted with its keys, all in one
    /// revision. Leases already gone are skipped (a revoke may have raced the expiry).
    ///
    /// An expiry from an older tenure than the last applied [`Command::Barrier`] is stale
    /// and changes nothing: a deposed master's proposal can be chosen late (a newer master
    /// re-proposes what it finds accepted), after the newer master restarted the countdowns
    /// and acknowledged keepalives. The newer master's own tracker expires the lease when due.
    LeaseExpire {
        /// The expired leases.
        ids: Vec<LeaseId>,
        /// The tenure of the master that decided the expiry.
        tenure: Tenure,
    },
    /// A new master commits one to learn that its log is complete; it changes no key, and
    /// starts the master's tenure in the state machine.
    Barrier {
        /// The new master's tenure.
        tenure: Tenure,
    },
    /// Forget the history below `revision` (etcd `CompactionRequest`). Reads and watches
    /// from below it are refused afterwards; the revision itself stays readable. It changes
    /// no key and does not move the store revision. Appended after the variants above so
    /// that log records written before it existed still decode.
    Compact {
        /// The new compaction point: above the current one, at most the store revision.
        revision: Revision,
    },
    /// A put that keeps the key's current value and/or lease (etcd's `ignore_value` /
    /// `ignore_lease`); answered like [`Command::Put`].
    PutKeeping(PutRequest, Keep),
    /// Lists, raises or disarms alarms (etcd's `AlarmRequest`, which etcd also puts through
    /// its log, so every member holds the same alarms). Changes no key and not the revision.
    Alarm {
        /// What to do.
        action: AlarmAction,
        /// The member the alarm is about; 0: every member (listing and disarming).
        member: u64,
        /// Which alarm; `None` (etcd's `NONE`): every kind (listing and disarming).
        kind: Option<AlarmKind>,
    },
    /// One step of a membership change (see [`crate::membership`]): the configuration after
    /// it takes the next epoch. Changes no key and not the revision. The master proposes it
    /// alone in its slot and nothing after it until it is chosen (docs/membership.md, rule 3).
    ChangeMembers(crate::membership::MemberChange),
    /// One change to users, roles or whether auth is enabled (see [`crate::auth`]), put
    /// through the log as etcd puts its auth requests through raft, so that every member
    /// checks permissions against the same users and roles. Changes no key and not the
    /// revision. Appended after the variants above so that log records written before it
    /// existed still decode.
    Auth(crate::auth::AuthChange),
    /// A command sent by a user while auth was enabled, with who sent it: the state machine
    /// checks the user's permissions for it against the auth store at this point of the
    /// log, identically on every replica, and refuses it if they do not hold (etcd's
    /// `authApplierV3`, with the user name and auth revision its raft requests carry).
    /// Appended last so that log records written before it existed still decode.
    Authorized(Authorized),
}

/// A command and the user it is applied for (see [`Command::Authorized`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Authorized {
    /// The user the request named (by token or by client certificate).
    pub user: String,
    /// The auth store's revision the user was authenticated at (the token's). Applied
    /// after the auth store moved past it, the command is refused with etcd's "revision
    /// of auth store is old", so that no permission revoked in between is used.
    pub auth_revision: u64,
    /// The command itself; never an [`Command::Authorized`] again.
    pub command: Box<Command>,
}

/// An alarm etcd raises on a member (etcd's `AlarmType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AlarmKind {
    /// The store's data outgrew its quota: writes that add data are refused until an
    /// operator compacts and disarms it.
    NoSpace,
    /// Members' hashes disagree at one revision: the named member's data is suspect.
    Corrupt,
}

impl AlarmKind {
    /// etcd's name of the alarm (its `AlarmType`), as Status, `/health` and etcdctl show it.
    pub fn etcd_name(self) -> &'static str {
        match self {
            AlarmKind::NoSpace => "NOSPACE",
            AlarmKind::Corrupt => "CORRUPT",
        }
    }
}

/// What a [`Command::Alarm`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AlarmAction {
    /// List the alarms raised (of one kind, or all).
    List,
    /// Raise an alarm on a member.
    Raise,
    /// Disarm the alarms that match.
    Disarm,
}

/// One raised alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Alarm {
    /// The member it is about.
    pub member: u64,
    /// Which alarm.
    pub kind: AlarmKind,
}

impl Command {
    /// The command itself, without the user it is sent for ([`Command::Authorized`]).
    pub fn unwrapped(&self) -> &Command {
        match self {
            Command::Authorized(authorized) => authorized.command.unwrapped(),
            command => command,
        }
    }

    /// [`Command::unwrapped`], to change it.
    pub fn unwrapped_mut(&mut self) -> &mut Command {
        match self {
            Command::Authorized(authorized) => authorized.command.unwrapped_mut(),
            command => command,
        }
    }

    /// Whether this command can change the key space or the lease table.
    pub fn is_write(&self) -> bool {
        !matches!(
            self.unwrapped(),
            Command::Barrier { .. } | Command::Alarm { .. } | Command::ChangeMembers(_) | Command::Auth(_)
        )
    }

    /// Whether this command can make the store hold more data: what a NOSPACE alarm
    /// refuses (etcd's quota refuses puts, transactions with a put, and lease grants;
    /// deletes, revokes and compactions, which free space, go on).
    pub fn adds_data(&self) -> bool {
        match self.unwrapped() {
            Command::Put(_) | Command::PutKeeping(..) | Command::LeaseGrant { .. } => true,
            Command::Txn(txn) => txn.success.iter().chain(&txn.failure).any(TxnOp::adds_data),
            _ => false,
        }
    }
}

impl TxnOp {
    fn adds_data(&self) -> bool {
        match self {
            TxnOp::Put(_) | TxnOp::PutKeeping(..) => true,
            TxnOp::Txn(txn) => txn.success.iter().chain(&txn.failure).any(TxnOp::adds_data),
            TxnOp::Range(_) | TxnOp::RangeAt(..) | TxnOp::DeleteRange(_) => false,
        }
    }
}

/// The answer to a [`PutRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PutResponse {
    /// The key before the write, when asked for and it existed.
    pub prev_kv: Option<KeyValue>,
}

/// The answer to a [`DeleteRangeRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeleteRangeResponse {
    /// How many keys were deleted.
    pub deleted: i64,
    /// The deleted keys, when asked for.
    pub prev_kvs: Vec<KeyValue>,
}

/// The answer to a [`RangeRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RangeResponse {
    /// The keys, in key order (empty with `count_only`).
    pub kvs: Vec<KeyValue>,
    /// Whether `limit` cut the answer short.
    pub more: bool,
    /// How many keys match in all.
    pub count: i64,
}

/// The answer to one [`TxnOp`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOpResponse {
    /// From a range.
    Range(RangeResponse),
    /// From a put.
    Put(PutResponse),
    /// From a delete.
    DeleteRange(DeleteRangeResponse),
    /// From a nested transaction.
    Txn(TxnResponse),
}

/// The answer to a [`TxnRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TxnResponse {
    /// Whether the compares held (and `success` ran).
    pub succeeded: bool,
    /// One answer per operation of the branch that ran.
    pub responses: Vec<TxnOpResponse>,
}

/// The answer to a lease grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrantResponse {
    /// The lease id (chosen by the state machine when the request said 0).
    pub id: LeaseId,
    /// The TTL granted, seconds.
    pub ttl: i64,
}

/// The result of one applied [`Command`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandResponse {
    /// From [`Command::Put`].
    Put(PutResponse),
    /// From [`Command::DeleteRange`].
    DeleteRange(DeleteRangeResponse),
    /// From [`Command::Txn`].
    Txn(TxnResponse),
    /// From [`Command::LeaseGrant`].
    LeaseGrant(LeaseGrantResponse),
    /// From [`Command::LeaseRevoke`]: how many keys went with the lease.
    LeaseRevoke {
        /// Keys deleted.
        deleted: i64,
    },
    /// From [`Command::LeaseExpire`]: the leases that were still alive and are now gone.
    LeaseExpire {
        /// Leases deleted.
        expired: Vec<LeaseId>,
        /// Keys deleted.
        deleted: i64,
    },
    /// From [`Command::Barrier`].
    Barrier,
    /// From [`Command::Compact`]: how many history entries were dropped.
    Compact {
        /// History entries dropped.
        dropped: u64,
    },
    /// From [`Command::Alarm`]: the alarms listed, raised or disarmed.
    Alarm {
        /// The alarms.
        alarms: Vec<Alarm>,
    },
    /// From [`Command::ChangeMembers`]: the configuration after the change, and the id an
    /// Add gave its new member.
    Members {
        /// The new configuration.
        membership: crate::membership::Membership,
        /// The added member's id (MemberAdd only).
        added: Option<leasekv_lease::NodeId>,
    },
    /// From [`Command::Auth`]: the auth state after the change, as the server needs it to
    /// issue and check tokens.
    Auth {
        /// The auth revision after the change (unchanged by a change that was a no-op, such
        /// as enabling auth when it is on).
        revision: u64,
        /// Whether auth is enabled after the change.
        enabled: bool,
    },
}

/// What applying one command produced: the store's revision after it (the response
/// header's revision) and the command's own result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The store revision after the command.
    pub revision: Revision,
    /// The command's answer, or why it was refused.
    pub result: Result<CommandResponse, KvError>,
}
