//! `snapshot save` and `snapshot restore`: backups of a cluster's state.

use super::output::{self, OutputFormat};
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use leasekv::client::Client;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `kvcli snapshot ...`.
#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Save a snapshot of the answering member's state to FILE (checked before it is kept).
    Save(SaveArgs),
    /// Build a new member's data directory from a snapshot file (no server needed).
    Restore(RestoreArgs),
    /// Check a snapshot file and show its hash, revision, keys and size, as `etcdctl
    /// snapshot status` does.
    Status(StatusArgs),
}

/// `snapshot status FILE`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// A snapshot file written by `snapshot save` (or `etcdctl snapshot save` against leasekv).
    pub file: PathBuf,
}

/// `snapshot save FILE`.
#[derive(Debug, Args)]
pub struct SaveArgs {
    /// Where to write the snapshot; written to FILE.part first, renamed when complete.
    pub file: PathBuf,
}

/// `snapshot restore FILE --data-dir DIR`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// A snapshot file written by `snapshot save` (or `etcdctl snapshot save` against leasekv).
    pub file: PathBuf,
    /// The new member's data directory: must not exist or be empty. Run once per member of
    /// the new cluster, each with its own directory.
    #[arg(long)]
    pub data_dir: PathBuf,
}

/// Runs `snapshot save`.
pub async fn save(client: &Client, args: SaveArgs) -> Result<()> {
    let bytes = client.snapshot().await?;
    let state = leasekv::kvstore::backup::decode_file(&bytes).context("the snapshot received does not check out")?;
    write_durably(&args.file, &bytes)?;
    println!(
        "Snapshot saved at {} (revision {}, {} keys, {} leases, {} bytes)",
        args.file.display(),
        state.revision(),
        state.key_count(),
        state.lease_count(),
        bytes.len()
    );
    Ok(())
}

/// Runs `snapshot restore`.
pub fn restore(args: RestoreArgs) -> Result<()> {
    let restored = leasekv::server::restore::restore(&args.file, &args.data_dir)?;
    println!(
        "Restored revision {} ({} keys, {} leases) into {}",
        restored.revision,
        restored.keys,
        restored.leases,
        args.data_dir.display()
    );
    Ok(())
}

/// Runs `snapshot status`: checks the file as a restore would (its SHA-256 and its state)
/// and prints etcdctl's four fields. For an etcd snapshot file (what leasekv writes now)
/// they are computed as etcdctl computes them, so both tools print the same: HASH is the
/// CRC-32C of the database's records, REVISION the last change's, TOTAL KEYS counts every
/// record of every bucket, TOTAL SIZE is the database's. For a backup of leasekv's older
/// format, HASH is its HashKV at its revision and TOTAL KEYS counts live keys.
pub fn status(format: OutputFormat, args: StatusArgs) -> Result<()> {
    let bytes =
        std::fs::read(&args.file).with_context(|| format!("cannot read snapshot file {}", args.file.display()))?;
    let unusable = || format!("snapshot file {} cannot be used", args.file.display());
    let state = leasekv::kvstore::backup::decode_file(&bytes).with_context(unusable)?;
    let shown = if leasekv::kvstore::etcd_snapshot::looks_like_bbolt(&bytes) {
        let status = leasekv::kvstore::etcd_snapshot::status(&bytes).with_context(unusable)?;
        let keys = usize::try_from(status.total_keys).unwrap_or(usize::MAX);
        let size = usize::try_from(status.total_size).unwrap_or(usize::MAX);
        output::snapshot_status(format, status.hash, status.revision, keys, size)
    } else {
        let hash = state.hash_kv(0).context("cannot hash the snapshot's state")?;
        output::snapshot_status(format, hash.hash, state.revision(), state.key_count(), bytes.len())
    };
    print!("{shown}");
    Ok(())
}

/// Writes `bytes` to `path.part`, syncs it, and renames it to `path`, so that `path` is
/// either absent or complete (etcdctl does the same).
fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut part = path.as_os_str().to_owned();
    part.push(".part");
    let part = PathBuf::from(part);
    let mut file = std::fs::File::create(&part).with_context(|| format!("cannot create {}", part.display()))?;
    file.write_all(bytes).and_then(|()| file.sync_all()).with_context(|| format!("cannot write {}", part.display()))?;
    std::fs::rename(&part, path).with_context(|| format!("cannot rename {} to {}", part.display(), path.display()))?;
    Ok(())
}
