use super::*;
use crate::forward::MasterRequest;
use crate::peer::parked::ParkedNotice;
use crate::peer::proto::peer_server::{Peer, PeerServer};
use crate::peer::proto::{Empty, FetchParkedRequest, HelloResponse, MembersRequest, MembersResponse, ParkedChunk};
use leasekv_kvstore::log::{Entry, LogBallot, Proposal, ProposalId};
use leasekv_kvstore::{Command, Limits, PutRequest, TxnOp, TxnRequest};
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

/// A network whose lane queues the test reads instead of sending.
fn network(me: NodeId, peer: NodeId) -> (PeerNetwork, mpsc::Receiver<Vec<u8>>) {
    let (log_tx, log_rx) = mpsc::channel(16);
    let (election_tx, _) = mpsc::channel(16);
    let channel = Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
    let link = PeerLinks {
        addr: "127.0.0.1:9".into(),
        election: election_tx,
        log: log_tx,
        log_down: Arc::new(AtomicBool::new(false)),
        puller: PeerClient::new(channel),
    };
    let links = Links { peers: HashMap::from([(peer, link)]), members: HashSet::from([me, peer]) };
    let network = PeerNetwork {
        me,
        links: Arc::new(RwLock::new(links)),
        outbox: Outbox::new(),
        inbox: Arc::new(Inbox::default()),
        removed: Arc::new(tokio::sync::watch::channel(None).0),
        tls: None,
        versions: LinkVersions::new(me, Speaks::default()),
        cluster: Some(ClusterId(1)),
        runtime: tokio::runtime::Handle::current(),
    };
    (network, log_rx)
}

fn proposal(seq: u64, command: Command) -> Proposal {
    Proposal { id: ProposalId { node: NodeId(u32::MAX), incarnation: u32::MAX, seq: u64::MAX - seq }, command }
}

fn put(key_len: usize, value_len: usize) -> Command {
    Command::Put(PutRequest { key: vec![b'k'; key_len], value: vec![b'v'; value_len], lease: i64::MIN, prev_kv: true })
}

fn accept(proposals: Vec<Proposal>) -> Wire {
    let ballot = LogBallot { round: u64::MAX, node: NodeId(u32::MAX) };
    Wire::Log(LogMessage::Accept { ballot, slot: u64::MAX, entry: Entry { proposals }, commit: u64::MAX })
}

/// The derivation behind LANE_MESSAGE_MAX, measured: the largest Accepts and forwards
/// the defaults allow stay on the lane with room to spare.
#[test]
fn the_largest_ordinary_messages_fit_a_lane() {
    let limits = Limits::default();
    // One command of the largest key and value.
    let single = accept(vec![proposal(0, put(limits.max_key_bytes, limits.max_value_bytes))]);
    // A full batch: 256 commands whose size estimates add up to max_batch_bytes (1 MiB).
    let per_command = (1 << 20) / 256 - 16;
    let batch = accept((0..256).map(|i| proposal(i, put(16, per_command - 16))).collect());
    // The largest client request (2 MiB on the wire) forwarded to the master: a Txn of
    // 128 puts of just under 16 KiB.
    let txn = TxnRequest {
        compare: Vec::new(),
        success: (0..128)
            .map(|_| {
                TxnOp::Put(PutRequest {
                    key: vec![b'k'; 16],
                    value: vec![b'v'; (16 << 10) - 64],
                    lease: 0,
                    prev_kv: false,
                })
            })
            .collect(),
        failure: Vec::new(),
    };
    let forward = Wire::Forward(u64::MAX, MasterRequest::Propose(Command::Txn(txn.clone())));
    let txn_accept = accept(vec![proposal(0, Command::Txn(txn))]);
    for (what, wire) in [("single", single), ("batch", batch), ("forward", forward), ("txn accept", txn_accept)] {
        let len = wire.encode().len();
        eprintln!("{what}: {len} bytes, lane limit {LANE_MESSAGE_MAX}");
        assert!(len * 3 / 2 < LANE_MESSAGE_MAX, "{what}: {len} bytes is too close to the lane limit");
    }
}

