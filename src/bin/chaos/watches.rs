//! Watches under faults: one watcher per node on the registers' prefix. Each keeps a stream
//! open on some node and moves to another one, resuming at `last revision + 1`, when the
//! stream fails, goes quiet for [`QUIET_SWITCH`] while writes go on, or every
//! [`ROTATE_EVERY`] anyway (so resumption across nodes is exercised all the time).
//!
//! The check, after the run: every watcher's events, in the order received, are exactly the
//! committed history of the prefix from its first revision to its last (read at the end by
//! one watch from the first revision, with compaction off): no gap, no duplicate, no
//! reordering, the same values; and no revision's events are split over two responses.

use crate::workload::channel;
use leasekv::client::proto::etcdserverpb::watch_client::WatchClient;
use leasekv::client::proto::etcdserverpb::watch_request::RequestUnion;
use leasekv::client::proto::etcdserverpb::{WatchCreateRequest, WatchRequest, WatchResponse};
use leasekv::lease::rng::SplitMix64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The prefix every watcher watches: the registers.
const PREFIX: &[u8] = b"/chaos/r";
const PREFIX_END: &[u8] = b"/chaos/s";
/// How long a stream may stay without events before the watcher tries another node.
const QUIET_SWITCH: Duration = Duration::from_secs(2);
/// How often a watcher moves to another node even when its stream is fine.
const ROTATE_EVERY: Duration = Duration::from_secs(5);

/// One event as the check compares it: revision, key, put (value) or delete (`None`).
pub type Seen = (i64, Vec<u8>, Option<Vec<u8>>);

/// A key's changes in revision order: each revision and the value after it (`None`: deleted).
pub type Changes<'a> = Vec<(i64, Option<&'a [u8]>)>;

/// The committed history `truth` indexed by key.
pub fn changes_by_key(truth: &[Seen]) -> std::collections::HashMap<&[u8], Changes<'_>> {
    let mut changes: std::collections::HashMap<&[u8], Changes> = std::collections::HashMap::new();
    for (revision, key, value) in truth {
        changes.entry(key).or_default().push((*revision, value.as_deref()));
    }
    changes
}

/// A key's value (given its changes) at revision `revision`.
pub fn value_at<'a>(changes: &[(i64, Option<&'a [u8]>)], revision: i64) -> Option<&'a [u8]> {
    let upto = changes.partition_point(|c| c.0 <= revision);
    upto.checked_sub(1).and_then(|i| changes[i].1)
}

/// One response with events, as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The revision of its first event.
    pub first: i64,
    /// The revision of its last event.
    pub last: i64,
    /// How many events it held.
    pub events: usize,
    /// The node whose stream sent it.
    pub node: usize,
    /// Which of the watcher's streams (1 is the first).
    pub stream: usize,
    /// The start revision that stream was created with.
    pub start: i64,
}

impl std::fmt::Display for Received {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "revisions {}-{} on stream {} (node {}, created at start revision {})",
            self.first, self.last, self.stream, self.node, self.start
        )
    }
}

/// What one watcher received.
#[derive(Debug, Default, Clone)]
pub struct WatcherLog {
    /// The watcher's number.
    pub watcher: u32,
    /// Every event in the order received.
    pub events: Vec<Seen>,
    /// Each response with events, in order.
    pub responses: Vec<Received>,
    /// Streams opened (the first one and every resumption).
    pub streams: usize,
    /// Problems seen on the wire (a canceled watch, a compacted start).
    pub problems: Vec<String>,
}

/// Every watcher's log.
pub type Logs = Arc<Mutex<Vec<WatcherLog>>>;

/// A watcher starting on node `first` from revision `from`, until `stop`.
pub async fn watcher(
    watcher: u32,
    first: usize,
    nodes: usize,
    from: i64,
    seed: u64,
    logs: Logs,
    stop: Arc<AtomicBool>,
) {
    let mut rng = SplitMix64::new(seed ^ (u64::from(watcher) << 32) ^ 0x3a7c4);
    let mut log = WatcherLog { watcher, ..Default::default() };
    let mut node = first;
    let mut next = from;
    while !stop.load(Ordering::Relaxed) {
        log.streams += 1;
        follow(node, &mut next, &mut log, &stop).await;
        // Another node, chosen at random.
        node = (node + 1 + rng.range_u64(0, nodes as u64 - 2) as usize) % nodes;
    }
    logs.lock().unwrap_or_else(|e| e.into_inner()).push(log);
}

