//! Snapshot format 8: the state written as a stream of frames from a [`StateView`], in
//! bounded memory, and read back as any earlier format is.
//!
//! ```text
//! format (postcard u32: 8)
//! frame*: length (u32 LE) ++ postcard(Frame)
//!   Header { revision, tenure, grant_counter, digest, compacted, leases, alarms, membership, auth }
//!   Keys([kv])          the live keys at the revision, in key order, over as many frames as needed
//!   Events([event])     the retained history through the revision, in order
//!   End { keys, events } how many of each came, so that a cut stream is refused
//! ```
//!
//! Unlike formats 3 to 7 it holds no dead keys (keys of a revoked or expired lease not yet
//! swept): they do not exist for any reader, and a view reads the key space as readers see
//! it. A replica restored from it has nothing to sweep where its source still may.

use super::snapshot::{check_history, kind_code, DecodedHistory, HistoryIn, KvIn, KvOut, LeaseRecord, SnapshotIn};
use super::view::StateView;
use super::SnapshotError;
use crate::auth::AuthStore;
use crate::command::{Alarm, Tenure};
use crate::engine::EngineError;
use crate::membership::Membership;
use crate::types::{Event, KeyValue, Revision};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::io::Write;

/// The format number, the stream's first value.
pub const FORMAT: u32 = 8;

/// The longest frame a reader accepts: a page of keys of the largest values.
const MAX_FRAME: usize = 1 << 30;

#[derive(Serialize)]
enum FrameOut<'a> {
    Header(HeaderOut<'a>),
    Keys(Vec<KvOut<'a>>),
    Events(Vec<(u8, KvOut<'a>, Option<KvOut<'a>>)>),
    End { keys: u64, events: u64 },
}

#[derive(Deserialize)]
enum FrameIn {
    Header(Box<HeaderIn>),
    Keys(Vec<KvIn>),
    Events(Vec<(u8, KvIn, Option<KvIn>)>),
    End { keys: u64, events: u64 },
}

#[derive(Serialize)]
struct HeaderOut<'a> {
    revision: Revision,
    tenure: Tenure,
    grant_counter: u64,
    digest: u64,
    compacted: Revision,
    leases: Vec<LeaseRecord>,
    alarms: &'a BTreeSet<Alarm>,
    membership: &'a Membership,
    auth: &'a AuthStore,
}

#[derive(Deserialize)]
struct HeaderIn {
    revision: Revision,
    tenure: Tenure,
    grant_counter: u64,
    digest: u64,
    compacted: Revision,
    leases: Vec<LeaseRecord>,
    alarms: BTreeSet<Alarm>,
    membership: Membership,
    auth: AuthStore,
}

/// Writes `view`'s state as a format 8 snapshot to `out`; returns the bytes written.
pub fn write(view: &StateView, out: &mut impl Write) -> Result<u64, EngineError> {
    let mut written = 0u64;
    let io = |e: std::io::Error| EngineError::io("writing a snapshot", e);
    let mut frame = |out: &mut dyn Write, frame: &FrameOut<'_>| -> Result<(), EngineError> {
        let body = postcard::to_stdvec(frame)
            .map_err(|e| EngineError::Corrupt { what: "a snapshot frame".into(), detail: e.to_string() })?;
        let len = u32::try_from(body.len()).map_err(|_| EngineError::Corrupt {
            what: "a snapshot frame".into(),
            detail: format!("{} bytes is too long", body.len()),
        })?;
        out.write_all(&len.to_le_bytes()).map_err(io)?;
        out.write_all(&body).map_err(io)?;
        written += 4 + body.len() as u64;
        Ok(())
    };
    let format = postcard::to_stdvec(&FORMAT).unwrap_or_default();
    out.write_all(&format).map_err(io)?;
    let meta = view.meta();
    let leases = meta.leases.iter().map(|l| LeaseRecord { id: l.id, name: l.name.clone(), ttl: l.ttl }).collect();
    let header = HeaderOut {
        revision: meta.revision,
        tenure: meta.tenure,
        grant_counter: meta.grant_counter,
        digest: meta.digest,
        compacted: meta.compacted,
        leases,
        alarms: &meta.alarms,
        membership: &meta.membership,
        auth: &meta.auth,
    };
    frame(out, &FrameOut::Header(header))?;
    let (mut keys, mut events) = (0u64, 0u64);
    view.keys_at(meta.revision, |kvs: Vec<KeyValue>| {
        keys += kvs.len() as u64;
        frame(out, &FrameOut::Keys(kvs.iter().map(KvOut).collect()))
    })?;
    view.events_through(meta.revision, |page: Vec<Event>| {
        events += page.len() as u64;
        let out_events =
            page.iter().map(|e| (kind_code(e.kind), KvOut(&e.kv), e.prev_kv.as_ref().map(KvOut))).collect();
        frame(out, &FrameOut::Events(out_events))
    })?;
    frame(out, &FrameOut::End { keys, events })?;
    Ok(written + format.len() as u64)
}

