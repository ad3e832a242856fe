//! Watch clients in the simulated cluster, and the writes that give them something to see.
//!
//! Each client holds one stream to one node (any node: followers serve watches too) with a
//! few watchers on random ranges, start revisions (now, past, below the compaction point,
//! future), filters and prev_kv. The node side is the real stream core
//! ([`crate::watch::WatchStream`]) reading the node's own history; between it and the
//! client sits a bounded buffer that the client drains at its own, sometimes slow, pace,
//! so the core's back-pressure path runs. A stream breaks when its node crashes (and now
//! and then for no reason); the client then opens one on another node and resumes each
//! watcher after what it last received. Every response the client reads is checked by
//! [`crate::sim::watch_oracle`].
//!
//! To exercise what only these produce, a writer proposes three-key transactions (several
//! events in one revision) and periodic compactions through the master.

use super::{KvNode, World, MS};
use crate::command::{Command, DeleteRangeRequest, PutRequest, TxnOp, TxnRequest};
use crate::sim::oracle::ViolationKind;
use crate::sim::watch_oracle::{self, Reference, Tracked};
use crate::types::{KeyRange, Revision, NO_LEASE};
use crate::watch::{resume_revision, StreamConfig, WatchId, WatchResponse, WatchSpec, WatchStream, STREAM_PROGRESS_ID};
use std::collections::{BTreeMap, VecDeque};

/// Most watchers one client keeps open.
const MAX_WATCHERS: usize = 4;
/// Keys the writer's transactions touch.
const WATCHED_KEYS: [&str; 4] = ["w/a", "w/b", "w/c", "w/d"];

/// The watch side of one simulated world.
pub(super) struct WatchSide {
    clients: Vec<WatchClient>,
    config: StreamConfig,
    reference: Reference,
    /// Per node: its history was compared with the reference up to this revision.
    checked: Vec<Revision>,
    writes: u64,
    /// Responses checked, for the report.
    pub(super) responses: u64,
    /// Streams reopened on another node.
    pub(super) resumed: u64,
}

struct WatchClient {
    conn: Option<Conn>,
    watchers: Vec<Tracked>,
    slow: bool,
}

/// A client's stream to one node: the node's stream core and what is in flight to the client.
struct Conn {
    node: usize,
    incarnation: u64,
    core: WatchStream,
    buffer: VecDeque<WatchResponse>,
    capacity: usize,
    /// The node's watch id of each of the client's watchers.
    ids: BTreeMap<WatchId, usize>,
    /// The watchers whose created response the client has read: a progress notification
    /// for the whole stream speaks for these (one sent before a watcher existed does not).
    created: std::collections::BTreeSet<WatchId>,
}

impl WatchSide {
    pub(super) fn new(clients: usize, nodes: usize, config: StreamConfig, slow: impl Fn(usize) -> bool) -> Self {
        WatchSide {
            clients: (0..clients).map(|c| WatchClient { conn: None, watchers: Vec::new(), slow: slow(c) }).collect(),
            config,
            reference: Reference::new(),
            checked: vec![1; nodes],
            writes: 0,
            responses: 0,
            resumed: 0,
        }
    }

    pub(super) fn clients(&self) -> usize {
        self.clients.len()
    }
}

impl World {
    /// Compares `node`'s history since last time with the reference, and extends it.
    pub(super) fn observe_history(&mut self, node: usize) {
        let Some(replica) = self.nodes[node].kv.as_ref().map(KvNode::replica) else { return };
        let state = replica.state();
        let head = state.revision();
        let from = self.watch.checked[node].min(self.watch.reference.head) + 1;
        if head < from {
            self.watch.checked[node] = head;
            return;
        }
        if let Ok(events) = state.events_since(from) {
            if let Some(detail) = self.watch.reference.observe(&events) {
                let detail = format!("{}: {detail}", self.nodes[node].id);
                self.oracles.violation(self.now, ViolationKind::WatchHistoryDiverge, detail);
            }
        }
        self.watch.checked[node] = head;
    }

    /// One step of watch client `c`: keep the stream up, act, let the node send, read.
    pub(super) fn watch_tick(&mut self, c: usize) {
        let pace = if self.watch.clients[c].slow { 80 } else { 15 };
        let next = self.now + self.rng.range_u64(2, pace) * MS;
        self.queue.push(next, super::Event::WatchTick { client: c });
        self.check_connection(c);
        if self.watch.clients[c].conn.is_none() && !self.reconnect(c) {
            return;
        }
        if !self.quiet {
            self.client_actions(c);
        }
        self.serve_stream(c);
        let reads = if self.watch.clients[c].slow { self.rng.range_u64(0, 1) } else { self.rng.range_u64(0, 4) };
        for _ in 0..reads {
            if !self.read_one(c) {
                break;
            }
        }
    }

