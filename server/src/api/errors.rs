//! Every error the client API answers with, built in one place, as etcd's `rpctypes` does.
//!
//! Where etcd has the error, the status is etcd's, code and message word for word, from the
//! client crate's table ([`EtcdError`]): etcd's clients recognise errors by their exact
//! message and show an unknown one as a raw `rpc error: code = … desc = …`. What etcd's
//! message leaves out (the size and the limit, the setting to raise, which queue was full)
//! goes beside it in the status's details ([`EtcdError::explained`]), which kvcli and the
//! console show; where the request itself says it all (an unknown lease), the answer is
//! etcd's, details and all, as etcd's own gateway writes it.
//! Errors etcd does not have (leasekv's lease names, its lease cap) keep the store's own
//! message, prefixed `etcdserver: ` like the rest.

use leasekv_client::EtcdError;
use leasekv_kvstore::log::RequestError;
use leasekv_kvstore::KvError;
use tonic::{Code, Status};

/// How one store error reaches a client: as one of etcd's, explained or not, or as
/// leasekv's own with a code.
enum Answer {
    Etcd(EtcdError),
    Explained(EtcdError, &'static str, String),
    Own(Code),
}

fn answer_for(error: &KvError) -> Answer {
    use Answer::{Etcd, Explained, Own};
    match error {
        KvError::EmptyKey => Etcd(EtcdError::EmptyKey),
        KvError::KeyTooLarge { len, max } => Explained(
            EtcdError::RequestTooLarge,
            "KEY_TOO_LARGE",
            format!("the key is {len} bytes; at most {max} are allowed ([limits] max_key_bytes)"),
        ),
        KvError::ValueTooLarge { len, max } => Explained(
            EtcdError::RequestTooLarge,
            "VALUE_TOO_LARGE",
            format!("the value is {len} bytes; at most {max} are allowed ([limits] max_value_bytes)"),
        ),
        KvError::TooManyTxnOps { count, max } => Explained(
            EtcdError::TooManyOps,
            "TOO_MANY_TXN_OPS",
            format!("a branch has {count} operations; at most {max} are allowed ([limits] max_txn_ops, --max-txn-ops)"),
        ),
        KvError::DuplicateKeyInTxn => Etcd(EtcdError::DuplicateKey),
        // The request names the lease: etcd's message says it all.
        KvError::LeaseNotFound(_) => Etcd(EtcdError::LeaseNotFound),
        KvError::LeaseExists(_) => Etcd(EtcdError::LeaseExists),
        KvError::LeaseNameTaken { .. } => Own(Code::FailedPrecondition),
        KvError::InvalidLeaseName(_)
        | KvError::InvalidTtl(_)
        | KvError::InvalidLeaseId(_)
        | KvError::ReservedCommand(_)
        | KvError::InvalidRange { .. }
        | KvError::AlarmTypeMissing => Own(Code::InvalidArgument),
        KvError::Compacted { .. } => Etcd(EtcdError::Compacted),
        KvError::FutureRevision { .. } => Etcd(EtcdError::FutureRevision),
        KvError::KeyNotFound => Etcd(EtcdError::KeyNotFound),
        KvError::ValueProvided => Etcd(EtcdError::ValueProvided),
        KvError::LeaseProvided => Etcd(EtcdError::LeaseProvided),
        KvError::NoSpace => Etcd(EtcdError::NoSpace),
        KvError::Corrupt => Etcd(EtcdError::Corrupt),
        KvError::MemberNotFound(_) => Etcd(EtcdError::MemberNotFound),
        KvError::PeerUrlExists => Etcd(EtcdError::PeerUrlExists),
        KvError::MemberNotLearner => Etcd(EtcdError::MemberNotLearner),
        KvError::LearnerNotReady => Etcd(EtcdError::LearnerNotReady),
        KvError::TooManyLearners => Etcd(EtcdError::TooManyLearners),
        KvError::BadMemberUrl(why) => Explained(EtcdError::MemberBadUrls, "BAD_MEMBER_URL", why.clone()),
        // The one-voter-at-a-time rules' refusals; the text says which rule.
        KvError::MembershipChange(_) => Own(Code::FailedPrecondition),
        KvError::MembershipBusy => Explained(
            EtcdError::Unhealthy,
            "MEMBERSHIP_SETTLING",
            "the previous membership change is still settling; retry in a few seconds".to_string(),
        ),
        KvError::RootUserNotExist => Etcd(EtcdError::RootUserNotExist),
        KvError::RootRoleNotExist => Etcd(EtcdError::RootRoleNotExist),
        KvError::UserAlreadyExists => Etcd(EtcdError::UserAlreadyExists),
        KvError::UserEmpty => Etcd(EtcdError::UserEmpty),
        KvError::UserNotFound => Etcd(EtcdError::UserNotFound),
        KvError::RoleAlreadyExists => Etcd(EtcdError::RoleAlreadyExists),
        KvError::RoleNotFound => Etcd(EtcdError::RoleNotFound),
        KvError::RoleEmpty => Etcd(EtcdError::RoleEmpty),
        KvError::RoleNotGranted => Etcd(EtcdError::RoleNotGranted),
        KvError::PermissionNotGranted => Etcd(EtcdError::PermissionNotGranted),
        KvError::InvalidAuthManagement => Etcd(EtcdError::InvalidAuthManagement),
        // etcd has no lease cap: a quota's code, as NOSPACE has.
        KvError::TooManyLeases { .. } => Own(Code::ResourceExhausted),
        KvError::PermissionDenied => Etcd(EtcdError::PermissionDenied),
        KvError::AuthOldRevision => Etcd(EtcdError::AuthOldRevision),
        KvError::LeaseTtlTooLarge => Etcd(EtcdError::LeaseTtlTooLarge),
        // A disk error or a damaged record on this member: not the caller's doing.
        KvError::StateUnreadable(_) => Own(Code::Internal),
        // grpc-go's code and text for a message over its send limit, which is what etcd's
        // clients get from etcd.
        KvError::ResponseTooLarge { .. } => Own(Code::ResourceExhausted),
    }
}

/// The status etcd clients expect for a store error.
pub fn kv_error(error: &KvError) -> Status {
    match answer_for(error) {
        Answer::Etcd(etcd) => etcd.status(),
        Answer::Explained(etcd, reason, why) => etcd.explained(reason, why),
        Answer::Own(code) => Status::new(code, error.to_string()),
    }
}

/// The status for a replica error. A fatal one ([`RequestError::class`]: this node, or the
/// master that answered a forwarded request, has stopped) is etcd's "server stopped", which
/// etcd's clients retry on another member, with the cause beside it.
pub fn request_error(error: RequestError) -> Status {
    match error {
        RequestError::Invalid(e) => kv_error(&e),
        RequestError::NotMaster { .. } => EtcdError::NoLeader.status(),
        RequestError::NotReady => EtcdError::LeaderChanged.status(),
        RequestError::Indeterminate { .. } => leasekv_client::indeterminate_write(),
        RequestError::Busy { pending } => EtcdError::TooManyRequests.explained(
            "MASTER_BUSY",
            format!("the master has {pending} commands waiting to be chosen; retry after a short back-off"),
        ),
        RequestError::Overloaded { queued } => EtcdError::TooManyRequests.explained(
            "QUEUE_FULL",
            format!(
                "the queue of client requests is full ({queued}, [limits] max_queued_requests); retry after a short \
                 back-off"
            ),
        ),
        RequestError::ShuttingDown => EtcdError::Stopped.status(),
        RequestError::StorageFailed(failure) => EtcdError::Stopped.explained(
            "STORAGE_FAILED",
            format!("the member stopped serving after a storage failure ({failure}); it serves again once restarted"),
        ),
        RequestError::PeerProtocol(what) => Status::internal(format!("leasekv peer protocol error: {what}")),
    }
}

/// etcd's answer to a request over `--max-request-bytes`, with the limit beside it.
pub fn request_too_large(len: usize, max: usize) -> Status {
    EtcdError::RequestTooLarge.explained(
        "REQUEST_TOO_LARGE",
        format!(
            "the request is {len} bytes; at most {max} are allowed ([limits] max_request_bytes, --max-request-bytes)"
        ),
    )
}

/// etcd's cancel reason for a watch the caller may not create, from the error the
/// permission check gave: etcd names a stale or missing token, and calls anything else
/// "permission denied".
pub fn watch_refusal_reason(refusal: &Status) -> String {
    let named = match EtcdError::of(refusal) {
        Some(e @ (EtcdError::InvalidAuthToken | EtcdError::AuthOldRevision | EtcdError::UserEmpty)) => e,
        _ => EtcdError::PermissionDenied,
    };
    named.go_error_text()
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasekv_client::errors::explanation;
    use leasekv_kvstore::log::StorageFailure;
    use leasekv_kvstore::storage::StorageError;

    #[test]
    fn store_errors_carry_etcds_exact_message_and_the_limit_beside_it() {
        for (error, message, why) in [
            (KvError::ValueTooLarge { len: 2_000_000, max: 1_572_864 }, "etcdserver: request is too large", "2000000"),
            (KvError::KeyTooLarge { len: 2000, max: 1536 }, "etcdserver: request is too large", "at most 1536"),
            (KvError::TooManyTxnOps { count: 129, max: 128 }, "etcdserver: too many operations in txn request", "129"),
        ] {
            let status = kv_error(&error);
            assert_eq!((status.code(), status.message()), (Code::InvalidArgument, message), "{error:?}");
            assert!(explanation(&status).is_some_and(|text| text.contains(why)), "{error:?}: {status:?}");
        }
        for (error, code, message) in [
            (KvError::EmptyKey, Code::InvalidArgument, "etcdserver: key is not provided"),
            (KvError::DuplicateKeyInTxn, Code::InvalidArgument, "etcdserver: duplicate key given in txn request"),
            (KvError::LeaseNotFound(5), Code::NotFound, "etcdserver: requested lease not found"),
            (KvError::MembershipBusy, Code::Unavailable, "etcdserver: unhealthy cluster"),
            (KvError::UserNotFound, Code::FailedPrecondition, "etcdserver: user name not found"),
        ] {
            let status = kv_error(&error);
            assert_eq!((status.code(), status.message()), (code, message), "{error:?}");
        }
    }

    #[test]
    fn leasekvs_own_errors_keep_the_stores_message() {
        let status = kv_error(&KvError::TooManyLeases { max: 10 });
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(status.message(), KvError::TooManyLeases { max: 10 }.to_string());
        assert_eq!(EtcdError::of(&status), None);
    }

    #[test]
    fn refusals_that_name_a_queue_keep_etcds_text_and_say_which_queue() {
        for error in [RequestError::Busy { pending: 512 }, RequestError::Overloaded { queued: 10_000 }] {
            let status = request_error(error);
            assert_eq!(EtcdError::of(&status), Some(EtcdError::TooManyRequests));
            assert!(explanation(&status).is_some());
        }
    }

    #[test]
    fn a_fatal_error_is_etcds_server_stopped_which_clients_retry_elsewhere() {
        let failure = StorageFailure::new(StorageError::Io("disk gone".into()));
        let status = request_error(RequestError::StorageFailed(failure));
        assert_eq!((status.code(), status.message()), (Code::Unavailable, "etcdserver: server stopped"));
        assert!(explanation(&status).is_some_and(|why| why.contains("disk gone")));
        assert_eq!(request_error(RequestError::ShuttingDown).message(), "etcdserver: server stopped");
        for fatal in [RequestError::ShuttingDown, RequestError::StorageFailed(StorageFailure::reported("x"))] {
            assert_eq!(fatal.class(), leasekv_kvstore::log::ErrorClass::Fatal);
        }
        assert_eq!(RequestError::NotReady.class(), leasekv_kvstore::log::ErrorClass::Call);
    }

    #[test]
    fn a_refused_watch_names_a_token_problem_and_calls_the_rest_permission_denied() {
        assert_eq!(
            watch_refusal_reason(&EtcdError::PermissionDenied.status()),
            "rpc error: code = PermissionDenied desc = etcdserver: permission denied"
        );
        assert_eq!(
            watch_refusal_reason(&EtcdError::AuthOldRevision.status()),
            "rpc error: code = InvalidArgument desc = etcdserver: revision of auth store is old"
        );
        assert_eq!(
            watch_refusal_reason(&Status::internal("something else")),
            "rpc error: code = PermissionDenied desc = etcdserver: permission denied"
        );
    }
}
