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

/// The bytes of a parked message.
#[derive(Debug)]
pub enum Payload {
    /// In memory: an encoded message, or a small snapshot.
    Memory(Vec<u8>),
    /// In a file, read a chunk at a time as the receiver pulls, while it is still being
    /// written: a snapshot of any size (built by [`crate::node`] into an unlinked file in the
    /// data directory, and shared by every peer it is parked for). Chunks go out as the
    /// bytes they cover are written, and the last is the one that reaches the end the writer
    /// reports.
    Growing(Arc<GrowingFile>),
}

/// The size a notice gives for a message whose length is not known yet (a [`Payload::Growing`]
/// snapshot): the receiver takes chunks up to its limit until one is marked last.
pub const SIZE_UNKNOWN: u64 = u64::MAX;

/// How far a [`GrowingFile`]'s writer got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    /// This many bytes are in the file, more to come.
    Written(u64),
    /// The file is complete at this length.
    Done(u64),
    /// The writer failed; the file ends nowhere.
    Failed,
}

/// The buffer of a [`GrowingWriter`].
const GROWING_BUFFER: usize = 256 << 10;

/// A file written by one thread and read at offsets by others as it grows.
#[derive(Debug)]
pub struct GrowingFile {
    file: std::fs::File,
    growth: tokio::sync::watch::Sender<Growth>,
}

impl GrowingFile {
    /// A new, unlinked file in `dir`, and the writer that grows it.
    pub fn create(dir: &std::path::Path) -> std::io::Result<(Arc<Self>, GrowingWriter)> {
        let file = tempfile::tempfile_in(dir)?;
        let growing = Arc::new(GrowingFile {
            file: file.try_clone()?,
            growth: tokio::sync::watch::Sender::new(Growth::Written(0)),
        });
        let writer = GrowingWriter {
            out: std::io::BufWriter::with_capacity(GROWING_BUFFER, file),
            growing: growing.clone(),
            total: 0,
            told: 0,
            ended: false,
        };
        Ok((growing, writer))
    }

    /// Where the writer is.
    pub fn growth(&self) -> Growth {
        *self.growth.borrow()
    }

    /// Waits until `end` bytes are written, or the file is complete or failed.
    async fn reaches(&self, end: u64) {
        let mut growth = self.growth.subscribe();
        let _ = growth.wait_for(|g| !matches!(g, Growth::Written(w) if *w < end)).await;
    }
}

/// Writes a [`GrowingFile`], telling its readers how far it got each time its buffer of
/// [`GROWING_BUFFER`] goes to the file (a reader waits for a chunk at a time, and the
/// receiver's wait for each chunk is bounded, so the first must not wait for megabytes). Dropped without [`GrowingWriter::finish`], the file is marked failed.
pub struct GrowingWriter {
    out: std::io::BufWriter<std::fs::File>,
    growing: Arc<GrowingFile>,
    total: u64,
    told: u64,
    ended: bool,
}

impl GrowingWriter {
    /// Writes out what is buffered and marks the file complete; returns its length.
    pub fn finish(mut self) -> std::io::Result<u64> {
        use std::io::Write;
        let flushed = self.out.flush();
        self.ended = true;
        match flushed {
            Ok(()) => {
                self.growing.growth.send_replace(Growth::Done(self.total));
                Ok(self.total)
            }
            Err(error) => {
                self.growing.growth.send_replace(Growth::Failed);
                Err(error)
            }
        }
    }
}

