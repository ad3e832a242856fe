//! What the process tests share: free ports and the configuration files of a three-node
//! cluster on 127.0.0.1.

pub mod cluster;
pub mod etcd;
pub mod process;

use leasekv::node_config::NodeFile;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

/// `n` distinct free ports on 127.0.0.1 (all held open until every one is chosen).
#[allow(dead_code)] // not every test file starts its own cluster
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> =
        (0..n).map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port on 127.0.0.1")).collect();
    listeners.iter().map(|l| l.local_addr().expect("a bound port").port()).collect()
}

/// Writes `n1.toml` … `n3.toml` into `dir` for a cluster on these ports, with data in
/// `dir/data1` …, 800 ms election leases, `backend`, and the TOML `extra` merged into every
/// file (e.g. a `[log]` section; `{id}` in it becomes the node's id, for per-node files such
/// as certificates). Built with [`leasekv::node_config`]. Returns the three paths.
#[allow(dead_code)] // not every test file starts its own cluster
pub fn write_configs(dir: &Path, client_ports: &[u16], peer_ports: &[u16], backend: &str, extra: &str) -> Vec<PathBuf> {
    let peers = NodeFile::local_peers(&client_ports[..3], &peer_ports[..3]);
    (1..=3)
        .map(|id| {
            let path = dir.join(format!("n{id}.toml"));
            NodeFile::member(id, &peers, &dir.join(format!("data{id}")), backend)
                .with_extra(&extra.replace("{id}", &id.to_string()))
                .and_then(|file| file.write(&path))
                .unwrap_or_else(|e| panic!("node config {}: {e}", path.display()));
            path
        })
        .collect()
}

/// Whether the tests run under CI (`CI=true`), where a missing tool is a failure.
#[allow(dead_code)] // not every test file runs external tools
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// A program on PATH. Missing under `CI=true` is a failure naming the Debian package.
#[allow(dead_code)] // not every test file runs external tools
pub fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join(name)).find(|p| p.is_file()));
    if found.is_none() && in_ci() {
        panic!("{name} is required under CI=true: install the Debian package {package} (.ci/run does)");
    }
    found
}
