//! A read the replica decided may be served, with the view to serve it from: what a driver
//! hands to a reader thread so that no read, however large, runs on the loop that drives
//! replication (etcd answers a Range from a read transaction beside its apply loop).
//!
//! Everything that decides *whether* and *at which revision* a read is answered (the
//! replica stopped or corrupt, the request's limits, a linearizable read's mastership or
//! read lease, a compacted or future revision) happens when the job is made, on the loop;
//! [`ReadJob::run`] only reads.
//!
//! A read of one key at the current revision is answered when it is decided: it costs one
//! lookup, less than taking a view (publishing the history's tail, pinning it, waiting for
//! the engine's batches), and such reads are most of a store's reads
//! (`benches/cluster.rs`: 33,900 linearizable gets/s through views against 54,300 read
//! in place).

use super::request::RequestError;
use crate::command::{RangeRequest, RangeResponse};
use crate::state::ReadView;
use crate::types::Revision;

/// A read to serve on any thread: its view and request, or its answer when it was cheaper
/// to read than to hand over; either way with the store revision its answer's header
/// carries.
#[derive(Debug)]
pub struct ReadJob {
    work: Work,
    header_revision: Revision,
    /// The largest answer it may give, encoded (`Limits::max_response_bytes`).
    max_bytes: u64,
}

#[derive(Debug)]
enum Work {
    /// Read from the view on the thread that runs the job.
    View(ReadView, RangeRequest),
    /// Read when the job was made.
    Answered(Result<RangeResponse, RequestError>),
}

impl ReadJob {
    pub(super) fn new(view: ReadView, request: RangeRequest, header_revision: Revision, max_bytes: u64) -> Self {
        ReadJob { work: Work::View(view, request), header_revision, max_bytes }
    }

    pub(super) fn answered(answer: Result<RangeResponse, RequestError>, header_revision: Revision) -> Self {
        ReadJob { work: Work::Answered(answer), header_revision, max_bytes: u64::MAX }
    }

    /// Whether running the job costs no more than a lookup, so a driver may run it on
    /// the thread that decided it rather than hand it over.
    pub fn is_cheap(&self) -> bool {
        matches!(self.work, Work::Answered(_))
    }

    /// Reads: the answer and the header revision, as [`super::Replica::read_at`] gives them.
    /// The view (and its pin on the history) ends here, before the answer travels.
    pub fn run(self) -> Result<(RangeResponse, Revision), RequestError> {
        let response = match self.work {
            Work::View(view, request) => view.range_within(&request, self.max_bytes)?,
            Work::Answered(answer) => answer?,
        };
        Ok((response, self.header_revision))
    }
}
