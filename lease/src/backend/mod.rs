//! The contract between the store and the election: [`ElectionBackend`].
//!
//! A backend is a protocol core ([`ElectionCore`]) driven by tokio: it feeds the core the
//! messages its [`Transport`] delivers and the timers it asks for, sends what the core
//! produces, and publishes every change of mastership. The store sees only this trait, so
//! PaxosLease and the lease tracker are interchangeable by configuration.

mod driver;
mod transport;

#[cfg(feature = "clock-rate")]
pub mod clock_rate;
pub use driver::{DrivenBackend, MonotonicClock};
pub use transport::{Inbox, LocalNetwork, LocalTransport, Transport};

use crate::ballot::Term;
use crate::config::{ConfigError, LeaseConfig};
use crate::core::ElectionCore;
use crate::epoch::RestartEpoch;
use crate::ids::NodeId;
use crate::naive::NaiveMajorityElection;
use crate::paxos::PaxosLeaseElection;
use crate::time::Instant;
use crate::tracker::LeaseTrackerElection;
use async_trait::async_trait;
use std::fmt;
use std::str::FromStr;
use thiserror::Error;
use tokio::sync::watch;

/// What the store needs to know about the election at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElectionStatus {
    /// `Some` while this node is master: its term and the local monotonic instant
    /// (exclusive) until which it may act as master.
    pub master: Option<crate::core::Mastership>,
    /// The node believed to be master, for redirecting clients (may be stale).
    pub hint: Option<NodeId>,
}

impl ElectionStatus {
    /// Whether this node is master at `now` (a reading of the backend's clock).
    pub fn is_master_at(&self, now: Instant) -> bool {
        self.master.is_some_and(|m| now < m.valid_until)
    }

    /// The current term, if master.
    pub fn term(&self) -> Option<Term> {
        self.master.map(|m| m.term)
    }
}

/// How often this node's own mastership changed, by kind, since the backend started: for
/// the node's metrics (a master that keeps losing its lease to expiry is failing to renew).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ElectionCounts {
    /// Tenures begun.
    pub elected: u64,
    /// Lease extensions within a tenure.
    pub extended: u64,
    /// Tenures ended because the lease ran out before it was extended.
    pub expired: u64,
    /// Tenures given up (step-down, shutdown).
    pub released: u64,
    /// Rounds for mastership abandoned (PaxosLease: pre-empted, rejected or unanswered).
    pub failed_rounds: u64,
}

impl ElectionCounts {
    /// Counts one change.
    pub fn count(&mut self, change: &crate::core::LeadershipChange) {
        use crate::core::{LeadershipChange, LossReason};
        match change {
            LeadershipChange::Elected { .. } => self.elected += 1,
            LeadershipChange::Extended { .. } => self.extended += 1,
            LeadershipChange::Lost { reason: LossReason::Expired, .. } => self.expired += 1,
            LeadershipChange::Lost { reason: LossReason::Released, .. } => self.released += 1,
        }
    }
}

/// Why a backend operation failed.
#[derive(Debug, Error)]
pub enum ElectionError {
    /// The backend was stopped.
    #[error("election backend is stopped")]
    Stopped,
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The restart epoch could not be stored.
    #[error(transparent)]
    Epoch(#[from] crate::epoch::EpochError),
}

/// The election as the store uses it.
#[async_trait]
pub trait ElectionBackend: Send + Sync {
    /// The backend's configuration name (`paxoslease`, `lease-tracker`).
    fn name(&self) -> &'static str;
    /// This node.
    fn node_id(&self) -> NodeId;
    /// The status right now: "am I master, until which local instant, in which term?".
    fn status(&self) -> ElectionStatus;
    /// The backend's clock, the one `valid_until` is measured with.
    fn now(&self) -> Instant;
    /// A receiver that sees every change of status (mastership gained, extended, lost;
    /// hint changed).
    fn subscribe(&self) -> watch::Receiver<ElectionStatus>;
    /// This node's mastership changes so far (zeros for a backend that does not count).
    fn counts(&self) -> ElectionCounts {
        ElectionCounts::default()
    }
    /// Gives up mastership at once so another node takes over (it may compete again after
    /// a short hold-off).
    async fn step_down(&self) -> Result<(), ElectionError>;
    /// Gives up mastership so that `to` takes over next (see
    /// [`crate::core::ElectionCore::hand_over`]); returns once the release went out.
    async fn hand_over(&self, to: NodeId) -> Result<(), ElectionError>;
    /// Gives up mastership and stops: the graceful shutdown. Idempotent.
    async fn stop(&self) -> Result<(), ElectionError>;
    /// Hands the core the configuration this node applied from the log (see
    /// [`crate::core::ElectionCore::set_configuration`]) without waiting: the core takes it
    /// before its next step (a later call replaces one it has not taken yet). The caller
    /// (the node loop) must not wait for the election's task.
    fn configure(&self, configuration: crate::members::Configuration);
    /// Turns this node's candidacy on or off (see
    /// [`crate::core::ElectionCore::set_candidacy`]) without waiting: the core takes it
    /// before its next step (a later call replaces one it has not taken yet). The caller
    /// (the node loop) must not wait for the election's task.
    fn set_candidacy(&self, candidate: bool);
    /// The highest configuration epoch the core saw in a peer's message, as of its latest
    /// step (see [`crate::core::ElectionCore::configuration_seen`]).
    fn configuration_seen(&self) -> u64;
    /// Rule 5 of docs/membership.md, as the core last reported it (see
    /// [`crate::core::ElectionCore::change_allowed_after`]); the instant is on
    /// [`ElectionBackend::now`]'s clock.
    fn change_allowed_after(&self) -> Option<(u64, Instant)>;
}

/// The election backends, selected by name in a node's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// PaxosLease: every node is proposer and acceptor.
    PaxosLease,
    /// A central lease tracker on one node, no Paxos (comparison).
    LeaseTracker,
    /// The naive majority vote of the paper's introduction (simulator only).
    NaiveMajority,
}

