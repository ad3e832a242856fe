//! `[compaction]`: how much MVCC history the cluster keeps (etcd's
//! `--auto-compaction-mode` and `--auto-compaction-retention`).

use std::fmt;
use std::time::Duration;

/// The auto-compaction policy: what the master compacts, and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionPolicy {
    /// Never compact by itself; only the Compact RPC does (etcd's default; history then
    /// grows without bound, in memory).
    Off,
    /// Keep the last this many revisions (etcd's `revision` mode).
    Revisions(u64),
    /// Keep this much time of history (etcd's `periodic` mode): compact to the revision
    /// that was current this long ago.
    Periodic(Duration),
}

impl CompactionPolicy {
    /// leasekv's default: the last 10,000 revisions. Bounded, unlike etcd's default (none),
    /// because the history is held in memory; 10,000 revisions cover minutes of typical
    /// service-registration traffic for watchers that reconnect and resume, and a few
    /// megabytes at most with values of a few hundred bytes.
    pub const DEFAULT: CompactionPolicy = CompactionPolicy::Revisions(10_000);

    /// Parses `mode` and `retention` as written in the file: `retention` is a revision count
    /// in `revision` mode and a duration (`"30s"`, `"5m"`, `"1h"`, or milliseconds as a plain
    /// number) in `periodic` mode; `off` takes none.
    pub fn parse(mode: &str, retention: Option<&str>) -> Result<Self, String> {
        match (mode, retention) {
            ("off", None) => Ok(CompactionPolicy::Off),
            ("off", Some(_)) => Err("mode = \"off\" takes no retention".to_string()),
            ("revision", None) => Ok(CompactionPolicy::DEFAULT),
            ("revision", Some(text)) => match text.trim().parse::<u64>() {
                Ok(0) | Err(_) => {
                    Err(format!("retention = {text:?} is not a revision count; expected a whole number ≥ 1"))
                }
                Ok(n) => Ok(CompactionPolicy::Revisions(n)),
            },
            ("periodic", None) => Ok(CompactionPolicy::Periodic(Duration::from_secs(3600))),
            ("periodic", Some(text)) => match parse_duration(text) {
                Some(d) if d >= Duration::from_secs(1) => Ok(CompactionPolicy::Periodic(d)),
                _ => Err(format!(
                    "retention = {text:?} is not a duration of at least 1s; expected e.g. \"30s\", \"5m\", \"1h\""
                )),
            },
            (other, _) => Err(format!("mode = {other:?} is unknown; expected \"revision\", \"periodic\" or \"off\"")),
        }
    }
}

impl fmt::Display for CompactionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompactionPolicy::Off => write!(f, "off"),
            CompactionPolicy::Revisions(n) => write!(f, "keep the last {n} revisions"),
            CompactionPolicy::Periodic(d) => write!(f, "keep {d:?} of history"),
        }
    }
}

/// `"250ms"`, `"30s"`, `"5m"`, `"2h"`, or a plain number of milliseconds.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let millis = match unit.trim() {
        "" | "ms" => n,
        "s" => n.checked_mul(1000)?,
        "m" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_retentions() {
        assert_eq!(CompactionPolicy::parse("off", None), Ok(CompactionPolicy::Off));
        assert_eq!(CompactionPolicy::parse("revision", Some("500")), Ok(CompactionPolicy::Revisions(500)));
        assert_eq!(CompactionPolicy::parse("revision", None), Ok(CompactionPolicy::DEFAULT));
        assert_eq!(
            CompactionPolicy::parse("periodic", Some("5m")),
            Ok(CompactionPolicy::Periodic(Duration::from_secs(300)))
        );
        assert_eq!(
            CompactionPolicy::parse("periodic", Some("1500")),
            Ok(CompactionPolicy::Periodic(Duration::from_millis(1500)))
        );
        for (mode, retention) in
            [("revision", Some("0")), ("revision", Some("5m")), ("periodic", Some("10ms")), ("periodic", Some("5d"))]
        {
            assert!(CompactionPolicy::parse(mode, retention).is_err(), "{mode} {retention:?}");
        }
        let unknown = CompactionPolicy::parse("daily", None).unwrap_err();
        assert!(unknown.contains("\"revision\", \"periodic\" or \"off\""), "{unknown}");
        assert!(CompactionPolicy::parse("off", Some("1")).is_err());
    }
}
