//! Tests of `parked.rs`.

use super::*;

fn snapshot_notice(transfer: u64, index: u64, size: usize) -> ParkedNotice {
    ParkedNotice { transfer, kind: ParkedKind::Snapshot { index }, size: size as u64 }
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

fn mem(bytes: Vec<u8>) -> Arc<Payload> {
    Arc::new(Payload::Memory(bytes))
}

fn chunks_of(index: u64, bytes: &[u8], chunk: usize) -> Vec<pb::ParkedChunk> {
    Chunks::new(index, Arc::new(Payload::Memory(bytes.to_vec())), chunk).map(Result::unwrap).collect()
}

fn reassemble_all(notice: ParkedNotice, chunks: Vec<pb::ParkedChunk>) -> Result<Vec<u8>, PullError> {
    let mut reassembly = Reassembly::new(notice)?;
    for chunk in chunks {
        reassembly.push(chunk)?;
    }
    match reassembly.finish()? {
        Assembled::Memory(data) => Ok(data),
        other => panic!("reassembled in memory, not {other:?}"),
    }
}

#[test]
fn chunks_cover_the_data_in_order_and_mark_the_last() {
    let bytes = data(10);
    let chunks = chunks_of(7, &bytes, 4);
    let shape: Vec<_> = chunks.iter().map(|c| (c.index, c.offset, c.data.len(), c.last)).collect();
    assert_eq!(shape, vec![(7, 0, 4, false), (7, 4, 4, false), (7, 8, 2, true)]);
    // An exact multiple ends on a full last chunk, not an empty extra one.
    let shape: Vec<_> = chunks_of(7, &data(8), 4).iter().map(|c| (c.offset, c.data.len(), c.last)).collect();
    assert_eq!(shape, vec![(0, 4, false), (4, 4, true)]);
    // An empty message is one empty last chunk.
    let shape: Vec<_> = chunks_of(7, &[], 4).iter().map(|c| (c.offset, c.data.len(), c.last)).collect();
    assert_eq!(shape, vec![(0, 0, true)]);
}

#[test]
fn in_order_chunks_reassemble_to_the_message() {
    for (len, chunk) in [(0, 4), (1, 4), (4, 4), (10, 4), (3 * CHUNK_BYTES + 17, CHUNK_BYTES)] {
        let bytes = data(len);
        let got = reassemble_all(snapshot_notice(1, 9, len), chunks_of(9, &bytes, chunk)).expect("reassembles");
        assert_eq!(got, bytes, "len {len} chunk {chunk}");
    }
    let message = ParkedNotice { transfer: 2, kind: ParkedKind::Message, size: 5 };
    assert_eq!(reassemble_all(message, chunks_of(0, &data(5), 2)).expect("message reassembles"), data(5));
}

#[test]
fn a_chunk_of_another_index_is_refused() {
    let bytes = data(10);
    let mut chunks = chunks_of(9, &bytes, 4);
    chunks[1].index = 10;
    let error = reassemble_all(snapshot_notice(1, 9, 10), chunks).expect_err("index changed");
    assert!(matches!(error, PullError::IndexChanged { expected: 9, got: 10 }), "{error}");
    // The notice's index counts from the first chunk on.
    let error = reassemble_all(snapshot_notice(1, 8, 10), chunks_of(9, &bytes, 4)).expect_err("wrong snapshot");
    assert!(matches!(error, PullError::IndexChanged { expected: 8, got: 9 }), "{error}");
}

#[test]
fn missing_repeated_or_reordered_chunks_are_refused() {
    let bytes = data(12);
    let notice = snapshot_notice(1, 3, 12);
    let chunks = chunks_of(3, &bytes, 4);
    let skipped = vec![chunks[0].clone(), chunks[2].clone()];
    let error = reassemble_all(notice, skipped).expect_err("gap");
    assert!(matches!(error, PullError::OutOfOrder { expected: 4, got: 8 }), "{error}");
    let repeated = vec![chunks[0].clone(), chunks[0].clone()];
    assert!(matches!(reassemble_all(notice, repeated), Err(PullError::OutOfOrder { .. })));
    let swapped = vec![chunks[1].clone(), chunks[0].clone()];
    assert!(matches!(reassemble_all(notice, swapped), Err(PullError::OutOfOrder { expected: 0, got: 4 })));
    let mut after = chunks.clone();
    after.push(pb::ParkedChunk { index: 3, data: vec![1], last: true, offset: 12 });
    assert!(matches!(reassemble_all(notice, after), Err(PullError::AfterLast)));
}

#[test]
fn sizes_other_than_announced_are_refused() {
    let bytes = data(10);
    // More than announced.
    let error = reassemble_all(snapshot_notice(1, 3, 6), chunks_of(3, &bytes, 4)).expect_err("overrun");
    assert!(matches!(error, PullError::Overrun { size: 6, got: 8 }), "{error}");
    // Last chunk too early.
    let error = reassemble_all(snapshot_notice(1, 3, 11), chunks_of(3, &bytes, 4)).expect_err("short");
    assert!(matches!(error, PullError::Short { size: 11, got: 10 }), "{error}");
    // Empty chunks that are not last would let a stream run on without end.
    let empty = pb::ParkedChunk { index: 3, data: Vec::new(), last: false, offset: 0 };
    assert!(matches!(reassemble_all(snapshot_notice(1, 3, 10), vec![empty]), Err(PullError::EmptyChunk)));
    // Announced beyond the limit: refused before anything is allocated.
    let huge = snapshot_notice(1, 3, 0);
    let huge = ParkedNotice { size: MAX_TRANSFER_BYTES + 1, ..huge };
    assert!(matches!(Reassembly::new(huge), Err(PullError::TooLarge { .. })));
}

#[test]
fn a_truncated_stream_is_refused() {
    let bytes = data(10);
    let mut chunks = chunks_of(3, &bytes, 4);
    chunks.pop();
    let error = reassemble_all(snapshot_notice(1, 3, 10), chunks).expect_err("truncated");
    assert!(matches!(error, PullError::Truncated { size: 10, got: 8 }), "{error}");
    let error = reassemble_all(snapshot_notice(1, 3, 10), Vec::new()).expect_err("nothing");
    assert!(matches!(error, PullError::Truncated { size: 10, got: 0 }), "{error}");
}

/// A snapshot still being built goes out as it grows, whole, under a notice of unknown
/// size; a writer that stops midway ends the stream with an error, not a short message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growing_snapshot_is_sent_as_it_is_written() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let bytes = data(3 * CHUNK_BYTES + 17);
    for complete in [true, false] {
        let (growing, mut writer) = GrowingFile::create(dir.path()).unwrap();
        let outbox = Outbox::new();
        let notice = outbox.park(
            NodeId(2),
            ParkedKind::Snapshot { index: 4 },
            Arc::new(Payload::Growing(growing)),
            Instant::now(),
        );
        assert_eq!(notice.size, SIZE_UNKNOWN);
        let serving = outbox.serve(NodeId(2), notice.transfer, Instant::now()).expect("parked");
        let written = bytes.clone();
        let write = std::thread::spawn(move || {
            for (i, piece) in written.chunks(CHUNK_BYTES / 3).enumerate() {
                if !complete && i == 7 {
                    // Dropped unfinished: the file is marked failed.
                    return;
                }
                writer.write_all(piece).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            writer.finish().unwrap();
        });
        let (reassembly, mut reader) = Reassembly::into_pipe(notice).unwrap();
        let read = std::thread::spawn(move || {
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut reader, &mut got).map(|_| got)
        });
        let pulled = reassemble(reassembly, Box::pin(serving.into_stream()), CHUNK_TIMEOUT).await;
        write.join().unwrap();
        let got = read.join().unwrap().unwrap();
        if complete {
            assert_eq!(pulled.expect("whole").data, Assembled::Piped);
            assert_eq!(got, bytes);
            assert!(outbox.parked_for(NodeId(2)).is_empty(), "served");
        } else {
            let error = pulled.expect_err("cut");
            assert!(got.len() < bytes.len());
            assert!(error.to_string().contains("writer failed"), "{error}");
        }
    }
}

