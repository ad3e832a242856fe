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
        Self::start_from(dir, None)
    }

    /// Starts etcd as [`Etcd::start`] does, on a data dir `etcdctl snapshot restore` built
    /// from `snapshot` first (as an operator moves a store to etcd). Panics when the restore
    /// fails, with etcdctl's words.
    pub fn start_restored(dir: &Path, snapshot: &Path) -> Option<Etcd> {
        Self::start_from(dir, Some(snapshot))
    }

    fn start_from(dir: &Path, snapshot: Option<&Path>) -> Option<Etcd> {
        let binary = super::tool("etcd", "etcd-server")?;
        let ports = super::free_ports(2);
        let (client, peer) = (format!("http://127.0.0.1:{}", ports[0]), format!("http://127.0.0.1:{}", ports[1]));
        if let Some(snapshot) = snapshot {
            let etcdctl = super::tool("etcdctl", "etcd-client")?;
            let output = Command::new(etcdctl)
                .env("ETCDCTL_API", "3")
                .args(["snapshot", "restore"])
                .arg(snapshot)
                .arg("--data-dir")
                .arg(dir.join("etcd"))
                .args(["--name", "single", "--initial-cluster", &format!("single={peer}")])
                .args(["--initial-advertise-peer-urls", &peer])
                .output()
                .expect("etcdctl runs");
            assert!(output.status.success(), "etcdctl snapshot restore {}: {output:?}", snapshot.display());
        }
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

/// etcd and a three-node leasekv (PaxosLease) side by side, for a differential test, once
/// leasekv has elected a master, and that master's index (tests send most requests to
/// another member, so that they are forwarded as a client's would be). `None`, after saying
/// so, when etcd is not installed (a failure under `CI=true`).
pub fn beside_leasekv(dir: &Path) -> Option<(Etcd, super::cluster::Cluster, usize)> {
    let Some(etcd) = Etcd::start(dir) else {
        eprintln!("skipped: etcd is not installed (Debian: etcd-server); required under CI=true");
        return None;
    };
    let cluster = super::cluster::Cluster::start("paxoslease");
    let master = super::cluster::runtime().block_on(async {
        let master = super::cluster::master_index(&cluster).await;
        // Every member knows it (a member's Status names the leader, as etcd's do).
        for i in 0..3 {
            let member = super::cluster::client(&cluster.endpoint(i)).await;
            super::cluster::eventually(std::time::Duration::from_secs(10), || async {
                match member.status().await {
                    Ok(status) if status.leader != 0 => Ok(()),
                    other => Err(format!("member {} does not know the master yet: {other:?}", i + 1)),
                }
            })
            .await;
        }
        master
    });
    Some((etcd, cluster, master))
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
