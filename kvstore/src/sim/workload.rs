//! The simulated clients: what they ask, and how answers become the checked history.

use leasekv_lease::rng::SplitMix64;
use leasekv_lease::NodeId;

use crate::types::LeaseId;

/// Keys whose history the linearizability checker sees.
pub const CHECKED_KEYS: usize = 6;

/// A client request as it travels to a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Write `value` (unique per put) to a checked key.
    Put { key: usize, value: u64 },
    /// Read a checked key.
    Get { key: usize, linearizable: bool },
    /// Delete a checked key.
    Delete { key: usize },
    /// If the key holds `expected` (None: absent) write `new` (a single-key Txn).
    Cas { key: usize, expected: Option<u64>, new: u64 },
    /// Grant a named lease.
    Grant { name: String, ttl: i64 },
    /// Attach this client's lease key to a lease.
    PutOnLease { client: u32, lease: LeaseId },
    /// Keep a lease alive.
    KeepAlive { lease: LeaseId },
    /// Revoke a lease.
    Revoke { lease: LeaseId },
}

impl Request {
    /// Whether the request goes through the log (and so can end indeterminate).
    pub fn is_write(&self) -> bool {
        !matches!(self, Request::Get { .. } | Request::KeepAlive { .. })
    }
}

/// A node's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Done, nothing to report.
    Done,
    /// A read's value.
    Value(Option<u64>),
    /// A delete: whether a key was deleted.
    Deleted(bool),
    /// A CAS: whether it swapped.
    Swapped(bool),
    /// A grant.
    Granted { id: LeaseId, ttl: i64 },
    /// A keepalive: the TTL.
    Ttl(i64),
    /// Not master; nothing happened.
    NotMaster(Option<NodeId>),
    /// The outcome is unknown.
    Indeterminate,
    /// Refused for a reason that makes the request have no effect.
    Refused(String),
}

/// A lease a client holds.
#[derive(Debug, Clone)]
pub struct HeldLease {
    /// Its id.
    pub id: LeaseId,
    /// Keep it alive (false: the client abandoned it and it should expire).
    pub keep_alive: bool,
}

/// One client: issues one request at a time.
#[derive(Debug)]
pub struct Client {
    /// Its id.
    pub id: u32,
    /// Which node it sends to (index).
    pub target: usize,
    /// The request in flight: (request id, request, call time).
    pub in_flight: Option<(u64, Request, u64)>,
    /// Next request id.
    pub next_request: u64,
    /// Puts so far (for unique values).
    pub puts: u64,
    /// Its lease, if it holds one.
    pub lease: Option<HeldLease>,
    /// Leases granted so far (for unique names).
    pub grants: u32,
    /// The last value it saw per checked key (to make CAS succeed sometimes).
    pub seen: Vec<Option<u64>>,
    /// A request to send again next, with its id (only the broken client of a negative
    /// control).
    pub resend: Option<(u64, Request)>,
}

impl Client {
    /// A client starting at a random node.
    pub fn new(id: u32, target: usize) -> Self {
        Client {
            id,
            target,
            in_flight: None,
            next_request: 0,
            puts: 0,
            lease: None,
            grants: 0,
            seen: vec![None; CHECKED_KEYS],
            resend: None,
        }
    }

    fn unique_value(&mut self) -> u64 {
        self.puts += 1;
        ((self.id as u64) << 40) | self.puts
    }

    /// Picks the next request.
    pub fn next(&mut self, rng: &mut SplitMix64) -> Request {
        let key = rng.range_u64(0, CHECKED_KEYS as u64 - 1) as usize;
        let roll = rng.range_u64(0, 99);
        if roll < 15 {
            if let Some(request) = self.lease_request(rng) {
                return request;
            }
        }
        match roll {
            0..=39 => Request::Put { key, value: self.unique_value() },
            40..=64 => Request::Get { key, linearizable: true },
            65..=72 => Request::Get { key, linearizable: false },
            73..=84 => Request::Delete { key },
            _ => {
                let expected = if rng.chance(0.8) { self.seen[key] } else { None };
                Request::Cas { key, expected, new: self.unique_value() }
            }
        }
    }

    fn lease_request(&mut self, rng: &mut SplitMix64) -> Option<Request> {
        match &mut self.lease {
            None => {
                self.grants += 1;
                let ttl = rng.range_u64(1, 4) as i64;
                Some(Request::Grant { name: format!("c{}-{}", self.id, self.grants), ttl })
            }
            Some(lease) if !lease.keep_alive => {
                // Abandoned: forget it after a while and start another.
                if rng.chance(0.05) {
                    self.lease = None;
                }
                None
            }
            Some(lease) => {
                let id = lease.id;
                match rng.range_u64(0, 99) {
                    0..=59 => Some(Request::KeepAlive { lease: id }),
                    60..=79 => Some(Request::PutOnLease { client: self.id, lease: id }),
                    80..=89 => {
                        lease.keep_alive = false;
                        None
                    }
                    _ => Some(Request::Revoke { lease: id }),
                }
            }
        }
    }
}