#[tokio::test]
async fn reassembling_a_stream_stops_at_errors_ends_and_stalls() {
    let bytes = data(10);
    let notice = snapshot_notice(1, 3, 10);
    let ok = chunks_of(3, &bytes, 4).into_iter().map(Ok);
    let pulled = reassemble(Reassembly::new(notice).expect("size"), tokio_stream::iter(ok), CHUNK_TIMEOUT)
        .await
        .expect("complete");
    assert_eq!((pulled.data, pulled.chunks), (Assembled::Memory(bytes.clone()), 3));

    // The stream breaks after one chunk.
    let mut broken: Vec<Result<pb::ParkedChunk, Status>> =
        chunks_of(3, &bytes, 4).into_iter().take(1).map(Ok).collect();
    broken.push(Err(Status::unavailable("connection reset")));
    let error = reassemble(Reassembly::new(notice).expect("size"), tokio_stream::iter(broken), CHUNK_TIMEOUT)
        .await
        .expect_err("broken");
    assert!(matches!(error, PullError::Rpc(ref m) if m.contains("connection reset")), "{error}");

    // The stream ends early.
    let cut = chunks_of(3, &bytes, 4).into_iter().take(2).map(Ok);
    let error = reassemble(Reassembly::new(notice).expect("size"), tokio_stream::iter(cut), CHUNK_TIMEOUT)
        .await
        .expect_err("cut");
    assert!(matches!(error, PullError::Truncated { got: 8, .. }), "{error}");

    // The stream goes quiet.
    let first = chunks_of(3, &bytes, 4).into_iter().take(1).map(Ok);
    let quiet = tokio_stream::iter(first).chain(tokio_stream::pending());
    let error = reassemble(Reassembly::new(notice).expect("size"), quiet, Duration::from_millis(20))
        .await
        .expect_err("stalled");
    assert!(matches!(error, PullError::Stalled(_)), "{error}");
}

