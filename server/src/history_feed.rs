//! How watch streams follow the node's history without going through the node loop: the
//! loop publishes, after every batch it applied, the state machine's history reader and
//! the store revision; each stream waits for the next publication and reads what it owes
//! its watchers straight from the history, at its own pace.

use leasekv_kvstore::state::HistoryReader;
use leasekv_kvstore::Revision;
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
}

/// A stream's side: a cheap handle that wakes up when the node applied something.
#[derive(Debug, Clone)]
pub struct HistoryFeed {
    rx: watch::Receiver<Published>,
}

/// A publisher and the first feed, starting from `reader`.
pub(crate) fn channel(reader: HistoryReader) -> (FeedPublisher, HistoryFeed) {
    let head = reader.head();
    let (tx, rx) = watch::channel(Published { reader, head });
    (FeedPublisher { tx }, HistoryFeed { rx })
}

impl FeedPublisher {
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