/// Why a stream was left.
#[derive(Debug, PartialEq, Eq)]
enum Left {
    /// No event for [`QUIET_SWITCH`].
    Quiet,
    /// It could not be opened, it failed, or the watch was canceled.
    Failed,
    /// Its time was up, or the run is over.
    Rotated,
}

/// Follows one stream on `node` from `*next` until it fails, goes quiet or is rotated;
/// advances `*next` past every revision received whole.
async fn follow(node: usize, next: &mut i64, log: &mut WatcherLog, stop: &AtomicBool) -> Left {
    let start = *next;
    let (requests, receiver) = tokio::sync::mpsc::channel(4);
    let create = WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key: PREFIX.to_vec(),
            range_end: PREFIX_END.to_vec(),
            start_revision: *next,
            ..Default::default()
        })),
    };
    if requests.send(create).await.is_err() {
        return Left::Failed;
    }
    let mut client = WatchClient::new(channel(node));
    let opened = tokio::time::timeout(
        Duration::from_secs(2),
        client.watch(tokio_stream::wrappers::ReceiverStream::new(receiver)),
    )
    .await;
    let Ok(Ok(stream)) = opened else {
        tokio::time::sleep(Duration::from_millis(200)).await;
        return Left::Failed;
    };
    let mut stream = stream.into_inner();
    let began = tokio::time::Instant::now();
    while !stop.load(Ordering::Relaxed) && began.elapsed() < ROTATE_EVERY {
        let answer: Result<Result<Option<WatchResponse>, tonic::Status>, _> =
            tokio::time::timeout(QUIET_SWITCH, stream.message()).await;
        let response = match answer {
            Ok(Ok(Some(response))) => response,
            Err(_) => return Left::Quiet,
            Ok(_) => return Left::Failed,
        };
        if response.canceled {
            log.problems.push(format!(
                "watch canceled on node {node} at start {}: {} (compact revision {})",
                *next, response.cancel_reason, response.compact_revision
            ));
            return Left::Failed;
        }
        if response.events.is_empty() {
            continue;
        }
        let revisions: Vec<i64> =
            response.events.iter().map(|e| e.kv.as_ref().map_or(0, |kv| kv.mod_revision)).collect();
        log.responses.push(Received {
            first: revisions[0],
            last: revisions[revisions.len() - 1],
            events: revisions.len(),
            node,
            stream: log.streams,
            start,
        });
        for event in &response.events {
            let Some(kv) = &event.kv else { continue };
            let value = (event.r#type == 0).then(|| kv.value.clone());
            log.events.push((kv.mod_revision, kv.key.clone(), value));
        }
        *next = revisions.iter().copied().max().unwrap_or(*next - 1) + 1;
    }
    drop(requests);
    Left::Rotated
}

/// The committed history of the prefix from `from` to `to` (inclusive), read with a watch
/// on `node` once the writes are over: complete when the stream has gone quiet past `to`'s
/// last event of the prefix.
pub async fn committed(node: usize, from: i64, to: i64) -> Result<Vec<Seen>, String> {
    let mut log = WatcherLog::default();
    let mut next = from;
    let stop = AtomicBool::new(false);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut complete = false;
    while !complete && tokio::time::Instant::now() < deadline {
        complete = follow(node, &mut next, &mut log, &stop).await == Left::Quiet;
        if !log.problems.is_empty() {
            return Err(log.problems.join("; "));
        }
    }
    if !complete {
        return Err(format!("the committed history up to revision {to} could not be read from node {node}"));
    }
    log.events.retain(|e| e.0 <= to);
    Ok(log.events)
}

