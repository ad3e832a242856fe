//! The bytes of a parked message: in memory, in a file, or in a file still being written
//! (a snapshot parked before it is built), and the chunks a pull reads from them.

use super::*;

/// The bytes of a parked message.
#[derive(Debug)]
pub enum Payload {
    /// In memory: an encoded message, or a small snapshot.
    Memory(Vec<u8>),
    /// In a file, read a chunk at a time as the receiver pulls, while it is still being
    /// written: a snapshot of any size (built by [`crate::node`] into an unlinked file in the
    /// data directory, and shared by every peer it is parked for). Chunks go out as the
    /// bytes they cover are written, and the last is the one that reaches the end the writer
    /// reports.
    Growing(Arc<GrowingFile>),
}

/// The size a notice gives for a message whose length is not known yet (a [`Payload::Growing`]
/// snapshot): the receiver takes chunks up to its limit until one is marked last.
pub const SIZE_UNKNOWN: u64 = u64::MAX;

/// How far a [`GrowingFile`]'s writer got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    /// This many bytes are in the file, more to come.
    Written(u64),
    /// The file is complete at this length.
    Done(u64),
    /// The writer failed; the file ends nowhere.
    Failed,
}

/// The buffer of a [`GrowingWriter`].
pub(super) const GROWING_BUFFER: usize = 256 << 10;

/// A file written by one thread and read at offsets by others as it grows.
#[derive(Debug)]
pub struct GrowingFile {
    file: std::fs::File,
    growth: tokio::sync::watch::Sender<Growth>,
}

impl GrowingFile {
    /// A new, unlinked file in `dir`, and the writer that grows it.
    pub fn create(dir: &std::path::Path) -> std::io::Result<(Arc<Self>, GrowingWriter)> {
        let file = tempfile::tempfile_in(dir)?;
        let growing = Arc::new(GrowingFile {
            file: file.try_clone()?,
            growth: tokio::sync::watch::Sender::new(Growth::Written(0)),
        });
        let writer = GrowingWriter {
            out: std::io::BufWriter::with_capacity(GROWING_BUFFER, file),
            growing: growing.clone(),
            total: 0,
            told: 0,
            ended: false,
        };
        Ok((growing, writer))
    }

    /// Where the writer is.
    pub fn growth(&self) -> Growth {
        *self.growth.borrow()
    }

    /// Waits until `end` bytes are written, or the file is complete or failed.
    async fn reaches(&self, end: u64) {
        let mut growth = self.growth.subscribe();
        let _ = growth.wait_for(|g| !matches!(g, Growth::Written(w) if *w < end)).await;
    }
}

/// Writes a [`GrowingFile`], telling its readers how far it got each time its buffer of
/// [`GROWING_BUFFER`] goes to the file (a reader waits for a chunk at a time, and the
/// receiver's wait for each chunk is bounded, so the first must not wait for megabytes). Dropped without [`GrowingWriter::finish`], the file is marked failed.
pub struct GrowingWriter {
    out: std::io::BufWriter<std::fs::File>,
    growing: Arc<GrowingFile>,
    total: u64,
    told: u64,
    ended: bool,
}

impl GrowingWriter {
    /// Writes out what is buffered and marks the file complete; returns its length.
    pub fn finish(mut self) -> std::io::Result<u64> {
        use std::io::Write;
        let flushed = self.out.flush();
        self.ended = true;
        match flushed {
            Ok(()) => {
                self.growing.growth.send_replace(Growth::Done(self.total));
                Ok(self.total)
            }
            Err(error) => {
                self.growing.growth.send_replace(Growth::Failed);
                Err(error)
            }
        }
    }
}

impl std::io::Write for GrowingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.total += n as u64;
        // What left the buffer is in the file for readers at offsets.
        let in_file = self.total - self.out.buffer().len() as u64;
        if in_file > self.told {
            self.told = in_file;
            self.growing.growth.send_replace(Growth::Written(in_file));
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl Drop for GrowingWriter {
    fn drop(&mut self) {
        if !self.ended {
            self.growing.growth.send_replace(Growth::Failed);
        }
    }
}

impl Payload {
    /// Length in bytes ([`SIZE_UNKNOWN`] for a file still growing).
    pub fn len(&self) -> u64 {
        match self {
            Payload::Memory(bytes) => bytes.len() as u64,
            Payload::Growing(growing) => match growing.growth() {
                Growth::Done(len) => len,
                Growth::Written(_) | Growth::Failed => SIZE_UNKNOWN,
            },
        }
    }

    /// The bytes from `offset` through `end` (exclusive; within the payload).
    fn read(&self, offset: u64, end: u64) -> std::io::Result<Vec<u8>> {
        match self {
            Payload::Memory(bytes) => {
                Ok(bytes.get(offset as usize..end as usize).map(<[u8]>::to_vec).unwrap_or_default())
            }
            Payload::Growing(growing) => read_at(&growing.file, offset, end),
        }
    }
}

/// The bytes of `file` from `offset` through `end` (exclusive).
pub(super) fn read_at(file: &std::fs::File, offset: u64, end: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0; usize::try_from(end - offset).unwrap_or(0)];
    file.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

/// The chunks of one message, produced lazily (one read of [`CHUNK_BYTES`] at a time, when
/// the stream asks for the next): `offset` counts up without gaps, `index` is the same in
/// every chunk, `last` is set on the final one. An empty message is one empty last chunk.
/// A file that cannot be read ends the chunks with the error.
pub struct Chunks {
    data: Arc<Payload>,
    index: u64,
    chunk_bytes: u64,
    pub(super) offset: u64,
    done: bool,
}

impl Chunks {
    /// Chunks of `data` of at most `chunk_bytes` (at least 1) each.
    pub fn new(index: u64, data: Arc<Payload>, chunk_bytes: usize) -> Self {
        Chunks { data, index, chunk_bytes: chunk_bytes.max(1) as u64, offset: 0, done: false }
    }
}

impl Chunks {
    /// Waits until the next chunk can be read: at once, unless the payload is a file still
    /// growing that does not reach the chunk's end yet.
    pub(super) async fn ready(&self) {
        if let (Payload::Growing(growing), false) = (&*self.data, self.done) {
            growing.reaches(self.offset.saturating_add(self.chunk_bytes)).await;
        }
    }
}

impl Iterator for Chunks {
    type Item = std::io::Result<pb::ParkedChunk>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        // The payload's end, once known: a file still growing holds at least this chunk
        // ([`Chunks::ready`] waited for it), and the chunk is not its last.
        let known_len = match &*self.data {
            Payload::Memory(bytes) => Some(bytes.len() as u64),
            Payload::Growing(growing) => match growing.growth() {
                Growth::Done(len) => Some(len),
                Growth::Written(_) => None,
                Growth::Failed => {
                    self.done = true;
                    return Some(Err(std::io::Error::other("the snapshot's writer failed")));
                }
            },
        };
        let full = self.offset.saturating_add(self.chunk_bytes);
        let (end, last) = match known_len {
            Some(len) => (full.min(len), full >= len),
            None => (full, false),
        };
        let data = match self.data.read(self.offset, end) {
            Ok(data) => data,
            Err(error) => {
                self.done = true;
                return Some(Err(error));
            }
        };
        let chunk = pb::ParkedChunk { index: self.index, data, last, offset: self.offset };
        self.offset = end;
        self.done = last;
        Some(Ok(chunk))
    }
}
