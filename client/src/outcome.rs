//! The answer to a write whose outcome is unknown, shared by the server that sends it and
//! the client that must not retry it.
//!
//! When the master that took a write loses mastership (or dies) before the write's fate is
//! known, the write may still be chosen by the next master, or may be lost. The server then
//! answers UNAVAILABLE with etcd's own message for exactly this case, which etcd's clients
//! and etcdctl recognise, and marks the answer with a gRPC metadata entry that our client
//! reads instead of the message text. Retrying such a write could apply a Txn or a lease
//! grant twice, so the client leaves the decision to its caller (a plain put can simply be
//! repeated).

use crate::errors::EtcdError;
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

/// etcd's message (`ErrGRPCTimeoutDueToLeaderFail`) for a request whose leader failed while
/// it was in flight.
pub const INDETERMINATE_WRITE: &str = "etcdserver: request timed out, possibly due to previous leader failure";

/// The gRPC metadata key that carries a write's outcome on an error answer.
pub const OUTCOME_METADATA_KEY: &str = "leasekv-write-outcome";

/// The value of [`OUTCOME_METADATA_KEY`] on a write that may or may not have been applied.
pub const OUTCOME_UNKNOWN: &str = "unknown";

/// The status a leasekv server sends for a write that may or may not have been applied.
pub fn indeterminate_write() -> Status {
    let mut status = Status::unavailable(INDETERMINATE_WRITE);
    status.metadata_mut().insert(OUTCOME_METADATA_KEY, MetadataValue::from_static(OUTCOME_UNKNOWN));
    status
}

/// Whether `status` says the write it answers may or may not have been applied: the marker,
/// whatever the message says.
pub fn is_indeterminate(status: &Status) -> bool {
    status.metadata().get(OUTCOME_METADATA_KEY).is_some_and(|value| value == OUTCOME_UNKNOWN)
}

/// Whether another endpoint (or the same one later) may succeed where this one failed, and
/// trying again cannot do anything twice: one of etcd's errors that say nothing was done
/// ([`EtcdError::is_transient_unavailability`]), or an UNAVAILABLE that is not etcd's (the
/// transport's: refused, reset); never a write that may have been applied (as etcd's
/// clients, which retry a mutation only when it cannot have reached the leader).
pub(crate) fn is_retryable(status: &Status) -> bool {
    if is_indeterminate(status) {
        return false;
    }
    match EtcdError::of(status) {
        Some(error) => error.is_transient_unavailability(),
        None => status.code() == Code::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unavailable_without_the_marker_is_retried() {
        assert!(is_retryable(&Status::unavailable("down")));
        assert!(is_retryable(&Status::unavailable("etcdserver: no leader")));
        assert!(!is_retryable(&indeterminate_write()), "a write that may have been applied");
        assert!(!is_retryable(&Status::not_found("lease")));
        assert!(!is_retryable(&Status::deadline_exceeded("slow")));
        assert!(!is_retryable(&Status::unavailable(INDETERMINATE_WRITE)), "etcd's own: may have been applied");
        assert!(!is_retryable(&Status::unavailable("etcdserver: request timed out")));
        assert!(!is_retryable(&Status::resource_exhausted("etcdserver: too many requests")));
        assert!(is_retryable(&Status::unavailable("etcdserver: leader changed")));
    }

    #[test]
    fn the_marker_decides_not_the_message() {
        assert!(is_indeterminate(&indeterminate_write()));
        assert_eq!(indeterminate_write().message(), INDETERMINATE_WRITE);
        assert!(!is_indeterminate(&Status::unavailable(INDETERMINATE_WRITE)), "text alone is not the marker");
        let mut other = Status::unavailable("etcdserver: leader changed");
        other.metadata_mut().insert(OUTCOME_METADATA_KEY, MetadataValue::from_static(OUTCOME_UNKNOWN));
        assert!(is_indeterminate(&other));
    }
}
