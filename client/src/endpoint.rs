//! Endpoint strings: `host:port` or `http(s)://host:port`, alone or comma separated.

use thiserror::Error;

/// An endpoint string that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EndpointError {
    /// The string was empty (e.g. `a:1,,b:2`).
    #[error("empty endpoint in list {0:?}")]
    Empty(String),
    /// The string has no port; gRPC has no default port, so guessing would hide typos.
    #[error("endpoint {0:?} has no port (expected host:port, e.g. 127.0.0.1:2379)")]
    NoPort(String),
    /// The scheme is neither http nor https.
    #[error("endpoint {0:?} has unsupported scheme (use host:port, http://host:port or https://host:port)")]
    Scheme(String),
    /// The URL was rejected by the transport.
    #[error("endpoint {0:?} is not a valid URL: {1}")]
    Invalid(String, String),
}

/// Turns `host:port` into `http://host:port`; keeps `http://` and `https://` URLs as they are
/// (without a trailing slash).
pub fn normalize_endpoint(raw: &str) -> Result<String, EndpointError> {
    let trimmed = raw.trim().trim_end_matches('/');
    if trimmed.is_empty() {
        return Err(EndpointError::Empty(raw.to_string()));
    }
    let (scheme, rest) = match trimmed.split_once("://") {
        Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
        None => ("http".to_string(), trimmed),
    };
    if scheme != "http" && scheme != "https" {
        return Err(EndpointError::Scheme(raw.to_string()));
    }
    // The port is after the last ':' and, for IPv6 literals, after the closing bracket.
    let host_port = rest.rsplit_once(']').map_or(rest, |(_, after)| after);
    let has_port = host_port.rsplit_once(':').is_some_and(|(_, port)| !port.is_empty() && port.parse::<u16>().is_ok());
    if !has_port {
        return Err(EndpointError::NoPort(raw.to_string()));
    }
    Ok(format!("{scheme}://{rest}"))
}

/// Splits a comma-separated endpoint list and normalises each entry.
pub fn parse_endpoint_list(list: &str) -> Result<Vec<String>, EndpointError> {
    list.split(',').map(|part| normalize_endpoint(part).map_err(|e| reword_empty(e, list))).collect()
}

/// Reports an empty entry with the whole list, which is what the user typed.
fn reword_empty(err: EndpointError, list: &str) -> EndpointError {
    match err {
        EndpointError::Empty(_) => EndpointError::Empty(list.to_string()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_host_port_gets_http() {
        assert_eq!(normalize_endpoint("127.0.0.1:2379").as_deref(), Ok("http://127.0.0.1:2379"));
        assert_eq!(normalize_endpoint(" localhost:1 ").as_deref(), Ok("http://localhost:1"));
    }

    #[test]
    fn urls_are_kept() {
        assert_eq!(normalize_endpoint("http://127.0.0.1:2379/").as_deref(), Ok("http://127.0.0.1:2379"));
        assert_eq!(normalize_endpoint("HTTPS://example.com:443").as_deref(), Ok("https://example.com:443"));
        assert_eq!(normalize_endpoint("[::1]:2379").as_deref(), Ok("http://[::1]:2379"));
    }

    #[test]
    fn bad_endpoints_are_rejected() {
        assert_eq!(normalize_endpoint("127.0.0.1"), Err(EndpointError::NoPort("127.0.0.1".into())));
        assert_eq!(normalize_endpoint("http://[::1]"), Err(EndpointError::NoPort("http://[::1]".into())));
        assert_eq!(normalize_endpoint("host:http"), Err(EndpointError::NoPort("host:http".into())));
        assert_eq!(normalize_endpoint("unix://sock:1"), Err(EndpointError::Scheme("unix://sock:1".into())));
        assert_eq!(normalize_endpoint(""), Err(EndpointError::Empty("".into())));
    }

    #[test]
    fn lists_are_split_and_checked() {
        assert_eq!(
            parse_endpoint_list("127.0.0.1:1,http://127.0.0.1:2").unwrap(),
            vec!["http://127.0.0.1:1".to_string(), "http://127.0.0.1:2".to_string()]
        );
        assert_eq!(parse_endpoint_list("a:1,,b:2"), Err(EndpointError::Empty("a:1,,b:2".into())));
    }
}
