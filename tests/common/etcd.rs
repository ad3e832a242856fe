//! A single-member etcd on 127.0.0.1 that a differential test runs beside leasekv, killed
//! (by pid) when dropped.

#![allow(dead_code)] // each test file uses its own part of it

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// One etcd process, started by the test and killed on drop.
pub struct Etcd {
    child: Child,
    /// Its client port on 127.0.0.1.
    pub client_port: u16,
}

impl Etcd {
    /// Starts etcd (Debian's `etcd-server`) with its data and log in `dir`. `None` when it
    /// is not installed (a failure under `CI=true`: see [`super::tool`]).
    pub fn start(dir: &Path) -> Option<Etcd> {
        let binary = super::tool("etcd", "etcd-server")?;
        let ports = super::free_ports(2);
        let (client, peer) = (format!("http://127.0.0.1:{}", ports[0]), format!("http://127.0.0.1:{}", ports[1]));
        let log = std::fs::File::create(dir.join("etcd.log")).expect("etcd log file");
        let child = Command::new(binary)
            .args(["--name", "single"])
            .arg("--data-dir")
            .arg(dir.join("etcd"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("single={peer}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        Some(Etcd { child, client_port: ports[0] })
    }

    /// `127.0.0.1:PORT` of its client port.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
