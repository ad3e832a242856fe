//! gRPC requests whose HTTP/2 `:authority` is not a URI authority (issue 52): etcdctl 3.4
//! sends the endpoint URL (`http://127.0.0.1:2379`) for `endpoint status` and `endpoint
//! hashkv`, etcd's Go client 3.5.0 sends `#initially=[http://127.0.0.1:2379]` for every
//! request (etcd #13192), an Envoy or Istio sidecar `outbound|2379||etcd`. etcd answers them;
//! h2 as published resets the stream with PROTOCOL_ERROR. leasekv builds a patched copy of h2
//! (vendor/h2/PATCHED.md) that serves such a request without the authority, and keeps it
//! strict for CONNECT.
//!
//! The requests are HTTP/2 frames built here, on a TCP or TLS stream: an HTTP/2 client library
//! checks the authority before it sends anything. The answers are read with an HPACK decoder.
//! Then etcdctl's own commands with URL endpoints, and a check that Cargo.lock builds the
//! patched h2. Needs etcdctl (and openssl for TLS): without them those parts are skipped,
//! failing under CI=true.

use crate::common;

use common::cluster::{eventually, runtime, Cluster};
use leasekv::client::proto::etcdserverpb::{StatusRequest, StatusResponse};
use prost::Message;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// The authorities the issue names, each with the client that sends it.
const ODD_AUTHORITIES: [(&str, &str); 3] = [
    ("http://{endpoint}", "etcdctl 3.4's endpoint status and hashkv"),
    ("#initially=[http://{endpoint}]", "etcd's Go client 3.5.0"),
    ("outbound|2379||etcd", "an Envoy or Istio sidecar"),
];

/// A plain three-node cluster answers a Status call whatever its `:authority` (a normal one,
/// a URL, etcd 3.5.0's resolver target, a sidecar's cluster name); a CONNECT with a malformed
/// authority is still refused; etcdctl's `endpoint status` and `endpoint hashkv` work with
/// `http://` endpoints.
#[test]
fn requests_with_a_url_or_a_proxy_name_as_authority_are_answered() {
    let cluster = Cluster::start("paxoslease");
    let endpoint = cluster.endpoint(0);
    let connect = || tcp_connect(&endpoint);
    runtime().block_on(eventually(Duration::from_secs(20), || async { status_call(connect()?, "http", &endpoint) }));
    for (authority, sender) in ODD_AUTHORITIES {
        let authority = authority.replace("{endpoint}", &endpoint);
        let answer = connect().and_then(|io| status_call(io, "http", &authority));
        let status = answer.unwrap_or_else(|e| panic!("authority {authority:?} ({sender}): {e}"));
        assert!(status.header.is_some_and(|h| h.member_id != 0), "authority {authority:?}: {status:?}");
    }

    // CONNECT's authority is where to connect: a malformed one is still a malformed request.
    let connect_request = [(":method", "CONNECT"), (":authority", "outbound|2379||etcd")];
    let refused = connect().and_then(|io| exchange(io, &connect_request, None));
    match refused {
        Err(e) => assert!(e.contains("PROTOCOL_ERROR"), "CONNECT with a malformed authority: {e}"),
        Ok(answer) => panic!("CONNECT with a malformed authority was answered: {answer:?}"),
    }

    let Some(bin) = common::tool("etcdctl", "etcd-client") else {
        eprintln!("skipped etcdctl: not installed (Debian: etcd-client)");
        return;
    };
    let urls: Vec<String> = (0..3).map(|i| format!("http://{}", cluster.endpoint(i))).collect();
    etcdctl_status_and_hashkv(&bin, &urls, &[]);
}

