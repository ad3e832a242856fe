//! What `etcdctl snapshot status` shows of an etcd snapshot file, computed as etcd 3.4–3.5
//! compute it, so that `kvcli snapshot status` and etcdctl agree on a file: the CRC-32C
//! (Castagnoli) of every bucket's name followed by its keys and values, in bbolt's order;
//! the main revision of the last record of the `key` bucket; the number of records in all
//! buckets; the database's size (its pages in use).

use super::bbolt::Db;
use super::EtcdSnapshotError;

/// `etcdctl snapshot status`'s four figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotStatus {
    /// CRC-32C over the buckets' names, keys and values.
    pub hash: u32,
    /// The main revision of the `key` bucket's last record (0 when it has none).
    pub revision: i64,
    /// Records in all buckets.
    pub total_keys: u64,
    /// The database's size in bytes (without the stream's hash).
    pub total_size: u64,
}

/// The status of an etcd snapshot file, its SHA-256 checked when it carries one.
pub fn status(bytes: &[u8]) -> Result<SnapshotStatus, EtcdSnapshotError> {
    let opened = Db::open(super::database(bytes)?)?;
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    let mut digest = crc.digest();
    let (mut revision, mut total_keys) = (0, 0u64);
    for (name, pairs) in opened.buckets()? {
        digest.update(name);
        for (key, value) in &pairs {
            digest.update(key);
            digest.update(value);
            total_keys += 1;
        }
        if name == b"key" {
            if let Some(last) = pairs.last().and_then(|(key, _)| key.get(..8)) {
                revision = i64::from_be_bytes(last.try_into().unwrap_or_default());
            }
        }
    }
    Ok(SnapshotStatus { hash: digest.finalize(), revision, total_keys, total_size: opened.size() })
}
