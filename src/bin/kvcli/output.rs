//! Rendering of answers as `simple` (etcdctl-like lines), `json` or `table`.
//!
//! Every function returns the text instead of printing it, so formats are unit-tested.
//! Keys and values are shown as UTF-8 (lossy): leasekv keys are text in practice.

use super::lease_ref::hex_id;
use clap::ValueEnum;
use leasekv::client::proto::etcdserverpb::{DeleteRangeResponse, LeaseTimeToLiveResponse, Member, RangeResponse};
use leasekv::client::proto::mvccpb::{event::EventType, Event, KeyValue};
use serde_json::{json, Value};

/// The `-w/--write-out` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Plain lines, like etcdctl's default.
    Simple,
    /// One JSON document.
    Json,
    /// An ASCII table.
    Table,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A key-value as a JSON object, keys and values as text.
fn kv_json(kv: &KeyValue) -> Value {
    json!({
        "key": text(&kv.key),
        "value": text(&kv.value),
        "create_revision": kv.create_revision,
        "mod_revision": kv.mod_revision,
        "version": kv.version,
        "lease": kv.lease,
    })
}

fn pretty(value: Value) -> String {
    // Serialising a Value cannot fail; fall back to the compact form anyway rather than panic.
    serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string())
}

/// A table with a header row, columns padded to their widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let rule: String = widths.iter().map(|w| format!("+{}", "-".repeat(w + 2))).collect::<String>() + "+\n";
    let line = |cells: Vec<String>| -> String {
        let mut out = String::new();
        for (cell, w) in cells.iter().zip(&widths) {
            out.push_str(&format!("| {cell:<w$} "));
        }
        out + "|\n"
    };
    let mut out = rule.clone();
    out.push_str(&line(headers.iter().map(|h| h.to_string()).collect()));
    out.push_str(&rule);
    for row in rows {
        out.push_str(&line(row.clone()));
    }
    out.push_str(&rule);
    out
}

/// A Range answer: `key\nvalue\n` per key in simple form (keys only when values were left out).
pub fn kvs(format: OutputFormat, response: &RangeResponse, keys_only: bool) -> String {
    match format {
        OutputFormat::Simple => {
            if response.kvs.is_empty() && response.count > 0 {
                // count_only: etcdctl prints nothing useful here; the count is what was asked.
                return format!("{}\n", response.count);
            }
            let mut out = String::new();
            for kv in &response.kvs {
                out.push_str(&text(&kv.key));
                out.push('\n');
                if !keys_only {
                    out.push_str(&text(&kv.value));
                    out.push('\n');
                }
            }
            out
        }
        OutputFormat::Json => {
            let kvs: Vec<Value> = response.kvs.iter().map(kv_json).collect();
            let revision = response.header.as_ref().map_or(0, |h| h.revision);
            pretty(json!({ "revision": revision, "count": response.count, "more": response.more, "kvs": kvs })) + "\n"
        }
        OutputFormat::Table => {
            let rows: Vec<Vec<String>> = response
                .kvs
                .iter()
                .map(|kv| {
                    let lease = if kv.lease == 0 { String::new() } else { hex_id(kv.lease) };
                    vec![text(&kv.key), text(&kv.value), kv.mod_revision.to_string(), kv.version.to_string(), lease]
                })
                .collect();
            table(&["KEY", "VALUE", "MOD REVISION", "VERSION", "LEASE"], &rows)
        }
    }
}

/// A successful put.
pub fn put(format: OutputFormat, revision: i64, lease_id: i64) -> String {
    match format {
        OutputFormat::Simple => "OK\n".to_string(),
        OutputFormat::Json => pretty(json!({ "revision": revision, "lease": lease_id })) + "\n",
        OutputFormat::Table => table(&["REVISION", "LEASE"], &[vec![revision.to_string(), lease_cell(lease_id)]]),
    }
}

fn lease_cell(id: i64) -> String {
    if id == 0 {
        String::new()
    } else {
        hex_id(id)
    }
}

