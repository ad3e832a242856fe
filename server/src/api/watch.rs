//! etcd's Watch service, served by every node from its own applied history (never
//! forwarded: a follower's watchers see what it applied, in the same order as everywhere).
//!
//! Each gRPC stream gets one task that owns the stream's [`WatchStream`] core and three
//! inputs: the client's requests, the node's [`HistoryFeed`] (a wake-up after every batch
//! the node applied) and a progress ticker. Responses go out through a bounded channel; the
//! core is polled only while that channel has room, so a client that reads slowly costs a
//! bounded amount of memory and holds up nobody: its watchers fall behind and catch up
//! from the history when it reads again (or are cancelled with the compaction revision if
//! the history moved past them).
//!
//! Responses go out in the wire form of `proto/etcdserverpb/watch_wire.proto`: each event
//! encoded once per stream and batch, and those bytes copied into every watcher's response
//! (the stream core shares one event value among the watchers that receive it alike). With
//! thousands of watchers on a key, encoding per watcher was most of the cost of a delivery.

use super::convert::kv_out;
use super::Shared;
use crate::history_feed::{HistoryFeed, Published};
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_client::proto::etcdserverpb::watch_request::RequestUnion;
use leasekv_client::proto::mvccpb;
use leasekv_client::EtcdError;
use leasekv_kvstore::auth::PermissionKind;
use leasekv_kvstore::watch::{StreamConfig, WatchResponse, WatchSpec, WatchStream};
use leasekv_kvstore::{Event, EventKind, KeyRange, Revision};
use prost::bytes::Bytes;
use prost::Message;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

/// The wire form of etcd's Watch service (see the module documentation).
pub mod wire {
    #![allow(missing_docs)]
    tonic::include_proto!("etcdserverpb");
}

pub use wire::watch_server::WatchServer;

/// How a node serves watch streams.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    /// How often a watcher that asked for progress notifications and got no events gets
    /// one (etcd's `--experimental-watch-progress-notify-interval`, default 10 minutes).
    pub progress_notify_interval: Duration,
    /// Responses queued for one client before the stream stops reading the history for it.
    pub outbound_responses: usize,
    /// The stream core's limits.
    pub stream: StreamConfig,
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            progress_notify_interval: Duration::from_secs(600),
            outbound_responses: 64,
            stream: StreamConfig::default(),
        }
    }
}

/// The Watch service.
pub struct WatchService {
    shared: Arc<Shared>,
    settings: WatchSettings,
    /// Becomes `true` when the node stops: every stream ends with UNAVAILABLE, so that the
    /// server's graceful shutdown does not wait for watch streams that never end by
    /// themselves, and clients move to another node.
    stopping: watch::Receiver<bool>,
}

impl WatchService {
    /// The service; `stopping` turning `true` ends every stream.
    pub fn new(shared: Arc<Shared>, settings: WatchSettings, stopping: watch::Receiver<bool>) -> Self {
        WatchService { shared, settings, stopping }
    }
}

/// The response stream handed to tonic.
pub type ResponseStream = Pin<Box<dyn Stream<Item = Result<wire::WatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl wire::watch_server::Watch for WatchService {
    type WatchStream = ResponseStream;

    async fn watch(&self, request: Request<Streaming<pb::WatchRequest>>) -> Result<Response<ResponseStream>, Status> {
        let caller = crate::auth::caller_of(&self.shared.node, &request)?;
        Ok(Response::new(self.open(caller, request.into_inner())))
    }
}

impl WatchService {
    /// Serves one watch stream whose requests come from `incoming` (a gRPC stream, or the
    /// JSON objects of an HTTP gateway request): a stream ends when its requests fail or
    /// its responses are dropped, not when the requests end.
    ///
    /// `caller` is judged for each watch created: etcd's READ permission on its range.
    pub fn open<S>(&self, caller: crate::auth::Caller, incoming: S) -> ResponseStream
    where
        S: Stream<Item = Result<pb::WatchRequest, Status>> + Unpin + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(self.settings.outbound_responses.max(1));
        let core = WatchStream::new(self.settings.stream.clone());
        let task = StreamTask { shared: self.shared.clone(), core, tx, caller };
        tokio::spawn(task.run(
            incoming,
            self.shared.node.history(),
            self.stopping.clone(),
            self.settings.progress_notify_interval,
        ));
        Box::pin(ReceiverStream::new(rx))
    }
}

/// The published history head once it reaches `revision`, waiting for the feed (bounded:
/// one second, after which what is published goes).
async fn head_reaching(feed: &mut HistoryFeed, published: &mut Published, revision: Revision) -> Revision {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while published.reader.head() < revision {
        match tokio::time::timeout_at(deadline, feed.changed()).await {
            Ok(true) => *published = feed.latest(),
            _ => break,
        }
    }
    published.reader.head()
}