    /// Drops the stream when its node crashed (or, rarely, for no reason: a broken
    /// connection); what was in flight to the client is lost with it.
    fn check_connection(&mut self, c: usize) {
        let Some(conn) = self.watch.clients[c].conn.as_ref() else { return };
        let node = conn.node;
        let gone = !self.is_up(node) || self.nodes[node].incarnation != conn.incarnation;
        if gone || (!self.quiet && self.rng.chance(0.003)) {
            self.watch.clients[c].conn = None;
            let line = format!("watch client {c}: stream to node {} broke", node + 1);
            self.trace(|| line);
        }
    }

    /// Opens a stream on a random live node and re-creates every open watcher, resuming
    /// each after what it received. False when no node is up.
    fn reconnect(&mut self, c: usize) -> bool {
        let up: Vec<usize> = (0..self.nodes.len()).filter(|&n| self.is_up(n)).collect();
        if up.is_empty() {
            return false;
        }
        let node = up[self.rng.range_u64(0, up.len() as u64 - 1) as usize];
        let capacity = self.rng.range_u64(1, 6) as usize;
        let conn = Conn {
            node,
            incarnation: self.nodes[node].incarnation,
            core: WatchStream::new(self.watch.config.clone()),
            buffer: VecDeque::new(),
            capacity,
            ids: BTreeMap::new(),
            created: std::collections::BTreeSet::new(),
        };
        let had_watchers = self.watch.clients[c].watchers.iter().any(|w| !w.done);
        self.watch.clients[c].conn = Some(conn);
        if had_watchers {
            self.watch.resumed += 1;
        }
        for w in 0..self.watch.clients[c].watchers.len() {
            if !self.watch.clients[c].watchers[w].done {
                self.open_watcher(c, w);
            }
        }
        true
    }

    /// Sends a create request for the client's watcher `w` on its current stream.
    fn open_watcher(&mut self, c: usize, w: usize) {
        let tracked = &self.watch.clients[c].watchers[w];
        let start_revision = if tracked.expect_from > 0 {
            resume_revision(tracked.expect_from - 1, &self.watch.config)
        } else {
            tracked.spec.start_revision
        };
        let spec = WatchSpec { start_revision, ..tracked.spec.clone() };
        let Some(head) = self.head_of_conn(c) else { return };
        let Some(conn) = self.watch.clients[c].conn.as_mut() else { return };
        let created = conn.core.create(spec, head);
        conn.ids.insert(created.watch_id, w);
        conn.buffer.push_back(created);
    }

    fn head_of_conn(&self, c: usize) -> Option<Revision> {
        let conn = self.watch.clients[c].conn.as_ref()?;
        Some(self.nodes[conn.node].kv.as_ref().map(KvNode::replica)?.state().revision())
    }

    /// Random client requests: a new watcher, a cancel, a progress request.
    fn client_actions(&mut self, c: usize) {
        let open = self.watch.clients[c].watchers.iter().filter(|w| !w.done).count();
        if open < MAX_WATCHERS && self.rng.chance(0.03) {
            let spec = self.random_spec(c);
            // A watch from a given revision owes everything from there; one "from now"
            // learns where now is from its created response.
            let expect_from = spec.start_revision.max(0);
            self.watch.clients[c].watchers.push(Tracked { spec, expect_from, done: false });
            let w = self.watch.clients[c].watchers.len() - 1;
            self.open_watcher(c, w);
        }
        if self.rng.chance(0.005) {
            let Some(head) = self.head_of_conn(c) else { return };
            let Some(conn) = self.watch.clients[c].conn.as_mut() else { return };
            let ids: Vec<WatchId> = conn.ids.keys().copied().collect();
            if !ids.is_empty() {
                let id = ids[self.rng.range_u64(0, ids.len() as u64 - 1) as usize];
                if let Some(response) = conn.core.cancel(id, head) {
                    conn.buffer.push_back(response);
                }
            }
        }
        if self.rng.chance(0.03) {
            let Some(head) = self.head_of_conn(c) else { return };
            let Some(conn) = self.watch.clients[c].conn.as_mut() else { return };
            if let Some(response) = conn.core.request_progress(head) {
                conn.buffer.push_back(response);
            }
        }
    }

    fn random_spec(&mut self, c: usize) -> WatchSpec {
        let key = |rng: &mut leasekv_lease::rng::SplitMix64| {
            let all: Vec<String> =
                WATCHED_KEYS.iter().map(|k| k.to_string()).chain((0..6).map(|k| format!("k{k}"))).collect();
            all[rng.range_u64(0, all.len() as u64 - 1) as usize].clone()
        };
        let range = match self.rng.range_u64(0, 4) {
            0 => KeyRange::single(key(&mut self.rng)),
            1 => KeyRange::prefix("w/"),
            2 => KeyRange::prefix(""),
            3 => KeyRange::prefix("/lease/"),
            _ => {
                let (a, b) = (key(&mut self.rng), key(&mut self.rng));
                KeyRange::between(a.clone().min(b.clone()), a.max(b))
            }
        };
        let head = self.head_of_conn(c).unwrap_or(1);
        let start_revision = match self.rng.range_u64(0, 3) {
            0 => 0,
            1 => (head - self.rng.range_u64(0, 60) as i64).max(1),
            2 => head + self.rng.range_u64(1, 5) as i64,
            _ => (head - self.rng.range_u64(0, 10) as i64).max(1),
        };
        WatchSpec {
            range,
            start_revision,
            no_put: self.rng.chance(0.1),
            no_delete: self.rng.chance(0.1),
            prev_kv: self.rng.chance(0.5),
            ..WatchSpec::default()
        }
    }

