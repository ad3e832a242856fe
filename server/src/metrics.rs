//! The node's metrics, served at `/metrics` in Prometheus's text format.
//!
//! Names are etcd's where the meaning is the same, so that etcd's dashboards and alerts
//! work (`etcd_server_has_leader`, `etcd_server_leader_changes_seen_total`,
//! `etcd_server_proposals_*`, `etcd_disk_wal_fsync_duration_seconds`,
//! `etcd_debugging_mvcc_*`, `etcd_debugging_lease_*`, and go-grpc-prometheus's
//! `grpc_server_*`); what has no etcd counterpart is under `leasekv_`.
//!
//! Counters and histograms are process-wide (one node per process), updated where the
//! event happens; gauges that mirror the node's state are read from it at each scrape.

use crate::node::NodeStatus;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use std::sync::OnceLock;
use std::time::Duration;

/// Every metric of the node.
pub struct Metrics {
    registry: Registry,
    /// 1 while a master is known.
    pub has_leader: IntGauge,
    /// 1 while this node is master.
    pub is_leader: IntGauge,
    /// Master changes this node saw.
    pub leader_changes: IntCounter,
    /// Highest chosen log slot.
    pub proposals_committed: IntGauge,
    /// Highest applied log slot.
    pub proposals_applied: IntGauge,
    /// Proposals this node made (or forwarded) that are not answered yet.
    pub proposals_pending: IntGauge,
    /// Proposals that failed.
    pub proposals_failed: IntCounter,
    /// Client requests refused because this node's queue of them was full.
    pub client_requests_refused: IntCounter,
    /// Peer messages dropped because the node loop's peer queue was full (the loop stalled).
    pub peer_messages_dropped: IntCounter,
    /// Forwarded requests a master refused because its client queue was full.
    pub forwards_refused: IntCounter,
    /// The cluster's peer protocol version as this node sees it (the lowest any member
    /// speaks; see `peer::version`).
    pub cluster_protocol_version: IntGauge,
    /// How long each sync of the log took.
    pub wal_fsync: Histogram,
    /// How long each turn of the node loop took (inputs handled, outputs sent, a checkpoint
    /// if one was due): every request of the node waits while a turn runs.
    pub loop_turn: Histogram,
    /// How long each read took on a reader thread (off the node loop).
    pub read_served: Histogram,
    /// Reads handed to the reader threads.
    pub reads_queued: IntCounter,
    /// Reads refused with 'too many requests' because the readers' queue was full.
    pub reads_refused: IntCounter,
    /// Range answers refused because they did not fit the read memory budget.
    pub reads_over_budget: IntCounter,
    /// Mastership given up because the node loop stalled (see `node::watchdog`).
    pub stalled_step_downs: IntCounter,
    /// Keys in the store.
    pub keys: IntGauge,
    /// Bytes the storage takes on disk.
    pub db_size: IntGauge,
    /// The store revision.
    pub current_revision: IntGauge,
    /// The history's compaction revision.
    pub compact_revision: IntGauge,
    /// TTL leases granted, revoked and renewed through this node.
    pub leases_granted: IntCounter,
    /// See `leases_granted`.
    pub leases_revoked: IntCounter,
    /// See `leases_granted`.
    pub leases_renewed: IntCounter,
    /// gRPC calls begun, by type, service and method.
    pub grpc_started: IntCounterVec,
    /// gRPC calls answered, by type, service, method and code.
    pub grpc_handled: IntCounterVec,
    /// Time to answer (to the response's head, for streams), by type, service and method.
    pub grpc_seconds: HistogramVec,
    /// Gateway and plain HTTP requests answered, by route and HTTP status.
    pub http_requests: IntCounterVec,
    /// Time to answer them (to the response's head, for streams), by route.
    pub http_seconds: HistogramVec,
    /// The election term while this node is master, else 0.
    pub election_term: IntGauge,
    /// Requests forwarded to the master and not answered yet.
    pub forwarded_in_flight: IntGauge,
    /// Chosen log slots not applied yet.
    pub unapplied_slots: IntGauge,
    /// Snapshots sent to followers behind the compacted log.
    pub snapshots_sent: IntGauge,
    /// Snapshots received and installed.
    pub snapshots_installed: IntGauge,
    /// Lease expiry batches this node proposed as master.
    pub expiry_commands: IntGauge,
    /// Linearizable reads this node answered as follower under its read lease, by how:
    /// `local` (at once), `waited` (after applying a slot), `forwarded` (to the master).
    pub lease_reads: IntGaugeVec,
    /// Whether this node holds a valid read lease.
    pub read_lease_held: IntGauge,
    /// This node's mastership changes by backend and kind (elected, extended, expired,
    /// released), as the election backend counted them.
    pub election_changes: IntGaugeVec,
}

