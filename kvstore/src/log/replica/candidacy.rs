//! Whether this node should offer itself as master: the replica's side of the election's
//! candidacy switch (`ElectionCore::set_candidacy`).
//!
//! A node that wins mastership must take over the log (phase 1 over the unchosen slots)
//! before it serves anything, and it can only do so from a state that is close to the
//! cluster's. A member far behind, or one whose snapshot install failed (a full disk), that
//! wins the election holds it without ever becoming ready: linearizable reads fail
//! cluster-wide with "leader changed" for as long as it keeps winning (seen for 2.5 minutes
//! after a disk-full member restarted). So the node withdraws while
//! - a master told it of a commit index more than [`CATCH_UP_SLACK`] slots past what it
//!   applied, lately (an announcement is forgotten after [`CandidacyConfig::announcement_memory`],
//!   so that members left behind by a master that died compete again: someone must);
//! - its last snapshot install failed (until one succeeds or it caught up otherwise);
//! - it held mastership for [`CandidacyConfig::ready_within`] without becoming ready: it
//!   gives mastership up and stays out for [`CandidacyConfig::hold_off`];
//! - a CORRUPT alarm names it and some other voter is not named: a master refuses every read
//!   from a state the corruption check found wrong, so while it is master every
//!   linearizable read of the cluster fails (those not answered under a read lease).
//!   When every voter is named (no hash had a majority), nobody withdraws: some master must
//!   be there to take the disarm.
//!
//! Withdrawing never touches safety (the election's and the log's rules do not depend on
//! who competes) and the node keeps voting, so the others elect among themselves.

use super::super::types::Slot;
use leasekv_lease::Instant;
use std::time::Duration;

/// Slots a member may be behind a master's announced commit and still compete: the same
/// slack a learner is promoted with (a few batches in flight are normal under load).
pub(super) const CATCH_UP_SLACK: u64 = super::LEARNER_SLACK_SLOTS;

/// The time bounds of the candidacy decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CandidacyConfig {
    /// How long a master may hold mastership without becoming ready before it gives it up.
    pub ready_within: Duration,
    /// How long a master that gave up for not becoming ready stays out of the election.
    pub hold_off: Duration,
    /// How long a master's announced commit index counts: past it, a member that heard of
    /// no newer one competes again however far behind it is.
    pub announcement_memory: Duration,
}

impl CandidacyConfig {
    /// Bounds for an election lease time `lease_time`: a ready bound of five lease times
    /// (at least 5 s: a new master's phase 1 and barrier take a few round trips, and applying
    /// a backlog more), a hold-off of twice that, and an announcement memory of one lease
    /// time (a new master needs that long to be elected anyway).
    pub fn for_lease_time(lease_time: Duration) -> Self {
        let ready_within = lease_time.saturating_mul(5).max(Duration::from_secs(5));
        CandidacyConfig { ready_within, hold_off: ready_within.saturating_mul(2), announcement_memory: lease_time }
    }
}

/// Why this node does not offer itself as master now (shown by `/health` and
/// `Maintenance.Status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Withdrawal {
    /// A master announced slots this node has not applied yet.
    CatchingUp {
        /// The slot this node applied through.
        applied: Slot,
        /// The commit index the master announced.
        commit: Slot,
    },
    /// The last snapshot sent to this node could not be installed.
    InstallFailed {
        /// What went wrong, as the installer said it (e.g. no space left on the device).
        reason: String,
    },
    /// A CORRUPT alarm names this node: its data disagrees with the other members'.
    Corrupt,
    /// This node held mastership without becoming ready and gave it up.
    NotReady {
        /// How long it held mastership.
        held: Duration,
        /// How much longer it stays out.
        remaining: Duration,
    },
}

impl std::fmt::Display for Withdrawal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Withdrawal::CatchingUp { applied, commit } => {
                write!(f, "catching up: applied slot {applied} of the master's {commit}; not a candidate for master until caught up")
            }
            Withdrawal::InstallFailed { reason } => write!(
                f,
                "the snapshot from the master could not be installed ({reason}); not a candidate for master, asking again (free disk space if it is full)"
            ),
            Withdrawal::Corrupt => write!(
                f,
                "a CORRUPT alarm names this member (its data disagrees with the other members'); not a candidate for master until its data is replaced and the alarm disarmed"
            ),
            Withdrawal::NotReady { held, remaining } => write!(
                f,
                "gave mastership up after {:.1} s without taking over the log; not a candidate for {:.1} s more",
                held.as_secs_f64(),
                remaining.as_secs_f64()
            ),
        }
    }
}

/// What the candidacy decision remembers (see the module docs).
#[derive(Debug)]
pub(super) struct Candidacy {
    config: CandidacyConfig,
    /// The highest commit index a master announced, and when it was last announced.
    announced: Option<(Slot, Instant)>,
    /// Why the last snapshot install failed, if none succeeded since.
    install_failure: Option<String>,
    /// Since when this node is master without being ready.
    unready_since: Option<Instant>,
    /// After giving up an unready mastership: held for how long, and out until when.
    given_up: Option<(Duration, Instant)>,
}

impl Candidacy {
    pub(super) fn new(config: CandidacyConfig) -> Self {
        Candidacy { config, announced: None, install_failure: None, unready_since: None, given_up: None }
    }

    /// A master announced that every slot through `commit` is chosen.
    pub(super) fn announced(&mut self, now: Instant, commit: Slot) {
        let highest = self.announced.map_or(commit, |(c, _)| c.max(commit));
        self.announced = Some((highest, now));
    }

    /// A snapshot install failed for `reason`.
    pub(super) fn install_failed(&mut self, reason: String) {
        self.install_failure = Some(reason);
    }

