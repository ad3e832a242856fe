//! Golden files of every peer message kind: the bytes of each [`Wire`] kind as a build of
//! its protocol version wrote them, committed under `server/tests/golden/wire/v<N>/`, one
//! file per kind in the directory of the version that introduced it. Every later build
//! must decode them to the same message, and encode the message to the same bytes: a
//! change to the encoding (a variant inserted before another shifts postcard's variant
//! numbers, a field added in the middle of a struct shifts every field after it) fails
//! here instead of between two releases of a cluster being upgraded.
//!
//! The files are never edited. A change of the encoding is a new protocol version
//! (`super::version`), whose new or changed kinds get files in its own directory, and the
//! older files stay: they are what the previous release sends. `LEASEKV_BLESS_GOLDEN=1`
//! writes the files that are missing (a new kind), never one that exists.
//!
//! What an older node does with what it does not know: it never receives it. A link speaks
//! the newer version only when both ends do (`Peer.Hello`), and a node sends a peer only
//! what the link's version allows. Within a version, a decoder ignores bytes after a
//! message's last field (`the_bytes_after_a_message_are_ignored`), so a field appended at
//! the very end of a top-level message would be ignored; postcard has no field tags, so
//! that is the only place a field can be added without a new version.

use super::parked::{ParkedKind, ParkedNotice};
use super::version::PEER_PROTOCOL_VERSION;
use super::wire::Wire;
use crate::forward::{MasterAnswer, MasterRequest};
use leasekv_kvstore::command::{
    Applied, CommandResponse, DeleteRangeResponse, LeaseGrantResponse, PutResponse, RangeRequest, RangeResponse,
    TxnOpResponse, TxnResponse,
};
use leasekv_kvstore::log::{
    AcceptedSlot, Entry, LogBallot, LogMessage, Proposal, ProposalId, RequestError, StorageFailure,
};
use leasekv_kvstore::{Command, KeyRange, KeyValue, KvError, PutRequest};
use leasekv_lease::naive::NaiveMessage;
use leasekv_lease::paxos::{AcceptedLease, Body, Message, Proposal as LeaseProposal};
use leasekv_lease::tracker::TrackerMessage;
use leasekv_lease::{Ballot, ElectionMessage, NodeId, ResourceId};
use std::path::PathBuf;
use std::time::Duration;

/// One message kind: its file name, the version that introduced it, the message.
struct Golden {
    name: &'static str,
    since: u32,
    message: Wire,
}

fn golden(name: &'static str, since: u32, message: Wire) -> Golden {
    Golden { name, since, message }
}

fn ballot(counter: u64) -> Ballot {
    Ballot { counter, epoch: 2, node: NodeId(3) }
}

fn log_ballot() -> LogBallot {
    LogBallot { round: 7, node: NodeId(2) }
}

fn kv(key: &str) -> KeyValue {
    KeyValue {
        key: key.as_bytes().to_vec(),
        value: b"{\"addr\":\"10.0.0.7:80\"}".to_vec(),
        create_revision: 5,
        mod_revision: 9,
        version: 3,
        lease: 0x1234,
    }
}

fn entry() -> Entry {
    let put =
        Command::Put(PutRequest { key: b"/servers/1".to_vec(), value: b"up".to_vec(), lease: 0x1234, prev_kv: true });
    Entry { proposals: vec![Proposal { id: ProposalId { node: NodeId(1), incarnation: 4, seq: 11 }, command: put }] }
}

fn election(body: Body) -> Wire {
    Wire::Election(ElectionMessage::PaxosLease(Message { resource: ResourceId(1), epoch: 6, body }))
}

fn log(message: LogMessage) -> Wire {
    Wire::Log(message)
}

fn answer(result: Result<MasterAnswer, RequestError>) -> Wire {
    Wire::Answer(0x0000_0004_0000_0011, result)
}

fn applied(response: CommandResponse) -> Wire {
    answer(Ok(MasterAnswer::Propose(Applied { revision: 42, result: Ok(response) })))
}

