//! TLS on the client and peer ports, with rustls (no OpenSSL).
//!
//! - [`files`]: the certificate, key and CA files a node is configured with, read into
//!   rustls configurations; a missing or unreadable file fails the start naming the file.
//! - [`reload`]: the configurations in force, rebuilt from the files on SIGHUP or when a
//!   file changes, so certificates rotate without a restart (new connections use them).
//! - [`incoming`]: the accept side: one TLS handshake per connection, off the accept loop,
//!   and plain connections on a TLS port refused with a log line.
//! - [`connector`]: the dialling side of the peer lanes (mutual TLS).
//! - [`identity`]: the names a certificate carries, and whether they name a member.
//!
//! How an operator sets it up is in docs/security.md.

pub mod connector;
pub mod files;
pub mod identity;
pub mod incoming;
pub mod reload;

pub use files::{ClientPortTls, PeerPortTls, TlsError, TlsSettings};
pub use reload::TlsState;