impl BackendKind {
    /// The backends a node's configuration may name.
    pub const CONFIGURABLE: [BackendKind; 2] = [BackendKind::PaxosLease, BackendKind::LeaseTracker];

    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::PaxosLease => "paxoslease",
            BackendKind::LeaseTracker => "lease-tracker",
            BackendKind::NaiveMajority => "naive-majority",
        }
    }

    /// Parses a name, including the simulator-only `naive-majority`.
    pub fn from_sim_name(name: &str) -> Result<BackendKind, UnknownBackend> {
        if name == BackendKind::NaiveMajority.name() {
            return Ok(BackendKind::NaiveMajority);
        }
        name.parse().map_err(|_| UnknownBackend {
            name: name.to_string(),
            valid: "paxoslease, lease-tracker, naive-majority (simulator only)",
        })
    }

    /// Builds the protocol core of node `me`. `tracker` names the tracker node of the
    /// lease-tracker backend (default: the lowest id in `peers`).
    #[allow(clippy::too_many_arguments)]
    pub fn build_core(
        self,
        me: NodeId,
        peers: &[NodeId],
        tracker: Option<NodeId>,
        config: LeaseConfig,
        epoch: RestartEpoch,
        now: Instant,
        seed: u64,
    ) -> Result<Box<dyn ElectionCore>, ConfigError> {
        Ok(match self {
            BackendKind::PaxosLease => Box::new(PaxosLeaseElection::new(me, peers, config, epoch, now, seed)?),
            BackendKind::LeaseTracker => {
                let tracker = tracker.or_else(|| peers.iter().copied().min()).unwrap_or(me);
                Box::new(LeaseTrackerElection::new(me, peers, tracker, config, epoch, now, seed)?)
            }
            BackendKind::NaiveMajority => Box::new(NaiveMajorityElection::new(me, peers, config, epoch, now, seed)?),
        })
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A backend name that is not one of the valid ones.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown election backend '{name}': valid backends are {valid}")]
pub struct UnknownBackend {
    /// The name given.
    pub name: String,
    /// The valid names.
    pub valid: &'static str,
}

impl FromStr for BackendKind {
    type Err = UnknownBackend;

    /// Parses a configuration name; only `paxoslease` and `lease-tracker` are accepted.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BackendKind::CONFIGURABLE
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownBackend { name: s.to_string(), valid: "paxoslease, lease-tracker" })
    }
}

impl ElectionCore for Box<dyn ElectionCore> {
    fn id(&self) -> NodeId {
        (**self).id()
    }
    fn handle_message(&mut self, now: Instant, from: NodeId, msg: crate::message::ElectionMessage) {
        (**self).handle_message(now, from, msg)
    }
    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn take_output(&mut self) -> crate::core::Output {
        (**self).take_output()
    }
    fn mastership(&self, now: Instant) -> Option<crate::core::Mastership> {
        (**self).mastership(now)
    }
    fn master_hint(&self, now: Instant) -> Option<NodeId> {
        (**self).master_hint(now)
    }
    fn step_down(&mut self, now: Instant) {
        (**self).step_down(now)
    }
    fn shut_down(&mut self, now: Instant) {
        (**self).shut_down(now)
    }
    fn set_candidacy(&mut self, now: Instant, candidate: bool) {
        (**self).set_candidacy(now, candidate)
    }
    fn hand_over(&mut self, now: Instant, to: NodeId) {
        (**self).hand_over(now, to)
    }
    fn failed_rounds(&self) -> u64 {
        (**self).failed_rounds()
    }
    fn set_configuration(&mut self, now: Instant, configuration: &crate::members::Configuration) {
        (**self).set_configuration(now, configuration)
    }
    fn change_allowed_after(&self) -> Option<(u64, Instant)> {
        (**self).change_allowed_after()
    }
    fn configuration_seen(&self) -> u64 {
        (**self).configuration_seen()
    }
}
