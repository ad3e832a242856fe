//! The cluster under test: real `kvserver` (or `etcd`) processes, one per node namespace,
//! started, killed, paused and restarted by pid.

use crate::lazyfs::{Disk, Lost};
use crate::net::{node_ip, proxy_in, Net};
use anyhow::{Context, Result};
use leasekv::client::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use leasekv::client::proto::etcdserverpb::StatusRequest;
use leasekv::node_config::{NodeFile, PeerEntry};
use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The client port on every node's address.
pub const CLIENT_PORT: u16 = 2379;
pub const PEER_PORT: u16 = 2380;
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
    /// Busy processes competing with a node for its CPU (the slow-CPU fault), by pid.
    competitors: Vec<Child>,
    /// Whether each node's data lives on its own small tmpfs (for the disk-full fault).
    small_disks: bool,
    /// Each node's data directory mounted through the lazy FUSE disk (for the power-loss
    /// fault), else empty. Unmounted when the cluster is dropped, after the nodes are killed.
    lazy_disks: Vec<Disk>,
    /// Nodes that exited by themselves, with their status, as a report line each.
    pub exits: Vec<String>,
    /// What power losses threw away, over the run.
    pub power_lost: Lost,
}

/// Where each node's data lives.
#[derive(Debug, Clone, Copy, Default)]
pub struct Disks {
    /// On its own small tmpfs, so that it can be filled (the disk-full fault).
    pub small: bool,
    /// Through the lazy FUSE disk (the power-loss fault).
    pub lazy: bool,
}

/// The size of each node's tmpfs when the disk-full fault is on.
const SMALL_DISK_MB: u64 = 256;
/// How many busy processes share the slowed node's CPU with it.
const COMPETITORS: usize = 3;

