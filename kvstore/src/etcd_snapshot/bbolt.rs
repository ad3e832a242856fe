//! A read-only reader of bbolt's page format (go.etcd.io/bbolt, file format version 2),
//! limited to what etcd writes: top-level buckets holding plain key-value pairs.
//!
//! The layout, all integers little-endian:
//! - every page starts with a 16-byte header: id `u64`, flags `u16` (branch 0x01, leaf
//!   0x02, meta 0x04, freelist 0x10), count `u16`, overflow `u32` (the page spans
//!   `1 + overflow` pages);
//! - pages 0 and 1 are the two meta pages: magic `u32` (0xED0CDAED), version `u32` (2),
//!   page size `u32`, flags `u32`, the root bucket (root page `u64`, sequence `u64`), the
//!   freelist page `u64`, the high-water mark `u64` (pages in use), the transaction id
//!   `u64`, and the FNV-1a 64 of those 56 bytes. A reader takes the valid one with the
//!   higher transaction id (bbolt writes them alternately, so one survives a torn write);
//! - a branch page holds `count` elements {pos `u32`, ksize `u32`, child page `u64`};
//! - a leaf page holds `count` elements {flags `u32` (0x01: the value is a bucket), pos
//!   `u32`, ksize `u32`, vsize `u32`}; an element's key starts `pos` bytes after the
//!   element itself, its value right after the key;
//! - a bucket value is {root page `u64`, sequence `u64`}; root 0 means an inline bucket,
//!   whose leaf page follows in the value itself.
//!
//! Nothing in the input is trusted: every offset and length is checked against what holds
//! it, a page referenced twice (a cycle, or two parents) is refused, the tree depth is
//! bounded, and anything unexpected is an [`EtcdSnapshotError`], never a panic. Each page
//! is read at most once, so the work is bounded by the file's size.

use super::EtcdSnapshotError;
use std::collections::{BTreeMap, HashSet};

/// bbolt's magic number, the first field of a meta page.
pub(super) const MAGIC: u32 = 0xED0C_DAED;
/// The only file format version bbolt has written since 2014 (and the one etcd uses).
pub(super) const VERSION: u32 = 2;
pub(super) const PAGE_HEADER: usize = 16;
pub(super) const ELEMENT: usize = 16;
pub(super) const BUCKET_HEADER: usize = 16;
pub(super) const BRANCH_PAGE: u16 = 0x01;
pub(super) const LEAF_PAGE: u16 = 0x02;
pub(super) const META_PAGE: u16 = 0x04;
pub(super) const BUCKET_LEAF: u32 = 0x01;
/// A B+tree of pages this deep would hold more keys than any file can; deeper is damage.
const MAX_DEPTH: usize = 64;
/// The smallest and largest page sizes accepted (bbolt uses the OS page size: 4 KiB on
/// most machines, 16 or 64 KiB on some ARM ones).
const PAGE_SIZES: std::ops::RangeInclusive<usize> = 512..=1 << 20;
/// Bytes of a meta page's fields covered by its checksum.
pub(super) const META_CHECKED: usize = 56;

/// The FNV-1a 64 hash, which bbolt checksums its meta pages with.
pub(super) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// One meta page's fields.
#[derive(Debug, Clone, Copy)]
struct Meta {
    page_size: u32,
    root: u64,
    high_water: u64,
    txid: u64,
}

/// What is wrong with a meta page, if anything.
enum MetaProblem {
    Magic,
    Version(u32),
    Checksum,
}

