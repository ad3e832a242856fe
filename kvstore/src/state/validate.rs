//! Front-door checks: what a request must satisfy before it is proposed.
//!
//! These are the checks that depend only on the request and the configured [`Limits`], so
//! that a bad request is refused before it costs a log slot. The state machine re-checks
//! what it must to stay panic-free and deterministic (ranges, leases) when it applies.

use super::lease_table::lease_name_problem;
use crate::command::{AlarmAction, Command, Keep, PutRequest, RangeRequest, TxnOp, TxnRequest};
use crate::error::KvError;
use crate::limits::Limits;
use crate::types::KeyRange;
use std::collections::BTreeSet;

/// The longest lease TTL, in seconds: etcd's `MaxLeaseTTL`.
pub const MAX_LEASE_TTL_SECS: i64 = 9_000_000_000;

/// Checks a command against the limits (sizes, Txn shape, TTL sign, lease name) before it is
/// proposed. Semantic checks that depend on the state (unknown lease, name taken) happen
/// when it is applied.
pub fn validate_command(command: &Command, limits: &Limits) -> Result<(), KvError> {
    match command {
        Command::Put(put) => check_put(put, limits),
        Command::PutKeeping(put, keep) => check_put_keeping(put, *keep, limits),
        Command::DeleteRange(delete) => check_range(&delete.range, limits),
        Command::Txn(txn) => check_txn(txn, limits),
        Command::LeaseGrant { id, name, ttl } => {
            if *ttl <= 0 {
                return Err(KvError::InvalidTtl(*ttl));
            }
            if *ttl > MAX_LEASE_TTL_SECS {
                return Err(KvError::LeaseTtlTooLarge);
            }
            if *id < 0 {
                return Err(KvError::InvalidLeaseId(*id));
            }
            match name.as_deref().and_then(|n| lease_name_problem(n, limits.max_lease_name_bytes)) {
                Some(problem) => Err(KvError::InvalidLeaseName(problem)),
                None => Ok(()),
            }
        }
        Command::LeaseRevoke { .. } | Command::LeaseExpire { .. } | Command::Barrier { .. } => Ok(()),
        // Checked against the history when applied (future and compacted revisions); only a
        // revision that can never be valid is refused here.
        Command::Compact { revision } if *revision < 1 => {
            Err(KvError::Compacted { requested: *revision, compacted: 1 })
        }
        Command::Compact { .. } => Ok(()),
        Command::Alarm { action: AlarmAction::Raise, kind: None, .. } => Err(KvError::AlarmTypeMissing),
        Command::Alarm { .. } => Ok(()),
        Command::ChangeMembers(change) => crate::membership::validate_change(change),
        // etcd checks auth changes against the auth store when it applies them; so does the
        // state machine, with the same errors.
        Command::Auth(_) => Ok(()),
        Command::Authorized(authorized) => match *authorized.command {
            // What a user's request proposes. Membership changes and alarms have rules of
            // their own in the log that look at the bare command, and the master's own
            // commands are never a user's: none of them may come wrapped.
            Command::Put(_)
            | Command::PutKeeping(..)
            | Command::DeleteRange(_)
            | Command::Txn(_)
            | Command::LeaseGrant { .. }
            | Command::LeaseRevoke { .. }
            | Command::Compact { .. }
            | Command::Auth(_) => validate_command(&authorized.command, limits),
            _ => Err(KvError::ReservedCommand("this command on behalf of a user".into())),
        },
    }
}

/// Checks a read request: key present and within limits, range end not before the key.
pub fn validate_range(request: &RangeRequest, limits: &Limits) -> Result<(), KvError> {
    check_range(&request.range, limits)
}

fn check_key(key: &[u8], limits: &Limits) -> Result<(), KvError> {
    if key.is_empty() {
        return Err(KvError::EmptyKey);
    }
    if key.len() > limits.max_key_bytes {
        return Err(KvError::KeyTooLarge { len: key.len(), max: limits.max_key_bytes });
    }
    Ok(())
}

fn check_value(value: &[u8], limits: &Limits) -> Result<(), KvError> {
    if value.len() > limits.max_value_bytes {
        return Err(KvError::ValueTooLarge { len: value.len(), max: limits.max_value_bytes });
    }
    Ok(())
}

fn check_put(put: &PutRequest, limits: &Limits) -> Result<(), KvError> {
    check_key(&put.key, limits)?;
    check_value(&put.value, limits)
}

