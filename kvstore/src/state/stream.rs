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

use super::graveyard::Graveyard;
use super::history::History;
use super::keyspace::Keyspace;
use super::lease_table::{Lease, LeaseTable};
use super::snapshot::{
    check_history, checked_event, checked_key, checked_leases, kind_code, unknown_lease, DecodedHistory, HistoryIn,
    KvIn, KvOut, LeaseRecord, Restored, SnapshotIn,
};
use super::view::StateView;
use super::Failure;
use super::SnapshotError;
use crate::auth::AuthStore;
use crate::command::{Alarm, Tenure};
use crate::engine::Engine;
use crate::engine::EngineError;
use crate::membership::Membership;
use crate::types::{Event, KeyValue, Revision};
use crate::types::{LeaseId, NO_LEASE};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::io::Read;
use std::io::Write;
use std::sync::Arc;

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
    let bad = |detail: String| SnapshotError::Corrupt(detail);
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

/// Frames read one at a time from a format 8 stream.
struct Frames<R: Read> {
    inner: R,
}

impl<R: Read> Frames<R> {
    /// Reads the stream's format and checks it is 8.
    fn open(mut inner: R) -> Result<Self, SnapshotError> {
        // The format is a postcard u32: a varint of at most five bytes.
        let mut varint = Vec::with_capacity(5);
        loop {
            let mut byte = [0u8];
            if read_up_to(&mut inner, &mut byte)? == 0 {
                return Err(SnapshotError::Corrupt("the stream is cut before its format".into()));
            }
            varint.push(byte[0]);
            if byte[0] & 0x80 == 0 || varint.len() == 5 {
                break;
            }
        }
        let format: u32 = postcard::from_bytes(&varint)
            .map_err(|e| SnapshotError::Corrupt(format!("cannot decode the format: {e}")))?;
        if format != FORMAT {
            return Err(SnapshotError::Corrupt(format!("format {format} is not {FORMAT}")));
        }
        Ok(Frames { inner })
    }

    /// The next frame, or `None` at a clean end of the input.
    fn next(&mut self) -> Result<Option<FrameIn>, SnapshotError> {
        let mut len = [0u8; 4];
        match read_up_to(&mut self.inner, &mut len)? {
            0 => return Ok(None),
            4 => {}
            _ => return Err(SnapshotError::Corrupt("a frame's length is cut".into())),
        }
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(SnapshotError::Corrupt(format!("a frame of {len} bytes is longer than any this build writes")));
        }
        // Grown as the bytes arrive: the length is the sender's word.
        let mut body = Vec::new();
        (&mut self.inner)
            .take(len as u64)
            .read_to_end(&mut body)
            .map_err(|e| SnapshotError::Corrupt(format!("cannot read the snapshot: {e}")))?;
        if body.len() < len {
            return Err(SnapshotError::Corrupt(format!(
                "a frame of {len} bytes runs past the end ({} left)",
                body.len()
            )));
        }
        postcard::from_bytes(&body)
            .map(Some)
            .map_err(|e| SnapshotError::Corrupt(format!("a frame does not decode: {e}")))
    }
}

/// Fills `buf` from `reader` unless the input ends first; returns how many bytes it read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> Result<usize, SnapshotError> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(SnapshotError::Corrupt(format!("cannot read the snapshot: {e}"))),
        }
    }
    Ok(filled)
}

/// A format 8 stream read frame by frame, with every check the whole-buffer reader makes
/// ([`parse`] and `snapshot::validate`), holding one frame and the lease table at a time:
/// the keys, then the history, are handed out one by one, so that a snapshot of any size is
/// checked or installed in bounded memory.
struct Incoming<R: Read> {
    frames: Frames<R>,
    header: HeaderIn,
    /// The snapshot's leases, each with the keys attached to it so far.
    leases: BTreeMap<LeaseId, Lease>,
    keys: std::vec::IntoIter<KvIn>,
    changes: std::vec::IntoIter<(u8, KvIn, Option<KvIn>)>,
    in_history: bool,
    end: Option<(u64, u64)>,
    last_key: Option<Vec<u8>>,
    last_change: Revision,
    counted: (u64, u64),
    /// The first problem found; once set, nothing more is handed out.
    error: Option<SnapshotError>,
}

