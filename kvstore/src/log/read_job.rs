//! A read the replica decided may be served, with the view to serve it from: what a driver
//! hands to a reader thread so that no read, however large, runs on the loop that drives
//! replication (etcd answers a Range from a read transaction beside its apply loop).
//!
//! Everything that decides *whether* and *at which revision* a read is answered (the
//! replica stopped or corrupt, the request's limits, a linearizable read's mastership or
//! read lease, a compacted or future revision) happens when the job is made, on the loop;
//! [`ReadJob::run`] only reads.

use super::request::RequestError;
use crate::command::{RangeRequest, RangeResponse};
use crate::state::ReadView;
use crate::types::Revision;

/// A read to serve on any thread: its view, the request and the store revision its answer's
/// header carries.
#[derive(Debug)]
pub struct ReadJob {
    view: ReadView,
    request: RangeRequest,
    header_revision: Revision,
}

impl ReadJob {
    pub(super) fn new(view: ReadView, request: RangeRequest, header_revision: Revision) -> Self {
        ReadJob { view, request, header_revision }
    }

    /// The revision the answer reflects: the store revision when the read was decided
    /// (the answer's header), whatever revision the request read.
    pub fn header_revision(&self) -> Revision {
        self.header_revision
    }

    /// The request.
    pub fn request(&self) -> &RangeRequest {
        &self.request
    }

    /// Reads: the answer and the header revision, as [`super::Replica::read_at`] gives them.
    pub fn run(&self) -> Result<(RangeResponse, Revision), RequestError> {
        let response = self.view.range(&self.request)?;
        Ok((response, self.header_revision))
    }
}
