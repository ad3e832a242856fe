//! The cluster under test: real `kvserver` (or `etcd`) processes, one per node namespace,
//! started, killed, paused and restarted by pid.

use crate::net::{node_ip, Net};
use anyhow::{Context, Result};
use leasekv::client::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use leasekv::client::proto::etcdserverpb::StatusRequest;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The client port on every node's address.
pub const CLIENT_PORT: u16 = 2379;
const PEER_PORT: u16 = 2380;
/// The election lease time the leasekv nodes run with.
pub const LEASE_TIME: Duration = Duration::from_millis(800);
/// The clock drift bound they are configured with.
pub const DRIFT_BOUND: f64 = 0.01;

/// What runs on the nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// leasekv's kvserver with this election backend.
    LeaseKv(String),
    /// etcd.
    Etcd,
}

impl Target {
    /// The name in the report.
    pub fn name(&self) -> String {
        match self {
            Target::LeaseKv(backend) => format!("leasekv/{backend}"),
            Target::Etcd => "etcd".into(),
        }
    }
}

/// One node's process, if running.
struct Node {
    child: Option<Child>,
    paused: bool,
}

/// The cluster: its nodes, where their data and logs live, and how to start them.
pub struct Cluster {
    target: Target,
    program: PathBuf,
    dir: PathBuf,
    net: Net,
    nodes: Vec<Node>,
    /// A negative control passed to every leasekv node.
    breakage: Option<String>,
}

impl Cluster {
    /// Writes the configuration and starts every node.
    pub fn start(
        target: Target,
        program: PathBuf,
        dir: &Path,
        net: Net,
        nodes: usize,
        breakage: Option<String>,
    ) -> Result<Cluster> {
        let mut cluster = Cluster {
            target,
            program,
            dir: dir.to_path_buf(),
            net,
            nodes: (0..nodes).map(|_| Node { child: None, paused: false }).collect(),
            breakage,
        };
        if let Target::LeaseKv(backend) = &cluster.target {
            let mut peers = String::new();
            for i in 0..nodes {
                peers.push_str(&format!(
                    "[[peers]]\nid = {}\nclient_addr = \"{ip}:{CLIENT_PORT}\"\npeer_addr = \"{ip}:{PEER_PORT}\"\n",
                    i + 1,
                    ip = node_ip(i)
                ));
            }
            for i in 0..nodes {
                let config = format!(
                    "id = {}\nclient_addr = \"{ip}:{CLIENT_PORT}\"\npeer_addr = \"{ip}:{PEER_PORT}\"\ndata_dir = \"{}\"\n{peers}\
                     [election]\nbackend = \"{backend}\"\nlease_time_ms = {}\ndrift_bound = {DRIFT_BOUND}\n\
                     [compaction]\nmode = \"off\"\n",
                    i + 1,
                    dir.join(format!("data{i}")).display(),
                    LEASE_TIME.as_millis(),
                    ip = node_ip(i),
                );
                std::fs::write(dir.join(format!("n{i}.toml")), config)?;
                cluster.set_clock_rate(i, 1.0)?;
            }
        }
        for i in 0..nodes {
            cluster.start_node(i)?;
        }
        Ok(cluster)
    }

    /// How many nodes.
    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// Node `i`'s client endpoint.
    pub fn endpoint(i: usize) -> String {
        format!("http://{}:{CLIENT_PORT}", node_ip(i))
    }

    /// The file the nodes log their master lease intervals to.
    pub fn lease_log(&self) -> PathBuf {
        self.dir.join("leases.log")
    }

    /// Whether the white-box checks apply (leasekv only).
    pub fn is_leasekv(&self) -> bool {
        matches!(self.target, Target::LeaseKv(_))
    }

