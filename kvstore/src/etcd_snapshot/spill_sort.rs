//! Sorting more pairs than should be held in memory: sorted runs spilled to unlinked
//! temporary files, merged back in order. The export needs it for one stream: the keys live
//! at the compaction point come in key order and etcd's `key` bucket wants them in
//! revision order.
//!
//! Memory: one run's budget while pushing, then one pair per run while merging.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A pair's sort key and payload.
pub(super) type Pair = (Vec<u8>, Vec<u8>);

/// What a pair costs in memory beside its bytes (two vectors and their allocations).
const PAIR_OVERHEAD: usize = 64;

/// Pairs being collected for sorting.
pub(super) struct SpillSort {
    dir: PathBuf,
    budget: usize,
    held: Vec<Pair>,
    held_bytes: usize,
    runs: Vec<File>,
}

impl SpillSort {
    /// A sort that holds at most about `budget` bytes of pairs before it spills a run to a
    /// temporary file in `dir`.
    pub(super) fn new(dir: &Path, budget: usize) -> Self {
        SpillSort { dir: dir.to_path_buf(), budget, held: Vec::new(), held_bytes: 0, runs: Vec::new() }
    }

    /// Adds a pair. Sort keys must differ.
    pub(super) fn push(&mut self, key: Vec<u8>, value: Vec<u8>) -> io::Result<()> {
        self.held_bytes += key.len() + value.len() + PAIR_OVERHEAD;
        self.held.push((key, value));
        if self.held_bytes >= self.budget {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> io::Result<()> {
        self.held.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut file = tempfile::tempfile_in(&self.dir)?;
        {
            let mut out = BufWriter::with_capacity(1 << 16, &mut file);
            for (key, value) in self.held.drain(..) {
                for part in [&key, &value] {
                    out.write_all(&(part.len() as u64).to_le_bytes())?;
                    out.write_all(part)?;
                }
            }
            out.flush()?;
        }
        file.seek(SeekFrom::Start(0))?;
        self.runs.push(file);
        self.held_bytes = 0;
        Ok(())
    }

    /// Every pair pushed, in sort key order.
    pub(super) fn finish(mut self) -> io::Result<SortedRuns> {
        if self.runs.is_empty() {
            self.held.sort_unstable_by(|a, b| b.0.cmp(&a.0));
            return Ok(SortedRuns::InMemory(self.held));
        }
        if !self.held.is_empty() {
            self.spill()?;
        }
        let mut readers: Vec<BufReader<File>> =
            self.runs.into_iter().map(|f| BufReader::with_capacity(1 << 16, f)).collect();
        let mut heads = BinaryHeap::with_capacity(readers.len());
        for (run, reader) in readers.iter_mut().enumerate() {
            if let Some((key, value)) = read_pair(reader)? {
                heads.push(Reverse((key, run, value)));
            }
        }
        Ok(SortedRuns::Merging { readers, heads })
    }
}

/// One pair of a run, or `None` at its end.
fn read_pair(reader: &mut impl Read) -> io::Result<Option<Pair>> {
    let mut parts = [Vec::new(), Vec::new()];
    for (i, part) in parts.iter_mut().enumerate() {
        let mut len = [0u8; 8];
        match reader.read_exact(&mut len) {
            Err(e) if i == 0 && e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            other => other?,
        }
        let len = usize::try_from(u64::from_le_bytes(len)).map_err(|_| io::Error::other("a run is damaged"))?;
        part.resize(len, 0);
        reader.read_exact(part)?;
    }
    let [key, value] = parts;
    Ok(Some((key, value)))
}

/// The next pair of one run: its sort key, the run, its payload (ordered by key, then run).
type Head = Reverse<(Vec<u8>, usize, Vec<u8>)>;

/// The pairs in order.
pub(super) enum SortedRuns {
    /// Never spilled: held in reverse order, taken from the end.
    InMemory(Vec<Pair>),
    /// Spilled: the runs, and the next pair of each.
    Merging { readers: Vec<BufReader<File>>, heads: BinaryHeap<Head> },
}

impl Iterator for SortedRuns {
    type Item = io::Result<Pair>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            SortedRuns::InMemory(held) => held.pop().map(Ok),
            SortedRuns::Merging { readers, heads } => {
                let Reverse((key, run, value)) = heads.pop()?;
                match read_pair(&mut readers[run]) {
                    Ok(Some((k, v))) => heads.push(Reverse((k, run, v))),
                    Ok(None) => {}
                    Err(e) => return Some(Err(e)),
                }
                Some(Ok((key, value)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_come_back_in_order_from_memory_and_from_spilled_runs() {
        let dir = tempfile::tempdir().unwrap();
        for budget in [1 << 20, 5000, 500] {
            let mut sort = SpillSort::new(dir.path(), budget);
            let mut want = Vec::new();
            for i in 0..1000u32 {
                let key = (i.wrapping_mul(2_654_435_761) % 100_003).to_be_bytes().to_vec();
                let value = vec![i as u8; (i % 7) as usize];
                want.push((key.clone(), value.clone()));
                sort.push(key, value).unwrap();
            }
            want.sort();
            let got: Vec<Pair> = sort.finish().unwrap().collect::<io::Result<_>>().unwrap();
            assert_eq!(got, want, "budget {budget}");
        }
    }
}
