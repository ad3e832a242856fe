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
    let expected = requests().iter().map(|r| sm.range_at(r, revision).expect("readable")).collect();
    Taken { view: sm.read_view(revision).expect("readable"), expected }
}

/// Views taken between flushes, at the store revision and at past ones, while the state
/// applies, flushes, sweeps revoked keys and compacts past them (once before a flush, so
/// the compaction drops changes that never reach the engine).
fn views_over_a_moving_state(ignore_overlay: bool) -> Vec<String> {
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
        t.view.ignore_overlay = ignore_overlay;
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
    let wrong = views_over_a_moving_state(false);
    assert!(wrong.is_empty(), "{} reads differ, first: {}", wrong.len(), wrong[0]);
}

/// The negative control: a view that reads the engine without the history's changes.
#[test]
fn a_view_without_its_overlay_is_caught() {
    assert!(!views_over_a_moving_state(true).is_empty(), "the check must see the moved state");
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
    let mut sm = StateMachine::new();
    for i in 0..500 {
        sm.apply(&put(format!("p{i:04}"), format!("{i}"), 0));
    }
    sm.flush().unwrap();
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
