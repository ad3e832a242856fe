//! The gateway's streams. A streaming call's request body is a sequence of JSON objects
//! (written at once by curl, or one at a time as a keepalive client renews); its answer is
//! chunked, one `{"result": …}` object and a newline per chunk, sent as soon as it exists,
//! because some clients decode each chunk on its own.

use super::errors;
use super::json;
use axum::body::{Body, Bytes};
use futures_util::stream::unfold;
use prost::Message;
use std::sync::{Arc, Mutex};
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

/// How much of one request object may be buffered: well above any request the node
/// accepts (base64 makes values a third larger).
const OBJECT_LIMIT: usize = 4 * 1024 * 1024;

/// Where the request side records why it stopped early, so that the answer can say so.
pub type Failure = Arc<Mutex<Option<Status>>>;

/// The request objects of `body`, decoded as the message `name`. The first is read before
/// anything is answered: if it is malformed the call fails as a whole, with etcd's answer
/// (HTTP 500, code UNKNOWN, as its gateway reports a failed decode of a stream's first
/// message). A later malformed or oversized object ends the requests and is recorded in
/// `failure`, for the answer to end with.
pub async fn requests<T>(
    name: &'static str,
    body: Body,
    failure: Failure,
) -> Result<impl Stream<Item = Result<T, Status>> + Unpin, Status>
where
    T: Message + Default + 'static,
{
    let mut reader =
        Reader { chunks: body.into_data_stream(), buffer: Vec::new(), ended: false, failed: false, failure };
    let first = match reader.next_object(name).await {
        Ok(Some(value)) => Some(json::decode_value::<T>(name, value).map_err(|s| Status::unknown(s.message()))?),
        Ok(None) => None,
        Err(status) => return Err(Status::unknown(status.message())),
    };
    let first = tokio_stream::iter(first.map(Ok));
    let rest = unfold(reader, move |mut reader| async move {
        if reader.failed {
            return None;
        }
        match reader.next_object(name).await {
            Ok(Some(value)) => match json::decode_value::<T>(name, value) {
                Ok(request) => Some((Ok(request), reader)),
                Err(status) => Some(reader.fail(status)),
            },
            Ok(None) => None,
            Err(status) => Some(reader.fail(status)),
        }
    });
    Ok(Box::pin(first.chain(rest)))
}

/// A request body being split into JSON values.
struct Reader {
    chunks: axum::body::BodyDataStream,
    buffer: Vec<u8>,
    ended: bool,
    failed: bool,
    failure: Failure,
}

impl Reader {
    /// The next JSON value, `None` at the end of the body.
    async fn next_object(&mut self, name: &str) -> Result<Option<serde_json::Value>, Status> {
        loop {
            match next_value(&self.buffer) {
                Parsed::Value(value, used) => {
                    self.buffer.drain(..used);
                    return Ok(Some(value));
                }
                Parsed::Malformed(why) => {
                    return Err(Status::invalid_argument(format!("malformed JSON for {name}: {why}")))
                }
                Parsed::Incomplete if self.ended => {
                    if self.buffer.iter().all(u8::is_ascii_whitespace) {
                        return Ok(None);
                    }
                    return Err(Status::invalid_argument(format!("the body ended inside a JSON object for {name}")));
                }
                Parsed::Incomplete => {}
            }
            if self.buffer.len() > OBJECT_LIMIT {
                return Err(Status::invalid_argument(format!(
                    "a request object for {name} is over {OBJECT_LIMIT} bytes"
                )));
            }
            match self.chunks.next().await {
                Some(Ok(bytes)) => self.buffer.extend_from_slice(&bytes),
                // The client went away or the body ended: either way no more requests.
                Some(Err(_)) | None => self.ended = true,
            }
        }
    }

    /// Ends the requests with `status`: the service sees it as the stream failing (and
    /// stops), and the answer ends with it.
    fn fail<T>(mut self, status: Status) -> (Result<T, Status>, Self) {
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(status.clone());
        self.failed = true;
        (Err(status), self)
    }
}

