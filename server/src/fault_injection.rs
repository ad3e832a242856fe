//! Fault injection for the chaos harness (`src/bin/chaos/`): a node clock at a chosen rate,
//! deliberately broken variants the harness must catch, and a log of the master lease
//! intervals the harness checks for overlap.
//!
//! Everything here is set through environment variables so that the configuration format
//! has no test-only settings. Only a kvserver built with the `fault-injection` feature acts
//! on them; any other build refuses to start when one is set, so a fault meant for a test
//! never goes unnoticed in a production build (or the other way round).
//!
//! | variable | meaning |
//! |---|---|
//! | `LEASEKV_FAULT_CLOCK_RATE` | the node's monotonic clock runs at this × real time (0.1–10) |
//! | `LEASEKV_FAULT_CLOCK_RATE_FILE` | a file holding a rate, re-read every 100 ms, to change it while running |
//! | `LEASEKV_FAULT_BREAK` | a negative control: `follower-reads`, `ack-before-fsync`, `stale-lease-check`, `skip-fdatasync`, … (the table in docs/chaos.md) |
//! | `LEASEKV_FAULT_LEASE_LOG` | a file the node appends its master lease intervals to (wall-clock ns) |
//! | `LEASEKV_FAULT_CORRUPT_KEY` | at start, a bit of this key's value is flipped as the node reads it, not on disk (the corruption check's negative control; a restart without it heals the member) |

use std::path::PathBuf;
use thiserror::Error;

/// The environment variables this module reads.
pub const VARIABLES: [&str; 6] = [
    "LEASEKV_FAULT_CLOCK_RATE",
    "LEASEKV_FAULT_CLOCK_RATE_FILE",
    "LEASEKV_FAULT_BREAK",
    "LEASEKV_FAULT_LEASE_LOG",
    "LEASEKV_FAULT_SYNC_FILE",
    "LEASEKV_FAULT_CORRUPT_KEY",
];

/// A deliberately broken node, for the harness's negative controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServerBreakage {
    /// The real thing.
    #[default]
    None,
    /// Linearizable reads answered by any node from its own state.
    FollowerReads,
    /// Log acceptances acknowledged before they are on disk.
    AckBeforeFsync,
    /// The node's lease clock stands still while the process is stopped (as a lease counted
    /// in timer ticks would): after SIGCONT the node checks requests against a lease that
    /// ran out during the pause, and a deposed master serves reads as if no time had passed.
    StaleLeaseCheck,
    /// A watch created with a start revision begins one revision later (an off-by-one in
    /// resumption): a client that resumes at `last + 1` misses an event.
    WatchResumeGap,
    /// The storage trusts sled's flush alone (on Linux a `sync_file_range`, which persists
    /// neither the file's size nor the drive's cache) and skips its own `fdatasync`: a power
    /// loss takes acknowledged writes with it.
    SkipFdatasync,
    /// A Txn whose success branch has several operations applies the first with the
    /// comparisons and each other one as a transaction of its own: its writes land at
    /// different revisions, and a crash between them leaves half of them.
    SplitTxn,
    /// A read-lease holder goes on answering linearizable reads after its lease ran out,
    /// until a higher log ballot reaches it (docs/read-leases.md).
    ReadLeaseExpired,
}

