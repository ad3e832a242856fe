//! etcd's server errors as one enum, read from an answer in one place (etcd's `rpctypes`).
//!
//! etcd's servers say what went wrong in the gRPC message, with fixed texts its clients
//! match word for word. This module holds the one table from those texts to [`EtcdError`];
//! every decision the client library, kvcli and the server's own peer calls make about an
//! error (retry elsewhere, authenticate again, stop) is made on the enum, never on the text.
//! Whether a write's outcome is unknown is not in the table: leasekv marks that answer with
//! metadata ([`crate::outcome`]), which an error text cannot fake.

use std::collections::HashMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// One of etcd's server errors (`api/v3rpc/rpctypes/error.go`), as a client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EtcdError {
    /// `etcdserver: key is not provided`.
    EmptyKey,
    /// `etcdserver: key not found`.
    KeyNotFound,
    /// `etcdserver: value is provided`.
    ValueProvided,
    /// `etcdserver: lease is provided`.
    LeaseProvided,
    /// `etcdserver: too many operations in txn request`.
    TooManyOps,
    /// `etcdserver: duplicate key given in txn request`.
    DuplicateKey,
    /// `etcdserver: invalid sort option`: a Range's sort order or target is not one etcd
    /// knows.
    InvalidSortOption,
    /// `etcdserver: mvcc: required revision has been compacted`.
    Compacted,
    /// `etcdserver: mvcc: required revision is a future revision`.
    FutureRevision,
    /// `etcdserver: mvcc: database space exceeded`.
    NoSpace,
    /// `etcdserver: requested lease not found`.
    LeaseNotFound,
    /// `etcdserver: lease already exists`.
    LeaseExists,
    /// `etcdserver: too large lease TTL`.
    LeaseTtlTooLarge,
    /// `etcdserver: member ID already exist`.
    MemberExists,
    /// `etcdserver: Peer URLs already exists`.
    PeerUrlExists,
    /// `etcdserver: re-configuration failed due to not enough started members`.
    MemberNotEnoughStarted,
    /// `etcdserver: given member URLs are invalid`.
    MemberBadUrls,
    /// `etcdserver: member not found`.
    MemberNotFound,
    /// `etcdserver: can only promote a learner member`.
    MemberNotLearner,
    /// `etcdserver: can only promote a learner member which is in sync with leader`.
    LearnerNotReady,
    /// `etcdserver: too many learner members in cluster`.
    TooManyLearners,
    /// `etcdserver: cluster ID mismatch`: the request came from another cluster.
    ClusterIdMismatch,
    /// `etcdserver: request is too large`.
    RequestTooLarge,
    /// `etcdserver: too many requests`: the server is saturated; back off and retry.
    TooManyRequests,
    /// `etcdserver: root user does not exist`.
    RootUserNotExist,
    /// `etcdserver: root user does not have root role`.
    RootRoleNotExist,
    /// `etcdserver: user name already exists`.
    UserAlreadyExists,
    /// `etcdserver: user name is empty`.
    UserEmpty,
    /// `etcdserver: user name not found`.
    UserNotFound,
    /// `etcdserver: role name already exists`.
    RoleAlreadyExists,
    /// `etcdserver: role name not found`.
    RoleNotFound,
    /// `etcdserver: role name is empty`.
    RoleEmpty,
    /// `etcdserver: authentication failed, invalid user ID or password`.
    AuthFailed,
    /// `etcdserver: permission not given`: a RoleGrantPermission without its permission.
    PermissionNotGiven,
    /// `etcdserver: permission denied`.
    PermissionDenied,
    /// `etcdserver: role is not granted to the user`.
    RoleNotGranted,
    /// `etcdserver: permission is not granted to the role`.
    PermissionNotGranted,
    /// `etcdserver: authentication is not enabled`.
    AuthNotEnabled,
    /// `etcdserver: invalid auth token`: authenticate again.
    InvalidAuthToken,
    /// `etcdserver: invalid auth management`.
    InvalidAuthManagement,
    /// `etcdserver: revision of auth store is old`: the token predates an auth change;
    /// authenticate again.
    AuthOldRevision,
    /// `etcdserver: no leader`: nothing was done; another member (or this one later) may
    /// serve it.
    NoLeader,
    /// `etcdserver: not leader`.
    NotLeader,
    /// `etcdserver: leader changed`.
    LeaderChanged,
    /// `etcdserver: not capable`.
    NotCapable,
    /// `etcdserver: server stopped`.
    Stopped,
    /// `etcdserver: request timed out`.
    Timeout,
    /// `etcdserver: request timed out, possibly due to previous leader failure`.
    TimeoutDueToLeaderFail,
    /// `etcdserver: request timed out, possibly due to connection lost`.
    TimeoutDueToConnectionLost,
    /// `etcdserver: unhealthy cluster`.
    Unhealthy,
    /// `etcdserver: corrupt cluster`.
    Corrupt,
    /// `etcdserver: rpc not supported for learner`.
    NotSupportedForLearner,
    /// `etcdserver: bad leader transferee`.
    BadLeaderTransferee,
    /// `etcdserver: request timed out, leader transfer took too long` (etcd's
    /// `ErrTimeoutLeaderTransfer`, which MoveLeader sends as it is, code UNKNOWN).
    LeaderTransferTimeout,
}

