//! Read leases over emulated wide-area links: `wanbench` for leasekv (read leases on, then
//! off) and for etcd in one run, each with the same delay on every member link.
//!
//! ```text
//! cargo bench --features fault-injection --bench wan                  # RTT 20 ms, 3 runs each
//! cargo bench --features fault-injection --bench wan -- --rtt-ms 50 --runs 1
//! ```
//! Each run prints wanbench's `key=value` line; then the median of every figure per system.
//! Needs root, iproute2, nftables and etcd (the chaos harness's network; docs/read-leases.md).

use std::collections::BTreeMap;
use std::process::Command;

fn main() {
    // cargo passes `--bench` to a bench target; the options follow it.
    let mut args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let mut runs = 3usize;
    if let Some(at) = args.iter().position(|a| a == "--runs") {
        runs = args.get(at + 1).and_then(|n| n.parse().ok()).expect("--runs N");
        args.drain(at..at + 2);
    }
    let systems: [(&str, &[&str]); 3] = [
        ("leasekv", &["--system", "leasekv"]),
        ("leasekv-no-read-leases", &["--system", "leasekv", "--no-read-leases"]),
        ("etcd", &["--system", "etcd"]),
    ];
    let mut figures: BTreeMap<&str, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    // Interleaved, so that a slow moment of the machine falls on every system alike.
    for run in 0..runs {
        for (name, system) in systems {
            let output = Command::new(env!("CARGO_BIN_EXE_wanbench"))
                .args(system)
                .args(&args)
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .expect("wanbench runs");
            let stdout = String::from_utf8_lossy(&output.stdout);
            let Some(line) = stdout.lines().last().filter(|_| output.status.success()) else {
                eprintln!("{name} run {run}: wanbench failed: {}", String::from_utf8_lossy(&output.stderr));
                std::process::exit(1);
            };
            println!("{name} run {run}: {line}");
            for (key, value) in line.split_whitespace().filter_map(|kv| kv.split_once('=')) {
                if let Ok(value) = value.parse::<f64>() {
                    figures.entry(name).or_default().entry(key.to_string()).or_default().push(value);
                }
            }
        }
    }
    for (name, keys) in &figures {
        let medians: Vec<String> = keys
            .iter()
            .map(|(key, values)| {
                let mut values = values.clone();
                values.sort_by(f64::total_cmp);
                format!("{key}={:.2}", values[values.len() / 2])
            })
            .collect();
        println!("median {name}: {}", medians.join(" "));
    }
}