    /// Starts node `i` (again).
    pub fn start_node(&mut self, i: usize) -> Result<()> {
        let log = OpenOptions::new().create(true).append(true).open(self.dir.join(format!("node{i}.log")))?;
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.net.node_ns(i)]).arg(&self.program);
        match &self.target {
            Target::LeaseKv(_) => {
                command
                    .arg("--config")
                    .arg(self.dir.join(format!("n{i}.toml")))
                    .env("RUST_LOG", "info")
                    .env("LEASEKV_FAULT_LEASE_LOG", self.lease_log())
                    .env("LEASEKV_FAULT_CLOCK_RATE_FILE", self.rate_file(i));
                if let Some(name) = &self.breakage {
                    command.env("LEASEKV_FAULT_BREAK", name);
                }
            }
            Target::Etcd => {
                let cluster: Vec<String> =
                    (0..self.nodes.len()).map(|j| format!("n{j}=http://{}:{PEER_PORT}", node_ip(j))).collect();
                let ip = node_ip(i);
                command
                    .args(["--name", &format!("n{i}")])
                    .arg("--data-dir")
                    .arg(self.dir.join(format!("etcd{i}")))
                    .args(["--listen-client-urls", &format!("http://{ip}:{CLIENT_PORT}")])
                    .args(["--advertise-client-urls", &format!("http://{ip}:{CLIENT_PORT}")])
                    .args(["--listen-peer-urls", &format!("http://{ip}:{PEER_PORT}")])
                    .args(["--initial-advertise-peer-urls", &format!("http://{ip}:{PEER_PORT}")])
                    .args(["--initial-cluster", &cluster.join(",")])
                    .args(["--initial-cluster-state", "new", "--initial-cluster-token", "chaos"]);
            }
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.program.display()))?;
        self.nodes[i] = Node { child: Some(child), paused: false };
        Ok(())
    }

    /// Whether node `i` runs (paused or not).
    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    /// kill -9 of node `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.nodes[i].paused = false;
    }

    /// SIGSTOP (`pause`) or SIGCONT of node `i`.
    pub fn signal_pause(&mut self, i: usize, pause: bool) {
        if let Some(child) = &self.nodes[i].child {
            let signal = if pause { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill").args([signal, &child.id().to_string()]).status();
            self.nodes[i].paused = pause;
        }
    }

    fn rate_file(&self, i: usize) -> PathBuf {
        self.dir.join(format!("rate{i}"))
    }

    /// Sets node `i`'s clock rate (leasekv only; the node re-reads it within 100 ms).
    pub fn set_clock_rate(&self, i: usize, rate: f64) -> Result<()> {
        if self.is_leasekv() {
            std::fs::write(self.rate_file(i), format!("{rate}\n"))?;
        }
        Ok(())
    }

    /// Resumes paused nodes, restarts dead ones, resets clocks.
    pub fn restore(&mut self) -> Result<()> {
        for i in 0..self.nodes.len() {
            if self.nodes[i].paused {
                self.signal_pause(i, false);
            }
            if self.nodes[i].child.is_none() {
                self.start_node(i)?;
            }
            self.set_clock_rate(i, 1.0)?;
        }
        Ok(())
    }

    /// Stops every node.
    pub fn stop(&mut self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].paused {
                self.signal_pause(i, false);
            }
            self.kill(i);
        }
    }

    /// The node that says it is the leader, asked over etcd's Maintenance.Status.
    pub async fn master(&self) -> Option<usize> {
        for i in 0..self.nodes.len() {
            if !self.is_running(i) || self.nodes[i].paused {
                continue;
            }
            let ask = async {
                let channel = tonic::transport::Endpoint::from_shared(Cluster::endpoint(i))
                    .ok()?
                    .connect_timeout(Duration::from_millis(300))
                    .connect()
                    .await
                    .ok()?;
                let status = MaintenanceClient::new(channel).status(StatusRequest {}).await.ok()?.into_inner();
                let me = status.header.map(|h| h.member_id)?;
                Some(status.leader == me && me != 0)
            };
            if tokio::time::timeout(Duration::from_millis(800), ask).await.ok().flatten() == Some(true) {
                return Some(i);
            }
        }
        None
    }

    /// Waits up to `limit` for a leader.
    pub async fn wait_for_master(&self, limit: Duration) -> Option<usize> {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if let Some(m) = self.master().await {
                return Some(m);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}
