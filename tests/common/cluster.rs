//! A three-node `kvserver` cluster on 127.0.0.1 started by a test, and the waits the process
//! tests share. Every wait is bounded; every process is started by the test and killed by it
//! (by pid, on drop).

#![allow(dead_code)] // each test file uses its own part of it

use leasekv::client::{Client, GetOptions};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The kvserver binary of this build.
pub const KVSERVER: &str = env!("CARGO_BIN_EXE_kvserver");

/// Three nodes started by the test, killed on drop.
pub struct Cluster {
    /// Configs, data dirs and logs.
    pub dir: tempfile::TempDir,
    /// The running processes.
    pub nodes: Vec<Option<Child>>,
    /// Client ports, by node index.
    pub client_ports: Vec<u16>,
    /// Peer ports, by node index.
    pub peer_ports: Vec<u16>,
}

impl Cluster {
    pub fn start(backend: &str) -> Cluster {
        Cluster::start_with(backend, "")
    }

    /// Three nodes; `extra` is appended to every node's configuration (e.g. a `[log]` section).
    pub fn start_with(backend: &str, extra: &str) -> Cluster {
        Cluster::start_in(tempfile::tempdir().expect("tempdir"), backend, extra)
    }

    /// [`Cluster::start_with`] in `dir`, which a test may have prepared (e.g. a data dir
    /// mounted on a small file system).
    pub fn start_in(dir: tempfile::TempDir, backend: &str, extra: &str) -> Cluster {
        let ports = super::free_ports(6);
        let (client_ports, peer_ports) = (ports[..3].to_vec(), ports[3..].to_vec());
        super::write_configs(dir.path(), &client_ports, &peer_ports, backend, extra);
        let mut cluster = Cluster { dir, nodes: vec![None, None, None], client_ports, peer_ports };
        for i in 0..3 {
            cluster.start_node(i);
        }
        cluster
    }

    pub fn config(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("n{}.toml", i + 1))
    }

    pub fn start_node(&mut self, i: usize) {
        self.start_node_with_env(i, &[]);
    }

    /// Starts node `i` with extra environment variables (e.g. a `LEASEKV_FAULT_*` one).
    pub fn start_node_with_env(&mut self, i: usize, env: &[(&str, &str)]) {
        let log = std::fs::File::create(self.dir.path().join(format!("log{}", i + 1))).expect("log file");
        let child = Command::new(KVSERVER)
            .arg("--config")
            .arg(self.config(i))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kvserver starts");
        self.nodes[i] = Some(child);
    }

    /// kill -9.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait (bounded) for a clean exit.
    pub fn terminate(&mut self, i: usize) -> bool {
        let Some(mut child) = self.nodes[i].take() else { return false };
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    pub fn endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.client_ports[i])
    }

    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("log{}", i + 1))).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        // A failed test's only trace in CI is its output: the nodes' logs go with it, before
        // the temporary directory that holds them is removed.
        if std::thread::panicking() {
            for i in 0..self.nodes.len() {
                eprintln!("---- node {} log (the last {LOG_TAIL_LINES} lines) ----", i + 1);
                let log = self.log(i);
                let lines: Vec<&str> = log.lines().collect();
                for line in &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..] {
                    eprintln!("{line}");
                }
            }
        }
    }
}

/// How much of each node's log a failed test prints.
const LOG_TAIL_LINES: usize = 60;

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

/// Retries `f` until it succeeds or `limit` passes.
pub async fn eventually<T, E: std::fmt::Debug, F, Fut>(limit: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("gave up after {limit:?}: {e:?}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

pub async fn client(endpoint: &str) -> Client {
    let endpoints = vec![endpoint.to_string()];
    eventually(Duration::from_secs(10), || Client::connect(&endpoints)).await
}

pub async fn value(c: &Client, key: &str, serializable: bool) -> Option<Vec<u8>> {
    let options = GetOptions { serializable, ..Default::default() };
    c.get(key, options).await.ok().and_then(|r| r.kvs.first().map(|kv| kv.value.clone()))
}

pub async fn master_index(cluster: &Cluster) -> usize {
    let c = client(&cluster.endpoint(0)).await;
    let leader = eventually(Duration::from_secs(10), || async {
        let status = c.status().await.map_err(|e| e.to_string())?;
        if status.leader == 0 {
            return Err("no master yet".to_string());
        }
        Ok(status.leader)
    })
    .await;
    leader as usize - 1
}