/// etcd's rules for `ignore_value` / `ignore_lease`: the ignored field must be left empty.
fn check_put_keeping(put: &PutRequest, keep: Keep, limits: &Limits) -> Result<(), KvError> {
    check_put(put, limits)?;
    if keep.value && !put.value.is_empty() {
        return Err(KvError::ValueProvided);
    }
    if keep.lease && put.lease != crate::types::NO_LEASE {
        return Err(KvError::LeaseProvided);
    }
    Ok(())
}

fn check_range(range: &KeyRange, limits: &Limits) -> Result<(), KvError> {
    check_key(&range.key, limits)?;
    // The end is a key too and travels in the same request: same size limit.
    if range.range_end.len() > limits.max_key_bytes {
        return Err(KvError::KeyTooLarge { len: range.range_end.len(), max: limits.max_key_bytes });
    }
    // Same rule as the state machine's: `[0]` means "to the end", and a key of `[0]` means
    // "from the start", below which no non-empty end can lie.
    let end = range.range_end.as_slice();
    if !end.is_empty() && end != [0] && range.key.as_slice() != [0] && end < range.key.as_slice() {
        return Err(super::keyspace::invalid_range(range));
    }
    Ok(())
}

fn check_txn(txn: &TxnRequest, limits: &Limits) -> Result<(), KvError> {
    // etcd bounds the compares as well as each branch.
    let count = txn.compare.len().max(txn.success.len()).max(txn.failure.len());
    if count > limits.max_txn_ops {
        return Err(KvError::TooManyTxnOps { count, max: limits.max_txn_ops });
    }
    for compare in &txn.compare {
        check_range(&compare.range, limits)?;
        if let crate::command::CompareTarget::Value(value) = &compare.target {
            check_value(value, limits)?;
        }
    }
    for branch in [&txn.success, &txn.failure] {
        for op in branch {
            match op {
                TxnOp::Range(read) | TxnOp::RangeAt(read, _) => check_range(&read.range, limits)?,
                TxnOp::Put(put) => check_put(put, limits)?,
                TxnOp::PutKeeping(put, keep) => check_put_keeping(put, *keep, limits)?,
                TxnOp::DeleteRange(delete) => check_range(&delete.range, limits)?,
                TxnOp::Txn(inner) => check_txn(inner, limits)?,
            }
        }
        writes_of(branch)?;
    }
    Ok(())
}