impl std::io::Write for GrowingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.total += n as u64;
        // What left the buffer is in the file for readers at offsets.
        let in_file = self.total - self.out.buffer().len() as u64;
        if in_file > self.told {
            self.told = in_file;
            self.growing.growth.send_replace(Growth::Written(in_file));
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl Drop for GrowingWriter {
    fn drop(&mut self) {
        if !self.ended {
            self.growing.growth.send_replace(Growth::Failed);
        }
    }
}

impl Payload {
    /// Length in bytes ([`SIZE_UNKNOWN`] for a file still growing).
    pub fn len(&self) -> u64 {
        match self {
            Payload::Memory(bytes) => bytes.len() as u64,
            Payload::Growing(growing) => match growing.growth() {
                Growth::Done(len) => len,
                Growth::Written(_) | Growth::Failed => SIZE_UNKNOWN,
            },
        }
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes from `offset` through `end` (exclusive; within the payload).
    fn read(&self, offset: u64, end: u64) -> std::io::Result<Vec<u8>> {
        match self {
            Payload::Memory(bytes) => {
                Ok(bytes.get(offset as usize..end as usize).map(<[u8]>::to_vec).unwrap_or_default())
            }
            Payload::Growing(growing) => read_at(&growing.file, offset, end),
        }
    }
}

/// The bytes of `file` from `offset` through `end` (exclusive).
fn read_at(file: &std::fs::File, offset: u64, end: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0; usize::try_from(end - offset).unwrap_or(0)];
    file.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

/// The chunks of one message, produced lazily (one read of [`CHUNK_BYTES`] at a time, when
/// the stream asks for the next): `offset` counts up without gaps, `index` is the same in
/// every chunk, `last` is set on the final one. An empty message is one empty last chunk.
/// A file that cannot be read ends the chunks with the error.
pub struct Chunks {
    data: Arc<Payload>,
    index: u64,
    chunk_bytes: u64,
    offset: u64,
    done: bool,
}

impl Chunks {
    /// Chunks of `data` of at most `chunk_bytes` (at least 1) each.
    pub fn new(index: u64, data: Arc<Payload>, chunk_bytes: usize) -> Self {
        Chunks { data, index, chunk_bytes: chunk_bytes.max(1) as u64, offset: 0, done: false }
    }
}

impl Chunks {
    /// Waits until the next chunk can be read: at once, unless the payload is a file still
    /// growing that does not reach the chunk's end yet.
    async fn ready(&self) {
        if let (Payload::Growing(growing), false) = (&*self.data, self.done) {
            growing.reaches(self.offset.saturating_add(self.chunk_bytes)).await;
        }
    }
}

impl Iterator for Chunks {
    type Item = std::io::Result<pb::ParkedChunk>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        // The payload's end, once known: a file still growing holds at least this chunk
        // ([`Chunks::ready`] waited for it), and the chunk is not its last.
        let known_len = match &*self.data {
            Payload::Memory(bytes) => Some(bytes.len() as u64),
            Payload::Growing(growing) => match growing.growth() {
                Growth::Done(len) => Some(len),
                Growth::Written(_) => None,
                Growth::Failed => {
                    self.done = true;
                    return Some(Err(std::io::Error::other("the snapshot's writer failed")));
                }
            },
        };
        let full = self.offset.saturating_add(self.chunk_bytes);
        let (end, last) = match known_len {
            Some(len) => (full.min(len), full >= len),
            None => (full, false),
        };
        let data = match self.data.read(self.offset, end) {
            Ok(data) => data,
            Err(error) => {
                self.done = true;
                return Some(Err(error));
            }
        };
        let chunk = pb::ParkedChunk { index: self.index, data, last, offset: self.offset };
        self.offset = end;
        self.done = last;
        Some(Ok(chunk))
    }
}

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
    /// What is being sent.
    pub fn notice(&self) -> ParkedNotice {
        self.notice
    }

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
mod tests {
    use super::*;

    fn snapshot_notice(transfer: u64, index: u64, size: usize) -> ParkedNotice {
        ParkedNotice { transfer, kind: ParkedKind::Snapshot { index }, size: size as u64 }
    }

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    fn mem(bytes: Vec<u8>) -> Arc<Payload> {
        Arc::new(Payload::Memory(bytes))
    }

    fn chunks_of(index: u64, bytes: &[u8], chunk: usize) -> Vec<pb::ParkedChunk> {
        Chunks::new(index, Arc::new(Payload::Memory(bytes.to_vec())), chunk).map(Result::unwrap).collect()
    }

    fn reassemble_all(notice: ParkedNotice, chunks: Vec<pb::ParkedChunk>) -> Result<Vec<u8>, PullError> {
        let mut reassembly = Reassembly::new(notice)?;
        for chunk in chunks {
            reassembly.push(chunk)?;
        }
        match reassembly.finish()? {
            Assembled::Memory(data) => Ok(data),
            other => panic!("reassembled in memory, not {other:?}"),
        }
    }

    #[test]
    fn chunks_cover_the_data_in_order_and_mark_the_last() {
        let bytes = data(10);
        let chunks = chunks_of(7, &bytes, 4);
        let shape: Vec<_> = chunks.iter().map(|c| (c.index, c.offset, c.data.len(), c.last)).collect();
        assert_eq!(shape, vec![(7, 0, 4, false), (7, 4, 4, false), (7, 8, 2, true)]);
        // An exact multiple ends on a full last chunk, not an empty extra one.
        let shape: Vec<_> = chunks_of(7, &data(8), 4).iter().map(|c| (c.offset, c.data.len(), c.last)).collect();
        assert_eq!(shape, vec![(0, 4, false), (4, 4, true)]);
        // An empty message is one empty last chunk.
        let shape: Vec<_> = chunks_of(7, &[], 4).iter().map(|c| (c.offset, c.data.len(), c.last)).collect();
        assert_eq!(shape, vec![(0, 0, true)]);
    }

    #[test]
    fn in_order_chunks_reassemble_to_the_message() {
        for (len, chunk) in [(0, 4), (1, 4), (4, 4), (10, 4), (3 * CHUNK_BYTES + 17, CHUNK_BYTES)] {
            let bytes = data(len);
            let got = reassemble_all(snapshot_notice(1, 9, len), chunks_of(9, &bytes, chunk)).expect("reassembles");
            assert_eq!(got, bytes, "len {len} chunk {chunk}");
        }
        let message = ParkedNotice { transfer: 2, kind: ParkedKind::Message, size: 5 };
        assert_eq!(reassemble_all(message, chunks_of(0, &data(5), 2)).expect("message reassembles"), data(5));
    }

    #[test]
    fn a_chunk_of_another_index_is_refused() {
        let bytes = data(10);
        let mut chunks = chunks_of(9, &bytes, 4);
        chunks[1].index = 10;
        let error = reassemble_all(snapshot_notice(1, 9, 10), chunks).expect_err("index changed");
        assert!(matches!(error, PullError::IndexChanged { expected: 9, got: 10 }), "{error}");
        // The notice's index counts from the first chunk on.
        let error = reassemble_all(snapshot_notice(1, 8, 10), chunks_of(9, &bytes, 4)).expect_err("wrong snapshot");
        assert!(matches!(error, PullError::IndexChanged { expected: 8, got: 9 }), "{error}");
    }

    #[test]
    fn missing_repeated_or_reordered_chunks_are_refused() {
        let bytes = data(12);
        let notice = snapshot_notice(1, 3, 12);
        let chunks = chunks_of(3, &bytes, 4);
        let skipped = vec![chunks[0].clone(), chunks[2].clone()];
        let error = reassemble_all(notice, skipped).expect_err("gap");
        assert!(matches!(error, PullError::OutOfOrder { expected: 4, got: 8 }), "{error}");
        let repeated = vec![chunks[0].clone(), chunks[0].clone()];
        assert!(matches!(reassemble_all(notice, repeated), Err(PullError::OutOfOrder { .. })));
        let swapped = vec![chunks[1].clone(), chunks[0].clone()];
        assert!(matches!(reassemble_all(notice, swapped), Err(PullError::OutOfOrder { expected: 0, got: 4 })));
        let mut after = chunks.clone();
        after.push(pb::ParkedChunk { index: 3, data: vec![1], last: true, offset: 12 });
        assert!(matches!(reassemble_all(notice, after), Err(PullError::AfterLast)));
    }

    #[test]
    fn sizes_other_than_announced_are_refused() {
        let bytes = data(10);
        // More than announced.
        let error = reassemble_all(snapshot_notice(1, 3, 6), chunks_of(3, &bytes, 4)).expect_err("overrun");
        assert!(matches!(error, PullError::Overrun { size: 6, got: 8 }), "{error}");
        // Last chunk too early.
        let error = reassemble_all(snapshot_notice(1, 3, 11), chunks_of(3, &bytes, 4)).expect_err("short");
        assert!(matches!(error, PullError::Short { size: 11, got: 10 }), "{error}");
        // Empty chunks that are not last would let a stream run on without end.
        let empty = pb::ParkedChunk { index: 3, data: Vec::new(), last: false, offset: 0 };
        assert!(matches!(reassemble_all(snapshot_notice(1, 3, 10), vec![empty]), Err(PullError::EmptyChunk)));
        // Announced beyond the limit: refused before anything is allocated.
        let huge = snapshot_notice(1, 3, 0);
        let huge = ParkedNotice { size: MAX_TRANSFER_BYTES + 1, ..huge };
        assert!(matches!(Reassembly::new(huge), Err(PullError::TooLarge { .. })));
    }

    #[test]
    fn a_truncated_stream_is_refused() {
        let bytes = data(10);
        let mut chunks = chunks_of(3, &bytes, 4);
        chunks.pop();
        let error = reassemble_all(snapshot_notice(1, 3, 10), chunks).expect_err("truncated");
        assert!(matches!(error, PullError::Truncated { size: 10, got: 8 }), "{error}");
        let error = reassemble_all(snapshot_notice(1, 3, 10), Vec::new()).expect_err("nothing");
        assert!(matches!(error, PullError::Truncated { size: 10, got: 0 }), "{error}");
    }

    /// A snapshot still being built goes out as it grows, whole, under a notice of unknown
    /// size; a writer that stops midway ends the stream with an error, not a short message.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_growing_snapshot_is_sent_as_it_is_written() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let bytes = data(3 * CHUNK_BYTES + 17);
        for complete in [true, false] {
            let (growing, mut writer) = GrowingFile::create(dir.path()).unwrap();
            let outbox = Outbox::new();
            let notice = outbox.park(
                NodeId(2),
                ParkedKind::Snapshot { index: 4 },
                Arc::new(Payload::Growing(growing)),
                Instant::now(),
            );
            assert_eq!(notice.size, SIZE_UNKNOWN);
            let serving = outbox.serve(NodeId(2), notice.transfer, Instant::now()).expect("parked");
            let written = bytes.clone();
            let write = std::thread::spawn(move || {
                for (i, piece) in written.chunks(CHUNK_BYTES / 3).enumerate() {
                    if !complete && i == 7 {
                        // Dropped unfinished: the file is marked failed.
                        return;
                    }
                    writer.write_all(piece).unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                writer.finish().unwrap();
            });
            let (reassembly, mut reader) = Reassembly::into_pipe(notice).unwrap();
            let read = std::thread::spawn(move || {
                let mut got = Vec::new();
                std::io::Read::read_to_end(&mut reader, &mut got).map(|_| got)
            });
            let pulled = reassemble(reassembly, Box::pin(serving.into_stream()), CHUNK_TIMEOUT).await;
            write.join().unwrap();
            let got = read.join().unwrap().unwrap();
            if complete {
                assert_eq!(pulled.expect("whole").data, Assembled::Piped);
                assert_eq!(got, bytes);
                assert!(outbox.parked_for(NodeId(2)).is_empty(), "served");
            } else {
                let error = pulled.expect_err("cut");
                assert!(got.len() < bytes.len());
                assert!(error.to_string().contains("writer failed"), "{error}");
            }
        }
    }

    #[tokio::test]
    async fn reassembling_a_stream_stops_at_errors_ends_and_stalls() {
        let bytes = data(10);
        let notice = snapshot_notice(1, 3, 10);
        let ok = chunks_of(3, &bytes, 4).into_iter().map(Ok);
        let pulled = reassemble(Reassembly::new(notice).expect("size"), tokio_stream::iter(ok), CHUNK_TIMEOUT)
            .await
            .expect("complete");
        assert_eq!((pulled.data, pulled.chunks), (Assembled::Memory(bytes.clone()), 3));

        // The stream breaks after one chunk.
        let mut broken: Vec<Result<pb::ParkedChunk, Status>> =
            chunks_of(3, &bytes, 4).into_iter().take(1).map(Ok).collect();
        broken.push(Err(Status::unavailable("connection reset")));
        let error = reassemble(Reassembly::new(notice).expect("size"), tokio_stream::iter(broken), CHUNK_TIMEOUT)
            .await
            .expect_err("broken");
        assert!(matches!(error, PullError::Rpc(ref m) if m.contains("connection reset")), "{error}");

        // The stream ends early.
        let cut = chunks_of(3, &bytes, 4).into_iter().take(2).map(Ok);
        let error = reassemble(Reassembly::new(notice).expect("size"), tokio_stream::iter(cut), CHUNK_TIMEOUT)
            .await
            .expect_err("cut");
        assert!(matches!(error, PullError::Truncated { got: 8, .. }), "{error}");

        // The stream goes quiet.
        let first = chunks_of(3, &bytes, 4).into_iter().take(1).map(Ok);
        let quiet = tokio_stream::iter(first).chain(tokio_stream::pending());
        let error = reassemble(Reassembly::new(notice).expect("size"), quiet, Duration::from_millis(20))
            .await
            .expect_err("stalled");
        assert!(matches!(error, PullError::Stalled(_)), "{error}");
    }

    /// A snapshot parked as a file is chunked from the file, and a snapshot pulled into a
    /// pipe is the same bytes; a transfer that fails ends the pipe's reader early.
    #[test]
    fn snapshots_go_from_file_to_pipe_and_a_failed_transfer_ends_the_reader_early() {
        use std::io::{Read, Write};
        let dir = tempfile::tempdir().unwrap();
        let bytes = data(3 * CHUNK_BYTES + 5);
        let (growing, mut writer) = GrowingFile::create(dir.path()).unwrap();
        writer.write_all(&bytes).unwrap();
        writer.finish().unwrap();
        let chunks: Vec<_> =
            Chunks::new(9, Arc::new(Payload::Growing(growing)), CHUNK_BYTES).map(Result::unwrap).collect();
        assert_eq!(chunks.len(), 4);
        let notice = snapshot_notice(1, 9, bytes.len());
        let (mut reassembly, mut reader) = Reassembly::into_pipe(notice).unwrap();
        let read = std::thread::spawn(move || {
            let mut got = Vec::new();
            reader.read_to_end(&mut got).map(|_| got)
        });
        for chunk in chunks.clone() {
            reassembly.push(chunk).unwrap();
        }
        assert_eq!(reassembly.finish().unwrap(), Assembled::Piped);
        assert_eq!(read.join().unwrap().unwrap(), bytes);

        // Cut short, or refused midway: the reader's input ends where the transfer did.
        let (mut cut, mut reader) = Reassembly::into_pipe(notice).unwrap();
        cut.push(chunks[0].clone()).unwrap();
        assert!(matches!(cut.finish(), Err(PullError::Truncated { .. })));
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), CHUNK_BYTES);
        let (mut refused, mut reader) = Reassembly::into_pipe(notice).unwrap();
        refused.push(chunks[0].clone()).unwrap();
        assert!(refused.push(chunks[2].clone()).is_err());
        drop(refused);
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), CHUNK_BYTES);
    }

    #[test]
    fn the_outbox_keeps_the_newest_of_each_kind_and_forgets_what_was_served() {
        let outbox = Outbox::new();
        let now = Instant::now();
        let peer = NodeId(2);
        let old = outbox.park(peer, ParkedKind::Snapshot { index: 5 }, mem(data(10)), now);
        let message = outbox.park(peer, ParkedKind::Message, mem(data(3)), now);
        let new = outbox.park(peer, ParkedKind::Snapshot { index: 7 }, mem(data(2 * CHUNK_BYTES + 1)), now);
        assert!(new.transfer > old.transfer);
        assert_eq!(outbox.parked_for(peer), vec![new, message]);
        assert!(outbox.serve(peer, old.transfer, now).is_none(), "a replaced snapshot is gone");
        assert!(outbox.serve(NodeId(3), new.transfer, now).is_none(), "parked for another peer");

        let serving = outbox.serve(peer, new.transfer, now).expect("parked");
        // A snapshot for a repeated Fetch, parked while the first one is on its way.
        let repeat = outbox.park(peer, ParkedKind::Snapshot { index: 8 }, mem(data(4)), now);
        let notice = ParkedNotice { transfer: new.transfer, kind: ParkedKind::Snapshot { index: 7 }, size: new.size };
        let chunks: Vec<_> = serving.map(|c| c.expect("chunk")).collect();
        assert_eq!(chunks.len(), 3);
        let got = reassemble_all(notice, chunks).expect("reassembles");
        assert_eq!(got, data(2 * CHUNK_BYTES + 1));
        assert_eq!(outbox.parked_for(peer), vec![message], "served, and the repeat dropped with it");
        assert!(outbox.serve(peer, repeat.transfer, now).is_none());

        let served: Vec<_> = outbox.serve(peer, message.transfer, now).expect("parked").collect();
        assert_eq!(served.len(), 1);
        assert!(outbox.parked_for(peer).is_empty());
    }

    #[test]
    fn a_parked_message_expires_on_the_callers_clock() {
        let outbox = Outbox::new();
        let parked_at = Instant::now();
        let (a, b) = (NodeId(2), NodeId(3));
        let old = outbox.park(a, ParkedKind::Message, mem(data(3)), parked_at);
        let expired = parked_at + PARKED_TTL;
        assert!(outbox.serve(a, old.transfer, expired - Duration::from_millis(1)).is_some(), "live until its TTL");
        assert!(outbox.serve(a, old.transfer, expired).is_none(), "never served once expired");
        assert_eq!(outbox.parked_for(a), vec![old], "held until a sweep or a park");

        // Parking for another peer frees it.
        let other = outbox.park(b, ParkedKind::Snapshot { index: 4 }, mem(data(5)), expired);
        assert!(outbox.parked_for(a).is_empty());
        assert_eq!(outbox.parked_for(b), vec![other]);

        // A sweep before the TTL keeps it; one after frees it.
        outbox.sweep(expired + PARKED_TTL / 2);
        assert_eq!(outbox.parked_for(b), vec![other]);
        outbox.sweep(expired + PARKED_TTL);
        assert!(outbox.parked_for(b).is_empty());
    }

    #[test]
    fn the_inbox_pulls_one_transfer_per_peer_at_a_time() {
        let inbox = Inbox::default();
        let (a, b) = (NodeId(1), NodeId(2));
        let first = snapshot_notice(10, 5, 1);
        assert_eq!(inbox.offer(a, first), Some(first));
        assert!(inbox.pulling_snapshot(a) && !inbox.pulling_snapshot(b));
        // Another peer is independent.
        let other = snapshot_notice(3, 5, 1);
        assert_eq!(inbox.offer(b, other), Some(other));
        // Behind the pull: the newest of each kind waits.
        assert_eq!(inbox.offer(a, snapshot_notice(11, 6, 1)), None);
        assert_eq!(inbox.offer(a, snapshot_notice(12, 7, 1)), None);
        let message = ParkedNotice { transfer: 13, kind: ParkedKind::Message, size: 1 };
        assert_eq!(inbox.offer(a, message), None);
        // The first pull failed: the waiting message goes next, then the waiting snapshot.
        assert_eq!(inbox.finish(a, false), Some(message));
        assert!(!inbox.pulling_snapshot(a));
        assert_eq!(inbox.finish(a, true), Some(snapshot_notice(12, 7, 1)));
        assert_eq!(inbox.finish(a, true), None);
        // A delivered snapshot drops the one waiting: it answered a repeated Fetch.
        assert_eq!(inbox.offer(a, snapshot_notice(14, 8, 1)), Some(snapshot_notice(14, 8, 1)));
        assert_eq!(inbox.offer(a, snapshot_notice(15, 9, 1)), None);
        assert_eq!(inbox.finish(a, true), None, "a delivered snapshot drops the waiting one");
        // A failed snapshot pull lets the waiting one go.
        assert_eq!(inbox.offer(a, snapshot_notice(16, 9, 1)), Some(snapshot_notice(16, 9, 1)));
        assert_eq!(inbox.offer(a, snapshot_notice(17, 10, 1)), None);
        assert_eq!(inbox.finish(a, false), Some(snapshot_notice(17, 10, 1)));
    }
}