/// Watch events: in simple form as etcdctl prints them (the type, the previous key and
/// value when asked for, the key and value); one JSON object per line; or a table.
pub fn events(format: OutputFormat, events: &[Event]) -> String {
    let kind = |e: &Event| if e.r#type == EventType::Delete as i32 { "DELETE" } else { "PUT" };
    match format {
        OutputFormat::Simple => {
            let mut out = String::new();
            for e in events {
                out.push_str(kind(e));
                out.push('\n');
                for kv in e.prev_kv.iter().chain(e.kv.iter()) {
                    out.push_str(&format!("{}\n{}\n", text(&kv.key), text(&kv.value)));
                }
            }
            out
        }
        OutputFormat::Json => {
            let mut out = String::new();
            for e in events {
                let mut v = json!({ "type": kind(e), "kv": e.kv.as_ref().map(kv_json) });
                if let Some(prev) = &e.prev_kv {
                    v["prev_kv"] = kv_json(prev);
                }
                out.push_str(&v.to_string());
                out.push('\n');
            }
            out
        }
        OutputFormat::Table => {
            let rows: Vec<Vec<String>> = events
                .iter()
                .map(|e| {
                    let kv = e.kv.clone().unwrap_or_default();
                    let prev = e.prev_kv.as_ref().map_or(String::new(), |p| text(&p.value));
                    vec![kind(e).to_string(), text(&kv.key), text(&kv.value), kv.mod_revision.to_string(), prev]
                })
                .collect();
            table(&["EVENT", "KEY", "VALUE", "REVISION", "PREVIOUS VALUE"], &rows)
        }
    }
}

/// An election's leader: its key and value, as etcdctl prints them (and the key's create
/// revision in JSON and table form).
pub fn leader(format: OutputFormat, key: &[u8], value: &[u8], revision: i64) -> String {
    match format {
        OutputFormat::Simple => format!("{}\n{}\n", text(key), text(value)),
        OutputFormat::Json => {
            json!({ "key": text(key), "value": text(value), "revision": revision }).to_string() + "\n"
        }
        OutputFormat::Table => {
            table(&["KEY", "VALUE", "REVISION"], &[vec![text(key), text(value), revision.to_string()]])
        }
    }
}

/// A snapshot file's status, as `etcdctl snapshot status` prints it.
pub fn snapshot_status(format: OutputFormat, hash: u32, revision: i64, keys: usize, size: usize) -> String {
    match format {
        OutputFormat::Simple => format!("{hash:x}, {revision}, {keys}, {}\n", si_bytes(size as u64)),
        OutputFormat::Json => {
            json!({ "hash": hash, "revision": revision, "totalKey": keys, "totalSize": size }).to_string() + "\n"
        }
        OutputFormat::Table => table(
            &["HASH", "REVISION", "TOTAL KEYS", "TOTAL SIZE"],
            &[vec![format!("{hash:x}"), revision.to_string(), keys.to_string(), si_bytes(size as u64)]],
        ),
    }
}

/// A size in decimal units, rounded as etcdctl shows sizes (`2.1 MB`, `37 kB`, `9 B`).
fn si_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if bytes < 10 {
        return format!("{bytes} B");
    }
    let exponent = ((bytes as f64).log10() / 3.0).floor() as usize;
    let exponent = exponent.min(UNITS.len() - 1);
    let value = (bytes as f64 / 1000f64.powi(exponent as i32) * 10.0 + 0.5).floor() / 10.0;
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[exponent])
    } else {
        format!("{value:.0} {}", UNITS[exponent])
    }
}

/// A compaction, as etcdctl prints it.
pub fn compacted(format: OutputFormat, compacted: i64, revision: i64) -> String {
    match format {
        OutputFormat::Simple => format!("compacted revision {compacted}\n"),
        OutputFormat::Json => pretty(json!({ "compacted": compacted, "revision": revision })) + "\n",
        OutputFormat::Table => table(&["COMPACTED", "REVISION"], &[vec![compacted.to_string(), revision.to_string()]]),
    }
}

