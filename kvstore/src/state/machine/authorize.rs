//! Permissions checked where a command is applied, as etcd's `authApplierV3` does: against
//! the auth store at this point of the log, so every replica decides the same, and a
//! permission revoked before a write is applied is never used by it, however long the
//! write was in flight. The serving member checks too (a fast refusal); this is the check
//! that holds.
//!
//! The rules, etcd's (`apply_auth.go`, checked against its release-3.4 to 3.6 branches):
//! - every key check (etcd's `isOpPermitted`) refuses a command whose user was
//!   authenticated before the auth store last changed, with "revision of auth store is
//!   old" (the client authenticates again and retries); then an unknown user is denied,
//!   the root role may do everything, any other user needs the range granted;
//! - Put needs WRITE on its key, and READ too with `prev_kv`; with a lease, WRITE on every
//!   key already attached to that lease (whoever attaches a key to a lease can revoke it,
//!   and revoking deletes its keys); DeleteRange needs WRITE on its range, READ too with
//!   `prev_kv`; a Txn needs READ on every compared range and every read, and the above for
//!   every write of either branch, nested ones included; LeaseRevoke needs WRITE on every
//!   key attached to the lease;
//! - auth changes and Compact need the root role (etcd's `IsAdminPermitted`, which looks at
//!   no revision; Compact since etcd 3.4.42 / 3.5.28 / 3.6.9); LeaseGrant is not checked
//!   here (the serving member asks for a user, as etcd does);
//! - the root role passes the lease-key check before any revision check (etcd 3.5+'s
//!   `checkLeasePutsKeys`; 3.4 checks the revision first).

use super::StateMachine;
use crate::auth::PermissionKind;
use crate::command::{Authorized, Command, PutRequest, TxnOp, TxnRequest};
use crate::error::KvError;
use crate::types::{KeyRange, LeaseId, NO_LEASE};

impl StateMachine {
    /// Whether `authorized.user` may apply its command now (see the module docs).
    pub(super) fn authorize(&self, authorized: &Authorized) -> Result<(), KvError> {
        if !self.auth.is_enabled() {
            return Ok(());
        }
        let may = Check { machine: self, user: &authorized.user, auth_revision: authorized.auth_revision };
        match authorized.command.unwrapped() {
            Command::Put(put) | Command::PutKeeping(put, _) => may.put(put),
            Command::DeleteRange(delete) => may.delete(&delete.range, delete.prev_kv),
            Command::Txn(txn) => may.txn(txn),
            Command::LeaseRevoke { id } => may.write_lease_keys(*id),
            Command::Auth(_) | Command::Compact { .. } => may.admin(),
            // Not checked where applied (see the module docs), or issued by the master itself.
            Command::LeaseGrant { .. }
            | Command::Alarm { .. }
            | Command::ChangeMembers(_)
            | Command::LeaseExpire { .. }
            | Command::Barrier { .. }
            | Command::Authorized(_) => Ok(()),
        }
    }
}

/// One user's permission checks against one state.
struct Check<'a> {
    machine: &'a StateMachine,
    user: &'a str,
    auth_revision: u64,
}

impl Check<'_> {
    /// etcd's `IsAdminPermitted`: the root role, whatever the revision.
    fn admin(&self) -> Result<(), KvError> {
        let auth = &self.machine.auth;
        if self.user.is_empty() {
            return Err(KvError::UserEmpty);
        }
        if auth.user(self.user).is_none() {
            return Err(KvError::UserNotFound);
        }
        if auth.is_admin(self.user) {
            Ok(())
        } else {
            Err(KvError::PermissionDenied)
        }
    }

    /// etcd's `isOpPermitted`: `kind` on `key`/`range_end`.
    fn allowed_on(&self, key: &[u8], range_end: &[u8], kind: PermissionKind) -> Result<(), KvError> {
        let auth = &self.machine.auth;
        if self.user.is_empty() {
            return Err(KvError::UserEmpty);
        }
        if self.auth_revision < auth.revision() {
            return Err(KvError::AuthOldRevision);
        }
        if auth.is_permitted(self.user, key, range_end, kind) {
            Ok(())
        } else {
            Err(KvError::PermissionDenied)
        }
    }

    fn allowed(&self, range: &KeyRange, kind: PermissionKind) -> Result<(), KvError> {
        self.allowed_on(&range.key, &range.range_end, kind)
    }

    fn put(&self, put: &PutRequest) -> Result<(), KvError> {
        let key = KeyRange::single(put.key.clone());
        self.allowed(&key, PermissionKind::Write)?;
        if put.prev_kv {
            self.allowed(&key, PermissionKind::Read)?;
        }
        self.write_lease_keys(put.lease)
    }

    fn delete(&self, range: &KeyRange, prev_kv: bool) -> Result<(), KvError> {
        if prev_kv {
            self.allowed(range, PermissionKind::Read)?;
        }
        self.allowed(range, PermissionKind::Write)
    }

    /// WRITE on every key attached to `lease` (none for no lease or an unknown one: the
    /// command then fails on the lease itself).
    fn write_lease_keys(&self, lease: LeaseId) -> Result<(), KvError> {
        if lease == NO_LEASE {
            return Ok(());
        }
        let Some(lease) = self.machine.leases.get(lease) else { return Ok(()) };
        if self.admin().is_ok() {
            return Ok(());
        }
        lease.keys.iter().try_for_each(|key| self.allowed_on(key, &[], PermissionKind::Write))
    }

    fn txn(&self, txn: &TxnRequest) -> Result<(), KvError> {
        for compare in &txn.compare {
            self.allowed(&compare.range, PermissionKind::Read)?;
        }
        for op in txn.success.iter().chain(&txn.failure) {
            match op {
                TxnOp::Range(read) | TxnOp::RangeAt(read, _) => self.allowed(&read.range, PermissionKind::Read)?,
                TxnOp::Put(put) | TxnOp::PutKeeping(put, _) => self.put(put)?,
                TxnOp::DeleteRange(delete) => self.delete(&delete.range, delete.prev_kv)?,
                TxnOp::Txn(nested) => self.txn(nested)?,
            }
        }
        Ok(())
    }
}
