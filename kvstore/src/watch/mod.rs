//! The sans-IO core of etcd's Watch: one [`WatchStream`] per client stream holds the
//! watchers opened on it, how far each has been sent, and produces the responses to send.
//! The server drives it from one tokio task per gRPC stream, the simulator from its event
//! loop; both read the history through an [`EventSource`] (a
//! [`crate::state::HistoryReader`] on the node's state machine).
//!
//! Every watcher has a `next` revision: every event below it that matches was sent, and
//! nothing at or above it was. A watcher is *synced* when `next` is above the store's
//! revision. Sending is pull-based: the stream reads the history from the smallest `next`
//! among the unsynced watchers, in batches of whole revisions, and gives each watcher the
//! events at or above its own `next`. Nothing is queued per watcher: a stream whose client
//! reads slowly just stays behind (its driver stops polling while the client's buffer is
//! full), and catches up from the history later without holding up writers or other
//! streams. A watcher that fell below the compaction point is cancelled with the
//! compaction revision, never silently skipped forward.
//!
//! etcd's guarantees follow from that: events come in revision order, each once, without
//! gaps; one revision's events are always in one response (fragmenting aside); a progress
//! notification at `R` is only sent when every watcher of the stream has been sent
//! everything up to `R`.

mod stream;

pub use stream::WatchStream;

use crate::state::{HistoryRead, HistoryReader};
use crate::types::{Event, KeyRange, Revision};
use std::sync::Arc;

/// A watcher's id on its stream (etcd's `watch_id`).
pub type WatchId = i64;

/// The id of a progress notification that answers a `WatchProgressRequest`: it speaks for
/// the whole stream, not one watcher (etcd's `-1`).
pub const STREAM_PROGRESS_ID: WatchId = -1;

/// What a client asks for when it opens a watcher (etcd's `WatchCreateRequest`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchSpec {
    /// The watched keys (etcd's key and range_end conventions).
    pub range: KeyRange,
    /// The first revision to send events from; 0 means "from the next change".
    pub start_revision: Revision,
    /// Leave out put events.
    pub no_put: bool,
    /// Leave out delete events.
    pub no_delete: bool,
    /// Send each event's previous key-value.
    pub prev_kv: bool,
    /// Send periodic progress notifications while there are no events.
    pub progress_notify: bool,
    /// Allow a response that is too large to be split into fragments.
    pub fragment: bool,
    /// The id the client wants, or 0 to let the stream choose (etcd's `AutoWatchID`).
    pub watch_id: WatchId,
}

/// One message to the client (etcd's `WatchResponse` without the header's cluster fields).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WatchResponse {
    /// The watcher it is for, or [`STREAM_PROGRESS_ID`].
    pub watch_id: WatchId,
    /// The header's revision: for events, the revision through which this watcher has
    /// now been sent everything; for a progress notification, the revision it vouches for.
    pub header_revision: Revision,
    /// The answer to a create request.
    pub created: bool,
    /// The watcher is gone (cancelled by the client, compacted, or refused).
    pub canceled: bool,
    /// Why the watcher was cancelled or refused, if not by the client.
    pub cancel_reason: String,
    /// Set when the watcher was cancelled because its next revision was compacted away:
    /// the compaction point (the oldest revision a new watch can start from).
    pub compact_revision: Revision,
    /// More fragments of this response follow.
    pub fragment: bool,
    /// The events, in revision order. Shared: every watcher of a stream that gets an event
    /// in the same shape (with or without `prev_kv`) holds the same one, so a stream with
    /// thousands of watchers on a key copies and encodes each change once, not once per
    /// watcher.
    pub events: Vec<Arc<Event>>,
}

impl WatchResponse {
    /// Whether this is a progress notification (no events, not a create or cancel).
    pub fn is_progress_notify(&self) -> bool {
        self.events.is_empty() && !self.created && !self.canceled && self.compact_revision == 0
    }
}

