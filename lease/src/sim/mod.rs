//! A deterministic, seeded simulator for the election cores.
//!
//! Virtual real time, one drifting monotonic clock per node, a network that delays, loses,
//! duplicates and reorders messages, partitions that heal, crashes and restarts (memory
//! lost, restart epoch kept), voluntary step-downs, membership changes (learners added and
//! promoted, voters removed, removed nodes coming back), and all nodes contending at once. A
//! safety oracle runs after every event; a liveness oracle checks that a quiet, connected
//! majority elects a master within a stated bound. The same seed replays the same run
//! exactly: all randomness comes from one seeded generator and ties in time are broken by
//! insertion order.
//!
//! The clock, queue and network pieces are generic so that the replicated store's
//! simulator can reuse them.

mod clock;
pub mod membership;
mod network;
mod queue;
mod stats;
mod world;

pub use clock::SimClock;
pub use membership::MembershipStats;
pub use network::{DrillHold, Network, NetworkFaults};
pub use queue::EventQueue;
pub use stats::{percentile, Summary};
pub use world::{run_seed, run_seeds, SeedReport, SimConfig, Violation};
