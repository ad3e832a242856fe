//! A write whose outcome is unknown is marked in gRPC metadata by the server and never
//! retried by our client; an ordinary UNAVAILABLE is. Over a real loopback gRPC connection,
//! against a stub KV server built from our generated traits, so the marker is proven to
//! survive tonic's encoding of a status.

use leasekv_client::proto::etcdserverpb::kv_server::{Kv, KvServer};
use leasekv_client::proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse,
    RangeRequest, RangeResponse, TxnRequest, TxnResponse,
};
use leasekv_client::{indeterminate_write, Client, RetryPolicy, INDETERMINATE_WRITE};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// Answers every put with `answer` and counts the puts it saw.
struct FailingKv {
    puts: Arc<AtomicUsize>,
    answer: fn() -> Status,
}

#[tonic::async_trait]
impl Kv for FailingKv {
    type RangeStreamStream = crate::NoRangeStream;

    async fn range_stream(&self, _: Request<RangeRequest>) -> Result<Response<Self::RangeStreamStream>, Status> {
        Err(Status::unimplemented("range stream"))
    }

    async fn range(&self, _: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        Err(Status::unimplemented("range"))
    }

    async fn put(&self, _: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        Err((self.answer)())
    }

    async fn delete_range(&self, _: Request<DeleteRangeRequest>) -> Result<Response<DeleteRangeResponse>, Status> {
        Err(Status::unimplemented("delete_range"))
    }

    async fn txn(&self, _: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        Err(Status::unimplemented("txn"))
    }

    async fn compact(&self, _: Request<CompactionRequest>) -> Result<Response<CompactionResponse>, Status> {
        Err(Status::unimplemented("compact"))
    }
}

/// Serves a [`FailingKv`] on loopback, sends one put through [`Client`] with three attempts,
/// and returns the client's error with the number of puts the server saw.
async fn put_against(answer: fn() -> Status) -> (leasekv_client::ClientError, usize) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let endpoint = format!("127.0.0.1:{}", listener.local_addr().expect("local addr").port());
    let puts = Arc::new(AtomicUsize::new(0));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(KvServer::new(FailingKv { puts: puts.clone(), answer }))
            .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), async {
                let _ = stopped.await;
            }),
    );
    let policy = RetryPolicy { attempts: 3, initial_backoff: Duration::from_millis(1), ..RetryPolicy::default() };
    let client = Client::connect_with(&[endpoint], policy).await.expect("connect to the stub");
    let error = client.put("/k", "v", 0, false).await.expect_err("the stub fails every put");
    let _ = stop.send(());
    server.await.expect("join the stub server").expect("the stub server ran cleanly");
    (error, puts.load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_write_marked_indeterminate_is_not_retried() {
    let (error, puts) = put_against(indeterminate_write).await;
    assert_eq!(puts, 1, "a write that may have been applied is sent once");
    assert!(error.is_indeterminate(), "the marker survives the wire: {error}");
    assert!(error.to_string().contains(INDETERMINATE_WRITE), "etcd's message is kept: {error}");
}

#[tokio::test]
async fn an_unavailable_that_says_nothing_was_done_is_retried() {
    // Negative control: etcd's "no leader" says the write never reached a leader.
    let (error, puts) = put_against(|| Status::unavailable("etcdserver: no leader")).await;
    assert_eq!(puts, 3, "every attempt is used");
    assert!(!error.is_indeterminate(), "{error}");
}

#[tokio::test]
async fn etcds_own_timeout_after_a_leader_failure_is_not_retried_either() {
    // An etcd server sends the message without leasekv's marker: as etcd's clients, the
    // client does not send again a write that may have been applied. The marker alone
    // decides `is_indeterminate`; the enum of etcd's errors decides the retry.
    let (error, puts) = put_against(|| Status::unavailable(INDETERMINATE_WRITE)).await;
    assert_eq!(puts, 1, "sent once");
    assert!(!error.is_indeterminate(), "no marker: {error}");
    assert_eq!(error.etcd_error(), Some(leasekv_client::EtcdError::TimeoutDueToLeaderFail));
}
