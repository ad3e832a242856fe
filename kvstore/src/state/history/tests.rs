//! Tests of `history.rs`.

use super::*;

fn kv(key: &str, value: &str, create: Revision, revision: Revision, version: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.into(),
        create_revision: create,
        mod_revision: revision,
        version,
        lease: 0,
    }
}

/// a=1@2, b=1@3, a=2@4, delete b@5.
fn sample() -> History {
    let mut h = History::in_memory();
    h.put(kv("a", "1", 2, 2, 1), None);
    h.put(kv("b", "1", 3, 3, 1), None);
    h.flush();
    h.put(kv("a", "2", 2, 4, 2), Some(kv("a", "1", 2, 2, 1)));
    h.delete(kv("b", "1", 3, 3, 1), 5);
    h.set_head(5);
    h.flush();
    h
}

fn now() -> BTreeMap<Vec<u8>, KeyValue> {
    [(b"a".to_vec(), kv("a", "2", 2, 4, 2))].into_iter().collect()
}

#[test]
fn rewind_undoes_every_later_change_in_the_range() {
    let h = sample();
    let all = KeyRange::between(vec![0], vec![0]);
    let at3 = h.rewind(now(), &all, 3);
    assert_eq!(at3.values().cloned().collect::<Vec<_>>(), vec![kv("a", "1", 2, 2, 1), kv("b", "1", 3, 3, 1)]);
    assert!(h.rewind(now(), &all, 1).is_empty());
    assert_eq!(h.rewind(now(), &all, 5), now());
    // A change outside the range is left alone.
    let only_b = h.rewind(BTreeMap::new(), &KeyRange::single("b"), 4);
    assert_eq!(only_b.len(), 1);
}

#[test]
fn compaction_keeps_the_changes_at_its_revision() {
    let mut h = sample();
    assert_eq!(h.compact(5), 3);
    assert_eq!(h.compacted(), 5);
    h.flush();
    let r = h.reader();
    let HistoryRead::Events { events, through } = r.read(5, 100) else { panic!("compacted") };
    let left: Vec<_> = events.iter().map(|e| (e.kind, e.kv.mod_revision)).collect();
    assert_eq!((left, through), (vec![(EventKind::Delete, 5)], 5));
    assert_eq!(r.read(4, 100), HistoryRead::Compacted(5));
    assert_eq!(r.read(9, 100), HistoryRead::Events { events: Vec::new(), through: 5 });
}

#[test]
fn reads_start_at_the_first_change_of_a_revision_and_never_cut_one() {
    let mut h = sample();
    h.put(kv("c", "1", 5, 5, 1), None);
    h.set_head(5);
    h.flush();
    let revs = |from, max| revisions(h.reader().read(from, max));
    assert_eq!(revs(3, 100), (vec![3, 4, 5, 5], 5));
    assert_eq!(revs(3, 1), (vec![3], 3));
    // Revision 5 has two changes: a batch that reaches it takes both.
    assert_eq!(revs(5, 1), (vec![5, 5], 5));
    assert_eq!(revs(4, 2), (vec![4, 5, 5], 5));
}

/// A watch stream reads on its own thread while the state machine applies: the changes
/// of the command being applied are already in the window, its revision not yet
/// published. Read then, they were sent, and sent again once the head moved (a
/// duplicate event, and a revision split over two responses, seen by the chaos run).
#[test]
fn a_read_between_a_commands_changes_and_its_head_stops_at_the_head() {
    let mut h = sample();
    let reader = h.reader();
    h.put(kv("c", "1", 6, 6, 1), None);
    h.put(kv("d", "1", 6, 6, 1), None);
    assert_eq!(reader.read(2, 100), HistoryRead::Events { events: reader_events(&h, 2, 5), through: 5 });
    assert_eq!(reader.read(6, 100), HistoryRead::Events { events: Vec::new(), through: 5 });
    h.set_head(6);
    assert_eq!(reader.read(6, 100), HistoryRead::Events { events: Vec::new(), through: 5 }, "not published yet");
    h.flush();
    let HistoryRead::Events { events, through } = reader.read(6, 100) else { panic!("compacted") };
    assert_eq!((events.len(), through), (2, 6));
}

fn revisions(read: HistoryRead) -> (Vec<Revision>, Revision) {
    match read {
        HistoryRead::Events { events, through } => (events.iter().map(Event::revision).collect(), through),
        HistoryRead::Compacted(c) => panic!("compacted at {c}"),
    }
}