/// What [`parse`] found, for [`super::snapshot::validate`].
pub(super) struct Parts {
    pub(super) snap: SnapshotIn,
    pub(super) history: DecodedHistory,
    pub(super) alarms: BTreeSet<Alarm>,
    pub(super) membership: Membership,
    pub(super) auth: AuthStore,
}

/// Reads a format 8 snapshot; the caller validates what it holds.
pub(super) fn parse(bytes: &[u8]) -> Result<Parts, SnapshotError> {
    let bad = |detail: String| SnapshotError(detail);
    let (format, mut rest): (u32, _) =
        postcard::take_from_bytes(bytes).map_err(|e| bad(format!("cannot decode: {e}")))?;
    if format != FORMAT {
        return Err(bad(format!("format {format} is not {FORMAT}")));
    }
    let mut header: Option<HeaderIn> = None;
    let mut kvs = Vec::new();
    let mut events = Vec::new();
    let mut end = None;
    while !rest.is_empty() {
        if end.is_some() {
            return Err(bad(format!("{} unexpected bytes after the end", rest.len())));
        }
        let (len, body) = rest.split_at_checked(4).ok_or_else(|| bad("a frame's length is cut".into()))?;
        let len = u32::from_le_bytes(len.try_into().map_err(|_| bad("a frame's length is cut".into()))?) as usize;
        if len > MAX_FRAME || len > body.len() {
            return Err(bad(format!("a frame of {len} bytes runs past the end ({} left)", body.len())));
        }
        let (body, next) = body.split_at(len);
        rest = next;
        let frame: FrameIn = postcard::from_bytes(body).map_err(|e| bad(format!("a frame does not decode: {e}")))?;
        match (frame, header.is_some()) {
            (FrameIn::Header(h), false) => header = Some(*h),
            (FrameIn::Header(_), true) => return Err(bad("a second header".into())),
            (_, false) => return Err(bad("the stream does not start with its header".into())),
            (FrameIn::Keys(page), true) if events.is_empty() => kvs.extend(page),
            (FrameIn::Keys(_), true) => return Err(bad("keys after the history".into())),
            (FrameIn::Events(page), true) => events.extend(page),
            (FrameIn::End { keys, events }, true) => end = Some((keys, events)),
        }
    }
    let header = header.ok_or_else(|| bad("no header".into()))?;
    let (keys, event_count) = end.ok_or_else(|| bad("the stream is cut: no end".into()))?;
    if keys != kvs.len() as u64 || event_count != events.len() as u64 {
        return Err(bad(format!(
            "the end counts {keys} keys and {event_count} changes, the stream holds {} and {}",
            kvs.len(),
            events.len()
        )));
    }
    header.auth.check().map_err(|problem| bad(format!("the auth store is inconsistent: {problem}")))?;
    let history = check_history(HistoryIn { compacted: header.compacted, events }, header.revision)?;
    Ok(Parts {
        snap: SnapshotIn {
            format,
            revision: header.revision,
            tenure: header.tenure,
            grant_counter: header.grant_counter,
            digest: header.digest,
            leases: header.leases,
            deaths: Vec::new(),
            kvs,
        },
        history,
        alarms: header.alarms,
        membership: header.membership,
        auth: header.auth,
    })
}

#[cfg(test)]
mod tests {
    use crate::command::{Command, PutRequest};
    use crate::StateMachine;

    fn put(key: &str, value: &str, lease: i64) -> Command {
        Command::Put(PutRequest { key: key.into(), value: value.into(), lease, prev_kv: false })
    }

    fn sample() -> StateMachine {
        let mut sm = StateMachine::new();
        sm.apply(&Command::LeaseGrant { id: 7, name: Some("svc".into()), ttl: 30 });
        for i in 0..1500 {
            sm.apply(&put(&format!("k{i:04}"), &"v".repeat(i % 40), if i % 3 == 0 { 7 } else { 0 }));
        }
        sm.apply(&Command::Compact { revision: 1000 });
        sm.flush().unwrap();
        sm
    }

    /// A streamed snapshot restores the state it was written from: same keys, leases with
    /// their keys, history, digest and hash.
    #[test]
    fn a_streamed_snapshot_restores_the_state() {
        let mut sm = sample();
        let mut bytes = Vec::new();
        let view = sm.view().unwrap();
        super::write(&view, &mut bytes).unwrap();
        let restored = StateMachine::from_snapshot_bytes(&bytes).unwrap();
        assert_eq!(restored.digest(), sm.digest());
        assert_eq!(restored.hash_kv(0).unwrap(), sm.hash_kv(0).unwrap());
        assert_eq!(restored.lease(7).map(|l| l.keys.len()), Some(500));
        assert_eq!(restored.to_snapshot_bytes(), sm.to_snapshot_bytes());
    }

    /// Cut anywhere, or with its counts wrong, the stream is refused, never half restored.
    #[test]
    fn a_cut_or_damaged_stream_is_refused() {
        let mut sm = sample();
        let mut bytes = Vec::new();
        super::write(&sm.view().unwrap(), &mut bytes).unwrap();
        for cut in [1, 5, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
            assert!(StateMachine::from_snapshot_bytes(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(StateMachine::from_snapshot_bytes(&trailing).is_err());
    }
}
