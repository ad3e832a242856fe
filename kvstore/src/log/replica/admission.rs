//! What a master admits into the log: the checks of a proposal against the replica's
//! state (ready, not stopped, not corrupt, within quota and alarms) and of a membership
//! change against the rules of docs/membership.md.

use super::*;

impl<S: Storage> Replica<S> {
    pub(super) fn require_ready(&self, now: Instant) -> Result<(), RequestError> {
        if !self.is_master(Some(now)) {
            return Err(RequestError::NotMaster { hint: self.master_hint.filter(|h| *h != self.me) });
        }
        if !self.role.is_ready() {
            return Err(RequestError::NotReady);
        }
        Ok(())
    }

    /// Refuses to read from this replica's state while a CORRUPT alarm names it: what it
    /// holds disagrees with the other members, and a reader would take it for the truth.
    pub(super) fn check_not_corrupt(&self) -> Result<(), KvError> {
        let me = crate::command::Alarm { member: u64::from(self.me.0), kind: AlarmKind::Corrupt };
        match self.learner.machine().alarms().any(|a| *a == me) {
            true => Err(KvError::Corrupt),
            false => Ok(()),
        }
    }

    pub(super) fn check_stopped(&self) -> Result<(), RequestError> {
        match &self.stopped {
            Some(failure) => Err(RequestError::StorageFailed(failure.clone())),
            None => Ok(()),
        }
    }

    /// Validates a command and applies the master's policies (minimum TTL).
    pub(super) fn admit(&mut self, now: Instant, mut command: Command) -> Result<Command, RequestError> {
        self.check_stopped()?;
        self.check_mastership(now);
        validate_command(&command, &self.limits)?;
        match command.unwrapped() {
            // Only the master's own tracker decides expiry, and only a new master starts a tenure.
            Command::LeaseExpire { .. } => return Err(KvError::ReservedCommand("lease expiry".into()).into()),
            Command::Barrier { .. } => return Err(KvError::ReservedCommand("barrier".into()).into()),
            Command::ChangeMembers(MemberChange::Seed { .. }) => {
                return Err(KvError::ReservedCommand("membership seed".into()).into())
            }
            _ => {}
        }
        if let Command::LeaseGrant { ttl, .. } = command.unwrapped_mut() {
            *ttl = (*ttl).max(self.config.min_ttl_secs);
            // An admission check, not one the state machine repeats when it applies: the
            // cap bounds memory, it is no invariant, so grants in flight may overshoot it.
            if self.learner.machine().lease_count() >= self.limits.max_leases {
                return Err(KvError::TooManyLeases { max: self.limits.max_leases }.into());
            }
        }
        if !self.is_master(Some(now)) || matches!(self.role, Role::Follower) {
            return Err(RequestError::NotMaster { hint: self.master_hint.filter(|h| *h != self.me) });
        }
        self.check_alarms(now, &command)?;
        if let Command::ChangeMembers(change) = &command {
            let checked = self.check_change(now, change);
            if matches!(checked, Err(RequestError::Invalid(KvError::LearnerNotReady))) {
                // An idle cluster sends the learner nothing to acknowledge, so the master
                // would never hear how far it got: an empty slot asks every member.
                self.probe_progress(now);
            }
            checked?;
        }
        Ok(command)
    }

    /// Rules 1, 2 and 5 of docs/membership.md for a client's membership change, on the
    /// master: the change fits the configuration in force (one voter at a time is what
    /// [`MemberChange`] can express), the master has taken over the log and recorded the
    /// seed, no other change is on its way, and a voter change waits for the election to
    /// confirm the current configuration and for the old one's leases to run out.
    pub(super) fn check_change(&self, now: Instant, change: &MemberChange) -> Result<(), RequestError> {
        if !self.role.is_ready() {
            return Err(RequestError::NotReady);
        }
        let recorded = self.learner.machine().membership();
        if !recorded.is_recorded() || self.role.change_in_flight() {
            return Err(KvError::MembershipBusy.into());
        }
        recorded.check(change)?;
        if let MemberChange::Promote { id } = change {
            // etcd's rule: the learner has applied at least 90% of what the master has. Its
            // report is a slot or two behind by construction (it learns a slot is chosen
            // after acknowledging it), which a small log would never make up for: a few
            // slots behind count as in sync too.
            let ours = self.learner.applied();
            let allowed_lag = (ours / 10).max(LEARNER_SLACK_SLOTS);
            let ready = self.role.progress_of(*id).is_some_and(|applied| applied.saturating_add(allowed_lag) >= ours);
            if !ready {
                return Err(KvError::LearnerNotReady.into());
            }
        }
        if change.changes_voters() && !self.config.broken(LogBreakage::NoChangeWait) {
            match self.change_gate {
                Some((epoch, after)) if epoch == recorded.epoch && now >= after => {}
                _ => return Err(KvError::MembershipBusy.into()),
            }
        }
        Ok(())
    }

    /// Refuses what the raised alarms forbid: every write while a member is marked corrupt,
    /// a write that adds data while NOSPACE is raised or would be by this write (which then
    /// raises it).
    pub(super) fn check_alarms(&mut self, now: Instant, command: &Command) -> Result<(), KvError> {
        if matches!(command, Command::Alarm { .. }) {
            return Ok(());
        }
        let state = self.learner.machine();
        if state.has_alarm(AlarmKind::Corrupt) {
            return Err(KvError::Corrupt);
        }
        if !command.adds_data() {
            return Ok(());
        }
        if state.has_alarm(AlarmKind::NoSpace) {
            return Err(KvError::NoSpace);
        }
        let quota = self.limits.quota_bytes;
        let after = state.bytes_in_use().saturating_add(crate::log::leader::command_size(command) as u64);
        if quota == 0 || after <= quota {
            return Ok(());
        }
        self.raise_alarm(now, AlarmKind::NoSpace);
        Err(KvError::NoSpace)
    }

    /// Proposes raising `kind` on this node, at most once per [`ALARM_RETRY`] (writes refused
    /// meanwhile would otherwise each propose it again before the first is applied).
    pub(super) fn raise_alarm(&mut self, now: Instant, kind: AlarmKind) {
        if self.alarm_raised_at.is_some_and(|at| now.saturating_since(at) < ALARM_RETRY) {
            return;
        }
        self.alarm_raised_at = Some(now);
        tracing::warn!(node = %self.me, alarm = ?kind, "raising an alarm");
        let id = self.next_proposal_id();
        let command = Command::Alarm { action: AlarmAction::Raise, member: u64::from(self.me.0), kind: Some(kind) };
        self.role.enqueue(crate::log::types::Proposal { id, command });
        self.fill_pipeline(now);
        self.drain_local(now);
    }
}
