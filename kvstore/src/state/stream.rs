//! Snapshot formats 8 and 9: the state written as a stream of frames from a [`StateView`],
//! in bounded memory, and read back as any earlier format is.
//!
//! ```text
//! format (postcard u32: 9, or 8)
//! frame*: length (u32 LE) ++ postcard(Frame)
//!   Header { revision, tenure, grant_counter, digest, compacted, leases, alarms, membership, auth }
//!   Keys([kv])          format 8: the live keys at the revision, in key order, over as many frames as needed
//!   StoredKeys([(kv, in_change)])  format 9: the same, each with whether its value was left
//!                       out (empty) because the stream holds it in the key's change
//!   Pages([(engine key, record)])  format 9: the history's records wholly below the compaction
//!                       point, as stored (they hold the values of the keys that name them)
//!   Events([event])     the retained history through the revision, in order
//!   End { keys, events } how many keys and events came, so that a cut stream is refused
//! ```
//!
//! Why format 9: a key's value is stored once, in its change, and its record names the
//! change. Format 8 sent every value in its key's record and the installing member wrote
//! it there, a kilobyte into sled per key, which was most of a catch-up's cost. Format 9
//! sends the pages that hold the values as they are stored: the member appends them (to
//! its value files) and writes small records naming them.
//!
//! Unlike formats 3 to 7 it holds no dead keys (keys of a revoked or expired lease not yet
//! swept): they do not exist for any reader, and a view reads the key space as readers see
//! it. A replica restored from it has nothing to sweep where its source still may.

use super::change_pages::{decode_page, walk_record};
use super::graveyard::Graveyard;
use super::history::{History, Retiring};
use super::keyspace::Keyspace;
use super::layout::event_position;
use super::lease_table::{Lease, LeaseTable};
use super::snapshot::{
    check_history, checked_event, checked_key, checked_leases, kind_code, unknown_lease, ByteBuf, DecodedHistory,
    HistoryIn, KvIn, KvOut, LeaseRecord, Restored, SnapshotIn,
};
use super::view::StateView;
use super::Failure;
use super::SnapshotError;
use crate::auth::AuthStore;
use crate::command::{Alarm, Tenure};
use crate::engine::Engine;
use crate::engine::EngineError;
use crate::engine::WriteBatch;
use crate::membership::Membership;
use crate::types::{Event, EventKind, KeyValue, Revision};
use crate::types::{LeaseId, NO_LEASE};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::io::Read;
use std::io::Write;
use std::sync::Arc;

/// The format number this build writes, the stream's first value.
pub const FORMAT: u32 = 9;
/// The first streamed format, still read (keys with their values, no pages).
const FORMAT_8: u32 = 8;

/// Whether a stream of `format` is one this module reads.
pub(super) fn streamed(format: u32) -> bool {
    format == FORMAT_8 || format == FORMAT
}

/// The longest frame a reader accepts: a page of keys of the largest values.
const MAX_FRAME: usize = 1 << 30;

