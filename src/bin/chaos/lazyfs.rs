//! A FUSE filesystem that can lose power: every node's data directory is mounted through it
//! (when the `power-loss` fault is on), and a power loss turns every file back into what was
//! made durable by its last `fsync`/`fdatasync`, as a machine's disk would after the power
//! went away. Jepsen's LazyFS does the same; a kill -9 alone cannot, since the page cache
//! keeps whatever the process wrote.
//!
//! It passes every operation through to a backing directory at once, and remembers, per file,
//! the bytes each unsynced write or truncation replaced (an undo log) and the length at the
//! last sync. A sync of the file forgets its undo log; a power loss plays it backwards.
//!
//! The model, stated so that nothing is claimed beyond it: file *data* is volatile until the
//! file is synced; *metadata* (creating, renaming, removing a file or directory) is durable at
//! once, as on a journaling filesystem that orders metadata after nothing. `sync_file_range`
//! never reaches a FUSE filesystem, so it makes nothing durable here, which is true of a real
//! disk too (it neither writes the file's size nor flushes the drive's cache).
//!
//! While the power is off (between [`Disk::power_loss`] and [`Disk::power_on`]) every write
//! is refused: a request the killed process left in the FUSE queue must not land after the
//! loss.

use anyhow::{Context, Result};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenAccMode,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyWrite, Request, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the kernel may cache names and attributes: not at all, since a power loss
/// changes files behind its back.
const TTL: Duration = Duration::ZERO;

/// The writes to one file since its last sync: the file's length then, and for each write
/// or truncation the offset and the bytes it replaced, in order.
struct Unsynced {
    synced_len: u64,
    undo: Vec<(u64, Vec<u8>)>,
}

struct State {
    /// FUSE inode number → path in the backing directory (1 is the backing directory).
    paths: HashMap<u64, PathBuf>,
    inodes: HashMap<PathBuf, u64>,
    next_inode: u64,
    /// Open files by handle: the inode and the backing file.
    handles: HashMap<u64, (u64, Arc<File>)>,
    next_handle: u64,
    /// Unsynced writes by inode.
    unsynced: HashMap<u64, Unsynced>,
    powered: bool,
}

/// The filesystem as the FUSE session sees it.
struct LazyFs {
    state: Arc<Mutex<State>>,
}