/// Every kind of peer message, with the version that introduced it.
fn kinds() -> Vec<Golden> {
    let lease = AcceptedLease { ballot: ballot(4), owner: NodeId(3), remaining: Duration::from_millis(750) };
    let range = RangeRequest { range: KeyRange::prefix(b"/servers/"), limit: 10, count_only: false, keys_only: false };
    let status = leasekv_kvstore::log::LeaseStatus {
        id: 0x1234,
        name: Some("server1".into()),
        granted_ttl: 10,
        remaining: Duration::from_millis(9500),
        keys: vec![b"/servers/1".to_vec()],
    };
    vec![
        // The election (PaxosLease).
        golden("election-prepare-request", 2, election(Body::PrepareRequest { ballot: ballot(5) })),
        golden(
            "election-prepare-response",
            2,
            election(Body::PrepareResponse { ballot: ballot(5), accepted: Some(lease) }),
        ),
        golden(
            "election-prepare-rejected",
            2,
            election(Body::PrepareRejected { ballot: ballot(5), promised: ballot(6) }),
        ),
        golden(
            "election-propose-request",
            2,
            election(Body::ProposeRequest {
                ballot: ballot(5),
                proposal: LeaseProposal { owner: NodeId(3), duration: Duration::from_millis(1000) },
            }),
        ),
        golden(
            "election-propose-response",
            2,
            election(Body::ProposeResponse { ballot: ballot(5), accepted: true, promised: ballot(5) }),
        ),
        golden("election-release", 2, election(Body::Release { ballot: ballot(5) })),
        golden("election-stale-configuration", 2, election(Body::StaleConfiguration { ballot: ballot(5), epoch: 7 })),
        golden(
            "election-learned",
            2,
            election(Body::Learned { owner: NodeId(3), ballot: ballot(5), duration: Duration::from_millis(1000) }),
        ),
        golden(
            "election-hand-over",
            2,
            election(Body::HandOver { to: NodeId(2), released: vec![ballot(5), ballot(6)] }),
        ),
        // The election (the lease tracker and the naive backend, chosen in the config).
        golden(
            "election-tracker-request",
            2,
            Wire::Election(ElectionMessage::Tracker(TrackerMessage::Request {
                request: ballot(5),
                duration: Duration::from_millis(1000),
            })),
        ),
        golden(
            "election-tracker-granted",
            2,
            Wire::Election(ElectionMessage::Tracker(TrackerMessage::Granted { request: ballot(5), term: ballot(5) })),
        ),
        golden(
            "election-tracker-denied",
            2,
            Wire::Election(ElectionMessage::Tracker(TrackerMessage::Denied {
                request: ballot(5),
                holder: Some(NodeId(1)),
                remaining: Duration::from_millis(300),
            })),
        ),
        golden(
            "election-tracker-release",
            2,
            Wire::Election(ElectionMessage::Tracker(TrackerMessage::Release { request: ballot(5) })),
        ),
        golden(
            "election-naive-ask",
            2,
            Wire::Election(ElectionMessage::Naive(NaiveMessage::Ask {
                attempt: ballot(5),
                duration: Duration::from_millis(1000),
            })),
        ),
        golden(
            "election-naive-grant",
            2,
            Wire::Election(ElectionMessage::Naive(NaiveMessage::Grant { attempt: ballot(5) })),
        ),
        golden(
            "election-naive-refuse",
            2,
            Wire::Election(ElectionMessage::Naive(NaiveMessage::Refuse {
                attempt: ballot(5),
                remaining: Duration::from_millis(300),
            })),
        ),
        // The replicated log.
        golden("log-prepare", 2, log(LogMessage::Prepare { ballot: log_ballot(), from: 12 })),
        golden(
            "log-promise",
            2,
            log(LogMessage::Promise {
                ballot: log_ballot(),
                slots: vec![(12, AcceptedSlot { ballot: log_ballot(), entry: entry(), chosen: false })],
                commit: 11,
                compacted: 3,
            }),
        ),
        golden("log-accept", 2, log(LogMessage::Accept { ballot: log_ballot(), slot: 12, entry: entry(), commit: 11 })),
        golden("log-accepted", 2, log(LogMessage::Accepted { ballot: log_ballot(), slot: 12, applied: 11 })),
        golden(
            "log-reject",
            2,
            log(LogMessage::Reject { ballot: log_ballot(), promised: LogBallot { round: 8, node: NodeId(3) } }),
        ),
        golden("log-commit", 2, log(LogMessage::Commit { ballot: log_ballot(), commit: 12 })),
        golden("log-fetch", 2, log(LogMessage::Fetch { from: 4 })),
        golden("log-entries", 2, log(LogMessage::Entries { entries: vec![(4, entry())], commit: 12 })),
        golden("log-snapshot", 2, log(LogMessage::Snapshot { index: 3, data: vec![1, 2, 3, 4] })),
        golden(
            "log-read-lease-ask",
            4,
            log(LogMessage::ReadLeaseAsk { ballot: log_ballot(), incarnation: 3, seq: 17 }),
        ),
        golden(
            "log-read-lease-grant",
            4,
            log(LogMessage::ReadLeaseGrant {
                ballot: log_ballot(),
                incarnation: 3,
                seq: 17,
                valid_for_nanos: 250_000_000,
                through: 12,
            }),
        ),
        golden(
            "log-read-lease-received",
            4,
            log(LogMessage::ReadLeaseReceived { ballot: log_ballot(), incarnation: 3, slot: 12 }),
        ),
        // Requests forwarded to the master.
        golden(
            "forward-propose",
            2,
            Wire::Forward(0x0000_0004_0000_0011, MasterRequest::Propose(entry().proposals[0].command.clone())),
        ),
        golden("forward-read", 2, Wire::Forward(0x0000_0004_0000_0012, MasterRequest::Read(range, 40))),
        golden("forward-keep-alive", 2, Wire::Forward(0x0000_0004_0000_0013, MasterRequest::KeepAlive(0x1234))),
        golden("forward-lease-status", 2, Wire::Forward(0x0000_0004_0000_0014, MasterRequest::LeaseStatus(0x1234))),
        golden("forward-lease-list", 2, Wire::Forward(0x0000_0004_0000_0015, MasterRequest::LeaseList)),
        golden("forward-step-down", 2, Wire::Forward(0x0000_0004_0000_0016, MasterRequest::StepDown)),
        // The master's answers.
        golden("answer-put", 2, applied(CommandResponse::Put(PutResponse { prev_kv: Some(kv("/servers/1")) }))),
        golden(
            "answer-delete-range",
            2,
            applied(CommandResponse::DeleteRange(DeleteRangeResponse { deleted: 1, prev_kvs: vec![kv("/servers/2")] })),
        ),
        golden(
            "answer-txn",
            2,
            applied(CommandResponse::Txn(TxnResponse {
                succeeded: true,
                responses: vec![TxnOpResponse::Put(PutResponse { prev_kv: None })],
            })),
        ),
        golden(
            "answer-lease-grant",
            2,
            applied(CommandResponse::LeaseGrant(LeaseGrantResponse { id: 0x1234, ttl: 10 })),
        ),
        golden(
            "answer-command-failed",
            2,
            answer(Ok(MasterAnswer::Propose(Applied { revision: 42, result: Err(KvError::EmptyKey) }))),
        ),
        golden(
            "answer-read",
            2,
            answer(Ok(MasterAnswer::Read(RangeResponse { kvs: vec![kv("/servers/1")], more: false, count: 1 }, 42))),
        ),
        golden("answer-keep-alive", 2, answer(Ok(MasterAnswer::KeepAlive(10)))),
        golden("answer-lease-status", 2, answer(Ok(MasterAnswer::LeaseStatus(status.clone())))),
        golden("answer-lease-list", 2, answer(Ok(MasterAnswer::LeaseList(vec![status])))),
        golden("answer-stepped-down", 2, answer(Ok(MasterAnswer::SteppedDown))),
        // The master's refusals.
        golden("answer-not-master", 2, answer(Err(RequestError::NotMaster { hint: Some(NodeId(2)) }))),
        golden("answer-indeterminate", 2, answer(Err(RequestError::Indeterminate { hint: None }))),
        golden("answer-not-ready", 2, answer(Err(RequestError::NotReady))),
        golden("answer-busy", 2, answer(Err(RequestError::Busy { pending: 512 }))),
        golden("answer-invalid", 2, answer(Err(RequestError::Invalid(KvError::EmptyKey)))),
        golden("answer-shutting-down", 2, answer(Err(RequestError::ShuttingDown))),
        golden(
            "answer-storage-failed",
            2,
            answer(Err(RequestError::StorageFailed(StorageFailure::reported("storage I/O failed: disk gone")))),
        ),
        golden("answer-peer-protocol", 2, answer(Err(RequestError::PeerProtocol("another kind".into())))),
        golden("answer-overloaded", 2, answer(Err(RequestError::Overloaded { queued: 10_000 }))),
        golden(
            "answer-response-too-large",
            5,
            answer(Err(RequestError::Invalid(KvError::ResponseTooLarge { size: 3 << 30, limit: (1 << 31) - 1 }))),
        ),
        // Transfer notices.
        golden(
            "parked-snapshot",
            2,
            Wire::Parked(ParkedNotice { transfer: 9, kind: ParkedKind::Snapshot { index: 30 }, size: 1 << 20 }),
        ),
        golden(
            "parked-message",
            2,
            Wire::Parked(ParkedNotice { transfer: 10, kind: ParkedKind::Message, size: 5 << 20 }),
        ),
    ]
}

