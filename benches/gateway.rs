//! The HTTP/JSON gateway under load: the same HTTP/1.1 load generator (64 clients, each a
//! keep-alive connection from a pool, 256-byte values) against leasekv's gateway and etcd's,
//! three nodes each on 127.0.0.1, in the same run, taking turns run by run.
//!
//! ```text
//! cargo bench --bench gateway            # etcd from PATH (Debian: etcd-server) or ETCD_BIN
//! ```
//! Workloads: `POST /v3/kv/put` and `POST /v3/kv/range` (linearizable), each to every
//! node in turn. `BENCH_TARGETS`, `BENCH_WORKLOADS` and `BENCH_SECONDS` narrow and lengthen
//! the run as for the cluster benchmark. Prints a table and writes
//! `target/leasekv-bench-gateway.json`.

mod common;

use common::{median, run_length, selected, Figures, Target};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const REPEATS: usize = 3;
const CLIENTS: usize = 64;

#[derive(Clone, Copy)]
enum Op {
    Put,
    Range,
}

async fn load(endpoints: &[String], op: Op) -> Figures {
    let client: Client<_, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).pool_max_idle_per_host(CLIENTS).build_http();
    // base64 of a 256-byte value of 'v's: "dnZ2" repeated.
    let value = "dnZ2".repeat(85) + "dg==";
    let run = run_length();
    let deadline = Instant::now() + run;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = client.clone();
        let endpoint = endpoints[c % endpoints.len()].clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0u64;
            while Instant::now() < deadline {
                n += 1;
                let key = format!("/bench/{c}/{}", n % 1000);
                let key = http_key(&key);
                let (path, body) = match op {
                    Op::Put => ("/v3/kv/put", format!(r#"{{"key":"{key}","value":"{value}"}}"#)),
                    Op::Range => ("/v3/kv/range", r#"{"key":"L2JlbmNoL3JlYWR5"}"#.to_string()),
                };
                let request = hyper::Request::post(format!("http://{endpoint}{path}"))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body)))
                    .expect("a valid request");
                let started = Instant::now();
                let ok = match tokio::time::timeout(Duration::from_secs(5), client.request(request)).await {
                    Ok(Ok(response)) => {
                        let status = response.status();
                        response.into_body().collect().await.is_ok() && status.is_success()
                    }
                    _ => false,
                };
                if ok {
                    latencies.push(started.elapsed());
                }
            }
            latencies
        }));
    }
    common::figures(tasks, run).await
}

/// A key as the gateway wants it: standard base64.
fn http_key(key: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(key)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let targets = [Target::LeaseKv("paxoslease"), Target::Etcd];
    let workloads = [("gateway put, 64 clients", Op::Put), ("gateway linearizable range, 64 clients", Op::Range)];
    let mut results: BTreeMap<(String, String), serde_json::Value> = BTreeMap::new();
    let clusters = common::start_selected(&runtime, &targets);
    runtime.block_on(async {
        for (label, op) in workloads {
            if !selected("BENCH_WORKLOADS", label) {
                continue;
            }
            eprintln!("{label} …");
            let mut runs: Vec<Vec<Figures>> = clusters.iter().map(|_| Vec::new()).collect();
            for _ in 0..REPEATS {
                for (cluster, runs) in clusters.iter().zip(&mut runs) {
                    let endpoints: Vec<String> = (0..3).map(|i| cluster.endpoint(i)).collect();
                    runs.push(load(&endpoints, op).await);
                }
            }
            for (cluster, runs) in clusters.iter().zip(&runs) {
                let name = cluster.target.name();
                let ops = median(runs.iter().map(|f| f.ops_per_sec).collect());
                let p50 = median(runs.iter().map(|f| f.p50_ms).collect());
                let p99 = median(runs.iter().map(|f| f.p99_ms).collect());
                let each: Vec<String> = runs.iter().map(|f| format!("{:.0}", f.ops_per_sec)).collect();
                eprintln!(
                    "[{name}] {label}: {ops:.0} ops/s (runs {}), p50 {p50:.2} ms, p99 {p99:.2} ms",
                    each.join(", ")
                );
                results.insert(
                    (label.to_string(), name),
                    serde_json::json!({"ops_per_sec": ops, "p50_ms": p50, "p99_ms": p99}),
                );
            }
        }
    });
    drop(clusters);
    common::print_table(&results);
    common::write_json(&results, "leasekv-bench-gateway.json");
}
