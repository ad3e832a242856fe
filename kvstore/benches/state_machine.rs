//! State machine throughput: puts applied per second, revoking a lease with 100k keys (the
//! revoking apply, and the worst apply while the dead keys are swept over the following
//! applies), snapshotting 100k keys to and from bytes, and counting over 1M keys (a
//! `count_only` of the whole range, a page of 500 from the middle, a count at a revision
//! 1,000 writes back) from the key index.
//!
//! Besides criterion's report, each figure is printed once as a `leasekv-bench:` line
//! (median of a few direct timings) so that scripts and the README can pick them up.
//!
//! `cargo bench -p leasekv-kvstore --bench state_machine`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use leasekv_kvstore::{Command, KeyRange, PutRequest, RangeRequest, StateMachine};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Distinct keys in every scenario.
const KEYS: usize = 100_000;
/// Value size, bytes.
const VALUE_BYTES: usize = 256;
/// The lease the revoke scenario attaches every key to.
const LEASE: i64 = 7;

fn key(i: usize) -> Vec<u8> {
    format!("/bench/key/{i:08}").into_bytes()
}

/// One put per key, each with a distinct 256-byte value.
fn puts(lease: i64) -> Vec<Command> {
    (0..KEYS)
        .map(|i| {
            let mut value = vec![b'v'; VALUE_BYTES];
            value[..8].copy_from_slice(&(i as u64).to_le_bytes());
            Command::Put(PutRequest { key: key(i), value, lease, prev_kv: false })
        })
        .collect()
}

