//! Large records stored as pieces small enough that sled keeps them in its log.
//!
//! sled 0.34 logs B-tree pages, and a page whose serialized form is larger than a quarter of
//! a log segment (128 KiB by default) goes to a file of its own under `blobs/`, which sled
//! writes without ever syncing it (not at the write, not in `flush`) and unlinks once a newer
//! version of the page is in the log, before that log is synced. The log record pointing at
//! a blob is made durable by our `fdatasync` of the data file, so after a power loss the log
//! can point at a blob that is empty, short or gone, and sled refuses to open the database
//! ("Read corrupted data"). The chaos harness's `power-loss` fault found it with the state
//! snapshot (hundreds of KiB); large values in log slots do the same, and so does a leaf of
//! sixteen medium ones, since a leaf page holds up to sixteen records before it splits.
//!
//! So no record sled sees is longer than a piece ([`piece_len`]: 1/128 of a segment, 32 KiB
//! with the 4 MiB segments leasekv creates databases with): a longer one is stored as a head
//! under its own key (a [`MARKER`] byte, the number of pieces, the total length) and its
//! pieces under `key ++ MARKER ++ index`, all in one atomic sled batch, so that every page
//! stays far below the blob threshold. A record of at most a piece is stored as itself, as
//! before, so databases written before this change read unchanged (a page that sled had
//! already made a blob stays one until it is rewritten).

use sled::{Batch, IVec, Tree};

/// The largest record sled is given in a database of `segment_size`-byte segments: a leaf
/// page of up to seventeen such records (plus keys and framing) stays under about half of
/// sled's blob threshold, a quarter of a segment.
pub fn piece_len(segment_size: usize) -> usize {
    segment_size / 128
}

/// The first byte of a head, and the separator of a piece key. No record framed by
/// [`super::codec`] starts with it (their first byte is the format version).
pub const MARKER: u8 = 0xFF;

/// Length of a head: marker, piece count (u32 LE), total length (u64 LE).
const HEAD_LEN: usize = 1 + 4 + 8;

