//! The snapshot format: the whole replicated state (keys, leases, revision, id counter,
//! digest, alarms, membership, auth store) as postcard bytes.
//!
//! Lease key sets are not stored: they are implied by each key's `lease` field and rebuilt
//! on restore, which keeps snapshots smaller and makes a key/lease mismatch unrepresentable.
//!
//! Keys of revoked or expired leases that are not swept yet are stored like live keys, plus
//! the list of lease deaths (id, revision); the sweep's work lists are rebuilt from them with
//! the same rule that hides dead keys from readers. Keeping them (rather than leaving dead
//! keys out) means a restored replica has the very same pending cleanup as one that applied
//! the commands itself, so the two stay identical apply by apply, memory included.
//! Keys and values are written as byte strings (one length and a copy) rather than serde's
//! default sequence of `u8`s, which decodes one element at a time.
//!
//! Decoding never trusts the input: anything malformed or inconsistent is a
//! [`SnapshotError`], never a panic.

use super::graveyard::{Death, Graveyard};
use super::history::History;
use super::keyspace::Keyspace;
use super::lease_keys::LeaseKeys;
use super::lease_table::{Lease, LeaseTable, MAX_LEASE_NAME_BYTES};
use super::Failure;
use crate::auth::AuthStore;
use crate::command::{Alarm, Tenure};
use crate::engine::Engine;
use crate::membership::Membership;
use crate::types::{Event, EventKind, KeyValue, LeaseId, Revision, NO_LEASE};
use serde::de::{Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

/// A snapshot could not be decoded, or the state it holds could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The snapshot does not decode or does not hold a consistent state.
    #[error("state machine snapshot is corrupt: {0}")]
    Corrupt(String),
    /// The state decoded but could not be written to the engine (a full disk, an I/O
    /// error): the snapshot is fine, the place it was installed into is not.
    #[error("cannot store the state of the snapshot: {0}")]
    Storage(String),
}

impl SnapshotError {
    /// What went wrong, without the kind's prefix (for errors that wrap it).
    pub fn detail(&self) -> &str {
        match self {
            SnapshotError::Corrupt(detail) | SnapshotError::Storage(detail) => detail,
        }
    }
}

/// Bumped whenever the layout below changes, so that an old snapshot is refused with a
/// clear message instead of being misread.
/// 3: lease deaths still being swept, with their dead keys.
/// 4: format 3 followed by the MVCC history (compaction point and retained changes). A
///    format 3 snapshot is still read: its history starts, compacted, at its revision.
/// 5: format 4 followed by the raised alarms. Format 4 is still read, with no alarms.
/// 6: format 5 followed by the membership. Format 5 is still read, with none recorded.
/// 7: format 6 followed by the auth store. Format 6 is still read, with auth disabled and
///    no users or roles.
const FORMAT: u32 = 7;
/// The last format without the auth store, still accepted.
const FORMAT_WITHOUT_AUTH: u32 = 6;
/// The last format without the membership, still accepted.
const FORMAT_WITHOUT_MEMBERSHIP: u32 = 5;
/// The last format without alarms, still accepted.
const FORMAT_WITHOUT_ALARMS: u32 = 4;
/// The last format without history, still accepted.
const FORMAT_WITHOUT_HISTORY: u32 = 3;

/// Everything a snapshot holds, borrowed from the live state.
pub(super) struct Parts<'a> {
    /// The current revision.
    pub(super) revision: Revision,
    /// The newest master tenure applied.
    pub(super) tenure: Tenure,
    /// The running digest.
    pub(super) digest: u64,
    /// The key space.
    pub(super) keys: &'a Keyspace,
    /// The lease table.
    pub(super) leases: &'a LeaseTable,
    /// The history window.
    pub(super) history: &'a History,
    /// The raised alarms.
    pub(super) alarms: &'a BTreeSet<Alarm>,
    /// The membership.
    pub(super) membership: &'a Membership,
    /// Users, roles and whether auth is enabled.
    pub(super) auth: &'a AuthStore,
}

