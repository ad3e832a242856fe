//! A watch that survives its node: one watcher on its own stream, reopened on the next
//! endpoint when the stream breaks, resuming from the revision after the last one it
//! delivered, so that the caller sees every event once, in order, without a gap (as long as
//! the history still holds the resume point; otherwise it is told so, with the compaction
//! revision).

use crate::client::{Client, ClientError};
use crate::proto::etcdserverpb::watch_client::WatchClient;
use crate::proto::etcdserverpb::watch_create_request::FilterType;
use crate::proto::etcdserverpb::watch_request::RequestUnion;
use crate::proto::etcdserverpb::{WatchCreateRequest, WatchRequest, WatchResponse};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

/// What to watch and how (etcd's `WatchCreateRequest` without the id).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchOptions {
    /// End of the range (etcd's `range_end`; empty: the key alone; see
    /// [`crate::prefix_range_end`] for a prefix).
    pub range_end: Vec<u8>,
    /// First revision to deliver; 0: changes from now on.
    pub start_revision: i64,
    /// Deliver each event's previous key-value.
    pub prev_kv: bool,
    /// Ask for periodic progress notifications.
    pub progress_notify: bool,
    /// Leave out puts.
    pub no_put: bool,
    /// Leave out deletes.
    pub no_delete: bool,
}

/// What [`Watch::next`] hands back.
#[derive(Debug)]
pub enum WatchUpdate {
    /// A response with events (or a progress notification: no events).
    Response(WatchResponse),
    /// The stream broke and was reopened on `endpoint`, from `from_revision`.
    Resumed {
        /// Where the watch runs now.
        endpoint: String,
        /// The first revision the new stream delivers.
        from_revision: i64,
        /// Why the old stream ended.
        cause: String,
    },
}

/// Why a watch stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The server cancelled the watch: its resume point was compacted away, or it refused it.
    #[error("watch cancelled by {endpoint}: {reason} (compact revision {compact_revision})")]
    Cancelled {
        /// The endpoint that cancelled it.
        endpoint: String,
        /// etcd's cancel reason.
        reason: String,
        /// The compaction point, when that was the cause: watch again from it to go on.
        compact_revision: i64,
    },
    /// No endpoint could take the watch again.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// One open, self-resuming watcher; see the module documentation.
#[derive(Debug)]
pub struct Watch {
    client: Client,
    key: Vec<u8>,
    options: WatchOptions,
    /// The revision to resume from: one past the last delivered event or progress.
    next_revision: i64,
    stream: Option<Open>,
    /// Streams reopened since the last response: each waits a back-off, and too many in a
    /// row (a cluster that keeps ending streams, e.g. while it shuts down) end the watch.
    resumes_in_a_row: u32,
}

#[derive(Debug)]
struct Open {
    endpoint: String,
    /// Kept so that the request side stays open (closing it ends the watch).
    _requests: mpsc::Sender<WatchRequest>,
    responses: Streaming<WatchResponse>,
}

impl Client {
    /// Opens a watch on `key` (and `options.range_end`).
    pub async fn watch(&self, key: impl Into<Vec<u8>>, options: WatchOptions) -> Result<Watch, WatchError> {
        let next_revision = options.start_revision;
        let mut watch =
            Watch { client: self.clone(), key: key.into(), options, next_revision, stream: None, resumes_in_a_row: 0 };
        watch.open().await?;
        Ok(watch)
    }
}

impl Watch {
    /// The endpoint the watch currently runs on.
    pub fn endpoint(&self) -> Option<&str> {
        self.stream.as_ref().map(|s| s.endpoint.as_str())
    }

    /// The revision a reopened stream would start from.
    pub fn next_revision(&self) -> i64 {
        self.next_revision
    }

