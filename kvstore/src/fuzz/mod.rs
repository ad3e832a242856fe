//! The store's fuzz targets (docs/fuzzing.md): snapshot bytes into the snapshot decoder,
//! etcd snapshot files into their importer, and structurally valid but hostile log
//! messages into a running replica. Each replays its committed corpus
//! (`fuzz/corpus/<target>/`), then runs proptest's generated and mutated cases
//! (`PROPTEST_CASES` sets how many).

#[path = "../../../fuzz/support.rs"]
mod support;

mod etcd_snapshot;
mod etcd_snapshot_round_trip;
mod replica;
mod snapshot;
