//! A simulated node's life: start (the election core and the production node on its
//! storage), crash (unsynced writes torn), and what the driver does after each step of the
//! election and of the node (messages on the wire, syncs, checkpoints, snapshots, timers).

use super::sim_io::SimIo;
use super::stale_majority::Verdict;
use super::*;

impl World {
    pub(super) fn start(&mut self, node: usize) {
        if self.nodes[node].kv.is_some() || !self.has_joined(node) {
            return;
        }
        let Some(disk) = self.nodes[node].disk.take() else { return };
        let removed_through = disk.removed_through();
        let epoch = match self.nodes[node].epochs.begin_epoch() {
            Ok(epoch) => epoch,
            Err(e) => {
                self.oracles.violation(self.now, ViolationKind::RestartFailed, e.to_string());
                return;
            }
        };
        let now = self.local(node);
        let id = self.nodes[node].id;
        self.trace(|| format!("start {id} epoch {}", epoch.value));
        let seed = self.rng.next_u64();
        // A spare starts from the configuration that added it (a node joining an existing
        // cluster learns it from a member); the initial nodes from the shared seed.
        let membership = match &self.nodes[node].join_seed {
            Some(joined) => joined.clone(),
            None => Membership::of_voters(&self.ids),
        };
        let peers = membership.voters();
        let core = match self.config.backend.build_core(id, &peers, None, self.config.lease.clone(), epoch, now, seed) {
            Ok(core) => core,
            Err(e) => panic!("simulator built an invalid lease config: {e}"),
        };
        let opened =
            Replica::open_with_seed(id, membership, self.config.replica.clone(), Limits::default(), disk, epoch.value);
        let replica = match opened {
            Ok(replica) => replica,
            Err(e) => {
                self.oracles.violation(self.now, ViolationKind::RestartFailed, format!("{id}: {e}"));
                return;
            }
        };
        if replica.state_slot_at_open() < removed_through {
            let detail = format!(
                "{id} restarted with its state at slot {} and its log dropped through slot {removed_through}",
                replica.state_slot_at_open()
            );
            self.oracles.violation(self.now, ViolationKind::StateBehindLog, detail);
        }
        self.nodes[node].election = Some(core);
        let mut kv = KvNode::new(replica);
        kv.set_breakage(self.config.node_breakage);
        // Seeds that defer engine writes leave applied commands unwritten for up to 2 s (the
        // server's 5 ms, stretched as long turns stretch it, so that crashes, compactions
        // and watch streams land among them; at most 200 ms left the tail control uncaught).
        let delay = if self.defer_engine_writes { self.rng.range_u64(1, 2000) * MS } else { 0 };
        kv.set_engine_write_delay(std::time::Duration::from_nanos(delay));
        self.nodes[node].kv = Some(kv);
        self.nodes[node].paused_until = 0;
        self.nodes[node].loop_busy_until = 0;
        self.nodes[node].election_epoch = 0;
        self.sync_configuration(node);
        self.after_election(node);
    }

    pub(super) fn crash(&mut self, node: usize) {
        let Some(kv) = self.nodes[node].kv.take() else { return };
        self.report.lease_reads.add(kv.lease_read_counts());
        let replica = kv.into_replica();
        let id = self.nodes[node].id;
        self.trace(|| format!("crash {id}"));
        let mut disk = replica.into_storage();
        if self.rng.chance(0.3) {
            // A torn write: some prefix of the unsynced writes made it to disk, in the log
            // and, at a point of its own, in the state engine.
            let keep = self.rng.range_u64(0, disk.pending_len() as u64) as usize;
            let state_kept = self.rng.range_u64(0, disk.state_pending_len() as u64 + 1) as usize;
            disk.crash_torn(keep, state_kept);
        } else {
            disk.crash();
        }
        let n = &mut self.nodes[node];
        n.disk = Some(disk);
        n.election = None;
        n.incarnation += 1;
        n.election_generation += 1;
        n.replica_generation += 1;
        n.sync_in_flight = None;
        n.checkpoint_in_flight = None;
        n.paused_until = 0;
        n.loop_busy_until = 0;
        n.pending_view = None;
        n.pending_visible = false;
        n.delivered = ElectionView::default();
    }

    pub(super) fn is_up(&self, node: usize) -> bool {
        self.nodes[node].kv.is_some()
    }

    pub(super) fn send_wire(&mut self, from_node: usize, to: NodeId, wire: Wire) {
        let from = self.nodes[from_node].id;
        let to_node = (to.0 as usize).wrapping_sub(1);
        if to_node >= self.nodes.len() {
            return;
        }
        let verdict = match self.stale_majority {
            Some(_) => self.stale_majority_verdict(from, to, &wire),
            None => Verdict::Pass,
        };
        if matches!(verdict, Verdict::Drop) {
            return;
        }
        let incarnation = self.nodes[to_node].incarnation;
        for delay in self.network.deliveries(self.now, from, to, &mut self.rng) {
            self.queue.push(self.now + delay, Event::Deliver { to: to_node, from, incarnation, wire: wire.clone() });
        }
        if let Verdict::PassThenCut(group, until) = verdict {
            self.stale_majority_cut(&group, until);
        }
    }

