//! sled log appends with batching: how many commands per second one replica can make
//! durable, and how many syncs (flush + fdatasync) per second that takes.
//!
//! Every slot holds one `Entry` of `batch` commands (`Command::Put` with a 256-byte value);
//! each sync covers `slots_per_sync` slots. Besides criterion's report, prints one
//! `leasekv-bench:` line per configuration, from a separate timed run.
//!
//! Run: `cargo bench -p leasekv-kvstore --bench storage`.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use leasekv_kvstore::log::{AcceptedSlot, Entry, LogBallot, Proposal, ProposalId, Slot};
use leasekv_kvstore::storage::{SledStorage, Storage};
use leasekv_kvstore::{Command, PutRequest};
use leasekv_lease::NodeId;
use std::time::{Duration, Instant};

/// Size of every value written.
const VALUE_LEN: usize = 256;
/// (commands per slot, slots per sync).
const CONFIGS: &[(usize, usize)] = &[(1, 1), (16, 1), (64, 1), (256, 1), (64, 8), (16, 16)];
/// Keep the log from growing without bound across iterations (a real replica snapshots).
/// A power of two: the trim check is a mask.
const TRIM_EVERY: Slot = 4096;

fn slot_value(batch: usize) -> AcceptedSlot {
    let proposals = (0..batch)
        .map(|i| Proposal {
            id: ProposalId { node: NodeId(1), incarnation: 1, seq: i as u64 },
            command: Command::Put(PutRequest {
                key: format!("/bench/key/{i:08}").into_bytes(),
                value: vec![b'v'; VALUE_LEN],
                lease: 0,
                prev_kv: false,
            }),
        })
        .collect();
    AcceptedSlot { ballot: LogBallot { round: 1, node: NodeId(1) }, entry: Entry { proposals }, chosen: false }
}

/// One sync's worth of work: `slots_per_sync` slots, then a sync.
struct Appender {
    storage: SledStorage,
    value: AcceptedSlot,
    next: Slot,
    slots_per_sync: usize,
    _dir: tempfile::TempDir,
}

impl Appender {
    fn new(batch: usize, slots_per_sync: usize) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = SledStorage::open(dir.path()).expect("open sled");
        Appender { storage, value: slot_value(batch), next: 1, slots_per_sync, _dir: dir }
    }

    fn round(&mut self) {
        for _ in 0..self.slots_per_sync {
            self.storage.save_slot(self.next, &self.value).expect("save_slot");
            self.next += 1;
            if self.next & (TRIM_EVERY - 1) == 0 {
                self.storage.remove_slots_through(self.next - TRIM_EVERY / 2).expect("trim");
            }
        }
        self.storage.sync().expect("sync");
    }
}

fn summary(batch: usize, slots_per_sync: usize) {
    let mut a = Appender::new(batch, slots_per_sync);
    for _ in 0..10 {
        a.round();
    }
    let start = Instant::now();
    let mut rounds = 0u64;
    while start.elapsed() < Duration::from_millis(1500) {
        a.round();
        rounds += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let commands = rounds as f64 * (batch * slots_per_sync) as f64;
    println!(
        "leasekv-bench: storage sled append {batch} cmds/slot x {slots_per_sync} slots/sync \
         ({VALUE_LEN}-byte values): {:.0} commands/s, {:.0} syncs/s, {:.3} ms/sync",
        commands / secs,
        rounds as f64 / secs,
        secs * 1e3 / rounds as f64,
    );
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("sled_append_sync");
    group.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    for &(batch, slots_per_sync) in CONFIGS {
        let mut a = Appender::new(batch, slots_per_sync);
        group.throughput(Throughput::Elements((batch * slots_per_sync) as u64));
        group.bench_function(BenchmarkId::new(format!("{batch}cmds_x_{slots_per_sync}slots"), "per_sync"), |b| {
            b.iter(|| a.round())
        });
    }
    group.finish();
    for &(batch, slots_per_sync) in CONFIGS {
        summary(batch, slots_per_sync);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
