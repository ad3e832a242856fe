//! A deterministic simulator of whole replicas: the election core, the replica core, the
//! state machine and in-memory storage with crash semantics, per node, driven by seeded
//! virtual time, with clients issuing random operations and oracles checking the results.
//!
//! Faults: message loss, duplication, delay and reordering; partitions; crashes of one node
//! or of every node at once (unsynced writes lost); process pauses; step-downs; clock drift
//! within the configured bound. The same seed replays the same run exactly.
//!
//! Oracles (each has a negative control in [`crate::log::LogBreakage`]):
//! - linearizability of the client history ([`linearizability`]) — `follower-reads`;
//! - no acknowledged write lost, even after every node crashed — `early-ack`;
//! - replicas agree: equal applied slot, equal state digest — `skip-phase1`;
//! - leases: never expired earlier than TTL/(1+ε) after the last acknowledged keepalive,
//!   and gone by the end of the quiet phase — `deposed-expiry`;
//! - watch ([`watch_oracle`]): every watch response against the applied history — ordered,
//!   unique, reliable, atomic, resumable, bookmarkable, filtered, IsCreate, PrevKV — with
//!   one negative control per property group in [`crate::watch::WatchBreakage`].

pub mod linearizability;
mod oracle;
pub mod watch_oracle;
mod workload;
mod world;

pub use oracle::{Violation, ViolationKind};
pub use world::{run_seed, run_seeds, ClientBreakage, KvSimConfig, SeedReport, SimSummary};
