//! Outgoing node-to-node traffic. Each peer gets two long-lived client streams (`Peer/Send`)
//! over one lazily connected HTTP/2 channel: one lane for the election, one for the log and
//! forwarded client requests, so a large catch-up batch never delays a lease renewal. A
//! message is one frame on an open stream: no per-message call, headers or answer, which
//! keeps a replication round trip close to the loopback's. Messages are dropped, never retried, when a peer is unreachable:
//! both protocols recover from loss, and a stale retry would only get in their way.
//! A broken stream is reopened with back-off; a peer that stays down costs at most one log
//! line per lane per interval.

use crate::wire::Wire;
use async_trait::async_trait;
use leasekv_client::proto::peer::peer_client::PeerClient;
use leasekv_client::proto::peer::PeerEnvelope;
use leasekv_kvstore::log::LogMessage;
use leasekv_lease::{ElectionMessage, NodeId, Transport};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::transport::{Channel, Endpoint};

/// How many messages may wait for one lane of one peer before new ones are dropped.
const QUEUE: usize = 8192;
/// Most messages packed into one envelope (beyond the first).
const BATCH_MESSAGES: usize = 256;
/// An envelope takes no more messages than fit in this many bytes (a single message may be
/// larger; the peer service's limit bounds that).
const BATCH_BYTES: usize = 1 << 20;
/// First wait before reopening a broken stream; doubled on every failure up to the maximum.
const MIN_BACKOFF: Duration = Duration::from_millis(20);
/// Longest wait between attempts to reach a peer that is down.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// A stream that stayed open this long was healthy: the next failure starts the back-off over.
const HEALTHY: Duration = Duration::from_secs(1);
/// At most one "peer unreachable" line per peer and lane per this interval.
const LOG_EVERY: Duration = Duration::from_secs(5);
/// How often an idle connection is probed, and how long a probe may go unanswered before
/// the connection counts as dead (a peer behind a partition sends no reset).
const KEEPALIVE: Duration = Duration::from_secs(1);

/// The two kinds of traffic, each on its own stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Lane {
    Election,
    Log,
}

impl Lane {
    fn name(self) -> &'static str {
        match self {
            Lane::Election => "election",
            Lane::Log => "log",
        }
    }
}

/// Senders to every other node.
#[derive(Clone)]
pub struct PeerNetwork {
    me: NodeId,
    queues: Arc<HashMap<(NodeId, Lane), LaneQueue>>,
}

/// Encoded messages waiting for one lane of one peer.
type LaneQueue = mpsc::Sender<Vec<u8>>;

impl PeerNetwork {
    /// Starts the sender tasks for every peer (no connection is made before the first message).
    pub fn start(me: NodeId, peers: &[(NodeId, SocketAddr)]) -> Self {
        let mut queues = HashMap::new();
        for &(id, addr) in peers {
            if id == me {
                continue;
            }
            let endpoint = Endpoint::from_shared(format!("http://{addr}")).map(|e| {
                e.connect_timeout(Duration::from_millis(500))
                    .tcp_nodelay(true)
                    .http2_keep_alive_interval(KEEPALIVE)
                    .keep_alive_timeout(KEEPALIVE)
                    .keep_alive_while_idle(true)
            });
            let channel = match endpoint {
                Ok(endpoint) => endpoint.connect_lazy(),
                Err(error) => {
                    tracing::error!(peer = %id, %addr, %error, "peer address is not usable");
                    continue;
                }
            };
            for lane in [Lane::Election, Lane::Log] {
                let (tx, rx) = mpsc::channel(QUEUE);
                let sender = LaneSender { me, peer: id, addr, lane, client: PeerClient::new(channel.clone()) };
                tokio::spawn(sender.run(rx));
                queues.insert((id, lane), tx);
            }
        }
        PeerNetwork { me, queues: Arc::new(queues) }
    }

    /// Queues a message for `to`; drops it when that peer's queue is full.
    pub fn send(&self, to: NodeId, wire: &Wire) {
        if to == self.me {
            return;
        }
        let lane = match wire {
            Wire::Election(_) => Lane::Election,
            Wire::Log(_) | Wire::Forward(..) | Wire::Answer(..) => Lane::Log,
        };
        if let Some(queue) = self.queues.get(&(to, lane)) {
            let _ = queue.try_send(wire.encode());
        }
    }

    /// Queues a log message.
    pub fn send_log(&self, to: NodeId, message: LogMessage) {
        self.send(to, &Wire::Log(message));
    }
}

#[async_trait]
impl Transport for PeerNetwork {
    async fn send(&self, to: NodeId, msg: ElectionMessage) {
        PeerNetwork::send(self, to, &Wire::Election(msg));
    }
}