/// Everything a snapshot holds, decoded and checked.
pub(super) struct Restored {
    /// The revision.
    pub(super) revision: Revision,
    /// The newest master tenure applied.
    pub(super) tenure: Tenure,
    /// The digest.
    pub(super) digest: u64,
    /// The key space.
    pub(super) keys: Keyspace,
    /// The lease table, key sets included.
    pub(super) leases: LeaseTable,
    /// The history window.
    pub(super) history: History,
    /// The raised alarms.
    pub(super) alarms: BTreeSet<Alarm>,
    /// The membership.
    pub(super) membership: Membership,
    /// Users, roles and whether auth is enabled.
    pub(super) auth: AuthStore,
}

#[derive(Serialize)]
struct SnapshotOut<'a> {
    format: u32,
    revision: Revision,
    tenure: Tenure,
    grant_counter: u64,
    digest: u64,
    leases: Vec<LeaseRecord>,
    deaths: Vec<Death>,
    kvs: KvsOut<'a>,
}

#[derive(Deserialize)]
pub(super) struct SnapshotIn {
    pub(super) format: u32,
    pub(super) revision: Revision,
    pub(super) tenure: Tenure,
    pub(super) grant_counter: u64,
    pub(super) digest: u64,
    pub(super) leases: Vec<LeaseRecord>,
    pub(super) deaths: Vec<Death>,
    pub(super) kvs: Vec<KvIn>,
}

/// The section format 4 appends: the compaction point and every retained change, each as
/// `(kind, kv, prev_kv)` with key-values written like the key space's.
#[derive(Serialize)]
struct HistoryOut<'a> {
    compacted: Revision,
    events: EventsOut<'a>,
}

#[derive(Deserialize)]
pub(super) struct HistoryIn {
    pub(super) compacted: Revision,
    pub(super) events: Vec<(u8, KvIn, Option<KvIn>)>,
}

struct EventsOut<'a>(&'a History);

impl Serialize for EventsOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let events = self.0.events().map(|e| (kind_code(e.kind), OwnedKvOut(e.kv), e.prev_kv.map(OwnedKvOut)));
        counted_seq(serializer, self.0.len(), events, "history changes")
    }
}

/// Serialises `items`, which the state says are `len`, as a sequence of that length
/// (postcard writes the length first); an engine that yields another number (it failed
/// mid-way) is an error rather than a snapshot that would not decode.
fn counted_seq<S: Serializer, T: Serialize>(
    serializer: S,
    len: usize,
    items: impl Iterator<Item = T>,
    what: &str,
) -> Result<S::Ok, S::Error> {
    use serde::ser::{Error, SerializeSeq};
    let mut seq = serializer.serialize_seq(Some(len))?;
    let mut written = 0usize;
    for item in items {
        written += 1;
        if written > len {
            break;
        }
        seq.serialize_element(&item)?;
    }
    if written != len {
        return Err(S::Error::custom(format!("the state engine gave {written} {what}, not {len}")));
    }
    seq.end()
}

pub(super) fn kind_code(kind: EventKind) -> u8 {
    match kind {
        EventKind::Put => 0,
        EventKind::Delete => 1,
    }
}

/// A lease without its keys.
#[derive(Serialize, Deserialize)]
pub(super) struct LeaseRecord {
    pub(super) id: LeaseId,
    pub(super) name: Option<String>,
    pub(super) ttl: i64,
}

/// The stored keys (dead ones included) as a sequence, serialised straight from the B-tree
/// without a copy.
struct KvsOut<'a>(&'a Keyspace);

impl Serialize for KvsOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        counted_seq(serializer, self.0.stored_len(), self.0.stored().map(OwnedKvOut), "keys")
    }
}

/// [`KvOut`] of a key-value read from the engine.
struct OwnedKvOut(KeyValue);

impl Serialize for OwnedKvOut {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        KvOut(&self.0).serialize(serializer)
    }
}

