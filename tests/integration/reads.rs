//! Reads off the node loop, on real `kvserver` processes: etcd 3.7's RangeStream against
//! Range (as etcd's own `TestV3RangeRequest`, `TestV3RangeStreamCount` and its
//! write-between-chunks and compaction cases define it), and a read storm that must not
//! cost the master its lease.

use crate::common;

use common::cluster::{client, runtime, Cluster};
use leasekv::client::proto::etcdserverpb::{RangeRequest, RangeResponse};
use leasekv::client::{prefix_range_end, Client};
use std::time::{Duration, Instant};
use tonic::Code;

fn prefix(p: &str) -> RangeRequest {
    RangeRequest { key: p.as_bytes().to_vec(), range_end: prefix_range_end(p.as_bytes()), ..Default::default() }
}

/// Puts `n` keys under `p`, values of varied sizes, 32 at a time.
///
/// A put answered "unavailable" (a master change while CI's other tests load the machine:
/// the fill is not what these tests measure) is tried again, at most four times; a put
/// writes the same value each time, so a retried put that had committed changes nothing.
async fn fill(c: &Client, p: &str, n: usize) {
    let mut pending = Vec::new();
    for i in 0..n {
        let c = c.clone();
        let (key, value) = (format!("{p}{i:05}"), "v".repeat(1 + (i * 37) % 700));
        pending.push(tokio::spawn(async move {
            for _ in 0..4 {
                match c.put(key.clone(), value.clone(), 0, false).await {
                    Err(leasekv::client::ClientError::Rpc { status, .. }) if status.code() == Code::Unavailable => {
                        tokio::time::sleep(Duration::from_millis(500)).await
                    }
                    other => return other.expect("put"),
                }
            }
            c.put(key, value, 0, false).await.expect("put")
        }));
        if pending.len() == 32 {
            for p in pending.drain(..) {
                p.await.expect("a put task");
            }
        }
    }
    for p in pending {
        p.await.expect("a put task");
    }
}

/// Every chunk of a RangeStream, in order.
async fn chunks(c: &Client, request: RangeRequest) -> Result<Vec<RangeResponse>, tonic::Status> {
    let mut stream = c.range_stream(request).await.map_err(|e| tonic::Status::internal(e.to_string()))?;
    let mut all = Vec::new();
    while let Some(chunk) = stream.message().await? {
        all.push(chunk.range_response.unwrap_or_default());
    }
    Ok(all)
}

/// The chunks merged as etcd's `proto.Merge` would, after checking that only the last
/// carries the header, `more` and `count`.
fn merged(chunks: Vec<RangeResponse>) -> RangeResponse {
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.iter().enumerate() {
        if i < last {
            assert!(chunk.header.is_none() && !chunk.more && chunk.count == 0, "chunk {i} of {last}: kvs only");
        }
    }
    let mut merged = RangeResponse::default();
    for chunk in chunks {
        merged.kvs.extend(chunk.kvs);
        if chunk.header.is_some() {
            merged.header = chunk.header;
            merged.more = chunk.more;
            merged.count = chunk.count;
        }
    }
    merged
}

fn summary(r: &RangeResponse) -> (usize, bool, i64, i64, Vec<Vec<u8>>) {
    let keys = r.kvs.iter().map(|kv| kv.key.clone()).collect();
    (r.kvs.len(), r.more, r.count, r.header.as_ref().map_or(0, |h| h.revision), keys)
}

#[test]
fn range_stream_answers_what_range_answers_in_chunks_at_one_revision() {
    let cluster = Cluster::start("paxoslease");
    runtime().block_on(async {
        let c = client(&cluster.endpoint(1)).await;
        fill(&c, "/s/", 2500).await;
        let at = c.range(prefix("/s/")).await.expect("range").header.expect("header").revision;
        c.put("/s/zzz-later", "after", 0, false).await.expect("put");
        let requests = [
            prefix("/s/"),
            RangeRequest { limit: 5, ..prefix("/s/") },
            RangeRequest { limit: 100, ..prefix("/s/") },
            RangeRequest { limit: 2400, ..prefix("/s/") },
            RangeRequest { keys_only: true, ..prefix("/s/") },
            RangeRequest { serializable: true, ..prefix("/s/") },
            RangeRequest { revision: at, ..prefix("/s/") },
            RangeRequest { count_only: true, ..prefix("/s/") },
            RangeRequest { key: b"/s/01000".to_vec(), ..Default::default() },
            RangeRequest { key: b"/s/missing".to_vec(), ..Default::default() },
            RangeRequest { key: b"/s/01000".to_vec(), range_end: vec![0], ..Default::default() },
        ];
        for request in requests {
            let unary = c.range(request.clone()).await.expect("range");
            let streamed = chunks(&c, request.clone()).await.expect("stream");
            let n = streamed.len();
            if request.limit == 0 && !request.count_only && request.range_end.len() > 1 {
                assert!(n > 3, "a large range comes in several chunks: {n}");
            }
            let streamed = merged(streamed);
            assert_eq!(summary(&streamed), summary(&unary), "{request:?} in {n} chunks");
            assert_eq!(streamed.kvs, unary.kvs);
        }
        // The client's merged read and kvcli's use of it.
        let whole = c.range_streamed(prefix("/s/")).await.expect("merged");
        assert_eq!(whole.kvs.len(), 2501);
    });
}

