//! Three-node clusters of leasekv or etcd on 127.0.0.1, started side by side by the same
//! code so a workload treats them alike: start, stop, restart, replace a member, and read
//! a member's resident memory, CPU time and data directory size.

use anyhow::{anyhow, bail, Context, Result};
use leasekv::client::Client;
use leasekv::node_config::{NodeFile, PeerEntry};
use leasekv::process::{cpu_seconds, rss_bytes, stop_child};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The space quota both systems run with unless a row sets its own: the 4M-key row holds
/// 4 GiB of values, past either default (2 GiB), and the rows must not hit a quota one
/// system has and the other has not.
pub const QUOTA_BYTES: u64 = 8 << 30;

/// The system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// leasekv with this election backend (`paxoslease` or `lease-tracker`).
    LeaseKv(&'static str),
    /// etcd (3.4 from Debian, or `ETCD_BIN`).
    Etcd,
}

impl System {
    /// The name reports use: `leasekv`, `leasekv/lease-tracker` or `etcd`.
    pub fn name(self) -> String {
        match self {
            System::LeaseKv("paxoslease") => "leasekv".into(),
            System::LeaseKv(backend) => format!("leasekv/{backend}"),
            System::Etcd => "etcd".into(),
        }
    }
}

/// How the cluster is set up beyond the defaults, per workload.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Auto-compaction keeping this many revisions (both systems), or none for each
    /// system's default (leasekv: 10,000 revisions; etcd: off).
    pub compaction_retention: Option<u64>,
    /// Extra TOML for every leasekv node (`SCALEBENCH_LEASEKV_CONFIG` adds to it).
    pub leasekv_toml: String,
    /// The space quota of both systems, or none for [`QUOTA_BYTES`].
    pub quota_bytes: Option<u64>,
}

/// One member: its ports, files and process.
struct Member {
    /// etcd's member name; leasekv's id is its index + 1 for the first three.
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    /// The cluster's id for this member (etcd's member id, leasekv's node id), once known.
    id: u64,
}

/// A running cluster; its processes are killed and its files removed when dropped.
pub struct Cluster {
    /// Which system runs.
    pub system: System,
    settings: Settings,
    /// The cluster's files: removed when the cluster is dropped, unless `SCALEBENCH_KEEP`
    /// is set (to read the members' logs after a surprising figure).
    dir: tempfile::TempDir,
    members: Vec<Member>,
    /// The leasekv server binary.
    kvserver: PathBuf,
}

/// A free TCP port on 127.0.0.1 that this process has not handed out before. The listener
/// is dropped, so the system may offer the same port again before a server binds it: a
/// cluster once got one port for a member's peer address and another's client address.
pub fn free_port() -> Result<u16> {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..100 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
    Err(anyhow!("no free port on 127.0.0.1 that this run has not used already, in 100 tries"))
}

/// The `etcd` binary: `ETCD_BIN`, else the first on PATH.
fn etcd_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("ETCD_BIN") {
        return Ok(PathBuf::from(path));
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join("etcd")).find(|p| p.is_file()))
        .ok_or_else(|| anyhow!("etcd is not on PATH (Debian: apt-get install etcd-server) and ETCD_BIN is not set"))
}

/// The `kvserver` binary: `KVSERVER_BIN`, else the one beside this binary, built first
/// when scalebench runs under cargo (so `cargo run --bin scalebench` measures the current
/// source, not a stale server).
pub fn kvserver_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("KVSERVER_BIN") {
        return Ok(PathBuf::from(path));
    }
    let beside = std::env::current_exe()?.with_file_name("kvserver");
    if let Some(cargo) = std::env::var_os("CARGO") {
        let release = beside.parent().is_some_and(|d| d.ends_with("release"));
        let mut build = Command::new(cargo);
        build.args(["build", "-q", "-p", "leasekv", "--bin", "kvserver"]);
        if release {
            build.arg("--release");
        }
        build.arg("--manifest-path").arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
        let status = build.status().context("running cargo build for kvserver")?;
        if !status.success() {
            bail!("cargo build of kvserver failed");
        }
    }
    if !beside.is_file() {
        bail!(
            "{} is missing: build it with `cargo build --release --bin kvserver`, or set KVSERVER_BIN",
            beside.display()
        );
    }
    Ok(beside)
}

