//! Why a client operation failed, and the text of transport errors.

use super::*;

/// Why a client operation failed. Messages name the endpoint and the call.
#[derive(Debug, Error)]
pub enum ClientError {
    /// `Client::connect` was given an empty list.
    #[error("no endpoints given")]
    NoEndpoints,
    /// An endpoint string is malformed.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// An `https://` endpoint, and no CA to verify it with.
    #[error("endpoint {0} uses TLS: give the CA that signs its certificate (--cacert, or LEASEKV_CACERT)")]
    TlsNeeded(String),
    /// No endpoint accepted a connection.
    #[error("could not connect to any endpoint after {attempts} attempts: {failures}")]
    Connect {
        /// Connection attempts made (each tries one endpoint).
        attempts: u32,
        /// `endpoint: cause` for each failed attempt, `; `-separated.
        failures: String,
    },
    /// The server answered the call with an error.
    #[error("{method} on {endpoint} failed ({code:?}): {message}", code = status.code(),
        message = append_causes(explained(status), std::error::Error::source(status.as_ref())))]
    Rpc {
        /// The endpoint that answered.
        endpoint: String,
        /// The gRPC method, e.g. `Put`.
        method: &'static str,
        /// The error as received.
        status: Box<Status>,
    },
    /// Every attempt found its endpoint unreachable or unavailable.
    #[error("{method} failed: no endpoint available after {attempts} attempts: {failures}")]
    Unavailable {
        /// The gRPC method.
        method: &'static str,
        /// Attempts made.
        attempts: u32,
        /// `endpoint: cause` for each failed attempt, `; `-separated.
        failures: String,
    },
    /// The endpoint did not answer in time; not retried, because the call may have been applied.
    #[error("{method} on {endpoint} timed out after {after:?}")]
    Timeout {
        /// The endpoint that was asked.
        endpoint: String,
        /// The gRPC method.
        method: &'static str,
        /// The deadline that passed.
        after: Duration,
    },
    /// A response stream ended although an answer was expected.
    #[error("{method} stream on {endpoint} was closed by the server")]
    StreamClosed {
        /// The endpoint that closed the stream.
        endpoint: String,
        /// The gRPC method.
        method: &'static str,
    },
}

impl ClientError {
    /// The gRPC status code, when the server answered with an error.
    pub fn code(&self) -> Option<Code> {
        match self {
            ClientError::Rpc { status, .. } => Some(status.code()),
            _ => None,
        }
    }

    /// Whether the server said the write may or may not have been applied (its master
    /// went away while it was in flight; see [`crate::outcome`]). Such a write is never
    /// retried by the client: repeat it only if doing it twice is harmless.
    pub fn is_indeterminate(&self) -> bool {
        matches!(self, ClientError::Rpc { status, .. } if crate::outcome::is_indeterminate(status))
    }

    /// etcd's error the server answered with, if its message is one of etcd's
    /// ([`crate::errors`]): what callers decide on, rather than the text.
    pub fn etcd_error(&self) -> Option<EtcdError> {
        match self {
            ClientError::Rpc { status, .. } => EtcdError::of(status),
            _ => None,
        }
    }

    /// Whether the server said the thing asked for does not exist (`NOT_FOUND`).
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(Code::NotFound)
    }
}

/// The status message with its cause chain, which for connection failures holds the reason
/// (e.g. "Connection refused").
pub(super) fn status_summary(status: &Status) -> String {
    let mut text = status.message().to_string();
    if text.is_empty() {
        text = format!("{:?}", status.code());
    }
    append_causes(text, std::error::Error::source(status))
}

/// An error with its causes, `: `-joined; tonic's transport errors say little at the top level.
pub(super) fn error_chain(error: &dyn std::error::Error) -> String {
    append_causes(error.to_string(), error.source())
}

/// The status's message, and the server's explanation after it when it gave one
/// ([`crate::errors::explanation`]): etcd's "request is too large" becomes "etcdserver:
/// request is too large (the value is 2000000 bytes; at most 1572864 are allowed ([limits]
/// max_value_bytes))".
fn explained(status: &Status) -> String {
    match crate::errors::explanation(status) {
        Some(why) => format!("{} ({why})", status.message()),
        None => status.message().to_string(),
    }
}

/// Appends each cause in the chain from `source` that `text` does not already say.
pub(super) fn append_causes(mut text: String, mut source: Option<&(dyn std::error::Error + 'static)>) -> String {
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