/// Changes applied and not yet written to the engine are read from the published tail,
/// whole revisions, after the engine's; what is recorded and not published stays
/// unseen; a flush moves them to the engine without a gap or a repeat.
#[test]
fn the_published_tail_is_read_after_the_engine_and_a_flush_moves_it() {
    let mut h = sample();
    let reader = h.reader();
    h.put(kv("c", "1", 6, 6, 1), None);
    h.put(kv("d", "1", 6, 6, 1), None);
    h.set_head(6);
    assert_eq!(revisions(reader.read(4, 100)), (vec![4, 5], 5), "recorded, not published");
    h.publish_tail();
    assert_eq!(reader.head(), 6);
    assert_eq!(revisions(reader.read(4, 100)), (vec![4, 5, 6, 6], 6));
    h.put(kv("c", "2", 6, 7, 2), Some(kv("c", "1", 6, 6, 1)));
    h.set_head(7);
    h.publish_tail();
    assert_eq!(revisions(reader.read(6, 100)), (vec![6, 6, 7], 7));
    // A batch never cuts a revision, across the engine and the tail.
    assert_eq!(revisions(reader.read(5, 1)), (vec![5], 5));
    assert_eq!(revisions(reader.read(5, 2)), (vec![5, 6, 6], 6));
    assert_eq!(revisions(reader.read(6, 1)), (vec![6, 6], 6));
    assert_eq!(revisions(reader.read(8, 100)), (vec![], 7));
    let before = reader.read(2, 100);
    h.flush();
    assert_eq!(reader.read(2, 100), before, "the same changes from the engine");
    assert_eq!(revisions(reader.read(7, 100)), (vec![7], 7));
    h.put(kv("e", "1", 8, 8, 1), None);
    h.set_head(8);
    h.publish_tail();
    assert_eq!(revisions(reader.read(6, 100)), (vec![6, 6, 7, 8], 8));
}

/// A reader on another thread, while the writer records, publishes tails and flushes
/// at random: every read continues the last one, without a gap or a repeat, and never
/// cuts a revision (revisions divisible by 3 have two changes).
#[test]
fn a_reader_racing_tails_and_flushes_sees_every_change_once_and_whole() {
    const LAST: Revision = 20_000;
    let changes_at = |r: Revision| if r % 3 == 0 { 2 } else { 1 };
    let mut h = History::in_memory();
    let reader = h.reader();
    let writer = std::thread::spawn(move || {
        let mut rng = leasekv_lease::rng::SplitMix64::new(7);
        for r in 2..=LAST {
            for k in 0..changes_at(r) {
                h.put(kv(&format!("k{k}"), "v", r, r, 1), None);
            }
            h.set_head(r);
            if rng.chance(0.7) {
                h.publish_tail();
            }
            if rng.chance(0.05) {
                h.flush();
            }
        }
        h.flush();
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut from = 2;
    while from <= LAST && std::time::Instant::now() < deadline {
        let (got, through) = revisions(reader.read(from, 3));
        let mut expected = Vec::new();
        for r in from..=through {
            expected.extend(std::iter::repeat_n(r, changes_at(r)));
        }
        assert_eq!(got, expected, "a read from {from} through {through}");
        from = through + 1;
    }
    writer.join().expect("the writer");
    assert_eq!(from, LAST + 1, "the reader did not reach the end in time");
}

/// A compaction drops changes that are still pending: the next publication must hold
/// exactly those recorded after the last one.
#[test]
fn a_compaction_of_pending_changes_keeps_the_tail_exact() {
    let mut h = sample();
    let reader = h.reader();
    for (i, key) in ["c", "d", "e"].iter().enumerate() {
        let revision = 6 + i as Revision;
        h.put(kv(key, "1", revision, revision, 1), None);
        h.set_head(revision);
        h.publish_tail();
    }
    h.compact(7);
    h.put(kv("f", "1", 9, 9, 1), None);
    h.set_head(9);
    h.publish_tail();
    // The compaction point is published with the tail: the changes it dropped were
    // pending, and will never be in the engine.
    assert_eq!(reader.read(6, 100), HistoryRead::Compacted(7));
    assert_eq!(revisions(reader.read(7, 100)), (vec![7, 8, 9], 9));
    h.flush();
    assert_eq!(reader.read(6, 100), HistoryRead::Compacted(7));
    assert_eq!(revisions(reader.read(7, 100)), (vec![7, 8, 9], 9));
}

/// The retained changes from `from` through `to`, straight from the window.
fn reader_events(h: &History, from: Revision, to: Revision) -> Vec<Event> {
    h.events().filter(|e| (from..=to).contains(&e.revision())).collect()
}
