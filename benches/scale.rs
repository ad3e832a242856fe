//! The scale and cost rows (`scalebench all`): leases, an expiry storm, a 1 GiB key space,
//! restart, catch-up, disk growth under compaction and put latency, leasekv against etcd.
//!
//! ```text
//! cargo bench --bench scale                       # every row at the issue's sizes (about an hour)
//! cargo bench --bench scale -- --scale 0.01       # a quick look
//! cargo bench --bench scale -- --only leases,keys # some rows
//! ```
//! Each row alone: `cargo run --release -p leasekv --bin scalebench -- ROW --system leasekv|etcd
//! [--count N]`. The figures are printed (a `key=value` line per row and system), written as
//! JSON to `target/scalebench/` and drawn to `docs/scalebench/`; docs/performance.md reports
//! them.

use std::process::Command;

fn main() {
    // cargo passes `--bench` to a bench target; scalebench's own options follow it.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let status = Command::new(env!("CARGO_BIN_EXE_scalebench"))
        .arg("all")
        .args(&args)
        .env("KVSERVER_BIN", env!("CARGO_BIN_EXE_kvserver"))
        .status()
        .expect("scalebench runs");
    std::process::exit(status.code().unwrap_or(1));
}
