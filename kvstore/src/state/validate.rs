//! Front-door checks: what a request must satisfy before it is proposed.
use crate::command::{Command, RangeRequest};
use crate::error::KvError;
use crate::limits::Limits;

/// Checks a command against the limits (sizes, Txn shape, TTL sign, lease name) before it is
/// proposed. Semantic checks that depend on the state (unknown lease, name taken) happen
/// when it is applied.
pub fn validate_command(_command: &Command, _limits: &Limits) -> Result<(), KvError> {
    unimplemented!("state machine helper")
}

/// Checks a read request: key present and within limits, range end not before the key.
pub fn validate_range(_request: &RangeRequest, _limits: &Limits) -> Result<(), KvError> {
    unimplemented!("state machine helper")
}
