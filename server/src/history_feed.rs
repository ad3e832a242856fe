//! How watch streams follow the node's history without going through the node loop: the
//! loop publishes, after every batch it applied, the state machine's history reader and
//! the store revision; each stream waits for the next publication and reads what it owes
//! its watchers straight from the history, at its own pace.
//!
//! The publisher also knows whether anyone follows the feed (a watch stream, a Lock or
//! Campaign waiting for a key to go): while nobody does, the node loop may write what it
//! applied to the engine less often (`NodeLoop::flush_engine_when_due`).

use leasekv_kvstore::state::HistoryReader;
use leasekv_kvstore::Revision;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

/// What the node loop publishes: where the history is and how far it reaches.
#[derive(Debug, Clone)]
pub struct Published {
    /// The history of the node's current state machine (a new one after a snapshot is
    /// installed).
    pub reader: HistoryReader,
    /// The store revision when published.
    pub head: Revision,
}

/// The node loop's side: publishes only when something changed, so idle streams stay
/// asleep.
#[derive(Debug)]
pub(crate) struct FeedPublisher {
    tx: watch::Sender<Published>,
    followers: Arc<AtomicUsize>,
}

/// Where feeds come from: held by the node's handles, which are not followers themselves.
#[derive(Debug, Clone)]
pub(crate) struct FeedSource {
    rx: watch::Receiver<Published>,
    followers: Arc<AtomicUsize>,
}

/// A stream's side: a cheap handle that wakes up when the node applied something. Counted
/// as a follower from its creation to its drop.
#[derive(Debug)]
pub struct HistoryFeed {
    rx: watch::Receiver<Published>,
    followers: Arc<AtomicUsize>,
}

impl Clone for HistoryFeed {
    fn clone(&self) -> Self {
        self.followers.fetch_add(1, Ordering::Relaxed);
        HistoryFeed { rx: self.rx.clone(), followers: Arc::clone(&self.followers) }
    }
}

impl Drop for HistoryFeed {
    fn drop(&mut self) {
        self.followers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A publisher and the source of feeds, starting from `reader`.
pub(crate) fn channel(reader: HistoryReader) -> (FeedPublisher, FeedSource) {
    let head = reader.head();
    let (tx, rx) = watch::channel(Published { reader, head });
    let followers = Arc::new(AtomicUsize::new(0));
    (FeedPublisher { tx, followers: Arc::clone(&followers) }, FeedSource { rx, followers })
}

impl FeedSource {
    /// A new feed, counted as a follower while it lives.
    pub(crate) fn follow(&self) -> HistoryFeed {
        self.followers.fetch_add(1, Ordering::Relaxed);
        HistoryFeed { rx: self.rx.clone(), followers: Arc::clone(&self.followers) }
    }
}

impl FeedPublisher {
    /// Whether any feed is alive: someone waits for what the node applies.
    pub(crate) fn followed(&self) -> bool {
        self.followers.load(Ordering::Relaxed) > 0
    }

    /// Publishes `reader` at its current head if either moved since the last publication.
    pub(crate) fn publish(&self, reader: &HistoryReader) {
        let head = reader.head();
        self.tx.send_if_modified(|p| {
            if p.head == head && p.reader.same_as(reader) {
                return false;
            }
            *p = Published { reader: reader.clone(), head };
            true
        });
    }
}

impl HistoryFeed {
    /// The latest publication (and marks it seen).
    pub fn latest(&mut self) -> Published {
        self.rx.borrow_and_update().clone()
    }

    /// Waits for a publication newer than the last one [`Self::latest`] returned; `false`
    /// once the node loop is gone (the node is stopping).
    pub async fn changed(&mut self) -> bool {
        self.rx.changed().await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasekv_kvstore::state::StateMachine;

    #[test]
    fn a_feed_counts_as_a_follower_from_creation_to_drop() {
        let (publisher, source) = channel(StateMachine::default().history_reader());
        assert!(!publisher.followed(), "the source alone is no follower");
        let feed = source.follow();
        assert!(publisher.followed());
        let copy = feed.clone();
        drop(feed);
        assert!(publisher.followed(), "a clone still follows");
        drop(copy);
        assert!(!publisher.followed());
        let _ = source.clone();
        assert!(!publisher.followed(), "a copy of the source is no follower either");
    }
}
