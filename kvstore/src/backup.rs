//! Backup files: what `Maintenance.Snapshot` streams, `etcdctl snapshot save` and `kvcli
//! snapshot save` write, and `kvserver restore` reads.
//!
//! A server writes etcd's own format, a bbolt database followed by its SHA-256
//! ([`crate::etcd_snapshot::write_file`]), so that etcd's tools read leasekv's backups and
//! `etcdctl snapshot restore` moves a store back to etcd. [`decode_file`] reads that, any
//! etcd snapshot, and leasekv's older backup format, which this module defines and still
//! reads ([`decode`]).
//!
//! The older layout: the magic line `leasekv snapshot` and a newline (17 bytes), the format
//! (`u32`, little-endian), the store revision (`i64`), the length of the state (`u64`), the
//! state machine snapshot (which carries its own format number: formats 7 and 8), zeros up
//! to a multiple of 512 bytes, and the SHA-256 of everything before it (32 bytes). A file
//! cut short or changed in transit is refused, never restored.

use crate::etcd_snapshot::{self, EtcdSnapshotError};
#[cfg(test)]
use crate::state::StateView;
use crate::state::{SnapshotError, StateMachine};
use crate::types::Revision;
use sha2::{Digest, Sha256};

/// The first bytes of every backup file.
pub const MAGIC: &[u8; 17] = b"leasekv snapshot\n";
/// The layout above; bumped when it changes, so an old binary refuses a newer file.
const FORMAT: u32 = 1;
const HEADER_LEN: usize = MAGIC.len() + 4 + 8 + 8;
/// The SHA-256 that ends the file; `Maintenance.Snapshot` sends it as a message of its own.
pub const HASH_LEN: usize = 32;
/// The content before the hash is a whole number of these (see the module docs).
#[cfg(test)]
const BLOCK: usize = 512;

/// A backup file that cannot be restored, and why.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The file does not start with [`MAGIC`].
    #[error(
        "not a leasekv snapshot (it does not start with \"leasekv snapshot\") nor an etcd snapshot file (a bbolt database, starting with bbolt's meta page)"
    )]
    NotASnapshot,
    /// Written by a newer leasekv.
    #[error("snapshot format {found} is not supported (this leasekv reads format {FORMAT}); restore it with the leasekv version that wrote it")]
    UnsupportedFormat {
        /// The file's format.
        found: u32,
    },
    /// Shorter than its header and the state it announces.
    #[error("snapshot is truncated: {len} bytes, less than its header and state say")]
    Truncated {
        /// The file's length.
        len: usize,
    },
    /// The SHA-256 at the end does not match the content.
    #[error("snapshot is corrupt or incomplete: its SHA-256 does not match its content")]
    HashMismatch,
    /// The content passed the hash but does not decode.
    #[error(transparent)]
    Corrupt(#[from] SnapshotError),
    /// The revision in the header is not the state's.
    #[error("snapshot is inconsistent: its header says revision {header}, its state is at {state}")]
    RevisionMismatch {
        /// The header's revision.
        header: Revision,
        /// The decoded state's revision.
        state: Revision,
    },
}

/// The backup file of `machine` in the older format (format 7 state): no server writes it
/// any more; the reader's tests and golden files do.
#[cfg(test)]
pub(crate) fn encode(machine: &StateMachine) -> Vec<u8> {
    let state = machine.to_snapshot_bytes();
    let content = (HEADER_LEN + state.len()).div_ceil(BLOCK) * BLOCK;
    let mut out = Vec::with_capacity(content + HASH_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&machine.revision().to_le_bytes());
    out.extend_from_slice(&(state.len() as u64).to_le_bytes());
    out.extend_from_slice(&state);
    out.resize(content, 0);
    let hash = Sha256::digest(&out);
    out.extend_from_slice(&hash);
    out
}

/// Writes the backup file of `view` in the older format (format 9 state) to `file` (empty,
/// at its start); returns the file's length. Servers wrote this before they wrote etcd's
/// format; the golden files of it are made with it.
#[cfg(test)]
pub(crate) fn write_file(view: &StateView, file: &mut std::fs::File) -> Result<u64, BackupWriteError> {
    use std::io::{BufWriter, Seek, SeekFrom, Write};
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&FORMAT.to_le_bytes());
    header.extend_from_slice(&view.revision().to_le_bytes());
    header.extend_from_slice(&0u64.to_le_bytes());
    file.write_all(&header)?;
    let state_len = {
        let mut out = BufWriter::with_capacity(1 << 20, &mut *file);
        let len = crate::state::stream::write(view, &mut out)?;
        out.flush()?;
        len
    };
    file.seek(SeekFrom::Start((MAGIC.len() + 12) as u64))?;
    file.write_all(&state_len.to_le_bytes())?;
    let content = (HEADER_LEN as u64 + state_len).div_ceil(BLOCK as u64) * BLOCK as u64;
    crate::etcd_snapshot::append_sha256(file, content)?;
    Ok(content + HASH_LEN as u64)
}