fn notice_of(bytes: &[u8]) -> ParkedNotice {
    match Wire::decode(bytes) {
        Ok(Wire::Parked(notice)) => notice,
        other => panic!("expected a transfer notice, got {other:?}"),
    }
}

// A runtime: the pull client's lazy channel spawns its worker when it is built.
#[tokio::test]
async fn snapshots_and_oversized_messages_are_parked_and_announced() {
    let (me, peer) = (NodeId(1), NodeId(2));
    let (network, mut lane) = network(me, peer);

    network.send_log(peer, LogMessage::Snapshot { index: 42, data: vec![7; 3 * CHUNK_BYTES] });
    let notice = notice_of(&lane.try_recv().expect("a notice on the log lane"));
    assert_eq!((notice.kind, notice.size), (ParkedKind::Snapshot { index: 42 }, 3 * CHUNK_BYTES as u64));
    assert!(lane.try_recv().is_err(), "nothing else on the lane");
    let chunks: Vec<_> = network.outbox().serve(peer, notice.transfer, Instant::now()).expect("parked").collect();
    assert_eq!(chunks.len(), 3);

    // An Entries reply of many large slots: too big for a lane.
    let slot = |i| (i, Entry { proposals: vec![proposal(i, put(16, 1 << 20))] });
    let entries = LogMessage::Entries { entries: (1..=8).map(slot).collect(), commit: 8 };
    network.send_log(peer, entries.clone());
    let notice = notice_of(&lane.try_recv().expect("a notice on the log lane"));
    assert_eq!(notice.kind, ParkedKind::Message);
    let serving = network.outbox().serve(peer, notice.transfer, Instant::now()).expect("parked");
    let bytes: Vec<u8> = serving.flat_map(|c| c.expect("chunk").data).collect();
    assert!(matches!(Wire::decode(&bytes), Ok(Wire::Log(m)) if m == entries));

    // Small messages go on the lane as before.
    network.send_log(peer, LogMessage::Fetch { from: 3 });
    assert!(matches!(Wire::decode(&lane.try_recv().expect("fetch")), Ok(Wire::Log(LogMessage::Fetch { from: 3 }))));
    // ... except a Fetch to a peer whose snapshot is on its way here.
    let incoming = ParkedNotice { transfer: 1, kind: ParkedKind::Snapshot { index: 9 }, size: 1 };
    assert!(network.inbox().offer(peer, incoming).is_some());
    network.send_log(peer, LogMessage::Fetch { from: 3 });
    assert!(lane.try_recv().is_err(), "the repeated Fetch is held back");
    assert_eq!(network.inbox().finish(peer, true), None);
    network.send_log(peer, LogMessage::Fetch { from: 3 });
    assert!(lane.try_recv().is_ok(), "and goes out again once the pull is over");
}

fn lent(queue: mpsc::Receiver<Vec<u8>>) -> LentQueue {
    LentQueue {
        version: crate::peer::version::PEER_PROTOCOL_VERSION,
        me: NodeId(1),
        backlog: Arc::new(Mutex::new(Backlog { queue, carry: None })),
        down: Arc::new(AtomicBool::new(false)),
    }
}

#[tokio::test]
async fn a_backlog_goes_out_as_one_envelope_in_order() {
    let (tx, rx) = mpsc::channel(16);
    for i in 0..3u8 {
        tx.try_send(vec![i]).expect("queued");
    }
    let mut stream = lent(rx);
    let envelope = stream.next().await.expect("an envelope");
    assert_eq!(envelope.from, 1);
    assert_eq!(envelope.payload, vec![0]);
    assert_eq!(envelope.more, vec![vec![1], vec![2]]);
    drop(tx);
    assert!(stream.next().await.is_none(), "the stream ends when the queue closes");
}

