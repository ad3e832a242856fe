//! TLS for a client connection, as etcdctl's `--cacert`, `--cert` and `--key` set it up.

use std::path::Path;
use thiserror::Error;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// The PEM files of a TLS client: the CA that signs the servers' certificates, and
/// optionally a client certificate and key (for servers that verify clients).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// CA certificates (PEM) the server's certificate is verified against.
    pub ca_pem: Vec<u8>,
    /// This client's certificate chain (PEM), if it presents one.
    pub cert_pem: Option<Vec<u8>>,
    /// The client certificate's private key (PEM).
    pub key_pem: Option<Vec<u8>>,
}

/// TLS options that cannot be used.
#[derive(Debug, Error)]
pub enum TlsOptionError {
    /// A file cannot be read.
    #[error("{flag} {path}: cannot read it: {source}")]
    Read {
        /// The option, e.g. `--cacert`.
        flag: &'static str,
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// `--cert` without `--key`, or the other way round.
    #[error("--cert and --key go together: give both (the client certificate and its private key) or neither")]
    CertWithoutKey,
    /// A client certificate or key without a CA to verify the server with.
    #[error(
        "--cert/--key need --cacert: the CA file that signs the server's certificate (no system trust store is used)"
    )]
    NoCa,
}

impl ClientTls {
    /// Reads the files; `None` when none is given (plain connections).
    pub fn from_files(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Option<ClientTls>, TlsOptionError> {
        let read = |flag: &'static str, path: &Path| {
            std::fs::read(path).map_err(|source| TlsOptionError::Read {
                flag,
                path: path.display().to_string(),
                source,
            })
        };
        if cert.is_some() != key.is_some() {
            return Err(TlsOptionError::CertWithoutKey);
        }
        let Some(ca) = ca else {
            return if cert.is_some() { Err(TlsOptionError::NoCa) } else { Ok(None) };
        };
        Ok(Some(ClientTls {
            ca_pem: read("--cacert", ca)?,
            cert_pem: cert.map(|p| read("--cert", p)).transpose()?,
            key_pem: key.map(|p| read("--key", p)).transpose()?,
        }))
    }

    /// tonic's configuration for an endpoint: the server name is the endpoint's host.
    pub fn config(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem));
        match (&self.cert_pem, &self.key_pem) {
            (Some(cert), Some(key)) => config.identity(Identity::from_pem(cert, key)),
            _ => config,
        }
    }
}