/// The node's metrics (created, and registered, on first use).
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// Latency buckets from 0.5 ms to 8 s, as etcd's fsync and request histograms.
fn latency_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.0005, 2.0, 15).expect("valid buckets")
}

impl Metrics {
    fn new() -> Metrics {
        let registry = Registry::new();
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("a valid metric");
            registry.register(Box::new(g.clone())).expect("registered once");
            g
        };
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).expect("a valid metric");
            registry.register(Box::new(c.clone())).expect("registered once");
            c
        };
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric");
            registry.register(Box::new(c.clone())).expect("registered once");
            c
        };
        let histogram_vec = |name: &str, help: &str, labels: &[&str]| {
            let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(latency_buckets()), labels)
                .expect("a valid metric");
            registry.register(Box::new(h.clone())).expect("registered once");
            h
        };
        let histogram = |name: &str, help: &str| {
            let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(latency_buckets()))
                .expect("a valid metric");
            registry.register(Box::new(h.clone())).expect("registered once");
            h
        };
        let wal_fsync =
            histogram("etcd_disk_wal_fsync_duration_seconds", "The latency distributions of fsync called by the log.");
        let loop_turn = histogram(
            "leasekv_node_loop_turn_duration_seconds",
            "The latency distributions of the node loop's turns (requests wait while one runs).",
        );
        let read_served = histogram(
            "leasekv_read_duration_seconds",
            "The latency distributions of reads on the reader threads, off the node loop.",
        );
        let grpc = ["grpc_type", "grpc_service", "grpc_method"];
        Metrics {
            read_served,
            reads_queued: counter("leasekv_reads_queued_total", "Reads handed to the reader threads."),
            reads_refused: counter(
                "leasekv_reads_refused_total",
                "Reads refused with 'too many requests' because the reader threads' queue was full.",
            ),
            reads_over_budget: counter(
                "leasekv_reads_over_budget_total",
                "Range answers refused with 'too many requests' because they did not fit [reads] memory_budget_bytes.",
            ),
            stalled_step_downs: counter(
                "leasekv_stalled_step_downs_total",
                "Times this master gave up mastership because its node loop or its disk stalled.",
            ),
            has_leader: gauge("etcd_server_has_leader", "Whether or not a leader exists. 1 is existence, 0 is not."),
            is_leader: gauge("etcd_server_is_leader", "Whether or not this member is a leader. 1 if is, 0 otherwise."),
            leader_changes: counter("etcd_server_leader_changes_seen_total", "The number of leader changes seen."),
            proposals_committed: gauge("etcd_server_proposals_committed_total", "The total number of consensus proposals committed."),
            proposals_applied: gauge("etcd_server_proposals_applied_total", "The total number of consensus proposals applied."),
            proposals_pending: gauge("etcd_server_proposals_pending", "The current number of pending proposals to commit."),
            proposals_failed: counter("etcd_server_proposals_failed_total", "The total number of failed proposals seen."),
            client_requests_refused: counter(
                "leasekv_client_requests_refused_total",
                "Client requests refused with 'too many requests' because the node's client queue was full.",
            ),
            peer_messages_dropped: counter(
                "leasekv_peer_messages_dropped_total",
                "Peer messages dropped because the node loop's peer queue was full.",
            ),
            forwards_refused: counter(
                "leasekv_forwards_refused_total",
                "Requests forwarded by a follower that this master refused with 'too many requests' because its client queue was full.",
            ),
            cluster_protocol_version: gauge(
                "leasekv_cluster_protocol_version",
                "The cluster's peer protocol version as this node sees it: the lowest version any member speaks.",
            ),
            wal_fsync,
            loop_turn,
            keys: gauge("etcd_debugging_mvcc_keys_total", "Total number of keys."),
            db_size: gauge("etcd_mvcc_db_total_size_in_bytes", "Total size of the underlying database physically allocated in bytes."),
            current_revision: gauge("etcd_debugging_mvcc_current_revision", "The current revision of store."),
            compact_revision: gauge("etcd_debugging_mvcc_compact_revision", "The revision of the last compaction in store."),
            leases_granted: counter("etcd_debugging_lease_granted_total", "The total number of granted leases."),
            leases_revoked: counter("etcd_debugging_lease_revoked_total", "The total number of revoked leases."),
            leases_renewed: counter("etcd_debugging_lease_renewed_total", "The number of renewed leases seen by the leader."),
            grpc_started: counter_vec("grpc_server_started_total", "Total number of RPCs started on the server.", &grpc),
            grpc_handled: counter_vec(
                "grpc_server_handled_total",
                "Total number of RPCs completed on the server, regardless of success or failure.",
                &["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
            ),
            grpc_seconds: histogram_vec(
                "grpc_server_handling_seconds",
                "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
                &grpc,
            ),
            http_requests: counter_vec(
                "leasekv_http_requests_total",
                "HTTP requests (gateway, health, metrics) answered, by route and status.",
                &["route", "code"],
            ),
            http_seconds: histogram_vec(
                "leasekv_http_request_duration_seconds",
                "Time to answer an HTTP request (to the head of the answer, for streams).",
                &["route"],
            ),
            election_term: gauge("leasekv_election_term", "The election term while this node is master, else 0."),
            forwarded_in_flight: gauge("leasekv_forwarded_requests_in_flight", "Requests forwarded to the master and not answered yet."),
            unapplied_slots: gauge("leasekv_log_unapplied_slots", "Log slots chosen but not applied yet on this node."),
            snapshots_sent: gauge("leasekv_snapshots_sent_total", "Snapshots sent to followers whose next log entries were compacted away."),
            snapshots_installed: gauge("leasekv_snapshots_installed_total", "Snapshots received from the master and installed."),
            expiry_commands: gauge("leasekv_lease_expiry_commands_total", "Lease expiry batches proposed by this node as master."),
            lease_reads: {
                let g = IntGaugeVec::new(
                    Opts::new(
                        "leasekv_follower_linearizable_reads_total",
                        "Linearizable reads that reached this node as follower, by how they were served: local (under its read lease, at once), waited (under its read lease, after applying a slot it had received), forwarded (to the master).",
                    ),
                    &["served"],
                )
                .expect("a valid metric");
                registry.register(Box::new(g.clone())).expect("registered once");
                g
            },
            read_lease_held: gauge("leasekv_read_lease_held", "1 while this node holds a valid read lease (docs/read-leases.md), else 0."),
            election_changes: {
                let g = IntGaugeVec::new(
                    Opts::new(
                        "leasekv_election_changes_total",
                        "This node's mastership changes by backend and kind: elected, extended (a lease renewal), expired (a renewal that failed in time), released; and failed_round (a round for mastership abandoned).",
                    ),
                    &["backend", "change"],
                )
                .expect("a valid metric");
                registry.register(Box::new(g.clone())).expect("registered once");
                g
            },
            registry,
        }
    }

    /// Records one turn of the node loop.
    pub fn loop_turn_took(&self, took: Duration) {
        self.loop_turn.observe(took.as_secs_f64());
    }

    /// Records a read handed to the reader threads.
    pub fn read_queued(&self) {
        self.reads_queued.inc();
    }

    /// Records a read refused because the readers' queue was full.
    pub fn read_refused(&self) {
        self.reads_refused.inc();
    }

    /// Records one read served on a reader thread.
    pub fn read_served(&self, took: Duration) {
        self.read_served.observe(took.as_secs_f64());
    }

    /// Records one sync of the log.
    pub fn fsync_took(&self, took: Duration) {
        self.wal_fsync.observe(took.as_secs_f64());
    }

    /// Sets the gauges that mirror the node's state.
    pub fn observe_node(&self, node: &NodeStatus, has_leader: bool, is_leader: bool, term: u64) {
        self.has_leader.set(i64::from(has_leader));
        self.is_leader.set(i64::from(is_leader));
        self.election_term.set(term as i64);
        self.proposals_committed.set(node.commit as i64);
        self.proposals_applied.set(node.applied as i64);
        self.unapplied_slots.set(node.commit.saturating_sub(node.applied) as i64);
        self.keys.set(node.keys as i64);
        if let Some(bytes) = node.db_size {
            self.db_size.set(bytes as i64);
        }
        self.current_revision.set(node.revision);
        self.compact_revision.set(node.compacted);
        self.forwarded_in_flight.set(node.forwards as i64);
        // Counted by the replica since it opened: counters, though set like gauges.
        self.snapshots_sent.set(node.counts.snapshots_sent as i64);
        self.snapshots_installed.set(node.counts.snapshots_installed as i64);
        self.expiry_commands.set(node.counts.expiry_commands as i64);
        let reads = node.lease_reads;
        for (served, n) in [("local", reads.local), ("waited", reads.waited), ("forwarded", reads.forwarded)] {
            self.lease_reads.with_label_values(&[served]).set(n as i64);
        }
        self.read_lease_held.set(i64::from(node.read_lease_held));
    }

    /// Sets the election backend's counts.
    pub fn observe_election(&self, backend: &str, counts: leasekv_lease::backend::ElectionCounts) {
        for (change, n) in [
            ("elected", counts.elected),
            ("extended", counts.extended),
            ("expired", counts.expired),
            ("released", counts.released),
            ("failed_round", counts.failed_rounds),
        ] {
            self.election_changes.with_label_values(&[backend, change]).set(n as i64);
        }
    }

    /// Every metric in Prometheus's text exposition format.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("encoding into memory does not fail");
        out
    }
}

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// Counts a proposal from when it is made until it is answered.
pub struct PendingProposal(());

