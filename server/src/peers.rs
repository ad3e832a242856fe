//! Outgoing node-to-node traffic: one lazily connected gRPC channel per peer (tonic
//! reconnects by itself), messages sent concurrently and dropped on failure (both protocols
//! recover from loss), and at most one log line per peer per interval while it is down.

use crate::wire::Wire;
use async_trait::async_trait;
use leasekv_client::proto::peer::peer_client::PeerClient;
use leasekv_client::proto::peer::PeerEnvelope;
use leasekv_kvstore::log::LogMessage;
use leasekv_lease::{ElectionMessage, NodeId, Transport};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tonic::transport::{Channel, Endpoint};

/// How many messages may wait for one peer before new ones are dropped.
const QUEUE: usize = 8192;
/// How many deliveries to one peer may be in flight at once.
const IN_FLIGHT: usize = 256;
/// At most one "peer unreachable" line per peer per this interval.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// Senders to every other node.
#[derive(Clone)]
pub struct PeerNetwork {
    me: NodeId,
    queues: Arc<HashMap<NodeId, mpsc::Sender<Vec<u8>>>>,
}

impl PeerNetwork {
    /// Starts one sender task per peer.
    pub fn start(me: NodeId, peers: &[(NodeId, SocketAddr)]) -> Self {
        let mut queues = HashMap::new();
        for &(id, addr) in peers {
            if id == me {
                continue;
            }
            let (tx, rx) = mpsc::channel(QUEUE);
            let endpoint = Endpoint::from_shared(format!("http://{addr}"))
                .map(|e| e.connect_timeout(Duration::from_millis(500)).tcp_nodelay(true));
            match endpoint {
                Ok(endpoint) => {
                    let channel = endpoint.connect_lazy();
                    tokio::spawn(run_sender(me, id, addr, PeerClient::new(channel), rx));
                    queues.insert(id, tx);
                }
                Err(error) => tracing::error!(peer = %id, %addr, %error, "peer address is not usable"),
            }
        }
        PeerNetwork { me, queues: Arc::new(queues) }
    }

    /// Queues a message for `to`; drops it when the queue is full.
    pub fn send(&self, to: NodeId, wire: &Wire) {
        if to == self.me {
            return;
        }
        if let Some(queue) = self.queues.get(&to) {
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

async fn run_sender(
    me: NodeId,
    peer: NodeId,
    addr: SocketAddr,
    client: PeerClient<Channel>,
    mut queue: mpsc::Receiver<Vec<u8>>,
) {
    let limit = Arc::new(Semaphore::new(IN_FLIGHT));
    let last_logged = Arc::new(AtomicU64::new(0));
    let started = std::time::Instant::now();
    while let Some(payload) = queue.recv().await {
        let Ok(permit) = limit.clone().acquire_owned().await else { return };
        let mut client = client.clone();
        let last_logged = last_logged.clone();
        tokio::spawn(async move {
            let envelope = PeerEnvelope { from: me.0, payload };
            if let Err(status) = client.deliver(envelope).await {
                let now = started.elapsed().as_secs();
                let last = last_logged.load(Ordering::Relaxed);
                if last == 0 || now >= last + LOG_EVERY.as_secs() {
                    last_logged.store(now.max(1), Ordering::Relaxed);
                    tracing::warn!(%peer, %addr, error = %status.message(), "peer unreachable; messages to it are dropped");
                }
            }
            drop(permit);
        });
    }
}