#[tokio::test]
async fn a_message_that_does_not_fit_opens_the_next_envelope() {
    let (tx, rx) = mpsc::channel(16);
    tx.try_send(vec![1; 16]).expect("queued");
    tx.try_send(vec![2; BATCH_BYTES]).expect("queued");
    tx.try_send(vec![3; 16]).expect("queued");
    let mut stream = lent(rx);
    let first = stream.next().await.expect("first envelope");
    assert_eq!((first.payload.len(), first.more.len()), (16, 0));
    let second = stream.next().await.expect("second envelope");
    assert_eq!(second.payload.len(), BATCH_BYTES);
    assert!(second.more.is_empty(), "nothing joins an envelope that is already full");
    let third = stream.next().await.expect("third envelope");
    assert_eq!(third.payload, vec![3; 16]);
}

/// A peer of cluster 1 that takes `Send` streams stamped with its cluster and reports
/// every envelope it gets.
struct FakePeer(mpsc::UnboundedSender<PeerEnvelope>);

#[tonic::async_trait]
impl Peer for FakePeer {
    async fn send(&self, request: Request<Streaming<PeerEnvelope>>) -> Result<Response<Empty>, Status> {
        // An unstamped stream passes any cluster's check; this one must name cluster 1.
        if ClusterId(2).check(&request).is_ok() {
            return Err(Status::failed_precondition("the stream carries no cluster id"));
        }
        ClusterId(1).check(&request)?;
        let mut stream = request.into_inner();
        while let Some(envelope) = stream.next().await {
            let _ = self.0.send(envelope?);
        }
        Ok(Response::new(Empty {}))
    }

    /// As a build from before `Hello` answers.
    async fn hello(&self, _: Request<HelloRequest>) -> Result<Response<HelloResponse>, Status> {
        Err(Status::unimplemented("not in this build"))
    }

    async fn members(&self, _: Request<MembersRequest>) -> Result<Response<MembersResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    type FetchParkedStream = tokio_stream::Empty<Result<ParkedChunk, Status>>;

    async fn fetch_parked(&self, _: Request<FetchParkedRequest>) -> Result<Response<Self::FetchParkedStream>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
}

/// Polls `condition` every 10 ms for at most `limit`.
async fn within(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    condition()
}

#[tokio::test]
async fn a_log_lane_is_down_while_its_peer_refuses_and_up_once_it_listens() {
    let (me, peer) = (NodeId(1), NodeId(2));
    // A port nobody listens on (for now): connections to it are refused.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = listener.local_addr().expect("its address");
    drop(listener);
    let network = PeerNetwork::start(me, &[(me, addr), (peer, addr)], None, Speaks::default(), Some(ClusterId(1)));
    assert!(!network.log_lane_down(NodeId(3)), "an unknown peer counts as up");
    assert!(!network.log_lane_down(me), "so does this node");
    assert!(
        within(Duration::from_secs(5), || network.log_lane_down(peer)).await,
        "the lane to a peer that refuses connections is down"
    );

    let (seen, mut envelopes) = mpsc::unbounded_channel();
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        // Someone else took the port meanwhile: the half of the test that needs it
        // cannot run, and the half that ran passed.
        Err(error) => return eprintln!("skipping the second half: {addr} was taken ({error})"),
    };
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(PeerServer::new(FakePeer(seen)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    // The sender tries again within its longest back-off (1 s).
    assert!(
        within(Duration::from_secs(5), || !network.log_lane_down(peer)).await,
        "the lane is up again once the peer listens"
    );
    network.send_log(peer, LogMessage::Fetch { from: 7 });
    let envelope = tokio::time::timeout(Duration::from_secs(5), envelopes.recv())
        .await
        .expect("the message arrives in time")
        .expect("the fake peer is running");
    assert!(matches!(Wire::decode(&envelope.payload), Ok(Wire::Log(LogMessage::Fetch { from: 7 }))));
    server.abort();
}
