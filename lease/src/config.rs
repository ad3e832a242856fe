//! Lease timing configuration and its validation.

use crate::time::scale;
use std::time::Duration;
use thiserror::Error;

/// Timing of one node's lease instances. Every node of a cluster must use the same
/// `max_lease_time`; the other values may differ per node.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseConfig {
    /// T: how long a proposer asks the acceptors to hold its lease.
    pub lease_time: Duration,
    /// M: the global maximum lease time. A restarted acceptor stays silent for M, and every
    /// T must be strictly smaller, so that a restart can never make an acceptor forget a
    /// lease that is still running.
    pub max_lease_time: Duration,
    /// ε: the bound on clock drift. Every node's monotonic clock runs at a rate within
    /// [1-ε, 1+ε] of real time. Must be in [0, 0.1].
    pub drift_bound: f64,
    /// Subtracted from the holder's validity after the drift correction, to absorb the
    /// rounding of timers and the scheduling delay of the driver.
    pub safety_margin: Duration,
    /// How long after a successful round the holder starts extending its lease. Must leave
    /// room for a few attempts before the lease runs out.
    pub renew_interval: Duration,
    /// How long a prepare or propose round waits for a majority before it is abandoned.
    pub round_timeout: Duration,
    /// Lower bound of the random back-off after a failed round.
    pub backoff_min: Duration,
    /// Upper bound of the random back-off after a failed round.
    pub backoff_max: Duration,
    /// After a voluntary release, how long this node stays out of the contest so that
    /// another node can take over.
    pub step_down_hold: Duration,
    /// Deliberately broken rules, for the simulator's negative controls only.
    #[cfg(feature = "negative-controls")]
    #[doc(hidden)]
    pub breakage: Breakage,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig::with_lease_time(Duration::from_millis(1000))
    }
}

impl LeaseConfig {
    /// Defaults derived from the lease time T: M = 1.25 T, renewal every T/4, rounds
    /// abandoned after T/10, back-off between T/1000 and T/10, drift bound 1%.
    pub fn with_lease_time(lease_time: Duration) -> Self {
        LeaseConfig {
            lease_time,
            max_lease_time: lease_time + lease_time / 4,
            drift_bound: 0.01,
            safety_margin: Duration::from_millis(1),
            renew_interval: lease_time / 4,
            round_timeout: lease_time / 10,
            backoff_min: lease_time / 1000,
            backoff_max: lease_time / 10,
            step_down_hold: lease_time / 10,
            #[cfg(feature = "negative-controls")]
            breakage: Breakage::None,
        }
    }

    /// Whether the negative control `breakage` is on. Without the `negative-controls`
    /// feature there is no control to turn on: this is the constant `false` and the broken
    /// branches compile away.
    #[inline(always)]
    pub fn broken(&self, breakage: Breakage) -> bool {
        #[cfg(feature = "negative-controls")]
        {
            self.breakage == breakage
        }
        #[cfg(not(feature = "negative-controls"))]
        {
            let _ = breakage;
            false
        }
    }

    /// How long the holder believes in its lease, counted by its own clock from the moment
    /// it started its timer (before sending the ProposeRequest):
    ///
    /// ```text
    /// validity = T · (1 - ε) / (1 + ε) - safety_margin
    /// ```
    ///
    /// Why: the holder's clock may run slow (rate 1-ε), so its local T' lasts up to
    /// T'/(1-ε) of real time. An acceptor started its own timer of T later, and its clock
    /// may run fast (rate 1+ε), so it forgets the lease no earlier than T/(1+ε) of real time
    /// after the holder's start. Requiring T'/(1-ε) ≤ T/(1+ε) gives the formula.
    pub fn holder_validity(&self) -> Duration {
        if self.broken(Breakage::NoDriftMargin) {
            return self.lease_time;
        }
        let eps = self.drift_bound;
        scale(self.lease_time, (1.0 - eps) / (1.0 + eps)).saturating_sub(self.safety_margin)
    }

    /// A local duration that is guaranteed to cover `d` as measured by any other node's
    /// clock: `d · (1 + ε) / (1 - ε)`, rounded up by a millisecond.
    pub fn cover_remote(&self, d: Duration) -> Duration {
        let eps = self.drift_bound;
        scale(d, (1.0 + eps) / (1.0 - eps)) + Duration::from_millis(1)
    }