/// A snapshot parked as a file is chunked from the file, and a snapshot pulled into a
/// pipe is the same bytes; a transfer that fails ends the pipe's reader early.
#[test]
fn snapshots_go_from_file_to_pipe_and_a_failed_transfer_ends_the_reader_early() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let bytes = data(3 * CHUNK_BYTES + 5);
    let (growing, mut writer) = GrowingFile::create(dir.path()).unwrap();
    writer.write_all(&bytes).unwrap();
    writer.finish().unwrap();
    let chunks: Vec<_> = Chunks::new(9, Arc::new(Payload::Growing(growing)), CHUNK_BYTES).map(Result::unwrap).collect();
    assert_eq!(chunks.len(), 4);
    let notice = snapshot_notice(1, 9, bytes.len());
    let (mut reassembly, mut reader) = Reassembly::into_pipe(notice).unwrap();
    let read = std::thread::spawn(move || {
        let mut got = Vec::new();
        reader.read_to_end(&mut got).map(|_| got)
    });
    for chunk in chunks.clone() {
        reassembly.push(chunk).unwrap();
    }
    assert_eq!(reassembly.finish().unwrap(), Assembled::Piped);
    assert_eq!(read.join().unwrap().unwrap(), bytes);

    // Cut short, or refused midway: the reader's input ends where the transfer did.
    let (mut cut, mut reader) = Reassembly::into_pipe(notice).unwrap();
    cut.push(chunks[0].clone()).unwrap();
    assert!(matches!(cut.finish(), Err(PullError::Truncated { .. })));
    let mut got = Vec::new();
    reader.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), CHUNK_BYTES);
    let (mut refused, mut reader) = Reassembly::into_pipe(notice).unwrap();
    refused.push(chunks[0].clone()).unwrap();
    assert!(refused.push(chunks[2].clone()).is_err());
    drop(refused);
    let mut got = Vec::new();
    reader.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), CHUNK_BYTES);
}

