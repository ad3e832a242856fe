//! The value log's own tests: what reads back, what a crash keeps, when files go.

use super::value_log::ValueLogBreakage;
use super::*;

const PREFIX: u8 = b'e';

fn config() -> ValueLogConfig {
    ValueLogConfig { prefix: PREFIX, min_separated: 100, file_bytes: 4096 }
}

fn key(n: u32) -> Vec<u8> {
    let mut k = vec![PREFIX];
    k.extend_from_slice(&n.to_be_bytes());
    k
}

fn value(n: u32, len: usize) -> Vec<u8> {
    let mut v = vec![2u8];
    v.extend(std::iter::repeat_n((n % 251) as u8, len - 1));
    v
}

/// Puts keys `from..to`, a batch each (a batch's values go to one file: with 1,000-byte
/// values and 4 KiB files, five to a file).
fn put(engine: &dyn Engine, from: u32, to: u32, len: usize) {
    for n in from..to {
        let mut batch = WriteBatch::new();
        batch.put(key(n), value(n, len));
        engine.write(batch).unwrap();
    }
}

fn delete(engine: &dyn Engine, from: u32, to: u32) {
    let mut batch = WriteBatch::new();
    for n in from..to {
        batch.delete(key(n));
    }
    engine.write(batch).unwrap();
}

#[test]
fn long_values_go_to_files_and_read_back_in_gets_and_scans() {
    let engine = MemoryStateEngine::in_memory(config());
    put(&engine, 0, 10, 1000);
    let mut short = WriteBatch::new();
    short.put(key(100), value(100, 50));
    short.put(b"k-other".to_vec(), vec![7; 5000]);
    engine.write(short).unwrap();
    // The engine underneath holds pointers for the long values under the prefix only.
    let stored = engine.inner().get(&key(3)).unwrap().unwrap();
    assert_eq!(stored.len(), 25, "a pointer");
    assert_eq!(engine.inner().get(&key(100)).unwrap().unwrap(), value(100, 50));
    assert_eq!(engine.inner().get(b"k-other").unwrap().unwrap().len(), 5000);
    for n in 0..10 {
        assert_eq!(engine.get(&key(n)).unwrap().unwrap(), value(n, 1000));
    }
    let all = engine.scan(&crate::engine::prefix_bounds(&[PREFIX]), false, 100).unwrap();
    assert_eq!(all.len(), 11);
    assert_eq!(all[4], (key(4), value(4, 1000)));
    let back = engine.scan(&crate::engine::prefix_bounds(&[PREFIX]), true, 2).unwrap();
    assert_eq!(back[1], (key(9), value(9, 1000)));
    assert_eq!(engine.files().list().unwrap().len(), 2, "10 KB in 4 KiB files, sealed at their fifth value");
}

#[test]
fn a_file_is_deleted_after_the_sync_that_follows_its_last_value_going() {
    let engine = MemoryStateEngine::in_memory(config());
    put(&engine, 0, 8, 1000);
    let files = engine.files().list().unwrap();
    let first = *files.iter().min().unwrap();
    delete(&engine, 0, 5);
    assert!(engine.files().list().unwrap().contains(&first), "kept until the deletes are durable");
    engine.sync().unwrap();
    assert!(!engine.files().list().unwrap().contains(&first), "deleted after the sync");
    for n in 5..8 {
        assert_eq!(engine.get(&key(n)).unwrap().unwrap(), value(n, 1000));
    }
}

#[test]
fn a_file_mostly_retired_is_rewritten_and_then_deleted() {
    let engine = MemoryStateEngine::in_memory(config());
    put(&engine, 0, 16, 1000);
    let before = engine.files().total_bytes();
    // Three of every four values go: every sealed file is a quarter live.
    let mut batch = WriteBatch::new();
    for n in (0..16).filter(|n| n % 4 != 0) {
        batch.delete(key(n));
    }
    engine.write(batch).unwrap();
    for _ in 0..4 {
        engine.write(WriteBatch::new()).unwrap();
        engine.sync().unwrap();
    }
    let after = engine.files().total_bytes();
    assert!(after < before / 2, "files hold {after} bytes of {before} after the rewrite");
    for n in (0..16).filter(|n| n % 4 == 0) {
        assert_eq!(engine.get(&key(n)).unwrap().unwrap(), value(n, 1000));
    }
}

#[test]
fn a_crash_keeps_what_was_synced_and_reopens_with_its_files() {
    let engine = MemoryStateEngine::in_memory(config());
    put(&engine, 0, 6, 1000);
    engine.sync().unwrap();
    put(&engine, 6, 12, 1000);
    delete(&engine, 0, 6);
    // Power loss keeping the unsynced puts, not the delete after them.
    engine.crash_keeping(6).unwrap();
    for n in 0..12 {
        assert_eq!(engine.get(&key(n)).unwrap().unwrap(), value(n, 1000), "key {n}");
    }
    engine.crash_keeping(0).unwrap();
    put(&engine, 20, 30, 1000);
    engine.sync().unwrap();
    engine.crash_keeping(0).unwrap();
    assert_eq!(engine.get(&key(25)).unwrap().unwrap(), value(25, 1000));
}

