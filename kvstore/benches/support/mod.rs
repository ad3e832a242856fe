//! What the store's benchmarks on disk share: the engine kvserver opens, and this process's
//! CPU time.

#![allow(dead_code)] // each benchmark uses its own part

use leasekv_kvstore::engine::{DiskStateEngine, Engine, DEFAULT_FLUSH_EVERY};
use std::sync::Arc;

/// The state engine on disk in `dir`, as kvserver opens it, with a cache of `cache_bytes`.
pub fn disk_engine(dir: &std::path::Path, cache_bytes: u64) -> Arc<dyn Engine> {
    Arc::new(
        DiskStateEngine::open_in(dir, cache_bytes, DEFAULT_FLUSH_EVERY, leasekv_kvstore::state::value_log_config())
            .expect("the engine opens"),
    )
}

/// This process's CPU time (user + system) in seconds, from `/proc/self/stat` (clock
/// ticks of 1/100 s, as Linux reports them).
pub fn cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's name (which may hold spaces) are counted from its ')'.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
