//! One big write on the store's real engine: a DeleteRange of 200,000 keys on sled, as
//! `etcdctl check perf` ends (it deletes every key it wrote in one request). Times the
//! apply (in memory, on the node loop) and the flush (the records built and written to
//! sled in one batch, also on the node loop) separately, at two value sizes, with the
//! server's default engine cache.
//!
//! The flush of such a batch stalls every member at once (the closing DeleteRange of
//! `check perf --load=l` took 20 s on each). This bench is its baseline: the flush is
//! dominated by sled 0.34's `apply_batch`, which clones a key's whole leaf (up to 16
//! records, values inline) for every delete, so it grows with the value size.
//!
//! Each value size runs twice: with the keys written in key order, and written in a
//! scattered order (as `check perf`'s random keys are), where the DeleteRange, which goes in
//! key order, finds each key's last value (its delete event's `prev_kv`) anywhere in the
//! history.
//!
//! Prints one `leasekv-bench:` line per value size and order (median of [`RUNS`] runs).
//!
//! `cargo bench -p leasekv-kvstore --bench big_write` (`BIG_WRITE_ONLY=1024-Scattered`, say, for
//! one case)

use leasekv_kvstore::engine::{DiskStateEngine, DEFAULT_FLUSH_EVERY};
use leasekv_kvstore::storage::DEFAULT_STATE_CACHE_BYTES;
use leasekv_kvstore::{Command, DeleteRangeRequest, KeyRange, PutRequest, StateMachine};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// kvserver's allocator, so that the times are a member's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Keys written, then deleted in one DeleteRange.
const KEYS: usize = 200_000;
/// Value sizes, bytes: check perf's (1 KiB) and a small one.
const VALUE_SIZES: &[usize] = &[1024, 100];
/// Puts per engine write while loading (about what a loaded node loop flushes at once).
const PUTS_PER_FLUSH: usize = 4096;
/// Runs per value size; the median is printed.
const RUNS: usize = 3;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The order the keys are written in.
#[derive(Debug, Clone, Copy)]
enum Order {
    /// Key order: neighbours in the key space are neighbours in the history.
    Keys,
    /// A fixed permutation (`i * STRIDE mod KEYS`), so that keys next to each other were
    /// written far apart.
    Scattered,
}

/// A stride coprime with [`KEYS`] (200,000 = 2^6 * 5^5), so that `i * STRIDE mod KEYS`
/// visits every key once.
const STRIDE: usize = 7_919;

/// One run: a fresh engine loaded with `KEYS` keys, then the DeleteRange's apply and flush.
fn run(value_size: usize, order: Order) -> (Duration, Duration) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let engine = DiskStateEngine::open_in(
        dir.path(),
        DEFAULT_STATE_CACHE_BYTES,
        DEFAULT_FLUSH_EVERY,
        leasekv_kvstore::state::value_log_config(),
    )
    .expect("the engine opens");
    let mut sm = StateMachine::on_engine(Arc::new(engine)).expect("an empty engine");
    let mut applied = 0;
    for i in 0..KEYS {
        let n = match order {
            Order::Keys => i,
            Order::Scattered => i * STRIDE % KEYS,
        };
        let key = format!("/check-perf/{n:012}").into_bytes();
        sm.apply(&Command::Put(PutRequest { key, value: vec![b'v'; value_size], lease: 0, prev_kv: false }))
            .result
            .expect("put");
        applied += 1;
        if i % PUTS_PER_FLUSH == PUTS_PER_FLUSH - 1 {
            sm.flush_through(applied).expect("load flush");
        }
    }
    sm.flush_through(applied).expect("load flush");
    let delete = Command::DeleteRange(DeleteRangeRequest {
        range: KeyRange { key: b"/check-perf/".to_vec(), range_end: b"/check-perf0".to_vec() },
        prev_kv: false,
    });
    let start = Instant::now();
    sm.apply(&delete).result.expect("delete");
    let apply = start.elapsed();
    applied += 1;
    let start = Instant::now();
    sm.flush_through(applied).expect("the delete's flush");
    let flush = start.elapsed();
    assert_eq!(sm.key_count(), 0);
    (apply, flush)
}

fn main() {
    // `cargo test --benches` runs bench targets with `--test`: nothing to check here.
    if std::env::args().any(|arg| arg == "--test") {
        return;
    }
    // `BIG_WRITE_ONLY=1024-Scattered` runs one case (for a profile).
    let only = std::env::var("BIG_WRITE_ONLY").ok();
    for &value_size in VALUE_SIZES {
        for order in [Order::Keys, Order::Scattered] {
            if only.as_ref().is_some_and(|only| *only != format!("{value_size}-{order:?}")) {
                continue;
            }
            let (applies, flushes): (Vec<_>, Vec<_>) = (0..RUNS).map(|_| run(value_size, order)).unzip();
            println!(
                "leasekv-bench: DeleteRange of {KEYS} keys x {value_size} B written in {order:?} order on sled \
                 ({} MiB cache): apply {:.2} s, flush {:.2} s (median of {RUNS})",
                DEFAULT_STATE_CACHE_BYTES >> 20,
                median(applies).as_secs_f64(),
                median(flushes).as_secs_f64()
            );
        }
    }
}