    /// Checks the rules that safety and liveness depend on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_time.is_zero() {
            return Err(ConfigError::ZeroLeaseTime);
        }
        if self.lease_time >= self.max_lease_time {
            return Err(ConfigError::LeaseNotBelowMax {
                lease_time: self.lease_time,
                max_lease_time: self.max_lease_time,
            });
        }
        if !(0.0..=0.1).contains(&self.drift_bound) {
            return Err(ConfigError::DriftOutOfRange(self.drift_bound));
        }
        let validity = self.holder_validity();
        if validity.is_zero() {
            return Err(ConfigError::NoValidityLeft {
                lease_time: self.lease_time,
                drift_bound: self.drift_bound,
                safety_margin: self.safety_margin,
            });
        }
        // Extension must start early enough for at least two rounds before expiry.
        if self.renew_interval.is_zero() || self.renew_interval + 2 * self.round_timeout >= validity {
            return Err(ConfigError::RenewTooLate {
                renew_interval: self.renew_interval,
                round_timeout: self.round_timeout,
                validity,
            });
        }
        if self.round_timeout.is_zero() {
            return Err(ConfigError::ZeroRoundTimeout);
        }
        if self.backoff_min > self.backoff_max {
            return Err(ConfigError::BackoffRange { min: self.backoff_min, max: self.backoff_max });
        }
        Ok(())
    }
}

/// A lease configuration that cannot work, with what is allowed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    /// T = 0.
    #[error("lease time must be greater than zero")]
    ZeroLeaseTime,
    /// T ≥ M.
    #[error(
        "lease time ({lease_time:?}) must be strictly less than max lease time ({max_lease_time:?}): \
         a restarted node stays silent for the max lease time, which must outlast every lease"
    )]
    LeaseNotBelowMax {
        /// The configured T.
        lease_time: Duration,
        /// The configured M.
        max_lease_time: Duration,
    },
    /// ε outside [0, 0.1].
    #[error("drift bound {0} is out of range: allowed is 0 to 0.1 (0% to 10% clock rate error)")]
    DriftOutOfRange(f64),
    /// The drift correction and margin eat the whole lease.
    #[error(
        "lease time {lease_time:?} leaves no validity after the drift bound {drift_bound} and \
         safety margin {safety_margin:?}; use a longer lease time"
    )]
    NoValidityLeft {
        /// The configured T.
        lease_time: Duration,
        /// The configured ε.
        drift_bound: f64,
        /// The configured margin.
        safety_margin: Duration,
    },
    /// Renewal would start too close to expiry.
    #[error(
        "renew interval {renew_interval:?} plus two round timeouts ({round_timeout:?} each) must be \
         less than the holder's validity {validity:?}, so the lease is extended well before it expires"
    )]
    RenewTooLate {
        /// The configured renewal interval.
        renew_interval: Duration,
        /// The configured round timeout.
        round_timeout: Duration,
        /// The holder's validity derived from T, ε and the margin.
        validity: Duration,
    },
    /// Round timeout of zero.
    #[error("round timeout must be greater than zero")]
    ZeroRoundTimeout,
    /// Back-off bounds reversed.
    #[error("back-off minimum {min:?} is greater than its maximum {max:?}")]
    BackoffRange {
        /// Configured minimum.
        min: Duration,
        /// Configured maximum.
        max: Duration,
    },
}

/// One deliberately broken safety rule. Exists only so that the simulator can prove that
/// its safety oracle catches each kind of mistake (a negative control); never set it in a
/// real deployment (a build without the `negative-controls` feature cannot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Breakage {
    /// Every rule intact.
    #[default]
    None,
    /// A restarted acceptor answers at once instead of staying silent for M.
    NoQuarantine,
    /// The holder believes its lease for the full T, ignoring clock drift.
    NoDriftMargin,
    /// The proposer counts responses instead of distinct acceptors.
    CountDuplicates,
    /// An acceptor honours a Release from the owner whatever its ballot.
    ReleaseAnyBallot,
    /// The proposer starts its lease timer when the majority of accepts arrives instead of
    /// before sending the ProposeRequest.
    LateTimer,
    /// A holder that hands its lease over keeps believing in it until it runs out, while
    /// the node it hands it to already counts it as released.
    HandOverKeepsLease,
    /// The simulator's log adds two voters in one configuration change (breaks rule 1 of
    /// `docs/membership.md`): majorities of the old and the new configuration need not meet.
    TwoVotersAtOnce,
    /// The proposer counts votes from learners (which receive its requests) towards the
    /// majority of the voters.
    LearnerCounted,
    /// The simulator's master proposes the next configuration change without waiting for
    /// rule 5's lease round at the new epoch and the max lease time after it.
    NoChangeWait,
}