/// One client stream.
struct StreamTask {
    shared: Arc<Shared>,
    core: WatchStream,
    tx: mpsc::Sender<Result<wire::WatchResponse, Status>>,
    /// Who opened the stream, judged for each watch it creates.
    caller: crate::auth::Caller,
}

/// Why a stream task stops.
enum Ended {
    /// The client went away (closed its side, or the connection broke).
    ClientGone,
}

impl StreamTask {
    async fn run(
        mut self,
        mut incoming: impl Stream<Item = Result<pb::WatchRequest, Status>> + Unpin,
        mut feed: HistoryFeed,
        mut stopping: watch::Receiver<bool>,
        progress_every: Duration,
    ) {
        let mut published = feed.latest();
        // A client that closes its side of the stream still gets its events, as from etcd:
        // only the client cancelling the call (or going away) ends it.
        let mut requests_open = true;
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + progress_every, progress_every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if *stopping.borrow() {
                let _ = self.tx.send(Err(EtcdError::Stopped.status())).await;
                return;
            }
            let head = published.reader.head();
            let owed = self.core.has_work(head);
            let room = self.tx.capacity();
            let tx = self.tx.clone();
            // Requests, the node's progress and shutdown come before sending what is owed,
            // so a stream that always has something to send still hears its client.
            let outcome = tokio::select! {
                biased;
                _ = stopping.changed() => Ok(()),
                request = incoming.next(), if requests_open => match request {
                    Some(Ok(request)) => {
                        let head = match &request.request_union {
                            // A watch created now starts after every write this node already
                            // answered, as etcd's does: the node loop answers a turn's writes
                            // before it publishes their changes, which the feed follows right after.
                            Some(RequestUnion::CreateRequest(_)) => {
                                head_reaching(&mut feed, &mut published, self.shared.node.revision()).await
                            }
                            _ => head,
                        };
                        self.handle(request, head).await
                    }
                    None => {
                        requests_open = false;
                        Ok(())
                    }
                    Some(Err(_)) => Err(Ended::ClientGone),
                },
                changed = feed.changed() => {
                    if !changed {
                        let _ = self.tx.send(Err(EtcdError::Stopped.status())).await;
                        return;
                    }
                    published = feed.latest();
                    Ok(())
                }
                _ = ticker.tick() => {
                    let notifications = self.core.progress_tick(head);
                    self.send_all(notifications).await
                }
                _ = tx.closed() => Err(Ended::ClientGone),
                _ = std::future::ready(()), if owed && room > 0 => {
                    let responses = self.core.poll(&published.reader, room);
                    self.send_all(responses).await
                }
                // Owed but the client's buffer is full: wait until it reads.
                permit = tx.reserve(), if owed && room == 0 => permit.map(drop).map_err(|_| Ended::ClientGone),
            };
            if let Err(Ended::ClientGone) = outcome {
                return;
            }
        }
    }

    /// Serves one client request.
    async fn handle(&mut self, request: pb::WatchRequest, head: Revision) -> Result<(), Ended> {
        let response = match request.request_union {
            Some(RequestUnion::CreateRequest(create)) => {
                if let Err(status) = self.caller.check(&create.key, &create.range_end, PermissionKind::Read) {
                    // etcd's answer: created and canceled at once, with the reason.
                    return self.refuse_watch(create.watch_id, head, status).await;
                }
                Some(self.core.create(spec_in(create), head))
            }
            Some(RequestUnion::CancelRequest(cancel)) => self.core.cancel(cancel.watch_id, head),
            Some(RequestUnion::ProgressRequest(_)) => self.core.request_progress(head),
            // etcd ignores a request with nothing in it.
            None => None,
        };
        self.send_all(response.into_iter().collect()).await
    }

    /// A watch the caller may not create: etcd answers it created and canceled at once,
    /// with the permission error as the cancel reason.
    async fn refuse_watch(&self, watch_id: i64, head: Revision, status: Status) -> Result<(), Ended> {
        let refusal = wire::WatchResponse {
            header: Some(self.shared.header(head)),
            watch_id: if watch_id > 0 { watch_id } else { -1 },
            created: true,
            canceled: true,
            // etcd puts the gRPC error's text there, code included.
            cancel_reason: super::errors::watch_refusal_reason(&status),
            ..Default::default()
        };
        self.tx.send(Ok(refusal)).await.map_err(|_| Ended::ClientGone)
    }

    async fn send_all(&self, responses: Vec<WatchResponse>) -> Result<(), Ended> {
        // The events of one batch are shared among its responses: encode each once. The
        // cache holds the responses' own events, which live until the loop ends, so an
        // address stays unique while it is a key.
        let mut encoded: HashMap<usize, Bytes> = HashMap::new();
        let mut headers = Headers::new(&self.shared);
        for response in responses {
            let out = response_out(response, &mut headers, &mut encoded);
            self.tx.send(Ok(out)).await.map_err(|_| Ended::ClientGone)?;
        }
        Ok(())
    }
}

