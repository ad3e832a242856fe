//! etcd's users, roles and permissions, as etcdctl sees them (docs/security.md):
//!
//! - `etcdctl_auth_flows_answer_as_etcd`: one fixed sequence of `etcdctl user`, `role`,
//!   `auth` and KV commands, with and without `--user`, run against a three-node leasekv
//!   cluster (through a follower) and a real etcd; the transcripts (exit code, output, the
//!   error etcdctl prints) must be the same line for line.
//! - `the_permission_matrix_holds`: each kind of role (read, write, readwrite on a prefix) ×
//!   each operation (get, put, del, txn, watch, lease revoke) × inside and outside the prefix,
//!   against both systems, each answer as etcd's and as the rule says.
//!
//! Without etcd or etcdctl the tests skip, except under `CI=true`, where they fail.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KVSERVER: &str = env!("CARGO_BIN_EXE_kvserver");
const RUN_LIMIT: Duration = Duration::from_secs(15);

/// A running system: its processes (killed by pid on drop) and the endpoint the commands go to.
struct System {
    name: &'static str,
    _dir: tempfile::TempDir,
    children: Vec<Child>,
    endpoint: String,
}

impl Drop for System {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn leasekv() -> System {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = common::free_ports(6);
    let configs = common::write_configs(dir.path(), &ports[..3], &ports[3..], "paxoslease", "");
    let children = configs
        .iter()
        .enumerate()
        .map(|(i, path)| {
            let log = std::fs::File::create(dir.path().join(format!("log{i}"))).expect("log");
            Command::new(KVSERVER)
                .arg("--config")
                .arg(path)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("kvserver")
        })
        .collect();
    // The second node: most answers come from the master through it.
    System { name: "leasekv", endpoint: format!("127.0.0.1:{}", ports[1]), _dir: dir, children }
}

fn etcd(bin: &Path) -> System {
    let dir = tempfile::tempdir().expect("tempdir");
    let ports = common::free_ports(2);
    let child = Command::new(bin)
        .arg("--name=e0")
        .arg(format!("--data-dir={}", dir.path().join("data").display()))
        .arg(format!("--listen-client-urls=http://127.0.0.1:{}", ports[0]))
        .arg(format!("--advertise-client-urls=http://127.0.0.1:{}", ports[0]))
        .arg(format!("--listen-peer-urls=http://127.0.0.1:{}", ports[1]))
        .arg(format!("--initial-advertise-peer-urls=http://127.0.0.1:{}", ports[1]))
        .arg(format!("--initial-cluster=e0=http://127.0.0.1:{}", ports[1]))
        .arg("--log-level=error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd starts");
    System { name: "etcd", endpoint: format!("127.0.0.1:{}", ports[0]), _dir: dir, children: vec![child] }
}

/// What one etcdctl run printed: exit code, standard output, and the error lines (etcdctl's
/// own `Error:` line; the client library's retry warnings differ in their timestamps).
fn etcdctl(bin: &Path, endpoint: &str, args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new(bin)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(["--dial-timeout=3s", "--command-timeout=5s"])
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("etcdctl starts");
    if let (Some(mut pipe), Some(input)) = (child.stdin.take(), stdin) {
        let _ = pipe.write_all(input.as_bytes());
    }
    let output = common::process::output_within(child, RUN_LIMIT)
        .unwrap_or_else(|| panic!("etcdctl {args:?} did not finish within {RUN_LIMIT:?}"))
        .expect("etcdctl output");
    let errors: Vec<&str> =
        std::str::from_utf8(&output.stderr).unwrap_or("").lines().filter(|l| !l.starts_with('{')).collect();
    format!(
        "exit {:?}\n{}{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        errors.iter().map(|l| format!("stderr: {l}\n")).collect::<String>()
    )
}

/// etcdctl and etcd, or `None` (skip) outside CI.
fn tools() -> Option<(PathBuf, PathBuf)> {
    let etcdctl = common::tool("etcdctl", "etcd-client")?;
    let etcd = common::tool("etcd", "etcd-server")?;
    Some((etcdctl, etcd))
}

/// Waits (bounded) until the system answers a read.
fn wait_ready(bin: &Path, system: &System) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        if etcdctl(bin, &system.endpoint, &["get", "/ready"], None).starts_with("exit Some(0)") {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{} did not become ready", system.name);
}

const ROOT: &str = "--user=root:rootpw";

/// The sequence: (arguments, standard input).
fn auth_flows() -> Vec<(Vec<&'static str>, Option<&'static str>)> {
    let steps: Vec<(&str, Option<&str>)> = vec![
        ("user add root:rootpw", None),
        ("role add root", None),
        ("user grant-role root root", None),
        ("auth enable", None),
        ("get /x", None),
        ("user add root:other --user=root:rootpw", None),
        ("user add alice:alicepw --user=root:rootpw", None),
        ("user add bob:bobpw --user=root:rootpw", None),
        ("user add  --user=root:rootpw", None),
        ("role add app --user=root:rootpw", None),
        ("role add app --user=root:rootpw", None),
        ("role grant-permission app readwrite /app/ --prefix --user=root:rootpw", None),
        ("role grant-permission app read /shared --user=root:rootpw", None),
        ("role grant-permission app write /w /wz --user=root:rootpw", None),
        ("role grant-permission nosuch read /x --user=root:rootpw", None),
        ("role get app --user=root:rootpw", None),
        ("role get nosuch --user=root:rootpw", None),
        ("user grant-role alice app --user=root:rootpw", None),
        ("user grant-role alice nosuch --user=root:rootpw", None),
        ("user grant-role nosuch app --user=root:rootpw", None),
        ("user get alice --user=root:rootpw", None),
        ("user get nosuch --user=root:rootpw", None),
        ("user list --user=root:rootpw", None),
        ("role list --user=root:rootpw", None),
        ("put /app/x 1 --user=alice:alicepw", None),
        ("put /other 1 --user=alice:alicepw", None),
        ("put /other 1 --user=root:rootpw", None),
        ("put /shared s --user=root:rootpw", None),
        ("get /app/x --user=alice:alicepw", None),
        ("get /shared --user=alice:alicepw", None),
        ("put /shared v --user=alice:alicepw", None),
        ("get /app/ --prefix --user=alice:alicepw", None),
        ("get / --prefix --user=alice:alicepw", None),
        ("get /other --user=alice:alicepw", None),
        ("put /w/1 v --user=alice:alicepw", None),
        ("get /w/1 --user=alice:alicepw", None),
        ("get /app/x", None),
        ("get /app/x --user=alice:wrong", None),
        ("get /app/x --user=nobody:pw", None),
        ("txn --user=alice:alicepw", Some("mod(\"/app/x\") > \"0\"\n\nput /app/y 2\n\nput /app/z 3\n\n")),
        ("txn --user=alice:alicepw", Some("mod(\"/other\") > \"0\"\n\nput /app/y 2\n\n\n")),
        ("txn --user=alice:alicepw", Some("mod(\"/app/x\") > \"0\"\n\nput /app/y 2\n\nput /other 3\n\n")),
        ("del /app/x --user=alice:alicepw", None),
        ("del /other --user=bob:bobpw", None),
        ("user get alice --user=bob:bobpw", None),
        ("user get bob --user=bob:bobpw", None),
        ("user list --user=bob:bobpw", None),
        ("role get app --user=alice:alicepw", None),
        ("role get app --user=bob:bobpw", None),
        ("user passwd bob --interactive=false --user=bob:bobpw", Some("newbobpw\n")),
        ("get /x --user=bob:bobpw", None),
        ("get /x --user=bob:newbobpw", None),
        ("role revoke-permission app /shared --user=root:rootpw", None),
        ("role revoke-permission app /nothing --user=root:rootpw", None),
        ("get /shared --user=alice:alicepw", None),
        ("user revoke-role alice app --user=root:rootpw", None),
        ("user revoke-role alice app --user=root:rootpw", None),
        ("get /app/y --user=alice:alicepw", None),
        ("role delete app --user=root:rootpw", None),
        ("role delete nosuch --user=root:rootpw", None),
        ("user delete root --user=root:rootpw", None),
        ("role delete root --user=root:rootpw", None),
        ("user revoke-role root root --user=root:rootpw", None),
        ("user delete bob --user=alice:alicepw", None),
        ("user delete bob --user=root:rootpw", None),
        ("user delete bob --user=root:rootpw", None),
        ("auth disable --user=alice:alicepw", None),
        ("auth disable --user=root:rootpw", None),
        ("get /app/y", None),
        ("user list", None),
        ("auth enable", None),
        ("get /app/y", None),
    ];
    steps.into_iter().map(|(args, stdin)| (args.split(' ').collect(), stdin)).collect()
}

#[test]
fn etcdctl_auth_flows_answer_as_etcd() {
    let Some((etcdctl_bin, etcd_bin)) = tools() else {
        eprintln!("skipped: etcd or etcdctl is not installed");
        return;
    };
    let (ours, theirs) = (leasekv(), etcd(&etcd_bin));
    wait_ready(&etcdctl_bin, &ours);
    wait_ready(&etcdctl_bin, &theirs);
    let mut differences = Vec::new();
    for (args, stdin) in auth_flows() {
        let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
        let a = etcdctl(&etcdctl_bin, &ours.endpoint, &args, stdin);
        let b = etcdctl(&etcdctl_bin, &theirs.endpoint, &args, stdin);
        if a != b {
            differences.push(format!("etcdctl {}\n--- leasekv\n{a}--- etcd\n{b}", args.join(" ")));
        }
    }
    assert!(differences.is_empty(), "{} steps differ:\n{}", differences.len(), differences.join("\n"));
}

/// Sets up the matrix's users: `r`, `w` and `rw`, each with a role of that kind on `/in/`.
fn matrix_setup(bin: &Path, endpoint: &str) {
    let mut steps = vec!["user add root:rootpw".to_string(), "user grant-role root root".into(), "auth enable".into()];
    for (user, kind) in [("r", "read"), ("w", "write"), ("rw", "readwrite")] {
        steps.push(format!("user add {user}:pw {ROOT}"));
        steps.push(format!("role add role-{user} {ROOT}"));
        steps.push(format!("role grant-permission role-{user} {kind} /in/ --prefix {ROOT}"));
        steps.push(format!("user grant-role {user} role-{user} {ROOT}"));
    }
    steps.push(format!("put /in/k v {ROOT}"));
    steps.push(format!("put /out/k v {ROOT}"));
    for step in steps {
        let args: Vec<&str> = step.split(' ').collect();
        let out = etcdctl(bin, endpoint, &args, None);
        assert!(out.starts_with("exit Some(0)"), "setup step {step}: {out}");
    }
}

/// What `etcdctl watch` printed when the server canceled the watch within two seconds;
/// `None` when it was still watching (then it is killed, by pid).
fn watch_outcome(bin: &Path, endpoint: &str, args: &[&str]) -> Option<String> {
    let mut child = Command::new(bin)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("etcdctl starts");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        if let Ok(Some(_)) = child.try_wait() {
            let output = child.wait_with_output().expect("output");
            return Some(String::from_utf8_lossy(&output.stdout).to_string());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn the_permission_matrix_holds() {
    let Some((etcdctl_bin, etcd_bin)) = tools() else {
        eprintln!("skipped: etcd or etcdctl is not installed");
        return;
    };
    let (ours, theirs) = (leasekv(), etcd(&etcd_bin));
    for system in [&ours, &theirs] {
        wait_ready(&etcdctl_bin, system);
        matrix_setup(&etcdctl_bin, &system.endpoint);
    }
    let mut failures = Vec::new();
    for (user, can_read, can_write) in [("r", true, false), ("w", false, true), ("rw", true, true)] {
        for (place, inside) in [("/in", true), ("/out", false)] {
            let key = format!("{place}/k");
            let txn = format!("value(\"{key}\") = \"v\"\n\nput {key} t\n\n\n");
            let ops: Vec<(&str, Vec<String>, Option<String>, bool)> = vec![
                ("get", vec!["get".into(), key.clone()], None, can_read),
                ("get prefix", vec!["get".into(), format!("{place}/"), "--prefix".into()], None, can_read),
                ("put", vec!["put".into(), key.clone(), "v".into()], None, can_write),
                (
                    "put --prev-kv",
                    vec!["put".into(), key.clone(), "v".into(), "--prev-kv".into()],
                    None,
                    can_read && can_write,
                ),
                ("del", vec!["del".into(), format!("{place}/none")], None, can_write),
                ("txn", vec!["txn".into()], Some(txn), can_read && can_write),
                // A watch it may not create is canceled at once; one it may runs until killed.
                ("watch", vec!["watch".into(), format!("{place}/")], None, can_read),
            ];
            for (name, mut args, stdin, allowed) in ops {
                args.push(format!("--user={user}:pw"));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let expected = allowed && inside;
                if name == "watch" {
                    let a = watch_outcome(&etcdctl_bin, &ours.endpoint, &args);
                    let b = watch_outcome(&etcdctl_bin, &theirs.endpoint, &args);
                    if a.is_none() != expected || a != b {
                        failures.push(format!(
                            "{user} watch {place}: expected allowed={expected}; leasekv {a:?}, etcd {b:?}"
                        ));
                    }
                    continue;
                }
                let a = etcdctl(&etcdctl_bin, &ours.endpoint, &args, stdin.as_deref());
                let b = etcdctl(&etcdctl_bin, &theirs.endpoint, &args, stdin.as_deref());
                let ok = a.starts_with("exit Some(0)");
                if ok != expected || (!ok && !a.contains("permission denied")) {
                    failures.push(format!("{user} {name} {place}: expected allowed={expected}, leasekv said:\n{a}"));
                }
                if a != b {
                    failures
                        .push(format!("{user} {name} {place}: leasekv and etcd differ\n--- leasekv\n{a}--- etcd\n{b}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

const KVCLI: &str = env!("CARGO_BIN_EXE_kvcli");

/// kvcli's `--user` and its `user`, `role` and `auth` commands (no etcd needed).
#[test]
fn kvcli_manages_users_and_roles_and_authenticates() {
    let system = leasekv();
    let kvcli = |args: &str| {
        let out = Command::new(KVCLI)
            .arg("--endpoints")
            .arg(&system.endpoint)
            .args(args.split(' '))
            .output()
            .expect("kvcli runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let started = Instant::now();
    while !kvcli("put /ready 1").0 {
        assert!(started.elapsed() < Duration::from_secs(20), "leasekv did not become ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    for (args, ok, says) in [
        ("user add root:rootpw", true, "User root created"),
        ("auth enable", true, "Authentication Enabled"),
        ("put /k v", false, "user name is empty"),
        ("--user root:rootpw auth status", true, "Authentication Status: true"),
        ("--user root:rootpw user add app:apppw", true, "User app created"),
        ("--user root:rootpw role add app", true, "Role app created"),
        ("--user root:rootpw role grant-permission app readwrite /app/ --prefix", true, "Role app updated"),
        ("--user root:rootpw role get app", true, "[/app/, /app0) (prefix /app/)"),
        ("--user root:rootpw user grant-role app app", true, "Role app is granted to user app"),
        ("--user app:apppw put /app/1 x", true, "OK"),
        ("--user app --password apppw get /app/1", true, "x"),
        ("--user app:apppw put /other x", false, "permission denied"),
        ("--user app:wrong get /app/1", false, "authentication failed"),
        ("--user app:apppw user list", false, "permission denied"),
        ("--user root:rootpw user passwd app --new-password p2", true, "Password updated"),
        ("--user app:apppw get /app/1", false, "authentication failed"),
        ("--user app:p2 get /app/1", true, "x"),
        ("--user root:rootpw user get app", true, "Roles: app"),
        ("--user root:rootpw role revoke-permission app /app/ --prefix", true, "revoked"),
        ("--user app:p2 get /app/1", false, "permission denied"),
        ("--user root:rootpw auth disable", true, "Authentication Disabled"),
        ("get /app/1", true, "x"),
    ] {
        let (success, text) = kvcli(args);
        assert_eq!(success, ok, "kvcli {args}: {text}");
        assert!(text.contains(says), "kvcli {args}: expected {says:?} in {text}");
    }
}

/// A permission revoked while a client writes in a loop through a follower: no write of that
/// user is applied after the revocation, on any replica. The state machine checks every
/// user's write against the auth store at the point of the log where it applies it (see
/// docs/security.md, "Where a permission is checked"), so a write admitted by a member that
/// had not applied the revocation yet is refused where it is applied.
#[test]
fn a_revoked_permission_stops_writes_at_its_revision() {
    use leasekv::client::proto::etcdserverpb::{
        auth_client::AuthClient, AuthRoleRevokePermissionRequest, AuthenticateRequest,
    };
    use leasekv::client::{Client, Credentials, GetOptions};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    const WRITERS: usize = 8;
    const MAX_WRITES: usize = 4000;
    let cluster = common::cluster::Cluster::start("paxoslease");
    let rt = common::cluster::runtime();
    rt.block_on(async {
        let master = common::cluster::master_index(&cluster).await;
        let follower = (master + 1) % 3;
        let setup = common::cluster::client(&cluster.endpoint(master)).await;
        setup.user_add("root", Some("rootpw")).await.expect("user add root");
        setup.user_grant_role("root", "root").await.expect("grant root");
        setup.user_add("app", Some("apppw")).await.expect("user add app");
        setup.role_add("app").await.expect("role add");
        setup
            .role_grant_permission(
                "app",
                leasekv::client::proto::authpb::Permission {
                    perm_type: leasekv::client::proto::authpb::permission::Type::Readwrite as i32,
                    key: b"/app/".to_vec(),
                    range_end: b"/app0".to_vec(),
                },
            )
            .await
            .expect("grant");
        setup.user_grant_role("app", "app").await.expect("grant app");
        setup.auth_enable().await.expect("auth enable");

        let credentials = Credentials { user: "app".into(), password: "apppw".into() };
        // Once the follower has applied the auth changes (a request without a user is
        // refused there): before that it issues no token, and the client goes without one.
        let anonymous = common::cluster::client(&cluster.endpoint(follower)).await;
        common::cluster::eventually(Duration::from_secs(10), || async {
            match anonymous.put("/anonymous", "1", 0, false).await {
                Err(e) if e.to_string().contains("user name is empty") => Ok(()),
                other => Err(format!("auth not on at the follower yet: {other:?}")),
            }
        })
        .await;
        let writer = Client::connect_as(&[cluster.endpoint(follower)], Default::default(), None, credentials)
            .await
            .expect("connect as app");
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..WRITERS)
            .map(|task| {
                let (writer, stop) = (writer.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut applied = Vec::new();
                    let mut refused = 0;
                    let mut first_refusal = None;
                    for i in 0..MAX_WRITES / WRITERS {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        match writer.put(format!("/app/{task}/{i}"), "v", 0, false).await {
                            Ok(answer) => applied.push(answer.header.map_or(0, |h| h.revision)),
                            Err(error) => {
                                refused += 1;
                                first_refusal.get_or_insert(error.to_string());
                            }
                        }
                    }
                    (applied, refused, first_refusal)
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        // The revocation, by root, through the master; its header's revision is the store
        // revision when it was applied (auth changes move no key).
        let url = format!("http://{}", cluster.endpoint(master));
        let mut auth = AuthClient::connect(url).await.expect("connect");
        let token = auth
            .authenticate(AuthenticateRequest { name: "root".into(), password: "rootpw".into() })
            .await
            .expect("authenticate root")
            .into_inner()
            .token;
        let mut revoke = tonic::Request::new(AuthRoleRevokePermissionRequest {
            role: "app".into(),
            key: b"/app/".to_vec(),
            range_end: b"/app0".to_vec(),
        });
        revoke.metadata_mut().insert("token", token.parse().expect("an ASCII token"));
        let revoked_at =
            auth.role_revoke_permission(revoke).await.expect("revoke").into_inner().header.expect("header").revision;
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Relaxed);
        let mut answered_after = Vec::new();
        let (mut applied, mut refused, mut refusals) = (0, 0, Vec::new());
        for task in tasks {
            let (revisions, task_refused, refusal) = tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("the writers stop")
                .expect("a writer task");
            applied += revisions.len();
            refused += task_refused;
            refusals.extend(refusal);
            answered_after.extend(revisions.into_iter().filter(|r| *r > revoked_at));
        }
        assert!(
            applied > 0 && refused > 0,
            "the loop must span the revocation: {applied} applied, {refused} refused ({refusals:?})"
        );
        assert!(
            answered_after.is_empty(),
            "writes answered as applied after the revocation (at {revoked_at}): {answered_after:?}"
        );

        // Every replica's history: no key under /app/ written after the revocation.
        let root = Credentials { user: "root".into(), password: "rootpw".into() };
        let head = {
            let c = Client::connect_as(&[cluster.endpoint(master)], Default::default(), None, root.clone())
                .await
                .expect("root");
            c.status().await.expect("status").header.expect("header").revision
        };
        for node in 0..3 {
            let c = Client::connect_as(&[cluster.endpoint(node)], Default::default(), None, root.clone())
                .await
                .expect("root");
            let options = GetOptions { prefix: true, serializable: true, ..Default::default() };
            let found = common::cluster::eventually(Duration::from_secs(10), || async {
                let found = c.get("/app/", options).await.map_err(|e| e.to_string())?;
                match found.header.as_ref().map_or(0, |h| h.revision) >= head {
                    true => Ok(found),
                    false => Err("not caught up".to_string()),
                }
            })
            .await;
            let late: Vec<_> =
                found.kvs.iter().filter(|kv| kv.mod_revision > revoked_at).map(|kv| kv.mod_revision).collect();
            assert!(
                late.is_empty(),
                "node {}: writes of the revoked user applied after {revoked_at}: {late:?}",
                node + 1
            );
            assert_eq!(found.kvs.len(), applied, "node {}: every write answered as applied is there", node + 1);
        }
        eprintln!("{applied} writes applied up to revision {revoked_at}, {refused} refused after the revocation");
    });
}