fn path(kind: &Golden) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/wire")
        .join(format!("v{}", kind.since))
        .join(format!("{}.bin", kind.name))
}

fn blessing() -> bool {
    std::env::var("LEASEKV_BLESS_GOLDEN").is_ok_and(|v| v == "1")
}

#[test]
fn every_message_kind_decodes_from_its_golden_file_and_encodes_to_it() {
    let mut failures = Vec::new();
    for kind in kinds() {
        assert!(kind.since <= PEER_PROTOCOL_VERSION, "{}: from a version this build does not speak", kind.name);
        let path = path(&kind);
        let encoded = kind.message.encode();
        let golden = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(_) if blessing() => {
                std::fs::create_dir_all(path.parent().expect("a directory")).expect("golden directory");
                std::fs::write(&path, &encoded).expect("golden file written");
                continue;
            }
            Err(error) => {
                failures
                    .push(format!("{}: {error}; a new kind gets its file with LEASEKV_BLESS_GOLDEN=1", path.display()));
                continue;
            }
        };
        match Wire::decode(&golden) {
            Ok(decoded) if format!("{decoded:?}") == format!("{:?}", kind.message) => {}
            Ok(decoded) => failures.push(format!("{}: decodes to {decoded:?}", path.display())),
            Err(error) => failures.push(format!("{}: does not decode: {error}", path.display())),
        }
        if encoded != golden {
            failures.push(format!(
                "{}: this build encodes the message differently; restore the encoding (new variants and fields \
                 go last), or raise PEER_PROTOCOL_VERSION and give the new encoding a file of its own",
                path.display()
            ));
        }
    }
    assert!(failures.is_empty(), "golden peer messages that no longer hold:\n{}", failures.join("\n"));
}

#[test]
fn every_wire_variant_has_a_golden_kind() {
    let kinds = kinds();
    let has = |f: fn(&Wire) -> bool| kinds.iter().any(|k| f(&k.message));
    assert!(has(|w| matches!(w, Wire::Election(_))));
    assert!(has(|w| matches!(w, Wire::Log(_))));
    assert!(has(|w| matches!(w, Wire::Forward(..))));
    assert!(has(|w| matches!(w, Wire::Answer(..))));
    assert!(has(|w| matches!(w, Wire::Parked(_))));
}

#[test]
fn the_bytes_after_a_message_are_ignored() {
    for kind in kinds() {
        let mut bytes = kind.message.encode();
        bytes.extend_from_slice(&[0x01, 0x7f, 0xff, 0x00]);
        let decoded = Wire::decode(&bytes).unwrap_or_else(|e| panic!("{}: {e}", kind.name));
        assert_eq!(format!("{decoded:?}"), format!("{:?}", kind.message), "{}", kind.name);
    }
}