/// The same calls over TLS on the client port (client certificates required, as in
/// tls.rs), and etcdctl with `https://` endpoints.
#[test]
fn requests_with_a_url_or_a_proxy_name_as_authority_are_answered_over_tls() {
    let Some((_certs_dir, certs, cluster)) = super::tls::tls_cluster() else {
        eprintln!("skipped: openssl is not installed");
        return;
    };
    let endpoint = cluster.endpoint(0);
    let config = Arc::new(tls_config(&certs));
    let connect = || tls_connect(&endpoint, config.clone());
    runtime().block_on(eventually(Duration::from_secs(20), || async { status_call(connect()?, "https", &endpoint) }));
    for (authority, sender) in ODD_AUTHORITIES {
        let authority = authority.replace("http://", "https://").replace("{endpoint}", &endpoint);
        let answer = connect().and_then(|io| status_call(io, "https", &authority));
        let status = answer.unwrap_or_else(|e| panic!("authority {authority:?} over TLS ({sender}): {e}"));
        assert!(status.header.is_some_and(|h| h.member_id != 0), "authority {authority:?}: {status:?}");
    }

    let Some(bin) = common::tool("etcdctl", "etcd-client") else {
        eprintln!("skipped etcdctl: not installed (Debian: etcd-client)");
        return;
    };
    let urls: Vec<String> = (0..3).map(|i| format!("https://{}", cluster.endpoint(i))).collect();
    let tls_args = [
        format!("--cacert={}", certs.join("ca.crt").display()),
        format!("--cert={}", certs.join("client.crt").display()),
        format!("--key={}", certs.join("client.key").display()),
    ];
    etcdctl_status_and_hashkv(&bin, &urls, &tls_args);
}

/// Cargo.lock must build the patched h2 in vendor/h2: one from crates.io (after a `cargo
/// update`, or a dependency asking for a newer h2, which leaves the patch unused) would bring
/// the PROTOCOL_ERROR back.
#[test]
fn cargo_lock_builds_the_patched_h2_in_vendor() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read =
        |file: &str| std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file} cannot be read: {e}"));
    let parse = |file: &str| toml::from_str::<toml::Table>(&read(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let vendored = parse("vendor/h2/Cargo.toml");
    let version = vendored["package"]["version"].as_str().expect("vendor/h2's version").to_string();
    let lock = parse("Cargo.lock");
    let h2: Vec<String> = lock["package"]
        .as_array()
        .expect("Cargo.lock's packages")
        .iter()
        .filter(|p| p["name"].as_str() == Some("h2"))
        .map(|p| match p.get("source").and_then(|s| s.as_str()) {
            Some(source) => format!("{} from {source}", p["version"]),
            None => format!("{} from vendor/h2", p["version"]),
        })
        .collect();
    let unused = lock.get("patch").and_then(|p| p.get("unused")).map(|u| u.to_string()).unwrap_or_default();
    assert!(
        h2 == [format!("\"{version}\" from vendor/h2")] && !unused.contains("\"h2\""),
        "Cargo.lock builds h2 {h2:?} (unused patches: {unused:?}), but leasekv's gRPC port needs the patched \
         h2 {version} in vendor/h2 (vendor/h2/PATCHED.md: without it a request whose :authority is a URL, \
         such as etcdctl's endpoint status, is reset with PROTOCOL_ERROR). To move to a new h2, copy its \
         release into vendor/h2 and re-apply the patch as vendor/h2/PATCHED.md says; to stay, run \
         `cargo update -p h2 --precise {version}` (or restore Cargo.lock's h2 entry)."
    );
    assert!(
        read("vendor/h2/src/server.rs").contains("leasekv patch (vendor/h2/PATCHED.md)"),
        "vendor/h2/src/server.rs lacks leasekv's patch: re-apply it as vendor/h2/PATCHED.md says"
    );
}

/// etcdctl's `endpoint status` and `endpoint hashkv` over `urls` (each dialed with its URL as
/// the authority) answer one row per endpoint.
fn etcdctl_status_and_hashkv(bin: &Path, urls: &[String], extra: &[String]) {
    for command in ["status", "hashkv"] {
        let mut child = Command::new(bin);
        child
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", urls.join(",")))
            .args(["--dial-timeout=2s", "--command-timeout=5s"])
            .args(extra)
            .args(["endpoint", command])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = child.spawn().expect("etcdctl starts");
        let output = common::process::output_within(child, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("etcdctl endpoint {command} did not finish within 20 s"))
            .expect("etcdctl's output");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let said = format!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "etcdctl endpoint {command} --endpoints={}: {said}", urls.join(","));
        for url in urls {
            assert_eq!(stdout.lines().filter(|l| l.starts_with(&format!("{url}, "))).count(), 1, "{url}: {said}");
        }
    }
}

