//! How the state machine's records are laid out in the [`crate::engine`]: one byte names
//! the kind of record, so that each kind is a contiguous, ordered range of engine keys.
//!
//! | engine key | value |
//! |---|---|
//! | `k ++ key` | a live (or not yet swept) key: its fields, and its value unless the history holds it ([`encode_kv_in_history`]); else the value too ([`encode_kv`]) |
//! | `e ++ main (u64 BE) ++ sub (u32 BE)` | a page of the history's changes from that one on ([`super::change_pages`]); before pages, one change ([`encode_event`]) |
//! | `r ++ main (u64 BE) ++ sub (u32 BE)` | the sizes of a run of changes from that one on ([`super::size_runs`]) |
//! | `l ++ id (u64 BE)` | a lease ([`LEASE`]) |
//! | `a ++ lease (u64 BE) ++ key` | a key's attachment to its lease ([`ATTACHMENT`]) |
//! | `m…` | the state's own records ([`META_STATE`], [`META_AUTH`]) |
//!
//! Every value starts with a format byte, so that a later layout can be read beside this
//! one (or refused by name) instead of being misread.

use crate::engine::{prefix_end, EngineError, KeyBounds};
use crate::types::{Event, EventKind, KeyValue, Revision};
use serde::{Deserialize, Serialize};
use std::ops::Bound;

/// The first byte of a key's record.
pub(super) const KEY: u8 = b'k';
/// The first byte of a history change's record.
pub(super) const EVENT: u8 = b'e';
/// The format byte of every value written by this layout.
const FORMAT: u8 = 1;
/// The format byte of a key's record that holds no value: the value is the one of the key's
/// change at its `mod_revision` in the history's pages ([`super::change_pages::ValueReader`]),
/// which compaction keeps while this record names it ([`super::live_changes`]).
pub(super) const IN_HISTORY_FORMAT: u8 = 3;
/// The format byte of a history page ([`super::change_pages`]): the records of its changes,
/// one after the other.
pub(super) const PAGE_FORMAT: u8 = 2;

/// The engine key of `key`'s record.
pub(super) fn kv_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(KEY);
    k.extend_from_slice(key);
    k
}

/// The user key of an engine key from the key records' range.
pub(super) fn user_key(engine_key: &[u8]) -> &[u8] {
    &engine_key[1..]
}

/// The engine bounds of the key records within `bounds` (bounds on user keys).
pub(super) fn kv_bounds(bounds: (Bound<&[u8]>, Bound<&[u8]>)) -> KeyBounds {
    let start = match bounds.0 {
        Bound::Included(k) => Bound::Included(kv_key(k)),
        Bound::Excluded(k) => Bound::Excluded(kv_key(k)),
        Bound::Unbounded => Bound::Included(vec![KEY]),
    };
    let end = match bounds.1 {
        Bound::Included(k) => Bound::Included(kv_key(k)),
        Bound::Excluded(k) => Bound::Excluded(kv_key(k)),
        Bound::Unbounded => prefix_end(&[KEY]).map_or(Bound::Unbounded, Bound::Excluded),
    };
    (start, end)
}

/// What a key's record holds besides the key, which is its engine key.
#[derive(Serialize, Deserialize)]
struct KvRecord<'a> {
    #[serde(with = "serde_bytes_compat")]
    value: &'a [u8],
    create_revision: Revision,
    mod_revision: Revision,
    version: i64,
    lease: i64,
}

#[derive(Deserialize)]
struct KvRecordOwned {
    #[serde(with = "serde_bytes_owned")]
    value: Vec<u8>,
    create_revision: Revision,
    mod_revision: Revision,
    version: i64,
    lease: i64,
}

/// The record of `kv`.
pub(super) fn encode_kv(kv: &KeyValue) -> Vec<u8> {
    let record = kv_record(kv);
    let mut out = Vec::with_capacity(kv.value.len() + 24);
    out.push(FORMAT);
    // Serializing plain integers and a byte string into a Vec cannot fail.
    postcard::to_extend(&record, out).unwrap_or_default()
}

