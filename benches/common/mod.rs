//! What the cluster benchmarks share: 3-node clusters of leasekv (either backend) or a real
//! etcd on 127.0.0.1, started side by side, and the command-line filters.
//!
//! `BENCH_LEASEKV_CONFIG` adds TOML to every leasekv node's config (`\n` for a line break);
//! `BENCH_TARGETS` / `BENCH_WORKLOADS` narrow a run to names containing one of the
//! `;`-separated substrings (`=name` for an exact match); `BENCH_SECONDS` sets run lengths.

#![allow(dead_code)] // each bench uses part of it

use leasekv::client::Client;
use leasekv::node_config::NodeFile;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Default length of one measured run, seconds.
pub const DEFAULT_RUN_SECONDS: u64 = 3;

impl Cluster {
    /// The process id of node `i`, if it runs (for RSS readings).
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].as_ref().map(Child::id)
    }
}

#[allow(unused_imports)] // the watch benchmark reads them; the others do not
pub use leasekv::process::{cpu_seconds, rss_bytes};

#[derive(Clone, Copy, PartialEq)]
pub enum Target {
    /// leasekv with this election backend.
    LeaseKv(&'static str),
    /// A real etcd.
    Etcd,
}

impl Target {
    pub fn name(self) -> String {
        match self {
            Target::LeaseKv(backend) => format!("leasekv/{backend}"),
            Target::Etcd => "etcd".to_string(),
        }
    }
}

/// A free port on 127.0.0.1 that this benchmark has not handed out before: the listener is
/// dropped, and the system may offer the same port again before a server binds it.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..100 {
        let port =
            TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port");
        if handed_out.insert(port) {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 that this benchmark has not used already, in 100 tries")
}

pub fn binary(name: &str, env: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    if name == "kvserver" {
        // The bench lives in the package that owns kvserver, so cargo builds it first.
        return PathBuf::from(env!("CARGO_BIN_EXE_kvserver"));
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join(name)).find(|p| p.is_file()))
        .unwrap_or_else(|| panic!("{name} not found on PATH (Debian: apt-get install etcd-server) or in {env}"))
}

pub struct Cluster {
    pub target: Target,
    pub dir: tempfile::TempDir,
    pub nodes: Vec<Option<Child>>,
    pub client_ports: Vec<u16>,
    pub peer_ports: Vec<u16>,
}