/// Where a stream reads the history from.
pub trait EventSource {
    /// The store revision: every change up to it can be read.
    fn head(&self) -> Revision;
    /// The compaction point (0 if never compacted).
    fn compacted(&self) -> Revision;
    /// The changes from `from` on, in whole revisions, at least `max_events` unless fewer
    /// exist (see [`HistoryReader::read`]).
    fn read(&self, from: Revision, max_events: usize) -> HistoryRead;
}

impl EventSource for HistoryReader {
    fn head(&self) -> Revision {
        HistoryReader::head(self)
    }

    fn compacted(&self) -> Revision {
        HistoryReader::compacted(self)
    }

    fn read(&self, from: Revision, max_events: usize) -> HistoryRead {
        HistoryReader::read(self, from, max_events)
    }
}

/// Limits of one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamConfig {
    /// Events read from the history per batch (whole revisions, so a batch can be
    /// larger). Bounds the memory a catching-up stream holds at once.
    pub batch_events: usize,
    /// A response with more event bytes than this is split when its watcher asked for
    /// fragments (etcd: the server's max request size, 1.5 MiB).
    pub max_response_bytes: usize,
    /// The most watchers one stream may hold (bounds its memory); more are refused.
    pub max_watchers: usize,
    /// A deliberately broken variant (simulator negative controls only).
    #[cfg(feature = "negative-controls")]
    pub breakage: WatchBreakage,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            batch_events: 1000,
            max_response_bytes: 3 * 512 * 1024,
            max_watchers: 100_000,
            #[cfg(feature = "negative-controls")]
            breakage: WatchBreakage::None,
        }
    }
}

impl StreamConfig {
    /// Whether the negative control `breakage` is on (constant `false` without the
    /// `negative-controls` feature, so the broken branches compile away).
    #[inline(always)]
    pub fn broken(&self, breakage: WatchBreakage) -> bool {
        #[cfg(feature = "negative-controls")]
        {
            self.breakage == breakage
        }
        #[cfg(not(feature = "negative-controls"))]
        {
            let _ = breakage;
            false
        }
    }
}

/// Deliberately broken variants of the watch path, each of which the simulator's watch
/// oracle must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatchBreakage {
    /// The real thing.
    #[default]
    None,
    /// A response with events of one revision is split in two, the revision across both.
    SplitRevision,
    /// A `WatchProgressRequest` is answered at once, even while a watcher is behind.
    ProgressWhileUnsynced,
    /// A watch resumed after a reconnect starts at the last revision received instead of
    /// the one after it (a duplicate).
    ResumeAtLast,
    /// When the client's buffer is full, responses that do not fit are dropped (and the
    /// watchers moved on as if they had been sent).
    DropWhenFull,
    /// `prev_kv` is the key's value after the change instead of before it.
    PrevKvFromCurrent,
}

impl WatchBreakage {
    /// Every broken variant, for the simulator's `--break` option.
    pub const ALL: [WatchBreakage; 5] = [
        WatchBreakage::SplitRevision,
        WatchBreakage::ProgressWhileUnsynced,
        WatchBreakage::ResumeAtLast,
        WatchBreakage::DropWhenFull,
        WatchBreakage::PrevKvFromCurrent,
    ];
}

impl WatchBreakage {
    /// The command-line name (`--break NAME`).
    pub fn name(self) -> &'static str {
        match self {
            WatchBreakage::None => "none",
            WatchBreakage::SplitRevision => "split-revision",
            WatchBreakage::ProgressWhileUnsynced => "progress-unsynced",
            WatchBreakage::ResumeAtLast => "resume-at-last",
            WatchBreakage::DropWhenFull => "drop-when-full",
            WatchBreakage::PrevKvFromCurrent => "prev-kv-current",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(name: &str) -> Option<Self> {
        std::iter::once(WatchBreakage::None).chain(WatchBreakage::ALL).find(|b| b.name() == name)
    }
}

/// The revision a client resumes a broken watch from after receiving everything up to
/// `last_received`: the next one (resuming at `last_received` would send its events twice,
/// etcd #15248). Used by kvcli and the simulator's clients.
pub fn resume_revision(last_received: Revision, config: &StreamConfig) -> Revision {
    if config.broken(WatchBreakage::ResumeAtLast) {
        return last_received;
    }
    last_received + 1
}