impl Cluster {
    /// Starts three members of `system` and waits until each takes a put.
    pub async fn start(system: System, settings: Settings) -> Result<Cluster> {
        let kvserver = match system {
            System::LeaseKv(_) => kvserver_binary()?,
            System::Etcd => etcd_binary()?,
        };
        let dir = tempfile::Builder::new().prefix("scalebench-").tempdir()?;
        let mut members = Vec::new();
        for i in 0..3 {
            members.push(Member {
                name: format!("n{}", i + 1),
                client_port: free_port()?,
                peer_port: free_port()?,
                data_dir: dir.path().join(format!("data-n{}", i + 1)),
                log: dir.path().join(format!("log-n{}", i + 1)),
                child: None,
                id: i as u64 + 1,
            });
        }
        let mut dir = dir;
        if std::env::var_os("SCALEBENCH_KEEP").is_some() {
            dir.disable_cleanup(true);
            eprintln!("scalebench: keeping {}", dir.path().display());
        }
        let mut cluster = Cluster { system, settings, dir, members, kvserver };
        for i in 0..3 {
            cluster.spawn(i, false)?;
        }
        for i in 0..3 {
            cluster.wait_serving(i, Duration::from_secs(60)).await?;
        }
        if system == System::Etcd {
            let client = cluster.client(0).await?;
            let list = client.member_list().await?;
            for member in list.members {
                if let Some(m) = cluster.members.iter_mut().find(|m| m.name == member.name) {
                    m.id = member.id;
                }
            }
        }
        Ok(cluster)
    }