/// The record of `kv` without its value, which the change at `kv.mod_revision` in the
/// history's pages holds: a put writes its value once.
pub(super) fn encode_kv_in_history(kv: &KeyValue) -> Vec<u8> {
    let record = KvFields {
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        lease: kv.lease,
    };
    postcard::to_extend(&record, vec![IN_HISTORY_FORMAT]).unwrap_or_default()
}

/// A key's fields, as a record whose value is in the history stores them.
#[derive(Serialize, Deserialize)]
struct KvFields {
    create_revision: Revision,
    mod_revision: Revision,
    version: i64,
    lease: i64,
}

impl KvFields {
    /// `key`'s key-value with these fields and an empty value.
    fn without_value(self, key: &[u8]) -> KeyValue {
        KeyValue {
            key: key.to_vec(),
            value: Vec::new(),
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
            lease: self.lease,
        }
    }
}

/// A key's record as stored: its key-value, whose value is empty when the history holds it.
#[derive(Debug)]
pub(super) struct StoredKv {
    /// The key-value; its value is empty if `value_in_history`.
    pub(super) kv: KeyValue,
    /// Whether the value is the one of the key's change at its `mod_revision`.
    pub(super) value_in_history: bool,
}

/// The key's record stored as `record` under `key`, without looking the value up.
pub(super) fn decode_stored(key: &[u8], record: &[u8]) -> Result<StoredKv, EngineError> {
    if record.first() == Some(&IN_HISTORY_FORMAT) {
        let r: KvFields = postcard::from_bytes(&record[1..])
            .map_err(|e| corrupt(format!("key {:?}", String::from_utf8_lossy(key)), e))?;
        return Ok(StoredKv { kv: r.without_value(key), value_in_history: true });
    }
    Ok(StoredKv { kv: decode_kv(key, record)?, value_in_history: false })
}

/// The key-value stored as `record` under `key`, when the record holds its value.
fn decode_kv(key: &[u8], record: &[u8]) -> Result<KeyValue, EngineError> {
    let body = format_body(record, || format!("key {:?}", String::from_utf8_lossy(key)))?;
    let r: KvRecordOwned =
        postcard::from_bytes(body).map_err(|e| corrupt(format!("key {:?}", String::from_utf8_lossy(key)), e))?;
    Ok(key_value(key.to_vec(), r))
}

/// The key-value stored as `record` under `key`, without its value (`keys_only` and
/// `count_only` reads): the value is skipped in place, never copied, or not looked up.
pub(super) fn decode_kv_without_value(key: &[u8], record: &[u8]) -> Result<KeyValue, EngineError> {
    if record.first() == Some(&IN_HISTORY_FORMAT) {
        return decode_stored(key, record).map(|stored| stored.kv);
    }
    // postcard is positional: the value, then the fields as a record in history holds them.
    #[derive(Deserialize)]
    struct KvRecordSkipped<'a> {
        #[serde(borrow, with = "serde_bytes_compat")]
        _value: &'a [u8],
        fields: KvFields,
    }
    let body = format_body(record, || format!("key {:?}", String::from_utf8_lossy(key)))?;
    let r: KvRecordSkipped<'_> =
        postcard::from_bytes(body).map_err(|e| corrupt(format!("key {:?}", String::from_utf8_lossy(key)), e))?;
    Ok(r.fields.without_value(key))
}

/// The engine key of the change `sub` of revision `main`; big-endian, so that engine order
/// is revision order (revisions are never negative).
pub(super) fn event_key(main: Revision, sub: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(13);
    k.push(EVENT);
    k.extend_from_slice(&(main.max(0) as u64).to_be_bytes());
    k.extend_from_slice(&sub.to_be_bytes());
    k
}

/// The engine bounds of every change from revision `from` through `through`.
pub(super) fn event_bounds(from: Revision, through: Revision) -> KeyBounds {
    (Bound::Included(event_key(from, 0)), Bound::Included(event_key(through, u32::MAX)))
}

