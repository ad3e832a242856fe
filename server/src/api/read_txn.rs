//! Txns that only read (etcd's `isTxnReadonly`), answered from reads at one revision off
//! the node loop, as etcd answers them from a read transaction without going through raft.
//!
//! Through the log, such a Txn took a slot (a replication round trip and its records) and
//! ran its ranges on the node loop as it applied: a Txn reading a large prefix stalled
//! replication like any read on the loop used to. Here a linearizable read fixes the
//! revision `R` (the store revision when it was served), and every compare and range of
//! the Txn is then a read at `R`, each from a view on the master's reader threads: the
//! answer is the key space at `R` as one read, which the Txn would have seen had it been
//! applied right after `R`.
//!
//! etcd's rules are kept as the state machine applies them (`kvstore`'s `txn.rs`): every
//! check of the request before any read, the compares of a level before its branch, a
//! nested Txn's compares at the same revision, a `RangeAt` past `R` refused as a future
//! revision. A compaction past `R` between two reads (only a Range at `R` can meet it) makes
//! the whole Txn start over at a new `R`.

use super::Shared;
use leasekv_kvstore::log::{ReadConsistency, RequestError};
use leasekv_kvstore::state::validate_command;
use leasekv_kvstore::{
    Command, KeyRange, KvError, RangeRequest, RangeResponse, Revision, TxnOp, TxnOpResponse, TxnRequest, TxnResponse,
};
use std::future::Future;
use std::pin::Pin;

/// Times a Txn starts over at a new revision after a compaction passed the old one.
const ATTEMPTS: usize = 3;

/// Answers `txn`, which [`TxnRequest::reads_only`], with the revision its answer is at.
pub async fn answer(shared: &Shared, txn: &TxnRequest) -> Result<(TxnResponse, Revision), RequestError> {
    // The same checks, in the same order, as a Txn proposed to the log meets first.
    validate_command(&Command::Txn(txn.clone()), &shared.kv_limits)?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut reads = Reads { shared, at: None };
        match run(&mut reads, txn).await {
            Err(RequestError::Invalid(KvError::Compacted { requested, .. }))
                if Some(requested) == reads.at && attempt < ATTEMPTS =>
            {
                continue
            }
            Err(error) => return Err(error),
            Ok(response) => return Ok((response, reads.revision().await?)),
        }
    }
}

/// The reads of one attempt, all at one revision once the first fixed it.
struct Reads<'s> {
    shared: &'s Shared,
    at: Option<Revision>,
}

impl Reads<'_> {
    /// `request` at the Txn's revision; the first read is linearizable at the current
    /// revision and fixes it.
    async fn current(&mut self, request: RangeRequest) -> Result<RangeResponse, RequestError> {
        let (answer, revision) =
            self.shared.node.read(request, self.at.unwrap_or(0), ReadConsistency::Linearizable).await?;
        self.at.get_or_insert(revision);
        Ok(answer)
    }

    /// `request` at a revision of its own (etcd's `RangeRequest.revision` in a Txn).
    async fn at(&mut self, request: RangeRequest, revision: Revision) -> Result<RangeResponse, RequestError> {
        let current = self.revision().await?;
        if revision > current {
            return Err(KvError::FutureRevision { requested: revision, current }.into());
        }
        let (answer, _) = self.shared.node.read(request, revision, ReadConsistency::Linearizable).await?;
        Ok(answer)
    }

    /// The Txn's revision, fixed by a read of one key (answered where it is decided, with
    /// no view) when no read fixed it yet.
    async fn revision(&mut self) -> Result<Revision, RequestError> {
        if let Some(at) = self.at {
            return Ok(at);
        }
        let probe = RangeRequest { range: KeyRange::single(vec![0]), count_only: true, ..Default::default() };
        self.current(probe).await?;
        Ok(self.at.unwrap_or_default())
    }
}

/// One level of the Txn: its compares, then the branch they chose. Boxed: nested Txns
/// recurse.
fn run<'r, 's: 'r>(
    reads: &'r mut Reads<'s>,
    txn: &'r TxnRequest,
) -> Pin<Box<dyn Future<Output = Result<TxnResponse, RequestError>> + Send + 'r>> {
    Box::pin(async move {
        let mut succeeded = true;
        for compare in &txn.compare {
            // No short-circuit, as the state machine: a later compare's range is read too.
            let read = RangeRequest { range: compare.range.clone(), ..Default::default() };
            succeeded &= compare.holds_over(&reads.current(read).await?.kvs);
        }
        let branch = if succeeded { &txn.success } else { &txn.failure };
        let mut responses = Vec::with_capacity(branch.len());
        for op in branch {
            responses.push(match op {
                TxnOp::Range(request) => TxnOpResponse::Range(reads.current(request.clone()).await?),
                TxnOp::RangeAt(request, revision) => TxnOpResponse::Range(reads.at(request.clone(), *revision).await?),
                TxnOp::Txn(inner) => TxnOpResponse::Txn(run(reads, inner).await?),
                TxnOp::Put(_) | TxnOp::PutKeeping(..) | TxnOp::DeleteRange(_) => {
                    unreachable!("a Txn answered from reads only reads (TxnRequest::reads_only)")
                }
            });
        }
        Ok(TxnResponse { succeeded, responses })
    })
}