impl PendingProposal {
    /// A proposal begins.
    pub fn begin() -> PendingProposal {
        metrics().proposals_pending.inc();
        PendingProposal(())
    }
}

impl Drop for PendingProposal {
    fn drop(&mut self) {
        metrics().proposals_pending.dec();
    }
}

/// The gRPC call type of a method, as go-grpc-prometheus labels it.
fn grpc_type(method: &str) -> &'static str {
    match method {
        "Watch" | "LeaseKeepAlive" => "bidi_stream",
        "Observe" => "server_stream",
        _ => "unary",
    }
}

/// A gRPC code as Go names it (`OK`, `Canceled`, ...), which is how etcd's
/// `grpc_server_handled_total` labels it and how its dashboards select.
fn go_code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// Middleware over every request on the client port: counts and times gRPC calls (by
/// service, method and code) and HTTP requests (by route and status).
pub async fn track(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let started = std::time::Instant::now();
    let path = request.uri().path().to_string();
    let grpc = request
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    let metrics = metrics();
    if grpc {
        let (service, method) = path.trim_start_matches('/').split_once('/').unwrap_or(("unknown", "unknown"));
        let labels = [grpc_type(method), service, method];
        metrics.grpc_started.with_label_values(&labels).inc();
        let response = next.run(request).await;
        // A call that failed before its answer carries its status in the head; one that
        // answers does in the trailers, after the body: OK here.
        let code = response
            .headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i32>().ok())
            .map_or("OK", |c| go_code_name(tonic::Code::from_i32(c)));
        metrics.grpc_handled.with_label_values(&[labels[0], labels[1], labels[2], code]).inc();
        metrics.grpc_seconds.with_label_values(&labels).observe(started.elapsed().as_secs_f64());
        response
    } else {
        let route = crate::gateway::route_label(&path);
        let response = next.run(request).await;
        metrics.http_requests.with_label_values(&[route, response.status().as_str()]).inc();
        metrics.http_seconds.with_label_values(&[route]).observe(started.elapsed().as_secs_f64());
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_has_etcds_names_and_parses() {
        let m = metrics();
        m.fsync_took(Duration::from_millis(3));
        m.grpc_started.with_label_values(&["unary", "etcdserverpb.KV", "Range"]).inc();
        let text = String::from_utf8(m.render()).unwrap();
        for name in [
            "etcd_server_has_leader",
            "etcd_server_leader_changes_seen_total",
            "etcd_server_proposals_committed_total",
            "etcd_disk_wal_fsync_duration_seconds_bucket",
            "etcd_debugging_mvcc_keys_total",
            "etcd_debugging_lease_granted_total",
            "grpc_server_started_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 1",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
