//! The two halves of a catch-up, timed apart from the network: a master's snapshot built
//! from a view of a store on disk (the stream a peer receives), and that stream installed
//! into an empty engine on disk, as a replaced member does.
//!
//! The store is `LEASEKV_BENCH_KEYS` keys (200,000 unless set) of 1 KiB, loaded as
//! `scalebench catch-up` loads it, then compacted to keep its last 10,000 revisions (as
//! auto-compaction does there): most keys' changes lie below the compaction point. Prints
//! the wall and CPU time of each half, the stream's length, and the installed data dir.
//!
//! `cargo bench -p leasekv-kvstore --bench catch_up`

mod support;

use leasekv_kvstore::engine::Engine;
use leasekv_kvstore::{Command, PutRequest, StateMachine};
use std::io::{BufReader, BufWriter, Write};
use std::sync::Arc;
use std::time::Instant;

/// kvserver's allocator, so that the CPU figures are a member's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const VALUE_BYTES: usize = 1024;
const CACHE_BYTES: u64 = 64 << 20;
const KEPT_REVISIONS: i64 = 10_000;

fn put(i: usize) -> Command {
    let key = format!("/registry/pods/default/pod-{i:08}").into_bytes();
    let value = (0..VALUE_BYTES).map(|b| (b * 31 + i) as u8).collect();
    Command::Put(PutRequest { key, value, lease: 0, prev_kv: false })
}

fn engine_in(dir: &std::path::Path) -> Arc<dyn Engine> {
    support::disk_engine(dir, CACHE_BYTES)
}

fn dir_bytes(path: &std::path::Path) -> u64 {
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn main() {
    let keys: usize = std::env::var("LEASEKV_BENCH_KEYS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let source_dir = tempfile::tempdir().expect("a temporary directory");
    let mut source = StateMachine::on_engine(engine_in(source_dir.path())).expect("an empty state");
    let mut slot = 0;
    for i in 0..keys {
        source.apply(&put(i)).result.expect("put");
        if i % 256 == 255 {
            slot += 1;
            source.flush_through(slot).expect("flush");
        }
    }
    let revision = source.revision();
    if revision > KEPT_REVISIONS {
        source.apply(&Command::Compact { revision: revision - KEPT_REVISIONS }).result.expect("compact");
    }
    slot += 1;
    source.flush_through(slot).expect("flush");

    let stream_path = source_dir.path().join("peer.snapshot");
    let (wall, cpu0) = (Instant::now(), support::cpu());
    let view = source.view().expect("a view");
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&stream_path).expect("the stream's file"));
    let len = leasekv_kvstore::state::stream::write(&view, &mut out).expect("the snapshot is written");
    out.flush().expect("flushed");
    drop(view);
    let (build_wall, build_cpu) = (wall.elapsed().as_secs_f64(), support::cpu() - cpu0);

    let target_dir = tempfile::tempdir().expect("a temporary directory");
    eprintln!("installing (pid {})", std::process::id());
    let (wall, cpu0) = (Instant::now(), support::cpu());
    let reader = BufReader::with_capacity(1 << 20, std::fs::File::open(&stream_path).expect("the stream"));
    let installed = StateMachine::install_snapshot_stream(reader, engine_in(target_dir.path())).expect("installed");
    let (install_wall, install_cpu) = (wall.elapsed().as_secs_f64(), support::cpu() - cpu0);
    assert_eq!(installed.digest(), source.digest(), "the installed state is the source's");
    drop(installed);
    println!(
        "leasekv-bench: catch-up of {keys} keys of {VALUE_BYTES} B: build {build_wall:.2} s wall / {build_cpu:.2} s CPU, stream {:.0} MB; install {install_wall:.2} s wall / {install_cpu:.2} s CPU; installed data dir {:.0} MB (source {:.0} MB)",
        len as f64 / 1e6,
        dir_bytes(target_dir.path()) as f64 / 1e6,
        dir_bytes(source_dir.path()) as f64 / 1e6 - len as f64 / 1e6,
    );
}
