//! Peer messages too big for a lane, state-machine snapshots above all, moved in chunks.
//!
//! A replica that fell behind log compaction is sent the whole state machine
//! (`LogMessage::Snapshot`), possibly hundreds of MiB. On a lane stream ([`crate::peer::lanes`])
//! such a message would hold up every Accept queued behind it, need the whole thing in one
//! buffer on both sides and a per-message limit large enough to be a memory hazard on every
//! peer connection. So it never goes on a lane: the sender *parks* it and puts a small
//! [`ParkedNotice`] on the log lane instead; the receiver *pulls* it with the
//! `Peer.FetchParked` server-streaming call, [`CHUNK_BYTES`] at a time, reassembles it
//! (checking every chunk, [`Reassembly`]) and hands the result to its node loop as if it had
//! arrived on the lane.
//!
//! Why pull (a notice plus `FetchParked`) rather than a third lane that pushes chunks:
//! - the receiver decides when to start, so it can insist on one transfer per peer at a
//!   time ([`Inbox`]) and drop notices it does not need, without the sender knowing;
//! - the sender keeps only the newest parked message per peer and kind ([`Outbox`]): the
//!   replica answers a repeated `Fetch` with a fresh snapshot once the last one had time to
//!   arrive (its size at 50 MB/s), and a pushed stream would have to carry each one or cut
//!   one off midway, while a parked one is simply replaced;
//! - flow control is the HTTP/2 stream's: the sender reads the next chunk from its parked
//!   buffer only when the receiver has taken the previous one, so neither side ever holds
//!   more than the message and a chunk or two in flight;
//! - it needs no ordering with the lane: the replica is built for lost, duplicated and
//!   reordered messages (the simulator injects all three), and a transfer that fails is
//!   dropped with one log line; the replica asks again through its normal catch-up retry.
//!
//! The same path carries any other message whose encoding exceeds
//! [`crate::peer::lanes::LANE_MESSAGE_MAX`] (kind [`ParkedKind::Message`]): an `Entries` reply
//! of many large slots, a `Promise` to a candidate far behind, or the master's answer to a
//! large forwarded read. None of those has a useful bound in the replica, and without this
//! path the lower per-message limit would turn them into a stuck lane instead of a slower
//! delivery.

use crate::peer::proto as pb;
use leasekv_kvstore::log::Slot;
use leasekv_lease::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

mod payload;

/// Bytes of payload per `ParkedChunk`: large enough that per-chunk overhead is noise, small
/// enough to stay far below every gRPC message limit on the way.
pub const CHUNK_BYTES: usize = 1 << 20;

/// Largest transfer a node takes into memory: 4 GiB. The bound is against a confused or
/// hostile peer announcing (or streaming) without end; what arrives in memory is a message
/// the replica could have been sent on a lane, or a snapshot when no directory was given
/// for them (tests).
pub const MAX_TRANSFER_BYTES: u64 = 4 << 30;

/// Largest snapshot a node takes into a file: 1 TiB, far above any state a member holds
/// (its disk would fill first); the bound only keeps a peer streaming without end from
/// filling the disk.
pub const MAX_SNAPSHOT_FILE_BYTES: u64 = 1 << 40;

/// How long a parked message waits for its pull. A receiver pulls as soon as the notice
/// arrives unless it is busy with an earlier transfer from the same peer; past this the
/// message is stale anyway and its memory is better freed.
pub const PARKED_TTL: Duration = Duration::from_secs(30);

/// How long a pull waits for the answer to `FetchParked` and then for each chunk. A pull
/// that stalls longer is dropped; the replica asks again.
pub const CHUNK_TIMEOUT: Duration = Duration::from_secs(10);

/// What the receiver preallocates at most before data arrives: a notice's size is the
/// sender's word, so memory is committed as chunks come in, not on announcement.
const MAX_PREALLOCATE: usize = 64 << 20;

/// "A message is parked for you": sent on the log lane, ahead of the pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParkedNotice {
    /// Names the parked message at the sender (its `FetchParkedRequest.transfer`).
    pub transfer: u64,
    /// What it is.
    pub kind: ParkedKind,
    /// Its length in bytes.
    pub size: u64,
}

