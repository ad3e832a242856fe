//! The engine contract, checked on both engines.

use super::*;
use std::ops::Bound;

fn engines() -> Vec<(&'static str, Box<dyn Engine>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let sled = SledEngine::open(dir.path(), 8 << 20).expect("open");
    vec![("memory", Box::new(MemoryEngine::new()), None), ("sled", Box::new(sled), Some(dir))]
}

fn batch(writes: &[(&str, Option<&[u8]>)]) -> WriteBatch {
    let mut b = WriteBatch::new();
    for (k, v) in writes {
        match v {
            Some(v) => b.put(k.as_bytes().to_vec(), v.to_vec()),
            None => b.delete(k.as_bytes().to_vec()),
        }
    }
    b
}

fn keys(entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<String> {
    entries.iter().map(|(k, _)| String::from_utf8_lossy(k).into_owned()).collect()
}

#[test]
fn batches_write_and_delete_in_order() {
    for (name, engine, _dir) in engines() {
        engine.write(batch(&[("a", Some(b"1")), ("b", Some(b"2")), ("a", Some(b"3")), ("c", Some(b"4"))])).unwrap();
        engine.write(batch(&[("c", None), ("d", Some(b""))])).unwrap();
        assert_eq!(engine.get(b"a").unwrap(), Some(b"3".to_vec()), "{name}");
        assert_eq!(engine.get(b"c").unwrap(), None, "{name}");
        assert_eq!(engine.get(b"d").unwrap(), Some(Vec::new()), "{name}: an empty value is a value");
        let all = engine.scan(&(Bound::Unbounded, Bound::Unbounded), false, 100).unwrap();
        assert_eq!(keys(&all), ["a", "b", "d"], "{name}");
    }
}

#[test]
fn scans_page_in_both_directions_within_bounds() {
    for (name, engine, _dir) in engines() {
        let mut b = WriteBatch::new();
        for i in 0..50u8 {
            b.put(vec![b'k', i], vec![i]);
        }
        b.put(b"j".to_vec(), b"before".to_vec());
        b.put(b"l".to_vec(), b"after".to_vec());
        engine.write(b).unwrap();
        let forward: Vec<_> = Scan::new(engine.as_ref(), prefix_bounds(b"k"), false, 7).map(|e| e.unwrap().0).collect();
        assert_eq!(forward, (0..50u8).map(|i| vec![b'k', i]).collect::<Vec<_>>(), "{name}");
        let backward: Vec<_> = Scan::new(engine.as_ref(), prefix_bounds(b"k"), true, 3).map(|e| e.unwrap().0).collect();
        assert_eq!(backward, (0..50u8).rev().map(|i| vec![b'k', i]).collect::<Vec<_>>(), "{name}");
        let inverted = (Bound::Included(b"z".to_vec()), Bound::Excluded(b"a".to_vec()));
        assert!(engine.scan(&inverted, false, 10).unwrap().is_empty(), "{name}: an inverted range is empty");
        let exact = (Bound::Included(vec![b'k', 3]), Bound::Included(vec![b'k', 5]));
        assert_eq!(engine.scan(&exact, false, 10).unwrap().len(), 3, "{name}");
    }
}

#[test]
fn long_values_round_trip_and_leave_no_pieces_behind() {
    for (name, engine, dir) in engines() {
        let long: Vec<u8> = (0..1_600_000u32).map(|i| (i % 251) as u8).collect();
        engine.write(batch(&[("big", Some(&long)), ("small", Some(b"s"))])).unwrap();
        assert_eq!(engine.get(b"big").unwrap().as_deref(), Some(&long[..]), "{name}");
        let scanned = engine.scan(&(Bound::Unbounded, Bound::Unbounded), false, 10).unwrap();
        assert_eq!(keys(&scanned), ["big", "small"], "{name}: pieces are not keys");
        assert_eq!(scanned[0].1, long, "{name}");
        // Shorter, then deleted, then long twice in one batch.
        engine.write(batch(&[("big", Some(&long[..100_000]))])).unwrap();
        assert_eq!(engine.get(b"big").unwrap().map(|v| v.len()), Some(100_000), "{name}");
        engine.write(batch(&[("big", None)])).unwrap();
        engine.write(batch(&[("big", Some(&long)), ("big", Some(&long[..40_000]))])).unwrap();
        assert_eq!(engine.get(b"big").unwrap().map(|v| v.len()), Some(40_000), "{name}");
        drop(dir);
    }
}

#[test]
fn sled_keeps_only_the_pieces_of_the_current_value() {
    let dir = tempfile::tempdir().unwrap();
    let engine = SledEngine::open(dir.path(), 8 << 20).unwrap();
    let long = vec![7u8; 300_000];
    engine.write(batch(&[("big", Some(&long))])).unwrap();
    engine.write(batch(&[("big", Some(&long[..70_000]))])).unwrap();
    engine.write(batch(&[("other", Some(&long[..1]))])).unwrap();
    // 70,000 bytes in 32 KiB pieces: 3 pieces, plus the two records.
    assert_eq!(engine.stored_entries(), 5);
    engine.write(batch(&[("big", None)])).unwrap();
    assert_eq!(engine.stored_entries(), 1);
}

#[test]
fn sled_keeps_synced_batches_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let long = vec![9u8; 200_000];
    {
        let engine = SledEngine::open(dir.path(), 8 << 20).unwrap();
        engine.write(batch(&[("a", Some(b"1")), ("big", Some(&long))])).unwrap();
        engine.sync().unwrap();
    }
    // sled releases its directory lock when its background flusher notices the drop.
    let mut reopened = SledEngine::open(dir.path(), 8 << 20);
    for _ in 0..50 {
        if reopened.is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        reopened = SledEngine::open(dir.path(), 8 << 20);
    }
    let engine = reopened.unwrap();
    assert_eq!(engine.get(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(engine.get(b"big").unwrap(), Some(long));
}

#[test]
fn memory_crash_keeps_synced_batches_and_a_prefix_of_the_rest() {
    let engine = MemoryEngine::new();
    engine.write(batch(&[("a", Some(b"1"))])).unwrap();
    engine.sync().unwrap();
    engine.write(batch(&[("a", Some(b"2")), ("b", Some(b"1"))])).unwrap();
    engine.write(batch(&[("c", Some(b"1"))])).unwrap();
    assert_eq!(engine.unsynced_batches(), 2);
    engine.crash();
    assert_eq!(engine.get(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(engine.len(), 1);

    engine.write(batch(&[("a", Some(b"2")), ("b", Some(b"1"))])).unwrap();
    engine.write(batch(&[("c", Some(b"1"))])).unwrap();
    engine.crash_keeping(1);
    assert_eq!(engine.get(b"a").unwrap(), Some(b"2".to_vec()), "the first batch survives whole");
    assert_eq!(engine.get(b"c").unwrap(), None, "the second does not");
    engine.crash();
    assert_eq!(engine.get(b"b").unwrap(), Some(b"1".to_vec()), "what a crash kept is durable");
}

#[test]
fn prefix_ends() {
    assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
    assert_eq!(prefix_end(&[b'a', 0xFF]), Some(b"b".to_vec()));
    assert_eq!(prefix_end(&[0xFF, 0xFF]), None);
    assert_eq!(prefix_end(b""), None);
}