/// Response headers for one batch of responses: the election term is read once.
struct Headers<'a> {
    shared: &'a Shared,
    last: Option<pb::ResponseHeader>,
}

impl<'a> Headers<'a> {
    fn new(shared: &'a Shared) -> Self {
        Headers { shared, last: None }
    }

    fn at(&mut self, revision: Revision) -> pb::ResponseHeader {
        match &mut self.last {
            Some(header) => {
                header.revision = revision;
                *header
            }
            None => *self.last.insert(self.shared.header(revision)),
        }
    }
}

/// A create request as the stream core takes it, with etcd's conventions: an empty key is
/// the key `"\0"` (the smallest), and a `range_end` of `"\0"` means every key from `key` on.
fn spec_in(create: pb::WatchCreateRequest) -> WatchSpec {
    let key = if create.key.is_empty() { vec![0] } else { create.key };
    let no_put = create.filters.contains(&(pb::watch_create_request::FilterType::Noput as i32));
    let no_delete = create.filters.contains(&(pb::watch_create_request::FilterType::Nodelete as i32));
    WatchSpec {
        range: KeyRange { key, range_end: create.range_end },
        start_revision: crate::fault_injection::watch_start(create.start_revision),
        no_put,
        no_delete,
        prev_kv: create.prev_kv,
        progress_notify: create.progress_notify,
        fragment: create.fragment,
        watch_id: create.watch_id,
    }
}

/// etcd's wire form of a stream response, its events taken from (or added to) `encoded`.
fn response_out(
    response: WatchResponse,
    headers: &mut Headers<'_>,
    encoded: &mut HashMap<usize, Bytes>,
) -> wire::WatchResponse {
    let events = response
        .events
        .iter()
        .map(|event| encoded.entry(Arc::as_ptr(event) as usize).or_insert_with(|| encode_event(event)).clone())
        .collect();
    wire::WatchResponse {
        header: Some(headers.at(response.header_revision)),
        watch_id: response.watch_id,
        created: response.created,
        canceled: response.canceled,
        compact_revision: response.compact_revision,
        cancel_reason: response.cancel_reason,
        fragment: response.fragment,
        events,
    }
}

/// An event as etcd's `mvccpb.Event` message, encoded.
fn encode_event(event: &Event) -> Bytes {
    let message = mvccpb::Event {
        r#type: match event.kind {
            EventKind::Put => mvccpb::event::EventType::Put as i32,
            EventKind::Delete => mvccpb::event::EventType::Delete as i32,
        },
        kv: Some(kv_out(event.kv.clone())),
        prev_kv: event.prev_kv.clone().map(kv_out),
    };
    Bytes::from(message.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasekv_kvstore::KeyValue;

    fn kv(key: &str, value: &str, revision: Revision) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: value.into(),
            create_revision: 2,
            mod_revision: revision,
            version: revision - 1,
            lease: 7,
        }
    }

    /// The wire form must decode, byte for byte, as etcd's own WatchResponse: a client sees
    /// no difference.
    #[test]
    fn the_wire_form_decodes_as_etcds_watch_response() {
        let put = Event { kind: EventKind::Put, kv: kv("/a", "2", 3), prev_kv: Some(kv("/a", "1", 2)) };
        let delete = Event {
            kind: EventKind::Delete,
            kv: KeyValue {
                key: b"/a".to_vec(),
                value: Vec::new(),
                create_revision: 0,
                mod_revision: 4,
                version: 0,
                lease: 0,
            },
            prev_kv: None,
        };
        let header = pb::ResponseHeader { cluster_id: 1, member_id: 2, revision: 4, raft_term: 5 };
        let sent = wire::WatchResponse {
            header: Some(header),
            watch_id: 9,
            created: false,
            canceled: true,
            compact_revision: 3,
            cancel_reason: "why".into(),
            fragment: true,
            events: vec![encode_event(&put), encode_event(&delete)],
        };
        let received = pb::WatchResponse::decode(sent.encode_to_vec().as_slice()).expect("decodes as etcd's");
        let expected = pb::WatchResponse {
            header: Some(header),
            watch_id: 9,
            created: false,
            canceled: true,
            compact_revision: 3,
            cancel_reason: "why".into(),
            fragment: true,
            events: vec![
                mvccpb::Event {
                    r#type: mvccpb::event::EventType::Put as i32,
                    kv: Some(kv_out(put.kv.clone())),
                    prev_kv: Some(kv_out(kv("/a", "1", 2))),
                },
                mvccpb::Event {
                    r#type: mvccpb::event::EventType::Delete as i32,
                    kv: Some(kv_out(delete.kv.clone())),
                    prev_kv: None,
                },
            ],
        };
        assert_eq!(received, expected);
        // And the same bytes as etcd's own encoding.
        assert_eq!(sent.encode_to_vec(), expected.encode_to_vec());
    }
}