impl<R: Read> Incoming<R> {
    /// Reads the format and the header and checks them.
    fn open(reader: R) -> Result<Self, SnapshotError> {
        let mut frames = Frames::open(reader)?;
        let mut header = match frames.next()? {
            Some(FrameIn::Header(header)) => *header,
            Some(_) => return Err(SnapshotError::Corrupt("the stream does not start with its header".into())),
            None => return Err(SnapshotError::Corrupt("the stream is cut: no header".into())),
        };
        if header.revision < 1 {
            return Err(SnapshotError::Corrupt(format!("revision {} is below 1", header.revision)));
        }
        if !(0..=header.revision).contains(&header.compacted) {
            return Err(SnapshotError::Corrupt(format!(
                "compaction point {} is outside 0..={}",
                header.compacted, header.revision
            )));
        }
        header
            .auth
            .check()
            .map_err(|problem| SnapshotError::Corrupt(format!("the auth store is inconsistent: {problem}")))?;
        let leases = checked_leases(std::mem::take(&mut header.leases))?;
        let last_change = header.compacted;
        Ok(Incoming {
            frames,
            header,
            leases,
            keys: Vec::new().into_iter(),
            changes: Vec::new().into_iter(),
            in_history: false,
            end: None,
            last_key: None,
            last_change,
            counted: (0, 0),
            error: None,
        })
    }

    /// Reads the next frame after the header.
    fn advance(&mut self) -> Result<(), SnapshotError> {
        match self.frames.next()? {
            None => Err(SnapshotError::Corrupt("the stream is cut: no end".into())),
            Some(FrameIn::Header(_)) => Err(SnapshotError::Corrupt("a second header".into())),
            Some(FrameIn::Keys(_)) if self.in_history => Err(SnapshotError::Corrupt("keys after the history".into())),
            Some(FrameIn::Keys(page)) => {
                self.keys = page.into_iter();
                Ok(())
            }
            Some(FrameIn::Events(page)) => {
                self.in_history = true;
                self.changes = page.into_iter();
                Ok(())
            }
            Some(FrameIn::End { keys, events }) => {
                self.end = Some((keys, events));
                Ok(())
            }
        }
    }

    fn check_key(&mut self, kv: KvIn) -> Result<KeyValue, SnapshotError> {
        let kv = checked_key(kv, self.last_key.as_deref(), self.header.revision)?;
        if kv.lease != NO_LEASE {
            // Format 8 holds no dead keys: every attached key's lease is live.
            let lease = self.leases.get_mut(&kv.lease).ok_or_else(|| unknown_lease(&kv.key, kv.lease))?;
            lease.keys.insert(&kv.key);
        }
        self.last_key = Some(kv.key.clone());
        self.counted.0 += 1;
        Ok(kv)
    }

    /// The next live key, checked; `None` after the last one or at the first problem.
    fn next_key(&mut self) -> Option<KeyValue> {
        loop {
            if self.error.is_some() || self.in_history || self.end.is_some() {
                return None;
            }
            let step = match self.keys.next() {
                Some(kv) => self.check_key(kv).map(Some),
                None => self.advance().map(|()| None),
            };
            match step {
                Ok(Some(kv)) => return Some(kv),
                Ok(None) => {}
                Err(e) => {
                    self.error = Some(e);
                    return None;
                }
            }
        }
    }

    /// The next change of the history, checked; `None` after the last one or at the first
    /// problem. Keys not yet taken are checked and passed over.
    fn next_change(&mut self) -> Option<Event> {
        while self.next_key().is_some() {}
        loop {
            if self.error.is_some() || self.end.is_some() {
                return None;
            }
            let step = match self.changes.next() {
                Some(change) => checked_event(change, self.last_change, self.header.revision).map(Some),
                None => self.advance().map(|()| None),
            };
            match step {
                Ok(Some(event)) => {
                    self.last_change = event.kv.mod_revision;
                    self.counted.1 += 1;
                    return Some(event);
                }
                Ok(None) => {}
                Err(e) => {
                    self.error = Some(e);
                    return None;
                }
            }
        }
    }

    /// Checks the end: every key and change handed out or passed over, counted as the end
    /// frame says, and nothing after it.
    fn finish(mut self) -> Result<(HeaderIn, BTreeMap<LeaseId, Lease>), SnapshotError> {
        while self.next_change().is_some() {}
        if let Some(error) = self.error {
            return Err(error);
        }
        let (keys, events) = self.end.ok_or_else(|| SnapshotError::Corrupt("the stream is cut: no end".into()))?;
        if (keys, events) != self.counted {
            return Err(SnapshotError::Corrupt(format!(
                "the end counts {keys} keys and {events} changes, the stream holds {} and {}",
                self.counted.0, self.counted.1
            )));
        }
        let mut rest = [0u8; 1];
        if read_up_to(&mut self.frames.inner, &mut rest)? != 0 {
            return Err(SnapshotError::Corrupt("unexpected bytes after the end".into()));
        }
        Ok((self.header, self.leases))
    }
}