#[test]
fn files_no_record_names_are_deleted_when_the_log_opens() {
    let engine = MemoryStateEngine::in_memory(config());
    put(&engine, 0, 8, 1000);
    // Lost with the crash: the batches, not the synced files.
    engine.crash_keeping(0).unwrap();
    assert!(engine.files().list().unwrap().is_empty());
    assert!(engine.get(&key(1)).unwrap().is_none());
}

#[test]
fn clear_drops_every_file_after_the_next_sync() {
    let engine = MemoryStateEngine::in_memory(config());
    put(&engine, 0, 8, 1000);
    engine.clear().unwrap();
    put(&engine, 8, 9, 1000);
    engine.sync().unwrap();
    assert_eq!(engine.files().list().unwrap().len(), 1);
    assert_eq!(engine.get(&key(8)).unwrap().unwrap(), value(8, 1000));
}

#[test]
fn a_key_put_twice_in_one_batch_keeps_its_last_value() {
    let engine = MemoryStateEngine::in_memory(config());
    let mut batch = WriteBatch::new();
    batch.put(key(1), value(1, 1000));
    batch.put(key(1), value(2, 1000));
    batch.delete(key(2));
    batch.put(key(2), value(3, 500));
    engine.write(batch).unwrap();
    put(&engine, 3, 12, 1000);
    engine.sync().unwrap();
    engine.crash_keeping(0).unwrap();
    assert_eq!(engine.get(&key(1)).unwrap().unwrap(), value(2, 1000));
    assert_eq!(engine.get(&key(2)).unwrap().unwrap(), value(3, 500));
}

#[test]
fn a_damaged_value_is_reported_not_misread() {
    let engine = MemoryStateEngine::in_memory(config());
    put(&engine, 0, 2, 1000);
    let stored = engine.inner().get(&key(0)).unwrap().unwrap();
    let file = u64::from_be_bytes(stored[1..9].try_into().unwrap());
    engine.files().write_at(file, 10, &[0xAA; 4]).unwrap();
    let err = engine.get(&key(0)).unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
}

/// The two orderings the log keeps, each broken: what a crash then leaves is caught when
/// the engine opens again.
#[test]
fn the_negative_controls_leave_what_reopening_refuses() {
    let broken = MemoryStateEngine::in_memory(config());
    broken.break_as(ValueLogBreakage::PointerBeforeValue);
    put(&broken, 0, 2, 1000);
    let err = broken.crash_keeping(1).unwrap_err();
    assert!(err.to_string().contains("records name values up to byte"), "{err}");

    let broken = MemoryStateEngine::in_memory(config());
    broken.break_as(ValueLogBreakage::FileRemovedEarly);
    put(&broken, 0, 5, 1000);
    broken.sync().unwrap();
    delete(&broken, 0, 5);
    put(&broken, 5, 6, 1000);
    let err = broken.crash_keeping(0).unwrap_err();
    assert!(err.to_string().contains("is missing"), "{err}");
}

/// The real files on disk: reopened, they read back what was written.
#[test]
fn disk_files_reopen_with_what_they_hold() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = DiskStateEngine::open_in(dir.path(), 8 << 20, DEFAULT_FLUSH_EVERY, config()).unwrap();
        put(&engine, 0, 20, 1000);
        delete(&engine, 0, 10);
        engine.sync().unwrap();
    }
    let engine = DiskStateEngine::open_in(dir.path(), 8 << 20, DEFAULT_FLUSH_EVERY, config()).unwrap();
    for n in 10..20 {
        assert_eq!(engine.get(&key(n)).unwrap().unwrap(), value(n, 1000));
    }
    assert!(engine.get(&key(3)).unwrap().is_none());
    put(&engine, 20, 30, 1000);
    assert_eq!(engine.get(&key(25)).unwrap().unwrap(), value(25, 1000));
    // The size comes from the bookkeeping, and counts every file there is.
    let files = engine.files().total_bytes();
    assert!(files > 0);
    assert!(engine.size_on_disk().unwrap() >= files, "{:?} < {files}", engine.size_on_disk());
}

/// Readers on other threads, while files are rewritten and deleted under them: every read
/// gets the value or nothing, never an error (a read holds the files it may read).
#[test]
fn reads_beside_deletions_and_rewrites_never_fail() {
    let engine = std::sync::Arc::new(MemoryStateEngine::in_memory(config()));
    put(&*engine, 0, 40, 1000);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (engine, stop) = (engine.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && reads < 2_000_000 {
                    for n in 0..40 {
                        if let Some(v) = engine.get(&key(n)).expect("a read never fails") {
                            assert_eq!(v, value(n, 1000));
                        }
                        reads += 1;
                    }
                    let all = engine.scan(&crate::engine::prefix_bounds(&[PREFIX]), false, 64).expect("a scan");
                    assert!(all.iter().all(|(k, v)| v.len() == 1000 || k.len() != 5));
                }
            })
        })
        .collect();
    for round in 0..200u32 {
        let n = round % 40;
        if round % 3 == 0 {
            delete(&*engine, n, n + 1);
        } else {
            put(&*engine, n, n + 1, 1000);
        }
        if round % 7 == 0 {
            engine.sync().unwrap();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        reader.join().expect("no reader failed");
    }
}

