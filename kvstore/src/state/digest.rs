//! The running digest of applied history: after each command it folds in the command, the
//! revision it left and whether it succeeded. Two replicas with equal digests applied the
//! same history with the same outcomes, which the simulator's oracle relies on.
//!
//! `std`'s default hasher is randomly seeded per process, so the digest uses its own fixed
//! hasher. Integers are fed in little-endian order so that the digest does not depend on the
//! machine's byte order or pointer width.

use crate::command::Command;
use crate::types::Revision;
use std::hash::{Hash, Hasher};

/// The digest of an empty history.
pub(super) const EMPTY: u64 = 0x6c65_6173_656b_7631; // "leasekv1"

/// The digest after applying `command`, which left the store at `revision` and succeeded
/// (`ok`) or was refused.
pub(super) fn fold(previous: u64, command: &Command, revision: Revision, ok: bool) -> u64 {
    let mut hasher = StableHasher::default();
    command.hash(&mut hasher);
    let mut d = mix64(previous ^ hasher.finish());
    d = mix64(d ^ revision as u64);
    mix64(d ^ u64::from(ok))
}

/// SplitMix64's step: a cheap bijective mix with good avalanche, also used to spread
/// chosen lease ids.
pub(super) fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A small fixed hasher: absorbs 8 bytes per SplitMix64 round. Not for untrusted-collision
/// resistance, only for comparing histories produced by the same code.
struct StableHasher {
    state: u64,
}

impl Default for StableHasher {
    fn default() -> Self {
        StableHasher { state: EMPTY }
    }
}

impl StableHasher {
    fn absorb(&mut self, word: u64) {
        self.state = mix64(self.state ^ word);
    }
}

impl Hasher for StableHasher {
    fn finish(&self) -> u64 {
        self.state
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.absorb(u64::from_le_bytes(word));
        }
        let tail = chunks.remainder();
        if !tail.is_empty() {
            let mut word = [0u8; 8];
            word[..tail.len()].copy_from_slice(tail);
            // The tail length in the top byte keeps "ab" and "ab\0" apart.
            word[7] = tail.len() as u8;
            self.absorb(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.absorb(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.absorb(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.absorb(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.absorb(i);
    }
    fn write_u128(&mut self, i: u128) {
        self.absorb(i as u64);
        self.absorb((i >> 64) as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.absorb(i as u64);
    }
    fn write_i8(&mut self, i: i8) {
        self.write_u8(i as u8);
    }
    fn write_i16(&mut self, i: i16) {
        self.write_u16(i as u16);
    }
    fn write_i32(&mut self, i: i32) {
        self.write_u32(i as u32);
    }
    fn write_i64(&mut self, i: i64) {
        self.write_u64(i as u64);
    }
    fn write_i128(&mut self, i: i128) {
        self.write_u128(i as u128);
    }
    fn write_isize(&mut self, i: isize) {
        self.absorb(i as i64 as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::PutRequest;

    fn put(key: &str, value: &str) -> Command {
        Command::Put(PutRequest { key: key.into(), value: value.into(), lease: 0, prev_kv: false })
    }

    #[test]
    fn digest_is_fixed_and_sensitive_to_every_input() {
        let base = fold(EMPTY, &put("a", "1"), 2, true);
        assert_eq!(base, fold(EMPTY, &put("a", "1"), 2, true));
        assert_ne!(base, fold(EMPTY, &put("a", "2"), 2, true));
        assert_ne!(base, fold(EMPTY, &put("a1", ""), 2, true));
        assert_ne!(base, fold(EMPTY, &put("a", "1"), 3, true));
        assert_ne!(base, fold(EMPTY, &put("a", "1"), 2, false));
        assert_ne!(base, fold(1, &put("a", "1"), 2, true));
    }

    #[test]
    fn tail_bytes_are_length_tagged() {
        let digest = |bytes: &[u8]| {
            let mut h = StableHasher::default();
            h.write(bytes);
            h.finish()
        };
        assert_ne!(digest(b"ab"), digest(b"ab\0"));
        assert_ne!(digest(b""), digest(b"\0"));
    }
}