/// A frame as written. postcard numbers the variants in order: a new kind of frame goes
/// last (formats 8 and 9 share the first four), and [`FrameIn`] follows the same order.
#[derive(Serialize)]
enum FrameOut<'a> {
    Header(HeaderOut<'a>),
    Keys(Vec<KvOut<'a>>),
    Events(Vec<(u8, KvOut<'a>, Option<KvOut<'a>>)>),
    End { keys: u64, events: u64 },
    StoredKeys(Vec<(KvOut<'a>, bool)>),
    Pages(Vec<(RawBytes<'a>, RawBytes<'a>)>),
}

/// A frame as read: [`FrameOut`]'s variants, in its order.
#[derive(Deserialize)]
enum FrameIn {
    Header(Box<HeaderIn>),
    Keys(Vec<KvIn>),
    Events(Vec<(u8, KvIn, Option<KvIn>)>),
    End { keys: u64, events: u64 },
    StoredKeys(Vec<(KvIn, bool)>),
    Pages(Vec<(ByteBuf, ByteBuf)>),
}

/// A byte string written as one (a page's engine key or its record).
struct RawBytes<'a>(&'a [u8]);

impl Serialize for RawBytes<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
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

/// Writes `view`'s state as a format 9 snapshot to `out` (what a peer or a backup gets);
/// returns the bytes written.
pub fn write(view: &StateView, out: &mut impl Write) -> Result<u64, EngineError> {
    write_format(view, out, FORMAT)
}

/// Writes `view`'s state as a format 8 snapshot to `out`: for a peer of a build before
/// format 9, and for a hash of the state. Unlike format 9 its bytes depend only on the
/// state, not on how the member's engine stores it (which pages its flushes wrote), so
/// that two members in the same state hash the same. Returns the bytes written.
pub fn write_format8(view: &StateView, out: &mut impl Write) -> Result<u64, EngineError> {
    write_format(view, out, FORMAT_8)
}

fn write_format(view: &StateView, out: &mut impl Write, format_number: u32) -> Result<u64, EngineError> {
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
    let format = postcard::to_stdvec(&format_number).unwrap_or_default();
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
    if format_number == FORMAT_8 {
        view.keys_at(meta.revision, |kvs: Vec<KeyValue>| {
            keys += kvs.len() as u64;
            frame(out, &FrameOut::Keys(kvs.iter().map(KvOut).collect()))
        })?;
    } else {
        let (pages_end, pages_until) = view.pages_below_compaction_end()?;
        view.keys_naming_changes(pages_until, |kvs: Vec<(KeyValue, bool)>| {
            keys += kvs.len() as u64;
            frame(out, &FrameOut::StoredKeys(kvs.iter().map(|(kv, named)| (KvOut(kv), *named)).collect()))
        })?;
        view.pages_below_compaction(&pages_end, |pages: Vec<(Vec<u8>, Vec<u8>)>| {
            frame(out, &FrameOut::Pages(pages.iter().map(|(k, r)| (RawBytes(k), RawBytes(r))).collect()))
        })?;
    }
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

/// Reads a format 8 or 9 snapshot whole; the caller validates what it holds. The values a
/// format 9 stream sends in their changes are put back into their keys.
pub(super) fn parse(bytes: &[u8]) -> Result<Parts, SnapshotError> {
    let bad = |detail: String| SnapshotError::Corrupt(detail);
    let (format, mut rest): (u32, _) =
        postcard::take_from_bytes(bytes).map_err(|e| bad(format!("cannot decode: {e}")))?;
    if !streamed(format) {
        return Err(bad(format!("format {format} is not {FORMAT_8} or {FORMAT}")));
    }
    let mut header: Option<HeaderIn> = None;
    let mut kvs: Vec<KvIn> = Vec::new();
    // The keys sent without their values: key → (the revision of the change holding it,
    // the key's place in `kvs`).
    let mut named: HashMap<Vec<u8>, (Revision, usize)> = HashMap::new();
    let mut pages: Vec<(ByteBuf, ByteBuf)> = Vec::new();
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
        let in_keys = pages.is_empty() && events.is_empty();
        match (frame, header.is_some()) {
            (FrameIn::Header(h), false) => header = Some(*h),
            (FrameIn::Header(_), true) => return Err(bad("a second header".into())),
            (_, false) => return Err(bad("the stream does not start with its header".into())),
            (FrameIn::Keys(_) | FrameIn::StoredKeys(_), true) if !in_keys => {
                return Err(bad("keys after the history".into()))
            }
            (FrameIn::Keys(page), true) if format == FORMAT_8 => kvs.extend(page),
            (FrameIn::StoredKeys(page), true) if format == FORMAT => {
                for (kv, in_change) in page {
                    if in_change {
                        named.insert(kv.0 .0.clone(), (kv.3, kvs.len()));
                    }
                    kvs.push(kv);
                }
            }
            (FrameIn::Pages(page), true) if format == FORMAT && events.is_empty() => pages.extend(page),
            (FrameIn::Events(page), true) => events.extend(page),
            (FrameIn::End { keys, events }, true) => end = Some((keys, events)),
            (_, true) => return Err(bad(format!("a frame out of place in a format {format} stream"))),
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
    let mut put_back = |key: &[u8], revision: Revision, value: &[u8]| {
        if let Some(&(wanted, at)) = named.get(key) {
            if wanted == revision {
                kvs[at].1 = ByteBuf(value.to_vec());
                named.remove(key);
            }
        }
    };
    let mut checked = PageCheck::new(header.compacted);
    for (ByteBuf(key), ByteBuf(record)) in &pages {
        checked.next(key, record)?;
        for event in decode_page(key, record).map_err(|e| bad(e.to_string()))? {
            if event.kind == crate::types::EventKind::Put {
                put_back(&event.kv.key, event.revision(), &event.kv.value);
            }
        }
    }
    for (kind, kv, _) in &events {
        if *kind == kind_code(crate::types::EventKind::Put) {
            put_back(&kv.0 .0, kv.3, &kv.1 .0);
        }
    }
    if let Some((key, (revision, _))) = named.iter().next() {
        return Err(bad(format!(
            "key {:?}'s value is its change at revision {revision}, which the snapshot does not hold",
            String::from_utf8_lossy(key)
        )));
    }
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

/// Checks the records of `Pages` frames one by one: history records in engine order, each
/// holding changes in order, all below the compaction point.
struct PageCheck {
    compacted: Revision,
    last_key: Option<Vec<u8>>,
    last_change: Revision,
}

impl PageCheck {
    fn new(compacted: Revision) -> Self {
        PageCheck { compacted, last_key: None, last_change: 0 }
    }

    /// Checks the record `record` stored under `key`; returns the revision of its first
    /// change and of its last.
    fn next(&mut self, key: &[u8], record: &[u8]) -> Result<(Revision, Revision), SnapshotError> {
        let bad = |detail: String| SnapshotError::Corrupt(detail);
        let (first, _) =
            event_position(key).ok_or_else(|| bad(format!("a page's engine key {key:?} is not a history position")))?;
        if self.last_key.as_deref().is_some_and(|last| last >= key) {
            return Err(bad(format!("the page at revision {first} is out of order or repeated")));
        }
        let (mut problem, mut last) = (None, first);
        let mut seen = false;
        walk_record(key, record, |_, _, revision, _| {
            let in_order = revision >= self.last_change && revision >= last && (seen || revision == first);
            if !in_order || revision >= self.compacted {
                problem.get_or_insert(revision);
            }
            seen = true;
            last = revision;
        })
        .map_err(|e| bad(e.to_string()))?;
        if let Some(revision) = problem.or((!seen).then_some(first)) {
            return Err(bad(format!(
                "the page at revision {first} holds a change at revision {revision}: out of order, or not below the compaction point {}",
                self.compacted
            )));
        }
        self.last_key = Some(key.to_vec());
        self.last_change = last;
        Ok((first, last))
    }
}

/// Frames read one at a time from a format 8 or 9 stream.
struct Frames<R: Read> {
    inner: R,
    format: u32,
}

impl<R: Read> Frames<R> {
    /// Reads the stream's format and checks it is 8 or 9.
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
        if !streamed(format) {
            return Err(SnapshotError::Corrupt(format!("format {format} is not {FORMAT_8} or {FORMAT}")));
        }
        Ok(Frames { inner, format })
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

/// A format 8 or 9 stream read frame by frame, with every check the whole-buffer reader
/// makes ([`parse`] and `snapshot::validate`), holding one frame and the lease table at a
/// time: the keys, then the pages, then the history, are handed out one by one, so that a
/// snapshot of any size is checked or installed in bounded memory.
struct Incoming<R: Read> {
    frames: Frames<R>,
    header: HeaderIn,
    /// The snapshot's leases, each with the keys attached to it so far.
    leases: BTreeMap<LeaseId, Lease>,
    /// Keys of the frame being read, each with whether its value is left to its change.
    keys: std::vec::IntoIter<(KvIn, bool)>,
    pages: std::vec::IntoIter<(ByteBuf, ByteBuf)>,
    changes: std::vec::IntoIter<(u8, KvIn, Option<KvIn>)>,
    part: Part,
    end: Option<(u64, u64)>,
    last_key: Option<Vec<u8>>,
    page_check: PageCheck,
    last_change: Revision,
    counted: (u64, u64),
    /// Keys whose values were left to their changes.
    named: u64,
    /// The first problem found; once set, nothing more is handed out.
    error: Option<SnapshotError>,
}

/// The part of a stream being read: its parts come in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    Keys,
    Pages,
    History,
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
        let page_check = PageCheck::new(header.compacted);
        Ok(Incoming {
            frames,
            header,
            leases,
            keys: Vec::new().into_iter(),
            pages: Vec::new().into_iter(),
            changes: Vec::new().into_iter(),
            part: Part::Keys,
            end: None,
            last_key: None,
            page_check,
            last_change,
            counted: (0, 0),
            named: 0,
            error: None,
        })
    }

    /// The stream's format.
    fn format(&self) -> u32 {
        self.frames.format
    }

    /// Reads the next frame after the header.
    fn advance(&mut self) -> Result<(), SnapshotError> {
        let format = self.format();
        let out_of_place = |what: &str| Err(SnapshotError::Corrupt(format!("{what} in a format {format} stream")));
        match self.frames.next()? {
            None => Err(SnapshotError::Corrupt("the stream is cut: no end".into())),
            Some(FrameIn::Header(_)) => Err(SnapshotError::Corrupt("a second header".into())),
            Some(FrameIn::Keys(_) | FrameIn::StoredKeys(_)) if self.part > Part::Keys => {
                Err(SnapshotError::Corrupt("keys after the history".into()))
            }
            Some(FrameIn::Keys(page)) if format == FORMAT_8 => {
                self.keys = page.into_iter().map(|kv| (kv, false)).collect::<Vec<_>>().into_iter();
                Ok(())
            }
            Some(FrameIn::StoredKeys(page)) if format == FORMAT => {
                self.keys = page.into_iter();
                Ok(())
            }
            Some(FrameIn::Keys(_) | FrameIn::StoredKeys(_)) => out_of_place("a frame of keys of another format"),
            Some(FrameIn::Pages(_)) if self.part > Part::Pages => out_of_place("pages after the history"),
            Some(FrameIn::Pages(page)) if format == FORMAT => {
                self.part = Part::Pages;
                self.pages = page.into_iter();
                Ok(())
            }
            Some(FrameIn::Pages(_)) => out_of_place("pages"),
            Some(FrameIn::Events(page)) => {
                self.part = Part::History;
                self.changes = page.into_iter();
                Ok(())
            }
            Some(FrameIn::End { keys, events }) => {
                self.end = Some((keys, events));
                Ok(())
            }
        }
    }

    fn check_key(&mut self, kv: KvIn, in_change: bool) -> Result<(KeyValue, bool), SnapshotError> {
        let kv = checked_key(kv, self.last_key.as_deref(), self.header.revision)?;
        if in_change && !kv.value.is_empty() {
            return Err(SnapshotError::Corrupt(format!(
                "key {:?} carries a value and says it is in its change",
                String::from_utf8_lossy(&kv.key)
            )));
        }
        if kv.lease != NO_LEASE {
            // Formats 8 and 9 hold no dead keys: every attached key's lease is live.
            let lease = self.leases.get_mut(&kv.lease).ok_or_else(|| unknown_lease(&kv.key, kv.lease))?;
            lease.keys.insert(&kv.key);
        }
        self.last_key = Some(kv.key.clone());
        self.counted.0 += 1;
        self.named += u64::from(in_change);
        Ok((kv, in_change))
    }

    /// Hands out what `take` finds in the part `part` while the stream is in it, reading
    /// frames as they are used up; `None` once the stream has left the part (or ended), or
    /// at the first problem.
    fn next_in<T>(
        &mut self,
        part: Part,
        mut take: impl FnMut(&mut Self) -> Option<Result<T, SnapshotError>>,
    ) -> Option<T> {
        loop {
            if self.error.is_some() || self.part > part || self.end.is_some() {
                return None;
            }
            let step = match take(self) {
                Some(found) => found.map(Some),
                None => self.advance().map(|()| None),
            };
            match step {
                Ok(Some(found)) => return Some(found),
                Ok(None) => {}
                Err(e) => {
                    self.error = Some(e);
                    return None;
                }
            }
        }
    }

    /// The next live key, checked, with whether its value is left to its change; `None`
    /// after the last one or at the first problem.
    fn next_key(&mut self) -> Option<(KeyValue, bool)> {
        self.next_in(Part::Keys, |this| this.keys.next().map(|(kv, in_change)| this.check_key(kv, in_change)))
    }

    /// The next history record below the compaction point, checked: its engine key, its
    /// record, and the revisions of its first and last changes; `None` after the last one
    /// or at the first problem. Keys not yet taken are checked and passed over.
    fn next_page(&mut self) -> Option<(Vec<u8>, Vec<u8>, Revision, Revision)> {
        while self.next_key().is_some() {}
        self.next_in(Part::Pages, |this| {
            let (ByteBuf(key), ByteBuf(record)) = this.pages.next()?;
            Some(this.page_check.next(&key, &record).map(|(first, last)| (key, record, first, last)))
        })
    }

    /// The next change of the history, checked; `None` after the last one or at the first
    /// problem. Keys and pages not yet taken are checked and passed over.
    fn next_change(&mut self) -> Option<Event> {
        while self.next_page().is_some() {}
        let event = self.next_in(Part::History, |this| {
            let change = this.changes.next()?;
            Some(checked_event(change, this.last_change, this.header.revision))
        })?;
        self.last_change = event.kv.mod_revision;
        self.counted.1 += 1;
        Some(event)
    }

    /// Checks the end: every key, page and change handed out or passed over, counted as
    /// the end frame says, and nothing after it.
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

/// Checks a format 8 or 9 stream read from `reader` (every check [`load_from`] makes but
/// that each value a key leaves to its change is there) without writing it anywhere;
/// holds one frame and the lease table at a time.
pub(super) fn check_from(reader: impl Read) -> Result<(), SnapshotError> {
    Incoming::open(reader)?.finish().map(|_| ())
}

/// Engine bytes of pages written per batch while a stream's pages are installed.
const PAGE_BATCH_BYTES: usize = 8 << 20;

/// Finds, as the changes of a snapshot pass in order, a key whose value is its change at
/// a revision the snapshot does not hold.
struct NamedWalk<I: Iterator<Item = Revision>> {
    named: I,
    next: Option<Revision>,
    missing: Option<Revision>,
}

impl<I: Iterator<Item = Revision>> NamedWalk<I> {
    fn new(mut named: I) -> Self {
        let next = named.next();
        NamedWalk { named, next, missing: None }
    }

    /// The snapshot holds a change at `revision`.
    fn held(&mut self, revision: Revision) {
        while let Some(wanted) = self.next.filter(|&wanted| wanted <= revision) {
            if wanted < revision {
                self.missing.get_or_insert(wanted);
            }
            self.next = self.named.next();
        }
    }

    /// The first named revision the snapshot did not hold, once every change passed.
    fn missing(&self) -> Option<Revision> {
        self.missing.or(self.next)
    }
}

/// Writes the state of a format 8 or 9 stream read from `reader` to `engine`, which holds
/// no state, in batches as the frames arrive. On an error the engine holds part of it:
/// check the stream first ([`check_from`]) where that matters.
pub(super) fn load_from(
    reader: impl Read,
    engine: &Arc<dyn Engine>,
    failure: &Failure,
) -> Result<Restored, SnapshotError> {
    let stored = |e: EngineError| SnapshotError::Storage(e.to_string());
    let mut incoming = Incoming::open(reader)?;
    let (compacted, revision) = (incoming.header.compacted, incoming.header.revision);
    let values_in_changes = incoming.format() == FORMAT;
    // A key whose change is in the history is stored naming it, as the state machine's
    // own flush stores it: its value is written once, in the change. Format 8 sends the
    // history from the compaction point on; format 9 also the pages below it that hold
    // values, and says which keys it sent without theirs.
    let mut keys = Keyspace::load_stored(
        Arc::clone(engine),
        failure.clone(),
        std::iter::from_fn(|| incoming.next_key()).map(|(kv, in_change)| {
            let in_history = if values_in_changes { in_change } else { kv.mod_revision >= compacted };
            (kv, in_history)
        }),
        Graveyard::default(),
    )
    .map_err(stored)?;
    // Every change a key names must come, in the pages or the history: checked as the
    // changes pass, against the named revisions in order. A format 9 key came without its
    // value, which counts toward the quota once its change is found.
    let mut walk = NamedWalk::new(
        keys.named_changes().ok_or_else(|| SnapshotError::Corrupt("the loaded keys' changes are unknown".into()))?,
    );
    let (mut found, mut value_bytes) = (0u64, 0u64);
    let mut count_value = |key: &[u8], revision: Revision, len: usize| {
        if values_in_changes && keys.names(key, revision) {
            found += 1;
            value_bytes += len as u64;
        }
    };
    let mut retiring = Vec::new();
    let mut batch = WriteBatch::new();
    let mut batch_bytes = 0;
    while let Some((key, record, first, last)) = incoming.next_page() {
        walk_record(&key, &record, |put, changed, revision, len| {
            if put {
                walk.held(revision);
                count_value(changed, revision, len);
            }
        })
        .map_err(|e| SnapshotError::Corrupt(e.to_string()))?;
        retiring.push(Retiring { key: key.clone(), first, last });
        batch_bytes += key.len() + record.len();
        batch.put(key, record);
        if batch_bytes >= PAGE_BATCH_BYTES {
            engine.write(std::mem::take(&mut batch)).map_err(stored)?;
            batch_bytes = 0;
        }
    }
    engine.write(batch).map_err(stored)?;
    let mut history = History::load(
        Arc::clone(engine),
        failure.clone(),
        std::iter::from_fn(|| incoming.next_change()).inspect(|change| {
            walk.held(change.revision());
            if change.kind == EventKind::Put {
                count_value(&change.kv.key, change.revision(), change.kv.value.len());
            }
        }),
        compacted,
        revision,
    )
    .map_err(stored)?;
    let named = incoming.named;
    let (header, leases) = incoming.finish()?;
    if let Some(missing) = walk.missing() {
        return Err(SnapshotError::Corrupt(format!(
            "a key's value is its change at revision {missing}, which the snapshot's history (from revision {compacted}) does not hold"
        )));
    }
    if found != named {
        return Err(SnapshotError::Corrupt(format!(
            "{named} keys left their values to their changes, and the snapshot holds {found} of those changes"
        )));
    }
    drop(walk);
    keys.add_value_bytes(value_bytes);
    history.retire_when_unnamed(retiring);
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

/// Whether `reader` starts with a streamed format's number (it is then read by
/// [`check_from`] and [`load_from`]; an older format is read whole).
pub(super) fn starts_streamed(reader: impl Read) -> bool {
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

    /// A state whose keys went to the engine in pages that compaction has since passed
    /// (any store that lives a while), with an overwrite and a delete among them: 1,500
    /// keys flushed 100 at a time (a page each), compacted at the first revision of the
    /// page after the 1,200th key plus `into_page`.
    fn paged_sample(into_page: i64) -> StateMachine {
        let mut sm = StateMachine::new();
        let mut slot = 0;
        let mut page_start = 0;
        for i in 0..1500 {
            sm.apply(&put(&format!("k{i:04}"), &format!("{i}").repeat(20 + i % 40), 0));
            if i % 100 == 99 {
                slot += 1;
                sm.flush_through(slot).unwrap();
                if i == 1199 {
                    page_start = sm.revision() + 1;
                }
            }
        }
        sm.apply(&put("k0007", "again", 0));
        sm.apply(&Command::DeleteRange(crate::command::DeleteRangeRequest {
            range: crate::types::KeyRange::single("k0008"),
            prev_kv: false,
        }));
        sm.apply(&Command::Compact { revision: page_start + into_page });
        sm.flush_through(slot + 1).unwrap();
        sm
    }

    fn frame_kinds(bytes: &[u8]) -> Vec<&'static str> {
        frames(bytes)
            .iter()
            .map(|f| match postcard::from_bytes(f).unwrap() {
                super::FrameIn::Header(_) => "header",
                super::FrameIn::Keys(_) => "keys",
                super::FrameIn::StoredKeys(_) => "stored keys",
                super::FrameIn::Pages(_) => "pages",
                super::FrameIn::Events(_) => "events",
                super::FrameIn::End { .. } => "end",
            })
            .collect()
    }

    /// The pages below the compaction point are sent as stored, and the installed keys
    /// name their changes in them (a value is written once on the new member too), read
    /// the same values and count the same bytes toward the quota; the whole-buffer reader
    /// puts the values back into their keys. Once overwrites and a compaction leave the
    /// pages unnamed, the installed member deletes them.
    #[test]
    fn pages_below_the_compaction_point_are_sent_whole_and_retired_once_unnamed() {
        // Compacted at a page's first revision: every page below is sent, every key but
        // the deleted one names its change. 40 revisions into a page: that page reaches
        // the compaction point and is not sent whole (its changes from the point on are),
        // so the 40 keys of its changes below the point carry their values.
        for (into_page, named) in [(0, 1499), (40, 1459)] {
            pages_are_sent_whole_and_retired_once_unnamed(into_page, named);
        }
    }

    fn pages_are_sent_whole_and_retired_once_unnamed(into_page: i64, named: usize) {
        use crate::engine::{Engine, MemoryEngine, Scan};
        let mut sm = paged_sample(into_page);
        let mut bytes = Vec::new();
        super::write(&sm.view().unwrap(), &mut bytes).unwrap();
        assert_eq!(bytes[0], 9);
        let kinds = frame_kinds(&bytes);
        assert!(kinds.contains(&"pages") && !kinds.contains(&"keys"), "{kinds:?}");
        let engine: std::sync::Arc<dyn Engine> = std::sync::Arc::new(MemoryEngine::new());
        let mut restored = StateMachine::install_snapshot_stream(&bytes[..], std::sync::Arc::clone(&engine)).unwrap();
        assert_eq!(restored.named_changes(), Some(named));
        assert_eq!(restored.to_snapshot_bytes(), sm.to_snapshot_bytes());
        assert_eq!(restored.bytes_in_use(), sm.bytes_in_use());
        assert_eq!(restored.hash_kv(0).unwrap(), sm.hash_kv(0).unwrap());
        let whole = StateMachine::from_snapshot_bytes(&bytes).unwrap();
        assert_eq!(whole.to_snapshot_bytes(), sm.to_snapshot_bytes());

        let history_records = |engine: &dyn Engine| {
            let bounds = (std::ops::Bound::Included(vec![b'e']), std::ops::Bound::Excluded(vec![b'f']));
            Scan::new(engine, bounds, false, 64).count()
        };
        let before = history_records(engine.as_ref());
        for i in 0..1500 {
            restored.apply(&put(&format!("k{i:04}"), "new", 0));
        }
        let head = restored.revision();
        restored.apply(&Command::Compact { revision: head });
        for slot in 1..=40 {
            restored.flush_through(slot).unwrap();
        }
        let after = history_records(engine.as_ref());
        assert!(before > 10 && after <= 2, "history records: {before} installed, {after} after the compaction");
    }

    /// A stream that lacks a page holding a value one of its keys left to its change (a
    /// damaged or hostile peer's) is refused by both readers, not installed with a key
    /// whose value cannot be read.
    #[test]
    fn a_stream_without_a_page_a_key_names_is_refused() {
        let mut sm = paged_sample(0);
        let mut bytes = Vec::new();
        super::write(&sm.view().unwrap(), &mut bytes).unwrap();
        let frames = frames(&bytes);
        let first_pages = frame_kinds(&bytes).iter().position(|k| *k == "pages").unwrap();
        let super::FrameIn::Pages(pages) = postcard::from_bytes(frames[first_pages]).unwrap() else { unreachable!() };
        let kept: Vec<_> = pages.iter().skip(1).map(|(k, r)| (super::RawBytes(&k.0), super::RawBytes(&r.0))).collect();
        let fewer = postcard::to_stdvec(&super::FrameOut::Pages(kept)).unwrap();
        let mut damaged = bytes[..1].to_vec();
        for (i, frame) in frames.iter().enumerate() {
            let frame: &[u8] = if i == first_pages { &fewer } else { frame };
            damaged.extend_from_slice(&(frame.len() as u32).to_le_bytes());
            damaged.extend_from_slice(frame);
        }
        let engine: std::sync::Arc<dyn crate::engine::Engine> = std::sync::Arc::new(crate::engine::MemoryEngine::new());
        let Err(error) = StateMachine::install_snapshot_stream(&damaged[..], engine) else { panic!("installed") };
        assert!(error.to_string().contains("does not hold"), "{error}");
        let Err(error) = StateMachine::from_snapshot_bytes(&damaged) else { panic!("restored") };
        assert!(error.to_string().contains("does not hold"), "{error}");
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