/// A data directory written before the value log: its long values under the prefix are
/// inline. They read as they are, and move to files as the engine is written to.
#[test]
fn values_stored_inline_before_the_log_are_converted_as_it_writes() {
    let inner = MemoryEngine::new();
    let mut batch = WriteBatch::new();
    for n in 0..2000 {
        batch.put(key(n), value(n, 1000));
    }
    inner.write(batch).unwrap();
    let engine =
        ValueLog::open(inner, MemoryValueFiles::new(), ValueLogConfig { file_bytes: 1 << 20, ..config() }).unwrap();
    assert_eq!(engine.get(&key(1500)).unwrap().unwrap(), value(1500, 1000), "read inline");
    let inline = |engine: &MemoryStateEngine| {
        let all = engine.inner().scan(&crate::engine::prefix_bounds(&[PREFIX]), false, 10_000).unwrap();
        all.iter().filter(|(_, v)| v.len() > 25).count()
    };
    let mut writes = 0;
    while inline(&engine) > 0 && writes < 100 {
        engine.write(WriteBatch::new()).unwrap();
        writes += 1;
    }
    assert_eq!(inline(&engine), 0, "all converted after {writes} batches");
    // 2,000 records, 256 looked at a batch.
    assert!(writes <= 8, "{writes} batches");
    engine.sync().unwrap();
    engine.crash_keeping(0).unwrap();
    for n in 0..2000 {
        assert_eq!(engine.get(&key(n)).unwrap().unwrap(), value(n, 1000), "key {n}");
    }
}

/// A key put again into the same file: the file stays while the later value is named
/// (found by the readers' test above: the earlier value's going took the key off the file,
/// and the file was deleted under a live pointer).
#[test]
fn a_key_put_twice_into_one_file_keeps_the_file() {
    let engine = MemoryStateEngine::in_memory(config());
    put(&engine, 1, 2, 1000);
    put(&engine, 1, 2, 1000);
    put(&engine, 2, 5, 1000);
    delete(&engine, 2, 5);
    engine.sync().unwrap();
    assert_eq!(engine.get(&key(1)).unwrap().unwrap(), value(1, 1000));
    engine.crash_keeping(0).unwrap();
    assert_eq!(engine.get(&key(1)).unwrap().unwrap(), value(1, 1000));
}

/// More files than the disk files keep handles for: the file being appended to is read,
/// its handle dropped and opened again by a read, and the next append still works.
#[test]
fn an_append_after_the_files_handle_was_dropped_and_reopened_by_a_read() {
    let dir = tempfile::tempdir().unwrap();
    let files = DiskValueFiles::open(dir.path()).unwrap();
    files.write_at(1, 0, b"first").unwrap();
    for id in 2..100 {
        files.write_at(id, 0, b"other").unwrap();
    }
    assert_eq!(files.read_at(1, 0, 5).unwrap(), b"first");
    files.write_at(1, 5, b"second").unwrap();
    files.sync(1).unwrap();
    assert_eq!(files.read_at(1, 0, 11).unwrap(), b"firstsecond");
    assert_eq!(files.list().unwrap().len(), 99);
    files.remove(1).unwrap();
    assert!(files.read_at(1, 0, 5).is_err());
}

/// A bulk load leaves its appends unsynced (a crash keeping its unsynced batches then
/// finds pointers past the files' synced ends, as the negative control above does: an
/// engine loaded so is only read once synced), and its sync, or its end, syncs them first:
/// after either, a crash keeps everything. After the load, appends are synced again before
/// their batches.
#[test]
fn a_bulk_load_syncs_its_files_at_its_sync_and_at_its_end() {
    let loaded = MemoryStateEngine::in_memory(config());
    loaded.set_bulk_load(true).unwrap();
    put(&loaded, 0, 2, 1000);
    let err = loaded.crash_keeping(2).unwrap_err();
    assert!(err.to_string().contains("records name values up to byte"), "{err}");

    for end_with_sync in [true, false] {
        let loaded = MemoryStateEngine::in_memory(config());
        loaded.set_bulk_load(true).unwrap();
        put(&loaded, 0, 12, 1000);
        match end_with_sync {
            true => {
                loaded.sync().unwrap();
                loaded.set_bulk_load(false).unwrap();
            }
            false => loaded.set_bulk_load(false).unwrap(),
        }
        put(&loaded, 12, 14, 1000);
        // Every batch kept, none synced by the engine beneath after the load.
        loaded.crash_keeping(usize::MAX).unwrap();
        for n in 0..14 {
            assert_eq!(
                loaded.get(&key(n)).unwrap().unwrap(),
                value(n, 1000),
                "key {n}, end with sync: {end_with_sync}"
            );
        }
    }
}
