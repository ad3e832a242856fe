//! What the process tests share: free ports and the configuration files of a three-node
//! cluster on 127.0.0.1.

pub mod cluster;
pub mod etcd;
pub mod http;
pub mod process;

use leasekv::node_config::NodeFile;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// `n` distinct free ports on 127.0.0.1 (all held open until every one is chosen).
///
/// They come from below Linux's ephemeral range (32768–60999 by default), never from a bind
/// to port 0: a port the kernel hands out and the test releases can be handed to the next
/// test running beside it, or taken by a client's outgoing connection, before the node binds
/// it. Two test clusters sharing a peer port talk to each other and mix their logs (seen as
/// flaky failures in CI). Within one test binary a counter never hands out a port twice; a
/// start that depends on the process id keeps concurrent binaries apart.
#[allow(dead_code)] // not every test file starts its own cluster
pub fn free_ports(n: usize) -> Vec<u16> {
    free_ports_on("127.0.0.1", n)
}

/// [`free_ports`] on another loopback address (127.0.0.x, which Linux routes to `lo`).
#[allow(dead_code)] // not every test file needs one
pub fn free_ports_on(ip: &str, n: usize) -> Vec<u16> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..TEST_PORTS.len() {
        if held.len() == n {
            break;
        }
        let offset = NEXT_PORT.fetch_add(1, Ordering::Relaxed).wrapping_add(std::process::id().wrapping_mul(997));
        let port = TEST_PORTS.start + (offset % u32::from(TEST_PORTS.end - TEST_PORTS.start)) as u16;
        if let Ok(listener) = TcpListener::bind((ip, port)) {
            held.push(listener);
        }
    }
    assert_eq!(held.len(), n, "{n} free ports in {TEST_PORTS:?} on {ip}");
    held.iter().map(|l| l.local_addr().expect("a bound port").port()).collect()
}

/// Where [`free_ports`] looks: below the kernel's ephemeral range.
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// How many ports this test binary has tried.
static NEXT_PORT: AtomicU32 = AtomicU32::new(0);

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
