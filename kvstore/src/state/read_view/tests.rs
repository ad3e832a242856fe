use crate::command::{Command, DeleteRangeRequest, RangeRequest, RangeResponse};
use crate::state::view::tests::{command, put};
use crate::types::KeyRange;
use crate::StateMachine;

// The same deterministic mix of puts, deletes, lease grants and revokes as the state
// view's tests (`command`), with the sweep budget lowered so revoked keys stay buried.

/// The reads each view answers: whole ranges, pages, counts, keys only, single keys.
fn requests() -> Vec<RangeRequest> {
    let all = KeyRange::between(vec![0], vec![0]);
    let some = KeyRange::between("k010", "k050");
    let request = |range: &KeyRange| RangeRequest { range: range.clone(), ..Default::default() };
    vec![
        request(&all),
        request(&some),
        RangeRequest { limit: 7, ..request(&all) },
        RangeRequest { limit: 5, ..request(&some) },
        RangeRequest { count_only: true, ..request(&all) },
        RangeRequest { count_only: true, ..request(&some) },
        RangeRequest { keys_only: true, limit: 9, ..request(&some) },
        RangeRequest { range: KeyRange::between("k020", vec![0]), limit: 3, ..Default::default() },
        request(&KeyRange::single("k005")),
        request(&KeyRange::single("k050")),
        request(&KeyRange::single("missing")),
    ]
}

/// A view with the answers its reads must give, computed when it was taken.
struct Taken {
    view: super::ReadView,
    expected: Vec<RangeResponse>,
}

fn take(sm: &mut StateMachine, revision: i64) -> Taken {
    let expected = requests().iter().map(|r| expected(sm, r, revision)).collect();
    Taken { view: sm.read_view(revision).expect("readable"), expected }
}

/// The answer to `request` at `revision` from the state machine; a count from its keys,
/// read (the state machine counts from the same key index as the views).
fn expected(sm: &StateMachine, request: &RangeRequest, revision: i64) -> RangeResponse {
    let whole = RangeRequest { count_only: false, limit: 0, ..request.clone() };
    let counted = sm.range_at(&whole, revision).expect("readable").kvs.len() as i64;
    let answer = sm.range_at(request, revision).expect("readable");
    assert_eq!(answer.count, counted, "the state machine's count of {request:?} at {revision}");
    answer
}

/// Deletes `key`, or puts `value` at it.
fn delete_or_put(sm: &mut StateMachine, key: String, delete: bool, value: String) {
    let command = match delete {
        true => Command::DeleteRange(DeleteRangeRequest { range: KeyRange::single(key), prev_kv: false }),
        false => put(key, value, 0),
    };
    sm.apply(&command);
}

/// A state holding `count` keys `{prefix}0000`, `{prefix}0001`, … (value: the number),
/// flushed.
fn filled(prefix: &str, count: usize) -> StateMachine {
    let mut sm = StateMachine::new();
    for i in 0..count {
        sm.apply(&put(format!("{prefix}{i:04}"), format!("{i}"), 0));
    }
    sm.flush().unwrap();
    sm
}

/// What the views of [`views_over_a_moving_state`] get wrong on purpose.
#[derive(Clone, Copy, PartialEq)]
enum Control {
    None,
    /// The history's changes are not read.
    IgnoreOverlay,
    /// A range's last count is given again without the changes since.
    StaleCounts,
    /// A count from the key index is given as at the store revision.
    StaleIndex,
}

/// Views taken between flushes, at the store revision and at past ones, while the state
/// applies, flushes, sweeps revoked keys and compacts past them (once before a flush, so
/// the compaction drops changes that never reach the engine). They are read in the order
/// taken, so each count of a range starts from the last count of it (an earlier view's).
fn views_over_a_moving_state(control: Control) -> Vec<String> {
    let mut sm = StateMachine::new();
    sm.set_cleanup_budget(2);
    for step in 0..300 {
        sm.apply(&command(step));
        if step % 7 == 0 {
            sm.flush().unwrap();
        }
    }
    let mut taken = Vec::new();
    for step in 300..900 {
        sm.apply(&command(step));
        if step % 5 == 0 {
            sm.flush().unwrap();
        }
        if step == 603 {
            sm.apply(&Command::Compact { revision: sm.revision() });
        }
        if step % 37 == 0 {
            let now = sm.revision();
            taken.push(take(&mut sm, now));
            let past = (now - 20).max(sm.compacted_revision());
            taken.push(take(&mut sm, past));
        }
    }
    sm.flush().unwrap();
    assert!(sm.compacted_revision() > taken[0].view.revision(), "the state compacted past the first views");
    let mut wrong = Vec::new();
    for mut t in taken {
        t.view.ignore_overlay = control == Control::IgnoreOverlay;
        t.view.stale_counts = control == Control::StaleCounts;
        t.view.stale_index = control == Control::StaleIndex;
        for (request, expected) in requests().iter().zip(&t.expected) {
            let got = t.view.range(request).expect("a view reads");
            if &got != expected {
                wrong.push(format!("at {}: {request:?}: {got:?}, expected {expected:?}", t.view.revision()));
            }
        }
    }
    wrong
}