/// What a transfer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ParkedKind {
    /// A state-machine snapshot covering every slot up to `index`: the chunks carry the
    /// snapshot bytes, and `index` in every chunk.
    Snapshot {
        /// The last slot the snapshot covers.
        index: Slot,
    },
    /// Any other peer message too big for a lane: the chunks carry its encoded `Wire`
    /// bytes, and index 0.
    Message,
}

impl ParkedKind {
    /// The index every chunk of this transfer must carry.
    pub fn index(self) -> u64 {
        match self {
            ParkedKind::Snapshot { index } => index,
            ParkedKind::Message => 0,
        }
    }

    /// Whether this is a snapshot.
    pub fn is_snapshot(self) -> bool {
        matches!(self, ParkedKind::Snapshot { .. })
    }

    /// For log lines.
    pub fn name(self) -> &'static str {
        match self {
            ParkedKind::Snapshot { .. } => "snapshot",
            ParkedKind::Message => "message",
        }
    }
}

/// Why a transfer was dropped.
#[derive(Debug, Error)]
pub enum PullError {
    /// The notice announced more than [`MAX_TRANSFER_BYTES`].
    #[error("announced size {size} exceeds the transfer limit {max}")]
    TooLarge {
        /// Announced.
        size: u64,
        /// Allowed.
        max: u64,
    },
    /// A chunk of another snapshot turned up mid-stream.
    #[error("chunk for index {got} in a transfer of index {expected}")]
    IndexChanged {
        /// The transfer's index.
        expected: u64,
        /// The chunk's.
        got: u64,
    },
    /// A chunk did not start where the previous one ended (lost, repeated or reordered).
    #[error("chunk at offset {got}, expected offset {expected}")]
    OutOfOrder {
        /// Bytes received so far.
        expected: u64,
        /// The chunk's offset.
        got: u64,
    },
    /// An empty chunk that is not the last one (it would let a stream run on forever).
    #[error("empty chunk before the last one")]
    EmptyChunk,
    /// More data than announced.
    #[error("{got} bytes received, {size} announced")]
    Overrun {
        /// Announced.
        size: u64,
        /// Received, counting the offending chunk.
        got: u64,
    },
    /// The last chunk came before all the announced data.
    #[error("last chunk after {got} of {size} bytes")]
    Short {
        /// Announced.
        size: u64,
        /// Received.
        got: u64,
    },
    /// A chunk after the last one.
    #[error("chunk after the last one")]
    AfterLast,
    /// The stream ended before the last chunk.
    #[error("stream ended after {got} of {size} bytes without a last chunk")]
    Truncated {
        /// Announced.
        size: u64,
        /// Received.
        got: u64,
    },
    /// The sender no longer has it (replaced by a newer one, expired, or restarted).
    #[error("the sender no longer has it: {0}")]
    Gone(String),
    /// The call failed.
    #[error("fetch failed: {0}")]
    Rpc(String),
    /// No answer or chunk within [`CHUNK_TIMEOUT`].
    #[error("no chunk within {0:?}")]
    Stalled(Duration),
    /// The peer is not in this node's configuration.
    #[error("no connection to that peer")]
    UnknownPeer,
    /// Where it was going failed: the staged install reading it, or the engine staged for it.
    #[error("{0}")]
    Write(String),
    /// The snapshot arrived (or was arriving) whole but this node could not install it: its
    /// disk is full, its staged engine failed. Unlike a failed transfer, asking again does
    /// not help until the cause is gone, so the node withdraws from the election meanwhile.
    #[error("{0}")]
    Install(String),
}