/// Checks every watcher against the committed history `truth` (from the first revision
/// any watcher asked for).
pub fn check(logs: &[WatcherLog], truth: &[Seen]) -> Vec<String> {
    let mut anomalies = Vec::new();
    for log in logs {
        for problem in &log.problems {
            anomalies.push(format!("watcher {}: {problem}", log.watcher));
        }
        for pair in log.responses.windows(2) {
            if pair[0].last == pair[1].first {
                anomalies.push(format!(
                    "watcher {}: the events of revision {} came in two responses: {}, then {}",
                    log.watcher, pair[0].last, pair[0], pair[1]
                ));
            }
        }
        let (Some(first), Some(last)) = (log.events.first(), log.events.last()) else { continue };
        let expected: Vec<&Seen> = truth.iter().filter(|e| e.0 >= first.0 && e.0 <= last.0).collect();
        let got: Vec<&Seen> = log.events.iter().collect();
        if got != expected {
            let at = got.iter().zip(&expected).position(|(a, b)| a != b).unwrap_or(got.len().min(expected.len()));
            let show = |e: Option<&&Seen>| {
                e.map_or("nothing".to_string(), |e| {
                    format!(
                        "revision {} {} {}",
                        e.0,
                        String::from_utf8_lossy(&e.1),
                        e.2.as_ref().map_or("DELETE".to_string(), |v| format!("PUT {}", String::from_utf8_lossy(v)))
                    )
                })
            };
            // The response that brought the first wrong event, and the one before it.
            let mut seen = 0;
            let carrier = log.responses.iter().position(|r| {
                seen += r.events;
                seen > at
            });
            let origin = match carrier {
                Some(i) if i > 0 => format!(" (in {}, after {})", log.responses[i], log.responses[i - 1]),
                Some(i) => format!(" (in {})", log.responses[i]),
                None => String::new(),
            };
            anomalies.push(format!(
                "watcher {}: {} events received, {} committed between revisions {} and {}; event {at} \
                 received {}{origin} where the history has {}",
                log.watcher,
                got.len(),
                expected.len(),
                first.0,
                last.0,
                show(got.get(at)),
                show(expected.get(at))
            ));
        }
    }
    anomalies
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(revision: i64, key: &str, value: &str) -> Seen {
        (revision, key.as_bytes().to_vec(), Some(value.as_bytes().to_vec()))
    }

    fn truth() -> Vec<Seen> {
        vec![
            put(2, "/chaos/r00", "a"),
            put(3, "/chaos/r01", "b"),
            (4, b"/chaos/r00".to_vec(), None),
            put(5, "/chaos/r01", "c"),
        ]
    }

    fn watcher(events: Vec<Seen>) -> WatcherLog {
        let responses = events
            .iter()
            .map(|e| Received { first: e.0, last: e.0, events: 1, node: 0, stream: 1, start: 1 })
            .collect();
        WatcherLog { watcher: 1, events, responses, streams: 2, problems: Vec::new() }
    }

    #[test]
    fn the_exact_history_from_any_start_passes() {
        let all = truth();
        assert!(check(&[watcher(all.clone()), watcher(all[1..].to_vec())], &all).is_empty());
    }

    #[test]
    fn a_gap_a_duplicate_a_wrong_value_and_a_split_revision_are_caught() {
        let all = truth();
        let gap = vec![all[0].clone(), all[2].clone(), all[3].clone()];
        let duplicate = vec![all[0].clone(), all[1].clone(), all[1].clone(), all[2].clone()];
        let mut wrong = all.clone();
        wrong[1].2 = Some(b"z".to_vec());
        for log in [gap, duplicate, wrong] {
            assert!(check(&[watcher(log.clone())], &all).iter().any(|a| a.contains("committed between")), "{log:?}");
        }
        let mut split = watcher(all.clone());
        let response = |first, last, events| Received { first, last, events, node: 0, stream: 1, start: 1 };
        split.responses = vec![response(2, 3, 2), response(3, 5, 2)];
        assert!(check(&[split], &all).iter().any(|a| a.contains("two responses")));
    }
}