/// Checks a format 8 stream read from `reader` (every check [`load_from`] makes) without
/// writing it anywhere; holds one frame and the lease table at a time.
pub(super) fn check_from(reader: impl Read) -> Result<(), SnapshotError> {
    Incoming::open(reader)?.finish().map(|_| ())
}

/// Writes the state of a format 8 stream read from `reader` to `engine`, which holds no
/// state, in batches as the frames arrive. On an error the engine holds part of it: check
/// the stream first ([`check_from`]) where that matters.
pub(super) fn load_from(
    reader: impl Read,
    engine: &Arc<dyn Engine>,
    failure: &Failure,
) -> Result<Restored, SnapshotError> {
    let stored = |e: EngineError| SnapshotError::Storage(e.to_string());
    let mut incoming = Incoming::open(reader)?;
    let (compacted, revision) = (incoming.header.compacted, incoming.header.revision);
    // A key whose change is in the history is stored naming it, as the state machine's
    // own flush stores it: its value is written once, in the change (the history holds
    // the changes from the compaction point on).
    let keys = Keyspace::load(
        Arc::clone(engine),
        failure.clone(),
        std::iter::from_fn(|| incoming.next_key()),
        Graveyard::default(),
        compacted,
    )
    .map_err(stored)?;
    // Every change a key names must come in the history: checked as the changes pass,
    // against the named revisions in order.
    let mut named =
        keys.named_changes().ok_or_else(|| SnapshotError::Corrupt("the loaded keys' changes are unknown".into()))?;
    let mut next_named = named.next();
    let mut missing = None;
    let history = History::load(
        Arc::clone(engine),
        failure.clone(),
        std::iter::from_fn(|| incoming.next_change()).inspect(|change| {
            while let Some(wanted) = next_named.filter(|&wanted| wanted <= change.revision()) {
                if wanted < change.revision() {
                    missing.get_or_insert(wanted);
                }
                next_named = named.next();
            }
        }),
        compacted,
        revision,
    )
    .map_err(stored)?;
    let (header, leases) = incoming.finish()?;
    if let Some(missing) = missing.or(next_named) {
        return Err(SnapshotError::Corrupt(format!(
            "a key's value is its change at revision {missing}, which the snapshot's history (from revision {compacted}) does not hold"
        )));
    }
    drop(named);
    let mut leases = LeaseTable::from_parts(leases, header.grant_counter);
    leases.mark_all_changed();
    Ok(Restored {
        revision: header.revision,
        tenure: header.tenure,
        digest: header.digest,
        keys,
        leases,
        history,
        alarms: header.alarms,
        membership: header.membership,
        auth: header.auth,
    })
}

