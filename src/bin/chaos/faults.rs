//! The fault classes and how each is injected and healed.

use crate::cluster::{Cluster, DRIFT_BOUND, LEASE_TIME};
use crate::net::Net;
use crate::proxy::LinkFault;
use anyhow::{bail, Context, Result};
use leasekv::lease::rng::SplitMix64;
use std::time::Duration;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultClass {
    /// kill -9 of the master, restart after the hold.
    KillMaster,
    /// kill -9 of a majority at once.
    KillMajority,
    /// kill -9 of every node at once.
    KillAll,
    /// SIGSTOP of the master for 0.5–3× the lease time, then SIGCONT.
    PauseMaster,
    /// The master cut off from every other node (clients still reach it).
    IsolateMaster,
    /// A minority (with the master) cut off from the majority.
    SplitMajority,
    /// Two sides that cannot talk, and one node that talks to both.
    Bridge,
    /// The master's outgoing peer traffic dropped, its incoming kept.
    OneWay,
    /// A node's clock off by up to 90% of the drift bound, faster or slower.
    ClockSkew,
    /// The master's CPU shared with busy competitors (a quarter of one CPU left to it).
    SlowCpu,
    /// The master's disk full (ENOSPC): its data directory on a small tmpfs, filled.
    DiskFull,
    /// Every peer link slow: 10–100 ms of delay plus up to as much jitter, each direction.
    SlowLinks,
    /// The master's peer links lossy: 5–20% of chunks lost (a retransmission wait of
    /// 0.2–1 s, or a reset of the connection), both directions.
    LossyLinks,
    /// The master's storage syncs each take 0.1–1.5 s (a slow or stuck disk; etcd #12528).
    SlowFsync,
    /// The master's storage syncs fail (a failing `fdatasync`).
    FsyncError,
    /// A power loss: kill -9 of a majority (half the time every node), and each victim's
    /// disk forgets every write it had not synced (the data directories on the lazy FUSE
    /// disk, lazyfs.rs).
    PowerLoss,
    /// A follower cut off from every other node (clients still reach it): a read-lease
    /// holder, which must stop answering linearizable reads once its lease runs out.
    IsolateFollower,
    /// SIGSTOP of a follower for 0.5–3× the lease time, then SIGCONT: a read-lease holder
    /// whose lease ran out while it was stopped.
    PauseFollower,
    /// Paginated scans, counts and whole-range reads against every node at once for 3–6 s
    /// (storm.rs): alone, it must cost the master nothing.
    ReadStorm,
}