/// etcd's `TestV3RangeStreamCount`: 25 keys, the count and `more` of each limit.
#[test]
fn range_stream_counts_as_etcd_does() {
    let cluster = Cluster::start("paxoslease");
    runtime().block_on(async {
        let c = client(&cluster.endpoint(2)).await;
        fill(&c, "/c/", 25).await;
        for (limit, count, more, keys, min_chunks) in [
            (0, 25, false, 25, 2),
            (5, 25, true, 5, 1),
            (10, 25, true, 10, 1),
            (25, 25, false, 25, 2),
            (100, 25, false, 25, 2),
        ] {
            let streamed = chunks(&c, RangeRequest { limit, ..prefix("/c/") }).await.expect("stream");
            assert!(streamed.len() >= min_chunks, "limit {limit}: {} chunks", streamed.len());
            let r = merged(streamed);
            assert_eq!((r.count, r.more, r.kvs.len()), (count, more, keys), "limit {limit}");
        }
    });
}

/// Writes made while a stream runs are not in it; a compaction past its revision ends it
/// with etcd's error; sorted and filtered requests are refused as etcd 3.7 refuses them.
#[test]
fn range_stream_keeps_its_revision_and_refuses_what_etcd_refuses() {
    let cluster = Cluster::start("paxoslease");
    runtime().block_on(async {
        let c = client(&cluster.endpoint(0)).await;
        fill(&c, "/w/", 2000).await;
        let before = c.range(prefix("/w/")).await.expect("range");
        let mut stream = c.range_stream(prefix("/w/")).await.expect("stream");
        let mut got =
            stream.message().await.expect("first chunk").expect("a chunk").range_response.unwrap_or_default().kvs;
        for i in (0..2000).step_by(100) {
            c.put(format!("/w/{i:05}"), "changed", 0, false).await.expect("put");
        }
        c.put("/w/99999", "new", 0, false).await.expect("put");
        let mut header = None;
        while let Some(chunk) = stream.message().await.expect("chunks") {
            let chunk = chunk.range_response.unwrap_or_default();
            got.extend(chunk.kvs);
            header = header.or(chunk.header);
        }
        assert_eq!(header.expect("a last chunk").revision, before.header.expect("header").revision);
        assert_eq!(got, before.kvs, "the keys as they were when the stream began");

        // A stream longer than what the server may have sent ahead into the connection's
        // HTTP/2 windows and its own queue of chunks when the compaction comes: 9 MiB.
        for i in 0..600 {
            c.put(format!("/long/{i:04}"), vec![b'v'; 16 << 10], 0, false).await.expect("a 16 KiB put");
        }
        let mut stream = c.range_stream(prefix("/long/")).await.expect("stream");
        stream.message().await.expect("first chunk");
        c.put("/w/after", "x", 0, false).await.expect("put");
        let now = c.range(prefix("/w/")).await.expect("range").header.expect("header").revision;
        c.compact(now, true).await.expect("compaction");
        let mut ended = None;
        loop {
            match stream.message().await {
                Ok(Some(chunk)) => assert!(chunk.range_response.unwrap_or_default().header.is_none(), "no last chunk"),
                Ok(None) => break,
                Err(status) => {
                    ended = Some(status);
                    break;
                }
            }
        }
        let ended = ended.expect("the compaction ends the stream with an error");
        assert_eq!(ended.message(), "etcdserver: mvcc: required revision has been compacted");

        let sorted = RangeRequest { sort_order: 2, ..prefix("/w/") };
        let refused = chunks(&c, sorted).await.expect_err("descending is refused");
        assert!(refused.message().contains("RangeStream does not support custom sort orders"), "{refused:?}");
        let refused = c.range_stream(RangeRequest { min_mod_revision: 2, ..prefix("/w/") }).await.expect_err("filter");
        assert_eq!(refused.code(), Some(Code::Unimplemented));
    });
}

