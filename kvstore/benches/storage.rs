//! Log appends with batching: how many commands per second one replica can make durable,
//! and how many syncs per second that takes (`SledStorage`: the log in segment files,
//! `write` + `fdatasync` per sync).
//!
//! Every slot holds one `Entry` of `batch` commands (`Command::Put` with a 256-byte value);
//! each sync covers `slots_per_sync` slots. Besides criterion's report, prints one
//! `leasekv-bench:` line per configuration, from a separate timed run.
//!
//! `small_sync` compares one sync of one small slot (about 200 bytes encoded) on the
//! storage's path before the segment log (the slot inserted into a sled tree, then sled's
//! flush and an `fdatasync` of its file, as `SledStorage` did) and on today's, and prints
//! the median of each from a separate run of [`MEDIAN_RUNS`] syncs.
//!
//! Run: `cargo bench -p leasekv-kvstore --bench storage` (`-- small_sync` for the comparison
//! alone).
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use leasekv_kvstore::log::{AcceptedSlot, Entry, LogBallot, Proposal, ProposalId, Slot};
use leasekv_kvstore::storage::{SledStorage, Storage};
use leasekv_kvstore::{Command, PutRequest};
use leasekv_lease::NodeId;
use std::fs::File;
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
        "leasekv-bench: storage log append {batch} cmds/slot x {slots_per_sync} slots/sync \
         ({VALUE_LEN}-byte values): {:.0} commands/s, {:.0} syncs/s, {:.3} ms/sync",
        commands / secs,
        rounds as f64 / secs,
        secs * 1e3 / rounds as f64,
    );
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("log_append_sync");
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

/// Syncs timed for each median of `small_sync`.
const MEDIAN_RUNS: usize = 2000;

/// A slot whose record is about 200 bytes: one put of a 150-byte value.
fn small_slot() -> AcceptedSlot {
    let put = Proposal {
        id: ProposalId { node: NodeId(1), incarnation: 1, seq: 1 },
        command: Command::Put(PutRequest {
            key: b"/bench/small/key".to_vec(),
            value: vec![b'v'; 150],
            lease: 0,
            prev_kv: false,
        }),
    };
    AcceptedSlot {
        ballot: LogBallot { round: 1, node: NodeId(1) },
        entry: Entry { proposals: vec![put] },
        chosen: false,
    }
}

/// The path before the segment log: a slot is a framed record (version byte, postcard,
/// CRC-32) in a sled tree keyed by the big-endian slot; a sync is sled's flush plus an
/// `fdatasync` of sled's data file (4 MiB sled segments, as new databases had).
struct SledLog {
    db: sled::Db,
    slots: sled::Tree,
    data: File,
    next: Slot,
    _dir: tempfile::TempDir,
}

impl SledLog {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::Config::new().segment_size(4 << 20).path(dir.path()).open().expect("open sled");
        let slots = db.open_tree("leasekv/slots").expect("tree");
        let data = File::open(dir.path().join("db")).expect("sled's data file");
        SledLog { db, slots, data, next: 1, _dir: dir }
    }

    fn append_and_sync(&mut self, value: &AcceptedSlot) {
        let mut rec = vec![1u8];
        rec = postcard::to_extend(value, rec).expect("encode");
        let crc = crc32fast::hash(&rec);
        rec.extend_from_slice(&crc.to_le_bytes());
        self.slots.insert(self.next.to_be_bytes(), rec).expect("insert");
        self.next += 1;
        if self.next & (TRIM_EVERY - 1) == 0 {
            let mut batch = sled::Batch::default();
            for key in self.slots.range(..(self.next - TRIM_EVERY / 2).to_be_bytes()).keys() {
                batch.remove(key.expect("key"));
            }
            self.slots.apply_batch(batch).expect("trim");
        }
        self.db.flush().expect("flush");
        self.data.sync_data().expect("fdatasync");
    }
}

/// Today's path: [`SledStorage`], the slot appended to the segment log.
struct SegmentPath {
    storage: SledStorage,
    next: Slot,
    _dir: tempfile::TempDir,
}

impl SegmentPath {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = SledStorage::open(dir.path()).expect("open");
        SegmentPath { storage, next: 1, _dir: dir }
    }

    fn append_and_sync(&mut self, value: &AcceptedSlot) {
        self.storage.save_slot(self.next, value).expect("save_slot");
        self.next += 1;
        if self.next & (TRIM_EVERY - 1) == 0 {
            self.storage.remove_slots_through(self.next - TRIM_EVERY / 2).expect("trim");
        }
        self.storage.sync().expect("sync");
    }
}

/// The median of [`MEDIAN_RUNS`] runs of `op`, after a warm-up.
fn median(mut op: impl FnMut()) -> Duration {
    for _ in 0..100 {
        op();
    }
    let mut times: Vec<Duration> = (0..MEDIAN_RUNS)
        .map(|_| {
            let start = Instant::now();
            op();
            start.elapsed()
        })
        .collect();
    times.sort_unstable();
    times[times.len() / 2]
}

fn small_sync(c: &mut Criterion) {
    let value = small_slot();
    let encoded = postcard::to_allocvec(&value).expect("encode").len();
    let mut group = c.benchmark_group("small_sync");
    group.sample_size(20).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    let mut old = SledLog::new();
    group.bench_function("sled_tree_flush_fdatasync", |b| b.iter(|| old.append_and_sync(&value)));
    let mut new = SegmentPath::new();
    group.bench_function("segment_log_write_fdatasync", |b| b.iter(|| new.append_and_sync(&value)));
    group.finish();

    let mut old = SledLog::new();
    let old_median = median(|| old.append_and_sync(&value));
    let mut new = SegmentPath::new();
    let new_median = median(|| new.append_and_sync(&value));
    println!(
        "leasekv-bench: storage sync of 1 slot ({encoded}-byte value record), median of {MEDIAN_RUNS}: \
         sled tree + flush + fdatasync {:.1} us, segment log write + fdatasync {:.1} us",
        old_median.as_secs_f64() * 1e6,
        new_median.as_secs_f64() * 1e6,
    );
}

criterion_group!(benches, bench, small_sync);
criterion_main!(benches);
