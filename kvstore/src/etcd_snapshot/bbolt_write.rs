//! A streaming writer of bbolt's page format (file format version 2, the layout
//! [`super::bbolt`] reads), for etcd snapshot files written from a leasekv state.
//!
//! A file is written in one pass, bucket after bucket, each bucket's pairs in key order:
//! leaf pages go to the file as they fill, and only the first key and page id of each page
//! stay in memory to build the branch pages above them when the bucket ends (a few bytes per
//! page: some 40 pairs share a page). Pages 0 and 1 (the meta pages) and 2 (an empty
//! freelist) are reserved at the start and written last, once the root bucket's page is
//! known. Every page in the file is reachable from a meta page, so bbolt (and etcd) opens it
//! with nothing leaked and nothing free.
//!
//! Pages are filled whole, where bbolt's own splits leave them half full: the file is
//! smaller, and bbolt rebalances on its first write as it would any page. A pair larger than
//! a page gets a leaf of its own spanning as many pages as it needs (bbolt's overflow).

use super::bbolt::{
    fnv1a64, BRANCH_PAGE, BUCKET_HEADER, BUCKET_LEAF, ELEMENT, LEAF_PAGE, MAGIC, META_CHECKED, META_PAGE, PAGE_HEADER,
    VERSION,
};
use std::io::{self, Seek, SeekFrom, Write};

/// The page size written: the OS page size of the machines etcd runs on, and bbolt's
/// default there.
pub(super) const PAGE_SIZE: usize = 4096;
/// The freelist page's flag.
const FREELIST_PAGE: u16 = 0x10;
/// The page that holds the (empty) freelist.
const FREELIST_ID: u64 = 2;
/// The first page a bucket's pages may use.
const FIRST_DATA_PAGE: u64 = 3;
/// A page header's element count is a `u16`.
const MAX_ELEMENTS: usize = u16::MAX as usize;
/// bbolt refuses longer keys (`MaxKeySize`).
pub(super) const MAX_KEY: usize = 32_768;

/// One page's elements, being filled: the element fields and the bytes after them.
#[derive(Default)]
struct PageBuilder {
    /// Per element: the words before its position (a leaf's flags; none for a branch), the
    /// key's length, and the word after (a leaf's value length, or a branch's child page).
    elements: Vec<(u32, u32, u64)>,
    data: Vec<u8>,
    first_key: Vec<u8>,
}

impl PageBuilder {
    fn size(&self) -> usize {
        PAGE_HEADER + self.elements.len() * ELEMENT + self.data.len()
    }

    fn fits(&self, key: usize, value: usize, page_size: usize) -> bool {
        self.elements.is_empty()
            || (self.elements.len() < MAX_ELEMENTS && self.size() + ELEMENT + key + value <= page_size)
    }

    /// The page's bytes, header included (its id and overflow set when it is placed).
    fn encode(&mut self, flags: u16) -> Vec<u8> {
        let count = self.elements.len();
        let mut page = Vec::with_capacity(self.size());
        page.extend_from_slice(&[0; PAGE_HEADER]);
        page[8..10].copy_from_slice(&flags.to_le_bytes());
        page[10..12].copy_from_slice(&(count as u16).to_le_bytes());
        let data_start = PAGE_HEADER + count * ELEMENT;
        let mut offset = 0usize;
        for (i, &(leaf_flags, key_len, last)) in self.elements.iter().enumerate() {
            // `pos` counts from the element itself to its key.
            let pos = (data_start + offset - (PAGE_HEADER + i * ELEMENT)) as u32;
            if flags == LEAF_PAGE {
                page.extend_from_slice(&leaf_flags.to_le_bytes());
                page.extend_from_slice(&pos.to_le_bytes());
                page.extend_from_slice(&key_len.to_le_bytes());
                page.extend_from_slice(&(last as u32).to_le_bytes());
                offset += key_len as usize + last as usize;
            } else {
                page.extend_from_slice(&pos.to_le_bytes());
                page.extend_from_slice(&key_len.to_le_bytes());
                page.extend_from_slice(&last.to_le_bytes());
                offset += key_len as usize;
            }
        }
        page.extend_from_slice(&self.data);
        self.elements.clear();
        self.data.clear();
        page
    }
}