/// A delete: the number of deleted keys, as etcdctl prints it.
pub fn deleted(format: OutputFormat, response: &DeleteRangeResponse) -> String {
    let revision = response.header.as_ref().map_or(0, |h| h.revision);
    match format {
        OutputFormat::Simple => format!("{}\n", response.deleted),
        OutputFormat::Json => pretty(json!({ "deleted": response.deleted, "revision": revision })) + "\n",
        OutputFormat::Table => {
            table(&["DELETED", "REVISION"], &[vec![response.deleted.to_string(), revision.to_string()]])
        }
    }
}

/// How a lease is called in messages: `name (id)` or just the id.
pub fn lease_label(name: Option<&str>, id: i64) -> String {
    match name {
        Some(name) => format!("{name} ({})", hex_id(id)),
        None => hex_id(id),
    }
}

/// A granted lease.
pub fn granted(format: OutputFormat, name: Option<&str>, id: i64, ttl: i64) -> String {
    match format {
        OutputFormat::Simple => format!("lease {} granted with TTL({ttl}s)\n", lease_label(name, id)),
        OutputFormat::Json => pretty(json!({ "id": id, "id_hex": hex_id(id), "name": name, "ttl": ttl })) + "\n",
        OutputFormat::Table => {
            table(&["ID", "NAME", "TTL"], &[vec![hex_id(id), name.unwrap_or("").to_string(), ttl.to_string()]])
        }
    }
}

/// One keepalive answer.
pub fn kept_alive(format: OutputFormat, name: Option<&str>, id: i64, ttl: i64) -> String {
    match format {
        OutputFormat::Simple | OutputFormat::Table => {
            format!("lease {} keepalived with TTL({ttl})\n", lease_label(name, id))
        }
        // One compact object per line, so a stream of answers stays machine-readable.
        OutputFormat::Json => json!({ "id": id, "name": name, "ttl": ttl }).to_string() + "\n",
    }
}

/// A revoked lease.
pub fn revoked(format: OutputFormat, name: Option<&str>, id: i64) -> String {
    match format {
        OutputFormat::Simple | OutputFormat::Table => format!("lease {} revoked\n", lease_label(name, id)),
        OutputFormat::Json => pretty(json!({ "id": id, "name": name, "revoked": true })) + "\n",
    }
}

/// A TimeToLive answer.
pub fn time_to_live(format: OutputFormat, name: Option<&str>, response: &LeaseTimeToLiveResponse) -> String {
    let keys: Vec<String> = response.keys.iter().map(|k| text(k)).collect();
    match format {
        OutputFormat::Simple => {
            let mut out = format!(
                "lease {} granted with TTL({}s), remaining({}s)",
                lease_label(name, response.id),
                response.granted_ttl,
                response.ttl
            );
            if !keys.is_empty() {
                out.push_str(&format!(", attached keys([{}])", keys.join(" ")));
            }
            out + "\n"
        }
        OutputFormat::Json => {
            pretty(json!({
                "id": response.id,
                "name": name,
                "granted_ttl": response.granted_ttl,
                "ttl": response.ttl,
                "keys": keys,
            })) + "\n"
        }
        OutputFormat::Table => table(
            &["ID", "NAME", "GRANTED TTL", "REMAINING", "KEYS"],
            &[vec![
                hex_id(response.id),
                name.unwrap_or("").to_string(),
                response.granted_ttl.to_string(),
                response.ttl.to_string(),
                keys.join(" "),
            ]],
        ),
    }
}

/// One row of `lease list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// Lease id.
    pub id: i64,
    /// Name, empty for unnamed leases.
    pub name: String,
    /// Granted TTL in seconds.
    pub granted_ttl: i64,
    /// Remaining milliseconds; `None` when unknown.
    pub remaining_ms: Option<i64>,
}

fn remaining_text(ms: Option<i64>) -> String {
    match ms {
        Some(ms) if ms >= 0 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => "-".to_string(),
    }
}