/// The revision and position of a change from its engine key.
pub(super) fn event_position(engine_key: &[u8]) -> Option<(Revision, u32)> {
    if engine_key.len() != 13 || engine_key[0] != EVENT {
        return None;
    }
    let main = u64::from_be_bytes(engine_key[1..9].try_into().ok()?);
    let sub = u32::from_be_bytes(engine_key[9..13].try_into().ok()?);
    Some((Revision::try_from(main).ok()?, sub))
}

/// What a change's record holds: its kind, the key once, and the key's fields after and
/// (if it existed) before the change.
#[derive(Serialize)]
struct EventRecord<'a> {
    kind: u8,
    #[serde(with = "serde_bytes_compat")]
    key: &'a [u8],
    kv: KvRecord<'a>,
    prev: Option<KvRecord<'a>>,
}

#[derive(Deserialize)]
struct EventRecordOwned {
    kind: u8,
    #[serde(with = "serde_bytes_owned")]
    key: Vec<u8>,
    kv: KvRecordOwned,
    prev: Option<KvRecordOwned>,
}

fn kv_record(kv: &KeyValue) -> KvRecord<'_> {
    KvRecord {
        value: &kv.value,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        lease: kv.lease,
    }
}

fn key_value(key: Vec<u8>, r: KvRecordOwned) -> KeyValue {
    KeyValue {
        key,
        value: r.value,
        create_revision: r.create_revision,
        mod_revision: r.mod_revision,
        version: r.version,
        lease: r.lease,
    }
}

/// The record of a change on its own, as the layout before pages wrote it (tests write it
/// to prove that such records still read).
#[cfg(test)]
pub(super) fn encode_event(event: &Event) -> Vec<u8> {
    let mut out = vec![FORMAT];
    encode_event_body(event, &mut out);
    out
}

/// Appends a change's record, without a format byte, to `out` (a page is a sequence of them).
pub(super) fn encode_event_body(event: &Event, out: &mut Vec<u8>) {
    let record = EventRecord {
        kind: match event.kind {
            EventKind::Put => 0,
            EventKind::Delete => 1,
        },
        key: &event.kv.key,
        kv: kv_record(&event.kv),
        prev: event.prev_kv.as_ref().map(kv_record),
    };
    // Serializing plain integers and byte strings into a Vec cannot fail.
    let encoded = postcard::to_extend(&record, std::mem::take(out)).unwrap_or_default();
    *out = encoded;
}

/// The first change's record in `body` and what follows it.
pub(super) fn decode_event_body<'a>(
    body: &'a [u8],
    what: &dyn Fn() -> String,
) -> Result<(Event, &'a [u8]), EngineError> {
    let (r, rest): (EventRecordOwned, &[u8]) = postcard::take_from_bytes(body).map_err(|e| corrupt(what(), e))?;
    Ok((event_of_record(r, what)?, rest))
}

/// A change's record read in place: what a value lookup needs, nothing copied.
#[derive(Deserialize)]
struct EventRecordRef<'a> {
    kind: u8,
    #[serde(borrow, with = "serde_bytes_compat")]
    key: &'a [u8],
    #[serde(borrow)]
    kv: KvRecordRef<'a>,
    #[serde(borrow)]
    _prev: Option<KvRecordRef<'a>>,
}

#[derive(Deserialize)]
struct KvRecordRef<'a> {
    #[serde(borrow, with = "serde_bytes_compat")]
    value: &'a [u8],
    _create_revision: Revision,
    mod_revision: Revision,
    _version: i64,
    _lease: i64,
}

/// What a page's changes say about `key`'s value at `revision`.
#[derive(Debug, Default)]
pub(super) struct PageSearch<'a> {
    /// The value the put of `key` at `revision` wrote, if the page holds that put (the last
    /// one, should a revision hold two).
    pub(super) value: Option<&'a [u8]>,
    /// The newest revision of a change in the page.
    pub(super) newest: Revision,
}

