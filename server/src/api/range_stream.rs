//! etcd 3.7's `KV.RangeStream`: a Range answered in chunks, all at the revision of the
//! first one, so that a client lists a large key space without the whole answer in one
//! message (Kubernetes 1.37's streaming list, KEP-5966).
//!
//! As etcd's `rangeStream` (server/etcdserver/v3_server.go):
//! - sorted requests other than by key ascending, and the revision filters, are refused
//!   with `Unimplemented` (the merge of chunks in key order could not give their order);
//! - `count_only` is one chunk;
//! - the first chunk is 10 keys; after each, the count doubles while a chunk's encoded size
//!   is under half of `[limits] max_request_bytes` and halves while it is over twice it (at
//!   least 1 key; never past the request's own `limit`);
//! - the first chunk is read as asked (linearizable or serializable), and its store revision
//!   becomes the header's and, when no revision was asked for, the revision every later
//!   chunk reads at (those are serializable reads of this node, which has applied it);
//! - only the last chunk carries the header, `more` and `count`; when `limit` cut the
//!   range short, `count` adds a count of the rest at the pinned revision, so it equals
//!   Range's; an error mid-stream (a compaction past the pinned revision) ends the stream
//!   with etcd's error and no final chunk.
//!
//! Each chunk is one read on the reader pool (`node::readers`); the stream holds at most
//! two chunks waiting for the client, so its memory is bounded by the chunk size.

use super::convert::range_out;
use super::range_shape::RangeShape;
use super::Shared;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_kvstore::log::ReadConsistency;
use leasekv_kvstore::{KeyRange, RangeRequest};
use prost::Message;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::Status;

/// The stream of chunks the service answers with.
pub type RangeStreamStream = Pin<Box<dyn Stream<Item = Result<pb::RangeStreamResponse, Status>> + Send>>;

/// The first chunk's key count (etcd's `initialStreamChunkLimit`).
const FIRST_CHUNK_KEYS: i64 = 10;
/// Chunks waiting for the client to read them.
const CHUNKS_AHEAD: usize = 2;

/// Checks what RangeStream refuses beyond Range's own checks (etcd's
/// `checkRangeStreamRequest`).
pub fn check(request: &pb::RangeRequest) -> Result<(), Status> {
    // The sort options must be valid at all first: etcd's invalid-sort-option error.
    RangeShape::of(request)?;
    let none = pb::range_request::SortOrder::None as i32;
    let ascend = pb::range_request::SortOrder::Ascend as i32;
    let by_key = pb::range_request::SortTarget::Key as i32;
    if !(request.sort_order == none || (request.sort_target == by_key && request.sort_order == ascend)) {
        return Err(Status::unimplemented("RangeStream does not support custom sort orders"));
    }
    let filters =
        [request.min_mod_revision, request.max_mod_revision, request.min_create_revision, request.max_create_revision];
    if filters.iter().any(|&f| f != 0) {
        return Err(Status::unimplemented("RangeStream does not support revision filters"));
    }
    Ok(())
}

/// etcd's `adjustChunkLimit`: doubling or halving only outside [0.5×, 2×] of the target
/// avoids thrashing.
fn next_chunk_keys(last: i64, last_bytes: usize, target_bytes: usize) -> i64 {
    let next = if last_bytes < target_bytes / 2 {
        last.saturating_mul(2)
    } else if last_bytes > target_bytes.saturating_mul(2) {
        last / 2
    } else {
        last
    };
    next.max(1)
}

/// Starts streaming `request` (checked) from `shared`'s node.
pub fn start(shared: Arc<Shared>, request: pb::RangeRequest) -> RangeStreamStream {
    let (tx, rx) = mpsc::channel(CHUNKS_AHEAD);
    tokio::spawn(async move {
        if let Err(status) = stream(&shared, request, &tx).await {
            let _ = tx.send(Err(status)).await;
        }
    });
    Box::pin(ReceiverStream::new(rx))
}

type Chunks = mpsc::Sender<Result<pb::RangeStreamResponse, Status>>;

/// Sends one chunk; false when the client went away.
async fn send(tx: &Chunks, chunk: pb::RangeResponse) -> bool {
    tx.send(Ok(pb::RangeStreamResponse { range_response: Some(chunk) })).await.is_ok()
}