/// The keys a branch may put and the ranges it may delete, nested transactions included
/// (both of their branches, as either may run), refusing etcd's conflicts:
/// a key put twice, or put and deleted, on one branch.
fn writes_of(branch: &[TxnOp]) -> Result<(BTreeSet<&[u8]>, Vec<&KeyRange>), KvError> {
    let mut puts: BTreeSet<&[u8]> = BTreeSet::new();
    let mut deletes: Vec<&KeyRange> = Vec::new();
    let mut nested: Vec<(BTreeSet<&[u8]>, Vec<&KeyRange>)> = Vec::new();
    for op in branch {
        match op {
            TxnOp::Put(put) | TxnOp::PutKeeping(put, _) => {
                if !puts.insert(&put.key) {
                    return Err(KvError::DuplicateKeyInTxn);
                }
            }
            TxnOp::DeleteRange(delete) => deletes.push(&delete.range),
            TxnOp::Txn(inner) => {
                // Either branch of the nested transaction may run with this one's writes.
                let (mut a, mut da) = writes_of(&inner.success)?;
                let (b, db) = writes_of(&inner.failure)?;
                a.extend(b);
                da.extend(db);
                nested.push((a, da));
            }
            TxnOp::Range(_) | TxnOp::RangeAt(..) => {}
        }
    }
    for (inner_puts, inner_deletes) in nested {
        if inner_puts.iter().any(|k| puts.contains(k) || deletes.iter().any(|d| d.contains(k))) {
            return Err(KvError::DuplicateKeyInTxn);
        }
        if inner_deletes.iter().any(|d| puts.iter().any(|k| d.contains(k))) {
            return Err(KvError::DuplicateKeyInTxn);
        }
        puts.extend(inner_puts);
        deletes.extend(inner_deletes);
    }
    if deletes.iter().any(|d| puts.iter().any(|k| d.contains(k))) {
        return Err(KvError::DuplicateKeyInTxn);
    }
    Ok((puts, deletes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Compare, CompareResult, CompareTarget, DeleteRangeRequest};

    fn limits() -> Limits {
        Limits {
            max_key_bytes: 8,
            max_value_bytes: 16,
            max_txn_ops: 3,
            max_lease_name_bytes: 4,
            quota_bytes: 0,
            max_leases: 10,
            max_response_bytes: Limits::DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    fn put(key: &str, value: &str) -> PutRequest {
        PutRequest { key: key.into(), value: value.into(), lease: 0, prev_kv: false }
    }

    fn del(range: KeyRange) -> TxnOp {
        TxnOp::DeleteRange(DeleteRangeRequest { range, prev_kv: false })
    }

    fn txn(success: Vec<TxnOp>) -> Command {
        Command::Txn(TxnRequest { compare: Vec::new(), success, failure: Vec::new() })
    }

    fn err(command: Command) -> (KvError, String) {
        let e = validate_command(&command, &limits()).unwrap_err();
        let message = e.to_string();
        (e, message)
    }

    #[test]
    fn good_commands_pass() {
        let l = limits();
        assert_eq!(validate_command(&Command::Put(put("k", "v")), &l), Ok(()));
        assert_eq!(validate_command(&Command::Barrier { tenure: (1, 1) }, &l), Ok(()));
        assert_eq!(validate_command(&Command::LeaseGrant { id: 0, name: Some("abcd".into()), ttl: 1 }, &l), Ok(()));
        let deletes_overlap =
            txn(vec![del(KeyRange::prefix("a")), del(KeyRange::single("ab")), TxnOp::Put(put("b", ""))]);
        assert_eq!(validate_command(&deletes_overlap, &l), Ok(()));
        for range in [KeyRange::between(vec![0], vec![0]), KeyRange::between("b", "b"), KeyRange::between("b", vec![0])]
        {
            assert_eq!(validate_range(&RangeRequest { range, ..Default::default() }, &l), Ok(()));
        }
    }

    #[test]
    fn key_and_value_sizes() {
        let (e, m) = err(Command::Put(put("", "v")));
        assert_eq!((e, m.as_str()), (KvError::EmptyKey, "etcdserver: key is not provided"));
        let (e, m) = err(Command::Put(put("123456789", "v")));
        assert_eq!(e, KvError::KeyTooLarge { len: 9, max: 8 });
        assert_eq!(m, "etcdserver: request is too large: key is 9 bytes, at most 8 are allowed");
        let (e, m) = err(Command::Put(put("k", &"v".repeat(17))));
        assert_eq!(e, KvError::ValueTooLarge { len: 17, max: 16 });
        assert_eq!(m, "etcdserver: request is too large: value is 17 bytes, at most 16 are allowed");
        let (e, _) = err(Command::DeleteRange(DeleteRangeRequest {
            range: KeyRange::between("a", "123456789"),
            prev_kv: false,
        }));
        assert_eq!(e, KvError::KeyTooLarge { len: 9, max: 8 });
    }

    #[test]
    fn inverted_ranges() {
        let (e, m) =
            err(Command::DeleteRange(DeleteRangeRequest { range: KeyRange::between("b", "a"), prev_kv: false }));
        assert_eq!(e, KvError::InvalidRange { key: "b".into(), end: "a".into() });
        assert_eq!(m, "etcdserver: range end \"a\" is before the key \"b\"");
        let read = RangeRequest { range: KeyRange::between("b", "a"), ..Default::default() };
        assert!(matches!(validate_range(&read, &limits()), Err(KvError::InvalidRange { .. })));
        let empty = RangeRequest { range: KeyRange::prefix(""), ..Default::default() };
        assert_eq!(validate_range(&empty, &limits()), Err(KvError::EmptyKey));
    }

    #[test]
    fn txn_shape() {
        let (e, m) = err(txn(vec![TxnOp::Put(put("a", "")); 4]));
        assert_eq!(e, KvError::TooManyTxnOps { count: 4, max: 3 });
        assert_eq!(m, "etcdserver: too many operations in txn request (4, at most 3 are allowed)");
        let compare =
            Compare { range: KeyRange::single("a"), target: CompareTarget::Version(0), result: CompareResult::Equal };
        let many_compares = Command::Txn(TxnRequest { compare: vec![compare; 4], ..Default::default() });
        assert_eq!(err(many_compares).0, KvError::TooManyTxnOps { count: 4, max: 3 });

        let (e, m) = err(txn(vec![TxnOp::Put(put("a", "1")), TxnOp::Put(put("a", "2"))]));
        assert_eq!((e, m.as_str()), (KvError::DuplicateKeyInTxn, "etcdserver: duplicate key given in txn request"));
        assert_eq!(
            err(txn(vec![TxnOp::Put(put("ab", "1")), del(KeyRange::prefix("a"))])).0,
            KvError::DuplicateKeyInTxn
        );
        assert_eq!(err(txn(vec![del(KeyRange::single("a")), TxnOp::Put(put("a", "1"))])).0, KvError::DuplicateKeyInTxn);
        // The same key in the two branches is fine: only one runs.
        let both = Command::Txn(TxnRequest {
            compare: Vec::new(),
            success: vec![TxnOp::Put(put("a", "1"))],
            failure: vec![TxnOp::Put(put("a", "2")), del(KeyRange::single("b"))],
        });
        assert_eq!(validate_command(&both, &limits()), Ok(()));

        let bad_compare =
            Compare { range: KeyRange::single(""), target: CompareTarget::Version(0), result: CompareResult::Equal };
        let c = Command::Txn(TxnRequest { compare: vec![bad_compare], ..Default::default() });
        assert_eq!(err(c).0, KvError::EmptyKey);
        let big = Compare {
            range: KeyRange::single("a"),
            target: CompareTarget::Value(vec![1; 17]),
            result: CompareResult::Equal,
        };
        let c = Command::Txn(TxnRequest { compare: vec![big], ..Default::default() });
        assert_eq!(err(c).0, KvError::ValueTooLarge { len: 17, max: 16 });
        let bad_read = TxnOp::Range(RangeRequest { range: KeyRange::between("z", "a"), ..Default::default() });
        let c = Command::Txn(TxnRequest { failure: vec![bad_read], ..Default::default() });
        assert!(matches!(err(c).0, KvError::InvalidRange { .. }));
        assert_eq!(err(txn(vec![TxnOp::Put(put("", "1"))])).0, KvError::EmptyKey);
    }

    #[test]
    fn a_users_command_is_validated_as_itself_and_only_a_users_kind_may_be_wrapped() {
        let wrapped = |command: Command| {
            Command::Authorized(crate::command::Authorized {
                user: "u".into(),
                auth_revision: 1,
                command: Box::new(command),
            })
        };
        assert_eq!(validate_command(&wrapped(Command::Put(put("k", "v"))), &limits()), Ok(()));
        let (e, _) = err(wrapped(Command::Put(put("", "v"))));
        assert_eq!(e, KvError::EmptyKey);
        let (e, _) = err(wrapped(Command::Barrier { tenure: Default::default() }));
        assert!(matches!(e, KvError::ReservedCommand(_)));
        let (e, _) = err(wrapped(wrapped(Command::Put(put("k", "v")))));
        assert!(matches!(e, KvError::ReservedCommand(_)));
    }

    #[test]
    fn lease_grants() {
        let (e, _) = err(Command::LeaseGrant { id: 0, name: None, ttl: MAX_LEASE_TTL_SECS + 1 });
        assert_eq!(e, KvError::LeaseTtlTooLarge);
        let (e, m) = err(Command::LeaseGrant { id: 0, name: None, ttl: 0 });
        assert_eq!((e, m.as_str()), (KvError::InvalidTtl(0), "etcdserver: lease TTL must be positive, got 0"));
        let (e, m) = err(Command::LeaseGrant { id: -1, name: None, ttl: 5 });
        assert_eq!((e, m.as_str()), (KvError::InvalidLeaseId(-1), "etcdserver: lease id must be positive, got -1"));
        let (e, m) = err(Command::LeaseGrant { id: 0, name: Some(String::new()), ttl: 5 });
        assert_eq!(e, KvError::InvalidLeaseName("name is empty".into()));
        assert_eq!(m, "etcdserver: invalid lease name: name is empty");
        let (e, m) = err(Command::LeaseGrant { id: 0, name: Some("abcde".into()), ttl: 5 });
        assert_eq!(m, "etcdserver: invalid lease name: name is 5 bytes, at most 4 are allowed");
        assert!(matches!(e, KvError::InvalidLeaseName(_)));
    }
}
