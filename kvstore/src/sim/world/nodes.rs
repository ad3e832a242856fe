//! A simulated node's life: start (the election core and the production node on its
//! storage), crash (unsynced writes torn), and what the driver does after each step of the
//! election and of the node (messages on the wire, syncs, checkpoints, snapshots, timers).

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
        self.nodes[node].kv = Some(kv);
        self.nodes[node].paused_until = 0;
        self.nodes[node].election_epoch = 0;
        self.sync_configuration(node);
        self.after_election(node);
        self.after_replica(node);
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
        let incarnation = self.nodes[to_node].incarnation;
        for delay in self.network.deliveries(self.now, from, to, &mut self.rng) {
            self.queue.push(self.now + delay, Event::Deliver { to: to_node, from, incarnation, wire: wire.clone() });
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
        if let Some(kv) = self.nodes[node].kv.as_mut() {
            // The simulator's own proposals of configuration changes go straight to the
            // replica (membership.rs): they check this gate.
            kv.replica_mut().set_change_gate(gate);
            self.hand_view(node, now, ElectionView { master: mastership, hint });
            self.after_replica(node);
        }
    }

    /// Hands the election's status to the node: at once, or (renewals during a stall that
    /// begins at one renewal in ten, on seeds that delay them) into its queue up to 800 ms
    /// later, where its next input takes it.
    fn hand_view(&mut self, node: usize, now: leasekv_lease::Instant, view: ElectionView) {
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
        self.nodes[node].pending_view = None;
        self.nodes[node].pending_visible = false;
        self.nodes[node].delivered = view;
        if let Some(kv) = self.nodes[node].kv.as_mut() {
            kv.handle_election(now, view);
        }
    }

    /// Hands the node the renewal held back for it.
    pub(super) fn apply_pending_view(&mut self, node: usize) {
        let Some(view) = self.nodes[node].pending_view.take() else { return };
        self.nodes[node].pending_visible = false;
        self.nodes[node].delivered = view;
        let now = self.local(node);
        if let Some(kv) = self.nodes[node].kv.as_mut() {
            kv.handle_election(now, view);
        }
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

    pub(super) fn after_replica(&mut self, node: usize) {
        let now = self.local(node);
        let checkpoint_idle = self.nodes[node].checkpoint_in_flight.is_none();
        let Some(replica) = self.nodes[node].kv.as_mut().map(KvNode::replica_mut) else { return };
        // Snapshots for peers the way the server builds them: a view serialized by the
        // driver (format 8, dead keys left out), sent beside the replica's output.
        let mut built = Vec::new();
        let mut checkpoint = None;
        if replica.snapshot_due() {
            if checkpoint_idle {
                checkpoint = replica.begin_checkpoint();
            }
            if let Some(job) = replica.take_snapshot_job(now) {
                let mut data = Vec::new();
                match crate::state::stream::write(&job.view, &mut data) {
                    Ok(_) => built.extend(job.peers.into_iter().map(|peer| (peer, job.index, data.clone()))),
                    Err(e) => self.oracles.violation(self.now, ViolationKind::SnapshotUnbuilt, e.to_string()),
                }
            }
        }
        if let Some(ticket) = checkpoint {
            let early = self.rng.chance(0.5).then(|| ticket.sync());
            self.nodes[node].checkpoint_in_flight = Some((ticket, early));
            let latency = self.rng.range_u64(100, 3000) * 1000;
            let incarnation = self.nodes[node].incarnation;
            self.queue.push(self.now + latency, Event::CheckpointDone { node, incarnation });
        }
        let gauges = self.nodes[node].gauges;
        let Some(kv) = self.nodes[node].kv.as_mut() else { return };
        // As the server: the answers first, then the engine write of what they applied.
        kv.set_election_gauges(gauges);
        let output = kv.take_output(now);
        let deadline = kv.poll_timeout();
        let id = self.nodes[node].id;
        // As the server: the candidacy goes to the election's switch, which acts on it at
        // its next step (a master that withdraws releases its lease there).
        let candidacy_changed = match (output.candidacy, self.nodes[node].election.as_mut()) {
            (Some(candidate), Some(core)) => {
                core.set_candidacy(now, candidate);
                self.trace(|| format!("{id} candidacy {candidate}"));
                true
            }
            _ => false,
        };
        for trace in &output.applied {
            if trace.from_snapshot {
                self.report.snapshots_installed += 1;
            }
            self.report.leases_expired += trace.expired.len() as u64;
            self.report.slots = self.report.slots.max(trace.slot);
            self.oracles.on_applied(self.now, id, trace);
        }
        if let Some(slot) = output.applied.iter().map(|trace| trace.slot).max() {
            self.check_read_leases(slot);
        }
        for (to, message) in output.log {
            self.send_wire(node, to, Wire::Log(message));
        }
        for (to, message) in output.forwards {
            self.send_wire(node, to, Wire::Forward(message));
        }
        for (to, index, data) in built {
            self.send_wire(node, to, Wire::Log(crate::log::LogMessage::Snapshot { index, data }));
        }
        for (id, slot) in output.chosen {
            self.oracles.on_acked_write(self.now, slot, id);
        }
        for ((client, request_id, request), result) in output.answers {
            self.reply(client, request_id, reply_for_result(&request, result));
        }
        for read in output.reads {
            self.hand_to_reader(node, read);
        }
        for asker in output.step_downs {
            // The simulated clients never ask for a step-down.
            if let Some(kv) = self.nodes[node].kv.as_mut() {
                kv.step_down_finished(asker, Err(RequestError::ShuttingDown));
            }
        }
        let write_now = !self.defer_engine_writes || self.rng.chance(0.02);
        if let Some(replica) = self.nodes[node].kv.as_mut().map(KvNode::replica_mut) {
            // As the server: the watch streams see the step's changes at once, the engine
            // write may wait.
            replica.publish_applied();
            if write_now {
                replica.flush_applied();
            }
        }
        let n = &mut self.nodes[node];
        let ticket = match (output.needs_sync && n.sync_in_flight.is_none(), n.kv.as_mut().map(KvNode::replica_mut)) {
            (true, Some(replica)) => replica.begin_sync(),
            _ => None,
        };
        if let Some(ticket) = ticket {
            self.nodes[node].sync_in_flight = Some(ticket);
            let latency = self.rng.range_u64(100, 3000) * 1000;
            let incarnation = self.nodes[node].incarnation;
            self.queue.push(self.now + latency, Event::SyncDone { node, incarnation });
        }
        self.nodes[node].replica_generation += 1;
        if let Some(deadline) = deadline {
            let at = self.nodes[node].clock.real_at(deadline).max(self.now);
            let generation = self.nodes[node].replica_generation;
            self.queue.push(at, Event::ReplicaTimer { node, generation });
        }
        if self.watch.clients() > 0 {
            self.observe_history(node);
        }
        if self.sync_configuration(node) || candidacy_changed {
            self.after_election(node);
        }
    }
}