#[test]
fn a_read_view_answers_as_the_state_was_when_it_was_taken() {
    let wrong = views_over_a_moving_state(Control::None);
    assert!(wrong.is_empty(), "{} reads differ, first: {}", wrong.len(), wrong[0]);
}

/// The negative control: a view that reads the engine without the history's changes.
#[test]
fn a_view_without_its_overlay_is_caught() {
    assert!(!views_over_a_moving_state(Control::IgnoreOverlay).is_empty(), "the check must see the moved state");
}

/// The negative control of counts from the last count: one that leaves out the changes
/// since is wrong as soon as they created or deleted a key of the range.
#[test]
fn a_count_that_misses_the_changes_since_the_last_is_caught() {
    let wrong = views_over_a_moving_state(Control::StaleCounts);
    assert!(wrong.iter().any(|w| w.contains("count_only: true")), "the check must see stale counts: {wrong:?}");
}

/// The negative control of counts from the key index: a view at a past revision that
/// counts as at the store revision is wrong once a key of the range was created or deleted
/// since.
#[test]
fn a_count_from_the_index_that_keeps_later_changes_is_caught() {
    let wrong = views_over_a_moving_state(Control::StaleIndex);
    assert!(wrong.iter().any(|w| w.contains("count_only: true")), "the check must see stale counts: {wrong:?}");
}

/// Counts of one range at rising revisions, each from the last, equal counting again,
/// through puts, deletes, lease revokes (their keys buried, not yet swept) and a compaction.
#[test]
fn a_count_from_the_last_equals_counting_again() {
    let mut sm = StateMachine::new();
    sm.set_cleanup_budget(2);
    let ranges = [KeyRange::between("k010", "k050"), KeyRange::between(vec![0], vec![0])];
    let mut from_last = 0;
    // A scan at the current revision, a page at each check: each page's count comes from
    // the page before's, and the changes since.
    let mut from = b"k".to_vec();
    for step in 0..1500 {
        sm.apply(&command(step));
        if step % 11 == 0 {
            sm.flush().unwrap();
        }
        if step == 900 {
            sm.apply(&Command::Compact { revision: sm.revision() - 5 });
        }
        if step % 13 == 0 {
            // One revision behind: the key index is at the store revision, so the count
            // comes from the last one.
            let at = sm.revision() - 1;
            for range in &ranges {
                let request = RangeRequest { range: range.clone(), count_only: true, ..Default::default() };
                let expected = expected(&sm, &request, at).count;
                let view = sm.read_view(at).unwrap();
                let kept =
                    view.published.nearest_count(range, view.revision()).is_some_and(|(at, _)| at <= view.revision());
                from_last += usize::from(kept);
                assert_eq!(view.range(&request).unwrap().count, expected, "{range:?} at {}", view.revision());
            }
            let page = RangeRequest { range: KeyRange::between(from.clone(), "l"), limit: 4, ..Default::default() };
            let expected = expected(&sm, &page, 0);
            let got = sm.read_view(0).unwrap().range(&page).unwrap();
            assert_eq!(got, expected, "page from {:?}", String::from_utf8_lossy(&from));
            match (got.more, got.kvs.last()) {
                (true, Some(last)) => {
                    from = last.key.clone();
                    from.push(0);
                }
                _ => from = b"k".to_vec(),
            }
        }
    }
    assert!(from_last > 150, "most counts came from the last one: {from_last}");
}