impl Cluster {
    pub fn start(target: Target) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let client_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let peer_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let mut cluster = Cluster { target, dir, nodes: vec![None, None, None], client_ports, peer_ports };
        for i in 0..3 {
            cluster.start_node(i, true);
        }
        cluster
    }

    pub fn start_node(&mut self, i: usize, first: bool) {
        let log = std::fs::File::create(self.dir.path().join(format!("log{i}"))).expect("log");
        let mut command = match self.target {
            Target::LeaseKv(backend) => {
                // BENCH_LEASEKV_CONFIG: extra TOML for every node, merged in, e.g.
                // "[log]\nmax_inflight_slots = 4", to compare settings in one command.
                let extra = std::env::var("BENCH_LEASEKV_CONFIG").unwrap_or_default().replace("\\n", "\n");
                let peers = NodeFile::local_peers(&self.client_ports, &self.peer_ports);
                let data = self.dir.path().join(format!("data{i}"));
                let path = self.dir.path().join(format!("n{i}.toml"));
                NodeFile::member(i as u32 + 1, &peers, &data, backend)
                    .with_extra(&extra)
                    .and_then(|file| file.write(&path))
                    .unwrap_or_else(|e| panic!("BENCH_LEASEKV_CONFIG or the node config: {e}"));
                let mut c = Command::new(binary("kvserver", "KVSERVER_BIN"));
                c.arg("--config").arg(path).env("RUST_LOG", "warn");
                c
            }
            Target::Etcd => {
                let cluster: Vec<String> =
                    (0..3).map(|j| format!("e{j}=http://127.0.0.1:{}", self.peer_ports[j])).collect();
                let mut c = Command::new(binary("etcd", "ETCD_BIN"));
                c.arg(format!("--name=e{i}"))
                    .arg(format!("--data-dir={}", self.dir.path().join(format!("data{i}")).display()))
                    .arg(format!("--listen-client-urls=http://127.0.0.1:{}", self.client_ports[i]))
                    .arg(format!("--advertise-client-urls=http://127.0.0.1:{}", self.client_ports[i]))
                    .arg(format!("--listen-peer-urls=http://127.0.0.1:{}", self.peer_ports[i]))
                    .arg(format!("--initial-advertise-peer-urls=http://127.0.0.1:{}", self.peer_ports[i]))
                    .arg(format!("--initial-cluster={}", cluster.join(",")))
                    .arg(format!("--initial-cluster-state={}", if first { "new" } else { "existing" }))
                    .arg("--log-level=error");
                c
            }
        };
        let child = command.stdout(Stdio::null()).stderr(log).spawn().expect("server starts");
        self.nodes[i] = Some(child);
    }

    /// The last lines node `i` wrote to its log, to explain a node that never came up.
    pub fn log_tail(&self, i: usize) -> String {
        let text = std::fs::read_to_string(self.dir.path().join(format!("log{i}"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    pub fn endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.client_ports[i])
    }

    pub fn stop(&mut self, i: usize, sigterm: bool) {
        if let Some(mut child) = self.nodes[i].take() {
            leasekv::process::stop_child(&mut child, sigterm, Duration::from_secs(10));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..3 {
            self.stop(i, false);
        }
    }
}

pub async fn connect(endpoint: String) -> Client {
    match try_connect(endpoint.clone(), Duration::from_secs(30)).await {
        Some(client) => client,
        None => panic!("{endpoint} did not take a put within 30 s"),
    }
}

/// A client of `endpoint` once a put through it succeeds, or `None` after `wait`.
pub async fn try_connect(endpoint: String, wait: Duration) -> Option<Client> {
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if let Ok(c) = Client::connect(std::slice::from_ref(&endpoint)).await {
            if c.put("/bench/ready", "1", 0, false).await.is_ok() {
                return Some(c);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// The index of the node the cluster says is leader.
pub async fn leader(cluster: &Cluster) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for i in 0..3 {
            if cluster.nodes[i].is_none() {
                continue;
            }
            if let Ok(c) = Client::connect(&[cluster.endpoint(i)]).await {
                if let Ok(s) = c.status().await {
                    if s.leader != 0 && s.header.map(|h| h.member_id) == Some(s.leader) {
                        return i;
                    }
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn selected(var: &str, name: &str) -> bool {
    match std::env::var(var) {
        Ok(filter) if !filter.trim().is_empty() => {
            filter.split(';').map(str::trim).any(|f| match f.strip_prefix('=') {
                Some(exact) => name == exact,
                None => name.contains(f),
            })
        }
        _ => true,
    }
}

pub fn run_length() -> Duration {
    let seconds = std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_RUN_SECONDS);
    Duration::from_secs(seconds.max(1))
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Starts a 3-node cluster of every selected target, and waits until every node of each
/// takes a put (panicking with the node's log if one does not within 30 s).
pub fn start_selected(runtime: &tokio::runtime::Runtime, targets: &[Target]) -> Vec<Cluster> {
    let clusters: Vec<Cluster> = targets
        .iter()
        .filter(|t| selected("BENCH_TARGETS", &t.name()))
        .map(|&target| {
            eprintln!("[{}] starting a 3-node cluster", target.name());
            Cluster::start(target)
        })
        .collect();
    runtime.block_on(async {
        for cluster in &clusters {
            for i in 0..3 {
                if try_connect(cluster.endpoint(i), Duration::from_secs(30)).await.is_none() {
                    panic!(
                        "[{}] node {i} at {} did not take a put within 30 s; its log:\n{}",
                        cluster.target.name(),
                        cluster.endpoint(i),
                        cluster.log_tail(i)
                    );
                }
            }
        }
    });
    clusters
}

/// Throughput and latency of one load run.
#[allow(dead_code)] // the watch benchmark measures other things
pub struct Figures {
    pub ops_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// The figures of a run of `run` whose client tasks each return the latencies of their
/// successful operations.
#[allow(dead_code)] // the watch benchmark measures other things
pub async fn figures(tasks: Vec<tokio::task::JoinHandle<Vec<Duration>>>, run: Duration) -> Figures {
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    all.sort();
    let pct = |p: f64| all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).copied();
    Figures {
        ops_per_sec: all.len() as f64 / run.as_secs_f64(),
        p50_ms: pct(0.5).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
        p99_ms: pct(0.99).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
    }
}

/// Prints `results` (by workload and target, each with `ops_per_sec`, `p50_ms`, `p99_ms`) as
/// a Markdown table, each row with its throughput as a multiple of etcd's.
#[allow(dead_code)] // the watch benchmark prints its own table
pub fn print_table(results: &std::collections::BTreeMap<(String, String), serde_json::Value>) {
    println!("| workload | target | ops/s | p50 ms | p99 ms | ops/s vs etcd |");
    println!("|---|---|---|---|---|---|");
    for ((label, name), v) in results {
        let etcd = results.get(&(label.clone(), "etcd".to_string())).and_then(|e| e["ops_per_sec"].as_f64());
        let ratio = match (v["ops_per_sec"].as_f64(), etcd) {
            (Some(ours), Some(theirs)) if theirs > 0.0 => format!("{:.2}×", ours / theirs),
            _ => "-".to_string(),
        };
        let f = |k: &str| v[k].as_f64().map_or("-".to_string(), |x| format!("{x:.2}"));
        println!("| {label} | {name} | {} | {} | {} | {ratio} |", f("ops_per_sec"), f("p50_ms"), f("p99_ms"));
    }
}

/// Writes `results` (by workload and target) as JSON to `target/<file>`.
pub fn write_json(results: &std::collections::BTreeMap<(String, String), serde_json::Value>, file: &str) {
    let json: Vec<serde_json::Value> = results
        .iter()
        .map(|((label, name), v)| serde_json::json!({"workload": label, "target": name, "figures": v}))
        .collect();
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target").join(file);
    match serde_json::to_string_pretty(&json).map(|text| std::fs::write(&out, text)) {
        Ok(Ok(())) => eprintln!("wrote {}", out.display()),
        _ => eprintln!("could not write {}", out.display()),
    }
}
