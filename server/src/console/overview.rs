//! `/ui/api/overview`: the cluster as this node sees it, as a stream.
//!
//! The answer is chunked newline-delimited JSON, one [`Overview`] per line: the first at
//! once, then a new one whenever anything in it changes (looked at every [`POLL`]), and the
//! same one again every [`HEARTBEAT`] so the page can tell a quiet node from a dead
//! connection. A takeover shows within one poll of this node learning of it.
//!
//! It tells what etcd's Status and MemberList tell without authentication (members, the
//! master, term, revision, sizes, alarms) plus the election backend and this node's health,
//! so it needs no login either.

use crate::gateway::Handle;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::convert::Infallible;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How often the node's state is looked at.
pub const POLL: Duration = Duration::from_millis(200);

/// How often an unchanged overview is sent again.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// How often the health check (a linearizable read) runs; it runs beside the polls, so a
/// slow one (up to two seconds, with a master just gone) never holds back a takeover.
const HEALTH_EVERY: Duration = Duration::from_secs(2);

/// How long the node loop may take to answer its status before this poll goes without it.
const STATUS_WAIT: Duration = Duration::from_secs(1);

/// One member, as the overview lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemberView {
    /// The member id in hex, as etcdctl prints it.
    pub id: String,
    /// The member's name (empty until it has published one).
    pub name: String,
    /// Where its peers reach it.
    pub peer_urls: Vec<String>,
    /// Where clients reach it.
    pub client_urls: Vec<String>,
    /// A learner (receives the log, does not vote).
    pub learner: bool,
}

/// The cluster as this node sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overview {
    /// This node's member id, in hex.
    pub node_id: String,
    /// The election backend (`paxoslease` or `lease-tracker`).
    pub backend: &'static str,
    /// The master this node knows of, in hex; `None` while there is none.
    pub master_id: Option<String>,
    /// Whether this node is the master.
    pub is_master: bool,
    /// The term (as etcd's `raft_term`: it grows with every takeover).
    pub term: u64,
    /// The members.
    pub members: Vec<MemberView>,
    /// The store's revision on this node.
    pub revision: i64,
    /// The history's compaction point (0: never compacted).
    pub compacted: i64,
    /// Bytes the storage takes on disk, when known.
    pub db_size: Option<u64>,
    /// Bytes in use, what the quota measures.
    pub bytes_in_use: u64,
    /// The space quota (0: none).
    pub quota_bytes: u64,
    /// Raised alarms, as `NOSPACE on 2`.
    pub alarms: Vec<String>,
    /// `None` when this node is healthy, else why not (as `/health` says it).
    pub unhealthy: Option<String>,
}

/// `GET /ui/api/overview`.
pub async fn stream(State(gateway): State<Handle>) -> Response {
    let watch = Watcher { gateway, last: None, sent_at: Instant::now(), health: Health::default() };
    let lines = futures_util::stream::unfold(watch, |mut watch| async move {
        let line = watch.next_change().await?;
        Some((Ok::<_, Infallible>(line), watch))
    });
    ([(header::CONTENT_TYPE, "application/x-ndjson"), (header::CACHE_CONTROL, "no-store")], Body::from_stream(lines))
        .into_response()
}

/// The health check running beside the polls, and its last answer.
#[derive(Default)]
struct Health {
    running: Option<JoinHandle<Result<(), String>>>,
    started: Option<Instant>,
    last: Option<String>,
}

/// One overview stream's state.
struct Watcher {
    gateway: Handle,
    last: Option<Overview>,
    sent_at: Instant,
    health: Health,
}

impl Watcher {
    /// The next line to send; `None` once the node is shutting down.
    async fn next_change(&mut self) -> Option<Bytes> {
        let mut stopping = self.gateway.stopping.clone();
        loop {
            if *stopping.borrow() {
                return None;
            }
            self.tend_health().await;
            let overview = compose(&self.gateway, self.health.last.clone()).await;
            let changed = self.last.as_ref() != Some(&overview);
            if changed || self.last.is_none() || self.sent_at.elapsed() >= HEARTBEAT {
                let mut line = serde_json::to_vec(&overview).unwrap_or_default();
                line.push(b'\n');
                self.last = Some(overview);
                self.sent_at = Instant::now();
                return Some(Bytes::from(line));
            }
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = stopping.changed() => return None,
            }
        }
    }

    /// Collects a finished health check and starts the next one when it is due.
    async fn tend_health(&mut self) {
        if let Some(running) = &self.health.running {
            if !running.is_finished() {
                return;
            }
            if let Some(running) = self.health.running.take() {
                self.health.last = match running.await {
                    Ok(Ok(())) => None,
                    Ok(Err(reason)) => Some(reason),
                    Err(_) => Some("the health check did not finish".to_string()),
                };
            }
        }
        if self.health.started.is_none_or(|at| at.elapsed() >= HEALTH_EVERY) {
            let gateway = self.gateway.clone();
            self.health.started = Some(Instant::now());
            self.health.running = Some(tokio::spawn(async move { crate::gateway::health::check(&gateway, &[]).await }));
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        if let Some(running) = self.health.running.take() {
            running.abort();
        }
    }
}

/// The overview now.
async fn compose(gateway: &Handle, unhealthy: Option<String>) -> Overview {
    let shared = &gateway.shared;
    let node = &shared.node;
    let election = node.election.status();
    let now = node.election.now();
    let master = if election.master.is_some() { Some(shared.me) } else { election.hint };
    let status = tokio::time::timeout(STATUS_WAIT, node.status()).await.ok().and_then(Result::ok);
    let members = node
        .membership()
        .members()
        .map(|m| MemberView {
            id: format!("{:x}", m.id.0),
            name: m.name.clone(),
            peer_urls: m.peer_urls.clone(),
            client_urls: m.client_urls.clone(),
            learner: m.learner,
        })
        .collect();
    Overview {
        node_id: format!("{:x}", shared.me.0),
        backend: node.election.name(),
        master_id: master.map(|m| format!("{:x}", m.0)),
        is_master: election.is_master_at(now),
        term: node.term(),
        members,
        revision: status.as_ref().map_or_else(|| node.revision(), |s| s.revision),
        compacted: status.as_ref().map_or(0, |s| s.compacted),
        db_size: status.as_ref().and_then(|s| s.db_size),
        bytes_in_use: status.as_ref().map_or(0, |s| s.bytes_in_use),
        quota_bytes: status.as_ref().map_or(0, |s| s.quota_bytes),
        alarms: status
            .as_ref()
            .map(|s| s.alarms.iter().map(|a| format!("{} on {:x}", a.kind.etcd_name(), a.member)).collect())
            .unwrap_or_default(),
        unhealthy: if master.is_none() { Some("RAFT NO LEADER".to_string()) } else { unhealthy },
    }
}
