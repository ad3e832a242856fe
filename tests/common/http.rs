//! Plain HTTP to a node's client port, for the tests of the gateway and the console: the
//! status and body of an answer whatever its status (an error status is an answer too).

#![allow(dead_code)] // each test file uses its own part of it

use std::time::Duration;

/// An HTTP client that returns every answer, error statuses included, within 10 s.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// POSTs `body` (JSON) to `path` on 127.0.0.1:`port`; the status and the body (or 0 and
/// the transport error).
pub fn post(port: u16, path: &str, body: impl AsRef<[u8]>) -> (u16, String) {
    let url = format!("http://127.0.0.1:{port}{path}");
    match agent().post(&url).header("content-type", "application/json").send(body.as_ref()) {
        Ok(mut response) => (response.status().as_u16(), response.body_mut().read_to_string().unwrap_or_default()),
        Err(error) => (0, error.to_string()),
    }
}

/// GETs `path` on 127.0.0.1:`port`; the status and the body (or 0 and the transport error).
pub fn get(port: u16, path: &str) -> (u16, String) {
    let url = format!("http://127.0.0.1:{port}{path}");
    match agent().get(&url).call() {
        Ok(mut response) => (response.status().as_u16(), response.body_mut().read_to_string().unwrap_or_default()),
        Err(error) => (0, error.to_string()),
    }
}
