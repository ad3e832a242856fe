//! Test-only access to the state engine's per-record encoders and decoders, for the
//! golden-file tests (`crate::golden`): the layout's items are private to [`super`], and
//! widening each of them for tests would blur what the state module exposes.
//!
//! Every function here only forwards to the production code; none decodes on its own.

use super::change_pages::decode_page;
use super::layout::{
    attachment_of_key, decode_framed, decode_stored, encode_event, event_key, lease_of_key, user_key, LeaseRecord,
    ATTACHMENT, EVENT, KEY, LEASE, META_AUTH, META_STATE,
};
use super::size_runs::{decode_legacy, decode_run, RunWriter};
use crate::auth::AuthStore;
use crate::engine::{EngineError, Write, WriteBatch};
use crate::types::{Event, KeyValue, LeaseId, Revision};

/// The first byte of the per-change size records that runs replaced (`size_runs`'s private
/// `LEGACY_SIZE`): they are no longer written, only read and converted.
const LEGACY_SIZE: u8 = b's';
/// The first byte of a size run's engine key (`size_runs`'s private `RUN`).
const RUN: u8 = b'r';

/// The kinds of record the state machine keeps in its engine, by engine key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum RecordKind {
    /// `k ++ key`: a stored key.
    Key,
    /// `e ++ position`: a page of changes (or one change, before pages).
    History,
    /// `r ++ position`: the sizes of a run of changes.
    SizeRun,
    /// `s ++ position`: one change's size, before runs.
    LegacySize,
    /// `l ++ id`: a lease.
    Lease,
    /// `a ++ lease ++ key`: a key's attachment to its lease.
    Attachment,
    /// `mstate`: the state's own record.
    State,
    /// `mauth`: the auth store.
    Auth,
}

/// The kind of the record at `engine_key`, or `None` for a key no kind of this build uses.
pub(crate) fn kind_of(engine_key: &[u8]) -> Option<RecordKind> {
    match engine_key {
        META_STATE => Some(RecordKind::State),
        META_AUTH => Some(RecordKind::Auth),
        [first, ..] => match *first {
            KEY => Some(RecordKind::Key),
            EVENT => Some(RecordKind::History),
            RUN => Some(RecordKind::SizeRun),
            LEGACY_SIZE => Some(RecordKind::LegacySize),
            LEASE => Some(RecordKind::Lease),
            ATTACHMENT => Some(RecordKind::Attachment),
            _ => None,
        },
        [] => None,
    }
}

/// A key's record, decoded as the key space reads it (its value empty when the history
/// holds it).
pub(crate) fn decode_key(engine_key: &[u8], value: &[u8]) -> Result<KeyValue, EngineError> {
    decode_stored(user_key(engine_key), value).map(|stored| stored.kv)
}

/// A history record (a page, or a single change of the layout before pages), decoded.
pub(crate) fn decode_history(engine_key: &[u8], value: &[u8]) -> Result<Vec<Event>, EngineError> {
    decode_page(engine_key, value)
}

/// A size run as `(main, sub, bytes)` of each change, and whether it is a page's run.
pub(crate) type SizeRun = (Vec<(Revision, u32, u64)>, bool);

/// A size run's record, decoded.
pub(crate) fn decode_size_run(engine_key: &[u8], value: &[u8]) -> Result<SizeRun, EngineError> {
    let run = decode_run(engine_key, value)?;
    Ok((run.entries.iter().map(|e| (e.main, e.sub, e.bytes)).collect(), run.paged))
}

/// A per-change size record of the layout before runs, decoded as `(main, sub, bytes)`.
pub(crate) fn decode_legacy_size(engine_key: &[u8], value: &[u8]) -> Result<(Revision, u32, u64), EngineError> {
    decode_legacy(engine_key, value).map(|e| (e.main, e.sub, e.bytes))
}

/// A lease's record, decoded as `(id, name, ttl)`.
pub(crate) fn decode_lease(engine_key: &[u8], value: &[u8]) -> Result<(LeaseId, Option<String>, i64), EngineError> {
    let id = lease_of_key(engine_key)
        .ok_or_else(|| EngineError::Corrupt { what: "a lease record".into(), detail: format!("key {engine_key:?}") })?;
    let record: LeaseRecord = decode_framed("a lease record", value)?;
    Ok((id, record.name, record.ttl))
}

/// An attachment's engine key, decoded as `(lease, key)` (its value is empty).
pub(crate) fn decode_attachment(engine_key: &[u8]) -> Option<(LeaseId, Vec<u8>)> {
    attachment_of_key(engine_key).map(|(lease, key)| (lease, key.to_vec()))
}

/// The auth store's record, decoded.
pub(crate) fn decode_auth(value: &[u8]) -> Result<AuthStore, EngineError> {
    decode_framed("the auth store", value)
}

/// The engine key and record of one change as the layout before pages wrote it (format 1),
/// still read as a page of one.
pub(crate) fn encode_legacy_event(main: Revision, sub: u32, event: &Event) -> (Vec<u8>, Vec<u8>) {
    (event_key(main, sub), encode_event(event))
}

/// The engine key and record of a size run of changes stored one a record (format 1), as
/// the layout before pages wrote it.
pub(crate) fn encode_legacy_run(entries: &[(Revision, u32, u64)]) -> (Vec<u8>, Vec<u8>) {
    let mut batch = WriteBatch::new();
    let mut writer = RunWriter::default();
    for &(main, sub, bytes) in entries {
        writer.push(&mut batch, main, sub, bytes);
    }
    writer.finish(&mut batch);
    match batch.into_writes().pop() {
        Some(Write::Put(key, value)) => (key, value),
        other => panic!("a run writer wrote {other:?}, not one run"),
    }
}

/// The engine key of a per-change size record of the layout before runs. Nothing writes
/// them any more (there is no encoder to call): their value is the size, a big-endian `u64`.
pub(crate) fn legacy_size_key(main: Revision, sub: u32) -> Vec<u8> {
    let mut key = event_key(main, sub);
    key[0] = LEGACY_SIZE;
    key
}