impl Breakage {
    /// Every negative control with its command-line name.
    pub const ALL: [(&'static str, Breakage); 9] = [
        ("no-quarantine", Breakage::NoQuarantine),
        ("no-drift-margin", Breakage::NoDriftMargin),
        ("count-duplicates", Breakage::CountDuplicates),
        ("release-any-ballot", Breakage::ReleaseAnyBallot),
        ("late-timer", Breakage::LateTimer),
        ("hand-over-keeps-lease", Breakage::HandOverKeepsLease),
        ("two-voters-at-once", Breakage::TwoVotersAtOnce),
        ("learner-counted", Breakage::LearnerCounted),
        ("no-change-wait", Breakage::NoChangeWait),
    ];

    /// Parses a command-line name; the error lists the valid ones.
    pub fn from_name(name: &str) -> Result<Breakage, String> {
        Breakage::ALL.iter().find(|(n, _)| *n == name).map(|(_, b)| *b).ok_or_else(|| {
            let names: Vec<&str> = Breakage::ALL.iter().map(|(n, _)| *n).collect();
            format!("unknown --break '{name}': valid are {}", names.join(", "))
        })
    }

    /// The command-line name.
    pub fn name(self) -> &'static str {
        Breakage::ALL.iter().find(|(_, b)| *b == self).map(|(n, _)| *n).unwrap_or("none")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_time_must_be_below_max_lease_time() {
        let mut c = LeaseConfig::default();
        c.max_lease_time = c.lease_time;
        let err = c.validate().expect_err("T = M must be rejected");
        assert!(matches!(err, ConfigError::LeaseNotBelowMax { .. }));
        assert!(err.to_string().contains("strictly less than max lease time"), "{err}");
        c.max_lease_time = c.lease_time / 2;
        assert!(c.validate().is_err());
    }

    #[test]
    fn defaults_are_valid() {
        for ms in [100, 800, 1000, 7000] {
            LeaseConfig::with_lease_time(Duration::from_millis(ms)).validate().expect("valid defaults");
        }
    }

    #[test]
    fn validity_follows_the_documented_formula() {
        let mut c = LeaseConfig::with_lease_time(Duration::from_secs(1));
        c.drift_bound = 0.01;
        c.safety_margin = Duration::from_millis(1);
        let expected = 1.0 * 0.99 / 1.01 - 0.001;
        assert!((c.holder_validity().as_secs_f64() - expected).abs() < 1e-9);
        #[cfg(feature = "negative-controls")]
        {
            c.breakage = Breakage::NoDriftMargin;
            assert_eq!(c.holder_validity(), c.lease_time);
        }
    }

    #[test]
    fn unusable_values_are_rejected_with_what_is_allowed() {
        let c = LeaseConfig { drift_bound: 0.5, ..LeaseConfig::default() };
        assert!(c.validate().expect_err("drift").to_string().contains("allowed is 0 to 0.1"));
        let mut c = LeaseConfig::default();
        c.renew_interval = c.lease_time;
        assert!(matches!(c.validate(), Err(ConfigError::RenewTooLate { .. })));
        let mut c = LeaseConfig::default();
        c.backoff_min = c.backoff_max * 2;
        assert!(matches!(c.validate(), Err(ConfigError::BackoffRange { .. })));
        let c = LeaseConfig::with_lease_time(Duration::ZERO);
        assert!(c.validate().is_err());
    }

    #[test]
    fn breakage_names_round_trip_and_unknown_names_list_the_valid_ones() {
        for (name, b) in Breakage::ALL {
            assert_eq!(Breakage::from_name(name), Ok(b));
            assert_eq!(b.name(), name);
        }
        let err = Breakage::from_name("nope").expect_err("unknown");
        assert!(err.contains("late-timer") && err.contains("no-quarantine"), "{err}");
    }
}