/// Large reads against every member (counts, whole-range reads, paginated scans) while
/// writes go on: no master change, every read and write answered. Before reads left the
/// node loop, this cost the master its lease within seconds.
#[test]
fn a_read_storm_costs_the_master_nothing() {
    let cluster = Cluster::start("paxoslease");
    runtime().block_on(async {
        let c = client(&cluster.endpoint(0)).await;
        fill(&c, "/storm/", 20_000).await;
        let term = c.status().await.expect("status").raft_term;
        let until = Instant::now() + Duration::from_secs(6);
        let mut tasks = Vec::new();
        for member in 0..3 {
            for kind in 0..3 {
                let c = client(&cluster.endpoint(member)).await;
                tasks.push(tokio::spawn(async move {
                    let mut reads = 0;
                    while Instant::now() < until {
                        let request = match kind {
                            0 => RangeRequest { count_only: true, ..prefix("/storm/") },
                            1 => prefix("/storm/"),
                            _ => RangeRequest { limit: 500, revision: 0, ..prefix("/storm/") },
                        };
                        let r = c.range(request).await.expect("a read under the storm");
                        assert_eq!(r.count, 20_000);
                        reads += 1;
                    }
                    reads
                }));
            }
        }
        let writer = {
            let c = c.clone();
            tokio::spawn(async move {
                let mut n = 0;
                while Instant::now() < until {
                    c.put(format!("/other/{}", n % 50), "w", 0, false).await.expect("a write under the storm");
                    n += 1;
                }
                n
            })
        };
        let mut reads = 0;
        for task in tasks {
            reads += task.await.expect("a reader");
        }
        let writes = writer.await.expect("the writer");
        assert!(reads > 9 && writes > 10, "reads {reads}, writes {writes}");
        assert_eq!(c.status().await.expect("status").raft_term, term, "no master change during the storm");
    });
}

/// The status of a failed call.
fn status_of(error: leasekv::client::ClientError) -> tonic::Status {
    match error {
        leasekv::client::ClientError::Rpc { status, .. } => *status,
        other => panic!("not an answer from the server: {other}"),
    }
}

