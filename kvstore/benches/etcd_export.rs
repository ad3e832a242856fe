//! The backup writer (`etcd_snapshot::write_file`, what `Maintenance.Snapshot` streams)
//! timed on a store on disk, apart from the network: `LEASEKV_BENCH_KEYS` keys (1,000,000
//! unless set) of 100 B, loaded as kvserver applies them, then compacted at the store's
//! revision (every key is then live at the compaction point, the part of the export that is
//! not read in the file's order). Prints the wall and CPU time, the file's length, and this
//! process's peak RSS growth while it writes; the format 9 stream a peer would get is timed
//! beside it for comparison.
//!
//! `cargo bench -p leasekv-kvstore --bench etcd_export`

mod support;

use leasekv_kvstore::{Command, PutRequest, StateMachine};
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// kvserver's allocator, so that the CPU and memory figures are a member's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const VALUE_BYTES: usize = 100;
const CACHE_BYTES: u64 = 64 << 20;

fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok());
    kb.unwrap_or(0u64) * 1024
}

/// Runs `work`, sampling RSS every 10 ms: (wall s, CPU s, peak RSS growth in bytes).
fn measured<T>(work: impl FnOnce() -> T) -> (T, f64, f64, u64) {
    let before = rss();
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut peak = before;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(rss());
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        })
    };
    let (wall, cpu0) = (Instant::now(), support::cpu());
    let result = work();
    let (wall, cpu) = (wall.elapsed().as_secs_f64(), support::cpu() - cpu0);
    done.store(true, Ordering::Relaxed);
    let peak = sampler.join().expect("the sampler");
    (result, wall, cpu, peak.saturating_sub(before))
}

fn main() {
    let keys: usize = std::env::var("LEASEKV_BENCH_KEYS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let engine = support::disk_engine(dir.path(), CACHE_BYTES);
    let mut source = StateMachine::on_engine(engine).expect("an empty state");
    let mut slot = 0;
    for i in 0..keys {
        let key = format!("/registry/pods/ns{}/pod-{i:08}", i % 50).into_bytes();
        source.apply(&Command::Put(PutRequest { key, value: vec![b'v'; VALUE_BYTES], lease: 0, prev_kv: false }));
        if i % 256 == 255 {
            slot += 1;
            source.flush_through(slot).expect("flush");
        }
    }
    source.apply(&Command::Compact { revision: source.revision() });
    slot += 1;
    source.flush_through(slot).expect("flush");

    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).expect("scratch");
    let (len, wall, cpu, growth) = measured(|| {
        let view = source.view().expect("a view");
        let mut file = tempfile::tempfile_in(&scratch).expect("a file");
        leasekv_kvstore::etcd_snapshot::write_file(&view, &mut file, &scratch).expect("written")
    });
    println!(
        "leasekv-bench: etcd snapshot of {keys} keys of {VALUE_BYTES} B, compacted: {wall:.2} s wall / {cpu:.2} s CPU, {:.0} MB, peak RSS growth {:.1} MB",
        len as f64 / 1e6,
        growth as f64 / 1e6
    );
    let (len, wall, cpu, growth) = measured(|| {
        let view = source.view().expect("a view");
        let mut out = BufWriter::with_capacity(1 << 20, tempfile::tempfile_in(&scratch).expect("a file"));
        let len = leasekv_kvstore::state::stream::write(&view, &mut out).expect("written");
        out.flush().expect("flushed");
        len
    });
    println!(
        "leasekv-bench: format 9 stream of the same: {wall:.2} s wall / {cpu:.2} s CPU, {:.0} MB, peak RSS growth {:.1} MB",
        len as f64 / 1e6,
        growth as f64 / 1e6
    );
}