    pub(super) fn after_election(&mut self, node: usize) {
        let now = self.local(node);
        let Some(core) = self.nodes[node].election.as_mut() else { return };
        let output = core.take_output();
        let deadline = core.poll_timeout();
        let mastership = core.mastership(now);
        let hint = core.master_hint(now);
        let gate = core.change_allowed_after();
        let seen = core.configuration_seen();
        let id = self.nodes[node].id;
        for change in &output.changes {
            let line = format!("{id} {change:?}");
            self.trace(|| line);
        }
        let released =
            output.changes.iter().any(|c| matches!(c, LeadershipChange::Lost { reason: LossReason::Released, .. }));
        for envelope in output.messages {
            self.send_wire(node, envelope.to, Wire::Election(envelope.msg));
        }
        self.nodes[node].election_generation += 1;
        if let Some(deadline) = deadline {
            let at = self.nodes[node].clock.real_at(deadline).max(self.now);
            let generation = self.nodes[node].election_generation;
            self.queue.push(at, Event::ElectionTimer { node, generation });
        }
        self.check_single_master();
        self.nodes[node].gauges = ElectionGauges { change_gate: gate, configuration_seen: seen };
        if self.nodes[node].kv.is_some() {
            // The election publishes a release before it sends it, as the server's does; the
            // loop may be in a long turn then, and takes it with its next input.
            if released && !self.quiet && self.nodes[node].loop_busy_until <= self.now && self.rng.chance(0.5) {
                let busy = self.rng.range_u64(1, 300) * MS;
                self.nodes[node].loop_busy_until = self.now + busy;
                let incarnation = self.nodes[node].incarnation;
                // After the inputs that waited: they come first, as any input may.
                self.queue.push(self.now + busy + US, Event::LoopIdle { node, incarnation });
                self.trace(|| format!("{id} loop busy for {} ms as its release goes out", busy / MS));
            }
            self.hand_view(node, ElectionView { master: mastership, hint });
            self.drive(node, Some(Input::Election));
        }
    }

    /// Hands the election's status to the node's queue: visible at once, or (renewals
    /// during a stall that begins at one renewal in ten, on seeds that delay them) up to
    /// 800 ms later; the driver takes it before the node's next input.
    fn hand_view(&mut self, node: usize, view: ElectionView) {
        let delivered = self.nodes[node].delivered;
        let extends = match (delivered.master, view.master) {
            (Some(old), Some(new)) => old.term == new.term && new.valid_until > old.valid_until,
            _ => false,
        };
        // A stall begins at one renewal in ten, in the chaos phase, and holds every renewal
        // until it ends: a loop that is late every time would lose its round at every
        // renewal, which no real node does for long.
        let holding = self.nodes[node].pending_view.is_some();
        if self.delay_renewals
            && !self.quiet
            && extends
            && delivered.hint == view.hint
            && (holding || self.rng.chance(0.1))
        {
            if self.nodes[node].pending_view.replace(view).is_none() {
                // Half the stalls end a microsecond before the lease the node holds runs
                // out: the loop wakes with the renewal and the lease's timer both due, the
                // turn that the renewal-after-timeout control gets wrong (otherwise another
                // input nearly always takes the renewal first, and the control was caught on
                // one seed in hundreds).
                let lease_end = delivered.master.map(|m| self.nodes[node].clock.real_at(m.valid_until));
                let stall_to_lease_end = lease_end
                    .filter(|&end| end > self.now + 2 * US && end <= self.now + 800 * MS)
                    .map(|end| end - US - self.now);
                let delay = match stall_to_lease_end {
                    Some(delay) if self.rng.chance(0.5) => delay,
                    _ => self.rng.range_u64(1, 800) * MS,
                };
                let incarnation = self.nodes[node].incarnation;
                self.queue.push(self.now + delay, Event::StatusDelivered { node, incarnation });
            }
            return;
        }
        self.nodes[node].pending_view = Some(view);
        self.nodes[node].pending_visible = true;
    }

    /// Writes a snapshot for node `to` to a file of its own, as the server's pull does.
    pub(super) fn snapshot_file(&mut self, to: usize, data: &[u8]) -> Option<std::path::PathBuf> {
        let (dir, written) = self.snapshot_files.as_mut()?;
        *written += 1;
        let path = dir.join(format!("to-{to}-{written}.snap"));
        match std::fs::create_dir_all(&*dir).and_then(|()| std::fs::write(&path, data)) {
            Ok(()) => Some(path),
            Err(e) => {
                self.oracles.violation(self.now, ViolationKind::SnapshotUnwritten, e.to_string());
                None
            }
        }
    }