    /// A snapshot was installed.
    pub(super) fn installed(&mut self) {
        self.install_failure = None;
    }

    /// This node's mastership as of `now`: `master` whether it holds it, `ready` whether it
    /// took over the log. Starts, ends or checks the ready bound.
    pub(super) fn mastership(&mut self, now: Instant, master: bool, ready: bool) {
        if !master || ready {
            self.unready_since = None;
            return;
        }
        let since = *self.unready_since.get_or_insert(now);
        let held = now.saturating_since(since);
        if held >= self.config.ready_within {
            self.unready_since = None;
            self.given_up = Some((held, now.saturating_add(self.config.hold_off)));
        }
    }

    /// Why this node should not compete at `now`, having applied through `applied`; `None`:
    /// it competes. Forgets what no longer holds.
    pub(super) fn withdrawal(&mut self, now: Instant, applied: Slot) -> Option<Withdrawal> {
        if self.announced.is_some_and(|(_, at)| now >= at.saturating_add(self.config.announcement_memory)) {
            self.announced = None;
        }
        if self.given_up.is_some_and(|(_, until)| now >= until) {
            self.given_up = None;
        }
        let behind = self.behind(applied);
        if self.install_failure.is_some() && self.announced.is_some() && behind.is_none() {
            // Caught up some other way (entries from the log, a later install).
            self.install_failure = None;
        }
        if let Some(reason) = &self.install_failure {
            return Some(Withdrawal::InstallFailed { reason: reason.clone() });
        }
        if let Some((held, until)) = self.given_up {
            return Some(Withdrawal::NotReady { held, remaining: until.saturating_since(now) });
        }
        behind.map(|(commit, _)| Withdrawal::CatchingUp { applied, commit })
    }

    /// Whether this node, having applied through `applied`, is behind the commit index a
    /// master announced lately by more than the slack, or its last snapshot install failed:
    /// its state is not the cluster's yet (it asks for no read lease either).
    pub(super) fn catching_up(&self, applied: Slot) -> bool {
        self.install_failure.is_some() || self.behind(applied).is_some()
    }

    /// The announcement that `applied` is more than the slack behind, if any.
    fn behind(&self, applied: Slot) -> Option<(Slot, Instant)> {
        self.announced.filter(|(commit, _)| *commit > applied.saturating_add(CATCH_UP_SLACK))
    }

    /// When the decision may change by time alone: the ready bound runs out, the hold-off
    /// ends, an announcement is forgotten.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        [
            self.unready_since.map(|since| since.saturating_add(self.config.ready_within)),
            self.given_up.map(|(_, until)| until),
            self.announced.map(|(_, at)| at.saturating_add(self.config.announcement_memory)),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn config() -> CandidacyConfig {
        CandidacyConfig {
            ready_within: Duration::from_secs(5),
            hold_off: Duration::from_secs(10),
            announcement_memory: Duration::from_secs(2),
        }
    }

    #[test]
    fn a_member_far_behind_a_live_master_withdraws_until_caught_up_or_the_master_is_silent() {
        let mut c = Candidacy::new(config());
        assert_eq!(c.withdrawal(at(0), 0), None, "a fresh node competes");
        c.announced(at(0), 9_769);
        assert_eq!(c.withdrawal(at(1), 200), Some(Withdrawal::CatchingUp { applied: 200, commit: 9_769 }));
        assert_eq!(c.withdrawal(at(1), 9_769 - CATCH_UP_SLACK), None, "within the slack it competes");
        // The master goes silent: after the memory the member competes again.
        assert!(c.withdrawal(at(1_999), 200).is_some());
        assert_eq!(c.next_deadline(), Some(at(2_000)));
        assert_eq!(c.withdrawal(at(2_000), 200), None);
    }

    #[test]
    fn a_failed_install_withdraws_until_an_install_or_the_log_catches_up() {
        let mut c = Candidacy::new(config());
        c.announced(at(0), 1_000);
        c.install_failed("No space left on device".into());
        let w = c.withdrawal(at(1), 10).expect("withdrawn");
        assert!(w.to_string().contains("No space left on device"), "{w}");
        // Still withdrawn when the master is silent: the node has nothing to serve from.
        assert!(matches!(c.withdrawal(at(5_000), 10), Some(Withdrawal::InstallFailed { .. })));
        c.installed();
        assert_eq!(c.withdrawal(at(5_001), 10), None);
        c.install_failed("again".into());
        c.announced(at(6_000), 1_000);
        assert_eq!(c.withdrawal(at(6_001), 1_000), None, "caught up through the log");
    }

    #[test]
    fn a_master_that_does_not_become_ready_gives_up_and_holds_off() {
        let mut c = Candidacy::new(config());
        c.mastership(at(0), true, false);
        assert_eq!(c.next_deadline(), Some(at(5_000)));
        c.mastership(at(4_999), true, false);
        assert_eq!(c.withdrawal(at(4_999), 0), None);
        c.mastership(at(5_000), true, false);
        let w = c.withdrawal(at(5_000), 0);
        assert_eq!(w, Some(Withdrawal::NotReady { held: Duration::from_secs(5), remaining: Duration::from_secs(10) }));
        c.mastership(at(5_001), false, false);
        assert!(c.withdrawal(at(14_999), 0).is_some());
        assert_eq!(c.withdrawal(at(15_000), 0), None, "competes again after the hold-off");
        // A master that becomes ready in time keeps it.
        c.mastership(at(20_000), true, false);
        c.mastership(at(21_000), true, true);
        c.mastership(at(30_000), true, true);
        assert_eq!(c.withdrawal(at(30_000), 0), None);
    }
}
