//! The accept side of a TLS port: every connection's handshake runs in its own task (a slow
//! or silent client cannot hold up the others), bounded in time and in number, and what
//! completes is handed to the gRPC server as a stream of TLS connections.
//!
//! A plain connection on a TLS port is refused: an HTTP/1 request gets Go's answer
//! (`400 Client sent an HTTP request to an HTTPS server.`, which etcd's users know), and
//! the node logs who tried.

use super::reload::Current;
use rustls::ServerConfig;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

/// How long a connection may take to complete its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most handshakes in progress at once; further connections wait to be accepted (the
/// kernel's backlog holds them), so a flood of silent connections costs bounded memory.
pub const MAX_HANDSHAKES: usize = 256;

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Go's answer to a plain HTTP request on a TLS port (net/http), which etcd serves too.
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// TLS connections accepted on `listener`, with the configuration in force at each accept.
/// `port` names the port in log lines. The stream ends when the server drops it.
pub fn tls_incoming(
    listener: TcpListener,
    config: Arc<Current<ServerConfig>>,
    port: &'static str,
) -> ReceiverStream<Result<TlsStream<TcpStream>, io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(accept_loop(listener, config, port, tx));
    ReceiverStream::new(rx)
}

type Accepted = mpsc::Sender<Result<TlsStream<TcpStream>, io::Error>>;

async fn accept_loop(listener: TcpListener, config: Arc<Current<ServerConfig>>, port: &'static str, tx: Accepted) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    let refused = Arc::new(AtomicU64::new(0));
    loop {
        let permit = tokio::select! {
            _ = tx.closed() => return,
            permit = handshakes.clone().acquire_owned() => permit,
        };
        // The semaphore is never closed; an error would only mean the node is stopping.
        let Ok(permit) = permit else { return };
        let accepted = tokio::select! {
            _ = tx.closed() => return,
            accepted = listener.accept() => accepted,
        };
        let (tcp, addr) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: wait instead of spinning.
                tracing::warn!(port, %error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = tokio_rustls::TlsAcceptor::from(config.get());
        let (tx, refused) = (tx.clone(), refused.clone());
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(acceptor, tcp, addr, port, &refused)).await {
                Ok(Some(stream)) => {
                    let _ = tx.send(Ok(stream)).await;
                }
                Ok(None) => {}
                Err(_) => tracing::debug!(port, %addr, "TLS handshake did not complete in time; connection closed"),
            }
        });
    }
}

async fn handshake(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: TcpStream,
    addr: SocketAddr,
    port: &'static str,
    refused: &AtomicU64,
) -> Option<TlsStream<TcpStream>> {
    let mut first = [0u8; 1];
    match tcp.peek(&mut first).await {
        Ok(1) if first[0] == TLS_HANDSHAKE_RECORD => {}
        Ok(1) => {
            refuse_plain(tcp, addr, port, refused).await;
            return None;
        }
        _ => return None,
    }
    match acceptor.accept(tcp).await {
        Ok(stream) => Some(stream),
        Err(error) => {
            // A wrong or missing client certificate, an unknown CA, a protocol mismatch.
            tracing::info!(port, %addr, %error, "TLS handshake failed; connection refused");
            None
        }
    }
}

async fn refuse_plain(mut tcp: TcpStream, addr: SocketAddr, port: &'static str, refused: &AtomicU64) {
    let count = refused.fetch_add(1, Ordering::Relaxed);
    // Logged once per hundred so that a client retrying in a loop cannot flood the log.
    if count.is_multiple_of(100) {
        tracing::warn!(port, %addr, refused_so_far = count + 1,
            "refused a plain (non-TLS) connection on a TLS port; the client must use TLS (https, --cacert)");
    }
    let mut start = [0u8; 4];
    // An HTTP/1 method ("GET ", "POST"); HTTP/2's preface ("PRI *") cannot take an answer.
    let is_http1 = matches!(tcp.peek(&mut start).await,
        Ok(n) if n >= 3 && start[..3].iter().all(u8::is_ascii_uppercase) && &start[..n] != b"PRI ");
    if is_http1 {
        let _ = tcp.write_all(PLAIN_HTTP_ANSWER).await;
    }
    let _ = tcp.shutdown().await;
}