/// Pages that start anywhere in a range, at the store revision and at past ones, with no
/// page before them: each count comes from the key index (undoing the changes after a past
/// revision) and equals counting the keys.
#[test]
fn a_page_at_any_position_counts_from_the_index() {
    let mut sm = StateMachine::new();
    for i in 0..3000 {
        sm.apply(&put(format!("x{:05}", (i * 7919) % 3000), format!("{i}"), 0));
    }
    sm.flush().unwrap();
    let mut revisions = Vec::new();
    for round in 0..40 {
        revisions.push(sm.revision());
        for j in 0..25 {
            let i = (round * 131 + j * 17) % 3200;
            delete_or_put(&mut sm, format!("x{i:05}"), j % 2 == 0, format!("r{round}"));
        }
        if round % 3 == 0 {
            sm.flush().unwrap();
        }
    }
    let mut checked = 0;
    for (n, &at) in revisions.iter().enumerate().chain([(40, &sm.revision())]) {
        let start = format!("x{:05}", (n * 373) % 3000);
        let page = RangeRequest { range: KeyRange::between(start, "y"), limit: 10, ..Default::default() };
        let count = RangeRequest { count_only: true, ..page.clone() };
        // The count first: no count of its range is kept yet.
        for request in [count, page] {
            let view = sm.read_view(at).unwrap();
            assert_eq!(view.range(&request).unwrap(), expected(&sm, &request, at), "{request:?} at {at}");
            checked += 1;
        }
    }
    assert_eq!(checked, 82);
}

/// A reader thread reads one view again and again while the state applies and flushes.
#[test]
fn a_view_reads_the_same_on_another_thread_while_the_state_moves() {
    let mut sm = StateMachine::new();
    for step in 0..200 {
        sm.apply(&command(step));
    }
    let now = sm.revision();
    let Taken { view, expected } = take(&mut sm, now);
    let reader = std::thread::spawn(move || {
        for _ in 0..50 {
            for (request, expected) in requests().iter().zip(&expected) {
                assert_eq!(&view.range(request).expect("a view reads"), expected, "{request:?}");
            }
        }
    });
    for step in 200..2000 {
        sm.apply(&command(step));
        if step % 3 == 0 {
            sm.flush().unwrap();
        }
    }
    reader.join().expect("the reader saw the view's revision throughout");
}

/// A page at a revision reads only the page and the changes since: the count and `more`
/// are right at every position.
#[test]
fn pages_at_a_pinned_revision_cover_the_range_once() {
    let mut sm = filled("p", 500);
    let at = sm.revision();
    for i in 0..100 {
        sm.apply(&put(format!("p{:04}", i * 3), "new".into(), 0));
        sm.apply(&Command::DeleteRange(DeleteRangeRequest {
            range: KeyRange::single(format!("p{:04}", i * 5 + 1)),
            prev_kv: false,
        }));
    }
    let mut seen = Vec::new();
    let mut from = b"p".to_vec();
    loop {
        let request = RangeRequest { range: KeyRange::between(from.clone(), "q"), limit: 64, ..Default::default() };
        let page = sm.read_view(at).unwrap().range(&request).unwrap();
        assert_eq!(page.count as usize, 500 - seen.len(), "count: every key from the page's start");
        seen.extend(page.kvs.iter().map(|kv| kv.key.clone()));
        assert!(page.kvs.iter().all(|kv| kv.mod_revision <= at));
        if !page.more {
            break;
        }
        from = page.kvs.last().unwrap().key.clone();
        from.push(0);
    }
    assert_eq!(seen.len(), 500);
}

/// A scan at a past revision while the state goes on changing the scanned keys: each page
/// reuses the overlay the page before left and reads only the changes since. The pages
/// together must be the range at that revision, each page's count the keys from its start.
#[test]
fn a_scan_at_a_past_revision_reuses_its_overlay_and_stays_exact() {
    let mut sm = filled("s", 400);
    let at = sm.revision();
    let whole = RangeRequest { range: KeyRange::between("s", "t"), ..Default::default() };
    let expected = sm.range_at(&whole, at).unwrap();
    let mut seen = Vec::new();
    let mut from = b"s".to_vec();
    for page_number in 0.. {
        // Between pages: keys of the range rewritten, deleted and created, and flushed.
        for j in 0..30 {
            let i = (page_number * 37 + j * 13) % 420;
            delete_or_put(&mut sm, format!("s{i:04}"), j % 3 == 0, format!("new{page_number}"));
        }
        if page_number % 2 == 0 {
            sm.flush().unwrap();
        }
        let request = RangeRequest { range: KeyRange::between(from.clone(), "t"), limit: 50, ..Default::default() };
        let page = sm.read_view(at).unwrap().range(&request).unwrap();
        assert_eq!(page.count as usize, expected.kvs.len() - seen.len(), "page {page_number}: the keys from its start");
        seen.extend(page.kvs.iter().cloned());
        if !page.more {
            break;
        }
        from = page.kvs.last().unwrap().key.clone();
        from.push(0);
    }
    assert_eq!(seen, expected.kvs, "the pages are the range at the scan's revision");
    let view = sm.read_view(at).unwrap();
    assert_eq!(view.published.overlays.0.lock().unwrap().len(), 1, "one overlay, reused by every page");
}

