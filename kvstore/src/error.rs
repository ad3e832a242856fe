//! Errors a request can get from the store. The messages are the ones etcd clients expect
//! (prefixed `etcdserver: `) where etcd has one, so that the gRPC layer can pass them on.

use crate::types::{LeaseId, Revision};
use thiserror::Error;

/// Why the store refused a request. Deterministic: every replica that applies the same
/// command reaches the same error.
#[derive(Debug, Clone, PartialEq, Eq, Error, serde::Serialize, serde::Deserialize)]
pub enum KvError {
    /// The key is empty.
    #[error("etcdserver: key is not provided")]
    EmptyKey,
    /// The key is longer than allowed.
    #[error("etcdserver: request is too large: key is {len} bytes, at most {max} are allowed")]
    KeyTooLarge {
        /// The key's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The value is longer than allowed.
    #[error("etcdserver: request is too large: value is {len} bytes, at most {max} are allowed")]
    ValueTooLarge {
        /// The value's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A Txn branch has too many operations.
    #[error("etcdserver: too many operations in txn request ({count}, at most {max} are allowed)")]
    TooManyTxnOps {
        /// Operations in the longest branch.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A Txn branch writes the same key twice.
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKeyInTxn,
    /// The lease does not exist (never granted, revoked or expired).
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound(LeaseId),
    /// A lease with this id already exists.
    #[error("etcdserver: lease already exists")]
    LeaseExists(LeaseId),
    /// A live lease already has this name.
    #[error("etcdserver: lease name {name:?} is already taken by lease {holder:x}")]
    LeaseNameTaken {
        /// The name asked for.
        name: String,
        /// The lease that holds it.
        holder: LeaseId,
    },
    /// The lease name is empty or too long.
    #[error("etcdserver: invalid lease name: {0}")]
    InvalidLeaseName(String),
    /// The TTL is zero or negative.
    #[error("etcdserver: lease TTL must be positive, got {0}")]
    InvalidTtl(i64),
    /// The lease id is negative (etcd's wire ids are positive int64).
    #[error("etcdserver: lease id must be positive, got {0}")]
    InvalidLeaseId(LeaseId),
    /// A command only the master itself may issue (lease expiry, barrier).
    #[error("etcdserver: {0} commands are issued by the master itself, not by clients")]
    ReservedCommand(String),
    /// A read, watch or compaction asked for a revision below the compaction point
    /// (etcd's `ErrCompacted`).
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The compaction point.
        compacted: Revision,
    },
    /// A read or compaction asked for a revision the store has not reached
    /// (etcd's `ErrFutureRev`).
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The store's revision.
        current: Revision,
    },
    /// A put with `ignore_value` or `ignore_lease` on a key that does not exist.
    #[error("etcdserver: key not found")]
    KeyNotFound,
    /// A put with `ignore_value` that also gives a value.
    #[error("etcdserver: value is provided")]
    ValueProvided,
    /// A put with `ignore_lease` that also gives a lease.
    #[error("etcdserver: lease is provided")]
    LeaseProvided,
    /// A range end that is below its start.
    #[error("etcdserver: range end {end:?} is before the key {key:?}")]
    InvalidRange {
        /// The start key (lossy UTF-8).
        key: String,
        /// The end key (lossy UTF-8).
        end: String,
    },
    /// A write that adds data while the space quota is exceeded (etcd's `ErrNoSpace`): the
    /// NOSPACE alarm is raised until an operator frees space and disarms it.
    #[error("etcdserver: mvcc: database space exceeded")]
    NoSpace,
    /// A write while a member is marked corrupt (etcd's `ErrCorrupt`).
    #[error("etcdserver: corrupt cluster")]
    Corrupt,
    /// An alarm request that names no alarm to raise.
    #[error("etcdserver: an alarm to raise must name its type (NOSPACE or CORRUPT)")]
    AlarmTypeMissing,
    /// A membership change names a member that does not exist (etcd's `ErrMemberNotFound`).
    #[error("etcdserver: member not found")]
    MemberNotFound(leasekv_lease::NodeId),
    /// A new or updated member's peer URL is already another member's.
    #[error("etcdserver: Peer URLs already exists")]
    PeerUrlExists,
    /// MemberPromote of a voter.
    #[error("etcdserver: can only promote a learner member")]
    MemberNotLearner,
    /// MemberPromote of a learner that has not caught up with the master's log.
    #[error("etcdserver: can only promote a learner member which is in sync with leader")]
    LearnerNotReady,
    /// MemberAdd of a learner beyond the allowed number.
    #[error("etcdserver: too many learner members in cluster")]
    TooManyLearners,
    /// A peer URL that is not `http://host:port` or `https://host:port`.
    #[error("etcdserver: given member URLs are invalid: {0}")]
    BadMemberUrl(String),
    /// A membership change the one-voter-at-a-time rules refuse, or the cluster cannot take
    /// now; the text says which.
    #[error("etcdserver: {0}")]
    MembershipChange(String),
    /// A membership change while the previous one is still settling (rules 2 and 5 of
    /// docs/membership.md); etcd answers a change it cannot take safely the same way.
    #[error("etcdserver: unhealthy cluster")]
    MembershipBusy,
    /// Enabling auth without a user named `root` (etcd's `ErrRootUserNotExist`).
    #[error("etcdserver: root user does not exist")]
    RootUserNotExist,
    /// Enabling auth while the `root` user lacks the `root` role (etcd's `ErrRootRoleNotExist`).
    #[error("etcdserver: root user does not have root role")]
    RootRoleNotExist,
    /// UserAdd of a name taken (etcd's `ErrUserAlreadyExist`).
    #[error("etcdserver: user name already exists")]
    UserAlreadyExists,
    /// UserAdd with an empty name (etcd's `ErrUserEmpty`).
    #[error("etcdserver: user name is empty")]
    UserEmpty,
    /// A user change naming a user that does not exist (etcd's `ErrUserNotFound`).
    #[error("etcdserver: user name not found")]
    UserNotFound,
    /// RoleAdd of a name taken (etcd's `ErrRoleAlreadyExist`).
    #[error("etcdserver: role name already exists")]
    RoleAlreadyExists,
    /// A change naming a role that does not exist (etcd's `ErrRoleNotFound`).
    #[error("etcdserver: role name not found")]
    RoleNotFound,
    /// RoleAdd with an empty name (etcd's `ErrRoleEmpty`).
    #[error("etcdserver: role name is empty")]
    RoleEmpty,
    /// UserRevokeRole of a role the user does not have (etcd's `ErrRoleNotGranted`).
    #[error("etcdserver: role is not granted to the user")]
    RoleNotGranted,
    /// RoleRevokePermission of a range the role has no permission on (etcd's
    /// `ErrPermissionNotGranted`).
    #[error("etcdserver: permission is not granted to the role")]
    PermissionNotGranted,
    /// An auth change etcd forbids (its `ErrInvalidAuthMgmt`): deleting the root user or the
    /// root role, or revoking the root role from the root user, while auth is enabled; or
    /// granting a permission on a range that holds no key.
    #[error("etcdserver: invalid auth management")]
    InvalidAuthManagement,
    /// A LeaseGrant while the store already holds `[limits] max_leases` live leases. etcd has
    /// no such cap; without one a single client granting leases in a loop grows every
    /// replica's memory (and the master's expiry tracking) without bound. Last, so the
    /// earlier variants keep their tags on the peer wire.
    #[error("etcdserver: too many leases: the store holds at most {max} live leases ([limits] max_leases); revoke unused leases or raise the limit")]
    TooManyLeases {
        /// The limit.
        max: usize,
    },
    /// The user may not do what the command does, by the auth store at the point of the
    /// log where it is applied (etcd's `ErrPermissionDenied`).
    #[error("etcdserver: permission denied")]
    PermissionDenied,
    /// The command's user was authenticated before the auth store last changed, so the
    /// permissions it was admitted with may no longer hold (etcd's `ErrAuthOldRevision`):
    /// the client authenticates again and retries.
    #[error("etcdserver: revision of auth store is old")]
    AuthOldRevision,
    /// A LeaseGrant whose TTL is over etcd's `MaxLeaseTTL` (9,000,000,000 s), which etcd
    /// refuses too (`ErrLeaseTTLTooLarge`): beyond it a deadline overflows a clock.
    #[error("etcdserver: too large lease TTL")]
    LeaseTtlTooLarge,
    /// The state could not be read from its engine (a disk error or a damaged record); the
    /// message says which.
    #[error("etcdserver: the state could not be read: {0}")]
    StateUnreadable(String),
    /// A Range whose answer is larger than the response limit (`[limits]
    /// max_response_bytes`; etcd's is gRPC's send limit, 2 GiB − 1): refused with the text
    /// grpc-go gives etcd's clients, and what to do instead. Goes to a follower only over a
    /// link of peer protocol version 5 or later.
    #[error(
        "grpc: trying to send message larger than max ({size} vs. {limit}): the answer exceeds [limits] \
         max_response_bytes; read the range in pages (limit) or with RangeStream"
    )]
    ResponseTooLarge {
        /// The answer's encoded size, bytes.
        size: u64,
        /// The limit.
        limit: u64,
    },
}
