//! The web console (docs/console.md).
//!
//! - In a real browser: tests/console/e2e.mjs drives Debian's Chromium with Playwright against
//!   a three-node cluster and a TLS node started here (the overview and a takeover, services
//!   counting down and expiring, keys with a conflict, bad input, leases, locks and
//!   elections, a login and a read-only user, TLS). It needs node, chromium and the npm
//!   package playwright-core in tests/console/node_modules (`npm ci` there); `.ci/run`
//!   installs them, and under CI=true a missing one is a failure. Screenshots of every view
//!   land in `target/tmp/console-screenshots/`.
//! - Over plain HTTP: `[console] mode = "read-only"` and `"off"`, and `/health` with auth on.

use crate::common;

use common::cluster::{master_index, runtime, Cluster, KVSERVER};
use common::http::{get, post};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the browser run may take before it is stopped (it takes about 40 s).
const BROWSER_RUN_LIMIT: Duration = Duration::from_secs(240);

/// A process this test started, killed (by pid) when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The browser run: node and the Chromium it starts, in their own process group, killed
/// together (by the group's id, which is node's pid) when dropped.
struct ProcessGroup(Child);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let group = format!("-{}", self.0.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        }
        let _ = self.0.wait();
    }
}

/// A single node on its own ports with `extra` TOML; its process and client port.
fn start_single(dir: &Path, name: &str, extra: &str) -> (Process, u16) {
    let ports = common::free_ports(2);
    let config = dir.join(format!("{name}.toml"));
    let text = format!(
        "id = 1\nclient_addr = \"127.0.0.1:{}\"\npeer_addr = \"127.0.0.1:{}\"\ndata_dir = \"{}\"\n{extra}",
        ports[0],
        ports[1],
        dir.join(format!("{name}-data")).display()
    );
    std::fs::write(&config, text).expect("config written");
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log file");
    let child = Command::new(KVSERVER)
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("kvserver starts");
    (Process(child), ports[0])
}