/// A rustls client configuration with the example CA and client certificate, offering h2.
fn tls_config(certs: &Path) -> rustls::ClientConfig {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(certs.join("ca.crt")).expect("ca.crt") {
        roots.add(cert.expect("a CA certificate")).expect("the CA is usable");
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certs.join("client.crt"))
        .expect("client.crt")
        .map(|c| c.expect("a client certificate"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(certs.join("client.key")).expect("client.key");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("the client certificate and key");
    config.alpn_protocols = vec![b"h2".to_vec()];
    config
}

/// A TCP connection to `endpoint` whose reads give up after 10 s.
fn tcp_connect(endpoint: &str) -> Result<TcpStream, String> {
    let socket = TcpStream::connect(endpoint).map_err(|e| e.to_string())?;
    socket.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    Ok(socket)
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `endpoint` (the certificates name 127.0.0.1) that agreed on h2.
fn tls_connect(endpoint: &str, config: Arc<rustls::ClientConfig>) -> Result<TlsStream, String> {
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("an IP address").to_owned();
    let connection = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
    let mut stream = rustls::StreamOwned::new(connection, tcp_connect(endpoint)?);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock).map_err(|e| format!("TLS handshake: {e}"))?;
    }
    match stream.conn.alpn_protocol() {
        Some(b"h2") => Ok(stream),
        other => Err(format!("ALPN chose {other:?}, not h2")),
    }
}

/// A Maintenance/Status call with this `:scheme` and `:authority` on a new connection: the
/// member's answer, or what went wrong (a reset stream, a non-200 status, a gRPC error).
fn status_call(io: impl Read + Write, scheme: &str, authority: &str) -> Result<StatusResponse, String> {
    let request = [
        (":method", "POST"),
        (":scheme", scheme),
        (":path", "/etcdserverpb.Maintenance/Status"),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ];
    let message = StatusRequest {}.encode_to_vec();
    let mut body = vec![0u8];
    body.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
    body.extend_from_slice(&message);
    let answer = exchange(io, &request, Some(&body))?;
    if answer.header(&answer.headers, ":status") != Some("200") {
        return Err(format!("not :status 200: {answer:?}"));
    }
    if answer.header(&answer.trailers, "grpc-status") != Some("0") {
        return Err(format!("not grpc-status 0 in the trailers: {answer:?}"));
    }
    match answer.body.split_first_chunk::<5>() {
        Some(([0, length @ ..], message)) if u32::from_be_bytes(*length) as usize == message.len() => {
            StatusResponse::decode(message).map_err(|e| format!("not a StatusResponse: {e}"))
        }
        _ => Err(format!("not one uncompressed gRPC message: {answer:?}")),
    }
}

/// What came back on stream 1.
#[derive(Debug, Default)]
struct Answer {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    trailers: Vec<(String, String)>,
}

impl Answer {
    fn header<'a>(&self, fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
        fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

// HTTP/2 frame types and flags (RFC 9113 section 6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// Sends the connection preface, empty SETTINGS and one request on stream 1 (`fields` as
/// HPACK literals, `body` as one DATA frame), answers the server's SETTINGS and PINGs, and
/// reads until stream 1 ends. A RST_STREAM or GOAWAY is an error naming its code.
fn exchange(mut io: impl Read + Write, fields: &[(&str, &str)], body: Option<&[u8]>) -> Result<Answer, String> {
    let fail = |e: std::io::Error| e.to_string();
    let mut block = Vec::new();
    for (name, value) in fields {
        literal(&mut block, name, value);
    }
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    out.extend(frame(HEADERS, END_HEADERS | if body.is_none() { END_STREAM } else { 0 }, 1, &block));
    if let Some(body) = body {
        out.extend(frame(DATA, END_STREAM, 1, body));
    }
    io.write_all(&out).and_then(|()| io.flush()).map_err(fail)?;

    let mut decoder = loona_hpack::Decoder::new();
    let mut answer = Answer::default();
    let (mut block, mut ends) = (Vec::new(), false);
    loop {
        let mut head = [0u8; 9];
        io.read_exact(&mut head).map_err(|e| format!("reading a frame: {e} (so far: {answer:?})"))?;
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; length];
        io.read_exact(&mut payload).map_err(fail)?;
        match kind {
            SETTINGS if flags & ACK == 0 => io.write_all(&frame(SETTINGS, ACK, 0, &[])).map_err(fail)?,
            PING if flags & ACK == 0 => io.write_all(&frame(PING, ACK, 0, &payload)).map_err(fail)?,
            GOAWAY => return Err(format!("GOAWAY with {}", reason(&payload[4..8]))),
            RST_STREAM if stream == 1 => return Err(format!("stream reset with {}", reason(&payload))),
            HEADERS | CONTINUATION | DATA if stream == 1 => {
                let mut fragment = &payload[..];
                if kind != CONTINUATION && flags & PADDED != 0 {
                    let padding = usize::from(fragment[0]);
                    fragment = &fragment[1..fragment.len() - padding];
                }
                if kind == HEADERS && flags & PRIORITY != 0 {
                    fragment = &fragment[5..];
                }
                if kind == DATA {
                    answer.body.extend_from_slice(fragment);
                    if flags & END_STREAM != 0 {
                        return Ok(answer);
                    }
                    continue;
                }
                block.extend_from_slice(fragment);
                ends |= kind == HEADERS && flags & END_STREAM != 0;
                if flags & END_HEADERS == 0 {
                    continue;
                }
                let decoded = decoder.decode(&block).map_err(|e| format!("HPACK: {e:?}"))?;
                let fields = decoded
                    .into_iter()
                    .map(|(n, v)| (String::from_utf8_lossy(&n).into_owned(), String::from_utf8_lossy(&v).into_owned()));
                let part = if answer.headers.is_empty() { &mut answer.headers } else { &mut answer.trailers };
                part.extend(fields);
                block.clear();
                if ends {
                    return Ok(answer);
                }
            }
            _ => {}
        }
    }
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("a small frame").to_be_bytes();
    let mut frame = vec![length[1], length[2], length[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// An HPACK literal field without indexing, with a literal name and no Huffman coding (RFC
/// 7541 section 6.2.2): the value reaches the server's decoder byte for byte.
fn literal(block: &mut Vec<u8>, name: &str, value: &str) {
    block.push(0x00);
    for text in [name, value] {
        integer(block, text.len());
        block.extend_from_slice(text.as_bytes());
    }
}

/// A string length: an HPACK integer with a 7-bit prefix (RFC 7541 section 5.1), H = 0.
fn integer(block: &mut Vec<u8>, value: usize) {
    if value < 127 {
        block.push(value as u8);
        return;
    }
    block.push(127);
    let mut rest = value - 127;
    while rest >= 128 {
        block.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    block.push(rest as u8);
}

/// An HTTP/2 error code's name.
fn reason(code: &[u8]) -> String {
    let code = u32::from_be_bytes(code[..4].try_into().expect("four bytes"));
    let names = ["NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT"];
    let more = ["STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR"];
    names.iter().chain(&more).nth(code as usize).map_or(format!("error code {code}"), |n| n.to_string())
}