/// Why a record could not be read back whole.
#[derive(Debug, thiserror::Error)]
pub enum PieceError {
    /// sled failed.
    #[error(transparent)]
    Sled(#[from] sled::Error),
    /// A piece is missing or the pieces do not add up to the head's length.
    #[error("record in pieces is incomplete: {0}")]
    Incomplete(String),
}

/// The key of piece `index` of the record at `key`.
pub fn piece_key(key: &[u8], index: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 5);
    k.extend_from_slice(key);
    k.push(MARKER);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// Whether `key` is a piece of a record whose own keys are `record_key_len` bytes long
/// (for trees, like the slots, whose keys all have one length).
pub fn is_piece_key(key: &[u8], record_key_len: usize) -> bool {
    key.len() == record_key_len + 5 && key[record_key_len] == MARKER
}

/// How many pieces the record now stored at `key` has (0 when it is stored whole or absent).
fn pieces_of(tree: &Tree, key: &[u8]) -> sled::Result<u32> {
    Ok(match tree.get(key)? {
        Some(head) if head.len() == HEAD_LEN && head[0] == MARKER => {
            u32::from_le_bytes(head[1..5].try_into().expect("4 bytes"))
        }
        _ => 0,
    })
}

/// Stores `record` at `key`, replacing what was there, atomically.
///
/// A record of at most `piece` bytes is one plain insert, as it always was (the hot path:
/// almost every log slot). It leaves the pieces of an earlier, larger record at the same key
/// where they are: the head decides what is read, and range removals take them away.
pub fn insert(tree: &Tree, key: &[u8], record: &[u8], piece: usize) -> sled::Result<()> {
    if record.len() <= piece {
        tree.insert(key, record)?;
        return Ok(());
    }
    let old = pieces_of(tree, key)?;
    let mut batch = Batch::default();
    let count = {
        let count = record.len().div_ceil(piece) as u32;
        let mut head = Vec::with_capacity(HEAD_LEN);
        head.push(MARKER);
        head.extend_from_slice(&count.to_le_bytes());
        head.extend_from_slice(&(record.len() as u64).to_le_bytes());
        batch.insert(key, head);
        for (index, chunk) in record.chunks(piece).enumerate() {
            batch.insert(piece_key(key, index as u32), chunk);
        }
        count
    };
    for index in count..old {
        batch.remove(piece_key(key, index));
    }
    tree.apply_batch(batch)
}

/// Removes the record at `key` and its pieces, atomically.
pub fn remove(tree: &Tree, key: &[u8]) -> sled::Result<()> {
    let old = pieces_of(tree, key)?;
    let mut batch = Batch::default();
    batch.remove(key);
    for index in 0..old {
        batch.remove(piece_key(key, index));
    }
    tree.apply_batch(batch)
}

/// The whole record whose head (or whole value) `stored` was read at `key`.
pub fn assemble(tree: &Tree, key: &[u8], stored: IVec) -> Result<Vec<u8>, PieceError> {
    if stored.len() != HEAD_LEN || stored[0] != MARKER {
        return Ok(stored.to_vec());
    }
    let count = u32::from_le_bytes(stored[1..5].try_into().expect("4 bytes"));
    let total = u64::from_le_bytes(stored[5..13].try_into().expect("8 bytes"));
    let mut record = Vec::with_capacity(usize::try_from(total).unwrap_or(0).min(1 << 30));
    for index in 0..count {
        let piece = tree
            .get(piece_key(key, index))?
            .ok_or_else(|| PieceError::Incomplete(format!("piece {index} of {count} is missing")))?;
        record.extend_from_slice(&piece);
    }
    if record.len() as u64 != total {
        return Err(PieceError::Incomplete(format!("{} bytes in its pieces, {total} in its head", record.len())));
    }
    Ok(record)
}

/// The whole record at `key`, if any.
pub fn get(tree: &Tree, key: &[u8]) -> Result<Option<Vec<u8>>, PieceError> {
    match tree.get(key)? {
        None => Ok(None),
        Some(stored) => assemble(tree, key, stored).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIECE: usize = 4096;

    fn tree() -> (tempfile::TempDir, Tree) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        (dir, tree)
    }

    #[test]
    fn records_of_every_size_read_back_and_shrinking_leaves_no_pieces() {
        let (_dir, tree) = tree();
        for len in [0, 1, PIECE, PIECE + 1, 3 * PIECE, 5 * PIECE + 7, 2 * PIECE, 10] {
            let record: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            insert(&tree, b"k", &record, PIECE).unwrap();
            assert_eq!(get(&tree, b"k").unwrap().unwrap(), record, "{len}");
        }
        // From 5 pieces to 2: the three beyond are removed with the new head.
        insert(&tree, b"k", &vec![1; 5 * PIECE], PIECE).unwrap();
        insert(&tree, b"k", &vec![2; 2 * PIECE], PIECE).unwrap();
        assert_eq!(tree.scan_prefix(b"k\xff").count(), 2);
        assert_eq!(get(&tree, b"k").unwrap().unwrap(), vec![2; 2 * PIECE]);
    }

    #[test]
    fn a_missing_piece_is_reported() {
        let (_dir, tree) = tree();
        insert(&tree, b"k", &vec![7; 2 * PIECE + 1], PIECE).unwrap();
        tree.remove(piece_key(b"k", 1)).unwrap();
        assert!(matches!(get(&tree, b"k"), Err(PieceError::Incomplete(_))));
    }

    #[test]
    fn piece_keys_are_recognised() {
        assert!(is_piece_key(&piece_key(&[0; 8], 3), 8));
        assert!(!is_piece_key(&[0; 8], 8));
        assert!(!is_piece_key(b"bad", 8));
    }
}