    /// Opens the stream on the client's current endpoint (failing over as unary calls do)
    /// and waits for its `created` answer.
    async fn open(&mut self) -> Result<(), WatchError> {
        let filters = [(self.options.no_put, FilterType::Noput), (self.options.no_delete, FilterType::Nodelete)]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, f)| *f as i32)
            .collect();
        let create = WatchCreateRequest {
            key: self.key.clone(),
            range_end: self.options.range_end.clone(),
            start_revision: self.next_revision,
            prev_kv: self.options.prev_kv,
            progress_notify: self.options.progress_notify,
            filters,
            ..Default::default()
        };
        let (requests, mut responses) = self
            .client
            .call("Watch", |channel| {
                let create = create.clone();
                async move {
                    let (requests, receiver) = mpsc::channel(4);
                    // Cannot fail: the receiver is alive until the call below consumes it.
                    let _ =
                        requests.send(WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) }).await;
                    let response = WatchClient::new(channel)
                        .max_decoding_message_size(crate::client::MAX_RESPONSE_BYTES)
                        .watch(ReceiverStream::new(receiver))
                        .await?;
                    Ok(response.map(|stream| (requests, stream)))
                }
            })
            .await?;
        let endpoint = self.client.current_endpoint().to_string();
        let after = self.client.policy().request_timeout;
        let created = match tokio::time::timeout(after, responses.message()).await {
            Ok(Ok(Some(created))) => created,
            Ok(Ok(None)) => return Err(ClientError::StreamClosed { endpoint, method: "Watch" }.into()),
            Ok(Err(status)) => {
                return Err(ClientError::Rpc { endpoint, method: "Watch", status: Box::new(status) }.into())
            }
            Err(_) => return Err(ClientError::Timeout { endpoint, method: "Watch", after }.into()),
        };
        if created.canceled {
            return Err(cancelled(endpoint, &created));
        }
        if self.next_revision <= 0 {
            // "From now on": now is the revision the server answered at.
            self.next_revision = created.header.as_ref().map_or(0, |h| h.revision) + 1;
        }
        self.stream = Some(Open { endpoint, _requests: requests, responses });
        Ok(())
    }

    /// The next response, reopening the stream on another endpoint when it breaks (which
    /// is reported as [`WatchUpdate::Resumed`] before the events continue).
    pub async fn next(&mut self) -> Result<WatchUpdate, WatchError> {
        let Some(open) = self.stream.as_mut() else {
            return self.resume("the stream was not open".to_string()).await;
        };
        let cause = match open.responses.message().await {
            Ok(Some(response)) if response.canceled => return Err(cancelled(open.endpoint.clone(), &response)),
            Ok(Some(response)) => {
                self.resumes_in_a_row = 0;
                if let Some(last) = response.events.last().and_then(|e| e.kv.as_ref()) {
                    self.next_revision = last.mod_revision + 1;
                } else if let Some(header) = &response.header {
                    // A progress notification vouches for everything up to its revision.
                    self.next_revision = self.next_revision.max(header.revision + 1);
                }
                return Ok(WatchUpdate::Response(response));
            }
            Ok(None) => format!("{} closed the stream", open.endpoint),
            Err(status) => format!("{}: {}", open.endpoint, status.message()),
        };
        self.resume(cause).await
    }

    async fn resume(&mut self, cause: String) -> Result<WatchUpdate, WatchError> {
        if let Some(old) = self.stream.take() {
            self.client.fail_over_from_endpoint(&old.endpoint);
        }
        let policy = self.client.policy();
        self.resumes_in_a_row += 1;
        if self.resumes_in_a_row > policy.attempts.max(1) {
            return Err(ClientError::Unavailable {
                method: "Watch",
                attempts: self.resumes_in_a_row - 1,
                failures: format!("every reopened stream ended at once; last: {cause}"),
            }
            .into());
        }
        if self.resumes_in_a_row > 1 {
            tokio::time::sleep(policy.backoff(self.resumes_in_a_row - 1)).await;
        }
        self.open().await?;
        Ok(WatchUpdate::Resumed {
            endpoint: self.endpoint().unwrap_or_default().to_string(),
            from_revision: self.next_revision,
            cause,
        })
    }
}

fn cancelled(endpoint: String, response: &WatchResponse) -> WatchError {
    WatchError::Cancelled {
        endpoint,
        reason: response.cancel_reason.clone(),
        compact_revision: response.compact_revision,
    }
}