impl FaultClass {
    /// Every class with its command-line name.
    pub const ALL: [(&'static str, FaultClass); 19] = [
        ("kill-master", FaultClass::KillMaster),
        ("kill-majority", FaultClass::KillMajority),
        ("kill-all", FaultClass::KillAll),
        ("pause-master", FaultClass::PauseMaster),
        ("isolate-master", FaultClass::IsolateMaster),
        ("split-majority", FaultClass::SplitMajority),
        ("bridge", FaultClass::Bridge),
        ("one-way", FaultClass::OneWay),
        ("clock-skew", FaultClass::ClockSkew),
        ("slow-cpu", FaultClass::SlowCpu),
        ("disk-full", FaultClass::DiskFull),
        ("slow-links", FaultClass::SlowLinks),
        ("lossy-links", FaultClass::LossyLinks),
        ("slow-fsync", FaultClass::SlowFsync),
        ("fsync-error", FaultClass::FsyncError),
        ("power-loss", FaultClass::PowerLoss),
        ("isolate-follower", FaultClass::IsolateFollower),
        ("pause-follower", FaultClass::PauseFollower),
        ("read-storm", FaultClass::ReadStorm),
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        FaultClass::ALL.iter().find(|(_, c)| *c == self).map_or("?", |(n, _)| n)
    }

    /// Parses `all` or a comma-separated list.
    pub fn parse_list(list: &str) -> Result<Vec<FaultClass>> {
        if list == "all" {
            return Ok(FaultClass::ALL.iter().map(|(_, c)| *c).collect());
        }
        if list == "none" {
            return Ok(Vec::new());
        }
        list.split(',')
            .map(|name| {
                let name = name.trim();
                match FaultClass::ALL.iter().find(|(n, _)| *n == name) {
                    Some((_, c)) => Ok(*c),
                    None => bail!(
                        "unknown fault {name:?}; known: all, none, {}",
                        FaultClass::ALL.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                    ),
                }
            })
            .collect()
    }
}

/// A fault in force, to be healed.
pub struct Injected {
    /// How long it is held.
    pub hold: Duration,
}

/// Injects one fault of `class`. `clock_break` makes a clock fault go far outside the drift
/// bound (the `fast-clock` negative control).
pub async fn inject(
    class: FaultClass,
    cluster: &mut Cluster,
    net: &Net,
    rng: &mut SplitMix64,
    clock_break: bool,
) -> Result<Injected> {
    let n = cluster.size();
    let master = cluster.master().await.unwrap_or(rng.range_u64(0, n as u64 - 1) as usize);
    let others = |excluded: &[usize]| (0..n).filter(|i| !excluded.contains(i)).collect::<Vec<_>>();
    let hold = rng.duration_between(Duration::from_millis(1500), Duration::from_millis(3500));
    match class {
        FaultClass::KillMaster => cluster.kill(master),
        FaultClass::KillMajority => {
            let mut victims = vec![master];
            while victims.len() < n / 2 + 1 {
                let v = rng.range_u64(0, n as u64 - 1) as usize;
                if !victims.contains(&v) {
                    victims.push(v);
                }
            }
            for v in victims {
                cluster.kill(v);
            }
        }
        FaultClass::KillAll => {
            for i in 0..n {
                cluster.kill(i);
            }
        }
        FaultClass::PowerLoss => {
            anyhow::ensure!(cluster.has_lazy_disks(), "the power-loss fault needs the lazy disks made at start");
            let mut victims = vec![master];
            // Every node on odd-numbered losses (the first included), a majority on the
            // others: a run's first power loss always leaves no surviving copy, so a store
            // that acknowledges unsynced writes is caught in every run, not one in two.
            let count = if cluster.power_lost.losses.is_multiple_of(2) { n } else { n / 2 + 1 };
            while victims.len() < count {
                let v = rng.range_u64(0, n as u64 - 1) as usize;
                if !victims.contains(&v) {
                    victims.push(v);
                }
            }
            // All at once, as a power cut would: every victim dead before any disk forgets.
            for &v in &victims {
                cluster.kill(v);
            }
            for v in victims {
                cluster.power_loss(v)?;
            }
            cluster.power_lost.losses += 1;
        }
        FaultClass::PauseMaster => {
            cluster.signal_pause(master, true);
            let hold = LEASE_TIME.mul_f64(0.5 + 2.5 * rng.next_f64());
            return Ok(Injected { hold });
        }
        FaultClass::PauseFollower => {
            let follower = pick_follower(rng, n, master);
            cluster.signal_pause(follower, true);
            let hold = LEASE_TIME.mul_f64(0.5 + 2.5 * rng.next_f64());
            return Ok(Injected { hold });
        }
        FaultClass::IsolateFollower => {
            let follower = pick_follower(rng, n, master);
            for i in others(&[follower]) {
                net.cut(i, &[follower], false)?;
            }
            net.cut(follower, &others(&[follower]), false)?;
        }
        FaultClass::IsolateMaster => {
            for i in others(&[master]) {
                net.cut(i, &[master], false)?;
            }
            net.cut(master, &others(&[master]), false)?;
        }
        FaultClass::SplitMajority => {
            let mut minority = vec![master];
            while minority.len() < (n - 1) / 2 {
                let v = rng.range_u64(0, n as u64 - 1) as usize;
                if !minority.contains(&v) {
                    minority.push(v);
                }
            }
            let majority = others(&minority);
            for &i in &minority {
                net.cut(i, &majority, false)?;
            }
            for &i in &majority {
                net.cut(i, &minority, false)?;
            }
        }
        FaultClass::Bridge => {
            // The master on one side, the bridge the next node, the rest on the other.
            let bridge = (master + 1) % n;
            let side_a: Vec<usize> = vec![master];
            let side_b = others(&[master, bridge]);
            for &a in &side_a {
                net.cut(a, &side_b, false)?;
            }
            for &b in &side_b {
                net.cut(b, &side_a, false)?;
            }
        }
        FaultClass::OneWay => net.cut(master, &others(&[master]), true)?,
        FaultClass::ClockSkew => {
            let node = rng.range_u64(0, n as u64 - 1) as usize;
            let rate = if clock_break {
                // The master's clock slow enough that it outlives its lease by far. The
                // master for certain (not a guess when none answered in time): slowing a
                // follower's clock shows nothing, and the control must be caught every run.
                let master = cluster
                    .wait_for_master(Duration::from_secs(10))
                    .await
                    .context("fast-clock: no master to slow down within 10 s")?;
                cluster.set_clock_rate(master, 0.4)?;
                for i in others(&[master]) {
                    net.cut(i, &[master], false)?;
                }
                net.cut(master, &others(&[master]), false)?;
                return Ok(Injected { hold: hold.max(Duration::from_secs(3)) });
            } else {
                let off = DRIFT_BOUND * 0.9 * rng.next_f64();
                if rng.chance(0.5) {
                    1.0 + off
                } else {
                    1.0 - off
                }
            };
            cluster.set_clock_rate(node, rate)?;
        }
        // The readers are started by the run (storm.rs), which checks the master after them.
        FaultClass::ReadStorm => {
            return Ok(Injected { hold: rng.duration_between(Duration::from_secs(3), Duration::from_secs(6)) });
        }
        FaultClass::SlowCpu => cluster.slow_cpu(master)?,
        FaultClass::DiskFull => cluster.fill_disk(master)?,
        FaultClass::SlowFsync => {
            let delay = rng.duration_between(Duration::from_millis(100), Duration::from_millis(1500));
            cluster.set_sync_fault(master, delay, false)?;
        }
        FaultClass::FsyncError => cluster.set_sync_fault(master, Duration::ZERO, true)?,
        FaultClass::SlowLinks => {
            for from in 0..n {
                for to in others(&[from]) {
                    let delay = rng.duration_between(Duration::from_millis(10), Duration::from_millis(100));
                    let jitter = delay.mul_f64(rng.next_f64());
                    net.links.set(from, to, LinkFault { delay, jitter, loss: 0.0 });
                }
            }
        }
        FaultClass::LossyLinks => {
            let loss = 0.05 + 0.15 * rng.next_f64();
            for other in others(&[master]) {
                let fault = LinkFault { delay: Duration::ZERO, jitter: Duration::from_millis(10), loss };
                net.links.set(master, other, fault);
                net.links.set(other, master, fault);
            }
        }
    }
    Ok(Injected { hold })
}

/// A node other than `master`, at random.
fn pick_follower(rng: &mut SplitMix64, n: usize, master: usize) -> usize {
    (master + 1 + rng.range_u64(0, n as u64 - 2) as usize) % n
}

/// Ends every fault: heals the network, resumes and restarts nodes, resets clocks.
pub fn heal(cluster: &mut Cluster, net: &Net) -> Result<()> {
    net.heal();
    cluster.restore()
}