/// Keeps one stream to one peer open for one lane.
struct LaneSender {
    me: NodeId,
    peer: NodeId,
    addr: SocketAddr,
    lane: Lane,
    client: PeerClient<Channel>,
}

impl LaneSender {
    async fn run(mut self, queue: mpsc::Receiver<Vec<u8>>) {
        let backlog = Arc::new(Mutex::new(Backlog { queue, carry: None }));
        let mut backoff = MIN_BACKOFF;
        let mut last_warning: Option<Instant> = None;
        loop {
            let opened = Instant::now();
            let stream = LentQueue { me: self.me, backlog: backlog.clone() };
            let error = match self.client.send(stream).await {
                // The stream ends only when the queue closes: the node is shutting down.
                Ok(_) => return,
                Err(status) => status,
            };
            if backlog.lock().unwrap_or_else(PoisonError::into_inner).queue.is_closed() {
                return;
            }
            if opened.elapsed() >= HEALTHY {
                backoff = MIN_BACKOFF;
            }
            if last_warning.is_none_or(|at| at.elapsed() >= LOG_EVERY) {
                last_warning = Some(Instant::now());
                tracing::warn!(peer = %self.peer, addr = %self.addr, lane = self.lane.name(), error = %error.message(),
                    "peer unreachable; messages to it are dropped until it is back");
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            // What queued up meanwhile is stale; the protocols resend what still matters.
            let mut backlog = backlog.lock().unwrap_or_else(PoisonError::into_inner);
            backlog.carry = None;
            while backlog.queue.try_recv().is_ok() {}
        }
    }
}

/// A lane's queue, lent to one stream at a time.
struct Backlog {
    queue: mpsc::Receiver<Vec<u8>>,
    /// A message taken off the queue that did not fit the last envelope; it opens the next.
    carry: Option<Vec<u8>>,
}

/// A lane's backlog lent to the current stream: when a stream breaks, the next one goes on
/// from the same queue.
struct LentQueue {
    me: NodeId,
    backlog: Arc<Mutex<Backlog>>,
}

impl Stream for LentQueue {
    type Item = PeerEnvelope;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<PeerEnvelope>> {
        let from = self.me.0;
        // Only one stream holds the backlog at a time, so the lock is never contended.
        let mut backlog = self.backlog.lock().unwrap_or_else(PoisonError::into_inner);
        let payload = match backlog.carry.take() {
            Some(carried) => carried,
            None => match backlog.queue.poll_recv(cx) {
                Poll::Ready(Some(payload)) => payload,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            },
        };
        // A backlog (a burst of accepts, answers to many forwarded requests) goes out as one
        // envelope: one frame and one decode instead of one each.
        let mut more = Vec::new();
        let mut bytes = payload.len();
        while more.len() < BATCH_MESSAGES {
            let Ok(next) = backlog.queue.try_recv() else { break };
            if bytes + next.len() > BATCH_BYTES {
                backlog.carry = Some(next);
                break;
            }
            bytes += next.len();
            more.push(next);
        }
        Poll::Ready(Some(PeerEnvelope { from, payload, more }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_stream::StreamExt;

    fn lent(queue: mpsc::Receiver<Vec<u8>>) -> LentQueue {
        LentQueue { me: NodeId(1), backlog: Arc::new(Mutex::new(Backlog { queue, carry: None })) }
    }

    #[tokio::test]
    async fn a_backlog_goes_out_as_one_envelope_in_order() {
        let (tx, rx) = mpsc::channel(16);
        for i in 0..3u8 {
            tx.try_send(vec![i]).expect("queued");
        }
        let mut stream = lent(rx);
        let envelope = stream.next().await.expect("an envelope");
        assert_eq!(envelope.from, 1);
        assert_eq!(envelope.payload, vec![0]);
        assert_eq!(envelope.more, vec![vec![1], vec![2]]);
        drop(tx);
        assert!(stream.next().await.is_none(), "the stream ends when the queue closes");
    }

    #[tokio::test]
    async fn a_message_that_does_not_fit_opens_the_next_envelope() {
        let (tx, rx) = mpsc::channel(16);
        tx.try_send(vec![1; 16]).expect("queued");
        tx.try_send(vec![2; BATCH_BYTES]).expect("queued");
        tx.try_send(vec![3; 16]).expect("queued");
        let mut stream = lent(rx);
        let first = stream.next().await.expect("first envelope");
        assert_eq!((first.payload.len(), first.more.len()), (16, 0));
        let second = stream.next().await.expect("second envelope");
        assert_eq!(second.payload.len(), BATCH_BYTES);
        assert!(second.more.is_empty(), "nothing joins an envelope that is already full");
        let third = stream.next().await.expect("third envelope");
        assert_eq!(third.payload, vec![3; 16]);
    }
}
