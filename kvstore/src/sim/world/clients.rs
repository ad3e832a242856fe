//! The simulated clients' side: what each sends where, how a node serves it (as the
//! production node: a master request is served there or forwarded once), and how answers
//! become the checked history.

use super::*;

impl World {
    pub(super) fn client_next(&mut self, client: usize) {
        if self.quiet || self.ops_issued >= self.config.ops || self.clients[client].in_flight.is_some() {
            return;
        }
        self.ops_issued += 1;
        let (request_id, request) = match self.clients[client].resend.take() {
            Some(again) => again,
            None => {
                let request = self.clients[client].next(&mut self.rng);
                self.clients[client].next_request += 1;
                (self.clients[client].next_request, request)
            }
        };
        if self.indeterminate_writes.contains(&(client, request_id)) {
            let detail = format!("client {} sent again a write answered indeterminate: {request:?}", client + 1);
            self.oracles.violation(self.now, ViolationKind::IndeterminateRetried, detail);
        }
        let c = &mut self.clients[client];
        c.in_flight = Some((request_id, request.clone(), self.now));
        let node = c.target;
        let incarnation = self.nodes[node].incarnation;
        let delay = self.rng.range_u64(50, 500) * 1000;
        self.queue.push(self.now + delay, Event::ClientArrive { node, incarnation, client, request_id, request });
        self.queue.push(self.now + 1500 * MS, Event::ClientTimeout { client, request_id });
    }

    pub(super) fn reply(&mut self, client: usize, request_id: u64, reply: Reply) {
        if self.config.trace {
            let line = format!("reply to client {} request {request_id}: {reply:?}", client + 1);
            self.trace(|| line);
        }
        let delay = self.rng.range_u64(50, 500) * 1000;
        self.queue.push(self.now + delay, Event::ClientReply { client, request_id, reply });
    }

    /// A request reaches a node: a serializable read is answered from its state; anything
    /// else goes to the node as a master request, served there as master or forwarded once
    /// to the master (the server's path).
    pub(super) fn serve(&mut self, node: usize, client: usize, request_id: u64, request: Request) {
        let now = self.local(node);
        if self.config.trace {
            let line = format!("client {} request {request_id} at {}: {request:?}", client + 1, self.nodes[node].id);
            self.trace(|| line);
        }
        let Some(kv) = self.nodes[node].kv.as_mut() else { return };
        let master_request = match &request {
            Request::Get { key, linearizable } => {
                let range = RangeRequest { range: KeyRange::single(key_name(*key)), ..Default::default() };
                if *linearizable {
                    MasterRequest::Read(range, 0)
                } else {
                    // As the server: decided on the loop, read on a reader thread.
                    match kv.serializable_read(now, range, 0) {
                        Ok(job) => {
                            let read = (job, crate::node::Asker::Local((client, request_id, request.clone())));
                            self.hand_to_reader(node, read);
                        }
                        Err(error) => self.reply(client, request_id, reply_for_error(error)),
                    }
                    return;
                }
            }
            Request::KeepAlive { lease } => MasterRequest::KeepAlive(*lease),
            Request::Put { key, value } => {
                MasterRequest::Propose(put(key_name(*key), value.to_le_bytes().to_vec(), NO_LEASE))
            }
            Request::Delete { key } => MasterRequest::Propose(Command::DeleteRange(DeleteRangeRequest {
                range: KeyRange::single(key_name(*key)),
                prev_kv: false,
            })),
            Request::Cas { key, expected, new } => {
                let range = KeyRange::single(key_name(*key));
                let compare = match expected {
                    Some(v) => Compare {
                        range,
                        target: CompareTarget::Value(v.to_le_bytes().to_vec()),
                        result: CompareResult::Equal,
                    },
                    None => Compare { range, target: CompareTarget::Version(0), result: CompareResult::Equal },
                };
                let Command::Put(put) = put(key_name(*key), new.to_le_bytes().to_vec(), NO_LEASE) else {
                    unreachable!("put() builds a Put")
                };
                MasterRequest::Propose(Command::Txn(TxnRequest {
                    compare: vec![compare],
                    success: vec![TxnOp::Put(put)],
                    failure: Vec::new(),
                }))
            }
            Request::Grant { name, ttl } => {
                MasterRequest::Propose(Command::LeaseGrant { id: 0, name: Some(name.clone()), ttl: *ttl })
            }
            Request::PutOnLease { client, lease } => {
                MasterRequest::Propose(put(format!("/lease/c{client}"), b"up".to_vec(), *lease))
            }
            Request::Revoke { lease } => MasterRequest::Propose(Command::LeaseRevoke { id: *lease }),
        };
        self.drive(node, Some(Input::Client(master_request, (client, request_id, request))));
    }

