//! The chaos phase's faults (partitions, crashes, power loss, pauses, step-downs, clogged
//! senders) and the quiet phase that follows.

use super::*;

/// The longest a sick-disk drill keeps its node cut off.
const SICK_DISK_LONGEST: u64 = 10_000 * MS;

impl World {
    pub(super) fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                let now = self.local(i);
                self.nodes[i].election.as_ref().is_some_and(|c| c.mastership(now).is_some())
            })
            .collect()
    }

    pub(super) fn shuffled(&mut self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        for i in (1..order.len()).rev() {
            let j = self.rng.range_u64(0, i as u64) as usize;
            order.swap(i, j);
        }
        order
    }

    pub(super) fn chaos(&mut self) {
        if self.quiet {
            return;
        }
        self.network.faults = self.config.faults.clone();
        self.heal_sick();
        if self.sick.is_some() || self.stale_majority_runs() {
            // No other fault while a drill runs: a crash or a heal would end it before its
            // window (the master compacting past a sick node, two voter changes in a row).
            let next = self.rng.range_u64(200, 1500) * MS;
            self.queue.push(self.now + next, Event::Chaos);
            return;
        }
        let n = self.nodes.len();
        let masters = self.masters();
        let victim = match masters.first() {
            Some(&m) if self.rng.chance(0.6) => m,
            _ => self.rng.range_u64(0, n as u64 - 1) as usize,
        };
        match self.rng.range_u64(0, 19) {
            0..=2 => {
                let order = self.shuffled();
                let cut = self.rng.range_u64(1, n as u64 - 1) as usize;
                let side_a: Vec<NodeId> = order[..cut].iter().map(|&i| self.nodes[i].id).collect();
                let side_b: Vec<NodeId> = order[cut..].iter().map(|&i| self.nodes[i].id).collect();
                self.trace(|| format!("partition {side_a:?} | {side_b:?}"));
                self.network.partition(&side_a, &side_b);
                let heal = self.rng.range_u64(300, 3000) * MS;
                self.queue.push(self.now + heal, Event::Heal);
            }
            3..=5 => {
                let id = self.nodes[victim].id;
                let rest: Vec<NodeId> = self.ids.iter().copied().filter(|&x| x != id).collect();
                self.trace(|| format!("isolate {id}"));
                self.network.partition(&[id], &rest);
                let heal = self.rng.range_u64(500, 4000) * MS;
                self.queue.push(self.now + heal, Event::Heal);
            }
            6..=8 if self.is_up(victim) => {
                self.crash(victim);
                let back = if self.rng.chance(0.3) { self.rng.range_u64(1, 50) } else { self.rng.range_u64(200, 3000) };
                self.queue.push(self.now + back * MS, Event::Restart { node: victim });
            }
            9 | 10 => {
                // Power loss: every node at once; unsynced writes are gone everywhere.
                self.trace(|| "crash all".to_string());
                for node in 0..n {
                    self.crash(node);
                    let back = self.rng.range_u64(20, 800) * MS;
                    self.queue.push(self.now + back, Event::Restart { node });
                }
            }
            11..=13 if self.is_up(victim) => {
                // A process pause (GC, swapped out, SIGSTOP): nothing runs, then the clock has jumped.
                let pause = self.rng.range_u64(200, 3500) * MS;
                let id = self.nodes[victim].id;
                self.trace(|| format!("pause {id} for {}ms", pause / MS));
                self.nodes[victim].paused_until = self.now + pause;
            }
            14 | 15 => {
                let now = self.local(victim);
                if let Some(core) = self.nodes[victim].election.as_mut() {
                    core.step_down(now);
                    let id = self.nodes[victim].id;
                    self.trace(|| format!("step down {id}"));
                    self.after_election(victim);
                }
            }
            16 => {
                let window = self.rng.range_u64(100, 1000) * MS;
                let extra = self.rng.range_u64(100, 1000) * MS;
                let id = self.nodes[victim].id;
                self.trace(|| format!("clog {id}"));
                self.network.clog(id, self.now + window, extra);
                self.queue.push(self.now + window + extra, Event::Heal);
            }
            17..=19 => self.sicken_disk(&masters),
            _ => {}
        }
        let next = self.rng.range_u64(200, 1500) * MS;
        self.queue.push(self.now + next, Event::Chaos);
    }

    /// A sick-disk drill, the fault shaped for a checkpoint that a snapshot install overtakes
    /// (the `checkpoint-overtaken` control), which random faults almost never reach: an
    /// install needs a member so far behind that the master's log no longer holds what it
    /// misses, while the member's own checkpoint is still syncing. A follower's disk turns
    /// sick: its next checkpoint's sync hangs, and the node drops off the network with it
    /// (as a node whose disk stalls misses its heartbeats) until the master has compacted
    /// past it, 10 s at most. Healed, it installs a snapshot; the checkpoint ends after
    /// that, and soon after the node crashes. A checkpoint that drops the install's
    /// snapshot record then leaves the restarted node's state behind its log.
    fn sicken_disk(&mut self, masters: &[usize]) {
        if self.sick.is_some() {
            return;
        }
        let followers: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.is_up(i) && !masters.contains(&i)).collect();
        if followers.is_empty() {
            return;
        }
        let node = followers[self.rng.range_u64(0, followers.len() as u64 - 1) as usize];
        self.nodes[node].sick_disk = true;
        let id = self.nodes[node].id;
        self.trace(|| format!("drill: {id}'s disk turns sick at its next checkpoint"));
    }

    /// The latency of a checkpoint `node` begins, if a sick-disk drill waits for it: the
    /// node is cut off now, and the sync and a crash after it come at the drill's latest
    /// (`heal_sick` brings both forward once the master has compacted past the node).
    pub(super) fn sick_checkpoint(&mut self, node: usize, applied: Slot) -> Option<u64> {
        if !std::mem::take(&mut self.nodes[node].sick_disk) || self.sick.is_some() || self.stale_majority.is_some() {
            return None;
        }
        let cut_off = SICK_DISK_LONGEST;
        let id = self.nodes[node].id;
        self.network.drill(&[id], DrillHold::Isolated(self.now + cut_off));
        let latency = cut_off + self.rng.range_u64(300, 1500) * MS;
        let crash = latency + self.rng.range_u64(10, 300) * MS;
        let incarnation = self.nodes[node].incarnation;
        self.queue.push(self.now + crash, Event::DrillCrash { node, incarnation });
        self.sick = Some((node, incarnation, applied));
        self.trace(|| format!("drill: {id} cut off at slot {applied}, its checkpoint hangs"));
        Some(latency)
    }

    /// Ends a sick-disk drill's cut once the master's log no longer holds the slot after
    /// the one the node had applied (so it gets a snapshot): the hung checkpoint ends
    /// 0.3–1.5 s later, after the install, and the node crashes soon after. The events
    /// planned for the drill's latest find the checkpoint gone and the node restarted.
    fn heal_sick(&mut self) {
        let Some((node, incarnation, applied)) = self.sick else { return };
        if incarnation != self.nodes[node].incarnation {
            self.sick = None;
            return;
        }
        let retained = self.config.replica.retain_after_snapshot;
        let compacted = self.masters().iter().any(|&m| {
            self.nodes[m].kv.as_ref().is_some_and(|kv| kv.replica().snapshot_index() > applied + retained + 1)
        });
        if !compacted {
            return;
        }
        self.sick = None;
        self.network.end_drill();
        let done = self.rng.range_u64(300, 1500) * MS;
        self.queue.push(self.now + done, Event::CheckpointDone { node, incarnation });
        let crash = done + self.rng.range_u64(10, 300) * MS;
        self.queue.push(self.now + crash, Event::DrillCrash { node, incarnation });
        let id = self.nodes[node].id;
        self.trace(|| format!("drill: the master compacted past {id}: healed"));
    }

    /// Faults stop, every node comes back, the network is healed and loss-free; clients
    /// stop. By the end every replica must have caught up and every lease expired.
    pub(super) fn begin_quiet(&mut self) {
        self.quiet = true;
        self.trace(|| "quiet".to_string());
        self.network.heal();
        self.end_stale_majority("the quiet phase");
        self.network.end_drill();
        if let Some((node, incarnation, _)) = self.sick.take() {
            // The sick disk recovers with the quiet: its checkpoint reports now.
            self.queue.push(self.now + MS, Event::CheckpointDone { node, incarnation });
        }
        self.network.faults.loss = 0.0;
        self.network.faults.stall = 0.0;
        for node in 0..self.nodes.len() {
            self.nodes[node].paused_until = 0;
            self.nodes[node].sick_disk = false;
            self.start(node);
        }
    }
}