impl LazyFs {
    /// Removes `name` in `parent` with `remove` (a file or a directory) and forgets it.
    fn remove(&self, parent: INodeNo, name: &OsStr, remove: fn(&Path) -> std::io::Result<()>, reply: ReplyEmpty) {
        let mut state = self.state();
        let answer = state.path(parent).and_then(|dir| {
            let path = dir.join(name);
            remove(&path).map_err(Errno::from)?;
            state.forget_path(&path);
            Ok(())
        });
        match answer {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

/// One mounted lazy disk; unmounted when dropped.
pub struct Disk {
    state: Arc<Mutex<State>>,
    _session: fuser::BackgroundSession,
}

/// What a power loss threw away.
#[derive(Debug, Default, Clone, Copy)]
pub struct Lost {
    /// Power losses so far (counted by the cluster, one per fault).
    pub losses: usize,
    /// Files that had unsynced writes.
    pub files: usize,
    /// Bytes restored to their synced contents, plus bytes cut off the ends.
    pub bytes: u64,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Disk {
    /// Mounts a lazy view of `backing` on `mountpoint` (both must exist).
    pub fn mount(backing: &Path, mountpoint: &Path) -> Result<Disk> {
        let state = Arc::new(Mutex::new(State {
            paths: HashMap::from([(1, backing.to_path_buf())]),
            inodes: HashMap::from([(backing.to_path_buf(), 1)]),
            next_inode: 2,
            handles: HashMap::new(),
            next_handle: 1,
            unsynced: HashMap::new(),
            powered: true,
        }));
        let mut config = fuser::Config::default();
        config.mount_options =
            vec![fuser::MountOption::FSName("leasekv-lazyfs".into()), fuser::MountOption::Subtype("lazyfs".into())];
        let session = fuser::spawn_mount(LazyFs { state: state.clone() }, mountpoint, &config).with_context(|| {
            format!("mounting the lazy FUSE disk on {} (needs root and /dev/fuse)", mountpoint.display())
        })?;
        Ok(Disk { state, _session: session })
    }

    /// The power goes out: every file is turned back to its contents at its last durable
    /// sync, and writes are refused until [`Disk::power_on`]. Call it once the processes
    /// using the disk are dead. Returns what was lost and a line per file turned back.
    pub fn power_loss(&self) -> Result<(Lost, Vec<String>)> {
        let mut state = lock(&self.state);
        state.powered = false;
        state.handles.clear();
        let mut lost = Lost::default();
        let mut undone = Vec::new();
        for (inode, unsynced) in std::mem::take(&mut state.unsynced) {
            // A file removed since it was written has nothing left to restore.
            let Some(path) = state.paths.get(&inode) else { continue };
            let Ok(file) = OpenOptions::new().write(true).open(path) else { continue };
            let before = file.metadata().map_or(0, |m| m.len());
            lost.files += 1;
            for (offset, bytes) in unsynced.undo.iter().rev() {
                file.write_all_at(bytes, *offset).with_context(|| format!("restoring {}", path.display()))?;
                lost.bytes += bytes.len() as u64;
            }
            file.set_len(unsynced.synced_len).with_context(|| format!("truncating {}", path.display()))?;
            let after = file.metadata().map_or(0, |m| m.len());
            lost.bytes += before.saturating_sub(after);
            let rewritten: usize = unsynced.undo.iter().map(|(_, bytes)| bytes.len()).sum();
            undone.push(format!("{} {before} -> {after} bytes, {rewritten} bytes restored", path.display()));
        }
        Ok((lost, undone))
    }

    /// The power is back: writes are accepted again.
    pub fn power_on(&self) {
        lock(&self.state).powered = true;
    }
}

impl State {
    fn path(&self, inode: INodeNo) -> Result<PathBuf, Errno> {
        self.paths.get(&inode.0).cloned().ok_or(Errno::ENOENT)
    }

    /// The inode number of `path`, given one if it has none yet.
    fn intern(&mut self, path: PathBuf) -> u64 {
        if let Some(inode) = self.inodes.get(&path) {
            return *inode;
        }
        let inode = self.next_inode;
        self.next_inode += 1;
        self.paths.insert(inode, path.clone());
        self.inodes.insert(path, inode);
        inode
    }

    /// Forgets `path` and everything under it (removed, or replaced by a rename).
    fn forget_path(&mut self, path: &Path) {
        let gone: Vec<PathBuf> = self.inodes.keys().filter(|p| p.starts_with(path)).cloned().collect();
        for p in gone {
            if let Some(inode) = self.inodes.remove(&p) {
                self.paths.remove(&inode);
                self.unsynced.remove(&inode);
            }
        }
    }

    fn attr(&self, inode: u64, path: &Path) -> Result<FileAttr, Errno> {
        let meta = std::fs::symlink_metadata(path).map_err(Errno::from)?;
        Ok(to_attr(inode, &meta))
    }

    /// Remembers what a write of `len` bytes at `offset` (or a truncation to `offset`, with
    /// `len` 0 and `truncate`) is about to replace in `file`.
    fn before_change(&mut self, inode: u64, file: &File, offset: u64, len: u64, truncate: bool) -> Result<(), Errno> {
        let current = file.metadata().map_err(Errno::from)?.len();
        let unsynced = self.unsynced.entry(inode).or_insert(Unsynced { synced_len: current, undo: Vec::new() });
        let end = if truncate { current } else { (offset + len).min(current) };
        if offset < end {
            let mut old = vec![0u8; (end - offset) as usize];
            file.read_exact_at(&mut old, offset).map_err(Errno::from)?;
            unsynced.undo.push((offset, old));
        }
        Ok(())
    }

    /// A sync of `inode` returned: a power loss no longer undoes what was written before it.
    fn synced(&mut self, inode: u64) {
        self.unsynced.remove(&inode);
    }
}

fn to_attr(inode: u64, meta: &std::fs::Metadata) -> FileAttr {
    let time = |secs: i64, nanos: i64| {
        if secs >= 0 {
            UNIX_EPOCH + Duration::new(secs as u64, nanos as u32)
        } else {
            UNIX_EPOCH
        }
    };
    let kind = if meta.is_dir() {
        FileType::Directory
    } else if meta.file_type().is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    };
    FileAttr {
        ino: INodeNo(inode),
        size: meta.size(),
        blocks: meta.blocks(),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: SystemTime::UNIX_EPOCH,
        kind,
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: meta.rdev() as u32,
        blksize: meta.blksize() as u32,
        flags: 0,
    }
}

impl LazyFs {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A new entry under `parent` named `name`, made by `make`, answered with its attributes.
    fn make_entry(
        &self,
        parent: INodeNo,
        name: &OsStr,
        make: impl FnOnce(&Path) -> std::io::Result<()>,
    ) -> Result<FileAttr, Errno> {
        let mut state = self.state();
        let path = state.path(parent)?.join(name);
        make(&path).map_err(Errno::from)?;
        let inode = state.intern(path.clone());
        state.attr(inode, &path)
    }
}

impl Filesystem for LazyFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut state = self.state();
        let answer = state.path(parent).and_then(|dir| {
            let path = dir.join(name);
            std::fs::symlink_metadata(&path).map_err(Errno::from)?;
            let inode = state.intern(path.clone());
            state.attr(inode, &path)
        });
        match answer {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let state = self.state();
        match state.path(ino).and_then(|p| state.attr(ino.0, &p)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut state = self.state();
        let answer = (|| {
            let path = state.path(ino)?;
            if let Some(size) = size {
                if !state.powered {
                    return Err(Errno::EIO);
                }
                let file = OpenOptions::new().write(true).read(true).open(&path).map_err(Errno::from)?;
                state.before_change(ino.0, &file, size, 0, true)?;
                file.set_len(size).map_err(Errno::from)?;
            }
            if let Some(mode) = mode {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o7777)).map_err(Errno::from)?;
            }
            state.attr(ino.0, &path)
        })();
        match answer {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let made = self.make_entry(parent, name, |path| {
            std::fs::create_dir(path)?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !umask & 0o7777))
        });
        match made {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, |path| std::fs::remove_file(path), reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, |path| std::fs::remove_dir(path), reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            // RENAME_NOREPLACE / RENAME_EXCHANGE: nothing the stores under test use.
            reply.error(Errno::EINVAL);
            return;
        }
        let mut state = self.state();
        let answer = (|| {
            let from = state.path(parent)?.join(name);
            let to = state.path(newparent)?.join(newname);
            std::fs::rename(&from, &to).map_err(Errno::from)?;
            state.forget_path(&to);
            let moved: Vec<PathBuf> = state.inodes.keys().filter(|p| p.starts_with(&from)).cloned().collect();
            for old in moved {
                if let Some(inode) = state.inodes.remove(&old) {
                    // (joining an empty path would add a trailing slash)
                    let new = match old.strip_prefix(&from) {
                        Ok(rest) if !rest.as_os_str().is_empty() => to.join(rest),
                        _ => to.clone(),
                    };
                    state.paths.insert(inode, new.clone());
                    state.inodes.insert(new, inode);
                }
            }
            Ok(())
        })();
        match answer {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut state = self.state();
        let answer = state.path(ino).and_then(|path| {
            let writable = flags.acc_mode() != OpenAccMode::O_RDONLY;
            let file = OpenOptions::new().read(true).write(writable).open(path).map_err(Errno::from)?;
            let handle = state.next_handle;
            state.next_handle += 1;
            state.handles.insert(handle, (ino.0, Arc::new(file)));
            Ok(handle)
        });
        match answer {
            Ok(handle) => reply.opened(FileHandle(handle), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut state = self.state();
        let answer = (|| {
            let path = state.path(parent)?.join(name);
            let mut options = OpenOptions::new();
            options.read(true).write(true).mode(mode & !umask & 0o7777);
            if flags & libc::O_EXCL != 0 {
                options.create_new(true);
            } else {
                options.create(true);
            }
            let file = options.open(&path).map_err(Errno::from)?;
            let inode = state.intern(path.clone());
            let attr = state.attr(inode, &path)?;
            let handle = state.next_handle;
            state.next_handle += 1;
            state.handles.insert(handle, (inode, Arc::new(file)));
            Ok((attr, handle))
        })();
        match answer {
            Ok((attr, handle)) => reply.created(&TTL, &attr, Generation(0), FileHandle(handle), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let file = self.state().handles.get(&fh.0).map(|(_, f)| f.clone());
        let Some(file) = file else {
            reply.error(Errno::EBADF);
            return;
        };
        let mut buffer = vec![0u8; size as usize];
        let mut filled = 0;
        while filled < buffer.len() {
            match file.read_at(&mut buffer[filled..], offset + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    reply.error(Errno::from(e));
                    return;
                }
            }
        }
        reply.data(&buffer[..filled]);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut state = self.state();
        let answer = (|| {
            if !state.powered {
                return Err(Errno::EIO);
            }
            let (inode, file) = state.handles.get(&fh.0).cloned().ok_or(Errno::EBADF)?;
            state.before_change(inode, &file, offset, data.len() as u64, false)?;
            file.write_all_at(data, offset).map_err(Errno::from)?;
            Ok(data.len() as u32)
        })();
        match answer {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // close() makes nothing durable.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.state().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let mut state = self.state();
        if !state.powered {
            reply.error(Errno::EIO);
            return;
        }
        // A handle from before a power loss must not mark a later process's writes synced.
        if !state.handles.contains_key(&fh.0) {
            reply.error(Errno::EBADF);
            return;
        }
        state.synced(ino.0);
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let mut state = self.state();
        let listing = (|| {
            let dir = state.path(ino)?;
            let mut entries = vec![(ino.0, FileType::Directory, ".".into()), (1, FileType::Directory, "..".into())];
            let mut names: Vec<_> = std::fs::read_dir(&dir)
                .map_err(Errno::from)?
                .filter_map(|e| e.ok())
                .map(|e| (e.file_name(), e.file_type().map(|t| t.is_dir()).unwrap_or(false)))
                .collect();
            names.sort();
            for (name, is_dir) in names {
                let inode = state.intern(dir.join(&name));
                let kind = if is_dir { FileType::Directory } else { FileType::RegularFile };
                entries.push((inode, kind, name));
            }
            Ok::<_, Errno>(entries)
        })();
        match listing {
            Ok(entries) => {
                for (i, (inode, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(inode), i as u64 + 1, kind, &name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // Metadata is durable at once in this model (see the module docs).
        reply.ok();
    }
}

#[cfg(test)]
// Named by path so that wanbench, which includes this file from another directory, finds it.
#[path = "lazyfs/tests.rs"]
mod tests;