/// Why a backup file of the older format could not be written.
#[cfg(test)]
#[derive(Debug, thiserror::Error)]
pub(crate) enum BackupWriteError {
    /// Writing or reading the file failed.
    #[error("writing the backup file failed: {0}")]
    Io(#[from] std::io::Error),
    /// Reading the state failed.
    #[error(transparent)]
    State(#[from] crate::engine::EngineError),
}

/// Why a backup file of either kind cannot be restored.
#[derive(Debug, thiserror::Error)]
pub enum BackupFileError {
    /// A leasekv backup of the older format (or neither kind of file).
    #[error(transparent)]
    Leasekv(#[from] BackupError),
    /// An etcd snapshot file (a bbolt database), leasekv's current backups included.
    #[error("etcd snapshot file: {0}")]
    Etcd(#[from] EtcdSnapshotError),
}

/// The state a backup file of either kind holds, told apart by its content: a bbolt
/// database (what leasekv writes now, and etcd), or leasekv's older format.
pub fn decode_file(bytes: &[u8]) -> Result<StateMachine, BackupFileError> {
    if !bytes.starts_with(MAGIC) && etcd_snapshot::looks_like_bbolt(bytes) {
        return Ok(etcd_snapshot::decode(bytes)?);
    }
    // Not bbolt: the older format's decoder names what it is (or that it is neither).
    Ok(decode(bytes)?)
}

/// The state a backup file of the older format holds, checked: magic, format, hash, then
/// the state itself.
pub fn decode(bytes: &[u8]) -> Result<StateMachine, BackupError> {
    if !bytes.starts_with(MAGIC) {
        return Err(BackupError::NotASnapshot);
    }
    if bytes.len() < HEADER_LEN + HASH_LEN {
        return Err(BackupError::Truncated { len: bytes.len() });
    }
    let format = u32::from_le_bytes(bytes[MAGIC.len()..MAGIC.len() + 4].try_into().expect("4 bytes"));
    if format != FORMAT {
        return Err(BackupError::UnsupportedFormat { found: format });
    }
    let (content, hash) = bytes.split_at(bytes.len() - HASH_LEN);
    if Sha256::digest(content).as_slice() != hash {
        return Err(BackupError::HashMismatch);
    }
    let header = Revision::from_le_bytes(content[MAGIC.len() + 4..MAGIC.len() + 12].try_into().expect("8 bytes"));
    let state_len = u64::from_le_bytes(content[MAGIC.len() + 12..HEADER_LEN].try_into().expect("8 bytes"));
    let state = usize::try_from(state_len)
        .ok()
        .and_then(|len| content.get(HEADER_LEN..HEADER_LEN.checked_add(len)?))
        .ok_or(BackupError::Truncated { len: bytes.len() })?;
    let machine = StateMachine::from_snapshot_bytes(state)?;
    if machine.revision() != header {
        return Err(BackupError::RevisionMismatch { header, state: machine.revision() });
    }
    Ok(machine)
}

#[cfg(test)]
mod stream_tests {
    use super::*;
    use crate::command::{Command, PutRequest};

    /// A file written from a view, at the view's revision while the state moved on, decodes
    /// to the state as it was.
    #[test]
    fn a_backup_written_from_a_view_restores_the_state_it_saw() {
        let mut machine = StateMachine::new();
        for i in 0..300 {
            let put = PutRequest { key: format!("k{i}").into(), value: vec![b'v'; i], lease: 0, prev_kv: false };
            machine.apply(&Command::Put(put));
        }
        machine.flush().unwrap();
        let expected = machine.hash_kv(0).unwrap();
        let view = machine.view().unwrap();
        machine.apply(&Command::Put(PutRequest { key: "k1".into(), value: "later".into(), lease: 0, prev_kv: false }));
        machine.flush().unwrap();
        let mut file = tempfile::tempfile().unwrap();
        let len = write_file(&view, &mut file).unwrap();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).unwrap();
        assert_eq!(bytes.len() as u64, len);
        assert_eq!((bytes.len() - HASH_LEN) % BLOCK, 0);
        let restored = decode(&bytes).unwrap();
        assert_eq!(restored.hash_kv(0).unwrap(), expected);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, PutRequest};
    use crate::types::NO_LEASE;

    fn store() -> StateMachine {
        let mut machine = StateMachine::new();
        for i in 0..10u8 {
            let put = PutRequest { key: vec![b'k', i], value: vec![i; 100], lease: NO_LEASE, prev_kv: false };
            machine.apply(&Command::Put(put));
        }
        machine
    }

    #[test]
    fn a_backup_restores_the_same_state() {
        let machine = store();
        let restored = decode(&encode(&machine)).unwrap();
        assert_eq!(restored.revision(), machine.revision());
        assert_eq!(restored.digest(), machine.digest());
        assert_eq!(restored.hash_kv(0).unwrap(), machine.hash_kv(0).unwrap());
    }

    #[test]
    fn a_backup_is_as_long_as_etcdctl_expects() {
        for machine in [StateMachine::new(), store()] {
            assert_eq!(encode(&machine).len() % BLOCK, HASH_LEN);
        }
    }

    #[test]
    fn every_damaged_backup_is_refused() {
        let bytes = encode(&store());
        assert!(matches!(decode(b"\x00\x00\x00\x00bbolt"), Err(BackupError::NotASnapshot)));
        assert!(matches!(decode(&bytes[..20]), Err(BackupError::Truncated { .. })));
        assert!(matches!(decode(&bytes[..bytes.len() - 1]), Err(BackupError::HashMismatch)));
        for at in [MAGIC.len() + 5, HEADER_LEN + 3, bytes.len() / 2, bytes.len() - 1] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x10;
            assert!(matches!(decode(&flipped), Err(BackupError::HashMismatch)), "byte {at}");
        }
        let mut newer = bytes.clone();
        newer[MAGIC.len()] = 9;
        assert!(matches!(decode(&newer), Err(BackupError::UnsupportedFormat { found: 9 })));
    }
}
