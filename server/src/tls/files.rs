//! The TLS files of a node (`[tls.client]`, `[tls.peer]`) and the rustls configurations
//! built from them.

use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use thiserror::Error;

/// `[tls.client]`: TLS on the client port (etcd's `--cert-file`, `--key-file`,
/// `--trusted-ca-file`, `--client-cert-auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientPortTls {
    /// The server certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates (PEM) that client certificates are verified against. Without it no
    /// client certificate is asked for.
    pub ca: Option<PathBuf>,
    /// Refuse clients without a certificate signed by `ca`.
    pub require_client_cert: bool,
}

/// `[tls.peer]`: mutual TLS on the peer port and on every connection to a peer (etcd's
/// `--peer-cert-file`, `--peer-key-file`, `--peer-trusted-ca-file`, with
/// `--peer-client-cert-auth` always on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerPortTls {
    /// This node's certificate chain (PEM), used both as server and as client certificate;
    /// it must name this member (see [`super::identity`]).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// CA certificates (PEM) that the other members' certificates are verified against.
    pub ca: PathBuf,
}

/// Both ports' TLS settings; `None` is plain TCP on that port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// `[tls.client]`.
    pub client: Option<ClientPortTls>,
    /// `[tls.peer]`.
    pub peer: Option<PeerPortTls>,
}

impl TlsSettings {
    /// Every file the settings name, to watch for changes.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        if let Some(c) = &self.client {
            files.extend([c.cert.clone(), c.key.clone()]);
            files.extend(c.ca.clone());
        }
        if let Some(p) = &self.peer {
            files.extend([p.cert.clone(), p.key.clone(), p.ca.clone()]);
        }
        files
    }

    /// The URL scheme of the client port.
    pub fn client_scheme(&self) -> &'static str {
        if self.client.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The URL scheme of the peer port.
    pub fn peer_scheme(&self) -> &'static str {
        if self.peer.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// A TLS file that cannot be used. Each names the file and what was wrong with it.
#[derive(Debug, Error)]
pub enum TlsError {
    /// The file cannot be read.
    #[error("TLS file {path}: cannot read it: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file holds no PEM item of the kind expected, or a damaged one.
    #[error("TLS file {path}: {problem}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong, and what is expected.
        problem: String,
    },
    /// rustls refused the certificates or key (e.g. a key that does not match the
    /// certificate, a CA file whose certificates do not parse).
    #[error("TLS {what} ({files}): {source}")]
    Rustls {
        /// Which configuration.
        what: &'static str,
        /// The files involved.
        files: String,
        /// rustls's reason.
        source: rustls::Error,
    },
    /// The private key is not the certificate's.
    #[error("TLS key {key} does not belong to certificate {cert}; give the key the certificate was issued for")]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// Client-certificate verification could not be set up from the CA file.
    #[error("TLS CA file {path}: {problem}")]
    Verifier {
        /// The CA file.
        path: PathBuf,
        /// What went wrong.
        problem: String,
    },
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_path_buf(), source })
}

/// The certificates in a PEM file, at least one.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem { path: path.to_path_buf(), problem: format!("not a PEM certificate file: {e}") })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            problem: "holds no certificate; expected one or more \"-----BEGIN CERTIFICATE-----\" blocks".into(),
        });
    }
    Ok(certs)
}

/// The private key in a PEM file.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Pem {
        path: path.to_path_buf(),
        problem: format!("no usable private key ({e}); expected a PEM PKCS#8, PKCS#1 (RSA) or SEC1 (EC) key"),
    })
}

/// A trust store of the CA certificates in a PEM file.
pub fn read_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots.add(cert).map_err(|source| TlsError::Rustls {
            what: "CA certificate",
            files: path.display().to_string(),
            source,
        })?;
    }
    Ok(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn describe(files: &[&Path]) -> String {
    files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

fn cert_key_error(what: &'static str, cert: &Path, key: &Path, source: rustls::Error) -> TlsError {
    match source {
        rustls::Error::InconsistentKeys(_) => {
            TlsError::KeyMismatch { cert: cert.to_path_buf(), key: key.to_path_buf() }
        }
        source => TlsError::Rustls { what, files: describe(&[cert, key]), source },
    }
}

fn client_verifier(ca: &Path, required: bool) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(read_roots(ca)?), provider());
    let builder = if required { builder } else { builder.allow_unauthenticated() };
    builder.build().map_err(|e| TlsError::Verifier { path: ca.to_path_buf(), problem: e.to_string() })
}

/// The client port's server configuration: HTTP/2 (gRPC) and HTTP/1.1 (the gateway) by ALPN.
pub fn client_port_config(tls: &ClientPortTls) -> Result<ServerConfig, TlsError> {
    let certs = read_certs(&tls.cert)?;
    let key = read_key(&tls.key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls { what: "client port", files: describe(&[&tls.cert]), source })?;
    let builder = match &tls.ca {
        Some(ca) => builder.with_client_cert_verifier(client_verifier(ca, tls.require_client_cert)?),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|source| cert_key_error("client port certificate and key", &tls.cert, &tls.key, source))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The peer port's server configuration: a member's certificate is required.
pub fn peer_server_config(tls: &PeerPortTls) -> Result<ServerConfig, TlsError> {
    let certs = read_certs(&tls.cert)?;
    let key = read_key(&tls.key)?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls { what: "peer port", files: describe(&[&tls.cert]), source })?
        .with_client_cert_verifier(client_verifier(&tls.ca, true)?)
        .with_single_cert(certs, key)
        .map_err(|source| cert_key_error("peer certificate and key", &tls.cert, &tls.key, source))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// The configuration this node dials its peers with: it trusts the peer CA and presents its
/// own peer certificate.
pub fn peer_client_config(tls: &PeerPortTls) -> Result<ClientConfig, TlsError> {
    let roots = read_roots(&tls.ca)?;
    let certs = read_certs(&tls.cert)?;
    let key = read_key(&tls.key)?;
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls { what: "peer client", files: describe(&[&tls.ca]), source })?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|source| cert_key_error("peer certificate and key", &tls.cert, &tls.key, source))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}