/// The one table: etcd's message, the code etcd sends it with, and the error.
const TABLE: &[(&str, Code, EtcdError)] = &[
    ("etcdserver: key is not provided", Code::InvalidArgument, EtcdError::EmptyKey),
    ("etcdserver: key not found", Code::InvalidArgument, EtcdError::KeyNotFound),
    ("etcdserver: value is provided", Code::InvalidArgument, EtcdError::ValueProvided),
    ("etcdserver: lease is provided", Code::InvalidArgument, EtcdError::LeaseProvided),
    ("etcdserver: too many operations in txn request", Code::InvalidArgument, EtcdError::TooManyOps),
    ("etcdserver: duplicate key given in txn request", Code::InvalidArgument, EtcdError::DuplicateKey),
    ("etcdserver: invalid sort option", Code::InvalidArgument, EtcdError::InvalidSortOption),
    ("etcdserver: mvcc: required revision has been compacted", Code::OutOfRange, EtcdError::Compacted),
    ("etcdserver: mvcc: required revision is a future revision", Code::OutOfRange, EtcdError::FutureRevision),
    ("etcdserver: mvcc: database space exceeded", Code::ResourceExhausted, EtcdError::NoSpace),
    ("etcdserver: requested lease not found", Code::NotFound, EtcdError::LeaseNotFound),
    ("etcdserver: lease already exists", Code::FailedPrecondition, EtcdError::LeaseExists),
    ("etcdserver: too large lease TTL", Code::OutOfRange, EtcdError::LeaseTtlTooLarge),
    ("etcdserver: member ID already exist", Code::FailedPrecondition, EtcdError::MemberExists),
    ("etcdserver: Peer URLs already exists", Code::FailedPrecondition, EtcdError::PeerUrlExists),
    (
        "etcdserver: re-configuration failed due to not enough started members",
        Code::FailedPrecondition,
        EtcdError::MemberNotEnoughStarted,
    ),
    ("etcdserver: given member URLs are invalid", Code::InvalidArgument, EtcdError::MemberBadUrls),
    ("etcdserver: member not found", Code::NotFound, EtcdError::MemberNotFound),
    ("etcdserver: can only promote a learner member", Code::FailedPrecondition, EtcdError::MemberNotLearner),
    (
        "etcdserver: can only promote a learner member which is in sync with leader",
        Code::FailedPrecondition,
        EtcdError::LearnerNotReady,
    ),
    ("etcdserver: too many learner members in cluster", Code::FailedPrecondition, EtcdError::TooManyLearners),
    ("etcdserver: cluster ID mismatch", Code::FailedPrecondition, EtcdError::ClusterIdMismatch),
    ("etcdserver: request is too large", Code::InvalidArgument, EtcdError::RequestTooLarge),
    ("etcdserver: too many requests", Code::ResourceExhausted, EtcdError::TooManyRequests),
    ("etcdserver: root user does not exist", Code::FailedPrecondition, EtcdError::RootUserNotExist),
    ("etcdserver: root user does not have root role", Code::FailedPrecondition, EtcdError::RootRoleNotExist),
    ("etcdserver: user name already exists", Code::FailedPrecondition, EtcdError::UserAlreadyExists),
    ("etcdserver: user name is empty", Code::InvalidArgument, EtcdError::UserEmpty),
    ("etcdserver: user name not found", Code::FailedPrecondition, EtcdError::UserNotFound),
    ("etcdserver: role name already exists", Code::FailedPrecondition, EtcdError::RoleAlreadyExists),
    ("etcdserver: role name not found", Code::FailedPrecondition, EtcdError::RoleNotFound),
    ("etcdserver: role name is empty", Code::InvalidArgument, EtcdError::RoleEmpty),
    ("etcdserver: authentication failed, invalid user ID or password", Code::InvalidArgument, EtcdError::AuthFailed),
    ("etcdserver: permission not given", Code::InvalidArgument, EtcdError::PermissionNotGiven),
    ("etcdserver: permission denied", Code::PermissionDenied, EtcdError::PermissionDenied),
    ("etcdserver: role is not granted to the user", Code::FailedPrecondition, EtcdError::RoleNotGranted),
    ("etcdserver: permission is not granted to the role", Code::FailedPrecondition, EtcdError::PermissionNotGranted),
    ("etcdserver: authentication is not enabled", Code::FailedPrecondition, EtcdError::AuthNotEnabled),
    ("etcdserver: invalid auth token", Code::Unauthenticated, EtcdError::InvalidAuthToken),
    ("etcdserver: invalid auth management", Code::InvalidArgument, EtcdError::InvalidAuthManagement),
    ("etcdserver: revision of auth store is old", Code::InvalidArgument, EtcdError::AuthOldRevision),
    ("etcdserver: no leader", Code::Unavailable, EtcdError::NoLeader),
    ("etcdserver: not leader", Code::FailedPrecondition, EtcdError::NotLeader),
    ("etcdserver: leader changed", Code::Unavailable, EtcdError::LeaderChanged),
    ("etcdserver: not capable", Code::FailedPrecondition, EtcdError::NotCapable),
    ("etcdserver: server stopped", Code::Unavailable, EtcdError::Stopped),
    ("etcdserver: request timed out", Code::Unavailable, EtcdError::Timeout),
    (
        "etcdserver: request timed out, possibly due to previous leader failure",
        Code::Unavailable,
        EtcdError::TimeoutDueToLeaderFail,
    ),
    (
        "etcdserver: request timed out, possibly due to connection lost",
        Code::Unavailable,
        EtcdError::TimeoutDueToConnectionLost,
    ),
    ("etcdserver: unhealthy cluster", Code::Unavailable, EtcdError::Unhealthy),
    ("etcdserver: corrupt cluster", Code::DataLoss, EtcdError::Corrupt),
    ("etcdserver: rpc not supported for learner", Code::FailedPrecondition, EtcdError::NotSupportedForLearner),
    ("etcdserver: bad leader transferee", Code::FailedPrecondition, EtcdError::BadLeaderTransferee),
    ("etcdserver: request timed out, leader transfer took too long", Code::Unknown, EtcdError::LeaderTransferTimeout),
];

