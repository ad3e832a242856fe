//! How hard the client tries, and the options of a read.

use super::*;

/// How hard the client tries before giving up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts per call (and per `connect`), across endpoints.
    pub attempts: u32,
    /// Pause after the first failed attempt; doubled after each further one.
    pub initial_backoff: Duration,
    /// Upper bound of a pause.
    pub max_backoff: Duration,
    /// How long one TCP/HTTP2 connection attempt may take.
    pub connect_timeout: Duration,
    /// Deadline of one unary call (and of one keepalive answer).
    pub request_timeout: Duration,
}

impl Default for RetryPolicy {
    /// 5 attempts with pauses of 0.1, 0.2, 0.4 and 0.8 s: about 1.5 s of waiting plus up to
    /// 1 s per unreachable endpoint, so a dead cluster is reported within a few seconds.
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1600),
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The pause after failed attempt number `failed` (1-based).
    pub fn backoff(&self, failed: u32) -> Duration {
        let factor = 1u32.checked_shl(failed.saturating_sub(1)).unwrap_or(u32::MAX);
        self.initial_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// Options of [`Client::get`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GetOptions {
    /// Every key starting with the given key.
    pub prefix: bool,
    /// Leave the values out.
    pub keys_only: bool,
    /// Member-local read, possibly stale, instead of linearizable.
    pub serializable: bool,
    /// At most this many keys; 0 for no limit.
    pub limit: i64,
    /// Only count the keys.
    pub count_only: bool,
    /// Read at this past revision; 0 for the current one.
    pub revision: i64,
}

/// The `range_end` that makes a range cover every key starting with `prefix`.
///
/// etcd's rule: increment the last byte that is not 0xff and cut after it; when there is none
/// (empty prefix or all 0xff), `"\0"`, which means "to the end of the key space".
pub fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}
