//! The files a [`super::ValueLog`] appends long values to: on disk for a node
//! ([`DiskValueFiles`]), in memory with crash semantics for the simulator and the tests
//! ([`MemoryValueFiles`]).
//!
//! A file is named by a number and only ever appended to, read, synced and removed whole;
//! the value log decides what goes where and when a file may go.

use super::EngineError;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Numbered append-only files, shared by the writer and the readers of a value log.
pub trait ValueFiles: Send + Sync + 'static {
    /// The numbers of the files present, in any order.
    fn list(&self) -> Result<Vec<u64>, EngineError>;

    /// The length of file `id` (0 if it does not exist).
    fn len(&self, id: u64) -> Result<u64, EngineError>;

    /// Writes `bytes` at `offset` of file `id`, creating the file if it does not exist (its
    /// name durable before this returns, so that a later sync of its data is enough).
    fn write_at(&self, id: u64, offset: u64, bytes: &[u8]) -> Result<(), EngineError>;

    /// `len` bytes of file `id` from `offset`.
    fn read_at(&self, id: u64, offset: u64, len: usize) -> Result<Vec<u8>, EngineError>;

    /// Makes what was written to file `id` durable.
    fn sync(&self, id: u64) -> Result<(), EngineError>;

    /// Deletes file `id`.
    fn remove(&self, id: u64) -> Result<(), EngineError>;

    /// Bytes all files take, from a listing of them (tests and tools; the value log keeps
    /// its own count).
    fn total_bytes(&self) -> u64;
}

/// The file name suffix of a value file: `<id as 16 hex digits>.values`.
const SUFFIX: &str = ".values";
/// Open handles kept for reads and appends: a 10M-key store has several hundred files,
/// and a node must stay well inside the common default limit of 1,024 descriptors.
const HANDLES_KEPT: usize = 64;

/// Value files in a directory of their own.
#[derive(Debug)]
pub struct DiskValueFiles {
    dir: PathBuf,
    /// Open files, most recently used last; a reader holds its `Arc` while it reads, so a
    /// handle dropped from here stays valid for it.
    handles: Mutex<Vec<(u64, Arc<File>)>>,
}

impl DiskValueFiles {
    /// The files in `dir`, created if absent.
    pub fn open(dir: &Path) -> Result<Self, EngineError> {
        std::fs::create_dir_all(dir).map_err(|e| EngineError::io(format!("creating {}", dir.display()), e))?;
        Ok(DiskValueFiles { dir: dir.to_path_buf(), handles: Mutex::new(Vec::new()) })
    }

    fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:016x}{SUFFIX}"))
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(u64, Arc<File>)>> {
        self.handles.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The open handle of file `id`, opening it (and creating it, if `create`) if needed.
    fn handle(&self, id: u64, create: bool) -> Result<Arc<File>, EngineError> {
        let mut handles = self.lock();
        if let Some(at) = handles.iter().position(|(h, _)| *h == id) {
            let entry = handles.remove(at);
            let file = Arc::clone(&entry.1);
            handles.push(entry);
            return Ok(file);
        }
        let path = self.path(id);
        let existed = path.exists();
        // Always writable: a handle a reader opened may be the one the next append finds.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .open(&path)
            .map_err(|e| EngineError::io(format!("opening value file {}", path.display()), e))?;
        if create && !existed {
            // The new name must survive a power loss before any record points into it.
            File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| EngineError::io(format!("syncing the directory {}", self.dir.display()), e))?;
        }
        let file = Arc::new(file);
        if handles.len() >= HANDLES_KEPT {
            handles.remove(0);
        }
        handles.push((id, Arc::clone(&file)));
        Ok(file)
    }
}