/// Reads the meta page whose header starts at `at`.
fn read_meta(data: &[u8], at: usize) -> Result<Meta, MetaProblem> {
    let fields = at.checked_add(PAGE_HEADER).and_then(|start| data.get(start..start.checked_add(META_CHECKED + 8)?));
    let Some(fields) = fields else { return Err(MetaProblem::Magic) };
    let field32 = |i: usize| u32_at(fields, i).unwrap_or_default();
    let field64 = |i: usize| u64_at(fields, i).unwrap_or_default();
    if field32(0) != MAGIC {
        return Err(MetaProblem::Magic);
    }
    if field32(4) != VERSION {
        return Err(MetaProblem::Version(field32(4)));
    }
    if fnv1a64(&fields[..META_CHECKED]) != field64(META_CHECKED) {
        return Err(MetaProblem::Checksum);
    }
    Ok(Meta { page_size: field32(8), root: field64(16), high_water: field64(40), txid: field64(48) })
}

/// Whether `bytes` starts with a bbolt meta page (its magic number), whatever its version
/// or state.
pub(super) fn looks_like_bbolt(bytes: &[u8]) -> bool {
    u32_at(bytes, PAGE_HEADER) == Some(MAGIC)
}

/// Where a bucket's tree lives.
#[derive(Clone, Copy)]
enum Root<'a> {
    /// In page `n` of the file.
    Page(u64),
    /// Inline, in these bytes (a leaf page stored in the parent's value).
    Inline(&'a [u8]),
}

/// One key-value of a leaf.
struct Element<'a> {
    flags: u32,
    key: &'a [u8],
    value: &'a [u8],
}

/// The key-value pairs of every top-level bucket, by bucket name, each in key order.
pub(super) type Buckets<'a> = BTreeMap<&'a [u8], Vec<(&'a [u8], &'a [u8])>>;

/// An open bbolt file.
pub(super) struct Db<'a> {
    data: &'a [u8],
    page_size: usize,
    /// Pages in use (the meta page's high-water mark); no reference may point past it.
    pages: u64,
    root: u64,
}

impl<'a> Db<'a> {
    /// Checks the meta pages and picks the newest valid one.
    pub(super) fn open(data: &'a [u8]) -> Result<Self, EtcdSnapshotError> {
        let first = read_meta(data, 0);
        let second = match &first {
            // Meta 1 sits one page after meta 0; without a valid meta 0, try the page sizes
            // bbolt could have used, each checked by its own checksum and page size.
            Ok(meta) => usize::try_from(meta.page_size).ok().map(|size| read_meta(data, size)),
            Err(_) => PAGE_SIZES
                .filter(|size| size.is_power_of_two())
                .map(|size| (size, read_meta(data, size)))
                .find(|(size, meta)| meta.as_ref().is_ok_and(|m| m.page_size as usize == *size))
                .map(|(_, meta)| meta),
        };
        let mut valid: Vec<Meta> = [Some(first), second].into_iter().flatten().filter_map(Result::ok).collect();
        valid.sort_by_key(|m| m.txid);
        let Some(meta) = valid.pop() else {
            return Err(match read_meta(data, 0) {
                Err(MetaProblem::Magic) => EtcdSnapshotError::NotBbolt,
                Err(MetaProblem::Version(v)) => EtcdSnapshotError::UnsupportedVersion(v),
                _ => EtcdSnapshotError::MetaDamaged,
            });
        };
        let page_size = usize::try_from(meta.page_size).unwrap_or(0);
        if !PAGE_SIZES.contains(&page_size) || !page_size.is_power_of_two() {
            return Err(EtcdSnapshotError::BadPageSize(meta.page_size));
        }
        let in_file = (data.len() / page_size) as u64;
        if meta.high_water < 2 || meta.high_water > in_file {
            return Err(EtcdSnapshotError::Truncated { pages: meta.high_water, in_file });
        }
        let db = Db { data, page_size, pages: meta.high_water, root: meta.root };
        if db.root < 2 {
            return Err(EtcdSnapshotError::Page {
                page: db.root,
                problem: "the root bucket points at a meta page".into(),
            });
        }
        Ok(db)
    }

    /// The database's size: its pages in use.
    pub(super) fn size(&self) -> u64 {
        self.pages * self.page_size as u64
    }