/// Whether `reader` starts with this format's number (it is then read by [`check_from`]
/// and [`load_from`]; an older format is read whole).
pub(super) fn starts_format_8(reader: impl Read) -> bool {
    Frames::open(reader).is_ok()
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

    /// A key installed from a stream (a peer's snapshot) whose change is in the history
    /// names it instead of holding the value again (one write per value, as the state
    /// machine's own flush), and reads the same value.
    #[test]
    fn installed_keys_name_their_changes_and_read_the_same_values() {
        let mut sm = sample();
        let mut bytes = Vec::new();
        super::write(&sm.view().unwrap(), &mut bytes).unwrap();
        let engine: std::sync::Arc<dyn crate::engine::Engine> = std::sync::Arc::new(crate::engine::MemoryEngine::new());
        let mut restored = StateMachine::install_snapshot_stream(&bytes[..], engine).unwrap();
        // Keys written at or after the compaction point (revision 1000): k0998 (revision
        // 1000) through k1499.
        assert_eq!(restored.named_changes(), Some(502));
        for key in ["k0000", "k0998", "k0999", "k1499"] {
            assert_eq!(restored.get(key.as_bytes()), sm.get(key.as_bytes()), "{key}");
        }
        assert_eq!(restored.hash_kv(0).unwrap(), sm.hash_kv(0).unwrap());
    }

    /// The frames of a format 8 snapshot, after its format number.
    fn frames(bytes: &[u8]) -> Vec<&[u8]> {
        let mut rest = &bytes[1..];
        let mut out = Vec::new();
        while rest.len() >= 4 {
            let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
            out.push(&rest[4..4 + len]);
            rest = &rest[4 + len..];
        }
        out
    }

    /// A snapshot whose history lacks the change a key's value is in (a damaged or hostile
    /// peer's: its counts made to agree) is refused, not installed with a key whose value
    /// cannot be read.
    #[test]
    fn a_snapshot_whose_history_lacks_a_keys_change_is_refused() {
        let mut sm = sample();
        let mut bytes = Vec::new();
        super::write(&sm.view().unwrap(), &mut bytes).unwrap();
        let frames = frames(&bytes);
        let decoded: Vec<super::FrameIn> = frames.iter().map(|f| postcard::from_bytes(f).unwrap()).collect();
        let last_events = decoded.iter().rposition(|f| matches!(f, super::FrameIn::Events(_))).unwrap();
        let super::FrameIn::Events(dropped) = &decoded[last_events] else { unreachable!() };
        let super::FrameIn::End { keys, events } = decoded.last().unwrap() else { panic!("ends with End") };
        let end =
            postcard::to_stdvec(&super::FrameOut::End { keys: *keys, events: events - dropped.len() as u64 }).unwrap();
        let mut damaged = bytes[..1].to_vec();
        for (i, frame) in frames.iter().enumerate() {
            let frame: &[u8] = match i {
                i if i == last_events => continue,
                i if i == frames.len() - 1 => &end,
                _ => frame,
            };
            damaged.extend_from_slice(&(frame.len() as u32).to_le_bytes());
            damaged.extend_from_slice(frame);
        }
        let engine: std::sync::Arc<dyn crate::engine::Engine> = std::sync::Arc::new(crate::engine::MemoryEngine::new());
        let Err(error) = StateMachine::install_snapshot_stream(&damaged[..], engine) else { panic!("installed") };
        let error = error.to_string();
        assert!(error.contains("which the snapshot's history"), "{error}");
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

    /// A snapshot file is checked and installed frame by frame with the same result as the
    /// whole-buffer path; cut anywhere, damaged or followed by garbage, it fails the check.
    #[test]
    fn a_snapshot_file_installs_as_the_buffer_does_and_is_checked() {
        use crate::engine::{Engine, MemoryEngine};
        use std::sync::Arc;
        let mut sm = sample();
        let mut bytes = Vec::new();
        super::write(&sm.view().unwrap(), &mut bytes).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snap");
        std::fs::write(&path, &bytes).unwrap();
        StateMachine::check_snapshot_file(&path).unwrap();
        let engine: Arc<dyn Engine> = Arc::new(MemoryEngine::new());
        let restored = StateMachine::install_snapshot_file(&path, engine).unwrap();
        let whole = StateMachine::from_snapshot_bytes(&bytes).unwrap();
        assert_eq!(restored.digest(), sm.digest());
        assert_eq!(restored.hash_kv(0).unwrap(), whole.hash_kv(0).unwrap());
        assert_eq!(restored.lease(7).map(|l| l.keys.len()), Some(500));
        assert_eq!(restored.to_snapshot_bytes(), whole.to_snapshot_bytes());
        assert_eq!(restored.compacted_revision(), whole.compacted_revision());
        assert_eq!(restored.history_len(), whole.history_len());

        for cut in [0, 1, 5, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            assert!(StateMachine::check_snapshot_file(&path).is_err(), "cut at {cut}");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        std::fs::write(&path, &trailing).unwrap();
        assert!(StateMachine::check_snapshot_file(&path).is_err());
        // A flipped byte in every tenth position: refused or, where it only changes a
        // value, accepted; never a panic.
        for at in (0..bytes.len()).step_by(bytes.len() / 10) {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0xff;
            std::fs::write(&path, &damaged).unwrap();
            let _ = StateMachine::check_snapshot_file(&path);
        }
        // An older format in a file is read whole.
        std::fs::write(&path, sm.to_snapshot_bytes()).unwrap();
        StateMachine::check_snapshot_file(&path).unwrap();
        let old = StateMachine::install_snapshot_file(&path, Arc::new(MemoryEngine::new())).unwrap();
        assert_eq!(old.digest(), sm.digest());
    }
}