/// A machine holding every key of `puts(lease)`, with the lease granted first.
fn filled(lease: i64) -> StateMachine {
    let mut sm = StateMachine::new();
    if lease != 0 {
        sm.apply(&Command::LeaseGrant { id: lease, name: None, ttl: 60 }).result.expect("grant");
    }
    for command in puts(lease) {
        sm.apply(&command).result.expect("put");
    }
    sm
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Applies puts cycling over 100k keys (overwrites, the steady state of a busy store).
fn bench_put(c: &mut Criterion) {
    let commands = puts(0);
    let mut sm = filled(0);
    let passes: Vec<Duration> = (0..5)
        .map(|_| {
            let start = Instant::now();
            for command in &commands {
                black_box(sm.apply(command));
            }
            start.elapsed()
        })
        .collect();
    let per_pass = median(passes);
    println!(
        "leasekv-bench: apply put ({VALUE_BYTES}-byte values, {KEYS} keys cycling): {:.0} puts/s ({:.2} us/put)",
        KEYS as f64 / per_pass.as_secs_f64(),
        per_pass.as_secs_f64() * 1e6 / KEYS as f64
    );

    let mut group = c.benchmark_group("state_machine");
    group.throughput(Throughput::Elements(1));
    let mut next = 0;
    group.bench_function("apply_put_256B_100k_keys", |b| {
        b.iter(|| {
            next = (next + 1) % KEYS;
            sm.apply(&commands[next])
        })
    });
    group.finish();
}

/// Small puts applied after the revoke, while its keys are swept: enough to drain 100k keys
/// at [`StateMachine::CLEANUP_PER_APPLY`] per apply, and then some.
const AFTER_REVOKE: usize = 200;

/// Revokes one lease that holds 100k keys (one command, one revision), then applies small
/// puts while the dead keys are swept, timing every apply: no apply may stall the store.
fn bench_revoke(c: &mut Criterion) {
    let base = filled(LEASE);
    let revoke = Command::LeaseRevoke { id: LEASE };
    let small: Vec<Command> = (0..AFTER_REVOKE)
        .map(|i| Command::Put(PutRequest { key: key(i), value: b"small".to_vec(), lease: 0, prev_kv: false }))
        .collect();
    let mut revokes = Vec::new();
    let mut worst = Vec::new();
    let mut all_applies = Vec::new();
    let mut drained_after = 0;
    for _ in 0..5 {
        let mut sm = base.copy_in_memory();
        let start = Instant::now();
        black_box(sm.apply(&revoke));
        revokes.push(start.elapsed());
        assert_eq!(sm.key_count(), 0);
        let mut max = Duration::ZERO;
        for (i, put) in small.iter().enumerate() {
            let start = Instant::now();
            black_box(sm.apply(put));
            let elapsed = start.elapsed();
            max = max.max(elapsed);
            all_applies.push(elapsed);
            if sm.pending_cleanup() == 0 && drained_after == 0 {
                drained_after = i + 1;
            }
        }
        assert_eq!((sm.pending_cleanup(), sm.key_count()), (0, AFTER_REVOKE));
        worst.push(max);
    }
    all_applies.sort();
    let p99 = all_applies[all_applies.len() * 99 / 100];
    println!(
        "leasekv-bench: revoke 1 lease with {KEYS} keys: {:.2} ms (the revoking apply, sweeping the first {})",
        median(revokes).as_secs_f64() * 1e3,
        StateMachine::CLEANUP_PER_APPLY
    );
    // The maximum includes any preemption of the timing thread, so the p99 is printed too.
    println!(
        "leasekv-bench: applies of {AFTER_REVOKE} small puts after that revoke ({} dead keys swept per apply, \
         drained after {drained_after} applies): median {:.3} ms, p99 {:.2} ms, worst single apply {:.2} ms \
         (median over runs)",
        StateMachine::CLEANUP_PER_APPLY,
        median(all_applies).as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        median(worst).as_secs_f64() * 1e3
    );

    let mut group = c.benchmark_group("state_machine");
    group.bench_function("revoke_lease_100k_keys", |b| {
        // The machine is handed back so that dropping its 100k keys is not timed.
        b.iter_batched(|| base.copy_in_memory(), |mut sm| (sm.apply(&revoke), sm), BatchSize::LargeInput)
    });
    group.finish();
}

/// Snapshots 100k keys (half of them on a lease) to bytes and back.
fn bench_snapshot(c: &mut Criterion) {
    let mut sm = filled(0);
    sm.apply(&Command::LeaseGrant { id: LEASE, name: Some("bench".into()), ttl: 60 }).result.expect("grant");
    for command in puts(LEASE).iter().step_by(2) {
        sm.apply(command).result.expect("put");
    }
    let bytes = sm.to_snapshot_bytes();
    let to: Vec<Duration> = (0..5)
        .map(|_| {
            let start = Instant::now();
            black_box(sm.to_snapshot_bytes());
            start.elapsed()
        })
        .collect();
    let from: Vec<Duration> = (0..5)
        .map(|_| {
            let start = Instant::now();
            let restored = StateMachine::from_snapshot_bytes(&bytes).expect("restore");
            let elapsed = start.elapsed();
            assert_eq!(restored.digest(), sm.digest());
            elapsed
        })
        .collect();
    println!(
        "leasekv-bench: snapshot {KEYS} keys ({:.1} MB): to bytes {:.1} ms, from bytes {:.1} ms",
        bytes.len() as f64 / 1e6,
        median(to).as_secs_f64() * 1e3,
        median(from).as_secs_f64() * 1e3
    );

    let mut group = c.benchmark_group("state_machine");
    group.bench_function("snapshot_to_bytes_100k_keys", |b| b.iter(|| sm.to_snapshot_bytes()));
    group.bench_function("snapshot_from_bytes_100k_keys", |b| {
        b.iter(|| StateMachine::from_snapshot_bytes(&bytes).expect("restore"))
    });
    group.finish();
}

/// Counts over 1M keys from the key index: each is a rank search, not a walk over the
/// range (before the index, the first count of a range read every key of it).
fn bench_counts(c: &mut Criterion) {
    const MANY: usize = 1_000_000;
    let mut sm = StateMachine::new();
    for i in 0..MANY {
        sm.apply(&Command::Put(PutRequest { key: key(i), value: vec![b'c'; 16], lease: 0, prev_kv: false }))
            .result
            .expect("put");
    }
    sm.flush().expect("flush");
    let past = sm.revision();
    for i in 0..1000 {
        let command = match i % 2 {
            0 => Command::Put(PutRequest { key: key(MANY + i), value: vec![b'n'; 16], lease: 0, prev_kv: false }),
            _ => Command::DeleteRange(leasekv_kvstore::DeleteRangeRequest {
                range: KeyRange::single(key(i * 997)),
                prev_kv: false,
            }),
        };
        sm.apply(&command).result.expect("write");
    }
    let whole =
        RangeRequest { range: KeyRange::between("/bench/key/", "/bench/key0"), count_only: true, ..Default::default() };
    let page =
        RangeRequest { range: KeyRange::between(key(MANY / 2), "/bench/key0"), limit: 500, ..Default::default() };
    let mut time = |request: &RangeRequest, revision: i64, expected: i64| -> Duration {
        median(
            (0..7)
                .map(|_| {
                    let view = sm.read_view(revision).expect("readable");
                    let start = Instant::now();
                    let answer = view.range(request).expect("read");
                    let elapsed = start.elapsed();
                    assert_eq!(answer.count, expected);
                    elapsed
                })
                .collect(),
        )
    };
    let count_now = time(&whole, 0, MANY as i64);
    // From the middle: half the keys, less the deletes there, plus the 500 new keys (after
    // every old one).
    let deleted_after = (1..1000).step_by(2).filter(|i| i * 997 >= MANY / 2).count();
    let page_now = time(&page, 0, (MANY / 2 - deleted_after + 500) as i64);
    let count_past = time(&whole, past, MANY as i64);
    println!(
        "leasekv-bench: count over {MANY} keys {:.1} us; page of 500 from the middle {:.2} ms; count 1,000 writes back {:.2} ms",
        count_now.as_secs_f64() * 1e6,
        page_now.as_secs_f64() * 1e3,
        count_past.as_secs_f64() * 1e3
    );

    let mut group = c.benchmark_group("state_machine");
    group.bench_function("count_only_1m_keys", |b| {
        b.iter_batched(|| sm.read_view(0).expect("view"), |view| view.range(&whole), BatchSize::SmallInput)
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_put, bench_revoke, bench_snapshot, bench_counts
}
criterion_main!(benches);
