//! The gateway's plain endpoints: `/health`, `/readyz`, `/livez` and `/version`, what load
//! balancers, orchestrators and clients ask before they send work, and `/metrics`, what
//! Prometheus scrapes (the metrics themselves are in [`crate::metrics`]).
//!
//! A node is healthy when it knows a master, a linearizable read through it completes in
//! time (the test etcd's `/health` makes: a quorum read of the key `health`) and this node
//! has applied the log as far as that read saw: a node cut off from the master, one that
//! cannot reach a majority, and one that lags behind answer false. So does a cluster with
//! a raised alarm (`ALARM NOSPACE`, `ALARM CORRUPT`), as etcd 3.5 answers, unless the
//! prober excludes it (`/health?exclude=NOSPACE`), and a member whose last snapshot install
//! failed (`SNAPSHOT INSTALL FAILED: …`, a full disk: see docs/operations.md).

use super::Handle;
use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_kvstore::log::{ReadConsistency, Withdrawal};
use std::time::Duration;

/// How long the health read may take: etcd's default request timeout is 5 s, but a health
/// check that waits that long makes its prober time out first.
const HEALTH_READ: Duration = Duration::from_secs(2);

/// The etcd API level leasekv implements, as `/version` reports it; clients choose their
/// API prefix and features from it (3.4: `/v3` gateway paths, watch, leases by name).
pub const ETCD_API: &str = "3.4.0";

/// The alarm names a health probe asked to ignore (`?exclude=NOSPACE&exclude=CORRUPT`).
fn excluded_alarms(uri: &Uri) -> Vec<String> {
    let query = uri.query().unwrap_or_default();
    query.split('&').filter_map(|pair| pair.strip_prefix("exclude=")).map(str::to_uppercase).collect()
}

/// Why the node is not healthy, if it is not.
pub(crate) async fn check(gateway: &Handle, excluded: &[String]) -> Result<(), String> {
    let election = gateway.shared.node.election.status();
    if election.master.is_none() && election.hint.is_none() {
        return Err("RAFT NO LEADER".into());
    }
    if let Ok(Ok(node)) = tokio::time::timeout(HEALTH_READ, gateway.shared.node.status()).await {
        let mut raised = node.alarms.iter().map(|a| a.kind.etcd_name());
        if let Some(alarm) = raised.find(|name| !excluded.iter().any(|e| e == name)) {
            return Err(format!("ALARM {alarm}"));
        }
        // Catching up and a mastership given up show in the read below (or are no harm to
        // a follower); a failed install would only show as "not caught up" without its cause.
        if let Some(failed @ Withdrawal::InstallFailed { .. }) = &node.withdrawal {
            return Err(format!("SNAPSHOT INSTALL FAILED: {failed}"));
        }
    }
    // The node's own read, not the KV service's: with auth on, the service would refuse a
    // probe that carries no token ("user name is empty"). etcd's check reads before it checks
    // permissions and counts an auth refusal as healthy; reading past auth does the same.
    let read = pb::RangeRequest { key: b"health".to_vec(), ..Default::default() };
    let read = crate::api::convert::range_in(read).map_err(|status| format!("QGET ERROR: {}", status.message()))?;
    let shared = &gateway.shared;
    let linearizable = || shared.node.read(read.request.clone(), read.revision, ReadConsistency::Linearizable);
    let deadline = tokio::time::Instant::now() + HEALTH_READ;
    let current = match tokio::time::timeout_at(deadline, shared.serve(linearizable)).await {
        Ok(Ok((_, revision))) => revision,
        Ok(Err(status)) => return Err(format!("QGET ERROR: {}", status.message())),
        Err(_) => return Err(format!("QGET ERROR: no answer within {HEALTH_READ:?}")),
    };
    // The read may have been the master's (forwarded); this node must have applied as far
    // itself, or its watches and serializable reads are behind the cluster.
    loop {
        let applied = gateway.shared.node.revision();
        if applied >= current {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("NOT CAUGHT UP: applied revision {applied} of the cluster's {current}"));
        }
        tokio::time::sleep(CATCH_UP_POLL).await;
    }
}

/// How often the health check looks again whether this node caught up.
const CATCH_UP_POLL: Duration = Duration::from_millis(10);

fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// `GET /health`: `{"health":"true"}`, or `{"health":"false","reason":…}` with 503.
pub async fn health(State(gateway): State<Handle>, uri: Uri) -> Response {
    match check(&gateway, &excluded_alarms(&uri)).await {
        Ok(()) => json(StatusCode::OK, serde_json::json!({"health": "true"})),
        Err(reason) => json(StatusCode::SERVICE_UNAVAILABLE, serde_json::json!({"health": "false", "reason": reason})),
    }
}

/// `GET /readyz`: `ok` once the node can serve linearizable requests.
pub async fn readyz(State(gateway): State<Handle>, uri: Uri) -> Response {
    match check(&gateway, &excluded_alarms(&uri)).await {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {reason}\n")).into_response(),
    }
}

/// `GET /livez`: `ok` while the process serves requests at all; whether it is useful is
/// `/readyz`'s question.
pub async fn livez() -> Response {
    (StatusCode::OK, "ok\n").into_response()
}

/// `GET /metrics`: every metric (see [`crate::metrics`]), the node's gauges read now.
pub async fn metrics(State(gateway): State<Handle>) -> Response {
    let metrics = crate::metrics::metrics();
    let election = gateway.shared.node.election.status();
    metrics.observe_election(gateway.shared.node.election.name(), gateway.shared.node.election.counts());
    // A node whose loop does not answer still serves the counters; its gauges stay as
    // they were.
    if let Ok(Ok(node)) = tokio::time::timeout(HEALTH_READ, gateway.shared.node.status()).await {
        let term = election.term().map_or(0, |t| t.counter);
        metrics.observe_node(
            &node,
            election.master.is_some() || election.hint.is_some(),
            election.master.is_some(),
            term,
        );
    }
    (StatusCode::OK, [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], metrics.render()).into_response()
}

/// `GET /version`, in etcd's shape exactly (leasekv's own version is in
/// `Maintenance.Status`' `version`).
pub async fn version() -> Response {
    json(StatusCode::OK, serde_json::json!({"etcdserver": ETCD_API, "etcdcluster": ETCD_API}))
}
