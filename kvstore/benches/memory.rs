//! Memory of the state machine per live key and per history entry, counted exactly: a
//! global allocator that tracks the bytes held, around a [`StateMachine`] filled with
//! 100,000 keys, then overwritten once, then compacted. The first figures are of the state
//! machine on its in-memory engine (the simulator's, which keeps every record in memory);
//! the last, of the state machine on sled as in production, which docs/mvcc.md quotes.
//!
//! Counts the bytes asked of the allocator; the allocator's own rounding and bookkeeping come
//! on top (mimalloc, which kvserver uses, rounds to size classes: up to 12.5% for these
//! sizes). A node's RSS holds more besides: the Paxos log since the last snapshot and
//! sled's cache (see `benches/watch.rs`, "memory per key", for that figure).
//!
//! `cargo bench -p leasekv-kvstore --bench memory`

mod support;

use leasekv_kvstore::lessor::Lessor;
use leasekv_kvstore::{Command, PutRequest, StateMachine};
use leasekv_lease::Instant;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

/// The system allocator, counting the bytes currently allocated.
struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed on to `System` unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HELD.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: usize = 100_000;
/// Bytes per value: small, as service registrations are.
const VALUE_BYTES: usize = 64;

fn held() -> isize {
    HELD.load(Ordering::Relaxed)
}

fn put(i: usize, round: u8) -> Command {
    let key = format!("/services/node/{i:08}").into_bytes();
    Command::Put(PutRequest { key, value: vec![round; VALUE_BYTES], lease: 0, prev_kv: false })
}

fn main() {
    let key_bytes = put(0, 0).clone();
    let Command::Put(sample) = key_bytes else { unreachable!("put() builds puts") };
    let kv_bytes = sample.key.len() + sample.value.len();

    let mut sm = StateMachine::new();
    let empty = held();
    for i in 0..KEYS {
        sm.apply(&put(i, b'a')).result.expect("put");
    }
    let created = held();
    for i in 0..KEYS {
        sm.apply(&put(i, b'b')).result.expect("put");
    }
    let overwritten = held();
    sm.apply(&Command::Compact { revision: sm.revision() }).result.expect("compact");
    let compacted = held();

    let per = |bytes: isize| bytes as f64 / KEYS as f64;
    let live = per(compacted - empty);
    let create_event = per(created - empty) - live;
    let overwrite_event = per(overwritten - created);
    eprintln!("key {} B + value {VALUE_BYTES} B = {kv_bytes} B of data per key", sample.key.len());
    println!("leasekv-bench: in memory (the simulator's engine): memory per live key: {live:.0} B ({:.0} B beyond key and value)", live - kv_bytes as f64);
    println!("leasekv-bench: memory per history entry, create: {create_event:.0} B");
    println!("leasekv-bench: memory per history entry, overwrite (holds the previous value): {overwrite_event:.0} B");
    println!("leasekv-bench: history entries retained after compaction: {}", sm.history_len());
    drop(sm);
    lease_memory();
    engine_memory();
}

/// What stays in memory per live key and per history entry when the state is on disk, as
/// in production: a state machine on the [`DiskStateEngine`] with a small page cache, loaded in
/// steps. Once the cache is full, the growth of the heap from one step to the next is what
/// a key (or an overwrite's history entry) keeps in memory beyond the cache: sled's page
/// table and node headers, and the state machine's own bookkeeping.
fn engine_memory() {
    const CACHE_BYTES: u64 = 16 << 20;
    const STEP: usize = 100_000;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let engine = support::disk_engine(dir.path(), CACHE_BYTES);
    let mut sm = StateMachine::on_engine(engine).expect("an empty state");
    let mut slot = 0;
    let mut load = |sm: &mut StateMachine, keys: std::ops::Range<usize>, round: u8| {
        for i in keys {
            sm.apply(&put(i, round)).result.expect("put");
            if i % 256 == 255 {
                slot += 1;
                sm.flush_through(slot).expect("flush");
            }
        }
        slot += 1;
        sm.flush_through(slot).expect("flush");
    };
    load(&mut sm, 0..STEP, b'a');
    let first = held();
    load(&mut sm, STEP..3 * STEP, b'a');
    let more_keys = held();
    load(&mut sm, 0..2 * STEP, b'b');
    let overwrites = held();
    let per_key = (more_keys - first) as f64 / (2 * STEP) as f64;
    let per_entry = (overwrites - more_keys) as f64 / (2 * STEP) as f64;
    println!(
        "leasekv-bench: on disk (sled, {} MiB cache, full): heap beyond the cache per new key (its record and its history entry): {per_key:.0} B; per overwrite (a history entry): {per_entry:.0} B; heap in all at {} keys: {:.0} MiB",
        CACHE_BYTES >> 20,
        3 * STEP,
        overwrites as f64 / f64::from(1 << 20)
    );
}

/// Memory per lease with one key, beyond the key: the same keys written once without leases
/// and once each attached to its own lease, both compacted, plus the master's countdown
/// (the lessor), which only the master holds.
fn lease_memory() {
    let compacted_keys = |leased: bool| {
        let mut sm = StateMachine::new();
        let before = held();
        for i in 0..KEYS {
            let lease = if leased {
                let grant = Command::LeaseGrant { id: 0, name: None, ttl: 30 };
                match sm.apply(&grant).result {
                    Ok(leasekv_kvstore::CommandResponse::LeaseGrant(g)) => g.id,
                    other => panic!("lease grant: {other:?}"),
                }
            } else {
                0
            };
            let Command::Put(mut put) = put(i, b'a') else { unreachable!("put() builds puts") };
            put.lease = lease;
            sm.apply(&Command::Put(put)).result.expect("put");
        }
        sm.apply(&Command::Compact { revision: sm.revision() }).result.expect("compact");
        let bytes = held() - before;
        let ids: Vec<_> = sm.leases().map(|l| l.id).collect();
        (bytes, ids, sm)
    };
    let (plain, _, plain_sm) = compacted_keys(false);
    drop(plain_sm);
    let (leased, ids, leased_sm) = compacted_keys(true);
    let before = held();
    let mut lessor = Lessor::new();
    lessor.start(Instant::ZERO, ids.iter().map(|&id| (id, Duration::from_secs(30))));
    let countdown = held() - before;
    let per = |bytes: isize| bytes as f64 / KEYS as f64;
    println!(
        "leasekv-bench: memory per lease with one key, beyond the key: {:.0} B in the state machine (every member) + {:.0} B of countdown (the master) = {:.0} B",
        per(leased - plain),
        per(countdown),
        per(leased - plain + countdown)
    );
    drop((lessor, leased_sm));
}
