//! Golden files of every kind of record leasekv-kvstore writes to disk, in
//! `kvstore/tests/golden/disk/v<N>/` (see the README there).
//!
//! For each kind, a function builds a small, deterministic sample value, and its test:
//! 1. decodes the committed file with the production decoder and checks that it gives the
//!    sample back: what an earlier build wrote must stay readable;
//! 2. encodes the sample with the production encoder and checks that the bytes are the
//!    committed file's: an accidental change of an encoding (a field reordered, an enum
//!    variant inserted in the middle, which shifts postcard's variant tags) fails here;
//! 3. decodes the files of every older golden directory too (they only have to decode).
//!
//! `LEASEKV_BLESS_GOLDEN=1` writes the missing files of the current directory ([`CURRENT`])
//! and passes; an existing file is never rewritten, and older directories never written.
//!
//! The kinds: [`log`] (segment header and records, with every command inside a slot),
//! [`sled`] (the [`crate::storage::codec`] frame of everything kept in sled, and
//! [`crate::storage::pieces`]), [`state`] (the state engine's records, the snapshot formats
//! and the backup file).
//!
//! # Unknown fields: what an older node does with a newer writer's record
//!
//! postcard has no field tags or lengths: a struct is its fields one after the other, an
//! enum is a varint variant index then the variant's fields. A field added anywhere but at
//! the very end of the top-level value shifts every byte after it, so an older decoder
//! misreads it; the only field a newer writer can add compatibly is one appended after the
//! last field of the top-level value inside its frame, and only if the older decoder ignores
//! bytes left after the value. A new enum variant is never readable by an older node. What
//! the decoders do with trailing bytes (shown by the `*_trailing_*` tests):
//! - segment log records (`segments/record.rs` `read`): **ignored** (the record's frame
//!   gives its length and checksum, so what follows the known fields is a newer release's
//!   appended field, not damage);
//! - sled records framed by `storage/codec.rs` (snapshot, snapshot file, restart epoch, the
//!   log records of the release before segments): **ignored**, likewise;
//! - state engine records read with `postcard::from_bytes` (keys, size runs, leases, the
//!   `mstate` and `mauth` records): **ignored**, so a field appended at the end of those is
//!   skipped by an older node (which drops it when it rewrites the record: `mstate` at every
//!   flush); a history page is a sequence of change records with no lengths, so bytes
//!   appended to a change are read as the next change: **refused** (or misread);
//! - snapshot formats 3 to 7: **refused** ("unexpected trailing bytes"); formats 8 and 9: bytes
//!   appended inside a frame (e.g. a field after the header's last one) are **ignored**,
//!   since each frame is read with `postcard::from_bytes`;
//! - the backup file: a fixed header (a new field needs a new backup format, which an older
//!   build refuses by number), then the state of the length the header gives, then padding
//!   that is not checked (only hashed): bytes there are ignored.
//!
//! So a field appended at the end of a log record, a sled record, a state engine record
//! other than a history page, or a format 8 or 9 snapshot frame is ignored by an older node;
//! anything else (a new variant, a field elsewhere, a history page's change) needs a new
//! format version, which an older node refuses by number rather than misread.

mod log;
mod sled;
mod state;

use std::fmt::Debug;
use std::path::{Path, PathBuf};

/// The golden directory this build writes and checks byte for byte. Raise it (and add the
/// directory with `LEASEKV_BLESS_GOLDEN=1`) whenever an on-disk format changes on purpose;
/// the directories below it stay as committed, and must keep decoding.
const CURRENT: u32 = 3;

/// The environment variable that lets the tests write the current directory's files.
const BLESS_VAR: &str = "LEASEKV_BLESS_GOLDEN";

/// The directory of golden generation `version`.
fn dir(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/disk").join(format!("v{version}"))
}

/// The golden directories of generations before [`CURRENT`] that exist.
fn older_dirs() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir(CURRENT).parent().expect("a golden directory has a parent")) else {
        return Vec::new();
    };
    let mut dirs: Vec<(u32, PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version: u32 = name.strip_prefix('v')?.parse().ok()?;
            (version < CURRENT).then(|| (version, entry.path()))
        })
        .collect();
    dirs.sort();
    dirs.into_iter().map(|(_, path)| path).collect()
}

