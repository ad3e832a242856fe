//! `/ui/api/overview`: the cluster as this node sees it, as a stream.
//!
//! The answer is chunked newline-delimited JSON, one [`Overview`] per line: the first at
//! once, then a new one whenever anything in it changes (looked at every [`POLL`]), and the
//! same one again every [`HEARTBEAT`] so the page can tell a quiet node from a dead
//! connection. A takeover shows within one poll of this node learning of it.
//!
//! One task per node composes the overview, however many pages watch it ([`OverviewHub`]):
//! a wall of dashboards costs the node what one does. The task starts with the first viewer
//! and ends when the last one leaves.
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
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
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
    /// Whether this node is healthy, as `/health` says it.
    pub health: HealthView,
}

/// This node's health in the overview.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "lowercase")]
pub enum HealthView {
    /// The first check has not finished yet.
    Checking,
    /// `/health` would answer true.
    Healthy,
    /// `/health` would answer false, for this reason.
    Unhealthy(String),
}

/// The composing task's channel, while it runs: the overview every viewer reads.
#[derive(Default)]
pub struct OverviewHub {
    running: Mutex<Option<watch::Sender<Option<Arc<Overview>>>>>,
}

impl OverviewHub {
    /// A viewer's receiver; starts the composing task if none runs.
    fn subscribe(&self, gateway: &Handle) -> watch::Receiver<Option<Arc<Overview>>> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = running.as_ref() {
            return sender.subscribe();
        }
        let (sender, receiver) = watch::channel(None);
        *running = Some(sender.clone());
        tokio::spawn(compose_while_watched(gateway.clone(), sender));
        receiver
    }

    /// Whether the task should end (no viewer left, or the node stopping); if so, forgets it
    /// under the lock a new viewer takes, so that viewer starts a new task.
    fn release(&self, sender: &watch::Sender<Option<Arc<Overview>>>, stopping: bool) -> bool {
        if sender.receiver_count() > 0 && !stopping {
            return false;
        }
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if sender.receiver_count() > 0 && !stopping {
            return false;
        }
        *running = None;
        true
    }
}

/// `GET /ui/api/overview`.
pub async fn stream(State(gateway): State<Handle>) -> Response {
    let viewer =
        Viewer { overview: gateway.overview.subscribe(&gateway), stopping: gateway.stopping.clone(), sent: false };
    let lines = futures_util::stream::unfold(viewer, |mut viewer| async move {
        let line = viewer.next_line().await?;
        Some((Ok::<_, Infallible>(line), viewer))
    });
    ([(header::CONTENT_TYPE, "application/x-ndjson"), (header::CACHE_CONTROL, "no-store")], Body::from_stream(lines))
        .into_response()
}

/// One page's stream.
struct Viewer {
    overview: watch::Receiver<Option<Arc<Overview>>>,
    stopping: watch::Receiver<bool>,
    sent: bool,
}

impl Viewer {
    /// The next line to send: the overview when it changed, or again after [`HEARTBEAT`];
    /// `None` once the node is shutting down.
    async fn next_line(&mut self) -> Option<Bytes> {
        loop {
            if *self.stopping.borrow() {
                return None;
            }
            if !self.sent {
                let current = self.overview.borrow_and_update().clone();
                if let Some(overview) = current {
                    return Some(self.line(&overview));
                }
            }
            tokio::select! {
                changed = self.overview.changed() => {
                    changed.ok()?;
                    let current = self.overview.borrow_and_update().clone();
                    if let Some(overview) = current {
                        return Some(self.line(&overview));
                    }
                }
                _ = tokio::time::sleep(HEARTBEAT), if self.sent => {
                    let current = self.overview.borrow().clone();
                    if let Some(overview) = current {
                        return Some(self.line(&overview));
                    }
                }
                _ = self.stopping.changed() => return None,
            }
        }
    }

    fn line(&mut self, overview: &Overview) -> Bytes {
        self.sent = true;
        let mut line = serde_json::to_vec(overview).unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    }
}

/// The composing task: the overview every [`POLL`], published when it changed, until no
/// viewer is left or the node stops.
async fn compose_while_watched(gateway: Handle, sender: watch::Sender<Option<Arc<Overview>>>) {
    let mut stopping = gateway.stopping.clone();
    let mut health = Health::default();
    let mut status = None;
    loop {
        if gateway.overview.release(&sender, *stopping.borrow()) {
            health.stop();
            return;
        }
        health.tend(&gateway).await;
        // A status the node loop is slow to give keeps the last one: alarms and sizes do
        // not blink away while the node is busy.
        if let Ok(Ok(now)) = tokio::time::timeout(STATUS_WAIT, gateway.shared.node.status()).await {
            status = Some(now);
        }
        let overview = compose(&gateway, health.view(), status.as_ref());
        sender.send_if_modified(|current| {
            if current.as_deref() == Some(&overview) {
                return false;
            }
            *current = Some(Arc::new(overview));
            true
        });
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = stopping.changed() => {}
        }
    }
}

/// The health check running beside the polls, and its last answer.
#[derive(Default)]
struct Health {
    running: Option<JoinHandle<Result<(), String>>>,
    started: Option<Instant>,
    last: Option<Result<(), String>>,
}

impl Health {
    /// Collects a finished check and starts the next one when it is due.
    async fn tend(&mut self, gateway: &Handle) {
        if let Some(running) = &self.running {
            if !running.is_finished() {
                return;
            }
            if let Some(running) = self.running.take() {
                self.last = Some(running.await.unwrap_or_else(|_| Err("the health check did not finish".to_string())));
            }
        }
        if self.started.is_none_or(|at| at.elapsed() >= HEALTH_EVERY) {
            let gateway = gateway.clone();
            self.started = Some(Instant::now());
            self.running = Some(tokio::spawn(async move { crate::gateway::health::check(&gateway, &[]).await }));
        }
    }

    fn view(&self) -> HealthView {
        match &self.last {
            None => HealthView::Checking,
            Some(Ok(())) => HealthView::Healthy,
            Some(Err(reason)) => HealthView::Unhealthy(reason.clone()),
        }
    }

    fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            running.abort();
        }
    }
}

/// The overview now.
fn compose(gateway: &Handle, health: HealthView, status: Option<&crate::node::NodeStatus>) -> Overview {
    let shared = &gateway.shared;
    let node = &shared.node;
    let election = node.election.status();
    let master = if election.master.is_some() { Some(shared.me) } else { election.hint };
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
        is_master: election.master.is_some(),
        term: node.term(),
        members,
        revision: status.map_or_else(|| node.revision(), |s| s.revision),
        compacted: status.map_or(0, |s| s.compacted),
        db_size: status.and_then(|s| s.db_size),
        bytes_in_use: status.map_or(0, |s| s.bytes_in_use),
        quota_bytes: status.map_or(0, |s| s.quota_bytes),
        alarms: status
            .as_ref()
            .map(|s| s.alarms.iter().map(|a| format!("{} on {:x}", a.kind.etcd_name(), a.member)).collect())
            .unwrap_or_default(),
        health: if master.is_none() { HealthView::Unhealthy("RAFT NO LEADER".to_string()) } else { health },
    }
}