impl From<Status> for PullError {
    fn from(status: Status) -> Self {
        match status.code() {
            tonic::Code::NotFound => PullError::Gone(status.message().to_string()),
            _ => PullError::Rpc(format!("{}: {}", status.code(), status.message())),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Sending side.

pub use payload::{Chunks, GrowingFile, GrowingWriter, Payload, SIZE_UNKNOWN};

/// A parked message.
struct Parked {
    notice: ParkedNotice,
    data: Arc<Payload>,
    /// From then on it is no longer served, and the next sweep frees it.
    expires: Instant,
}

impl Parked {
    fn live_at(&self, now: Instant) -> bool {
        now < self.expires
    }
}

/// What is parked for one peer: at most one snapshot and one other message, each replaced
/// by a newer one of its kind (a newer snapshot makes an older one useless; other big
/// messages are rare, and losing one is recovered like any lost message).
#[derive(Default)]
struct ParkedFor {
    snapshot: Option<Parked>,
    message: Option<Parked>,
}

impl ParkedFor {
    fn slot(&mut self, kind: ParkedKind) -> &mut Option<Parked> {
        match kind {
            ParkedKind::Snapshot { .. } => &mut self.snapshot,
            ParkedKind::Message => &mut self.message,
        }
    }
}

/// The sending side: messages parked for their receivers' pulls.
///
/// Time is the caller's: every parked message expires [`PARKED_TTL`] after the `now` it was
/// parked at, is never served after that, and is freed by the next [`Outbox::park`] or
/// [`Outbox::sweep`]. The node sweeps on a timer ([`crate::peer::lanes::PeerNetwork::start`]),
/// so memory is freed even when nothing else is parked.
pub struct Outbox {
    next: AtomicU64,
    parked: Mutex<HashMap<NodeId, ParkedFor>>,
}

impl Outbox {
    /// An empty outbox. Transfer ids start from the clock so that a restarted sender does
    /// not hand out the ids of notices a peer may still hold.
    pub fn new() -> Arc<Self> {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            .max(1);
        Arc::new(Outbox { next: AtomicU64::new(seed), parked: Mutex::new(HashMap::new()) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, ParkedFor>> {
        self.parked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Parks `data` for `to` at `now`, replacing what was parked of the same kind, and
    /// returns the notice to send. It expires [`PARKED_TTL`] after `now`; whatever else has
    /// expired by `now` is freed.
    pub fn park(&self, to: NodeId, kind: ParkedKind, data: Arc<Payload>, now: Instant) -> ParkedNotice {
        let notice = ParkedNotice { transfer: self.next.fetch_add(1, Ordering::Relaxed), kind, size: data.len() };
        let mut parked = self.lock();
        Self::sweep_locked(&mut parked, now);
        *parked.entry(to).or_default().slot(kind) = Some(Parked { notice, data, expires: now + PARKED_TTL });
        notice
    }

    /// Frees every parked message that has expired by `now`.
    pub fn sweep(&self, now: Instant) {
        Self::sweep_locked(&mut self.lock(), now);
    }

    fn sweep_locked(parked: &mut HashMap<NodeId, ParkedFor>, now: Instant) {
        parked.retain(|_, of_peer| {
            for slot in [&mut of_peer.snapshot, &mut of_peer.message] {
                if slot.as_ref().is_some_and(|p| !p.live_at(now)) {
                    *slot = None;
                }
            }
            of_peer.snapshot.is_some() || of_peer.message.is_some()
        });
    }

    /// The chunks of transfer `transfer` for `to` as of `now`, or `None` when nothing by
    /// that id is parked for it (superseded, expired, already served, or never).
    pub fn serve(self: &Arc<Self>, to: NodeId, transfer: u64, now: Instant) -> Option<Serving> {
        let parked = self.lock();
        let of_peer = parked.get(&to)?;
        let found = [&of_peer.snapshot, &of_peer.message]
            .into_iter()
            .flatten()
            .find(|p| p.notice.transfer == transfer && p.live_at(now))?;
        Some(Serving {
            chunks: Chunks::new(found.notice.kind.index(), found.data.clone(), CHUNK_BYTES),
            outbox: Arc::downgrade(self),
            to,
            notice: found.notice,
            sent: 0,
        })
    }

    /// Removes the message named by `notice` if it is still the one parked.
    fn remove(&self, to: NodeId, notice: ParkedNotice) {
        let mut parked = self.lock();
        if let Some(of_peer) = parked.get_mut(&to) {
            let slot = of_peer.slot(notice.kind);
            if slot.as_ref().is_some_and(|p| p.notice.transfer == notice.transfer) {
                *slot = None;
            }
            if of_peer.snapshot.is_none() && of_peer.message.is_none() {
                parked.remove(&to);
            }
        }
    }

    /// `notice` was streamed out in full. A snapshot parked for that peer meanwhile goes
    /// too: it answered a repeated `Fetch` sent while this one was on its way, and the
    /// receiver drops such notices ([`Inbox::finish`]); it asks again if it still needs one.
    fn served(&self, to: NodeId, notice: ParkedNotice) {
        if notice.kind.is_snapshot() {
            let mut parked = self.lock();
            if let Some(of_peer) = parked.get_mut(&to) {
                of_peer.snapshot = None;
            }
            drop(parked);
        }
        self.remove(to, notice);
    }

    /// Messages parked for `to` (tests).
    #[cfg(test)]
    fn parked_for(&self, to: NodeId) -> Vec<ParkedNotice> {
        let parked = self.lock();
        parked
            .get(&to)
            .map_or_else(Vec::new, |p| [&p.snapshot, &p.message].into_iter().flatten().map(|p| p.notice).collect())
    }
}

/// One transfer being streamed out: the chunks, and the bookkeeping once the last one is out.
pub struct Serving {
    chunks: Chunks,
    outbox: Weak<Outbox>,
    to: NodeId,
    notice: ParkedNotice,
    sent: u64,
}

impl Serving {
    /// The chunks as a stream: each read once the payload holds it (a snapshot still being
    /// built is sent as it grows).
    pub fn into_stream(self) -> impl tokio_stream::Stream<Item = Result<pb::ParkedChunk, Status>> + Send {
        futures_util::stream::unfold(self, |mut serving| async move {
            serving.chunks.ready().await;
            let chunk = serving.next()?;
            Some((chunk, serving))
        })
    }
}

impl Iterator for Serving {
    type Item = Result<pb::ParkedChunk, Status>;

    fn next(&mut self) -> Option<Self::Item> {
        let chunk = match self.chunks.next()? {
            Ok(chunk) => chunk,
            Err(error) => {
                tracing::warn!(peer = %self.to, kind = self.notice.kind.name(), %error, "cannot read a parked transfer");
                return Some(Err(Status::internal(format!("cannot read the parked transfer: {error}"))));
            }
        };
        self.sent += 1;
        if chunk.last {
            if let Some(outbox) = self.outbox.upgrade() {
                outbox.served(self.to, self.notice);
            }
            match self.notice.kind {
                ParkedKind::Snapshot { index } => tracing::info!(peer = %self.to, index, bytes = self.chunks.offset,
                    chunks = self.sent, "snapshot sent to peer in chunks"),
                ParkedKind::Message => tracing::debug!(peer = %self.to, bytes = self.notice.size,
                    chunks = self.sent, "large message sent to peer in chunks"),
            }
        }
        Some(Ok(chunk))
    }
}

// ---------------------------------------------------------------------------------------
// Receiving side.

/// Where a transfer is rebuilt.
enum Target {
    Memory(Vec<u8>),
    /// Handed on chunk by chunk to a reader on another thread ([`ChunkReader`]), which
    /// sees the end of its input when the last chunk is in (or the transfer fails: the
    /// sender is dropped).
    Pipe(Option<std::sync::mpsc::SyncSender<Vec<u8>>>),
}

/// The reading end of a [`Reassembly::into_pipe`]: the transfer's bytes in order, ending
/// where the transfer ends (complete or not; the reader's own checks tell which).
pub struct ChunkReader {
    chunks: std::sync::mpsc::Receiver<Vec<u8>>,
    current: Vec<u8>,
    at: usize,
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.current.len() {
            match self.chunks.recv() {
                Ok(next) => (self.current, self.at) = (next, 0),
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len() - self.at);
        buf[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Chunks a pipe holds between the transfer and its reader: the transfer waits when the
/// reader is slower, so a pipe holds at most this many chunks in memory.
const PIPE_CHUNKS: usize = 8;

/// Rebuilds one message from its chunks, refusing anything but the announced message
/// delivered in order: every chunk has the notice's index, starts where the previous one
/// ended, adds data (only the last may be empty) and stays within the announced size; the
/// last chunk completes it exactly.
pub struct Reassembly {
    notice: ParkedNotice,
    target: Target,
    received: u64,
    complete: bool,
}

/// A message rebuilt from its chunks.
#[derive(Debug, PartialEq, Eq)]
pub enum Assembled {
    /// In memory.
    Memory(Vec<u8>),
    /// Handed to a pipe's reader, whole.
    Piped,
}

impl Reassembly {
    /// Starts on the message `notice` announces, in memory; refuses one above
    /// [`MAX_TRANSFER_BYTES`].
    pub fn new(notice: ParkedNotice) -> Result<Self, PullError> {
        if notice.size > MAX_TRANSFER_BYTES {
            return Err(PullError::TooLarge { size: notice.size, max: MAX_TRANSFER_BYTES });
        }
        let capacity = usize::try_from(notice.size).unwrap_or(usize::MAX).min(MAX_PREALLOCATE);
        Ok(Reassembly { notice, target: Target::Memory(Vec::with_capacity(capacity)), received: 0, complete: false })
    }

    /// Starts on the snapshot `notice` announces, handing its bytes to the returned reader
    /// as they arrive; refuses one above [`MAX_SNAPSHOT_FILE_BYTES`].
    pub fn into_pipe(notice: ParkedNotice) -> Result<(Self, ChunkReader), PullError> {
        if notice.size > MAX_SNAPSHOT_FILE_BYTES && notice.size != SIZE_UNKNOWN {
            return Err(PullError::TooLarge { size: notice.size, max: MAX_SNAPSHOT_FILE_BYTES });
        }
        let (sender, chunks) = std::sync::mpsc::sync_channel(PIPE_CHUNKS);
        let reader = ChunkReader { chunks, current: Vec::new(), at: 0 };
        Ok((Reassembly { notice, target: Target::Pipe(Some(sender)), received: 0, complete: false }, reader))
    }

    /// Adds the next chunk; `Ok(true)` once the message is complete.
    pub fn push(&mut self, chunk: pb::ParkedChunk) -> Result<bool, PullError> {
        if self.complete {
            return Err(PullError::AfterLast);
        }
        let expected = self.notice.kind.index();
        if chunk.index != expected {
            return Err(PullError::IndexChanged { expected, got: chunk.index });
        }
        let received = self.received;
        if chunk.offset != received {
            return Err(PullError::OutOfOrder { expected: received, got: chunk.offset });
        }
        if chunk.data.is_empty() && !chunk.last {
            return Err(PullError::EmptyChunk);
        }
        let total = received.saturating_add(chunk.data.len() as u64);
        // A snapshot sent while it is built has no size yet: it may reach the limit, and
        // its last chunk says where it ends.
        let unknown = self.notice.size == SIZE_UNKNOWN;
        let bound = if unknown { MAX_SNAPSHOT_FILE_BYTES } else { self.notice.size };
        if total > bound {
            return Err(PullError::Overrun { size: bound, got: total });
        }
        if chunk.last && !unknown && total != self.notice.size {
            return Err(PullError::Short { size: self.notice.size, got: total });
        }
        match &mut self.target {
            Target::Memory(data) => data.extend_from_slice(&chunk.data),
            Target::Pipe(sender) => {
                let Some(to) = sender.as_ref() else { return Err(PullError::AfterLast) };
                // The reader may be behind: the wait is not on an async worker's own time.
                let sent = crate::blocking::run_here(|| to.send(chunk.data));
                if sent.is_err() {
                    return Err(PullError::Write("the snapshot's reader stopped before its end".into()));
                }
                if chunk.last {
                    // The end of the reader's input.
                    *sender = None;
                }
            }
        }
        self.received = total;
        self.complete = chunk.last;
        Ok(self.complete)
    }

    /// The message, if the last chunk arrived.
    pub fn finish(mut self) -> Result<Assembled, PullError> {
        if !self.complete {
            return Err(PullError::Truncated { size: self.notice.size, got: self.received });
        }
        let target = std::mem::replace(&mut self.target, Target::Memory(Vec::new()));
        Ok(match target {
            Target::Memory(data) => Assembled::Memory(data),
            Target::Pipe(_) => Assembled::Piped,
        })
    }
}

/// A completed transfer: the message and how many chunks it took.
#[derive(Debug)]
pub struct Pulled {
    /// The reassembled message.
    pub data: Assembled,
    /// Chunks received.
    pub chunks: u64,
}

/// Reads `stream` into `reassembly` (the message its notice announces), waiting at most
/// `stall` for each chunk. Stops at the last chunk (the rest of the stream is not read).
pub async fn reassemble<S>(mut reassembly: Reassembly, mut stream: S, stall: Duration) -> Result<Pulled, PullError>
where
    S: Stream<Item = Result<pb::ParkedChunk, Status>> + Unpin,
{
    let mut chunks = 0;
    loop {
        let next = tokio::time::timeout(stall, stream.next()).await.map_err(|_| PullError::Stalled(stall))?;
        let Some(chunk) = next else { break };
        chunks += 1;
        if reassembly.push(chunk?)? {
            break;
        }
    }
    Ok(Pulled { data: reassembly.finish()?, chunks })
}

/// What one peer's pulls are doing.
#[derive(Debug, Default)]
struct Pulling {
    /// The kind being pulled now, if any.
    active: Option<ParkedKind>,
    /// The newest snapshot notice that came in meanwhile.
    waiting_snapshot: Option<ParkedNotice>,
    /// The newest other notice that came in meanwhile.
    waiting_message: Option<ParkedNotice>,
}

/// The receiving side's bookkeeping: one pull per peer at a time. Notices that arrive during
/// a pull wait (the newest of each kind); when the pull ends, a waiting message goes first,
/// and a waiting snapshot is dropped if the pull that ended delivered a snapshot.
#[derive(Debug, Default)]
pub struct Inbox {
    pulls: Mutex<HashMap<NodeId, Pulling>>,
}

impl Inbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Pulling>> {
        self.pulls.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A notice from `from`: `Some` when the caller should start pulling it now, `None` when
    /// it waits behind the pull in progress.
    pub fn offer(&self, from: NodeId, notice: ParkedNotice) -> Option<ParkedNotice> {
        let mut pulls = self.lock();
        let pulling = pulls.entry(from).or_default();
        if pulling.active.is_none() {
            pulling.active = Some(notice.kind);
            return Some(notice);
        }
        let waiting =
            if notice.kind.is_snapshot() { &mut pulling.waiting_snapshot } else { &mut pulling.waiting_message };
        if waiting.is_none_or(|w| w.transfer < notice.transfer) {
            *waiting = Some(notice);
        }
        None
    }

    /// The pull from `from` ended (`delivered`: successfully): the next notice to pull, if
    /// any (the caller goes on pulling it), otherwise the peer is idle again.
    pub fn finish(&self, from: NodeId, delivered: bool) -> Option<ParkedNotice> {
        let mut pulls = self.lock();
        let pulling = pulls.entry(from).or_default();
        if delivered && pulling.active.is_some_and(ParkedKind::is_snapshot) {
            // It answered a repeated Fetch; the replica asks again if it is still behind.
            pulling.waiting_snapshot = None;
        }
        let next = pulling.waiting_message.take().or_else(|| pulling.waiting_snapshot.take());
        pulling.active = next.map(|n| n.kind);
        next
    }

    /// Whether a snapshot is being pulled from `peer` right now.
    pub fn pulling_snapshot(&self, peer: NodeId) -> bool {
        self.lock().get(&peer).is_some_and(|p| p.active.is_some_and(ParkedKind::is_snapshot))
    }
}

#[cfg(test)]
mod tests;