    /// The node sends what its stream core owes, as far as the client's buffer takes it.
    fn serve_stream(&mut self, c: usize) {
        let Some(conn) = self.watch.clients[c].conn.as_ref() else { return };
        let node = conn.node;
        self.observe_history(node);
        let Some(replica) = self.nodes[node].kv.as_ref().map(KvNode::replica) else { return };
        let reader = replica.state().history_reader();
        let Some(conn) = self.watch.clients[c].conn.as_mut() else { return };
        let room = conn.capacity.saturating_sub(conn.buffer.len());
        let out = conn.core.poll(&reader, room);
        conn.buffer.extend(out);
    }

    /// The client reads one response and the oracle checks it. False when none is waiting.
    fn read_one(&mut self, c: usize) -> bool {
        let Some(conn) = self.watch.clients[c].conn.as_mut() else { return false };
        let Some(response) = conn.buffer.pop_front() else { return false };
        let node = conn.node;
        let compacted = self.nodes[node].kv.as_ref().map(KvNode::replica).map_or(0, |r| r.state().compacted_revision());
        let logical = conn.ids.get(&response.watch_id).copied();
        if response.created {
            conn.created.insert(response.watch_id);
        }
        let on_stream: Vec<usize> =
            conn.ids.iter().filter(|(id, _)| conn.created.contains(id)).map(|(_, w)| *w).collect();
        if response.canceled {
            conn.ids.remove(&response.watch_id);
            conn.created.remove(&response.watch_id);
        }
        self.watch.responses += 1;

        let client = &mut self.watch.clients[c];
        let result = if response.watch_id == STREAM_PROGRESS_ID && !response.created {
            let mut all: Vec<&mut Tracked> =
                client.watchers.iter_mut().enumerate().filter(|(i, _)| on_stream.contains(i)).map(|(_, w)| w).collect();
            watch_oracle::check(&self.watch.reference, &response, None, &mut all, compacted)
        } else if let Some(w) = logical {
            watch_oracle::check(&self.watch.reference, &response, Some(&mut client.watchers[w]), &mut [], compacted)
        } else {
            Err((
                ViolationKind::WatchUnknownId,
                format!("a response for watch id {} the client never opened", response.watch_id),
            ))
        };
        if let Err((kind, detail)) = result {
            let detail = format!("watch client {c} on node {}: {detail}", node + 1);
            self.oracles.violation(self.now, kind, detail);
        }
        true
    }

    /// The writer: a three-key transaction through the master (several events at one
    /// revision), and now and then a compaction that keeps the last few dozen revisions.
    pub(super) fn watch_write(&mut self) {
        if self.quiet {
            return;
        }
        let next = self.now + self.rng.range_u64(20, 120) * MS;
        self.queue.push(next, super::Event::WatchWrite);
        let masters = self.masters();
        let Some(&node) = masters.first() else { return };
        let now = self.local(node);
        self.watch.writes += 1;
        let n = self.watch.writes;
        let command = if n.is_multiple_of(10) {
            let Some(replica) = self.nodes[node].kv.as_ref().map(KvNode::replica) else { return };
            let state = replica.state();
            let target = state.revision() - 30;
            if target <= state.compacted_revision() {
                return;
            }
            Command::Compact { revision: target }
        } else {
            let mut keys: Vec<&str> = WATCHED_KEYS.to_vec();
            let skip = self.rng.range_u64(0, keys.len() as u64 - 1) as usize;
            keys.remove(skip);
            let mut success: Vec<TxnOp> = keys
                .iter()
                .map(|k| {
                    TxnOp::Put(PutRequest {
                        key: k.as_bytes().to_vec(),
                        value: format!("{n}").into_bytes(),
                        lease: NO_LEASE,
                        prev_kv: false,
                    })
                })
                .collect();
            if self.rng.chance(0.3) {
                // A delete in the same revision (of a key not written in it).
                let victim = WATCHED_KEYS[skip];
                success
                    .push(TxnOp::DeleteRange(DeleteRangeRequest { range: KeyRange::single(victim), prev_kv: false }));
            }
            Command::Txn(TxnRequest { compare: Vec::new(), success, failure: Vec::new() })
        };
        if let Some(kv) = self.nodes[node].kv.as_mut() {
            let _ = kv.propose_unanswered(now, command);
            self.after_replica(node);
        }
    }
}