impl Cluster {
    /// Writes the configuration and starts every node; `extra` is appended to every leasekv
    /// node's configuration (sections such as `[reads]`).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        target: Target,
        program: PathBuf,
        dir: &Path,
        net: Net,
        nodes: usize,
        breakage: Option<String>,
        disks: Disks,
        extra: &str,
    ) -> Result<Cluster> {
        let mut cluster = Cluster {
            target,
            program,
            dir: dir.to_path_buf(),
            net,
            nodes: (0..nodes).map(|_| Node { child: None, paused: false }).collect(),
            breakage,
            competitors: Vec::new(),
            small_disks: disks.small,
            lazy_disks: Vec::new(),
            exits: Vec::new(),
            power_lost: Lost::default(),
        };
        for i in 0..nodes {
            let disk = cluster.disk_dir(i, disks.lazy);
            std::fs::create_dir_all(&disk)?;
            if disks.small {
                let status = Command::new("mount")
                    .args(["-t", "tmpfs", "-o", &format!("size={SMALL_DISK_MB}m"), "tmpfs"])
                    .arg(&disk)
                    .status()
                    .context("running mount")?;
                if !status.success() {
                    anyhow::bail!("mounting a {SMALL_DISK_MB} MB tmpfs on {} failed ({status})", disk.display());
                }
            }
            if disks.lazy {
                let data = cluster.data_dir(i);
                std::fs::create_dir_all(&data)?;
                cluster.lazy_disks.push(Disk::mount(&disk, &data)?);
            }
        }
        if let Target::LeaseKv(backend) = &cluster.target {
            for i in 0..nodes {
                // Every node reaches node j through the peer-link proxy at j's proxy
                // address (see proxy.rs), the address j advertises too: j listens on every
                // address of its namespace, where only the proxy reaches it.
                let peers: Vec<PeerEntry> = (0..nodes)
                    .map(|j| PeerEntry {
                        id: j as u32 + 1,
                        client_addr: SocketAddr::from((node_ip(j), CLIENT_PORT)),
                        peer_addr: SocketAddr::from((proxy_in(j), PEER_PORT)),
                    })
                    .collect();
                let mut file = NodeFile::member(i as u32 + 1, &peers, &cluster.data_dir(i), backend)
                    .with_extra(&format!("[compaction]\nmode = \"off\"\n{extra}"))?;
                file.cluster_id = Some(7777);
                file.peer_addr = SocketAddr::from(([0, 0, 0, 0], PEER_PORT));
                file.election.lease_time_ms = Some(u64::try_from(LEASE_TIME.as_millis())?);
                file.election.drift_bound = Some(DRIFT_BOUND);
                file.write(&dir.join(format!("n{i}.toml")))?;
                cluster.set_clock_rate(i, 1.0)?;
                cluster.set_sync_fault(i, Duration::ZERO, false)?;
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
        if let Some(disk) = self.lazy_disks.get(i) {
            disk.power_on();
        }
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
                    .env("LEASEKV_FAULT_CLOCK_RATE_FILE", self.rate_file(i))
                    .env("LEASEKV_FAULT_SYNC_FILE", self.sync_file(i));
                if let Some(name) = &self.breakage {
                    command.env("LEASEKV_FAULT_BREAK", name);
                }
            }
            Target::Etcd => {
                // Peers through the proxy, as leasekv's: each member advertises its proxy
                // address and listens on its own.
                let cluster: Vec<String> =
                    (0..self.nodes.len()).map(|j| format!("n{j}=http://{}:{PEER_PORT}", proxy_in(j))).collect();
                let ip = node_ip(i);
                command
                    .args(["--name", &format!("n{i}")])
                    .arg("--data-dir")
                    .arg(self.data_dir(i).join("etcd"))
                    .args(["--listen-client-urls", &format!("http://{ip}:{CLIENT_PORT}")])
                    .args(["--advertise-client-urls", &format!("http://{ip}:{CLIENT_PORT}")])
                    .args(["--listen-peer-urls", &format!("http://{ip}:{PEER_PORT}")])
                    .args(["--initial-advertise-peer-urls", &format!("http://{}:{PEER_PORT}", proxy_in(i))])
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

    /// Node `i`'s data directory (on its own tmpfs under the disk-full fault).
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("data{i}"))
    }

    /// The directory that holds node `i`'s files: its data directory, or the backing
    /// directory under its lazy disk.
    fn disk_dir(&self, i: usize, lazy: bool) -> PathBuf {
        if lazy {
            self.dir.join(format!("disk{i}"))
        } else {
            self.data_dir(i)
        }
    }

    /// Fills node `i`'s disk: a file takes all the space its tmpfs has left.
    pub fn fill_disk(&self, i: usize) -> Result<()> {
        anyhow::ensure!(self.small_disks, "the disk-full fault needs the small disks made at start");
        // Beside the node's files, not through the lazy disk: the space is what counts.
        let disk = self.disk_dir(i, !self.lazy_disks.is_empty());
        let filler = disk.join("chaos-filler");
        // As much as fits: fallocate of the whole size fails with ENOSPC, so shrink until it fits.
        let mut mb = SMALL_DISK_MB;
        while mb > 0 {
            let status = Command::new("fallocate").args(["-l", &format!("{mb}M")]).arg(&filler).status()?;
            if status.success() {
                break;
            }
            mb /= 2;
        }
        // Then the last crumbs, byte by byte in 64 KiB steps.
        let mut extra = OpenOptions::new().create(true).append(true).open(disk.join("chaos-filler-2"))?;
        let block = vec![0u8; 64 * 1024];
        while std::io::Write::write_all(&mut extra, &block).is_ok() {}
        Ok(())
    }

    /// Slows node `i`: pinned to CPU 0 with [`COMPETITORS`] busy processes.
    pub fn slow_cpu(&mut self, i: usize) -> Result<()> {
        let Some(child) = &self.nodes[i].child else { return Ok(()) };
        let pid = child.id().to_string();
        Command::new("taskset").args(["-a", "-p", "-c", "0", &pid]).stdout(Stdio::null()).status()?;
        for _ in 0..COMPETITORS {
            let busy = Command::new("taskset")
                .args(["-c", "0", "sh", "-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .spawn()
                .context("starting a busy competitor (taskset, util-linux)")?;
            self.competitors.push(busy);
        }
        Ok(())
    }

    /// Ends disk and CPU faults: the fillers removed, the competitors killed (by pid), every
    /// node free to run on any CPU again.
    fn end_resource_faults(&mut self) {
        for mut busy in self.competitors.drain(..) {
            let _ = busy.kill();
            let _ = busy.wait();
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        for i in 0..self.nodes.len() {
            if let Some(child) = &self.nodes[i].child {
                let pid = child.id().to_string();
                let all = format!("0-{}", cpus - 1);
                let _ = Command::new("taskset").args(["-a", "-p", "-c", &all, &pid]).stdout(Stdio::null()).status();
            }
            if self.small_disks {
                let disk = self.disk_dir(i, !self.lazy_disks.is_empty());
                let _ = std::fs::remove_file(disk.join("chaos-filler"));
                let _ = std::fs::remove_file(disk.join("chaos-filler-2"));
            }
        }
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

    /// A power loss of node `i`: kill -9, then its disk forgets every write not yet synced
    /// (only with lazy disks; otherwise a plain kill).
    pub fn power_loss(&mut self, i: usize) -> Result<()> {
        self.kill(i);
        if let Some(disk) = self.lazy_disks.get(i) {
            let (lost, undone) = disk.power_loss()?;
            self.power_lost.files += lost.files;
            self.power_lost.bytes += lost.bytes;
            // Which files went back, for a failure's post-mortem.
            let log: String = undone.iter().map(|line| format!("node {i}: {line}\n")).collect();
            let path = self.dir.join("power-loss.log");
            let appended = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut f| std::io::Write::write_all(&mut f, log.as_bytes()));
            appended.with_context(|| format!("appending to {}", path.display()))?;
        }
        Ok(())
    }

    /// Whether node data goes through lazy disks (so power losses lose unsynced writes).
    pub fn has_lazy_disks(&self) -> bool {
        !self.lazy_disks.is_empty()
    }

    /// SIGSTOP (`pause`) or SIGCONT of node `i`.
    pub fn signal_pause(&mut self, i: usize, pause: bool) {
        if let Some(child) = &self.nodes[i].child {
            let signal = if pause { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill").args([signal, &child.id().to_string()]).status();
            self.nodes[i].paused = pause;
        }
    }

    fn sync_file(&self, i: usize) -> PathBuf {
        self.dir.join(format!("sync{i}"))
    }

    /// Node `i`'s storage syncs: each waits `delay` first, and fails if `fail` (leasekv
    /// only; the node re-reads it within 100 ms).
    pub fn set_sync_fault(&self, i: usize, delay: Duration, fail: bool) -> Result<()> {
        if self.is_leasekv() {
            std::fs::write(self.sync_file(i), format!("{} {}\n", delay.as_millis(), u8::from(fail)))?;
        }
        Ok(())
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

    /// Notes nodes that exited by themselves (a crash, a refusal to go on) and forgets their
    /// process, so that [`Cluster::restore`] starts them again.
    pub fn reap(&mut self, at_s: f64) {
        for i in 0..self.nodes.len() {
            let exited = self.nodes[i].child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.exits.push(format!("node {i} exited by itself at {at_s:.1} s ({status}); see node{i}.log"));
                self.nodes[i].child = None;
            }
        }
    }

    /// Resumes paused nodes, restarts dead ones, resets clocks, frees disks and CPUs.
    pub fn restore(&mut self) -> Result<()> {
        self.end_resource_faults();
        for i in 0..self.nodes.len() {
            if self.nodes[i].paused {
                self.signal_pause(i, false);
            }
            if self.nodes[i].child.is_none() {
                self.start_node(i)?;
            }
            self.set_clock_rate(i, 1.0)?;
            self.set_sync_fault(i, Duration::ZERO, false)?;
        }
        Ok(())
    }

    /// Stops every node (and any competitor).
    pub fn stop(&mut self) {
        self.end_resource_faults();
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