impl ServerBreakage {
    /// Every broken variant with its name.
    pub const ALL: [(&'static str, ServerBreakage); 7] = [
        ("follower-reads", ServerBreakage::FollowerReads),
        ("ack-before-fsync", ServerBreakage::AckBeforeFsync),
        ("stale-lease-check", ServerBreakage::StaleLeaseCheck),
        ("watch-resume-gap", ServerBreakage::WatchResumeGap),
        ("skip-fdatasync", ServerBreakage::SkipFdatasync),
        ("split-txn", ServerBreakage::SplitTxn),
        ("read-lease-expired", ServerBreakage::ReadLeaseExpired),
    ];
}

/// Set once at start under `watch-resume-gap`; read by the watch service.
static WATCH_RESUME_GAP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The revision a watch asked to start at `requested` really starts at: `requested`,
/// except under the `watch-resume-gap` control.
pub fn watch_start(requested: i64) -> i64 {
    if requested > 1 && WATCH_RESUME_GAP.load(std::sync::atomic::Ordering::Relaxed) {
        requested + 1
    } else {
        requested
    }
}

/// Set once at start under `split-txn`; read by the KV service.
static SPLIT_TXN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether Txns are split into one transaction per operation (the `split-txn` control).
pub fn split_txn() -> bool {
    SPLIT_TXN.load(std::sync::atomic::Ordering::Relaxed)
}

/// What the environment asked for.
#[derive(Debug, Clone, Default)]
pub struct FaultInjection {
    /// The clock rate at start.
    pub clock_rate: Option<f64>,
    /// Where to re-read the clock rate from while running.
    pub clock_rate_file: Option<PathBuf>,
    /// The negative control in force.
    pub breakage: ServerBreakage,
    /// Where to log master lease intervals.
    pub lease_log: Option<PathBuf>,
    /// Where to re-read the storage sync faults from while running: `DELAY_MS FAIL`
    /// (e.g. `300 0`: every sync waits 300 ms; `0 1`: every sync fails).
    pub sync_file: Option<PathBuf>,
    /// A key whose value is damaged in this node's state at start.
    pub corrupt_key: Option<Vec<u8>>,
}

/// A fault-injection variable that cannot be honoured.
#[derive(Debug, Error)]
pub enum FaultInjectionError {
    /// This build has no fault injection.
    #[error(
        "{0} is set, but this kvserver was built without fault injection (build with `--features fault-injection`; release builds never act on it)"
    )]
    NotBuiltIn(&'static str),
    /// A value that does not parse or is out of range.
    #[error("{variable}={value:?}: {why}")]
    Invalid {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What is allowed.
        why: String,
    },
}

impl FaultInjection {
    /// Reads the variables of [`VARIABLES`].
    pub fn from_env() -> Result<FaultInjection, FaultInjectionError> {
        let var = |name: &'static str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if !cfg!(feature = "fault-injection") {
            return match VARIABLES.iter().find(|name| var(name).is_some()) {
                Some(name) => Err(FaultInjectionError::NotBuiltIn(name)),
                None => Ok(FaultInjection::default()),
            };
        }
        let clock_rate = match var("LEASEKV_FAULT_CLOCK_RATE") {
            Some(value) => Some(parse_rate("LEASEKV_FAULT_CLOCK_RATE", &value)?),
            None => None,
        };
        let breakage = match var("LEASEKV_FAULT_BREAK") {
            Some(value) => {
                ServerBreakage::ALL.iter().find(|(name, _)| *name == value).map(|(_, b)| *b).ok_or_else(|| {
                    FaultInjectionError::Invalid {
                        variable: "LEASEKV_FAULT_BREAK",
                        why: format!(
                            "unknown; allowed: {}",
                            ServerBreakage::ALL.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                        ),
                        value,
                    }
                })?
            }
            None => ServerBreakage::None,
        };
        Ok(FaultInjection {
            clock_rate,
            clock_rate_file: var("LEASEKV_FAULT_CLOCK_RATE_FILE").map(PathBuf::from),
            breakage,
            lease_log: var("LEASEKV_FAULT_LEASE_LOG").map(PathBuf::from),
            sync_file: var("LEASEKV_FAULT_SYNC_FILE").map(PathBuf::from),
            corrupt_key: var("LEASEKV_FAULT_CORRUPT_KEY").map(String::into_bytes),
        })
    }

    /// Whether anything is injected.
    pub fn is_active(&self) -> bool {
        self.clock_rate.is_some()
            || self.clock_rate_file.is_some()
            || self.breakage != ServerBreakage::None
            || self.lease_log.is_some()
            || self.sync_file.is_some()
            || self.corrupt_key.is_some()
    }
}