#[test]
fn the_outbox_keeps_the_newest_of_each_kind_and_forgets_what_was_served() {
    let outbox = Outbox::new();
    let now = Instant::now();
    let peer = NodeId(2);
    let old = outbox.park(peer, ParkedKind::Snapshot { index: 5 }, mem(data(10)), now);
    let message = outbox.park(peer, ParkedKind::Message, mem(data(3)), now);
    let new = outbox.park(peer, ParkedKind::Snapshot { index: 7 }, mem(data(2 * CHUNK_BYTES + 1)), now);
    assert!(new.transfer > old.transfer);
    assert_eq!(outbox.parked_for(peer), vec![new, message]);
    assert!(outbox.serve(peer, old.transfer, now).is_none(), "a replaced snapshot is gone");
    assert!(outbox.serve(NodeId(3), new.transfer, now).is_none(), "parked for another peer");

    let serving = outbox.serve(peer, new.transfer, now).expect("parked");
    // A snapshot for a repeated Fetch, parked while the first one is on its way.
    let repeat = outbox.park(peer, ParkedKind::Snapshot { index: 8 }, mem(data(4)), now);
    let notice = ParkedNotice { transfer: new.transfer, kind: ParkedKind::Snapshot { index: 7 }, size: new.size };
    let chunks: Vec<_> = serving.map(|c| c.expect("chunk")).collect();
    assert_eq!(chunks.len(), 3);
    let got = reassemble_all(notice, chunks).expect("reassembles");
    assert_eq!(got, data(2 * CHUNK_BYTES + 1));
    assert_eq!(outbox.parked_for(peer), vec![message], "served, and the repeat dropped with it");
    assert!(outbox.serve(peer, repeat.transfer, now).is_none());

    let served: Vec<_> = outbox.serve(peer, message.transfer, now).expect("parked").collect();
    assert_eq!(served.len(), 1);
    assert!(outbox.parked_for(peer).is_empty());
}

#[test]
fn a_parked_message_expires_on_the_callers_clock() {
    let outbox = Outbox::new();
    let parked_at = Instant::now();
    let (a, b) = (NodeId(2), NodeId(3));
    let old = outbox.park(a, ParkedKind::Message, mem(data(3)), parked_at);
    let expired = parked_at + PARKED_TTL;
    assert!(outbox.serve(a, old.transfer, expired - Duration::from_millis(1)).is_some(), "live until its TTL");
    assert!(outbox.serve(a, old.transfer, expired).is_none(), "never served once expired");
    assert_eq!(outbox.parked_for(a), vec![old], "held until a sweep or a park");

    // Parking for another peer frees it.
    let other = outbox.park(b, ParkedKind::Snapshot { index: 4 }, mem(data(5)), expired);
    assert!(outbox.parked_for(a).is_empty());
    assert_eq!(outbox.parked_for(b), vec![other]);

    // A sweep before the TTL keeps it; one after frees it.
    outbox.sweep(expired + PARKED_TTL / 2);
    assert_eq!(outbox.parked_for(b), vec![other]);
    outbox.sweep(expired + PARKED_TTL);
    assert!(outbox.parked_for(b).is_empty());
}

#[test]
fn the_inbox_pulls_one_transfer_per_peer_at_a_time() {
    let inbox = Inbox::default();
    let (a, b) = (NodeId(1), NodeId(2));
    let first = snapshot_notice(10, 5, 1);
    assert_eq!(inbox.offer(a, first), Some(first));
    assert!(inbox.pulling_snapshot(a) && !inbox.pulling_snapshot(b));
    // Another peer is independent.
    let other = snapshot_notice(3, 5, 1);
    assert_eq!(inbox.offer(b, other), Some(other));
    // Behind the pull: the newest of each kind waits.
    assert_eq!(inbox.offer(a, snapshot_notice(11, 6, 1)), None);
    assert_eq!(inbox.offer(a, snapshot_notice(12, 7, 1)), None);
    let message = ParkedNotice { transfer: 13, kind: ParkedKind::Message, size: 1 };
    assert_eq!(inbox.offer(a, message), None);
    // The first pull failed: the waiting message goes next, then the waiting snapshot.
    assert_eq!(inbox.finish(a, false), Some(message));
    assert!(!inbox.pulling_snapshot(a));
    assert_eq!(inbox.finish(a, true), Some(snapshot_notice(12, 7, 1)));
    assert_eq!(inbox.finish(a, true), None);
    // A delivered snapshot drops the one waiting: it answered a repeated Fetch.
    assert_eq!(inbox.offer(a, snapshot_notice(14, 8, 1)), Some(snapshot_notice(14, 8, 1)));
    assert_eq!(inbox.offer(a, snapshot_notice(15, 9, 1)), None);
    assert_eq!(inbox.finish(a, true), None, "a delivered snapshot drops the waiting one");
    // A failed snapshot pull lets the waiting one go.
    assert_eq!(inbox.offer(a, snapshot_notice(16, 9, 1)), Some(snapshot_notice(16, 9, 1)));
    assert_eq!(inbox.offer(a, snapshot_notice(17, 10, 1)), None);
    assert_eq!(inbox.finish(a, false), Some(snapshot_notice(17, 10, 1)));
}