    /// Every top-level bucket with its key-value pairs. Nested buckets (etcd has none) are
    /// refused.
    pub(super) fn buckets(&self) -> Result<Buckets<'a>, EtcdSnapshotError> {
        let mut visited = HashSet::new();
        let mut top = Vec::new();
        self.walk(Root::Page(self.root), 0, &mut visited, &mut top)?;
        let names: Vec<(&[u8], &[u8])> = top.iter().map(|e| (e.key, e.value)).collect();
        check_order("(root)", &names)?;
        let mut buckets = BTreeMap::new();
        for element in top {
            let name = element.key;
            if element.flags & BUCKET_LEAF == 0 {
                return Err(EtcdSnapshotError::Page {
                    page: self.root,
                    problem: format!("the root holds a plain value {:?}, not a bucket", String::from_utf8_lossy(name)),
                });
            }
            let mut entries = Vec::new();
            self.walk(self.bucket_root(name, element.value)?, 0, &mut visited, &mut entries)?;
            let mut pairs = Vec::with_capacity(entries.len());
            for e in entries {
                if e.flags & BUCKET_LEAF != 0 {
                    return Err(EtcdSnapshotError::NestedBucket {
                        bucket: String::from_utf8_lossy(name).into_owned(),
                        key: String::from_utf8_lossy(e.key).into_owned(),
                    });
                }
                pairs.push((e.key, e.value));
            }
            check_order(&String::from_utf8_lossy(name), &pairs)?;
            buckets.insert(name, pairs);
        }
        Ok(buckets)
    }

    /// Where the bucket whose header is `value` keeps its tree.
    fn bucket_root(&self, name: &[u8], value: &'a [u8]) -> Result<Root<'a>, EtcdSnapshotError> {
        let root =
            u64_at(value, 0).filter(|_| value.len() >= BUCKET_HEADER).ok_or_else(|| EtcdSnapshotError::Page {
                page: self.root,
                problem: format!("bucket {:?} has a header of {} bytes", String::from_utf8_lossy(name), value.len()),
            })?;
        Ok(match root {
            0 => Root::Inline(&value[BUCKET_HEADER..]),
            page => Root::Page(page),
        })
    }

    /// The bytes of page `id` with every page it spans, checked: in the file, below the
    /// high-water mark, not a meta page, its header naming itself.
    fn page(&self, id: u64, visited: &mut HashSet<u64>) -> Result<(u16, u16, &'a [u8]), EtcdSnapshotError> {
        if id < 2 || id >= self.pages {
            return Err(EtcdSnapshotError::PageOutside { page: id, pages: self.pages });
        }
        // `id < pages <= data.len() / page_size`, so the start is inside the file.
        let start = id as usize * self.page_size;
        let header = &self.data[start..start + PAGE_HEADER];
        let damaged = |problem: String| EtcdSnapshotError::Page { page: id, problem };
        let (own_id, flags, count, overflow) = (
            u64_at(header, 0).unwrap_or_default(),
            u16_at(header, 8).unwrap_or_default(),
            u16_at(header, 10).unwrap_or_default(),
            u32_at(header, 12).unwrap_or_default(),
        );
        if own_id != id {
            return Err(damaged(format!("its header says it is page {own_id}")));
        }
        let last = id.checked_add(u64::from(overflow)).filter(|&last| last < self.pages);
        let Some(last) = last else {
            return Err(damaged(format!("its {overflow} overflow pages run past the end of the file")));
        };
        for page in id..=last {
            if !visited.insert(page) {
                return Err(EtcdSnapshotError::Cycle { page });
            }
        }
        let end = (last as usize + 1) * self.page_size;
        Ok((flags, count, &self.data[start..end]))
    }

    /// Appends every element of the tree at `root`, in key order.
    fn walk(
        &self,
        root: Root<'a>,
        depth: usize,
        visited: &mut HashSet<u64>,
        out: &mut Vec<Element<'a>>,
    ) -> Result<(), EtcdSnapshotError> {
        let (id, flags, count, bytes) = match root {
            Root::Page(id) => {
                if depth >= MAX_DEPTH {
                    return Err(EtcdSnapshotError::Page {
                        page: id,
                        problem: format!("the tree is deeper than {MAX_DEPTH}"),
                    });
                }
                let (flags, count, bytes) = self.page(id, visited)?;
                (id, flags, count, bytes)
            }
            Root::Inline(bytes) => {
                let header = |at| u16_at(bytes, at).unwrap_or_default();
                if bytes.len() < PAGE_HEADER {
                    return Err(EtcdSnapshotError::Page {
                        page: 0,
                        problem: format!("an inline bucket of {} bytes is shorter than a page header", bytes.len()),
                    });
                }
                (0, header(8), header(10), bytes)
            }
        };
        let damaged = |problem: String| EtcdSnapshotError::Page { page: id, problem };
        let element = |i: usize| {
            let at = PAGE_HEADER + i * ELEMENT;
            match bytes.get(at..at + ELEMENT) {
                Some(e) => Ok((at, e)),
                None => Err(damaged(format!("element {i} of {count} lies past the page's end"))),
            }
        };
        match flags {
            LEAF_PAGE => {
                for i in 0..usize::from(count) {
                    let (at, e) = element(i)?;
                    let field = |f: usize| u32_at(e, f * 4).unwrap_or_default() as usize;
                    let (flags, pos, ksize, vsize) = (field(0) as u32, field(1), field(2), field(3));
                    let key_start = at.checked_add(pos);
                    let key_end = key_start.and_then(|s| s.checked_add(ksize));
                    let value_end = key_end.and_then(|k| k.checked_add(vsize));
                    let (Some(key_start), Some(key_end), Some(value_end)) = (key_start, key_end, value_end) else {
                        return Err(damaged(format!("element {i}'s key or value overflows")));
                    };
                    let (Some(key), Some(value)) = (bytes.get(key_start..key_end), bytes.get(key_end..value_end))
                    else {
                        return Err(damaged(format!("element {i}'s key or value lies past the page's end")));
                    };
                    out.push(Element { flags, key, value });
                }
                Ok(())
            }
            BRANCH_PAGE if matches!(root, Root::Page(_)) => {
                if count == 0 {
                    return Err(damaged("a branch page without elements".into()));
                }
                for i in 0..usize::from(count) {
                    let (_, e) = element(i)?;
                    let child = u64_at(e, 8).unwrap_or_default();
                    self.walk(Root::Page(child), depth + 1, visited, out)?;
                }
                Ok(())
            }
            META_PAGE => Err(damaged("a meta page where a bucket's page was expected".into())),
            other => Err(damaged(format!("page flags {other:#x} where a branch or leaf page was expected"))),
        }
    }
}