    /// After every drive: the node does not act as master while another node's election
    /// holds mastership. PaxosLease lets no two leases overlap, and a node takes the
    /// election's status before every input, so a node that still believes after its
    /// release went out (and another took over) decided on a stale status.
    fn check_master_after_release(&mut self, node: usize) {
        let local = self.local(node);
        let believes = self.nodes[node].kv.as_ref().is_some_and(|kv| kv.replica().is_master_at(local));
        if !believes {
            return;
        }
        let others: Vec<NodeId> = self.masters().into_iter().filter(|&m| m != node).map(|m| self.nodes[m].id).collect();
        if !others.is_empty() {
            let id = self.nodes[node].id;
            let detail = format!("{id} acts as master while {others:?} hold mastership");
            self.oracles.violation(self.now, ViolationKind::MasterAfterRelease, detail);
        }
    }

    /// Rule R2 of docs/read-leases.md, checked at every real instant a slot is applied
    /// somewhere (so chosen): every node that believes its read lease at this instant, by
    /// its own clock, has received the slot, and a read arriving there now would wait
    /// for it.
    fn check_read_leases(&mut self, slot: crate::log::Slot) {
        for holder in 0..self.nodes.len() {
            let local = self.local(holder);
            let Some(replica) = self.nodes[holder].kv.as_ref().map(KvNode::replica) else { continue };
            let Some(target) = replica.read_lease_target(local) else { continue };
            let covered = target.max(replica.applied_index());
            if covered < slot {
                let id = self.nodes[holder].id;
                self.oracles.violation(
                    self.now,
                    ViolationKind::ReadLeaseMissedWrite,
                    format!("slot {slot} was applied while {id} held a valid read lease and had received only through {covered}"),
                );
            }
        }
    }

    /// As the server's reader pool: a read the node decided runs off its loop, after up to
    /// 300 µs while the node goes on applying, so reads overtake each other and the writes
    /// applied meanwhile.
    pub(super) fn hand_to_reader(&mut self, node: usize, read: (crate::log::ReadJob, crate::node::Asker<Waiter>)) {
        let delay = self.rng.range_u64(1, 300) * 1000;
        let incarnation = self.nodes[node].incarnation;
        self.queue.push(self.now + delay, Event::ReadRun { node, incarnation, job: Box::new(read) });
    }

    /// Runs a read the node decided, on its "reader thread", and answers its asker.
    pub(super) fn run_read(&mut self, node: usize, job: crate::log::ReadJob, asker: crate::node::Asker<Waiter>) {
        let result = crate::node::run_read(job);
        match asker {
            crate::node::Asker::Local((client, request_id, request)) => {
                self.reply(client, request_id, reply_for_result(&request, result));
            }
            crate::node::Asker::Remote(to, id) => {
                self.send_wire(node, to, Wire::Forward(crate::node::ForwardMessage::Answer(id, result)));
            }
        }
    }

    /// Ends a turn of the node with nothing more to hand it.
    pub(super) fn after_replica(&mut self, node: usize) {
        self.drive(node, None);
    }

    /// Hands node `node` one input (if any) through the production driver and ends its
    /// turn, as the server's loop does; returns the election status the driver took with it.
    pub(super) fn drive(&mut self, node: usize, input: Option<Input<Waiter>>) -> Option<ElectionView> {
        // A busy loop takes no status and ends no turn until it is idle (`Event::LoopIdle`);
        // its own inputs were put off until then.
        if self.nodes[node].loop_busy_until > self.now && matches!(input, None | Some(Input::Election)) {
            return None;
        }
        let kv = self.nodes[node].kv.take()?;
        let mut driver = Driver::new(kv);
        // A loop that woke from idle may sync on itself (`SyncPlace::OnLoop`).
        let woke_from_idle = self.rng.chance(0.3);
        let mut io = SimIo::new(self, node);
        if let Some(input) = input {
            driver.handle(&mut io, input);
        }
        driver.end_turn(&mut io, TurnFacts { woke_from_idle, background_sync: true });
        let SimIo { taken, applied_through, reconfigure, .. } = io;
        let deadline = driver.poll_timeout();
        self.nodes[node].kv = Some(driver.into_node());
        if let Some(slot) = applied_through {
            self.check_read_leases(slot);
        }
        self.check_master_after_release(node);
        self.nodes[node].replica_generation += 1;
        if let Some(deadline) = deadline {
            let at = self.nodes[node].clock.real_at(deadline).max(self.now);
            let generation = self.nodes[node].replica_generation;
            self.queue.push(at, Event::ReplicaTimer { node, generation });
        }
        if self.watch.clients() > 0 {
            self.observe_history(node);
        }
        if self.sync_configuration(node) || reconfigure {
            self.after_election(node);
        }
        taken
    }
}
