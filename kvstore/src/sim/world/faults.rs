//! The chaos phase's faults (partitions, crashes, power loss, pauses, step-downs, clogged
//! senders) and the quiet phase that follows.

use super::*;

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
            _ => {}
        }
        let next = self.rng.range_u64(200, 1500) * MS;
        self.queue.push(self.now + next, Event::Chaos);
    }

    /// Faults stop, every node comes back, the network is healed and loss-free; clients
    /// stop. By the end every replica must have caught up and every lease expired.
    pub(super) fn begin_quiet(&mut self) {
        self.quiet = true;
        self.trace(|| "quiet".to_string());
        self.network.heal();
        self.network.faults.loss = 0.0;
        self.network.faults.stall = 0.0;
        for node in 0..self.nodes.len() {
            self.nodes[node].paused_until = 0;
            self.start(node);
        }
    }
}