/// `lease list`.
pub fn lease_list(format: OutputFormat, rows: &[LeaseRow]) -> String {
    match format {
        OutputFormat::Simple => {
            let mut out = format!("found {} leases\n", rows.len());
            for row in rows {
                let name = if row.name.is_empty() { "-" } else { &row.name };
                out.push_str(&format!(
                    "{} {name} granted({}s) remaining({})\n",
                    hex_id(row.id),
                    row.granted_ttl,
                    remaining_text(row.remaining_ms)
                ));
            }
            out
        }
        OutputFormat::Json => {
            let leases: Vec<Value> = rows
                .iter()
                .map(|r| {
                    json!({
                        "id": r.id,
                        "id_hex": hex_id(r.id),
                        "name": r.name,
                        "granted_ttl": r.granted_ttl,
                        "remaining_ttl_ms": r.remaining_ms,
                    })
                })
                .collect();
            pretty(json!({ "leases": leases })) + "\n"
        }
        OutputFormat::Table => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| vec![hex_id(r.id), r.name.clone(), r.granted_ttl.to_string(), remaining_text(r.remaining_ms)])
                .collect();
            table(&["ID", "NAME", "GRANTED TTL", "REMAINING"], &cells)
        }
    }
}

/// What `status` gathered; the election part is absent against plain etcd.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusReport {
    /// The endpoint that answered.
    pub endpoint: String,
    /// Cluster members.
    pub members: Vec<Member>,
    /// The answering member's id.
    pub member_id: u64,
    /// The master (leader) the answering member believes in, 0 if none.
    pub master_id: u64,
    /// Server version string.
    pub version: String,
    /// Store revision.
    pub revision: i64,
    /// Election backend name, when the server has the leasekv extension.
    pub backend: Option<String>,
    /// Election term, rendered.
    pub term: Option<String>,
    /// Whether the answering node is master, when known.
    pub is_master: Option<bool>,
}

/// `status`.
pub fn status(format: OutputFormat, report: &StatusReport) -> String {
    let dash = || "-".to_string();
    let member_rows: Vec<Vec<String>> = report
        .members
        .iter()
        .map(|m| {
            let role = if m.id == report.master_id { "master" } else { "" };
            vec![format!("{:x}", m.id), m.name.clone(), m.client_urls.join(","), role.to_string()]
        })
        .collect();
    match format {
        OutputFormat::Simple => {
            let mut out = String::new();
            out.push_str(&format!("endpoint: {}\n", report.endpoint));
            out.push_str(&format!("member: {:x}\n", report.member_id));
            out.push_str(&format!("master: {:x}\n", report.master_id));
            out.push_str(&format!("backend: {}\n", report.backend.clone().unwrap_or_else(dash)));
            out.push_str(&format!("term: {}\n", report.term.clone().unwrap_or_else(dash)));
            out.push_str(&format!("revision: {}\n", report.revision));
            out.push_str(&format!("version: {}\n", report.version));
            out.push_str(&format!("members: {}\n", report.members.len()));
            for row in &member_rows {
                out.push_str(&format!(
                    "  {}\n",
                    row.iter().filter(|c| !c.is_empty()).cloned().collect::<Vec<_>>().join(" ")
                ));
            }
            out
        }
        OutputFormat::Json => {
            let members: Vec<Value> = report
                .members
                .iter()
                .map(|m| json!({ "id": m.id, "name": m.name, "client_urls": m.client_urls, "peer_urls": m.peer_urls }))
                .collect();
            pretty(json!({
                "endpoint": report.endpoint,
                "member_id": report.member_id,
                "master_id": report.master_id,
                "is_master": report.is_master,
                "backend": report.backend,
                "term": report.term,
                "revision": report.revision,
                "version": report.version,
                "members": members,
            })) + "\n"
        }
        OutputFormat::Table => {
            let summary = table(
                &["ENDPOINT", "MEMBER", "MASTER", "BACKEND", "TERM", "REVISION", "VERSION"],
                &[vec![
                    report.endpoint.clone(),
                    format!("{:x}", report.member_id),
                    format!("{:x}", report.master_id),
                    report.backend.clone().unwrap_or_else(dash),
                    report.term.clone().unwrap_or_else(dash),
                    report.revision.to_string(),
                    report.version.clone(),
                ]],
            );
            summary + &table(&["ID", "NAME", "CLIENT URLS", "ROLE"], &member_rows)
        }
    }
}

