//! What leasekv keeps in sled: records framed by `storage/codec.rs` (format byte, postcard,
//! CRC-32), and a record too long for one sled value stored in pieces
//! (`storage/pieces.rs`).

use super::log::sample_slot;
use super::{check, pack, unpack, Entries};
use crate::log::{AcceptedSlot, LogBallot, Slot};
use crate::storage::{codec, pieces};
use leasekv_lease::NodeId;
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::Debug;

/// Checks a value framed by [`codec`]: encoded with `codec::encode` as the storage writes
/// it, decoded with `codec::decode` as it reads it back.
fn check_codec<T: Serialize + DeserializeOwned + PartialEq + Debug>(kind: &str, sample: &T) {
    let encoded = codec::encode(kind, sample).unwrap();
    check(&format!("codec_{kind}.bin"), &encoded, sample, |bytes| {
        codec::decode(kind, bytes).map_err(|e| e.to_string())
    });
}

/// The restart epoch (`leasekv/meta` `restart_epoch`, a `u32`).
#[test]
fn codec_restart_epoch() {
    check_codec("restart_epoch", &3u32);
}

/// A snapshot kept in sled (`leasekv/snapshot` `snapshot`): its slot and its bytes, written
/// from a borrowed slice and read back as a vector (the same encoding).
#[test]
fn codec_snapshot() {
    let sample: (Slot, Vec<u8>) = (41, b"state machine snapshot bytes".to_vec());
    let encoded = codec::encode("snapshot", &(sample.0, sample.1.as_slice())).unwrap();
    assert_eq!(encoded, codec::encode("snapshot", &sample).unwrap());
    check("codec_snapshot.bin", &encoded, &sample, |bytes| codec::decode("snapshot", bytes).map_err(|e| e.to_string()));
}

/// A snapshot kept as a file (`leasekv/snapshot` `snapshot_file`): its slot and file name.
#[test]
fn codec_snapshot_file() {
    check_codec("snapshot_file", &(41u64, "snapshot-0000000041".to_string()));
}

/// The promised ballot of the release before the segment log (`leasekv/meta` `promised`),
/// still read by the upgrade.
#[test]
fn codec_legacy_promised() {
    check_codec("legacy_promised", &LogBallot { round: 9, node: NodeId(3) });
}

/// The commit index of the release before the segment log (`leasekv/meta` `commit`).
#[test]
fn codec_legacy_commit() {
    check_codec("legacy_commit", &40u64);
}

/// An accepted slot of the release before the segment log (`leasekv/slots`), with every
/// command.
#[test]
fn codec_legacy_slot() {
    check_codec::<AcceptedSlot>("legacy_slot", &sample_slot());
}

/// A newer writer's field appended inside the frame (valid CRC): skipped.
#[test]
fn codec_ignores_trailing_bytes() {
    let mut body = codec::encode("commit index", &40u64).unwrap();
    body.truncate(body.len() - 4);
    body.push(0x01);
    let crc = codec::crc32(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(codec::decode::<u64>("commit index", &body).expect("decodes"), 40);
}

/// The piece length of the sample: small, so that a small record takes several pieces.
const PIECE: usize = 16;

/// A sled tree in a database of its own, in a temporary directory.
fn tree() -> (tempfile::TempDir, sled::Tree) {
    let dir = tempfile::tempdir().unwrap();
    let db = sled::Config::new().path(dir.path()).open().unwrap();
    let tree = db.open_tree("leasekv/snapshot").unwrap();
    (dir, tree)
}

/// Every entry of `tree`, in key order.
fn entries(tree: &sled::Tree) -> Entries {
    tree.iter().map(|entry| entry.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap()).collect()
}

/// A snapshot record longer than a piece, stored as a head and its pieces: the golden file
/// holds every sled entry ([`pack`]); decoding loads them into a tree and reassembles the
/// record with `pieces::get`.
#[test]
fn pieces_of_a_snapshot_record() {
    let record = codec::encode("snapshot", &(41u64, b"a snapshot longer than one piece".as_slice())).unwrap();
    let (_dir, tree) = tree();
    pieces::insert(&tree, b"snapshot", &record, PIECE).unwrap();
    let encoded = pack(&entries(&tree));
    assert!(entries(&tree).len() > 2, "the sample must take several pieces");
    let decode = |bytes: &[u8]| -> Result<Vec<u8>, String> {
        let (_dir, tree) = self::tree();
        for (key, value) in unpack(bytes)? {
            tree.insert(key, value).map_err(|e| e.to_string())?;
        }
        pieces::get(&tree, b"snapshot").map_err(|e| e.to_string())?.ok_or_else(|| "no record".to_string())
    };
    check("pieces_snapshot.bin", &encoded, &record, decode);
}
