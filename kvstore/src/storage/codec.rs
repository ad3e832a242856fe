//! The encoding of every record [`super::SledStorage`] keeps in sled (the snapshot, the
//! restart epoch, and the log records of data directories written before the segment log;
//! the segment log frames its own records, see `segments/record.rs`).
//!
//! A record is `[FORMAT_VERSION][postcard payload][crc32 of the two, little-endian]`.
//! sled checksums its own log, so the CRC is not there against bit rot on the device: it is
//! there so that a record that is *not what we wrote* (written by another version, by a tool,
//! or by a bug) is reported as [`StorageError::Corrupt`] instead of being decoded into a
//! plausible but wrong value. postcard alone would accept many garbage byte strings (a varint
//! decodes from almost anything), and a replica that recovers a wrong promise or slot breaks
//! Paxos silently. Bytes after the value inside a frame whose checksum holds are skipped:
//! the checksum, not a length check, is what tells damage, and those bytes are a field a
//! newer release appended (see `crate::golden`'s module docs for which records allow it).
use super::StorageError;
use serde::{de::DeserializeOwned, Serialize};

/// Bumped whenever a record's layout changes, so that old data is refused, not misread.
const FORMAT_VERSION: u8 = 1;
/// Bytes around the payload: the version byte and the CRC.
const OVERHEAD: usize = 1 + 4;

/// Encodes `value` as one framed record.
pub(crate) fn encode<T: Serialize>(what: &str, value: &T) -> Result<Vec<u8>, StorageError> {
    let failed = |e: postcard::Error| StorageError::backend(format!("encoding {what} failed"), e);
    // Sized up front: a slot of 256 commands or a snapshot of the whole state would
    // otherwise be copied through every doubling of the vector.
    let size = postcard::experimental::serialized_size(value).map_err(failed)?;
    let mut out = Vec::with_capacity(OVERHEAD + size);
    out.push(FORMAT_VERSION);
    out = postcard::to_extend(value, out).map_err(failed)?;
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Decodes a record written by [`encode`]; `what` names it in the error.
pub(crate) fn decode<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, StorageError> {
    let corrupt = |detail: String| StorageError::Corrupt { what: what.to_string(), detail };
    if bytes.len() < OVERHEAD {
        return Err(corrupt(format!("record is {} bytes, shorter than its {OVERHEAD}-byte frame", bytes.len())));
    }
    let (body, crc_bytes) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
    let computed = crc32(body);
    if stored != computed {
        return Err(corrupt(format!("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")));
    }
    if body[0] != FORMAT_VERSION {
        return Err(corrupt(format!("unknown format version {} (expected {FORMAT_VERSION})", body[0])));
    }
    // Bytes after the value, inside a frame whose checksum holds, are fields a newer release
    // appended to it: skipped, so that such a release can be rolled back.
    let (value, _appended) = postcard::take_from_bytes::<T>(&body[1..]).map_err(|e| corrupt(e.to_string()))?;
    Ok(value)
}

/// The key of `slot` in the slots tree of the release before the segment log (see
/// [`super::upgrade`]): big-endian, so that sled's byte order was numeric order. Only the
/// tests write that tree now, to make data directories of that release.
#[cfg(test)]
pub(crate) fn slot_key(slot: u64) -> [u8; 8] {
    slot.to_be_bytes()
}

/// The slot of a key in the old slots tree (a big-endian `u64`).
pub(crate) fn slot_from_key(key: &[u8]) -> Result<u64, StorageError> {
    let arr: [u8; 8] = key.try_into().map_err(|_| StorageError::Corrupt {
        what: format!("slot key {key:02x?}"),
        detail: format!("slot keys are 8 bytes, this one is {}", key.len()),
    })?;
    Ok(u64::from_be_bytes(arr))
}

/// CRC-32 (IEEE 802.3, the zlib/PNG one). crc32fast (already in the build through sled)
/// uses the CPU's carry-less multiply: a byte-at-a-time table ran at well under 1 GB/s, and
/// every slot and every snapshot passes through here.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_reference_check_value() {
        // The standard check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn round_trip_and_every_single_byte_flip_is_caught() {
        let rec = encode("test", &(42u64, vec![1u8, 2, 3])).unwrap();
        assert_eq!(decode::<(u64, Vec<u8>)>("test", &rec).unwrap(), (42, vec![1, 2, 3]));
        for i in 0..rec.len() {
            let mut bad = rec.clone();
            bad[i] ^= 0x01;
            assert!(matches!(decode::<(u64, Vec<u8>)>("test", &bad), Err(StorageError::Corrupt { .. })), "flip at {i}");
        }
        assert!(matches!(decode::<u64>("short", &[1, 2]), Err(StorageError::Corrupt { .. })));
    }

    #[test]
    fn slot_keys_sort_numerically() {
        assert!(slot_key(255) < slot_key(256));
        assert_eq!(slot_from_key(&slot_key(u64::MAX)).unwrap(), u64::MAX);
        assert!(slot_from_key(&[1, 2, 3]).is_err());
    }
}
