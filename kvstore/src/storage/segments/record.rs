//! The bytes of a segment: its header, and the framed records after it.
//!
//! A segment file is a [`HEADER_LEN`]-byte header followed by records, each framed as
//! `[payload length: u32 LE][CRC-32: u32 LE][payload]`. The CRC covers the length bytes and
//! the payload: a zero-filled region (a file extended by a crash before its data reached the
//! disk) then never reads as a run of valid empty records, since the CRC of four zero bytes
//! is not zero. The payload is the postcard encoding of a [`Record`]; which records and how
//! they are encoded is fixed by the header's format version, so a later release can change
//! the encoding by writing a new version into its new segments while still reading the old.
use crate::log::{AcceptedSlot, LogBallot, Slot};
use serde::{Deserialize, Serialize};

/// The first bytes of every segment file.
const MAGIC: [u8; 8] = *b"leasekvL";
/// The only record format this release writes and reads.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Magic, format version (u32 LE), segment sequence number (u64 LE), CRC-32 of those.
pub(crate) const HEADER_LEN: usize = 8 + 4 + 8 + 4;
/// Length and CRC in front of every payload.
pub(crate) const FRAME_LEN: usize = 4 + 4;
/// The longest payload accepted (a slot holds at most about 2.5 MiB: a 1 MiB batch plus one
/// 1.5 MiB value). A longer length read from disk is garbage, not a reason to allocate it.
pub(crate) const MAX_PAYLOAD: usize = 256 << 20;

/// One record of the log, as read back. The variants' order is their encoding (postcard
/// writes the index): new kinds of record go at the end, or come with a new format version.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) enum Record {
    /// The promised ballot.
    Promise(LogBallot),
    /// An accepted (or chosen) slot.
    Slot(Slot, AcceptedSlot),
    /// The commit index.
    Commit(Slot),
    /// Every slot at or below this one, written before this record, is removed.
    RemovedThrough(Slot),
}

/// A [`Record`] to write, borrowing the slot's value (which may be megabytes) instead of
/// cloning it. Same variants in the same order, so the same encoding.
#[derive(Debug, Serialize)]
pub(crate) enum RecordRef<'a> {
    /// See [`Record::Promise`].
    Promise(LogBallot),
    /// See [`Record::Slot`].
    Slot(Slot, &'a AcceptedSlot),
    /// See [`Record::Commit`].
    Commit(Slot),
    /// See [`Record::RemovedThrough`].
    RemovedThrough(Slot),
}

/// The header of segment `seq`.
pub(crate) fn header(seq: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&h[..20]);
    h[20..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// What the first bytes of a segment file say.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeaderCheck {
    /// A header of this release for segment `seq`.
    Valid,
    /// Shorter than a header, or all zeros: the file was created but its first write never
    /// reached the disk (a crash right after a roll).
    Torn,
    /// Anything else, with why.
    Bad(String),
}