impl EtcdError {
    /// The error an answer carries, if its message is one of etcd's. Matched as etcd's
    /// clients match it: the whole message, word for word.
    pub fn of(status: &Status) -> Option<EtcdError> {
        EtcdError::from_message(status.message())
    }

    /// The error named by etcd's message `message`, if it is one.
    pub fn from_message(message: &str) -> Option<EtcdError> {
        TABLE.iter().find(|(text, _, _)| *text == message).map(|(_, _, error)| *error)
    }

    /// etcd's message for this error.
    pub fn message(self) -> &'static str {
        self.entry().0
    }

    /// The gRPC code etcd sends this error with.
    pub fn code(self) -> Code {
        self.entry().1
    }

    /// This error as the status etcd's server sends.
    pub fn status(self) -> Status {
        Status::new(self.code(), self.message())
    }

    /// This error as etcd's server sends it, with why it happened beside etcd's message:
    /// the message stays etcd's word for word (clients match it), and `explanation` (the
    /// limit, the setting, what to do) travels in the status's details as gRPC's richer
    /// error model has it: an `ErrorInfo` whose reason is `reason` (leasekv's name for the
    /// case, e.g. `KEY_TOO_LARGE`) and a `LocalizedMessage`. Clients that know the model
    /// show it ([`explanation`]); others see etcd's error unchanged.
    pub fn explained(self, reason: &str, explanation: impl Into<String>) -> Status {
        let mut details = ErrorDetails::with_error_info(reason, EXPLANATION_DOMAIN, HashMap::new());
        details.set_localized_message("en-US", explanation);
        Status::with_error_details(self.code(), self.message(), details)
    }

    /// The text Go's gRPC prints for this error (`status.Error(...).Error()`), which etcd
    /// puts where a string carries an error: a watch's cancel reason.
    pub fn go_error_text(self) -> String {
        format!("rpc error: code = {} desc = {}", go_code_name(self.code()), self.message())
    }

    /// Whether the caller should authenticate again and repeat the call: the token is
    /// unknown, expired, or older than the auth store.
    pub fn needs_new_token(self) -> bool {
        matches!(self, EtcdError::InvalidAuthToken | EtcdError::AuthOldRevision)
    }

    /// Whether the server did nothing with the request and another member (or this one,
    /// shortly) may serve it: the member has no master, is stopping or unhealthy.
    pub fn is_transient_unavailability(self) -> bool {
        matches!(
            self,
            EtcdError::NoLeader
                | EtcdError::LeaderChanged
                | EtcdError::NotCapable
                | EtcdError::Stopped
                | EtcdError::Unhealthy
                | EtcdError::NotSupportedForLearner
        )
    }

    fn entry(self) -> &'static (&'static str, Code, EtcdError) {
        TABLE.iter().find(|(_, _, error)| *error == self).expect("every EtcdError is in TABLE")
    }
}

