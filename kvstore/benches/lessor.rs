//! The lessor at a million leases: how long a new master's `start` takes, the memory per
//! lease (measured with a counting global allocator), keep-alive throughput over random ids,
//! and the expiry of 100,000 leases sharing one deadline, taken in batches (the longest single
//! `take_expired` call is the longest pause the master's loop sees).
//!
//! Prints `leasekv-bench:` lines, then criterion's report for keep-alive and take_expired.
//! Run: `cargo bench -p leasekv-kvstore --bench lessor`.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use leasekv_kvstore::lessor::Lessor;
use leasekv_kvstore::LeaseId;
use leasekv_lease::Instant;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::time::{Duration, Instant as WallClock};

/// The system allocator, counting the bytes currently allocated and the peak.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by as isize, Ordering::Relaxed) + by as isize;
    PEAK.fetch_max(now.max(0) as usize, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; the counters have no effect on it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        grew(new_size);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const LEASES: usize = 1_000_000;
const SEC: u64 = 1_000_000_000;

/// xorshift64: deterministic ids without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Lease ids as the state machine hands them out: spread over the i64 range, not dense.
fn lease_id(i: usize) -> LeaseId {
    (((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 1) as LeaseId
}

/// A million leases with TTLs from 10 to 69 s.
fn leases() -> Vec<(LeaseId, Duration)> {
    (0..LEASES).map(|i| (lease_id(i), Duration::from_secs(10 + (i % 60) as u64))).collect()
}

fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn summaries() {
    let input = leases();
    let now = Instant::from_nanos(SEC);

    // start() and memory.
    let before = live_bytes();
    PEAK.store(before.max(0) as usize, Ordering::Relaxed);
    let mut lessor = Lessor::new();
    let t = WallClock::now();
    lessor.start(now, input.iter().copied());
    let start_time = t.elapsed();
    let after_start = live_bytes() - before;
    let peak_start = PEAK.load(Ordering::Relaxed) as isize - before;
    println!(
        "leasekv-bench: lessor start() with {LEASES} leases: {:.1} ms; memory {:.1} bytes/lease \
         ({:.1} MB), peak during start {:.1} bytes/lease",
        start_time.as_secs_f64() * 1e3,
        after_start as f64 / LEASES as f64,
        after_start as f64 / 1e6,
        peak_start as f64 / LEASES as f64,
    );

    // Keep-alives over random ids, as a master under load sees them. The id list is not the
    // lessor's memory: take it out of the count.
    let mut rng = Rng(0x1234_5678);
    let ids: Vec<LeaseId> = (0..4_000_000).map(|_| lease_id((rng.next() % LEASES as u64) as usize)).collect();
    let before = before + (ids.capacity() * std::mem::size_of::<LeaseId>()) as isize;
    let mut clock = SEC;
    let t = WallClock::now();
    for chunk in ids.chunks(1000) {
        clock += 1_000_000; // 1 ms per 1000 keep-alives: the clock moves, deadlines change.
        let now = Instant::from_nanos(clock);
        for &id in chunk {
            std::hint::black_box(lessor.keep_alive(now, id));
        }
    }
    let ka = t.elapsed();
    let after_ka = live_bytes() - before;
    println!(
        "leasekv-bench: lessor keep_alive over {LEASES} leases, random ids: {:.2} M/s ({:.0} ns each); \
         memory after {} keep-alives {:.1} bytes/lease (stale heap entries included), peak {:.1} bytes/lease",
        ids.len() as f64 / ka.as_secs_f64() / 1e6,
        ka.as_nanos() as f64 / ids.len() as f64,
        ids.len(),
        after_ka as f64 / LEASES as f64,
        (PEAK.load(Ordering::Relaxed) as isize - before) as f64 / LEASES as f64,
    );
    drop(lessor);

    // 100,000 leases with one deadline (granted in the same instant), taken in batches,
    // beside 900,000 that are not due.
    let now = Instant::from_nanos(SEC);
    let mut lessor = Lessor::new();
    lessor.start(
        now,
        (0..LEASES).map(|i| (lease_id(i), Duration::from_secs(if i % 10 == 0 { 10 } else { 100 + (i % 50) as u64 }))),
    );
    let due = Instant::from_nanos(11 * SEC);
    for batch in [1000usize, 10_000] {
        let mut longest = Duration::ZERO;
        let mut taken = 0usize;
        let mut calls = 0usize;
        let t = WallClock::now();
        loop {
            let c = WallClock::now();
            let got = lessor.take_expired(due, batch);
            longest = longest.max(c.elapsed());
            if got.is_empty() {
                break;
            }
            calls += 1;
            taken += got.len();
        }
        let total = t.elapsed();
        println!(
            "leasekv-bench: lessor expiry of {taken} leases with one deadline (of {LEASES} tracked), \
             batches of {batch}: total {:.1} ms over {calls} calls, longest pause {:.3} ms, {:.0} ns/lease",
            total.as_secs_f64() * 1e3,
            longest.as_secs_f64() * 1e3,
            total.as_nanos() as f64 / taken.max(1) as f64,
        );
        // Put the expired ones back for the second batch size.
        for i in (0..LEASES).step_by(10) {
            lessor.track(now, lease_id(i), Duration::from_secs(10));
        }
    }
}

fn bench(c: &mut Criterion) {
    summaries();

    let mut group = c.benchmark_group("lessor");
    group.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));

    let mut lessor = Lessor::new();
    lessor.start(Instant::from_nanos(SEC), leases());
    let mut rng = Rng(42);
    let mut clock = SEC;
    group.throughput(Throughput::Elements(1000));
    group.bench_function("keep_alive_x1000_of_1M", |b| {
        b.iter(|| {
            clock += 1_000_000;
            let now = Instant::from_nanos(clock);
            for _ in 0..1000 {
                let id = lease_id((rng.next() % LEASES as u64) as usize);
                std::hint::black_box(lessor.keep_alive(now, id));
            }
        })
    });
    drop(lessor);

    // take_expired of 1000 due leases out of 100,000 due: each iteration takes 1000 and
    // (untimed) puts them back, so every iteration sees the same heap size.
    let mut lessor = Lessor::new();
    lessor.start(Instant::ZERO, (0..100_000).map(|i| (lease_id(i), Duration::from_secs(10))));
    let due = Instant::from_nanos(10 * SEC);
    group.throughput(Throughput::Elements(1000));
    group.bench_function("take_expired_1000_of_100k_due", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let t = WallClock::now();
                let got = lessor.take_expired(due, 1000);
                timed += t.elapsed();
                for id in got {
                    lessor.track(Instant::ZERO, id, Duration::from_secs(10));
                }
            }
            timed
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
