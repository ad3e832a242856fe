//! Segment file names, the listing of a log directory, and directory fsyncs.
use crate::storage::StorageError;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The file name extension of a segment.
const EXTENSION: &str = "seg";

/// The path of segment `seq` in `dir`: the number zero-padded to 20 digits (every `u64`),
/// so that names sort in sequence order in a listing, for operators as for the code.
pub(crate) fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.{EXTENSION}"))
}

/// The sequence numbers of the segments in `dir`, ascending, checked to be consecutive: the
/// log only ever deletes its oldest segments, so a gap means a segment was lost, and the
/// records in it with it. Files that are not segments are left alone (with a warning).
pub(crate) fn list(dir: &Path) -> Result<Vec<u64>, StorageError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| StorageError::backend(format!("cannot list {}", dir.display()), e))?;
    let mut seqs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::backend(format!("cannot list {}", dir.display()), e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(stem) = name.strip_suffix(&format!(".{EXTENSION}")) else {
            tracing::warn!(file = %entry.path().display(), "ignoring a file that is not a log segment");
            continue;
        };
        match stem.parse::<u64>() {
            Ok(seq) if stem.len() == 20 => seqs.push(seq),
            _ => {
                return Err(StorageError::Corrupt {
                    what: format!("log segment {}", entry.path().display()),
                    detail: "the file name is not a 20-digit segment number".into(),
                })
            }
        }
    }
    seqs.sort_unstable();
    for pair in seqs.windows(2) {
        if pair[1] != pair[0] + 1 {
            return Err(StorageError::Corrupt {
                what: format!("log segment {}", segment_path(dir, pair[0] + 1).display()),
                detail: format!("missing between segments {} and {}", pair[0], pair[1]),
            });
        }
    }
    Ok(seqs)
}

/// fsyncs the directory `dir`, making the creation, deletion or renaming of its entries
/// durable (an fdatasync of a new file does not persist its name).
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::backend(format!("cannot fsync the directory {}", dir.display()), e))
}