/// The `ErrorInfo` domain of leasekv's explanations.
pub const EXPLANATION_DOMAIN: &str = "leasekv";

/// Why a server refused a call, in words, when it said so beside the error (see
/// [`EtcdError::explained`]): the `LocalizedMessage` of the status's details.
pub fn explanation(status: &Status) -> Option<String> {
    status.get_details_localized_message().map(|detail| detail.message)
}

/// The name Go's `codes.Code.String()` gives a code (it spells CANCELLED `Canceled`).
fn go_code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_maps_to_one_error_and_back() {
        for (message, code, error) in TABLE {
            assert_eq!(EtcdError::from_message(message), Some(*error), "{message}");
            assert_eq!((error.message(), error.code()), (*message, *code));
            assert_eq!(EtcdError::of(&error.status()), Some(*error));
        }
        let distinct: std::collections::HashSet<_> = TABLE.iter().map(|(_, _, e)| *e).collect();
        assert_eq!(distinct.len(), TABLE.len(), "an error listed twice");
    }

    #[test]
    fn only_the_whole_message_counts() {
        assert_eq!(EtcdError::from_message("etcdserver: no leader (node 2)"), None);
        assert_eq!(EtcdError::from_message("no leader"), None);
        assert_eq!(EtcdError::of(&Status::unavailable("transport error")), None);
    }

    #[test]
    fn an_explained_error_keeps_etcds_message_and_code_and_carries_the_why() {
        let status = EtcdError::RequestTooLarge.explained("KEY_TOO_LARGE", "the key is 2000 bytes, at most 1536");
        assert_eq!((status.code(), status.message()), (Code::InvalidArgument, "etcdserver: request is too large"));
        assert_eq!(EtcdError::of(&status), Some(EtcdError::RequestTooLarge));
        assert_eq!(explanation(&status).as_deref(), Some("the key is 2000 bytes, at most 1536"));
        let info = status.get_details_error_info().expect("an ErrorInfo");
        assert_eq!((info.reason.as_str(), info.domain.as_str()), ("KEY_TOO_LARGE", EXPLANATION_DOMAIN));
        assert_eq!(explanation(&EtcdError::RequestTooLarge.status()), None);
    }

    #[test]
    fn go_prints_an_error_as_etcds_watch_cancel_reason_carries_it() {
        assert_eq!(
            EtcdError::PermissionDenied.go_error_text(),
            "rpc error: code = PermissionDenied desc = etcdserver: permission denied"
        );
        assert_eq!(
            EtcdError::InvalidAuthToken.go_error_text(),
            "rpc error: code = Unauthenticated desc = etcdserver: invalid auth token"
        );
    }

    #[test]
    fn decisions_are_made_on_the_error() {
        assert!(EtcdError::InvalidAuthToken.needs_new_token());
        assert!(EtcdError::AuthOldRevision.needs_new_token());
        assert!(!EtcdError::AuthFailed.needs_new_token());
        assert!(EtcdError::NoLeader.is_transient_unavailability());
        assert!(!EtcdError::TimeoutDueToLeaderFail.is_transient_unavailability(), "a write may have been applied");
        assert!(!EtcdError::TooManyRequests.is_transient_unavailability());
    }
}
