//! A cap on the connections open on the client port (`[limits] max_client_connections`).
//!
//! Each connection costs a file descriptor, buffers and an HTTP/2 state machine; without a
//! cap a client opening connections in a loop runs the node out of descriptors, and then
//! the peers' connections fail too. [`limit_connections`] wraps the stream of accepted
//! connections, plain TCP or TLS alike: a connection beyond the cap is closed as soon as it
//! is accepted (one log line per 5 s says how many were), and every admitted one is wrapped
//! in a [`Counted`] that gives its slot back when the server drops it.
//!
//! Connections still in their TLS handshake are not counted here: the TLS accept loop
//! bounds those itself ([`crate::tls::incoming::MAX_HANDSHAKES`]).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::Connected;

/// How often a port refusing connections says so in the log.
const LOG_EVERY: Duration = Duration::from_secs(5);

/// The live-connection count of one port and its cap.
#[derive(Debug)]
pub struct ConnectionGate {
    port: &'static str,
    max: usize,
    live: Arc<AtomicUsize>,
    refused: AtomicU64,
    /// When the last "refused" line was logged, and the refusals counted then.
    logged: Mutex<(Option<Instant>, u64)>,
}

impl ConnectionGate {
    /// A gate admitting at most `max` connections at once; `port` names it in log lines.
    pub fn new(port: &'static str, max: usize) -> Arc<Self> {
        Arc::new(ConnectionGate {
            port,
            max,
            live: Arc::new(AtomicUsize::new(0)),
            refused: AtomicU64::new(0),
            logged: Mutex::new((None, 0)),
        })
    }

    /// Connections admitted and not yet closed.
    #[cfg(test)]
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Connections refused so far.
    #[cfg(test)]
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// `io` wrapped to hold a slot until it is dropped, or `None` (and `io` dropped, which
    /// closes it) when every slot is taken.
    pub fn admit<IO>(&self, io: IO) -> Option<Counted<IO>> {
        // Taken first and given back on refusal, so that two accepts racing for the last
        // slot cannot both get it.
        if self.live.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.live.fetch_sub(1, Ordering::AcqRel);
            self.refuse();
            return None;
        }
        Some(Counted { io, _slot: Slot(self.live.clone()) })
    }

    fn refuse(&self) {
        let refused = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        let Ok(mut logged) = self.logged.lock() else { return };
        let now = Instant::now();
        if logged.0.is_none_or(|at| now.duration_since(at) >= LOG_EVERY) {
            tracing::warn!(
                port = self.port,
                max = self.max,
                refused_since_last_line = refused - logged.1,
                "closed new connections: the port holds [limits] max_client_connections already"
            );
            *logged = (Some(now), refused);
        }
    }
}

/// The accepted connections of `incoming`, beyond `gate`'s cap closed at once, the others
/// counted until the server drops them. Accept errors pass through unchanged.
pub fn limit_connections<S, IO, E>(incoming: S, gate: Arc<ConnectionGate>) -> impl Stream<Item = Result<Counted<IO>, E>>
where
    S: Stream<Item = Result<IO, E>>,
{
    incoming.filter_map(move |accepted| match accepted {
        Ok(io) => gate.admit(io).map(Ok),
        Err(error) => Some(Err(error)),
    })
}

/// One admitted connection's slot: given back on drop.
#[derive(Debug)]
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection holding a slot of its port's [`ConnectionGate`]; reads, writes and
/// connection info (peer address, TLS certificates) are the wrapped connection's.
#[derive(Debug)]
pub struct Counted<IO> {
    io: IO,
    _slot: Slot,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Counted<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Counted<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<IO: Connected> Connected for Counted<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_beyond_the_cap_are_refused_and_slots_come_back_on_drop() {
        let gate = ConnectionGate::new("client", 2);
        let first = gate.admit(1u8).expect("first admitted");
        let second = gate.admit(2u8).expect("second admitted");
        assert!(gate.admit(3u8).is_none(), "a third is refused");
        assert_eq!((gate.live(), gate.refused()), (2, 1));
        drop(first);
        assert_eq!(gate.live(), 1);
        let third = gate.admit(4u8).expect("a slot came back");
        drop((second, third));
        assert_eq!(gate.live(), 0);
    }

    #[tokio::test]
    async fn the_stream_wrapper_drops_refused_connections_and_passes_errors() {
        let gate = ConnectionGate::new("client", 1);
        let accepted: Vec<Result<u8, &str>> = vec![Ok(1), Ok(2), Err("accept failed"), Ok(3)];
        let out: Vec<_> = limit_connections(tokio_stream::iter(accepted), gate.clone()).collect().await;
        // The first holds the only slot (collected, so never dropped meanwhile): 2 and 3
        // are refused, the error passes.
        assert_eq!(out.len(), 2);
        assert!(out[0].as_ref().is_ok_and(|c| c.io == 1));
        assert!(matches!(out[1], Err("accept failed")));
        assert_eq!(gate.refused(), 2);
    }
}