/// Whether this run writes the current directory's missing files (never an existing one:
/// a committed file is what an earlier build wrote).
fn blessing() -> bool {
    std::env::var(BLESS_VAR).is_ok_and(|v| v == "1")
}

/// Writes `bytes` as the current directory's `file` (blessing only).
fn bless(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().expect("a golden file has a directory"))
        .unwrap_or_else(|e| panic!("cannot create the golden directory of {}: {e}", path.display()));
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    eprintln!("{BLESS_VAR}: wrote {} ({} bytes)", path.display(), bytes.len());
}

/// Checks one record kind against its golden `file` (see the module docs): `encoded` is the
/// production encoding of `sample`, `decode` the production decoder.
fn check<T: PartialEq + Debug>(file: &str, encoded: &[u8], sample: &T, decode: impl Fn(&[u8]) -> Result<T, String>) {
    // Files of older generations: written by an earlier build, they must still decode. Their
    // sample may have been another value, so only decoding is checked.
    for older in older_dirs() {
        let path = older.join(file);
        if let Ok(bytes) = std::fs::read(&path) {
            if let Err(e) = decode(&bytes) {
                panic!(
                    "{}: a golden file of an earlier format no longer decodes: {e}. A later build must read \
                     what an earlier one wrote: restore the decoder of that format",
                    path.display()
                );
            }
        }
    }
    let path = dir(CURRENT).join(file);
    let golden = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && blessing() => {
            bless(&path, encoded);
            encoded.to_vec()
        }
        Err(e) => panic!(
            "golden file {} cannot be read ({e}). A new record kind's file is written by \
             `{BLESS_VAR}=1 cargo test -p leasekv-kvstore --all-features --lib golden`; commit it",
            path.display()
        ),
    };
    match decode(&golden) {
        Ok(decoded) => assert!(
            decoded == *sample,
            "{}: the committed golden file decodes to another value than the sample. {CHANGED}\n decoded: \
             {decoded:?}\n  sample: {sample:?}",
            path.display()
        ),
        Err(e) => panic!("{}: the committed golden file no longer decodes: {e}. {CHANGED}", path.display()),
    }
    if golden != encoded {
        let at = golden.iter().zip(encoded).position(|(a, b)| a != b).unwrap_or(golden.len().min(encoded.len()));
        panic!(
            "{}: this build encodes the sample differently from the committed golden file ({} bytes here, {} \
             committed; first difference at byte {at}). {CHANGED}",
            path.display(),
            encoded.len(),
            golden.len()
        );
    }
}

/// What to do when a golden check fails.
const CHANGED: &str = "An on-disk encoding changed. If by accident (a field reordered, an enum variant inserted \
                       in the middle, which shifts postcard's variant tags), restore it: files written by an \
                       earlier build must stay readable. If on purpose, raise the record's format version, raise \
                       `CURRENT` in kvstore/src/golden.rs and write the new directory with LEASEKV_BLESS_GOLDEN=1; \
                       never edit the files of an existing golden directory (see kvstore/tests/golden/README.md)";

/// Key and value pairs, as [`pack`] writes them.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Several engine or sled entries as one golden file: `[key length: u32 LE][key][value
/// length: u32 LE][value]` each. Only the golden files use this container; it is not a
/// format of leasekv's.
fn pack(entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in entries {
        for part in [key, value] {
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(part);
        }
    }
    out
}

/// The entries of a [`pack`]ed file.
fn unpack(mut bytes: &[u8]) -> Result<Entries, String> {
    let take = |bytes: &mut &[u8]| -> Result<Vec<u8>, String> {
        let (len, rest) = bytes.split_at_checked(4).ok_or("a length is cut")?;
        let len = u32::from_le_bytes(len.try_into().map_err(|_| "a length is cut")?) as usize;
        let (part, rest) = rest.split_at_checked(len).ok_or("an entry is cut")?;
        *bytes = rest;
        Ok(part.to_vec())
    };
    let mut entries = Vec::new();
    while !bytes.is_empty() {
        let key = take(&mut bytes)?;
        let value = take(&mut bytes)?;
        entries.push((key, value));
    }
    Ok(entries)
}
