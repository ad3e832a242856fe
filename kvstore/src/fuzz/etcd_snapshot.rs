//! Target `etcd_snapshot`: mutated etcd snapshot files into `etcd_snapshot::decode`, what
//! `kvserver restore` does with a file an operator hands it. A file either fails with an
//! error naming what is wrong, or imports a state that passes the `state_snapshot`
//! target's checks: its own snapshot restores the same state, serves reads, takes writes.
//!
//! The seed is a real snapshot of etcd 3.4.23 (`etcdctl snapshot save`, 20 KiB). Mutated
//! with its SHA-256 in place, every change is caught by the hash; so the seed also goes in
//! without it (etcd's database file itself), where changes reach the bbolt pages and etcd's
//! records.

use super::support;
use crate::etcd_snapshot;

const TARGET: &str = "etcd_snapshot";

/// One file through the importer.
fn check(bytes: &[u8]) {
    if let Ok(machine) = etcd_snapshot::decode(bytes) {
        super::snapshot::check(&machine.to_snapshot_bytes());
    }
}

#[test]
fn corpus_and_mutations() {
    let mut seeds = support::replay(env!("CARGO_MANIFEST_DIR"), TARGET, check);
    let without_hash: Vec<Vec<u8>> =
        seeds.iter().filter(|s| s.len() % 512 == 32).map(|s| s[..s.len() - 32].to_vec()).collect();
    for seed in &without_hash {
        assert!(etcd_snapshot::decode(seed).is_ok(), "a committed seed imports without its hash");
    }
    seeds.extend(without_hash);
    proptest::proptest!(support::config(1000), |(bytes in support::inputs(seeds, &[]))| check(&bytes));
}
