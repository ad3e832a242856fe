//! What one run of a workload measured, as it is printed (the last line, `key=value` pairs)
//! and written (JSON under `target/scalebench/`, which `scalebench plot` draws).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One curve of a run: what was measured against what, e.g. RSS against live leases.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Series {
    /// The x axis, with its unit, e.g. `live leases` or `seconds`.
    pub x_label: String,
    /// The y axis, with its unit, e.g. `RSS (MiB)`.
    pub y_label: String,
    /// The points in the order they were taken.
    pub points: Vec<(f64, f64)>,
}

/// The figures of one workload run against one system.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    /// The workload's name, as given on the command line (`leases`, `keys`, ...).
    pub workload: String,
    /// `leasekv` (PaxosLease), `leasekv/lease-tracker` or `etcd`.
    pub system: String,
    /// The workload's size (`--count`).
    pub count: u64,
    /// The command that reproduces this run.
    pub command: String,
    /// When the run ended (seconds since the Unix epoch).
    pub finished_unix_s: u64,
    /// The figures, by name (each name says its unit: `_ms`, `_bytes`, `_per_s`, ...).
    pub figures: BTreeMap<String, f64>,
    /// Curves to plot, by name; the same name in another system's report is the same curve,
    /// drawn beside it.
    pub series: BTreeMap<String, Series>,
}

impl Report {
    /// An empty report of `workload` against `system` at size `count`.
    pub fn new(workload: &str, system: &str, count: u64) -> Report {
        let command = format!(
            "cargo run --release -p leasekv --bin scalebench -- {}",
            std::env::args().skip(1).collect::<Vec<_>>().join(" ")
        );
        Report { workload: workload.into(), system: system.into(), count, command, ..Default::default() }
    }

    /// Records one figure.
    pub fn figure(&mut self, name: &str, value: f64) {
        self.figures.insert(name.to_string(), value);
    }

    /// Adds a point to the curve `name` (created with its axis labels on first use).
    pub fn point(&mut self, name: &str, x_label: &str, y_label: &str, x: f64, y: f64) {
        let series = self.series.entry(name.to_string()).or_insert_with(|| Series {
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            points: Vec::new(),
        });
        series.points.push((x, y));
    }

    /// The last line a run prints: `workload=… system=… count=… figure=value …`.
    pub fn summary_line(&self) -> String {
        let mut line = format!("workload={} system={} count={}", self.workload, self.system, self.count);
        for (name, value) in &self.figures {
            if value.fract() == 0.0 && value.abs() < 1e15 {
                line.push_str(&format!(" {name}={value:.0}"));
            } else {
                line.push_str(&format!(" {name}={value:.3}"));
            }
        }
        line
    }

    /// The file this report is written to under `dir`: one per workload, system and count,
    /// so a re-run replaces its own row only.
    pub fn path_in(&self, dir: &Path) -> PathBuf {
        dir.join(format!("{}-{}-{}.json", self.workload, self.system.replace('/', "_"), self.count))
    }

    /// Writes the report as pretty JSON into `dir` (created if missing).
    pub fn write(&self, dir: &Path) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = self.path_in(dir);
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// Every report in `dir` (files that do not parse are skipped with a warning).
    pub fn read_all(dir: &Path) -> std::io::Result<Vec<Report>> {
        let mut reports = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "json") {
                match std::fs::read_to_string(&path).map(|t| serde_json::from_str::<Report>(&t)) {
                    Ok(Ok(report)) => reports.push(report),
                    _ => eprintln!("scalebench: skipping {}: not a report", path.display()),
                }
            }
        }
        reports.sort_by(|a, b| (&a.workload, &a.system, a.count).cmp(&(&b.workload, &b.system, b.count)));
        Ok(reports)
    }
}
