//! leasekv: a small replicated key-value store whose master is elected with PaxosLease.
//!
//! This umbrella package owns the cluster-level `tests/` and `benches/`; the code lives in
//! the member crates. See README.md for how to run the product and the tests.

pub use leasekv_lease as lease;