/// Two scans at one revision, their pages interleaved, while the state changes: each page
/// reuses its own scan's overlay (one overlay built per scan), not the other's, and both
/// read the range exactly. Before, a page took the overlay kept last that covered it, the
/// other scan's, and that scan built a new one at its next page (reading every change since
/// the revision again): caught here by the count of overlays built.
#[test]
fn scans_at_one_revision_keep_their_own_overlays() {
    let mut sm = filled("s", 400);
    let at = sm.revision();
    let expected = |from: &str| {
        let whole = RangeRequest { range: KeyRange::between(from, "t"), ..Default::default() };
        sm.range_at(&whole, at).unwrap().kvs
    };
    let (expected_a, expected_b) = (expected("s"), expected("s0200"));
    let mut scans = [(b"s".to_vec(), Vec::new(), true), (b"s0200".to_vec(), Vec::new(), true)];
    for round in 0..20 {
        for (n, (from, seen, going)) in scans.iter_mut().enumerate() {
            if !*going {
                continue;
            }
            for j in 0..10 {
                let i = (round * 37 + j * 13 + n) % 420;
                delete_or_put(&mut sm, format!("s{i:04}"), j % 3 == 0, format!("new{round}"));
            }
            sm.flush().unwrap();
            let request = RangeRequest { range: KeyRange::between(from.clone(), "t"), limit: 40, ..Default::default() };
            let page = sm.read_view(at).unwrap().range(&request).unwrap();
            seen.extend(page.kvs.iter().cloned());
            *going = page.more;
            if let Some(last) = page.kvs.last() {
                *from = last.key.clone();
                from.push(0);
            }
        }
    }
    assert!(scans.iter().all(|(_, _, going)| !going), "both scans ended");
    assert_eq!(scans[0].1, expected_a, "the first scan is the range at the revision");
    assert_eq!(scans[1].1, expected_b, "the second scan is its range at the revision");
    let view = sm.read_view(at).unwrap();
    let built = view.published.overlays.1.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        built <= 2,
        "at most one overlay built per scan (the second may start from a copy of the first's), not {built}"
    );
}

/// Two scans that began a write apart page through the same ranges in step while the
/// range keeps changing. Each page's count comes from the count the other scan's page (or
/// its own page before) kept at a nearby revision, reading only the changes between the
/// two revisions. Before, a range kept one count, the later revision's: the scan at the
/// earlier one could not use it and undid every change since from the key index, at every
/// page (at 1M keys, past its bound, it counted the rest of the range again).
#[test]
fn scans_in_step_at_nearby_revisions_count_from_each_other() {
    let mut sm = filled("s", 1000);
    let first = sm.revision();
    sm.apply(&put("s0000".to_string(), "moved".to_string(), 0));
    let second = sm.revision();
    let mut from = b"s".to_vec();
    let mut seen = [0usize, 0];
    for round in 0..30 {
        // Between rounds, new keys at the range's end: changes in the range after both.
        for j in 0..40 {
            sm.apply(&put(format!("s9{round:02}{j:02}"), "new".to_string(), 0));
        }
        sm.flush().unwrap();
        let mut next = None;
        for (n, at) in [second, first].into_iter().enumerate() {
            let request = RangeRequest { range: KeyRange::between(from.clone(), "t"), limit: 50, ..Default::default() };
            let page = sm.read_view(at).unwrap().range(&request).unwrap();
            assert_eq!(page.count as usize, 1000 - seen[n], "round {round}: the keys from the page's start at {at}");
            if round > 0 {
                // Its overlay reads the round's 40 new keys; the count, the one write
                // between the two revisions. Undoing every change since would read 40 more
                // a round.
                let read = super::trace::changes_read();
                assert!(read <= 45, "round {round}: the page at {at} read {read} changes of its range");
            }
            seen[n] += page.kvs.len();
            next = page.kvs.last().map(|kv| kv.key.clone());
        }
        match next {
            Some(mut last) if seen[0] < 1000 => {
                last.push(0);
                from = last;
            }
            _ => break,
        }
    }
    assert_eq!(seen, [1000, 1000], "both scans read the whole range");
}
