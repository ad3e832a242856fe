//! A userspace TCP proxy on every peer link (this kernel has no `tc netem`): every node
//! reaches node `j`'s peer port through a listener of the harness at [`proxy_in`]`(j)`, on
//! the peer port itself, which tells the sender `i` by the connection's source address
//! ([`node_ip`]`(i)`) and connects on to node `j` from [`proxy_out`]`(i)`. The addresses say
//! which link a packet belongs to, so the nftables cuts of [`crate::net`] still apply to
//! proxied traffic.
//!
//! One address per node, the same for every sender, because a cluster keeps one peer
//! address per member: the membership its first master commits carries that master's view
//! of the addresses to every node. (An address per link, as this proxy had before, was
//! replaced there by the first master's own links, so that the other two nodes talked to
//! each other as if they were the master, and a cut master took them down with it.)
//!
//! Each direction of each link can be slowed: every chunk read is held for a delay plus a
//! random jitter (bytes of one connection stay in order, as TCP keeps them; chunks on
//! different connections, such as the election's and the log's, overtake each other), and
//! "lost" with a chance: a lost chunk waits for a retransmission time (TCP turns loss into
//! delay), and one loss in ten resets the connection instead.

use crate::net::{node_ip, proxy_in, proxy_out};
use leasekv::lease::rng::SplitMix64;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};
use tokio::time::Instant;

/// What one direction of a link does to the bytes on it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkFault {
    /// Held this long…
    pub delay: Duration,
    /// …plus up to this much more, at random.
    pub jitter: Duration,
    /// The chance that a chunk is lost (a retransmission wait, or a reset).
    pub loss: f64,
}

/// The link faults in force, by (from, to) node; absent: a clean link.
#[derive(Debug, Clone, Default)]
pub struct Links {
    faults: Arc<Mutex<HashMap<(usize, usize), LinkFault>>>,
}

impl Links {
    /// Sets the fault on the link from `from` to `to`.
    pub fn set(&self, from: usize, to: usize, fault: LinkFault) {
        self.faults.lock().unwrap_or_else(|e| e.into_inner()).insert((from, to), fault);
    }

    /// Every link clean again.
    pub fn heal(&self) {
        self.faults.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn get(&self, from: usize, to: usize) -> LinkFault {
        self.faults.lock().unwrap_or_else(|e| e.into_inner()).get(&(from, to)).copied().unwrap_or_default()
    }
}

/// Starts a listener for every node among `nodes` nodes whose peer port is `peer_port`.
pub async fn start(nodes: usize, peer_port: u16, links: Links, seed: u64) -> anyhow::Result<()> {
    for to in 0..nodes {
        let listen = SocketAddr::from((proxy_in(to), peer_port));
        let listener = TcpListener::bind(listen).await?;
        let links = links.clone();
        let mut rng = SplitMix64::new(seed ^ to as u64);
        tokio::spawn(async move {
            while let Ok((inbound, source)) = listener.accept().await {
                // Only the nodes are on the bridge besides the harness, whose own
                // addresses never connect here.
                let Some(from) = (0..nodes).find(|&i| IpAddr::V4(node_ip(i)) == source.ip()) else { continue };
                let links = links.clone();
                let seed = rng.next_u64() ^ ((from as u64) << 8);
                tokio::spawn(async move {
                    let _ = carry(inbound, from, to, peer_port, links, seed).await;
                });
            }
        });
    }
    Ok(())
}

/// One proxied connection: on to node `to`, then a pump each way.
async fn carry(
    inbound: tokio::net::TcpStream,
    from: usize,
    to: usize,
    peer_port: u16,
    links: Links,
    seed: u64,
) -> std::io::Result<()> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((proxy_out(from), 0)))?;
    let outbound =
        tokio::time::timeout(Duration::from_secs(2), socket.connect(SocketAddr::from((node_ip(to), peer_port))))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    inbound.set_nodelay(true)?;
    outbound.set_nodelay(true)?;
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    let forward = pump(in_read, out_write, links.clone(), (from, to), SplitMix64::new(seed));
    let backward = pump(out_read, in_write, links, (to, from), SplitMix64::new(seed ^ 0xb4c));
    // Either direction ending (a close, a reset) ends the connection.
    tokio::select! {
        _ = forward => {}
        _ = backward => {}
    }
    Ok(())
}

/// Copies `read` to `write`, each chunk held as the link's fault says, in order.
async fn pump(
    mut read: tokio::net::tcp::OwnedReadHalf,
    mut write: tokio::net::tcp::OwnedWriteHalf,
    links: Links,
    link: (usize, usize),
    mut rng: SplitMix64,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if write.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    let reader = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        let mut last = Instant::now();
        loop {
            let n = match read.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let fault = links.get(link.0, link.1);
            let mut hold = fault.delay + fault.jitter.mul_f64(rng.next_f64());
            if fault.loss > 0.0 && rng.chance(fault.loss) {
                if rng.chance(0.1) {
                    return; // A reset: the connection ends.
                }
                hold += rng.duration_between(Duration::from_millis(200), Duration::from_millis(1000));
            }
            // In order: never before the chunk ahead of it.
            let at = (Instant::now() + hold).max(last);
            last = at;
            if tx.send((at, buffer[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = writer => {}
        _ = reader => {}
    }
}
