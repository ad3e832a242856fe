//! The node loop: one tokio task owns the node (`leasekv_kvstore::node::Node`: the replica
//! and the decisions around it) and feeds it peer messages, client requests, the election's
//! status and timeouts; after every batch of inputs it syncs storage if asked, sends what
//! the node produced and answers clients. What is here is I/O: channels, timers, the sync
//! thread, the blocking tasks of checkpoints and snapshots. Everything else talks to the
//! loop through a [`NodeHandle`].

use crate::fault_injection::{FaultInjection, NodeFaults};
use crate::forward::{expect_answer, ForwardId, MasterAnswer, MasterRequest, MasterResult, Reply};
use crate::history_feed::{self, FeedPublisher, HistoryFeed};
use crate::peer::lanes::PeerNetwork;
use crate::peer::parked::{GrowingFile, GrowingWriter, Payload};
use crate::peer::wire::Wire;
use leasekv_kvstore::auth::AuthStore;
use leasekv_kvstore::log::{
    LeaseStatus, LogMessage, ReadConsistency, Replica, RequestError, StorageFailure, SyncTicket,
};
use leasekv_kvstore::membership::{url_address, Membership};
use leasekv_kvstore::node::{
    Asker, Driver, ElectionGauges, ElectionView, Feature, ForwardMessage, Input, Node, TurnFacts,
};
use leasekv_kvstore::state::{KvHash, StateView};
use leasekv_kvstore::storage::{SledStorage, SledSyncHandle, StorageError};
use leasekv_kvstore::{Applied, Command, KvError, LeaseId, RangeRequest, RangeResponse, Revision};
use leasekv_lease::backend::ElectionStatus;
use leasekv_lease::backend::MonotonicClock;
use leasekv_lease::{ElectionBackend, NodeId};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

mod handle;
mod loop_io;
mod node_loop;
mod readers;
mod turns;
pub mod watchdog;

pub use handle::NodeHandle;
use loop_io::LoopIo;
pub use node_loop::{start, NodeOptions};
use readers::{ReadAsker, ReaderPool};
use turns::TurnClock;
use watchdog::LoopHealth;

/// Requests the node loop serves: what [`NodeHandle`]'s calls put on its queues. Private to
/// the node: the rest of the server asks through the handle's typed calls.
pub(super) enum Request {
    /// Something only the master can answer: served here on the master, forwarded to it
    /// from anywhere else.
    Master(MasterRequest, Reply),
    /// A serializable read of this node's state, at a past revision or (0) the current one.
    LocalRead(RangeRequest, Revision, oneshot::Sender<Result<(RangeResponse, Revision), RequestError>>),
    /// Resolve a lease name from local state.
    ResolveName(String, oneshot::Sender<Option<LeaseId>>),
    /// Local figures.
    Status(oneshot::Sender<NodeStatus>),
    /// A view of this node's applied state, read off the loop (backups, HashKV).
    View(oneshot::Sender<Result<StateView, RequestError>>),
    /// A log message from a peer.
    Log(NodeId, LogMessage),
    /// A snapshot received from peer `.0`, installed, checked and synced in a staged engine
    /// as it arrived: adopted in one step.
    StagedSnapshot(NodeId, Box<leasekv_kvstore::log::StagedSnapshot>),
    /// A snapshot from peer `.0` could not be installed, for reason `.1` (a full disk): the
    /// node withdraws from the election until an install succeeds.
    SnapshotInstallFailed(NodeId, String),
    /// A checkpoint's engine sync ran on a blocking thread, taking `.2`.
    CheckpointSynced(
        leasekv_kvstore::log::CheckpointTicket,
        Result<(), leasekv_kvstore::engine::EngineError>,
        Duration,
    ),
    /// A request a follower forwarded to this node as master.
    Forwarded(NodeId, ForwardId, MasterRequest),
    /// The master's answer to one of this node's forwards.
    Answered(NodeId, ForwardId, MasterResult),
}

/// What a node reports about itself.
#[derive(Debug, Clone)]
pub struct NodeStatus {
    /// The store revision.
    pub revision: Revision,
    /// The history's compaction point (0 if never compacted).
    pub compacted: Revision,
    /// Highest applied slot.
    pub applied: u64,
    /// Highest chosen slot.
    pub commit: u64,
    /// Whether this node is the ready master.
    pub ready_master: bool,
    /// Stored keys.
    pub keys: usize,
    /// Bytes the storage takes on disk, if known.
    pub db_size: Option<u64>,
    /// Bytes of data in use, what the space quota measures.
    pub bytes_in_use: u64,
    /// The space quota (0: none).
    pub quota_bytes: u64,
    /// The raised alarms.
    pub alarms: Vec<leasekv_kvstore::Alarm>,
    /// Snapshots sent and installed, expiry batches proposed.
    pub counts: leasekv_kvstore::log::ReplicaCounts,
    /// Requests forwarded to the master and not answered yet.
    pub forwards: usize,
    /// How linearizable reads that reached this node as follower were served (read leases).
    pub lease_reads: leasekv_kvstore::node::lease_reads::LeaseReadCounts,
    /// Whether this node holds a valid read lease now.
    pub read_lease_held: bool,
    /// Why this node does not offer itself as master, if it does not (catching up, a
    /// failed snapshot install, a mastership given up unready).
    pub withdrawal: Option<leasekv_kvstore::log::Withdrawal>,
}

impl NodeStatus {
    /// What `node` reports about itself at `now`.
    fn of(node: &Node<SledStorage, Reply>, now: leasekv_lease::Instant) -> NodeStatus {
        let replica = node.replica();
        let state = replica.state();
        NodeStatus {
            revision: state.revision(),
            compacted: state.compacted_revision(),
            applied: replica.applied_index(),
            commit: replica.commit_index(),
            ready_master: replica.is_ready_master(now),
            keys: state.key_count(),
            db_size: leasekv_kvstore::storage::Storage::size_on_disk(replica.storage()),
            bytes_in_use: state.bytes_in_use(),
            quota_bytes: replica.limits().quota_bytes,
            alarms: state.alarms().copied().collect(),
            counts: replica.counts(),
            forwards: node.forwards_pending(),
            lease_reads: node.lease_read_counts(),
            read_lease_held: replica.read_lease_until(now).is_some(),
            withdrawal: replica.withdrawal().cloned(),
        }
    }
}

/// Resolves when the node's storage failed (disk full, an I/O error), with the failure:
/// the node then serves nothing and the process should stop (see [`crate::run`]).
pub type StorageFailed = oneshot::Receiver<String>;

/// Resolves when this node applied its own removal from the cluster, with the configuration
/// epoch that removed it: the node then takes part in nothing and should stop.
pub type Removed = oneshot::Receiver<u64>;

/// Every member's peer address (`host:port` of its first peer URL), for the peer network.
pub fn peer_addresses(membership: &Membership) -> Vec<(NodeId, String)> {
    membership.members().filter_map(|m| Some((m.id, url_address(m.peer_urls.first()?)?.to_string()))).collect()
}