/// One key-value with its byte fields written as byte strings.
pub(super) struct KvOut<'a>(pub(super) &'a KeyValue);

impl Serialize for KvOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let kv = self.0;
        let mut t = serializer.serialize_tuple(6)?;
        t.serialize_element(&Bytes(&kv.key))?;
        t.serialize_element(&Bytes(&kv.value))?;
        t.serialize_element(&kv.create_revision)?;
        t.serialize_element(&kv.mod_revision)?;
        t.serialize_element(&kv.version)?;
        t.serialize_element(&kv.lease)?;
        t.end()
    }
}

/// The decoding side of [`KvOut`] (a tuple struct is laid out as a tuple).
#[derive(Deserialize)]
pub(super) struct KvIn(
    pub(super) ByteBuf,
    pub(super) ByteBuf,
    pub(super) Revision,
    pub(super) Revision,
    pub(super) i64,
    pub(super) LeaseId,
);

struct Bytes<'a>(&'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

pub(super) struct ByteBuf(pub(super) Vec<u8>);

impl<'de> Deserialize<'de> for ByteBuf {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteBuf;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<ByteBuf, E> {
                Ok(ByteBuf(v.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<ByteBuf, E> {
                Ok(ByteBuf(v))
            }
        }
        deserializer.deserialize_byte_buf(V)
    }
}

/// Serialises the state. Fails only when the state engine failed while it was read.
pub(super) fn encode(parts: &Parts<'_>) -> Result<Vec<u8>, postcard::Error> {
    let leases = parts.leases.iter().map(|l| LeaseRecord { id: l.id, name: l.name.clone(), ttl: l.ttl }).collect();
    let out = SnapshotOut {
        format: FORMAT,
        revision: parts.revision,
        tenure: parts.tenure,
        grant_counter: parts.leases.grant_counter(),
        digest: parts.digest,
        leases,
        deaths: parts.keys.deaths().collect(),
        kvs: KvsOut(parts.keys),
    };
    // Sized by the quota's count of the state, which is close to the encoding's size: the
    // state can be hundreds of megabytes, and growing by doubling copied it several times.
    let estimate = parts.keys.bytes() + parts.history.bytes();
    let bytes = postcard::to_extend(&out, Vec::with_capacity(usize::try_from(estimate).unwrap_or(0)))?;
    let history = HistoryOut { compacted: parts.history.compacted(), events: EventsOut(parts.history) };
    let bytes = postcard::to_extend(&history, bytes)?;
    let bytes = postcard::to_extend(parts.alarms, bytes)?;
    let bytes = postcard::to_extend(parts.membership, bytes)?;
    postcard::to_extend(parts.auth, bytes)
}

/// Decodes the alarms section of a format 5 or 6 snapshot; returns what follows it.
fn decode_alarms(bytes: &[u8]) -> Result<(BTreeSet<Alarm>, &[u8]), SnapshotError> {
    postcard::take_from_bytes(bytes).map_err(|e| SnapshotError::Corrupt(format!("cannot decode the alarms: {e}")))
}

/// Decodes the membership section of a format 6 or 7 snapshot; returns what follows it.
fn decode_membership(bytes: &[u8]) -> Result<(Membership, &[u8]), SnapshotError> {
    postcard::take_from_bytes(bytes).map_err(|e| SnapshotError::Corrupt(format!("cannot decode the membership: {e}")))
}

/// Decodes and checks the auth section of a format 7 snapshot, which ends it.
fn decode_auth(bytes: &[u8]) -> Result<AuthStore, SnapshotError> {
    let (auth, rest): (AuthStore, _) = postcard::take_from_bytes(bytes)
        .map_err(|e| SnapshotError::Corrupt(format!("cannot decode the auth store: {e}")))?;
    no_trailing(rest)?;
    auth.check().map_err(|problem| SnapshotError::Corrupt(format!("the auth store is inconsistent: {problem}")))?;
    Ok(auth)
}

fn no_trailing(rest: &[u8]) -> Result<(), SnapshotError> {
    match rest.is_empty() {
        true => Ok(()),
        false => Err(SnapshotError::Corrupt(format!("{} unexpected trailing bytes", rest.len()))),
    }
}

/// Decodes the history section of a format 4 or 5 snapshot and checks it against the store
/// revision: changes in `(main, sub)` order, none below the compaction point or above the
/// store. Returns what follows it.
fn decode_history(bytes: &[u8], revision: Revision) -> Result<(DecodedHistory, &[u8]), SnapshotError> {
    let (section, rest): (HistoryIn, _) = postcard::take_from_bytes(bytes)
        .map_err(|e| SnapshotError::Corrupt(format!("cannot decode the history: {e}")))?;
    Ok((check_history(section, revision)?, rest))
}

/// Checks the history section against the store revision.
pub(super) fn check_history(section: HistoryIn, revision: Revision) -> Result<DecodedHistory, SnapshotError> {
    if !(0..=revision).contains(&section.compacted) {
        return Err(SnapshotError::Corrupt(format!(
            "compaction point {} is outside 0..={revision}",
            section.compacted
        )));
    }
    let mut events = Vec::with_capacity(section.events.len());
    let mut last = section.compacted;
    for change in section.events {
        let event = checked_event(change, last, revision)?;
        last = event.kv.mod_revision;
        events.push(event);
    }
    Ok(DecodedHistory { events, compacted: section.compacted })
}

/// One change of a snapshot's history, checked: a known kind, and a revision at or above
/// `last` (the change before it, or the compaction point) and within `1..=revision`.
pub(super) fn checked_event(
    (kind, kv, prev): (u8, KvIn, Option<KvIn>),
    last: Revision,
    revision: Revision,
) -> Result<Event, SnapshotError> {
    let kind = match kind {
        0 => EventKind::Put,
        1 => EventKind::Delete,
        other => return Err(SnapshotError::Corrupt(format!("history event kind {other} is unknown"))),
    };
    let kv = key_value(kv);
    let at = kv.mod_revision;
    if at < last || at > revision || at < 1 {
        return Err(SnapshotError::Corrupt(format!(
            "history event at revision {at} is out of order (previous {last}, store {revision})"
        )));
    }
    Ok(Event { kind, kv, prev_kv: prev.map(key_value) })
}

/// A snapshot's lease records as the lease table's entries (their keys not yet attached),
/// checked: valid ids and TTLs, each id and name once.
pub(super) fn checked_leases(records: Vec<LeaseRecord>) -> Result<BTreeMap<LeaseId, Lease>, SnapshotError> {
    let mut leases = BTreeMap::new();
    let mut names = BTreeSet::new();
    for l in records {
        if l.id <= NO_LEASE || l.ttl <= 0 {
            return Err(SnapshotError::Corrupt(format!("lease {} has an invalid id or ttl {}", l.id, l.ttl)));
        }
        if let Some(name) = &l.name {
            if name.is_empty() || name.len() > MAX_LEASE_NAME_BYTES || !names.insert(name.clone()) {
                return Err(SnapshotError::Corrupt(format!(
                    "lease {} has an invalid or duplicate name {name:?}",
                    l.id
                )));
            }
        }
        let lease = Lease { id: l.id, name: l.name, ttl: l.ttl, keys: LeaseKeys::new() };
        if leases.insert(l.id, lease).is_some() {
            return Err(SnapshotError::Corrupt(format!("lease {} appears twice", l.id)));
        }
    }
    Ok(leases)
}

/// One stored key-value of a snapshot, checked: after `previous` in key order, and
/// revisions and version consistent with each other and with the store's `revision`.
pub(super) fn checked_key(kv: KvIn, previous: Option<&[u8]>, revision: Revision) -> Result<KeyValue, SnapshotError> {
    let KvIn(ByteBuf(key), ByteBuf(value), create_revision, mod_revision, version, lease) = kv;
    if previous.is_some_and(|p| p >= key.as_slice()) {
        return Err(SnapshotError::Corrupt(format!(
            "key {:?} is out of order or repeated",
            String::from_utf8_lossy(&key)
        )));
    }
    if !(1..=mod_revision).contains(&create_revision) || mod_revision > revision || version < 1 {
        return Err(SnapshotError::Corrupt(format!(
            "key {:?} has inconsistent revisions (create {create_revision}, mod {mod_revision}, version \
             {version}, store {revision})",
            String::from_utf8_lossy(&key),
        )));
    }
    Ok(KeyValue { key, value, create_revision, mod_revision, version, lease })
}

/// The error for a key attached to a lease the snapshot does not hold.
pub(super) fn unknown_lease(key: &[u8], lease: LeaseId) -> SnapshotError {
    SnapshotError::Corrupt(format!(
        "key {:?} is attached to lease {lease}, which the snapshot does not hold",
        String::from_utf8_lossy(key)
    ))
}

pub(super) fn key_value(
    KvIn(ByteBuf(key), ByteBuf(value), create_revision, mod_revision, version, lease): KvIn,
) -> KeyValue {
    KeyValue { key, value, create_revision, mod_revision, version, lease }
}

/// The history section, decoded and checked.
pub(super) struct DecodedHistory {
    pub(super) events: Vec<Event>,
    pub(super) compacted: Revision,
}

/// Decodes and checks a snapshot of any format this build reads.
pub(super) fn decode(bytes: &[u8]) -> Result<Checked, SnapshotError> {
    let (format, _): (u32, _) =
        postcard::take_from_bytes(bytes).map_err(|e| SnapshotError::Corrupt(format!("cannot decode: {e}")))?;
    if super::stream::streamed(format) {
        let parts = super::stream::parse(bytes)?;
        return validate(parts.snap, parts.history, parts.alarms, parts.membership, parts.auth);
    }
    let (snap, rest): (SnapshotIn, _) =
        postcard::take_from_bytes(bytes).map_err(|e| SnapshotError::Corrupt(format!("cannot decode: {e}")))?;
    if snap.revision < 1 {
        return Err(SnapshotError::Corrupt(format!("revision {} is below 1", snap.revision)));
    }
    let (history, alarms, membership, auth) = match snap.format {
        FORMAT => {
            let (history, rest) = decode_history(rest, snap.revision)?;
            let (alarms, rest) = decode_alarms(rest)?;
            let (membership, rest) = decode_membership(rest)?;
            (history, alarms, membership, decode_auth(rest)?)
        }
        FORMAT_WITHOUT_AUTH => {
            let (history, rest) = decode_history(rest, snap.revision)?;
            let (alarms, rest) = decode_alarms(rest)?;
            let (membership, rest) = decode_membership(rest)?;
            no_trailing(rest)?;
            (history, alarms, membership, AuthStore::default())
        }
        FORMAT_WITHOUT_MEMBERSHIP => {
            let (history, rest) = decode_history(rest, snap.revision)?;
            let (alarms, rest) = decode_alarms(rest)?;
            no_trailing(rest)?;
            (history, alarms, Membership::default(), AuthStore::default())
        }
        FORMAT_WITHOUT_ALARMS => {
            let (history, rest) = decode_history(rest, snap.revision)?;
            no_trailing(rest)?;
            (history, BTreeSet::new(), Membership::default(), AuthStore::default())
        }
        FORMAT_WITHOUT_HISTORY => {
            no_trailing(rest)?;
            let history = DecodedHistory { events: Vec::new(), compacted: snap.revision };
            (history, BTreeSet::new(), Membership::default(), AuthStore::default())
        }
        other => {
            return Err(SnapshotError::Corrupt(format!(
                "unsupported format {other} (this build reads {FORMAT_WITHOUT_HISTORY} to {})",
                super::stream::FORMAT
            )))
        }
    };
    validate(snap, history, alarms, membership, auth)
}

/// Checks a decoded snapshot: leases, keys and history consistent with each other and
/// with the store revision.
pub(super) fn validate(
    snap: SnapshotIn,
    history: DecodedHistory,
    alarms: BTreeSet<Alarm>,
    membership: Membership,
    auth: AuthStore,
) -> Result<Checked, SnapshotError> {
    if snap.revision < 1 {
        return Err(SnapshotError::Corrupt(format!("revision {} is below 1", snap.revision)));
    }
    let mut leases = checked_leases(snap.leases)?;
    let mut buried: BTreeMap<Death, BTreeSet<Vec<u8>>> = BTreeMap::new();
    for (id, revision) in snap.deaths {
        // A death with keys moved the revision to `revision`, so it lies in 2..=store.
        if id <= NO_LEASE || !(2..=snap.revision).contains(&revision) {
            return Err(SnapshotError::Corrupt(format!(
                "lease death ({id}, {revision}) has an invalid id or revision"
            )));
        }
        if buried.insert((id, revision), BTreeSet::new()).is_some() {
            return Err(SnapshotError::Corrupt(format!("lease death ({id}, {revision}) appears twice")));
        }
    }
    let mut kvs: Vec<KeyValue> = Vec::with_capacity(snap.kvs.len());
    for kv in snap.kvs {
        let kv = checked_key(kv, kvs.last().map(|p: &KeyValue| p.key.as_slice()), snap.revision)?;
        let (lease, mod_revision) = (kv.lease, kv.mod_revision);
        if lease != NO_LEASE {
            // Dead iff its lease died after the key was written (the rule `Graveyard` hides
            // keys by); it then belongs to the earliest such death. Otherwise its lease is live.
            let after_write = (lease, mod_revision.saturating_add(1))..=(lease, Revision::MAX);
            if let Some((_, dead)) = buried.range_mut(after_write).next() {
                dead.insert(kv.key.clone());
            } else {
                let Some(l) = leases.get_mut(&lease) else {
                    return Err(unknown_lease(&kv.key, lease));
                };
                l.keys.insert(&kv.key);
            }
        }
        kvs.push(kv);
    }
    if let Some(((id, revision), _)) = buried.iter().find(|(_, keys)| keys.is_empty()) {
        // The sweep drops a death with its last key; an empty one is not a state we produce.
        return Err(SnapshotError::Corrupt(format!("lease death ({id}, {revision}) has no keys left")));
    }
    Ok(Checked {
        revision: snap.revision,
        tenure: snap.tenure,
        digest: snap.digest,
        kvs,
        graveyard: Graveyard::from_parts(buried),
        leases: LeaseTable::from_parts(leases, snap.grant_counter),
        history,
        alarms,
        membership,
        auth,
    })
}

/// A snapshot decoded and checked, not yet written anywhere: a snapshot that does not
/// decode never touches the engine.
pub(super) struct Checked {
    revision: Revision,
    tenure: Tenure,
    digest: u64,
    kvs: Vec<KeyValue>,
    graveyard: Graveyard,
    leases: LeaseTable,
    history: DecodedHistory,
    alarms: BTreeSet<Alarm>,
    membership: Membership,
    auth: AuthStore,
}

impl Checked {
    /// Writes the keys and the history to `engine`, which holds no state.
    pub(super) fn load(self, engine: &Arc<dyn Engine>, failure: &Failure) -> Result<Restored, SnapshotError> {
        let stored = |e: crate::engine::EngineError| SnapshotError::Storage(e.to_string());
        let keys = Keyspace::load(Arc::clone(engine), failure.clone(), self.kvs, self.graveyard, Revision::MAX)
            .map_err(stored)?;
        let history = History::load(
            Arc::clone(engine),
            failure.clone(),
            self.history.events,
            self.history.compacted,
            self.revision,
        )
        .map_err(stored)?;
        let mut leases = self.leases;
        leases.mark_all_changed();
        Ok(Restored {
            revision: self.revision,
            tenure: self.tenure,
            digest: self.digest,
            keys,
            leases,
            history,
            alarms: self.alarms,
            membership: self.membership,
            auth: self.auth,
        })
    }
}
