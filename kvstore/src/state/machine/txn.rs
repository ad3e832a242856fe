//! Transactions, nested ones included, with etcd's order of evaluation: every compare of
//! the whole tree is evaluated first, against the state before the transaction (so the
//! branch taken at every level is known up front, as etcd's `compareToPath` does); then
//! every operation on that path is checked; only then is anything written. Reads see the
//! writes made before them, and every write gets the transaction's one revision.

use super::super::compare;
use super::super::keyspace::Selection;
use super::StateMachine;
use crate::command::{Keep, PutRequest, RangeRequest, TxnOp, TxnOpResponse, TxnRequest, TxnResponse};
use crate::error::KvError;
use crate::types::Revision;

/// The branches a transaction takes: whether its compares held, and the same for each
/// nested transaction of the branch taken, in order.
struct Path {
    succeeded: bool,
    nested: Vec<Path>,
}

/// One operation after its checks: running it cannot fail.
enum Planned<'a> {
    Range(Selection<'a>, &'a RangeRequest),
    /// A read at a past revision, checked readable when the transaction began.
    RangeAt(&'a RangeRequest, Revision),
    Put(&'a PutRequest),
    /// A put keeping parts of the key; the key existed when the transaction began.
    PutKeeping(&'a PutRequest, Keep),
    Delete(Selection<'a>, bool),
    Txn(&'a TxnRequest),
}

impl StateMachine {
    pub(super) fn apply_txn(&mut self, txn: &TxnRequest) -> Result<TxnResponse, KvError> {
        // Every range of the whole tree, whichever branches run, so that whether a malformed
        // Txn is refused does not depend on the data.
        check_ranges(txn)?;
        let path = self.path(txn)?;
        self.check_path(txn, &path)?;
        let at = self.next_revision();
        let mut changed = false;
        let response = self.run(txn, &path, at, &mut changed);
        if changed {
            self.revision = at;
        }
        Ok(response)
    }

    /// Evaluates every compare on the way down, against the current state.
    fn path(&self, txn: &TxnRequest) -> Result<Path, KvError> {
        let mut succeeded = true;
        for c in &txn.compare {
            // No short-circuit: a later compare's malformed range must still be reported.
            succeeded &= compare::holds(&self.keys, c)?;
        }
        let branch = if succeeded { &txn.success } else { &txn.failure };
        let nested = branch
            .iter()
            .filter_map(|op| match op {
                TxnOp::Txn(inner) => Some(self.path(inner)),
                _ => None,
            })
            .collect::<Result<_, _>>()?;
        Ok(Path { succeeded, nested })
    }

    /// Checks what can only be checked against the state: the leases puts attach to, and
    /// that keys kept by `PutKeeping` exist.
    fn check_path(&self, txn: &TxnRequest, path: &Path) -> Result<(), KvError> {
        let branch = if path.succeeded { &txn.success } else { &txn.failure };
        let mut nested = path.nested.iter();
        for op in branch {
            match op {
                TxnOp::Put(put) => self.leases.can_attach(put.lease)?,
                TxnOp::PutKeeping(put, keep) => {
                    let current = self.keys.get(&put.key).ok_or(KvError::KeyNotFound)?;
                    let lease = if keep.lease { current.lease } else { put.lease };
                    self.leases.can_attach(lease)?;
                }
                TxnOp::Txn(inner) => {
                    let inner_path = nested.next().expect("path() made one path per nested txn");
                    self.check_path(inner, inner_path)?;
                }
                TxnOp::RangeAt(_, revision) if *revision > 0 => self.check_readable(*revision)?,
                TxnOp::Range(_) | TxnOp::RangeAt(..) | TxnOp::DeleteRange(_) => {}
            }
        }
        Ok(())
    }

    /// Runs the branch `path` chose, writing at revision `at`.
    fn run(&mut self, txn: &TxnRequest, path: &Path, at: Revision, changed: &mut bool) -> TxnResponse {
        let branch = if path.succeeded { &txn.success } else { &txn.failure };
        let mut nested = path.nested.iter();
        let mut responses = Vec::with_capacity(branch.len());
        for op in branch {
            // The ranges were checked by `check_ranges`.
            let Ok(planned) = plan(op) else { continue };
            responses.push(match planned {
                Planned::Range(selection, request) => TxnOpResponse::Range(self.keys.read(selection, request)),
                // Readable: checked by `check_path` (the transaction's own changes are newer
                // than the revision and are undone like any later change).
                Planned::RangeAt(request, revision) => {
                    TxnOpResponse::Range(self.rewound(request, revision).unwrap_or_default())
                }
                Planned::Put(put) => {
                    *changed = true;
                    TxnOpResponse::Put(self.put_at(put, at))
                }
                Planned::PutKeeping(put, keep) => {
                    // The key existed when the transaction began; an earlier delete in the
                    // same transaction cannot remove it (etcd refuses that combination).
                    let put = self.resolve_kept(put, keep).unwrap_or_else(|_| put.clone());
                    *changed = true;
                    TxnOpResponse::Put(self.put_at(&put, at))
                }
                Planned::Delete(selection, prev_kv) => {
                    let response = self.delete(selection, prev_kv, at);
                    *changed |= response.deleted > 0;
                    TxnOpResponse::DeleteRange(response)
                }
                Planned::Txn(inner) => {
                    let inner_path = nested.next().expect("path() made one path per nested txn");
                    TxnOpResponse::Txn(self.run(inner, inner_path, at, changed))
                }
            });
        }
        TxnResponse { succeeded: path.succeeded, responses }
    }
}

/// Checks every range in the tree: both branches at every level.
fn check_ranges(txn: &TxnRequest) -> Result<(), KvError> {
    for op in txn.success.iter().chain(&txn.failure) {
        if let Planned::Txn(inner) = plan(op)? {
            check_ranges(inner)?;
        }
    }
    Ok(())
}

/// Resolves an operation's range, the only thing about it that can be malformed by itself.
fn plan(op: &TxnOp) -> Result<Planned<'_>, KvError> {
    Ok(match op {
        TxnOp::Range(request) => Planned::Range(Selection::of(&request.range)?, request),
        TxnOp::RangeAt(request, revision) => {
            Selection::of(&request.range)?;
            Planned::RangeAt(request, *revision)
        }
        TxnOp::Put(put) => Planned::Put(put),
        TxnOp::PutKeeping(put, keep) => Planned::PutKeeping(put, *keep),
        TxnOp::DeleteRange(request) => Planned::Delete(Selection::of(&request.range)?, request.prev_kv),
        TxnOp::Txn(inner) => Planned::Txn(inner),
    })
}