enum Parsed {
    Value(serde_json::Value, usize),
    Incomplete,
    Malformed(String),
}

/// The first JSON value in `buffer`, and how many bytes it took.
fn next_value(buffer: &[u8]) -> Parsed {
    let mut values = serde_json::Deserializer::from_slice(buffer).into_iter::<serde_json::Value>();
    match values.next() {
        Some(Ok(value)) => Parsed::Value(value, values.byte_offset()),
        Some(Err(e)) if e.is_eof() => Parsed::Incomplete,
        Some(Err(e)) => Parsed::Malformed(e.to_string()),
        None => Parsed::Incomplete,
    }
}

/// The chunked answer of a stream whose messages have the wire form of `name`: each
/// message as `{"result": …}`, a failure as etcd's stream error object (after which the
/// answer ends), and, once the messages end, the request side's failure if it had one.
pub fn answer<T, S>(name: &'static str, messages: S, failure: Failure) -> Body
where
    T: Message + 'static,
    S: Stream<Item = Result<T, Status>> + Send + 'static,
{
    let mut failed = false;
    let chunks = messages
        .map_while(move |item| {
            if failed {
                return None;
            }
            Some(match item {
                Ok(message) => result_chunk(name, &message),
                Err(status) => {
                    failed = true;
                    error_chunk(&status)
                }
            })
        })
        .chain(unfold(Some(failure), |failure| async move {
            let status = failure?.lock().unwrap_or_else(|e| e.into_inner()).take()?;
            Some((error_chunk(&status), None))
        }))
        .map(Ok::<_, std::convert::Infallible>);
    Body::from_stream(chunks)
}

fn result_chunk<T: Message>(name: &str, message: &T) -> Bytes {
    let mut out = Vec::with_capacity(160);
    out.extend_from_slice(b"{\"result\":");
    json::write(name, message, &mut out);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

fn error_chunk(status: &Status) -> Bytes {
    let mut out = errors::stream_error(status).to_string().into_bytes();
    out.push(b'\n');
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasekv_client::proto::etcdserverpb as pb;

    async fn collect<T: Message + Default + 'static>(
        name: &'static str,
        parts: Vec<&'static str>,
    ) -> (Vec<T>, Option<Status>) {
        let chunks =
            tokio_stream::iter(parts.into_iter().map(|p| Ok::<_, std::io::Error>(Bytes::from_static(p.as_bytes()))));
        let failure = Failure::default();
        let requests = match requests::<T>(name, Body::from_stream(chunks), failure.clone()).await {
            Ok(requests) => requests.collect::<Vec<_>>().await,
            Err(status) => return (Vec::new(), Some(status)),
        };
        let failure = failure.lock().unwrap().take();
        let ok: Vec<T> = requests.into_iter().filter_map(Result::ok).collect();
        (ok, failure)
    }

    #[tokio::test]
    async fn request_objects_are_split_wherever_the_chunks_break() {
        let (requests, failure) = collect::<pb::LeaseKeepAliveRequest>(
            "etcdserverpb.LeaseKeepAliveRequest",
            vec!["{\"ID\":\"1\"}{\"I", "D\":2}\n  {", "\"ID\":3}  "],
        )
        .await;
        assert_eq!(requests.iter().map(|r| r.id).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert!(failure.is_none());
    }

    #[tokio::test]
    async fn a_malformed_or_unfinished_object_ends_the_requests_with_a_reason() {
        let (requests, failure) =
            collect::<pb::LeaseKeepAliveRequest>("etcdserverpb.LeaseKeepAliveRequest", vec!["{\"ID\":1}{\"ID\":tru"])
                .await;
        assert_eq!(requests.len(), 1);
        assert_eq!(failure.map(|s| s.code()), Some(tonic::Code::InvalidArgument));
        let (requests, failure) =
            collect::<pb::LeaseKeepAliveRequest>("etcdserverpb.LeaseKeepAliveRequest", vec!["{\"ID\":1}", "{\"ID\":"])
                .await;
        assert_eq!(requests.len(), 1);
        assert!(failure.unwrap().message().contains("ended inside"));
    }
}
