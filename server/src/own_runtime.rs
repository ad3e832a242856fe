//! A tokio runtime on a thread of its own, for the work that must not wait behind the
//! client port's (the peer port and lanes: the election's messages travel there). The
//! client port's tasks build and encode answers that may be hundreds of megabytes; on the
//! main runtime, with one worker thread on a two-core host, a peer message waited for
//! them and a master lost its lease while it answered a large read.

use std::io;
use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// A single-threaded runtime running on its own thread until this is dropped; what it
/// runs is then cancelled.
pub struct OwnRuntime {
    handle: Handle,
    _stop: oneshot::Sender<()>,
}

impl OwnRuntime {
    /// Starts the runtime on a thread named `name`.
    pub fn start(name: &str) -> io::Result<OwnRuntime> {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new().name(name.to_string()).spawn(move || {
            match Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => {
                    let _ = handle_tx.send(Ok(runtime.handle().clone()));
                    // Until the owner is dropped: the sender's drop ends the wait.
                    runtime.block_on(async {
                        let _ = stopped.await;
                    });
                }
                Err(error) => drop(handle_tx.send(Err(error))),
            }
        })?;
        let handle = handle_rx.recv().map_err(|_| io::Error::other("the runtime thread ended at start"))??;
        Ok(OwnRuntime { handle, _stop: stop })
    }

    /// The runtime, to spawn on or enter.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}
