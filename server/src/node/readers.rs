//! The reader pool: the threads that answer reads, so that the node loop only decides when
//! a read may be served (its mastership or read lease, the applied point, the revision
//! asked for) and never reads the key space itself. etcd does the same with read
//! transactions beside its apply loop: a Range of a million keys costs its reader, not the
//! replication, the renewals or any other request of the node.
//!
//! A bounded queue feeds `[reads] reader_threads` threads; a read of a single key is
//! answered on the loop itself (one lookup, bounded by the value limit). A read that finds the queue full
//! is refused at once with etcd's "too many requests", as a client request that finds the
//! node loop's queue full is.

use super::*;
use leasekv_kvstore::log::ReadJob;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Mutex;

/// Reads waiting for a reader, per reader thread.
const QUEUED_PER_THREAD: usize = 256;

/// Who waits for a read's answer.
pub(super) enum ReadAsker {
    /// A master request (a linearizable read here, or one a follower forwarded).
    Master(Asker<Reply>),
    /// A serializable read from this node's own client port.
    Local(oneshot::Sender<Result<(RangeResponse, Revision), RequestError>>),
}

struct ReadTask {
    job: ReadJob,
    asker: ReadAsker,
    queued: Instant,
}

/// A read that waited longer than this for a reader is logged (every reader was busy).
const SLOW_QUEUE: Duration = Duration::from_secs(1);

/// The reader threads and their queue.
pub(super) struct ReaderPool {
    queue: SyncSender<ReadTask>,
    peers: PeerNetwork,
}

impl ReaderPool {
    /// Starts `threads` reader threads (at least one) answering through `peers` what
    /// followers forwarded.
    pub(super) fn start(threads: usize, peers: PeerNetwork) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let (queue, incoming) = sync_channel::<ReadTask>(threads * QUEUED_PER_THREAD);
        let incoming = Arc::new(Mutex::new(incoming));
        for n in 0..threads {
            let (incoming, peers) = (Arc::clone(&incoming), peers.clone());
            std::thread::Builder::new()
                .name(format!("kvserver-reader-{n}"))
                .spawn(move || serve_reads(&incoming, &peers))?;
        }
        Ok(ReaderPool { queue, peers })
    }

    /// Hands `job` to a reader; refused at once when every reader is busy and the queue is
    /// full. A job already answered (a read of one key, `ReadJob::is_cheap`) is answered
    /// here, on the caller's thread (the node loop): the two thread hand-overs of the pool
    /// halved the throughput of small reads (`benches/cluster.rs`: 25,700 linearizable
    /// gets/s at 64 clients, against about 35,000 answered here).
    pub(super) fn submit(&self, job: ReadJob, asker: ReadAsker) {
        if job.is_cheap() {
            return answer(&self.peers, asker, job.run());
        }
        match self.queue.try_send(ReadTask { job, asker, queued: Instant::now() }) {
            Ok(()) => crate::metrics::metrics().read_queued(),
            Err(TrySendError::Full(task)) => {
                crate::metrics::metrics().read_refused();
                let pending = QUEUED_PER_THREAD;
                answer(&self.peers, task.asker, Err(RequestError::Busy { pending }));
            }
            Err(TrySendError::Disconnected(task)) => answer(&self.peers, task.asker, Err(RequestError::ShuttingDown)),
        }
    }
}

/// One reader thread: takes reads until the pool is dropped (the node loop ended).
fn serve_reads(incoming: &Mutex<Receiver<ReadTask>>, peers: &PeerNetwork) {
    // A storm of large reads keeps every reader busy; at the loops' priority they shared the
    // CPUs evenly with the election's and the peer runtime's threads, and on a two-core host
    // a master lost its lease to a storm (chaos `read-storm`).
    crate::blocking::lower_own_priority();
    loop {
        let task = {
            let incoming = incoming.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            incoming.recv()
        };
        let Ok(task) = task else { return };
        let started = Instant::now();
        let waited = started - task.queued;
        if waited >= SLOW_QUEUE {
            tracing::warn!(
                waited_ms = waited.as_secs_f64() * 1e3,
                "a read waited long for a reader thread (all were busy)"
            );
        }
        let result = task.job.run();
        crate::metrics::metrics().read_served(started.elapsed());
        answer(peers, task.asker, result);
    }
}

fn answer(peers: &PeerNetwork, asker: ReadAsker, result: Result<(RangeResponse, Revision), RequestError>) {
    let as_master = |result: Result<(RangeResponse, Revision), RequestError>| {
        result.map(|(response, revision)| MasterAnswer::Read(response, revision))
    };
    match asker {
        ReadAsker::Master(Asker::Local(reply)) => drop(reply.send(as_master(result))),
        ReadAsker::Master(Asker::Remote(node, id)) => {
            let result = as_master(result).map_err(|error| for_link(peers, node, error));
            peers.send(node, &Wire::Answer(id, result));
        }
        ReadAsker::Local(reply) => drop(reply.send(result)),
    }
}

/// `error` as the link to `node` can carry it: a refusal its version does not know goes as
/// a peer protocol error with the same text (`crate::peer::version`, version 5).
fn for_link(peers: &PeerNetwork, node: NodeId, error: RequestError) -> RequestError {
    let knows = |feature: Feature| peers.versions().of(node).is_some_and(|version| feature.in_version(version));
    match error {
        RequestError::Invalid(refusal @ KvError::ResponseTooLarge { .. }) if !knows(Feature::ResponseTooLarge) => {
            RequestError::PeerProtocol(refusal.to_string())
        }
        other => other,
    }
}