fn parse_rate(variable: &'static str, value: &str) -> Result<f64, FaultInjectionError> {
    let invalid = || FaultInjectionError::Invalid {
        variable,
        value: value.to_string(),
        why: "a clock rate between 0.1 and 10 (1 is real time)".into(),
    };
    let rate: f64 = value.trim().parse().map_err(|_| invalid())?;
    if (0.1..=10.0).contains(&rate) {
        Ok(rate)
    } else {
        Err(invalid())
    }
}

#[cfg(feature = "fault-injection")]
mod active {
    use super::{parse_rate, FaultInjection};
    use leasekv_lease::backend::{clock_rate, MonotonicClock};
    use leasekv_lease::Instant;
    use std::io::Write;
    use std::path::PathBuf;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    impl FaultInjection {
        /// Sets the clock rate and starts re-reading the rate file. Call before the node's
        /// clock is first read.
        pub fn start_clock(&self) {
            if let Some(rate) = self.clock_rate {
                // Range-checked when parsed.
                let _ = clock_rate::set(rate);
                tracing::warn!(rate, "fault injection: the node clock runs at this rate");
            }
            if let Some(path) = self.clock_rate_file.clone() {
                tokio::spawn(follow_rate_file(path));
            }
            if self.breakage == super::ServerBreakage::StaleLeaseCheck {
                clock_rate::ignore_stops();
            }
            if self.breakage == super::ServerBreakage::WatchResumeGap {
                super::WATCH_RESUME_GAP.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            if self.breakage == super::ServerBreakage::SplitTxn {
                super::SPLIT_TXN.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            if self.breakage == super::ServerBreakage::SkipFdatasync {
                leasekv_kvstore::storage::sync_faults::skip_fdatasync();
            }
            if self.breakage == super::ServerBreakage::AckBeforeFsync {
                // A slow disk under the early acks: with syncs of a millisecond the writes
                // acknowledged but not yet durable are too few for a kill-all to land among
                // them every time (a clean-clone CI run missed the control once that way).
                leasekv_kvstore::storage::sync_faults::set(ACK_BEFORE_FSYNC_SYNC_DELAY, false);
            }
            if let Some(path) = self.sync_file.clone() {
                tokio::spawn(follow_sync_file(path));
            }
        }
    }

    /// How long each sync takes under the `ack-before-fsync` control.
    const ACK_BEFORE_FSYNC_SYNC_DELAY: Duration = Duration::from_millis(150);

    /// Applies `DELAY_MS FAIL` from `path` to the storage's sync, ten times a second.
    async fn follow_sync_file(path: PathBuf) {
        let mut interval = tokio::time::interval(Duration::from_millis(100));
        let mut current = (0u64, false);
        loop {
            interval.tick().await;
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            let fields: Vec<&str> = text.split_whitespace().collect();
            let parsed = match fields.as_slice() {
                [delay, fail] => delay.parse::<u64>().ok().zip(match *fail {
                    "0" => Some(false),
                    "1" => Some(true),
                    _ => None,
                }),
                _ => None,
            };
            match parsed {
                Some(wanted) if wanted != current => {
                    current = wanted;
                    leasekv_kvstore::storage::sync_faults::set(Duration::from_millis(wanted.0), wanted.1);
                    tracing::warn!(
                        delay_ms = wanted.0,
                        fail = wanted.1,
                        "fault injection: storage sync faults changed"
                    );
                }
                Some(_) => {}
                None => tracing::warn!(?text, "fault injection: ignoring the sync file (want `DELAY_MS 0|1`)"),
            }
        }
    }

    async fn follow_rate_file(path: PathBuf) {
        let mut interval = tokio::time::interval(Duration::from_millis(100));
        loop {
            interval.tick().await;
            // A few bytes, read ten times a second: blocking the worker for it is harmless.
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            match parse_rate("LEASEKV_FAULT_CLOCK_RATE_FILE", &text) {
                Ok(rate) if rate != clock_rate::current() => {
                    let _ = clock_rate::set(rate);
                    tracing::warn!(rate, "fault injection: the node clock rate changed");
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "fault injection: ignoring the rate file"),
            }
        }
    }

    /// Appends `lease NODE FROM_NS UNTIL_NS` lines (wall-clock nanoseconds since the Unix
    /// epoch) for each master lease interval this node believes in, and `end NODE AT_NS` when
    /// its belief ends: the harness checks that no two
    /// nodes' intervals overlap. Wall clock, because every process on the machine shares it
    /// and the harness compares across processes; the rate-scaled clock is mapped back to
    /// real time through its own inverse.
    pub struct LeaseLog {
        file: std::fs::File,
        node: u32,
        clock: MonotonicClock,
        last_until: Option<Instant>,
    }

    impl LeaseLog {
        /// Opens (appends to) the log named by the environment, if any.
        pub fn open(faults: &FaultInjection, node: u32, clock: MonotonicClock) -> Option<LeaseLog> {
            let path = faults.lease_log.as_ref()?;
            match std::fs::OpenOptions::new().create(true).append(true).open(path) {
                Ok(file) => Some(LeaseLog { file, node, clock, last_until: None }),
                Err(error) => {
                    tracing::error!(%error, path = %path.display(), "fault injection: cannot open the lease log");
                    None
                }
            }
        }

        /// Records that, at `now`, this node believes it is master until `valid_until`.
        pub fn record(&mut self, now: Instant, valid_until: Option<Instant>) {
            let wall_now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            let Some(until) = valid_until.filter(|u| now < *u) else {
                // The belief ends now: early on a release or a step-down, and otherwise when
                // this node's clock reached the end, which is later than logged if the
                // clock's rate fell since.
                if let Some(last) = self.last_until.take() {
                    // When this node's clock reached the end, in real time (a pause must not
                    // count as belief: the node could not act while stopped).
                    let tokio_now = tokio::time::Instant::now();
                    let overdue = tokio_now.saturating_duration_since(self.clock.to_tokio(last));
                    let end = wall_now.saturating_sub(overdue);
                    let _ = writeln!(self.file, "end {} {}", self.node, end.as_nanos());
                }
                return;
            };
            if self.last_until == Some(until) {
                return;
            }
            self.last_until = Some(until);
            let real_left = self.clock.to_tokio(until).saturating_duration_since(tokio::time::Instant::now());
            let from = wall_now.as_nanos();
            let to = (wall_now + real_left).as_nanos();
            let _ = writeln!(self.file, "lease {} {from} {to}", self.node);
        }
    }
}

#[cfg(feature = "fault-injection")]
pub use active::LeaseLog;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_checked() {
        assert!(parse_rate("X", "1.01").is_ok());
        for bad in ["0", "11", "fast", "NaN"] {
            let message = parse_rate("X", bad).expect_err(bad).to_string();
            assert!(message.contains("between 0.1 and 10"), "{message}");
        }
    }
}

/// The node loop's side of fault injection: the lease log. In a build without the feature
/// it holds nothing and does nothing.
#[derive(Default)]
pub struct NodeFaults {
    #[cfg(feature = "fault-injection")]
    lease_log: Option<LeaseLog>,
}

impl NodeFaults {
    /// The node loop's faults for node `node` reading `clock`.
    #[cfg_attr(not(feature = "fault-injection"), allow(unused_variables))]
    pub fn new(faults: &FaultInjection, node: u32, clock: leasekv_lease::backend::MonotonicClock) -> Self {
        NodeFaults {
            #[cfg(feature = "fault-injection")]
            lease_log: LeaseLog::open(faults, node, clock),
        }
    }

    /// The node's mastership as the loop sees it at `now`.
    #[cfg_attr(not(feature = "fault-injection"), allow(unused_variables))]
    pub fn mastership(&mut self, now: leasekv_lease::Instant, valid_until: Option<leasekv_lease::Instant>) {
        #[cfg(feature = "fault-injection")]
        if let Some(log) = &mut self.lease_log {
            log.record(now, valid_until);
        }
    }
}
