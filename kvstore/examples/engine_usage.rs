//! What a stopped member's state engine holds, by kind of record, beside what its files
//! take on disk: the split that tells sled's own overhead from the data.
//!
//! ```text
//! cargo run --release -p leasekv-kvstore --example engine_usage -- DATA_DIR
//! ```
//!
//! `DATA_DIR` is a member's data directory (holding `state/` and `log/`), or its `state/`
//! directory alone. The member must be stopped: sled takes the directory's lock. Nothing is
//! written, except that opening the engine deletes value files no record names (what a
//! restart of the member would delete).

use leasekv_kvstore::engine::{DiskStateEngine, Engine, Scan, DEFAULT_FLUSH_EVERY};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};

/// What each first byte of a state key names (the state's layout, `state/layout.rs`).
fn kind(first: u8) -> &'static str {
    match first {
        b'k' => "key records",
        b'e' => "history pages (pointers into state/values/ for pages of 1 KiB or more)",
        b'r' => "history size runs",
        b's' => "history sizes (the layout before runs)",
        b'l' => "leases",
        b'a' => "lease attachments",
        b'm' => "meta records (the state's, auth's)",
        _ => "other",
    }
}

/// Bytes the files under `path` take on disk (allocated blocks, so sparse files count what
/// they hold).
fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    if meta.is_dir() {
        std::fs::read_dir(path).map_or(0, |entries| entries.flatten().map(|e| disk_bytes(&e.path())).sum())
    } else {
        meta.blocks() * 512
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(dir) = std::env::args().nth(1).map(PathBuf::from) else {
        return Err("usage: engine_usage DATA_DIR (a stopped member's data directory, or its state/)".into());
    };
    let state_dir = if dir.join("state").is_dir() { dir.join("state") } else { dir.clone() };
    // Opening sled where it has no database would create one.
    if !state_dir.join("db").is_file() {
        return Err(format!("{} holds no state engine (no sled `db` file)", state_dir.display()).into());
    }
    let config = leasekv_kvstore::state::value_log_config();
    let engine = DiskStateEngine::open_in(&state_dir, 64 << 20, DEFAULT_FLUSH_EVERY, config)?;
    let mut by_kind: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    for entry in Scan::new(&engine as &dyn Engine, (Bound::Unbounded, Bound::Unbounded), false, 1024) {
        let (key, value) = entry?;
        let counted = by_kind.entry(kind(key.first().copied().unwrap_or(0))).or_default();
        counted.0 += 1;
        counted.1 += (key.len() + value.len()) as u64;
    }
    let held: u64 = by_kind.values().map(|(_, bytes)| bytes).sum();
    println!("{:<58} {:>12} {:>16}", "state engine", "records", "key+value bytes");
    for (name, (records, bytes)) in &by_kind {
        println!("{name:<58} {records:>12} {bytes:>16}");
    }
    drop(engine);
    let state_files = disk_bytes(&state_dir);
    println!("{:<58} {:>12} {held:>16}", "in all", "");
    println!("state/ on disk: {state_files} bytes ({:.2}x what it holds)", state_files as f64 / held.max(1) as f64);
    println!("  of it the value files (state/values/): {} bytes", disk_bytes(&state_dir.join("values")));
    if state_dir != dir {
        println!("log/ on disk: {} bytes", disk_bytes(&dir.join("log")));
        println!("the data directory on disk: {} bytes", disk_bytes(&dir));
    }
    Ok(())
}