    /// The number of member slots (including stopped and removed ones).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether slot `i` has a running process.
    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// The client endpoint of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.members[i].client_port)
    }

    /// The endpoints of every running member.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.len()).filter(|&i| self.is_running(i)).map(|i| self.endpoint(i)).collect()
    }

    /// A client of member `i` alone.
    pub async fn client(&self, i: usize) -> Result<Client> {
        Ok(Client::connect(&[self.endpoint(i)]).await?)
    }

    /// The process id of member `i`, if it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(Child::id)
    }

    /// Member `i`'s data directory.
    pub fn data_dir(&self, i: usize) -> &Path {
        &self.members[i].data_dir
    }

    fn peer_url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].peer_port)
    }

    /// Starts member `i`'s process. `joining`: it joins a running cluster (its data dir is
    /// empty; the member was added first).
    fn spawn(&mut self, i: usize, joining: bool) -> Result<()> {
        let member = &self.members[i];
        let log = std::fs::File::create(&member.log)?;
        let mut command = match self.system {
            System::LeaseKv(backend) => {
                // The first three members are named by id; a joiner learns its id from the
                // cluster by its peer URL, and finds the cluster through the first three.
                let peers: Vec<PeerEntry> = self
                    .members
                    .iter()
                    .take(3)
                    .enumerate()
                    .map(|(j, peer)| PeerEntry {
                        id: j as u32 + 1,
                        client_addr: SocketAddr::from(([127, 0, 0, 1], peer.client_port)),
                        peer_addr: SocketAddr::from(([127, 0, 0, 1], peer.peer_port)),
                    })
                    .collect();
                let mut file = NodeFile::member(i as u32 + 1, &peers, &member.data_dir, backend);
                file.client_addr = SocketAddr::from(([127, 0, 0, 1], member.client_port));
                file.peer_addr = SocketAddr::from(([127, 0, 0, 1], member.peer_port));
                if joining {
                    file.id = None;
                    file.initial_cluster_state = Some("existing".into());
                }
                // The quota etcd is given below; the settings of the run and then
                // SCALEBENCH_LEASEKV_CONFIG are merged over it, table by table.
                let mut settings = format!("[storage]\nquota_bytes = {}\n", self.quota_bytes());
                if let Some(retention) = self.settings.compaction_retention {
                    settings.push_str(&format!("[compaction]\nmode = \"revision\"\nretention = {retention}\n"));
                }
                let extra = std::env::var("SCALEBENCH_LEASEKV_CONFIG").unwrap_or_default().replace("\\n", "\n");
                let file = file.with_extra(&settings)?.with_extra(&self.settings.leasekv_toml)?.with_extra(&extra)?;
                let config = self.dir.path().join(format!("{}.toml", member.name));
                file.write(&config)?;
                let mut c = Command::new(&self.kvserver);
                c.arg("--config")
                    .arg(config)
                    .env("RUST_LOG", std::env::var("SCALEBENCH_RUST_LOG").unwrap_or_else(|_| "warn".into()));
                c
            }
            System::Etcd => {
                // A new cluster is the first three; a joiner lists the running members and
                // itself, as `etcdctl member add` prints it.
                let cluster: Vec<String> = self
                    .members
                    .iter()
                    .enumerate()
                    .filter(|(j, m)| if joining { *j == i || m.child.is_some() } else { *j < 3 })
                    .map(|(j, m)| format!("{}={}", m.name, self.peer_url(j)))
                    .collect();
                let mut c = Command::new(&self.kvserver);
                c.arg(format!("--name={}", member.name))
                    .arg(format!("--data-dir={}", member.data_dir.display()))
                    .arg(format!("--listen-client-urls=http://127.0.0.1:{}", member.client_port))
                    .arg(format!("--advertise-client-urls=http://127.0.0.1:{}", member.client_port))
                    .arg(format!("--listen-peer-urls={}", self.peer_url(i)))
                    .arg(format!("--initial-advertise-peer-urls={}", self.peer_url(i)))
                    .arg(format!("--initial-cluster={}", cluster.join(",")))
                    .arg(format!("--initial-cluster-state={}", if joining { "existing" } else { "new" }))
                    // The 1 GiB key space needs more than the 2 GiB default quota with its
                    // history; etcd refuses writes past the quota.
                    .arg(format!("--quota-backend-bytes={}", self.quota_bytes()))
                    .arg("--log-level=error");
                if let Some(retention) = self.settings.compaction_retention {
                    c.arg("--auto-compaction-mode=revision").arg(format!("--auto-compaction-retention={retention}"));
                }
                c
            }
        };
        let child = command
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.kvserver.display()))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// The space quota both systems run with in this cluster.
    fn quota_bytes(&self) -> u64 {
        self.settings.quota_bytes.unwrap_or(QUOTA_BYTES)
    }

    /// The last lines member `i` logged, to explain a member that did not come up.
    pub fn log_tail(&self, i: usize) -> String {
        let text = std::fs::read_to_string(&self.members[i].log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// Waits until member `i` answers a serializable read (its own state, no quorum needed
    /// beyond having joined), failing with its log after `wait`.
    pub async fn wait_serving(&self, i: usize, wait: Duration) -> Result<Duration> {
        let started = Instant::now();
        while started.elapsed() < wait {
            if let Ok(client) = self.client(i).await {
                let options = leasekv::client::GetOptions { serializable: true, ..Default::default() };
                if client.get("/scalebench/ready", options).await.is_ok()
                    && client.put("/scalebench/ready", "1", 0, false).await.is_ok()
                {
                    return Ok(started.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!(
            "{} member {} at {} did not serve within {wait:?}; its log:\n{}",
            self.system.name(),
            self.members[i].name,
            self.endpoint(i),
            self.log_tail(i)
        )
    }

    /// The slot of the member the cluster names leader (PaxosLease master or etcd leader).
    pub async fn leader(&self) -> Result<usize> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            for i in 0..self.len() {
                if !self.is_running(i) {
                    continue;
                }
                if let Ok(c) = self.client(i).await {
                    if let Ok(s) = c.status().await {
                        if s.leader != 0 && s.header.map(|h| h.member_id) == Some(s.leader) {
                            return Ok(i);
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("no leader within 30 s")
    }

    /// The election term (etcd's raft term, leasekv's log round) as a running member reports
    /// it: the difference between two readings counts the leader changes in between.
    pub async fn term(&self) -> u64 {
        for i in 0..self.len() {
            if self.is_running(i) {
                if let Ok(c) = self.client(i).await {
                    if let Ok(s) = c.status().await {
                        return s.raft_term;
                    }
                }
            }
        }
        0
    }

    /// Stops member `i`: SIGTERM and up to 30 s to exit, or kill -9.
    pub fn stop(&mut self, i: usize, sigterm: bool) {
        if let Some(mut child) = self.members[i].child.take() {
            stop_child(&mut child, sigterm, Duration::from_secs(30));
        }
    }

    /// Starts stopped member `i` again on its data directory.
    pub fn restart(&mut self, i: usize) -> Result<()> {
        self.spawn(i, false)
    }

    /// Replaces stopped member `old` with a new member with an empty data directory, as an
    /// operator replaces a lost machine: remove it, add the new one (a voter), start it.
    /// The old member's data directory is deleted once it is removed, as a lost machine's
    /// disk is gone: the 10M row's fourth copy would not fit this machine's disk.
    /// Returns the new member's slot; it has just been started (not yet serving).
    pub async fn replace(&mut self, old: usize) -> Result<usize> {
        let via = (0..self.len()).find(|&j| j != old && self.is_running(j)).ok_or_else(|| anyhow!("no member left"))?;
        let client = self.client(via).await?;
        let old_id = self.members[old].id;
        retry("member remove", || client.member_remove(old_id)).await?;
        let old_dir = &self.members[old].data_dir;
        std::fs::remove_dir_all(old_dir).with_context(|| format!("deleting {}", old_dir.display()))?;
        let slot = self.members.len();
        let name = format!("n{}", slot + 1);
        self.members.push(Member {
            name: name.clone(),
            client_port: free_port()?,
            peer_port: free_port()?,
            data_dir: self.dir.path().join(format!("data-{name}")),
            log: self.dir.path().join(format!("log-{name}")),
            child: None,
            id: 0,
        });
        let added = retry("member add", || client.member_add(vec![self.peer_url(slot)], false)).await?;
        self.members[slot].id = added.member.map(|m| m.id).unwrap_or_default();
        self.spawn(slot, true)?;
        Ok(slot)
    }

    /// Resident memory of member `i` in bytes.
    pub fn rss_bytes(&self, i: usize) -> Option<u64> {
        rss_bytes(self.pid(i)?)
    }

    /// CPU seconds member `i` has used so far.
    pub fn cpu_seconds(&self, i: usize) -> Option<f64> {
        cpu_seconds(self.pid(i)?)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.stop(i, false);
        }
    }
}

/// Retries a membership call that the cluster refuses while it is busy (etcd: "unhealthy
/// cluster" right after a change; leasekv: a change in flight), for up to 30 s.
async fn retry<T, F, Fut>(what: &str, mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, leasekv::client::ClientError>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match call().await {
            Ok(value) => return Ok(value),
            Err(error) if Instant::now() < deadline => {
                tracing_or_eprint(&format!("{what}: {error}; retrying"));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => return Err(anyhow!("{what}: {error}")),
        }
    }
}

fn tracing_or_eprint(message: &str) {
    eprintln!("scalebench: {message}");
}

/// Disk space the files under `dir` take (allocated blocks, as `du` counts them: a
/// preallocated but empty WAL segment counts in full, a sparse file does not).
pub fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.blocks() * 512;
            }
        }
    }
    total
}
