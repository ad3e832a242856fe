//! Deterministic simulator (being written).
