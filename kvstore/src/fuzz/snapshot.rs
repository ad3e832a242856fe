//! Target `state_snapshot`: arbitrary and mutated bytes into
//! `StateMachine::from_snapshot_bytes`, what a replica does with a snapshot a peer sent (or
//! its own disk holds). A snapshot either fails with an error naming what is wrong, or
//! restores a state that is consistent: it encodes to a snapshot that restores the same
//! state, and it serves reads and takes writes.

use super::support;
use crate::command::{AlarmAction, AlarmKind, Command, PutRequest, RangeRequest};
use crate::state::StateMachine;
use crate::types::KeyRange;
use proptest::prelude::*;

const TARGET: &str = "state_snapshot";

fn put(key: &str, value: &str, lease: i64) -> Command {
    Command::Put(PutRequest { key: key.into(), value: value.into(), lease, prev_kv: false })
}

/// States worth snapshotting: empty, and one with every section filled (keys, named and
/// anonymous leases, a lease revoked with its keys, history, a compaction, an alarm).
fn states() -> Vec<(&'static str, StateMachine)> {
    let mut full = StateMachine::new();
    let commands = [
        Command::LeaseGrant { id: 5, name: Some("web".into()), ttl: 30 },
        Command::LeaseGrant { id: 6, name: None, ttl: 10 },
        put("a", "1", 0),
        put("b", "2", 5),
        put("c", "3", 6),
        put("d", "4", 6),
        put("a", "5", 0),
        Command::LeaseRevoke { id: 6 },
        Command::Compact { revision: 3 },
        put("\u{0}", "", 0),
        Command::Alarm { action: AlarmAction::Raise, member: 1, kind: Some(AlarmKind::NoSpace) },
    ];
    for command in &commands {
        full.apply(command);
    }
    vec![("empty", StateMachine::new()), ("full", full)]
}

/// One snapshot through the decoder.
pub fn check(bytes: &[u8]) {
    let Ok(restored) = StateMachine::from_snapshot_bytes(bytes) else { return };
    let again = restored.to_snapshot_bytes();
    let twice = StateMachine::from_snapshot_bytes(&again).expect("a restored state's own snapshot restores");
    assert_eq!(twice.to_snapshot_bytes(), again, "restoring is stable");
    assert_eq!(twice.digest(), restored.digest());
    let everything = RangeRequest { range: KeyRange { key: vec![0], range_end: vec![0] }, ..Default::default() };
    let all = restored.range(&everything).expect("a restored state serves reads");
    assert_eq!(all.count as usize, restored.key_count());
    let _ = restored.events_since(restored.compacted_revision() + 1);
    let mut writable = restored;
    let before = writable.revision();
    let applied = writable.apply(&put("fuzz", "x", 0));
    assert!(applied.revision >= before, "the revision never goes back");
    for lease in writable.leases().map(|l| l.id).collect::<Vec<_>>() {
        writable.apply(&Command::LeaseRevoke { id: lease });
    }
}

#[test]
#[ignore = "regenerates fuzz/corpus/state_snapshot"]
fn write_corpus() {
    for (name, state) in states() {
        support::write_seed(env!("CARGO_MANIFEST_DIR"), TARGET, &format!("{name}.snap"), &state.to_snapshot_bytes());
    }
}

#[test]
fn corpus_and_mutations() {
    let mut seeds = support::replay(env!("CARGO_MANIFEST_DIR"), TARGET, check);
    // Fresh encodings too, so a change of the snapshot format is fuzzed before the
    // committed seeds are regenerated.
    seeds.extend(states().into_iter().map(|(_, state)| state.to_snapshot_bytes()));
    proptest!(support::config(5000), |(bytes in support::inputs(seeds, &[]))| check(&bytes));
}