    pub(super) fn on_reply(&mut self, client: usize, request_id: u64, reply: Reply) {
        let c = &mut self.clients[client];
        let Some((id, request, call)) = c.in_flight.clone() else { return };
        if id != request_id {
            return;
        }
        c.in_flight = None;
        let ret = self.now;
        if let Reply::NotMaster(Some(hint)) = &reply {
            c.target = (hint.0 - 1) as usize;
        }
        if matches!(reply, Reply::Indeterminate | Reply::NotMaster(None)) {
            let n = self.nodes.len() as u64;
            c.target = self.rng.range_u64(0, n - 1) as usize;
        }
        if matches!(reply, Reply::Indeterminate) && request.is_write() {
            // Its outcome is unknown: our client hands it back to the caller and never sends
            // it again (a retry could apply it twice).
            if self.config.client_breakage == ClientBreakage::RetryIndeterminate {
                c.resend = Some((request_id, request.clone()));
            }
            self.indeterminate_writes.insert((client, request_id));
        }
        if !matches!(reply, Reply::NotMaster(_) | Reply::Refused(_) | Reply::Indeterminate) {
            self.report.ops_ok += 1;
        }
        self.record(client, &request, &reply, call, ret);
        let think = self.rng.range_u64(0, 40) * MS;
        self.queue.push(self.now + think, Event::ClientNext { client });
    }

    /// Adds an operation on a checked key to the history, and lease answers to the oracle.
    pub(super) fn record(&mut self, client: usize, request: &Request, reply: &Reply, call: u64, ret: u64) {
        let cid = self.clients[client].id;
        let unknown = matches!(reply, Reply::Indeterminate);
        let (op, outcome) = match (request, reply) {
            (Request::Put { key, value }, Reply::Done) => {
                (KvOp::Put { key: key_name(*key).into_bytes(), value: *value }, KvOutcome::Put)
            }
            (Request::Put { key, value }, _) if unknown => {
                (KvOp::Put { key: key_name(*key).into_bytes(), value: *value }, KvOutcome::Unknown)
            }
            (Request::Get { key, linearizable: true }, Reply::Value(v)) => {
                self.clients[client].seen[*key] = *v;
                (KvOp::Get { key: key_name(*key).into_bytes() }, KvOutcome::Get(*v))
            }
            (Request::Get { key, linearizable: false }, Reply::Value(v)) => {
                self.clients[client].seen[*key] = *v;
                return;
            }
            (Request::Delete { key }, Reply::Deleted(d)) => {
                (KvOp::Delete { key: key_name(*key).into_bytes() }, KvOutcome::Delete { deleted: *d })
            }
            (Request::Delete { key }, _) if unknown => {
                (KvOp::Delete { key: key_name(*key).into_bytes() }, KvOutcome::Unknown)
            }
            (Request::Cas { key, expected, new }, Reply::Swapped(s)) => {
                if *s {
                    self.clients[client].seen[*key] = Some(*new);
                }
                (
                    KvOp::Cas { key: key_name(*key).into_bytes(), expected: *expected, new: *new },
                    KvOutcome::Cas { succeeded: *s },
                )
            }
            (Request::Cas { key, expected, new }, _) if unknown => {
                (KvOp::Cas { key: key_name(*key).into_bytes(), expected: *expected, new: *new }, KvOutcome::Unknown)
            }
            (Request::Grant { .. }, Reply::Granted { id, ttl }) => {
                // The countdown starts when the master that tracks the lease applies the
                // grant (or takes over after it), which is after the call; the answer may come
                // later still, from a node that applied it as a follower. So the call is the
                // instant the oracle can hold the store to.
                self.oracles.on_lease_ack(call, *id, *ttl);
                self.clients[client].lease = Some(HeldLease { id: *id, keep_alive: true });
                return;
            }
            (Request::KeepAlive { lease }, Reply::Ttl(ttl)) => {
                // The master renewed it at some instant between the call and the answer
                // (a follower forwards it, and the answer travels back): the call is the
                // instant the oracle can hold the store to, as for a grant.
                self.oracles.on_lease_ack(call, *lease, *ttl);
                return;
            }
            (Request::KeepAlive { .. }, Reply::Refused(_)) | (Request::Revoke { .. }, Reply::Done) => {
                // Gone (expired or revoked): take another one later.
                self.clients[client].lease = None;
                return;
            }
            _ => return,
        };
        self.history.push(Operation { client: cid, op, call, ret, outcome });
    }
}