async fn stream(shared: &Shared, request: pb::RangeRequest, tx: &Chunks) -> Result<(), Status> {
    let first_consistency =
        if request.serializable { ReadConsistency::Serializable } else { ReadConsistency::Linearizable };
    let read = |range: RangeRequest, revision: i64, consistency: ReadConsistency| async move {
        shared.serve(|| shared.node.read(range.clone(), revision, consistency)).await
    };
    let range_of = |key: Vec<u8>| KeyRange { key, range_end: request.range_end.clone() };
    if request.count_only {
        let range = RangeRequest { range: range_of(request.key.clone()), count_only: true, ..Default::default() };
        let (answer, revision) = read(range, request.revision, first_consistency).await?;
        send(tx, range_out(answer, shared.header(revision))).await;
        return Ok(());
    }
    let total = if request.limit > 0 { request.limit } else { i64::MAX };
    let target_bytes = shared.limits.max_request_bytes;
    let mut keys = FIRST_CHUNK_KEYS.min(total);
    let (mut from, mut revision, mut header_revision) = (request.key.clone(), request.revision, None);
    let mut sent: i64 = 0;
    loop {
        let consistency = if header_revision.is_none() { first_consistency } else { ReadConsistency::Serializable };
        let range = RangeRequest {
            range: range_of(from.clone()),
            limit: keys,
            keys_only: request.keys_only,
            count_only: false,
        };
        let (answer, at) = read(range, revision, consistency).await?;
        let header_at = *header_revision.get_or_insert(at);
        if revision <= 0 {
            revision = header_at;
        }
        sent = sent.saturating_add(answer.kvs.len() as i64);
        let next = answer.kvs.last().map(|kv| {
            let mut next = kv.key.clone();
            next.push(0);
            next
        });
        let done = !answer.more || sent >= total || next.is_none();
        let mut chunk = range_out(answer, shared.header(header_at));
        if done {
            if chunk.more {
                let rest =
                    RangeRequest { range: range_of(next.unwrap_or_default()), count_only: true, ..Default::default() };
                let (counted, _) = read(rest, revision, ReadConsistency::Serializable).await?;
                chunk.count = sent.saturating_add(counted.count);
            } else {
                chunk.count = sent;
            }
            send(tx, chunk).await;
            return Ok(());
        }
        let bytes = chunk.encoded_len();
        let only_keys = pb::RangeResponse { kvs: chunk.kvs, ..Default::default() };
        if !send(tx, only_keys).await {
            return Ok(());
        }
        keys = next_chunk_keys(keys, bytes, target_bytes).min(total - sent);
        from = next.unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_double_below_half_the_target_and_halve_above_twice_it() {
        assert_eq!(next_chunk_keys(10, 100, 1000), 20);
        assert_eq!(next_chunk_keys(10, 600, 1000), 10);
        assert_eq!(next_chunk_keys(10, 2000, 1000), 10);
        assert_eq!(next_chunk_keys(10, 2001, 1000), 5);
        assert_eq!(next_chunk_keys(1, 5000, 1000), 1, "never below one key");
    }

    #[test]
    fn custom_orders_and_filters_are_refused_as_etcd_does() {
        let plain = pb::RangeRequest { key: b"a".to_vec(), ..Default::default() };
        assert!(check(&plain).is_ok());
        let by_key = pb::RangeRequest { sort_order: 1, sort_target: 0, ..plain.clone() };
        assert!(check(&by_key).is_ok(), "ascending by key is the default order");
        let none_by_mod = pb::RangeRequest { sort_order: 0, sort_target: 3, ..plain.clone() };
        assert!(check(&none_by_mod).is_ok(), "no order: any target");
        let descending = pb::RangeRequest { sort_order: 2, ..plain.clone() };
        let refused = check(&descending).unwrap_err();
        assert_eq!(
            (refused.code(), refused.message()),
            (tonic::Code::Unimplemented, "RangeStream does not support custom sort orders")
        );
        let filtered = pb::RangeRequest { min_mod_revision: 3, ..plain.clone() };
        assert_eq!(check(&filtered).unwrap_err().message(), "RangeStream does not support revision filters");
        let invalid = pb::RangeRequest { sort_order: 9, ..plain };
        assert_eq!(check(&invalid).unwrap_err().message(), "etcdserver: invalid sort option");
    }
}
