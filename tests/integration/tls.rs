//! TLS on both ports of a real three-node cluster (docs/security.md): certificates made by
//! examples/tls/make-certs.sh, clients with and without certificates (our client, etcdctl,
//! plain HTTP), certificate rotation without a restart, and peers whose certificate does not
//! name the member they claim to be.
//!
//! Needs openssl (for the script) and etcdctl: skipped without them, failing under CI=true.

use crate::common;

use common::cluster::{eventually, runtime, Cluster};
use leasekv::client::{Client, ClientTls, GetOptions, RetryPolicy};
use leasekv::server::peer::proto::peer_client::PeerClient;
use leasekv::server::peer::proto::PeerEnvelope;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Runs the example's script into `dir`; `None` (skip) without openssl outside CI.
fn make_certs(dir: &Path) -> Option<PathBuf> {
    common::tool("openssl", "openssl")?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tls/make-certs.sh");
    let status = Command::new("bash").arg(&script).arg(dir).stdout(std::process::Stdio::null()).status();
    assert!(status.expect("bash runs").success(), "make-certs.sh failed");
    Some(dir.to_path_buf())
}

/// Certificates (in a directory kept while the test runs) and a 3-node cluster using them
/// on both ports; `None` (skip) without openssl outside CI. authority.rs uses it too.
pub(super) fn tls_cluster() -> Option<(tempfile::TempDir, PathBuf, Cluster)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = make_certs(dir.path())?;
    let cluster = Cluster::start_with("paxoslease", &tls_sections(&certs));
    Some((dir, certs, cluster))
}

/// The TLS sections of every node: both ports, client certificates required.
fn tls_sections(certs: &Path) -> String {
    let c = certs.display();
    format!(
        "[tls.client]\ncert = \"{c}/n{{id}}.crt\"\nkey = \"{c}/n{{id}}.key\"\nca = \"{c}/ca.crt\"\nrequire_client_cert = true\n\
         [tls.peer]\ncert = \"{c}/n{{id}}.crt\"\nkey = \"{c}/n{{id}}.key\"\nca = \"{c}/ca.crt\"\n"
    )
}

fn client_tls(certs: &Path, with_cert: bool) -> ClientTls {
    let (cert, key) = (certs.join("client.crt"), certs.join("client.key"));
    ClientTls::from_files(
        Some(&certs.join("ca.crt")),
        with_cert.then_some(cert.as_path()),
        with_cert.then_some(key.as_path()),
    )
    .expect("the client's files read")
    .expect("TLS options given")
}

async fn tls_client(endpoint: &str, tls: &ClientTls) -> Result<Client, String> {
    let policy = RetryPolicy { attempts: 1, ..RetryPolicy::default() };
    Client::connect_with_tls(&[endpoint.to_string()], policy, Some(tls)).await.map_err(|e| e.to_string())
}

/// A put through `endpoint` over TLS, then the value read back.
async fn round_trip(endpoint: &str, tls: &ClientTls, key: String) -> Result<(), String> {
    let client = tls_client(endpoint, tls).await?;
    client.put(key.clone(), "v", 0, false).await.map_err(|e| e.to_string())?;
    let got = client.get(key.clone(), GetOptions::default()).await.map_err(|e| e.to_string())?;
    match got.kvs.first() {
        Some(kv) if kv.value == b"v" => Ok(()),
        other => Err(format!("{key} read back as {other:?}")),
    }
}

fn etcdctl(bin: &Path, endpoint: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(bin)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(["--dial-timeout=2s", "--command-timeout=5s"])
        .args(args)
        .output()
        .expect("etcdctl runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Sends one envelope claiming to be member `claimed` to a peer port, over TLS with the
/// certificate `name` (a file pair in `certs`); the status the peer answers.
async fn claim(peer_port: u16, certs: &Path, name: &str, claimed: u32) -> Result<(), tonic::Status> {
    let read = |f: &str| std::fs::read(certs.join(f)).expect("certificate file");
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(read("ca.crt")))
        .identity(tonic::transport::Identity::from_pem(read(&format!("{name}.crt")), read(&format!("{name}.key"))));
    let channel = tonic::transport::Endpoint::from_shared(format!("https://127.0.0.1:{peer_port}"))
        .expect("endpoint")
        .tls_config(tls)
        .expect("TLS config")
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    // Garbage payload: a member's is dropped (and counted), a stranger's stream is cut.
    let envelope = PeerEnvelope {
        from: claimed,
        payload: vec![0xff; 16],
        more: vec![],
        version: leasekv::server::peer::version::PEER_PROTOCOL_VERSION,
    };
    let stream = tokio_stream::iter(vec![envelope]);
    tokio::time::timeout(Duration::from_secs(5), PeerClient::new(channel).send(stream))
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("no answer"))?
        .map(|_| ())
}