/// A bbolt file being written to `out` (positioned at its start).
pub(super) struct BoltWriter<W: Write + Seek> {
    out: W,
    page_size: usize,
    /// The next page id to place.
    next: u64,
    /// Buckets written: name and root page, in the order written.
    buckets: Vec<(Vec<u8>, u64)>,
}

impl<W: Write + Seek> BoltWriter<W> {
    /// A writer of pages of `page_size` bytes (a power of two, at least 512).
    pub(super) fn new(mut out: W, page_size: usize) -> io::Result<Self> {
        out.seek(SeekFrom::Start(FIRST_DATA_PAGE * page_size as u64))?;
        Ok(BoltWriter { out, page_size, next: FIRST_DATA_PAGE, buckets: Vec::new() })
    }

    /// Writes `page` (a page without its id and overflow) at the next page id, spanning as
    /// many pages as it needs; returns its id.
    fn place(&mut self, mut page: Vec<u8>) -> io::Result<u64> {
        let id = self.next;
        let span = page.len().div_ceil(self.page_size).max(1);
        page.resize(span * self.page_size, 0);
        page[0..8].copy_from_slice(&id.to_le_bytes());
        let overflow = u32::try_from(span - 1).map_err(|_| io::Error::other("a page of over 16 TiB"))?;
        page[12..16].copy_from_slice(&overflow.to_le_bytes());
        self.out.write_all(&page)?;
        self.next += span as u64;
        Ok(id)
    }

    /// Starts the bucket `name`; its pairs follow through [`Bucket::put`], in key order.
    pub(super) fn bucket(&mut self, name: &[u8]) -> Bucket {
        Bucket { name: name.to_vec(), tree: Tree::default() }
    }

    /// Writes the root bucket over every bucket ended, the freelist and both meta pages;
    /// returns the file's length.
    pub(super) fn finish(mut self) -> io::Result<(W, u64)> {
        let mut buckets = std::mem::take(&mut self.buckets);
        buckets.sort();
        if buckets.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(io::Error::other("two buckets of the same name"));
        }
        let mut root = Tree::default();
        for (name, page) in &buckets {
            let mut header = [0u8; BUCKET_HEADER];
            header[..8].copy_from_slice(&page.to_le_bytes());
            root.put(&mut self, BUCKET_LEAF, name, &header)?;
        }
        let root = root.finish(&mut self)?;
        let high_water = self.next;
        let mut out = self.out;
        out.seek(SeekFrom::Start(0))?;
        // bbolt writes the two meta pages alternately and opens with the valid one of the
        // higher transaction id: both are valid here, and the same but for that id.
        for (id, txid) in [(0u64, 0u64), (1, 1)] {
            let mut page = vec![0u8; self.page_size];
            page[0..8].copy_from_slice(&id.to_le_bytes());
            page[8..10].copy_from_slice(&META_PAGE.to_le_bytes());
            let meta = &mut page[PAGE_HEADER..];
            meta[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            meta[4..8].copy_from_slice(&VERSION.to_le_bytes());
            meta[8..12].copy_from_slice(&(self.page_size as u32).to_le_bytes());
            meta[16..24].copy_from_slice(&root.to_le_bytes());
            meta[32..40].copy_from_slice(&FREELIST_ID.to_le_bytes());
            meta[40..48].copy_from_slice(&high_water.to_le_bytes());
            meta[48..56].copy_from_slice(&txid.to_le_bytes());
            let sum = fnv1a64(&meta[..META_CHECKED]);
            meta[56..64].copy_from_slice(&sum.to_le_bytes());
            out.write_all(&page)?;
        }
        let mut freelist = vec![0u8; self.page_size];
        freelist[0..8].copy_from_slice(&FREELIST_ID.to_le_bytes());
        freelist[8..10].copy_from_slice(&FREELIST_PAGE.to_le_bytes());
        out.write_all(&freelist)?;
        out.flush()?;
        Ok((out, high_water * self.page_size as u64))
    }
}