/// Looks for the put of `key` at `revision` among the changes of a page's `body` (after its
/// format byte), reading each in place.
pub(super) fn search_page<'a>(
    mut body: &'a [u8],
    key: &[u8],
    revision: Revision,
    what: &dyn Fn() -> String,
) -> Result<PageSearch<'a>, EngineError> {
    let mut found = PageSearch::default();
    while !body.is_empty() {
        let (r, rest): (EventRecordRef<'a>, &'a [u8]) =
            postcard::take_from_bytes(body).map_err(|e| corrupt(what(), e))?;
        if r.kind == 0 && r.kv.mod_revision == revision && r.key == key {
            found.value = Some(r.kv.value);
        }
        found.newest = found.newest.max(r.kv.mod_revision);
        body = rest;
    }
    Ok(found)
}

/// Where each change of a page's `body` (after its format byte) starts in it, with its
/// revision, in the page's order (which is revision order): what a page kept in memory
/// is searched by, a few changes read instead of all of them.
pub(super) fn page_offsets(mut body: &[u8], what: &dyn Fn() -> String) -> Result<Vec<(Revision, usize)>, EngineError> {
    let whole = body.len();
    let mut offsets = Vec::new();
    while !body.is_empty() {
        let at = whole - body.len();
        let (r, rest): (EventRecordRef<'_>, &[u8]) = postcard::take_from_bytes(body).map_err(|e| corrupt(what(), e))?;
        offsets.push((r.kv.mod_revision, at));
        body = rest;
    }
    Ok(offsets)
}

/// The value the put of `key` at `revision` wrote, looked for from the start of `body` (a
/// part of a page's body that begins at or before that revision's first change) up to its
/// first change past `revision`.
pub(super) fn search_page_until<'a>(
    mut body: &'a [u8],
    key: &[u8],
    revision: Revision,
    what: &dyn Fn() -> String,
) -> Result<Option<&'a [u8]>, EngineError> {
    let mut found = None;
    while !body.is_empty() {
        let (r, rest): (EventRecordRef<'a>, &'a [u8]) =
            postcard::take_from_bytes(body).map_err(|e| corrupt(what(), e))?;
        if r.kv.mod_revision > revision {
            break;
        }
        if r.kind == 0 && r.kv.mod_revision == revision && r.key == key {
            found = Some(r.kv.value);
        }
        body = rest;
    }
    Ok(found)
}