#[test]
fn a_three_node_cluster_serves_clients_and_peers_over_tls_only() {
    let etcdctl_bin = common::tool("etcdctl", "etcd-client");
    let Some((_certs_dir, certs, cluster)) = tls_cluster() else {
        eprintln!("skipped: openssl is not installed");
        return;
    };
    let rt = runtime();
    let tls = client_tls(&certs, true);

    // Every node serves over TLS; writes through followers reach the master over the
    // peers' mutual TLS.
    rt.block_on(async {
        for i in 0..3 {
            let endpoint = cluster.endpoint(i);
            eventually(Duration::from_secs(20), || round_trip(&endpoint, &tls, format!("/tls/{i}"))).await;
        }
        let client = tls_client(&cluster.endpoint(2), &tls).await.expect("connects");
        let members = client.member_list().await.expect("member list");
        let urls: Vec<&str> = members.members.iter().flat_map(|m| &m.peer_urls).map(String::as_str).collect();
        assert!(urls.iter().all(|u| u.starts_with("https://")), "peer URLs say https: {urls:?}");
    });

    // Refused: a client without a certificate, a plain gRPC client, a plain HTTP request.
    rt.block_on(async {
        let no_cert = client_tls(&certs, false);
        let error =
            round_trip(&cluster.endpoint(0), &no_cert, "/tls/no-cert".into()).await.expect_err("no client cert");
        eprintln!("without a client certificate: {error}");
        let plain =
            Client::connect_with(&[cluster.endpoint(0)], RetryPolicy { attempts: 1, ..Default::default() }).await;
        let refused = match plain {
            Err(_) => true,
            Ok(client) => client.put("/tls/plain", "v", 0, false).await.is_err(),
        };
        assert!(refused, "a plain gRPC client is refused");
    });
    let mut http = std::net::TcpStream::connect(cluster.endpoint(0)).expect("connects");
    http.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    http.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").expect("request sent");
    let mut answer = String::new();
    let _ = http.read_to_string(&mut answer);
    assert!(answer.contains("400 Bad Request") && answer.contains("HTTP request to an HTTPS server"), "{answer}");
    assert!(cluster.log(0).contains("refused a plain (non-TLS) connection"), "the node logs the refusal");

    // etcdctl with --cacert --cert --key works; without them it is refused.
    if let Some(bin) = etcdctl_bin {
        let ca = format!("--cacert={}", certs.join("ca.crt").display());
        let cert = format!("--cert={}", certs.join("client.crt").display());
        let key = format!("--key={}", certs.join("client.key").display());
        let with_tls = |args: &[&str]| {
            let mut all = vec![ca.as_str(), cert.as_str(), key.as_str()];
            all.extend_from_slice(args);
            etcdctl(&bin, &cluster.endpoint(1), &all)
        };
        let (ok, out) = with_tls(&["put", "/tls/etcdctl", "yes"]);
        assert!(ok, "etcdctl put over TLS: {out}");
        let (ok, out) = with_tls(&["get", "/tls/etcdctl", "--print-value-only"]);
        assert!(ok && out.trim() == "yes", "etcdctl get over TLS: {out}");
        let (ok, out) = with_tls(&["member", "list"]);
        assert!(ok && out.matches("https://").count() == 6, "etcdctl member list: {out}");
        let (ok, out) = etcdctl(&bin, &cluster.endpoint(1), &["get", "/tls/etcdctl"]);
        assert!(!ok, "plain etcdctl is refused: {out}");
        let (ok, out) = etcdctl(&bin, &cluster.endpoint(1), &[ca.as_str(), "get", "/tls/etcdctl"]);
        assert!(!ok, "etcdctl without a client certificate is refused: {out}");
    }
}