/// One bucket being written.
pub(super) struct Bucket {
    name: Vec<u8>,
    tree: Tree,
}

impl Bucket {
    /// Adds a pair; keys must come in strictly increasing order.
    pub(super) fn put<W: Write + Seek>(
        &mut self,
        file: &mut BoltWriter<W>,
        key: &[u8],
        value: &[u8],
    ) -> io::Result<()> {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(io::Error::other(format!("a key of {} bytes (bbolt takes 1 to {MAX_KEY})", key.len())));
        }
        if !self.tree.last_key.is_empty() && key <= self.tree.last_key.as_slice() {
            return Err(io::Error::other("keys out of order"));
        }
        self.tree.last_key.clear();
        self.tree.last_key.extend_from_slice(key);
        self.tree.put(file, 0, key, value)
    }

    /// Ends the bucket: writes its last leaf and its branch pages.
    pub(super) fn finish<W: Write + Seek>(self, file: &mut BoltWriter<W>) -> io::Result<()> {
        let root = self.tree.finish(file)?;
        file.buckets.push((self.name, root));
        Ok(())
    }
}

/// A B+tree written bottom-up: the leaf being filled, and the first key and page of every
/// leaf written.
#[derive(Default)]
struct Tree {
    leaf: PageBuilder,
    leaves: Vec<(Vec<u8>, u64)>,
    last_key: Vec<u8>,
}

impl Tree {
    fn put<W: Write + Seek>(
        &mut self,
        file: &mut BoltWriter<W>,
        flags: u32,
        key: &[u8],
        value: &[u8],
    ) -> io::Result<()> {
        if !self.leaf.fits(key.len(), value.len(), file.page_size) {
            self.flush_leaf(file)?;
        }
        let value_len = u32::try_from(value.len()).map_err(|_| io::Error::other("a value of over 4 GiB"))?;
        if self.leaf.elements.is_empty() {
            self.leaf.first_key = key.to_vec();
        }
        self.leaf.elements.push((flags, key.len() as u32, u64::from(value_len)));
        self.leaf.data.extend_from_slice(key);
        self.leaf.data.extend_from_slice(value);
        Ok(())
    }

    fn flush_leaf<W: Write + Seek>(&mut self, file: &mut BoltWriter<W>) -> io::Result<()> {
        let first = std::mem::take(&mut self.leaf.first_key);
        let page = file.place(self.leaf.encode(LEAF_PAGE))?;
        self.leaves.push((first, page));
        Ok(())
    }

    /// Writes what is left and the branch pages; returns the root page (an empty leaf for an
    /// empty tree).
    fn finish<W: Write + Seek>(mut self, file: &mut BoltWriter<W>) -> io::Result<u64> {
        if !self.leaf.elements.is_empty() || self.leaves.is_empty() {
            self.flush_leaf(file)?;
        }
        let mut level = self.leaves;
        while level.len() > 1 {
            let mut parents = Vec::new();
            let mut branch = PageBuilder::default();
            for (key, child) in level {
                // Two children at least, however long their keys: each level must be
                // shorter than the one below it.
                if branch.elements.len() >= 2 && !branch.fits(key.len(), 0, file.page_size) {
                    let first = std::mem::take(&mut branch.first_key);
                    parents.push((first, file.place(branch.encode(BRANCH_PAGE))?));
                }
                if branch.elements.is_empty() {
                    branch.first_key = key.clone();
                }
                branch.elements.push((0, key.len() as u32, child));
                branch.data.extend_from_slice(&key);
            }
            let first = std::mem::take(&mut branch.first_key);
            parents.push((first, file.place(branch.encode(BRANCH_PAGE))?));
            level = parents;
        }
        Ok(level[0].1)
    }
}
