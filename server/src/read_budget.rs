//! The read memory budget (`[reads] memory_budget_bytes`): the bytes of Range answers this
//! node holds at once, from the moment an answer reaches the client port until the client
//! has received it. A large answer lives that long: a client reading slowly holds its answer
//! (and its encoding) for as long as it reads, so without a bound a few hundred clients
//! each asking for a whole large range could run a node out of memory, however fast its
//! readers are.
//!
//! An answer that would take the total past the budget is refused at once with etcd's "too
//! many requests" (RESOURCE_EXHAUSTED), naming the budget: it is already in memory, so
//! waiting would hold it longer, and letting it go frees it. What is built before this
//! point is bounded elsewhere: the reader threads (`[reads] reader_threads`) build one
//! answer each, and no answer grows past `[limits] max_response_bytes`.
//!
//! The hold rides in the response's extensions; [`hold_until_sent`] moves it onto the
//! response body, so it is let go when the body is sent or dropped (a client gone).

use axum::body::{Body, Bytes};
use leasekv_client::EtcdError;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::Status;

/// The budget: its size and what answers hold of it now.
#[derive(Debug)]
pub struct ReadBudget {
    limit: u64,
    held: AtomicU64,
}

impl ReadBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(ReadBudget { limit, held: AtomicU64::new(0) })
    }

    /// The bytes held now.
    #[cfg(test)]
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }

    /// Takes `bytes` for an answer until the returned hold is dropped; refused with etcd's
    /// "too many requests" when the answers held already leave less room.
    pub fn take(self: &Arc<Self>, bytes: u64) -> Result<AnswerHold, Status> {
        let taken = self.held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_add(bytes).filter(|&total| total <= self.limit)
        });
        match taken {
            Ok(_) => Ok(AnswerHold { _taken: Arc::new(Taken { budget: Arc::clone(self), bytes }) }),
            Err(held) => {
                crate::metrics::metrics().reads_over_budget.inc();
                Err(EtcdError::TooManyRequests.explained(
                    "READ_BUDGET",
                    format!(
                        "this answer of {bytes} bytes does not fit the read memory budget ([reads] \
                         memory_budget_bytes = {}; answers being sent hold {held}); retry shortly, or read the \
                         range in pages (limit) or with RangeStream",
                        self.limit
                    ),
                ))
            }
        }
    }
}

/// Part of the budget, held while an answer is on its way (cloned into the response's
/// extensions, which need `Clone`; the bytes return when the last clone is dropped).
#[derive(Debug, Clone)]
pub struct AnswerHold {
    _taken: Arc<Taken>,
}

#[derive(Debug)]
struct Taken {
    budget: Arc<ReadBudget>,
    bytes: u64,
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// The bytes a Range answer holds in memory: its keys and values (what it costs is theirs;
/// the rest is a few dozen bytes a key).
pub fn answer_bytes(response: &leasekv_kvstore::RangeResponse) -> u64 {
    response.kvs.iter().map(|kv| (kv.key.len() + kv.value.len() + 48) as u64).sum()
}

/// Middleware of the client port: a response that carries an [`AnswerHold`] keeps it until
/// its body has been sent, or dropped.
pub async fn hold_until_sent(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let mut response = next.run(request).await;
    match response.extensions_mut().remove::<AnswerHold>() {
        Some(hold) => response.map(|body| Body::new(HeldBody { body, pending: Bytes::new(), _hold: hold })),
        None => response,
    }
}

/// The most of an answer handed to HTTP/2 at once. hyper asks a body for its next frame only
/// when the stream has room to send again, but takes a whole frame into its send buffer: an
/// answer encoded as one 200 MB frame would leave the body (and its hold) at once and wait
/// in that buffer for a slow client. In pieces, the hold lasts until all but the last piece
/// and the stream's window are sent.
const PIECE_BYTES: usize = 256 * 1024;

/// A response body with the budget its answer holds, handed over in pieces.
struct HeldBody {
    body: Body,
    /// What is left of the last data frame, handed over a piece at a time.
    pending: Bytes,
    _hold: AnswerHold,
}

impl http_body::Body for HeldBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.pending.is_empty() {
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => self.pending = data,
                    Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
                },
                other => return other,
            }
        }
        let piece = self.pending.len().min(PIECE_BYTES);
        let piece = self.pending.split_to(piece);
        Poll::Ready(Some(Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let inner = self.body.size_hint();
        let pending = self.pending.len() as u64;
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(pending));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(pending));
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_past_the_budget_are_refused_until_a_hold_is_let_go() {
        let budget = ReadBudget::new(100);
        let first = budget.take(60).expect("fits");
        let copy = first.clone();
        let refused = budget.take(41).expect_err("60 + 41 > 100");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert_eq!(refused.message(), "etcdserver: too many requests", "etcd's text, word for word");
        let why = leasekv_client::errors::explanation(&refused).expect("the budget named beside it");
        assert!(why.contains("memory_budget_bytes = 100"), "{why}");
        let second = budget.take(40).expect("60 + 40 fits exactly");
        drop(first);
        assert_eq!(budget.held(), 100, "a clone still holds the first answer");
        drop(copy);
        drop(second);
        assert_eq!(budget.held(), 0);
        assert!(budget.take(101).is_err(), "no answer larger than the budget, even alone");
    }
}
