//! What every fuzz target shares (docs/fuzzing.md): the committed corpus of seed inputs,
//! the number of generated cases, and byte- and text-level mutations of the seeds.
//!
//! Included by path (`#[path = ".../fuzz/support.rs"]`) into each crate's test-only fuzz
//! module, so the three crates share it without a crate of its own. proptest is the
//! fuzzer: there is no nightly toolchain for cargo-fuzz, and proptest runs inside
//! `cargo test`, shrinks what it finds and replays it deterministically.

#![allow(dead_code)]

use proptest::collection::vec;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

/// The environment variable that sets how many generated cases each target runs; without
/// it a target runs its own CI-sized count.
pub const CASES_VAR: &str = "PROPTEST_CASES";

/// `fuzz/corpus/<target>` of the repository, from a crate's manifest directory (every crate
/// is one level below the root).
pub fn corpus_dir(crate_dir: &str, target: &str) -> PathBuf {
    Path::new(crate_dir).join("..").join("fuzz").join("corpus").join(target)
}

/// Every file of `fuzz/corpus/<target>`, by name: (name, contents). Fails the test when
/// the directory is missing or empty, since the corpus is committed with its target.
pub fn corpus(crate_dir: &str, target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(crate_dir, target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("corpus {} cannot be read: {e}", dir.display()));
    let mut files: Vec<(String, Vec<u8>)> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.path().is_file())
        .map(|entry| {
            let path = entry.path();
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{} cannot be read: {e}", path.display()));
            (entry.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {} is empty: commit seed inputs with the target", dir.display());
    files
}

/// Writes one seed file into `fuzz/corpus/<target>` (the ignored `write_corpus` tests
/// regenerate the binary seeds with it).
pub fn write_seed(crate_dir: &str, target: &str, name: &str, bytes: &[u8]) {
    let dir = corpus_dir(crate_dir, target);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{} cannot be created: {e}", dir.display()));
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{} cannot be written: {e}", path.display()));
}

/// How many generated cases a target runs: [`CASES_VAR`] if set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var(CASES_VAR).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// proptest's configuration for a target: [`cases`], and no regression files written next
/// to the sources (each finding becomes a named regression test instead).
pub fn config(default_cases: u32) -> ProptestConfig {
    ProptestConfig { cases: cases(default_cases), failure_persistence: None, ..ProptestConfig::default() }
}

/// One edit of a seed. Positions are taken modulo the input's length.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// XOR one byte with a non-zero mask.
    Flip(usize, u8),
    /// Overwrite one byte (often a boundary value: 0, 0x7f, 0x80, 0xff).
    Set(usize, u8),
    /// Insert bytes.
    Insert(usize, Vec<u8>),
    /// Remove up to n bytes.
    Remove(usize, usize),
    /// Keep only the first n bytes.
    Truncate(usize),
    /// Repeat a slice of up to n bytes in place.
    Duplicate(usize, usize),
}

fn boundary_byte() -> impl Strategy<Value = u8> {
    prop_oneof![Just(0u8), Just(0x7f), Just(0x80), Just(0xff), Just(1), any::<u8>()]
}

/// A byte-level mutation; `dictionary` adds inserts of known-tricky tokens.
pub fn mutation(dictionary: &'static [&'static str]) -> BoxedStrategy<Mutation> {
    let plain = prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(at, mask)| Mutation::Flip(at, mask)),
        (any::<usize>(), boundary_byte()).prop_map(|(at, byte)| Mutation::Set(at, byte)),
        (any::<usize>(), vec(any::<u8>(), 1..9)).prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        (any::<usize>(), 1usize..17).prop_map(|(at, n)| Mutation::Remove(at, n)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 1usize..33).prop_map(|(at, n)| Mutation::Duplicate(at, n)),
    ];
    if dictionary.is_empty() {
        return plain.boxed();
    }
    let token = (any::<usize>(), prop::sample::select(dictionary))
        .prop_map(|(at, token)| Mutation::Insert(at, token.as_bytes().to_vec()));
    prop_oneof![3 => plain, 1 => token].boxed()
}

/// `seed` with `mutations` applied in order.
pub fn apply(seed: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for m in mutations {
        let at = |pos: usize, len: usize| if len == 0 { 0 } else { pos % len };
        match m {
            Mutation::Flip(pos, mask) if !out.is_empty() => {
                let i = at(*pos, out.len());
                out[i] ^= mask;
            }
            Mutation::Set(pos, byte) if !out.is_empty() => {
                let i = at(*pos, out.len());
                out[i] = *byte;
            }
            Mutation::Insert(pos, bytes) => {
                let i = at(*pos, out.len() + 1);
                out.splice(i..i, bytes.iter().copied());
            }
            Mutation::Remove(pos, n) if !out.is_empty() => {
                let i = at(*pos, out.len());
                let end = (i + n).min(out.len());
                out.drain(i..end);
            }
            Mutation::Truncate(n) => {
                let keep = at(*n, out.len() + 1);
                out.truncate(keep);
            }
            Mutation::Duplicate(pos, n) if !out.is_empty() => {
                let i = at(*pos, out.len());
                let end = (i + n).min(out.len());
                let slice = out[i..end].to_vec();
                out.splice(end..end, slice);
            }
            _ => {}
        }
    }
    out
}

/// Inputs made from `seeds` by one to six mutations each.
pub fn mutated(seeds: Vec<Vec<u8>>, dictionary: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    assert!(!seeds.is_empty(), "mutation needs at least one seed");
    (0..seeds.len(), vec(mutation(dictionary), 1..7)).prop_map(move |(i, m)| apply(&seeds[i], &m))
}

/// Inputs for a byte decoder: mutated seeds most of the time, random bytes otherwise.
pub fn inputs(seeds: Vec<Vec<u8>>, dictionary: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![4 => mutated(seeds, dictionary), 1 => vec(any::<u8>(), 0..256)]
}

/// Runs `check` on every corpus file of `target`, naming the file if it panics.
pub fn replay(crate_dir: &str, target: &str, mut check: impl FnMut(&[u8])) -> Vec<Vec<u8>> {
    let files = corpus(crate_dir, target);
    for (name, bytes) in &files {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(bytes)));
        if let Err(panic) = outcome {
            eprintln!("fuzz/corpus/{target}/{name} failed");
            std::panic::resume_unwind(panic);
        }
    }
    files.into_iter().map(|(_, bytes)| bytes).collect()
}