#[test]
fn certificates_rotate_without_a_restart_and_impostor_peers_are_refused() {
    let Some((_certs_dir, certs, cluster)) = tls_cluster() else {
        eprintln!("skipped: openssl is not installed");
        return;
    };
    let rt = runtime();
    let old = client_tls(&certs, true);
    let first = cluster.endpoint(0);
    rt.block_on(eventually(Duration::from_secs(20), || round_trip(&first, &old, "/rotate/before".into())));

    // A peer certificate speaks only for its own member.
    rt.block_on(async {
        let port = cluster.peer_ports[0];
        let status = claim(port, &certs, "n3", 2).await.expect_err("n3's certificate claiming member 2");
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        assert!(status.message().contains("does not name member 2"), "{status:?}");
        let status = claim(port, &certs, "client", 2).await.expect_err("a client certificate claiming member 2");
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        // The member's own certificate is accepted (its garbage message is dropped).
        claim(port, &certs, "n2", 2).await.expect("n2's certificate speaks for member 2");
    });
    assert!(cluster.log(0).contains("does not name the member it claims"), "the node logs the impostor");

    // Rotation: a new CA and new certificates over the old files, then SIGHUP (the file
    // watcher would also pick them up within seconds). New connections use the new ones.
    let fresh = tempfile::tempdir().expect("tempdir");
    make_certs(fresh.path()).expect("openssl is there");
    for entry in std::fs::read_dir(fresh.path()).expect("new certificates") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), certs.join(entry.file_name())).expect("copied over the old file");
    }
    for node in cluster.nodes.iter().flatten() {
        let sent = Command::new("kill").arg("-HUP").arg(node.id().to_string()).status().expect("kill runs");
        assert!(sent.success());
    }
    let new = client_tls(&certs, true);
    rt.block_on(async {
        for i in 0..3 {
            let endpoint = cluster.endpoint(i);
            eventually(Duration::from_secs(20), || round_trip(&endpoint, &new, format!("/rotate/after/{i}"))).await;
            let error =
                round_trip(&endpoint, &old, "/rotate/old".into()).await.expect_err("the old CA no longer verifies");
            eprintln!("node {i} with the old CA: {error}");
        }
    });
    for i in 0..3 {
        assert!(cluster.log(i).contains("TLS certificates reloaded"), "node {i} logs the reload");
    }
}

/// A client certificate's common name is the user when auth is on (etcd's rule): the
/// example's client certificate says `root`.
#[test]
fn the_client_certificate_names_the_user_when_auth_is_on() {
    let Some((_certs_dir, certs, cluster)) = tls_cluster() else {
        eprintln!("skipped: openssl is not installed");
        return;
    };
    let rt = runtime();
    let root_cert = client_tls(&certs, true);
    // A node's certificate is a valid client certificate too, for a user named "n1".
    let n1_cert =
        ClientTls::from_files(Some(&certs.join("ca.crt")), Some(&certs.join("n1.crt")), Some(&certs.join("n1.key")))
            .expect("files")
            .expect("TLS");
    rt.block_on(async {
        let endpoint = cluster.endpoint(0);
        eventually(Duration::from_secs(20), || round_trip(&endpoint, &root_cert, "/cn/before".into())).await;
        let admin = tls_client(&endpoint, &root_cert).await.expect("connects");
        admin.user_add("root", None).await.expect("a certificate-only root user");
        admin.user_grant_role("root", "root").await.expect("root role");
        admin.auth_enable().await.expect("auth on");
        // No token: the certificate says who this is.
        eventually(Duration::from_secs(10), || round_trip(&endpoint, &root_cert, "/cn/root".into())).await;
        assert!(admin.user_list().await.expect("root may list users").contains(&"root".to_string()));
        let stranger = tls_client(&endpoint, &n1_cert).await.expect("connects");
        let error = stranger.put("/cn/n1", "v", 0, false).await.expect_err("user n1 does not exist");
        assert!(error.to_string().contains("permission denied"), "{error}");
        admin.user_add("app", Some("apppw")).await.expect("a password user");
        admin.role_add("app").await.expect("a role");
        let permission = leasekv::client::proto::authpb::Permission {
            perm_type: leasekv::client::proto::authpb::permission::Type::Readwrite as i32,
            key: b"/app/".to_vec(),
            range_end: b"/app0".to_vec(),
        };
        admin.role_grant_permission("app", permission).await.expect("a permission");
        admin.user_grant_role("app", "app").await.expect("granted");
    });

    // etcdctl with certificates and a user, as against etcd: the token names the user (it
    // comes before the certificate's CN).
    let Some(bin) = common::tool("etcdctl", "etcd-client") else { return };
    let tls_args = [
        format!("--cacert={}", certs.join("ca.crt").display()),
        format!("--cert={}", certs.join("client.crt").display()),
        format!("--key={}", certs.join("client.key").display()),
    ];
    let run = |args: &[&str]| {
        let mut all: Vec<&str> = tls_args.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        etcdctl(&bin, &cluster.endpoint(1), &all)
    };
    let (ok, out) = run(&["--user=app:apppw", "put", "/app/1", "v"]);
    assert!(ok, "etcdctl --user over TLS: {out}");
    let (ok, out) = run(&["--user=app:apppw", "put", "/other", "v"]);
    assert!(!ok && out.contains("permission denied"), "app may not write /other: {out}");
    let (ok, out) = run(&["--user=app:wrong", "get", "/app/1"]);
    assert!(!ok && out.contains("authentication failed"), "{out}");
    let (ok, out) = run(&["put", "/other", "v"]);
    assert!(ok, "without --user the certificate's CN (root) is the user: {out}");
    let (ok, out) = run(&["user", "list"]);
    assert!(ok && out.contains("app") && out.contains("root"), "{out}");
}
