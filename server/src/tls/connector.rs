//! The dialling side of the peer lanes over mutual TLS: a connector for tonic that opens a
//! TCP connection and runs the handshake with the client configuration in force, so that
//! reloaded certificates apply to the next connection.

use super::reload::Current;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A tonic connector (a `tower::Service<Uri>`) dialling peers over TLS.
#[derive(Debug, Clone)]
pub struct PeerTlsConnector {
    config: Arc<Current<ClientConfig>>,
}

impl PeerTlsConnector {
    /// A connector using the configuration in force at each dial.
    pub fn new(config: Arc<Current<ClientConfig>>) -> Self {
        PeerTlsConnector { config }
    }
}

type Connecting = Pin<Box<dyn Future<Output = Result<TokioIo<TlsStream<TcpStream>>, io::Error>> + Send>>;

impl tower::Service<tonic::codegen::http::Uri> for PeerTlsConnector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), io::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: tonic::codegen::http::Uri) -> Connecting {
        let config = self.config.get();
        Box::pin(async move {
            let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("peer URL {uri}: {what}"));
            let host = uri.host().ok_or_else(|| invalid("no host"))?.trim_start_matches('[').trim_end_matches(']');
            let port = uri.port_u16().ok_or_else(|| invalid("no port"))?;
            // The certificate is checked against the host the peer is dialled at (its IP or
            // DNS subject alternative name), as any TLS client does.
            let name = ServerName::try_from(host.to_string()).map_err(|_| invalid("host is not a valid TLS name"))?;
            let tcp = TcpStream::connect((host, port)).await?;
            tcp.set_nodelay(true)?;
            let stream = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await?;
            Ok(TokioIo::new(stream))
        })
    }
}
