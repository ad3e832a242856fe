//! The TLS configurations in force, and their reload: on SIGHUP, and when one of the files
//! changes (checked every [`POLL`]). A reload that fails (a half-written file, a key that
//! does not match its certificate) keeps the configurations in force and logs why; the next
//! change or SIGHUP tries again. Connections already open keep their session; new ones use
//! the new certificates.

use super::files::{client_port_config, peer_client_config, peer_server_config, TlsError, TlsSettings};
use rustls::{ClientConfig, ServerConfig};
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::{Duration, SystemTime};

/// How often the files are checked for a change.
pub const POLL: Duration = Duration::from_secs(2);

/// A configuration that a reload replaces; readers take the one in force per connection.
#[derive(Debug)]
pub struct Current<T>(RwLock<Arc<T>>);

impl<T> Current<T> {
    fn new(value: T) -> Arc<Self> {
        Arc::new(Current(RwLock::new(Arc::new(value))))
    }

    /// The configuration in force.
    pub fn get(&self) -> Arc<T> {
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn set(&self, value: T) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(value);
    }
}

/// A node's TLS configurations in force, built from its [`TlsSettings`].
#[derive(Debug, Clone)]
pub struct TlsState {
    settings: TlsSettings,
    /// The client port's, when `[tls.client]` is set.
    pub client_port: Option<Arc<Current<ServerConfig>>>,
    /// The peer port's, when `[tls.peer]` is set.
    pub peer_server: Option<Arc<Current<ServerConfig>>>,
    /// What this node dials its peers with, when `[tls.peer]` is set.
    pub peer_client: Option<Arc<Current<ClientConfig>>>,
}

impl TlsState {
    /// Reads every file; the first that cannot be used is the error.
    pub fn load(settings: &TlsSettings) -> Result<TlsState, TlsError> {
        let (client_port, peer) = build(settings)?;
        Ok(TlsState {
            settings: settings.clone(),
            client_port: client_port.map(Current::new),
            peer_server: peer.as_ref().map(|(server, _)| Current::new(server.clone())),
            peer_client: peer.map(|(_, client)| Current::new(client)),
        })
    }

    /// Whether any port uses TLS.
    pub fn is_on(&self) -> bool {
        self.client_port.is_some() || self.peer_server.is_some()
    }

    /// Rebuilds every configuration from the files; all or nothing.
    pub fn reload(&self) -> Result<(), TlsError> {
        let (client_port, peer) = build(&self.settings)?;
        if let (Some(current), Some(new)) = (&self.client_port, client_port) {
            current.set(new);
        }
        if let (Some(server), Some(client), Some((new_server, new_client))) =
            (&self.peer_server, &self.peer_client, peer)
        {
            server.set(new_server);
            client.set(new_client);
        }
        Ok(())
    }

    /// Reloads on SIGHUP and when a file's modification time or size changes, until the
    /// state is dropped everywhere else (the node stopped). Does nothing without TLS.
    pub fn watch(self: &Arc<Self>) {
        if !self.is_on() {
            return;
        }
        tokio::spawn(watch(Arc::downgrade(self), self.settings.files()));
    }
}

/// The configurations the settings call for: the client port's, and the peer port's server
/// and client sides.
type Built = (Option<ServerConfig>, Option<(ServerConfig, ClientConfig)>);

fn build(settings: &TlsSettings) -> Result<Built, TlsError> {
    let client_port = settings.client.as_ref().map(client_port_config).transpose()?;
    let peer = match &settings.peer {
        Some(peer) => Some((peer_server_config(peer)?, peer_client_config(peer)?)),
        None => None,
    };
    Ok((client_port, peer))
}

/// What identifies a version of a file cheaply: its modification time and size.
fn stamp(path: &PathBuf) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

async fn watch(state: Weak<TlsState>, files: Vec<PathBuf>) {
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGHUP; TLS files are reloaded only when they change");
            None
        }
    };
    let mut stamps: Vec<_> = files.iter().map(stamp).collect();
    let mut ticker = tokio::time::interval(POLL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let why = tokio::select! {
            _ = ticker.tick() => {
                let now: Vec<_> = files.iter().map(stamp).collect();
                if now == stamps {
                    if state.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
                stamps = now;
                "a TLS file changed"
            }
            Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => "SIGHUP",
        };
        let Some(state) = state.upgrade() else { return };
        match state.reload() {
            Ok(()) => tracing::info!(reason = why, "TLS certificates reloaded; new connections use them"),
            Err(error) => tracing::error!(reason = why, %error, "TLS reload failed; the certificates in force stay"),
        }
    }
}