/// Calls `each` with every change of a page's `body` (after its format byte), read in
/// place: whether it is a put, its key, its revision and the length of the value it wrote.
pub(super) fn walk_page(
    mut body: &[u8],
    what: &dyn Fn() -> String,
    mut each: impl FnMut(bool, &[u8], Revision, usize),
) -> Result<(), EngineError> {
    while !body.is_empty() {
        let (r, rest): (EventRecordRef<'_>, &[u8]) = postcard::take_from_bytes(body).map_err(|e| corrupt(what(), e))?;
        if r.kind > 1 {
            return Err(EngineError::Corrupt { what: what(), detail: format!("change kind {} is unknown", r.kind) });
        }
        each(r.kind == 0, r.key, r.kv.mod_revision, r.kv.value.len());
        body = rest;
    }
    Ok(())
}

fn event_of_record(r: EventRecordOwned, what: &dyn Fn() -> String) -> Result<Event, EngineError> {
    let kind = match r.kind {
        0 => EventKind::Put,
        1 => EventKind::Delete,
        other => return Err(EngineError::Corrupt { what: what(), detail: format!("change kind {other} is unknown") }),
    };
    let prev_kv = r.prev.map(|p| key_value(r.key.clone(), p));
    Ok(Event { kind, kv: key_value(r.key, r.kv), prev_kv })
}

/// The change stored as `record` under `engine_key` by the layout before pages.
pub(super) fn decode_event(engine_key: &[u8], record: &[u8]) -> Result<Event, EngineError> {
    let what = || format!("history change {:?}", event_position(engine_key));
    let body = format_body(record, what)?;
    let r: EventRecordOwned = postcard::from_bytes(body).map_err(|e| corrupt(what(), e))?;
    event_of_record(r, &what)
}

fn format_body(record: &[u8], what: impl Fn() -> String) -> Result<&[u8], EngineError> {
    match record.split_first() {
        Some((&FORMAT, body)) => Ok(body),
        Some((other, _)) => Err(EngineError::Corrupt {
            what: what(),
            detail: format!("record format {other} is unknown (this build reads {FORMAT})"),
        }),
        None => Err(EngineError::Corrupt { what: what(), detail: "empty record".into() }),
    }
}

fn corrupt(what: String, e: postcard::Error) -> EngineError {
    EngineError::Corrupt { what, detail: e.to_string() }
}

/// Byte strings as one length and a copy (serde's default for `&[u8]` is a sequence).
mod serde_bytes_compat {
    use serde::Serializer;

    pub fn serialize<S: Serializer>(bytes: &&[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<&'de [u8], D::Error> {
        serde::Deserialize::deserialize(deserializer)
    }
}

/// Owned byte strings, read as written by [`serde_bytes_compat`].
mod serde_bytes_owned {
    use serde::de::{Deserializer, Visitor};
    use std::fmt;

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        struct Bytes;
        impl<'de> Visitor<'de> for Bytes {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
        }
        deserializer.deserialize_bytes(Bytes)
    }
}

/// The first byte of a lease's record: `l ++ id (u64 BE)`.
pub(super) const LEASE: u8 = b'l';
/// The first byte of an attachment: `a ++ lease (u64 BE) ++ key`, empty value, present for
/// every stored key (dead or alive) attached to a lease, so that a restart rebuilds the
/// lease table's key sets without reading a value.
pub(super) const ATTACHMENT: u8 = b'a';
/// Everything about the state that is not a key, a change, a lease or an attachment (the
/// state's own records start with `m`).
pub(super) const META_STATE: &[u8] = b"mstate";
/// The auth store, rewritten when it changes.
pub(super) const META_AUTH: &[u8] = b"mauth";

/// The engine key of lease `id`'s record.
pub(super) fn lease_key(id: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(LEASE);
    k.extend_from_slice(&(id as u64).to_be_bytes());
    k
}

/// The lease id of a lease record's engine key.
pub(super) fn lease_of_key(engine_key: &[u8]) -> Option<i64> {
    (engine_key.len() == 9 && engine_key[0] == LEASE)
        .then(|| engine_key[1..9].try_into().ok().map(|b| u64::from_be_bytes(b) as i64))
        .flatten()
}

/// The engine key recording that `key` is attached to `lease`.
pub(super) fn attachment_key(lease: i64, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 9);
    k.push(ATTACHMENT);
    k.extend_from_slice(&(lease as u64).to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The lease and key of an attachment's engine key.
pub(super) fn attachment_of_key(engine_key: &[u8]) -> Option<(i64, &[u8])> {
    if engine_key.len() < 9 || engine_key[0] != ATTACHMENT {
        return None;
    }
    let lease = u64::from_be_bytes(engine_key[1..9].try_into().ok()?) as i64;
    Some((lease, &engine_key[9..]))
}

/// What a lease's record holds besides its id.
#[derive(Serialize, Deserialize)]
pub(super) struct LeaseRecord {
    /// The optional unique name.
    pub(super) name: Option<String>,
    /// Granted TTL, seconds.
    pub(super) ttl: i64,
}

/// Frames `value` (postcard) with the format byte.
pub(super) fn encode_framed<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing in-memory values into a Vec cannot fail.
    postcard::to_extend(value, vec![FORMAT]).unwrap_or_default()
}

/// Reads a value framed by [`encode_framed`].
pub(super) fn decode_framed<T: serde::de::DeserializeOwned>(what: &str, record: &[u8]) -> Result<T, EngineError> {
    let body = format_body(record, || what.to_string())?;
    postcard::from_bytes(body).map_err(|e| corrupt(what.to_string(), e))
}