/// `check`: each member's hash at `revision` (rows: member id, endpoint, hash, compaction
/// point, error) and the verdict (how many agree, or what is wrong).
pub fn check(format: OutputFormat, revision: i64, rows: &[Vec<String>], verdict: &Result<usize, String>) -> String {
    let summary = match verdict {
        Ok(n) => format!("all {n} members agree at revision {revision}"),
        Err(problem) => format!("NOT CONSISTENT at revision {revision}: {problem}"),
    };
    match format {
        OutputFormat::Simple => {
            let mut out: String = rows
                .iter()
                .map(|r| format!("{}\n", r.iter().filter(|c| !c.is_empty()).cloned().collect::<Vec<_>>().join(", ")))
                .collect();
            out.push_str(&summary);
            out.push('\n');
            out
        }
        OutputFormat::Json => {
            let members: Vec<Value> = rows
                .iter()
                .map(|r| {
                    json!({"member": r[0], "endpoint": r[1], "hash": r[2], "compact_revision": r[3], "error": r[4]})
                })
                .collect();
            let doc = json!({"revision": revision, "consistent": verdict.is_ok(), "members": members});
            format!("{doc}\n")
        }
        OutputFormat::Table => {
            let mut out = table(&["MEMBER", "ENDPOINT", "HASH", "COMPACT REVISION", "ERROR"], rows);
            out.push_str(&summary);
            out.push('\n');
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasekv::client::proto::etcdserverpb::ResponseHeader;
    use leasekv::client::proto::mvccpb::KeyValue;

    #[test]
    fn snapshot_status_reads_as_etcdctls() {
        assert_eq!(si_bytes(9), "9 B");
        assert_eq!(si_bytes(2_097_152), "2.1 MB");
        assert_eq!(si_bytes(37_000), "37 kB");
        assert_eq!(snapshot_status(OutputFormat::Simple, 0xfe01cf57, 10, 7, 2_097_152), "fe01cf57, 10, 7, 2.1 MB\n");
        assert_eq!(
            snapshot_status(OutputFormat::Json, 1, 10, 7, 512),
            "{\"hash\":1,\"revision\":10,\"totalKey\":7,\"totalSize\":512}\n"
        );
    }

    fn range() -> RangeResponse {
        RangeResponse {
            header: Some(ResponseHeader { revision: 7, ..Default::default() }),
            kvs: vec![
                KeyValue {
                    key: b"/a".to_vec(),
                    value: b"1".to_vec(),
                    mod_revision: 5,
                    version: 1,
                    ..Default::default()
                },
                KeyValue {
                    key: b"/b".to_vec(),
                    value: b"two".to_vec(),
                    mod_revision: 7,
                    version: 2,
                    lease: 42,
                    ..Default::default()
                },
            ],
            more: false,
            count: 2,
        }
    }

    #[test]
    fn simple_get_prints_key_then_value() {
        assert_eq!(kvs(OutputFormat::Simple, &range(), false), "/a\n1\n/b\ntwo\n");
        assert_eq!(kvs(OutputFormat::Simple, &range(), true), "/a\n/b\n");
        let count_only = RangeResponse { count: 3, ..Default::default() };
        assert_eq!(kvs(OutputFormat::Simple, &count_only, false), "3\n");
        assert_eq!(kvs(OutputFormat::Simple, &RangeResponse::default(), false), "");
    }

    #[test]
    fn json_get_is_parseable() {
        let out = kvs(OutputFormat::Json, &range(), false);
        let value: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["revision"], 7);
        assert_eq!(value["kvs"][1]["value"], "two");
        assert_eq!(value["kvs"][1]["lease"], 42);
    }

    #[test]
    fn watch_events_print_like_etcdctl() {
        let kv = |k: &str, v: &str, rev: i64| KeyValue {
            key: k.into(),
            value: v.into(),
            mod_revision: rev,
            ..Default::default()
        };
        let put = Event { r#type: EventType::Put as i32, kv: Some(kv("/a", "2", 5)), prev_kv: Some(kv("/a", "1", 4)) };
        let del = Event { r#type: EventType::Delete as i32, kv: Some(kv("/a", "", 6)), prev_kv: None };
        assert_eq!(events(OutputFormat::Simple, &[put.clone(), del]), "PUT\n/a\n1\n/a\n2\nDELETE\n/a\n\n");
        let line: Value = serde_json::from_str(events(OutputFormat::Json, &[put]).trim()).unwrap();
        assert_eq!((line["type"].as_str(), line["kv"]["mod_revision"].as_i64()), (Some("PUT"), Some(5)));
        assert_eq!(line["prev_kv"]["value"].as_str(), Some("1"));
    }

    #[test]
    fn table_pads_columns() {
        let out = table(&["A", "LONG"], &[vec!["xyz".into(), "1".into()]]);
        assert_eq!(out, "+-----+------+\n| A   | LONG |\n+-----+------+\n| xyz | 1    |\n+-----+------+\n");
        assert!(kvs(OutputFormat::Table, &range(), false)
            .contains("| /b  | two   | 7            | 2       | 000000000000002a |"));
    }

    #[test]
    fn lease_lines_look_like_etcdctl() {
        assert_eq!(granted(OutputFormat::Simple, None, 42, 60), "lease 000000000000002a granted with TTL(60s)\n");
        assert_eq!(
            granted(OutputFormat::Simple, Some("server1"), 42, 60),
            "lease server1 (000000000000002a) granted with TTL(60s)\n"
        );
        assert_eq!(kept_alive(OutputFormat::Simple, None, 42, 9), "lease 000000000000002a keepalived with TTL(9)\n");
        assert_eq!(revoked(OutputFormat::Simple, None, 42), "lease 000000000000002a revoked\n");
        let ttl = LeaseTimeToLiveResponse {
            id: 42,
            ttl: 5,
            granted_ttl: 10,
            keys: vec![b"/k".to_vec()],
            ..Default::default()
        };
        assert_eq!(
            time_to_live(OutputFormat::Simple, None, &ttl),
            "lease 000000000000002a granted with TTL(10s), remaining(5s), attached keys([/k])\n"
        );
    }

    #[test]
    fn lease_list_shows_names_and_remaining() {
        let rows = vec![
            LeaseRow { id: 1, name: "server1".into(), granted_ttl: 10, remaining_ms: Some(8500) },
            LeaseRow { id: 2, name: String::new(), granted_ttl: 5, remaining_ms: None },
        ];
        assert_eq!(
            lease_list(OutputFormat::Simple, &rows),
            "found 2 leases\n0000000000000001 server1 granted(10s) remaining(8.5s)\n0000000000000002 - granted(5s) remaining(-)\n"
        );
        let value: Value = serde_json::from_str(&lease_list(OutputFormat::Json, &rows)).unwrap();
        assert_eq!(value["leases"][0]["name"], "server1");
        assert_eq!(value["leases"][1]["remaining_ttl_ms"], Value::Null);
    }

    #[test]
    fn status_marks_the_master() {
        let report = StatusReport {
            endpoint: "http://127.0.0.1:2379".into(),
            members: vec![Member {
                id: 0xa,
                name: "n1".into(),
                client_urls: vec!["http://127.0.0.1:2379".into()],
                ..Default::default()
            }],
            member_id: 0xa,
            master_id: 0xa,
            version: "3.4.23".into(),
            revision: 9,
            backend: Some("paxoslease".into()),
            term: Some("3.1.1".into()),
            is_master: Some(true),
        };
        let out = status(OutputFormat::Simple, &report);
        assert!(out.contains("master: a\n"), "{out}");
        assert!(out.contains("backend: paxoslease\n"), "{out}");
        assert!(out.contains("  a n1 http://127.0.0.1:2379 master\n"), "{out}");
    }
}