impl ValueFiles for DiskValueFiles {
    fn list(&self) -> Result<Vec<u64>, EngineError> {
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| EngineError::io(format!("listing {}", self.dir.display()), e))?;
        let mut ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| EngineError::io(format!("listing {}", self.dir.display()), e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_suffix(SUFFIX).and_then(|hex| u64::from_str_radix(hex, 16).ok()) {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    fn len(&self, id: u64) -> Result<u64, EngineError> {
        match std::fs::metadata(self.path(id)) {
            Ok(meta) => Ok(meta.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(EngineError::io(format!("reading the length of {}", self.path(id).display()), e)),
        }
    }

    fn write_at(&self, id: u64, offset: u64, bytes: &[u8]) -> Result<(), EngineError> {
        let file = self.handle(id, true)?;
        file.write_all_at(bytes, offset)
            .map_err(|e| EngineError::io(format!("appending to {}", self.path(id).display()), e))
    }

    fn read_at(&self, id: u64, offset: u64, len: usize) -> Result<Vec<u8>, EngineError> {
        let file = self.handle(id, false)?;
        let mut buf = vec![0; len];
        file.read_exact_at(&mut buf, offset).map_err(|e| {
            EngineError::io(format!("reading {len} bytes at {offset} of {}", self.path(id).display()), e)
        })?;
        Ok(buf)
    }

    fn sync(&self, id: u64) -> Result<(), EngineError> {
        let file = self.handle(id, false)?;
        file.sync_data().map_err(|e| EngineError::io(format!("syncing {}", self.path(id).display()), e))
    }

    fn remove(&self, id: u64) -> Result<(), EngineError> {
        self.lock().retain(|(h, _)| *h != id);
        match std::fs::remove_file(self.path(id)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(EngineError::io(format!("deleting {}", self.path(id).display()), e)),
        }
    }

    fn total_bytes(&self) -> u64 {
        let Ok(ids) = self.list() else { return 0 };
        ids.into_iter().filter_map(|id| self.len(id).ok()).sum()
    }
}

/// Value files in memory that remember what is durable: a crash
/// ([`MemoryValueFiles::crash`]) cuts every file back to what its last sync made durable.
/// A file's creation and removal are durable at once (the disk files sync the directory on
/// creation; a removal that a power loss undoes leaves a file no record names, which the
/// value log deletes when it opens).
#[derive(Debug, Default, Clone)]
pub struct MemoryValueFiles {
    files: Arc<Mutex<BTreeMap<u64, MemoryFile>>>,
}

#[derive(Debug, Default, Clone)]
struct MemoryFile {
    /// What readers see.
    data: Vec<u8>,
    /// How much of it the last sync made durable.
    durable: usize,
}

impl MemoryValueFiles {
    /// No files.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, MemoryFile>> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy with files of its own (the simulator forks node states).
    pub fn fork(&self) -> Self {
        MemoryValueFiles { files: Arc::new(Mutex::new(self.lock().clone())) }
    }

    /// A power loss: every file loses what was written to it since its last sync.
    pub fn crash(&self) {
        for file in self.lock().values_mut() {
            file.data.truncate(file.durable);
        }
    }
}

impl ValueFiles for MemoryValueFiles {
    fn list(&self) -> Result<Vec<u64>, EngineError> {
        Ok(self.lock().keys().copied().collect())
    }

    fn len(&self, id: u64) -> Result<u64, EngineError> {
        Ok(self.lock().get(&id).map_or(0, |f| f.data.len() as u64))
    }

    fn write_at(&self, id: u64, offset: u64, bytes: &[u8]) -> Result<(), EngineError> {
        let mut files = self.lock();
        let file = files.entry(id).or_default();
        // As `pwrite`: bytes past the end extend the file, others are overwritten.
        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = offset.saturating_add(bytes.len());
        if file.data.len() < end {
            file.data.resize(end, 0);
        }
        file.data[offset..end].copy_from_slice(bytes);
        file.durable = file.durable.min(offset);
        Ok(())
    }

    fn read_at(&self, id: u64, offset: u64, len: usize) -> Result<Vec<u8>, EngineError> {
        let files = self.lock();
        let missing = || EngineError::Corrupt {
            what: format!("value file {id}"),
            detail: format!("{len} bytes at {offset} are past its end or it does not exist"),
        };
        let file = files.get(&id).ok_or_else(missing)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start.checked_add(len).ok_or_else(missing)?;
        file.data.get(start..end).map(<[u8]>::to_vec).ok_or_else(missing)
    }

    fn sync(&self, id: u64) -> Result<(), EngineError> {
        if let Some(file) = self.lock().get_mut(&id) {
            file.durable = file.data.len();
        }
        Ok(())
    }

    fn remove(&self, id: u64) -> Result<(), EngineError> {
        self.lock().remove(&id);
        Ok(())
    }

    fn total_bytes(&self) -> u64 {
        self.lock().values().map(|f| f.data.len() as u64).sum()
    }
}