/// Waits (at most 30 s) until `/health` on `port` says true.
fn wait_healthy(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = (0, String::new());
    while Instant::now() < deadline {
        last = get(port, "/health");
        if last.0 == 200 {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("node on port {port} not healthy within 30 s; last answer {last:?}");
}

/// The gateway's paths a read-only console refuses: all but the ones that only read.
const WRITING_PATHS: &[&str] = &[
    "/auth/disable",
    "/auth/enable",
    "/auth/role/add",
    "/auth/role/delete",
    "/auth/role/get",
    "/auth/role/grant",
    "/auth/role/list",
    "/auth/role/revoke",
    "/auth/user/add",
    "/auth/user/changepw",
    "/auth/user/delete",
    "/auth/user/get",
    "/auth/user/grant",
    "/auth/user/list",
    "/auth/user/revoke",
    "/cluster/member/add",
    "/cluster/member/promote",
    "/cluster/member/remove",
    "/cluster/member/update",
    "/election/campaign",
    "/election/observe",
    "/election/proclaim",
    "/election/resign",
    "/kv/compaction",
    "/kv/deleterange",
    "/kv/lease/revoke",
    "/kv/put",
    "/kv/txn",
    "/lease/grant",
    "/lease/keepalive",
    "/lease/revoke",
    "/leasekv/grantnamed",
    "/leasekv/stepdown",
    "/lock/lock",
    "/lock/unlock",
    "/maintenance/alarm",
    "/maintenance/defragment",
    "/maintenance/hash",
    "/maintenance/hashkv",
    "/maintenance/snapshot",
    "/maintenance/transfer-leadership",
];

#[test]
fn a_read_only_console_reads_but_refuses_every_write_and_leaves_the_gateway_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_node, port) = start_single(dir.path(), "read-only", "[console]\nmode = \"read-only\"\n");
    wait_healthy(port);
    let (status, page) = get(port, "/ui/");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("leasekv console"), "{page}");
    let (status, info) = get(port, "/ui/api/console");
    assert!(status == 200 && info.contains(r#""mode":"read-only""#), "{status} {info}");
    // Every browser asks for an icon on every page load: answered, not a 404 in its console.
    for icon in ["/favicon.ico", "/ui/favicon.svg"] {
        let (status, svg) = get(port, icon);
        assert!(status == 200 && svg.contains("<svg"), "{icon}: {status} {svg}");
    }
    // The gateway itself still writes (read-only is the console's setting, auth is the
    // access control); the console's routes read and refuse to write.
    let (status, body) = post(port, "/v3/kv/put", r#"{"key":"L2E=","value":"MQ=="}"#);
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(port, "/ui/api/v3/kv/range", r#"{"key":"L2E="}"#);
    assert!(status == 200 && body.contains(r#""value":"MQ==""#), "{status} {body}");
    let writes = [
        ("/kv/put", r#"{"key":"L2E=","value":"Mg=="}"#),
        ("/kv/deleterange", r#"{"key":"L2E="}"#),
        ("/kv/txn", r#"{"success":[{"request_delete_range":{"key":"L2E="}}]}"#),
    ];
    // Every gateway path but the reading ones (server/src/console/mod.rs READ_ONLY_PATHS).
    let others = WRITING_PATHS.iter().map(|path| (*path, "{}"));
    for (path, body) in writes.into_iter().chain(others) {
        let (status, answer) = post(port, &format!("/ui/api/v3{path}"), body);
        assert_eq!(status, 403, "{path}: {answer}");
        assert!(answer.contains("the console is read-only on this node"), "{path}: {answer}");
    }
    let (_, body) = post(port, "/v3/kv/range", r#"{"key":"L2E="}"#);
    assert!(body.contains(r#""value":"MQ==""#), "nothing the read-only console refused was written: {body}");
}

#[test]
fn a_console_turned_off_is_not_served_and_health_holds_with_auth_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_node, port) = start_single(dir.path(), "off", "[console]\nmode = \"off\"\n");
    wait_healthy(port);
    for path in ["/ui", "/ui/", "/ui/main.js", "/ui/console.css", "/ui/api/console", "/ui/api/overview"] {
        assert_eq!(get(port, path).0, 404, "{path}");
    }
    assert_eq!(post(port, "/ui/api/v3/kv/range", r#"{"key":"L2E="}"#).0, 404);
    // With auth on, a probe carries no token; /health must still read (etcd's check counts
    // an auth refusal as healthy). It answered "user name is empty" before.
    for (path, body) in [
        ("/v3/auth/user/add", r#"{"name":"root","password":"pw"}"#),
        ("/v3/auth/user/grant", r#"{"user":"root","role":"root"}"#),
        ("/v3/auth/enable", "{}"),
    ] {
        let (status, answer) = post(port, path, body);
        assert_eq!(status, 200, "{path}: {answer}");
    }
    let (status, answer) = post(port, "/v3/kv/range", r#"{"key":"L2E="}"#);
    assert!(status != 200 && answer.contains("user name is empty"), "auth is on: {status} {answer}");
    assert_eq!(get(port, "/health"), (200, r#"{"health":"true"}"#.to_string()));
}

/// What the browser run needs, or `None` (skip) when something is missing outside CI.
struct BrowserTools {
    node: PathBuf,
    chromium: PathBuf,
    etcdctl: PathBuf,
}

fn browser_tools() -> Option<BrowserTools> {
    let node = common::tool("node", "nodejs")?;
    let chromium = common::tool("chromium", "chromium")?;
    let etcdctl = common::tool("etcdctl", "etcd-client")?;
    let playwright = console_dir().join("node_modules/playwright-core/package.json");
    if !playwright.is_file() {
        assert!(
            !common::in_ci(),
            "playwright-core is required under CI=true: run `npm ci` in tests/console (.ci/run does)"
        );
        eprintln!("skipped: no playwright-core in tests/console/node_modules (run `npm ci` there)");
        return None;
    }
    Some(BrowserTools { node, chromium, etcdctl })
}

fn console_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console")
}

/// A node whose client port serves TLS, with certificates from examples/tls/make-certs.sh.
fn start_tls_node(dir: &Path) -> (Process, u16) {
    common::tool("openssl", "openssl").expect("openssl makes the certificates");
    let certs = dir.join("certs");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tls/make-certs.sh");
    let made = Command::new("bash").arg(&script).arg(&certs).stdout(Stdio::null()).stderr(Stdio::null()).status();
    assert!(made.expect("bash runs").success(), "make-certs.sh failed");
    let extra = format!("[tls.client]\ncert = \"{c}/n1.crt\"\nkey = \"{c}/n1.key\"\n", c = certs.display());
    let (process, port) = start_single(dir, "tls", &extra);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the TLS node did not listen within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    (process, port)
}

#[test]
fn the_console_works_in_a_real_browser_against_a_three_node_cluster() {
    let Some(tools) = browser_tools() else { return };
    let cluster = Cluster::start("paxoslease");
    runtime().block_on(master_index(&cluster));
    let tls_dir = tempfile::tempdir().expect("tempdir");
    let (_tls_node, tls_port) = start_tls_node(tls_dir.path());
    let screenshots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let nodes: Vec<serde_json::Value> = (0..3)
        .map(|i| {
            let pid = cluster.nodes[i].as_ref().map(Child::id).expect("a running node");
            serde_json::json!({ "url": format!("http://{}", cluster.endpoint(i)), "id": format!("{:x}", i + 1), "pid": pid })
        })
        .collect();
    let config = serde_json::json!({
        "nodes": nodes,
        "tls_url": format!("https://127.0.0.1:{tls_port}"),
        "kvcli": env!("CARGO_BIN_EXE_kvcli"),
        "etcdctl": tools.etcdctl,
        "chromium": tools.chromium,
        "screenshots": screenshots,
    });
    let output_path = tls_dir.path().join("e2e.out");
    let output = std::fs::File::create(&output_path).expect("output file");
    // In a process group of its own, so that a run stopped for taking too long takes its
    // Chromium with it.
    let mut run = ProcessGroup(
        Command::new(&tools.node)
            .arg("e2e.mjs")
            .current_dir(console_dir())
            .env("LEASEKV_CONSOLE_E2E", config.to_string())
            .stdout(output.try_clone().expect("output file"))
            .stderr(output)
            .process_group(0)
            .spawn()
            .expect("node starts"),
    );
    let deadline = Instant::now() + BROWSER_RUN_LIMIT;
    let status = loop {
        if let Some(status) = run.0.try_wait().expect("the browser run") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let said = std::fs::read_to_string(&output_path).unwrap_or_default();
    println!("{said}");
    match status {
        Some(status) => assert!(
            status.success(),
            "the browser run failed ({status}); screenshots in {}:\n{said}",
            screenshots.display()
        ),
        None => panic!("the browser run took over {BROWSER_RUN_LIMIT:?}:\n{said}"),
    }
    assert!(said.contains("all console checks passed"), "{said}");
}