/// A Range past `[limits] max_response_bytes` is refused with grpc-go's text (what etcd's
/// clients get from etcd) and the limit; answers held past `[reads] memory_budget_bytes`
/// (here: one whose client reads none of it) make the next large answer wait for them, and
/// it is refused with etcd's "too many requests" until the first is let go.
#[test]
fn big_reads_keep_to_the_response_limit_and_the_read_budget() {
    use http_body_util::Full;
    use prost::Message;
    const MIB: usize = 1 << 20;
    let limits = "[limits]\nmax_response_bytes = 52428800\n[reads]\nmemory_budget_bytes = 67108864\n";
    let cluster = Cluster::start_with("paxoslease", limits);
    runtime().block_on(async {
        let c = client(&cluster.endpoint(0)).await;
        for i in 0..52 {
            c.put(format!("/big/{i:03}"), vec![b'v'; MIB], 0, false).await.expect("a 1 MiB put");
        }
        let local = |request: RangeRequest| RangeRequest { serializable: true, ..request };

        let answer = c.range(local(prefix("/big/"))).await.map(|r| r.kvs.len());
        let refused = status_of(answer.expect_err("52 MiB > 50 MiB"));
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert!(refused.message().starts_with("grpc: trying to send message larger than max ("), "{refused:?}");
        assert!(refused.message().contains(" vs. 52428800)"), "the limit named: {refused:?}");
        let page = c.range(local(RangeRequest { limit: 40, ..prefix("/big/") })).await.expect("40 MiB fits");
        assert_eq!((page.kvs.len(), page.more, page.count), (40, true, 52));

        // A client that asks for 40 MiB and reads none of it holds them.
        let h2: hyper_util::client::legacy::Client<_, Full<hyper::body::Bytes>> =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(true)
                .build_http();
        let message = local(RangeRequest { limit: 40, ..prefix("/big/") }).encode_to_vec();
        let mut framed = vec![0u8];
        framed.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
        framed.extend_from_slice(&message);
        let endpoint = cluster.endpoint(0);
        let request = hyper::Request::post(format!("http://{endpoint}/etcdserverpb.KV/Range"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(hyper::body::Bytes::from(framed)))
            .expect("a request");
        let unread = h2.request(request).await.expect("an answer's head");
        assert_eq!(unread.status(), 200);

        let answer = c.range(local(RangeRequest { limit: 30, ..prefix("/big/") })).await;
        let refused = status_of(answer.map(|r| r.kvs.len()).expect_err("40 + 30 MiB > 64 MiB"));
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert_eq!(refused.message(), "etcdserver: too many requests", "etcd's text, which its clients match");
        let why = leasekv::client::errors::explanation(&refused).expect("the budget named in the details");
        assert!(why.contains("memory_budget_bytes = 67108864"), "{why}");
        let small = c.range(local(RangeRequest { limit: 10, ..prefix("/big/") })).await.expect("40 + 10 MiB fit");
        assert_eq!(small.kvs.len(), 10);

        drop(unread);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match c.range(local(RangeRequest { limit: 30, ..prefix("/big/") })).await {
                Ok(r) => break assert_eq!(r.kvs.len(), 30),
                Err(e) if Instant::now() < deadline => {
                    assert_eq!(status_of(e).code(), Code::ResourceExhausted);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("the budget was never let go: {e}"),
            }
        }
    });
}

/// A Txn that only reads is answered from reads at one revision, not through the log: its
/// answers are a Txn's (both branches, a nested Txn, a read at a past revision, a future
/// revision refused), and the log's commit index does not move while it runs.
#[test]
fn a_txn_that_only_reads_takes_no_log_slot() {
    use leasekv::client::proto::etcdserverpb::{compare, request_op, response_op, Compare, RequestOp, TxnRequest};
    let cluster = Cluster::start("paxoslease");
    runtime().block_on(async {
        let c = client(&cluster.endpoint(1)).await;
        let first = c.put("/t/a", "1", 0, false).await.expect("put").header.expect("header").revision;
        c.put("/t/a", "2", 0, false).await.expect("put");
        c.put("/t/b", "3", 0, false).await.expect("put");
        let range = |key: &str, revision: i64| RequestOp {
            request: Some(request_op::Request::RequestRange(RangeRequest {
                revision,
                ..RangeRequest { key: key.as_bytes().to_vec(), ..Default::default() }
            })),
        };
        let value_is = |key: &str, value: &str| Compare {
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Value as i32,
            key: key.as_bytes().to_vec(),
            target_union: Some(compare::TargetUnion::Value(value.as_bytes().to_vec())),
            range_end: Vec::new(),
        };
        let txn = |expected: &str| TxnRequest {
            compare: vec![value_is("/t/a", expected)],
            success: vec![
                RequestOp { request: Some(request_op::Request::RequestRange(prefix("/t/"))) },
                range("/t/a", first),
                RequestOp {
                    request: Some(request_op::Request::RequestTxn(TxnRequest {
                        compare: vec![value_is("/t/b", "3")],
                        success: vec![range("/t/b", 0)],
                        failure: vec![],
                    })),
                },
            ],
            failure: vec![range("/t/b", 0)],
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        let commit = c.status().await.expect("status").raft_index;
        let values = |r: &Option<response_op::Response>| match r {
            Some(response_op::Response::ResponseRange(r)) => {
                r.kvs.iter().map(|kv| String::from_utf8_lossy(&kv.value).into_owned()).collect::<Vec<_>>()
            }
            Some(response_op::Response::ResponseTxn(t)) => vec![format!("txn {}", t.succeeded)],
            other => panic!("not a read: {other:?}"),
        };
        for _ in 0..10 {
            let held = c.txn(txn("2")).await.expect("a read-only txn");
            assert!(held.succeeded);
            let answers: Vec<_> = held.responses.iter().map(|r| values(&r.response)).collect();
            assert_eq!(answers, [vec!["2", "3"], vec!["1"], vec!["txn true"]], "{held:?}");
            assert_eq!(held.header.expect("header").revision, first + 2);
            let failed = c.txn(txn("1")).await.expect("a read-only txn");
            assert!(!failed.succeeded);
            assert_eq!(failed.responses.iter().map(|r| values(&r.response)).collect::<Vec<_>>(), [vec!["3"]]);
        }
        let future = TxnRequest { success: vec![range("/t/a", first + 100)], ..Default::default() };
        let refused = status_of(c.txn(future).await.expect_err("a future revision"));
        assert_eq!(refused.code(), Code::OutOfRange, "{refused:?}");
        assert!(refused.message().contains("required revision is a future revision"), "{refused:?}");
        assert_eq!(c.status().await.expect("status").raft_index, commit, "the reads took no log slot");
    });
}