/// Checks that `pairs` (one bucket's, as read) are in strictly increasing key order, as
/// bbolt keeps them: anything else is damage that per-page checks cannot see.
fn check_order(bucket: &str, pairs: &[(&[u8], &[u8])]) -> Result<(), EtcdSnapshotError> {
    match pairs.windows(2).position(|w| w[0].0 >= w[1].0) {
        Some(i) => Err(EtcdSnapshotError::Record {
            bucket: bucket.to_string(),
            key: String::from_utf8_lossy(pairs[i + 1].0).into_owned(),
            problem: "keys out of order: the file is damaged".into(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
pub(super) mod writer {
    //! A minimal bbolt writer for tests: builds files with top-level buckets, spread over
    //! leaf pages under one branch page, or inline, so the reader can be tested (and its
    //! checks broken on purpose) without an etcd.

    use super::*;

    /// How a bucket is laid out.
    pub(crate) enum Layout {
        /// Inline in its parent's value.
        Inline,
        /// Leaf pages of at most this many elements, under a branch page when more than one.
        Pages(usize),
    }

    fn header(out: &mut [u8], id: u64, flags: u16, count: u16, overflow: u32) {
        out[0..8].copy_from_slice(&id.to_le_bytes());
        out[8..10].copy_from_slice(&flags.to_le_bytes());
        out[10..12].copy_from_slice(&count.to_le_bytes());
        out[12..16].copy_from_slice(&overflow.to_le_bytes());
    }

    /// A leaf page (without its id and overflow set) of `pairs`, `flags` per element.
    fn leaf(pairs: &[(u32, Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        let mut page = vec![0; PAGE_HEADER + pairs.len() * ELEMENT];
        header(&mut page, 0, LEAF_PAGE, pairs.len() as u16, 0);
        for (i, (flags, key, value)) in pairs.iter().enumerate() {
            let at = PAGE_HEADER + i * ELEMENT;
            let pos = (page.len() - at) as u32;
            page[at..at + 4].copy_from_slice(&flags.to_le_bytes());
            page[at + 4..at + 8].copy_from_slice(&pos.to_le_bytes());
            page[at + 8..at + 12].copy_from_slice(&(key.len() as u32).to_le_bytes());
            page[at + 12..at + 16].copy_from_slice(&(value.len() as u32).to_le_bytes());
            page.extend_from_slice(key);
            page.extend_from_slice(value);
        }
        page
    }

    /// The pages written so far (page 0 and 1 are the metas, filled in last).
    struct File {
        page_size: usize,
        pages: Vec<Vec<u8>>,
    }

    impl File {
        /// Places `content` (a page without id/overflow) at the next page id, spanning as
        /// many pages as it needs; returns its id.
        fn place(&mut self, mut content: Vec<u8>) -> u64 {
            let id = self.pages.len() as u64;
            let span = content.len().div_ceil(self.page_size).max(1);
            content.resize(span * self.page_size, 0);
            let (flags, count) = (u16_at(&content, 8).unwrap(), u16_at(&content, 10).unwrap());
            header(&mut content, id, flags, count, (span - 1) as u32);
            for chunk in content.chunks(self.page_size) {
                self.pages.push(chunk.to_vec());
            }
            id
        }

        /// Writes the tree of `pairs`; returns the bucket header value (with the inline
        /// page for [`Layout::Inline`]).
        fn tree(&mut self, pairs: &[(u32, Vec<u8>, Vec<u8>)], layout: &Layout) -> Vec<u8> {
            match layout {
                Layout::Inline => {
                    let mut value = vec![0; BUCKET_HEADER];
                    value.extend_from_slice(&leaf(pairs));
                    value
                }
                Layout::Pages(per_leaf) => {
                    let chunks: Vec<_> = pairs.chunks((*per_leaf).max(1)).collect();
                    let root = if chunks.len() <= 1 {
                        self.place(leaf(pairs))
                    } else {
                        let children: Vec<(Vec<u8>, u64)> =
                            chunks.iter().map(|c| (c[0].1.clone(), self.place(leaf(c)))).collect();
                        let mut page = vec![0; PAGE_HEADER + children.len() * ELEMENT];
                        header(&mut page, 0, BRANCH_PAGE, children.len() as u16, 0);
                        for (i, (key, child)) in children.iter().enumerate() {
                            let at = PAGE_HEADER + i * ELEMENT;
                            let pos = (page.len() - at) as u32;
                            page[at..at + 4].copy_from_slice(&pos.to_le_bytes());
                            page[at + 4..at + 8].copy_from_slice(&(key.len() as u32).to_le_bytes());
                            page[at + 8..at + 16].copy_from_slice(&child.to_le_bytes());
                            page.extend_from_slice(key);
                        }
                        self.place(page)
                    };
                    let mut value = root.to_le_bytes().to_vec();
                    value.extend_from_slice(&[0; 8]);
                    value
                }
            }
        }
    }

    /// Key-value pairs, in key order.
    pub(crate) type Pairs = Vec<(Vec<u8>, Vec<u8>)>;
    /// A bucket to write: its name, layout and pairs.
    pub(crate) type BucketSpec<'a> = (&'a str, Layout, Pairs);

    /// A bbolt file of `page_size` holding `buckets`.
    pub(crate) fn build(page_size: usize, buckets: &[BucketSpec<'_>]) -> Vec<u8> {
        let mut file = File { page_size, pages: vec![vec![0; page_size], vec![0; page_size]] };
        let mut top = Vec::new();
        for (name, layout, pairs) in buckets {
            let pairs: Vec<_> = pairs.iter().map(|(k, v)| (0, k.clone(), v.clone())).collect();
            top.push((BUCKET_LEAF, name.as_bytes().to_vec(), file.tree(&pairs, layout)));
        }
        top.sort_by(|a, b| a.1.cmp(&b.1));
        let root = file.place(leaf(&top));
        let high_water = file.pages.len() as u64;
        for (id, txid) in [(0u64, 7u64), (1, 6)] {
            let page = &mut file.pages[id as usize];
            header(page, id, META_PAGE, 0, 0);
            let m = &mut page[PAGE_HEADER..];
            m[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            m[4..8].copy_from_slice(&VERSION.to_le_bytes());
            m[8..12].copy_from_slice(&(page_size as u32).to_le_bytes());
            m[16..24].copy_from_slice(&root.to_le_bytes());
            m[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
            m[40..48].copy_from_slice(&high_water.to_le_bytes());
            m[48..56].copy_from_slice(&txid.to_le_bytes());
            let sum = fnv1a64(&m[..META_CHECKED]);
            m[56..64].copy_from_slice(&sum.to_le_bytes());
        }
        file.pages.concat()
    }
}

#[cfg(test)]
mod tests {
    use super::writer::{build, Layout};
    use super::*;

    fn pairs(n: usize, value_len: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n).map(|i| (format!("k{i:05}").into_bytes(), vec![i as u8; value_len])).collect()
    }

    fn sample() -> Vec<u8> {
        build(
            512,
            &[
                ("big", Layout::Pages(4), pairs(30, 10)),
                ("huge", Layout::Pages(1), pairs(2, 2000)),
                ("small", Layout::Inline, pairs(3, 5)),
                ("empty", Layout::Pages(10), Vec::new()),
            ],
        )
    }

    #[test]
    fn reads_paged_overflowing_inline_and_empty_buckets() {
        let file = sample();
        assert!(looks_like_bbolt(&file));
        let db = Db::open(&file).unwrap();
        assert_eq!(db.page_size, 512);
        let buckets = db.buckets().unwrap();
        let names: Vec<&[u8]> = buckets.keys().copied().collect();
        assert_eq!(names, [&b"big"[..], b"empty", b"huge", b"small"]);
        for (name, want) in [("big", pairs(30, 10)), ("huge", pairs(2, 2000)), ("small", pairs(3, 5))] {
            let got: Vec<(Vec<u8>, Vec<u8>)> =
                buckets[name.as_bytes()].iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            assert_eq!(got, want, "{name}");
        }
        assert!(buckets[&b"empty"[..]].is_empty());
    }

    #[test]
    fn the_newer_valid_meta_page_wins_and_a_damaged_one_is_skipped() {
        let mut file = sample();
        // Damage meta 0 (the newer): meta 1 is found by probing page sizes.
        file[PAGE_HEADER + 20] ^= 1;
        assert!(Db::open(&file).unwrap().buckets().is_ok());
        // Both damaged: refused.
        file[512 + PAGE_HEADER + 20] ^= 1;
        assert!(matches!(Db::open(&file), Err(EtcdSnapshotError::MetaDamaged)));
    }

    #[test]
    fn foreign_and_other_version_files_are_named() {
        assert!(matches!(Db::open(b"hello"), Err(EtcdSnapshotError::NotBbolt)));
        assert!(matches!(Db::open(&[0; 4096]), Err(EtcdSnapshotError::NotBbolt)));
        let mut file = sample();
        file[PAGE_HEADER + 4] = 3;
        file[512 + PAGE_HEADER + 4] = 3;
        assert!(matches!(Db::open(&file), Err(EtcdSnapshotError::UnsupportedVersion(3))));
    }

    #[test]
    fn truncated_files_and_pages_outside_are_refused() {
        let file = sample();
        assert!(matches!(Db::open(&file[..file.len() - 512]), Err(EtcdSnapshotError::Truncated { .. })));
        assert!(matches!(Db::open(&file[..1000]), Err(EtcdSnapshotError::Truncated { .. })));
    }

    /// Rewrites one page's header field and returns the result of reading every bucket.
    fn with_header(page: usize, at: usize, bytes: &[u8]) -> Result<(), EtcdSnapshotError> {
        let mut file = sample();
        let start = page * 512 + at;
        file[start..start + bytes.len()].copy_from_slice(bytes);
        Db::open(&file)?.buckets().map(|_| ())
    }

    #[test]
    fn damaged_pages_are_refused_with_their_number() {
        let file = sample();
        let db = Db::open(&file).unwrap();
        let root = db.root as usize;
        // The root's header names another page.
        assert!(matches!(with_header(root, 0, &9u64.to_le_bytes()), Err(EtcdSnapshotError::Page { .. })));
        // Unknown flags.
        assert!(matches!(with_header(root, 8, &0x40u16.to_le_bytes()), Err(EtcdSnapshotError::Page { .. })));
        // More elements than the page holds.
        assert!(matches!(with_header(root, 10, &500u16.to_le_bytes()), Err(EtcdSnapshotError::Page { .. })));
        // Overflow past the end.
        assert!(matches!(with_header(root, 12, &1000u32.to_le_bytes()), Err(EtcdSnapshotError::Page { .. })));
        // A key length running off the page.
        assert!(matches!(with_header(root, 16 + 8, &u32::MAX.to_le_bytes()), Err(EtcdSnapshotError::Page { .. })));
    }

    #[test]
    fn cycles_and_shared_pages_are_refused() {
        let file = sample();
        let db = Db::open(&file).unwrap();
        // Find the branch page of "big" and point its second child at the branch itself.
        let branch =
            (2..db.pages as usize).find(|&p| u16_at(&file, p * 512 + 8) == Some(BRANCH_PAGE)).expect("a branch page");
        let child = branch * 512 + PAGE_HEADER + ELEMENT + 8;
        let mut cyclic = file.clone();
        cyclic[child..child + 8].copy_from_slice(&(branch as u64).to_le_bytes());
        assert!(matches!(Db::open(&cyclic).unwrap().buckets(), Err(EtcdSnapshotError::Cycle { .. })));
        // Its second child made equal to its first: one page with two parents.
        let first = u64_at(&file, branch * 512 + PAGE_HEADER + 8).unwrap();
        let mut shared = file.clone();
        shared[child..child + 8].copy_from_slice(&first.to_le_bytes());
        assert!(matches!(Db::open(&shared).unwrap().buckets(), Err(EtcdSnapshotError::Cycle { .. })));
        // A child at a meta page, or past the high-water mark.
        for target in [1u64, 1000] {
            let mut outside = file.clone();
            outside[child..child + 8].copy_from_slice(&target.to_le_bytes());
            assert!(matches!(Db::open(&outside).unwrap().buckets(), Err(EtcdSnapshotError::PageOutside { .. })));
        }
    }

    #[test]
    fn every_single_byte_change_is_an_answer_not_a_panic() {
        let file = sample();
        for at in 0..file.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut damaged = file.clone();
                damaged[at] ^= flip;
                if let Ok(db) = Db::open(&damaged) {
                    let _ = db.buckets();
                }
            }
        }
    }
}