/// Checks the header at the start of `bytes`, which must name segment `seq`.
pub(crate) fn check_header(bytes: &[u8], seq: u64) -> HeaderCheck {
    let Some(h) = bytes.get(..HEADER_LEN) else { return HeaderCheck::Torn };
    if h.iter().all(|&b| b == 0) {
        return HeaderCheck::Torn;
    }
    if h[..8] != MAGIC {
        return HeaderCheck::Bad(format!("not a leasekv log segment (magic {:02x?})", &h[..8]));
    }
    let stored = u32::from_le_bytes([h[20], h[21], h[22], h[23]]);
    let computed = crc32fast::hash(&h[..20]);
    if stored != computed {
        return HeaderCheck::Bad(format!(
            "header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    if version != FORMAT_VERSION {
        return HeaderCheck::Bad(format!("unknown format version {version} (this release reads {FORMAT_VERSION})"));
    }
    let mut seq_bytes = [0u8; 8];
    seq_bytes.copy_from_slice(&h[12..20]);
    let named = u64::from_le_bytes(seq_bytes);
    if named != seq {
        return HeaderCheck::Bad(format!("header names segment {named}, the file name segment {seq}"));
    }
    HeaderCheck::Valid
}

/// Appends `record`, framed, to `out`. On failure `out` is left as it was: a half-framed
/// record in the buffer would be written out as garbage by the next sync.
pub(crate) fn append(out: &mut Vec<u8>, record: &RecordRef<'_>) -> Result<(), String> {
    let start = out.len();
    let result = encode_at(out, start, record);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn encode_at(out: &mut Vec<u8>, start: usize, record: &RecordRef<'_>) -> Result<(), String> {
    // Sized up front: a slot of a few MiB would otherwise be copied through every doubling
    // of a buffer that already holds other records.
    let size = postcard::experimental::serialized_size(record).map_err(|e| e.to_string())?;
    if size == 0 || size > MAX_PAYLOAD {
        return Err(format!("a record of {size} bytes is outside 1..={MAX_PAYLOAD}"));
    }
    out.reserve(FRAME_LEN + size);
    out.extend_from_slice(&[0; FRAME_LEN]);
    let buf = postcard::to_extend(record, std::mem::take(out)).map_err(|e| e.to_string())?;
    *out = buf;
    let payload_len = out.len() - start - FRAME_LEN;
    let len_bytes = (payload_len as u32).to_le_bytes();
    out[start..start + 4].copy_from_slice(&len_bytes);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len_bytes);
    crc.update(&out[start + FRAME_LEN..]);
    out[start + 4..start + FRAME_LEN].copy_from_slice(&crc.finalize().to_le_bytes());
    Ok(())
}

/// Why the bytes at some offset are not a record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// Too short for its frame or for the length it claims, an impossible length, or a CRC
    /// mismatch: what a write cut short by a crash leaves (or damage; at the tail of the last
    /// segment the two cannot be told apart).
    Torn(String),
    /// The CRC matches but the payload does not decode: not something this release wrote.
    Undecodable(String),
}

/// Reads the record at the start of `bytes`: the record and its framed length.
pub(crate) fn read(bytes: &[u8]) -> Result<(Record, usize), FrameError> {
    let Some(frame) = bytes.get(..FRAME_LEN) else {
        return Err(FrameError::Torn(format!("{} bytes left, shorter than a record's frame", bytes.len())));
    };
    let len_bytes = [frame[0], frame[1], frame[2], frame[3]];
    let len = u32::from_le_bytes(len_bytes) as usize;
    let stored = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
    if len == 0 || len > MAX_PAYLOAD {
        return Err(FrameError::Torn(format!("impossible record length {len}")));
    }
    let Some(payload) = bytes.get(FRAME_LEN..FRAME_LEN + len) else {
        return Err(FrameError::Torn(format!("record of {len} bytes, only {} left", bytes.len() - FRAME_LEN)));
    };
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len_bytes);
    crc.update(payload);
    let computed = crc.finalize();
    if stored != computed {
        return Err(FrameError::Torn(format!("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")));
    }
    // Bytes after the record, inside a frame whose length and checksum hold, are fields a
    // newer release appended to it: skipped, so that such a release can be rolled back.
    let (record, _appended) =
        postcard::take_from_bytes::<Record>(payload).map_err(|e| FrameError::Undecodable(e.to_string()))?;
    Ok((record, FRAME_LEN + len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::Entry;
    use leasekv_lease::NodeId;

    fn slot() -> AcceptedSlot {
        AcceptedSlot { ballot: LogBallot { round: 3, node: NodeId(2) }, entry: Entry::default(), chosen: true }
    }

    #[test]
    fn records_round_trip_and_borrowed_encodes_as_owned() {
        let value = slot();
        let cases = [
            (
                RecordRef::Promise(LogBallot { round: 9, node: NodeId(1) }),
                Record::Promise(LogBallot { round: 9, node: NodeId(1) }),
            ),
            (RecordRef::Slot(7, &value), Record::Slot(7, value.clone())),
            (RecordRef::Commit(u64::MAX), Record::Commit(u64::MAX)),
            (RecordRef::RemovedThrough(0), Record::RemovedThrough(0)),
        ];
        let mut buf = Vec::new();
        for (r, _) in &cases {
            append(&mut buf, r).unwrap();
        }
        let mut at = 0;
        for (_, expected) in cases {
            let (record, n) = read(&buf[at..]).unwrap();
            assert_eq!(record, expected);
            at += n;
        }
        assert_eq!(at, buf.len());
    }

    #[test]
    fn zeros_are_not_records_and_every_flip_is_caught() {
        assert!(matches!(read(&[0; 64]), Err(FrameError::Torn(_))));
        let mut buf = Vec::new();
        append(&mut buf, &RecordRef::Slot(5, &slot())).unwrap();
        for i in 0..buf.len() {
            for bit in 0..8 {
                let mut bad = buf.clone();
                bad[i] ^= 1 << bit;
                assert!(read(&bad).is_err(), "flip of bit {bit} of byte {i} read as a record");
            }
        }
        for cut in 0..buf.len() {
            assert!(matches!(read(&buf[..cut]), Err(FrameError::Torn(_))), "cut at {cut}");
        }
    }

    #[test]
    fn headers_are_checked() {
        let h = header(42);
        assert_eq!(check_header(&h, 42), HeaderCheck::Valid);
        assert!(matches!(check_header(&h, 41), HeaderCheck::Bad(_)));
        assert_eq!(check_header(&h[..10], 42), HeaderCheck::Torn);
        assert_eq!(check_header(&[0; HEADER_LEN], 42), HeaderCheck::Torn);
        for i in 0..HEADER_LEN {
            let mut bad = h;
            bad[i] ^= 0x10;
            assert!(matches!(check_header(&bad, 42), HeaderCheck::Bad(_)), "flip at {i}");
        }
    }
}
