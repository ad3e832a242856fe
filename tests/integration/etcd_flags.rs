//! kvserver started as etcd is (docs/configuration.md, "From etcd's flags"): a cluster of
//! three from the command lines of etcd's clustering guide ("Static"), one from `ETCD_*`
//! variables alone, and a member joining with `--initial-cluster-state existing` after
//! `etcdctl member add`, with the variables etcdctl printed. etcdctl drives and checks
//! each (it must be installed under CI=true).
//!
//! Each member has a loopback address of its own (127.0.0.x, as the guide's hosts have
//! their own IPs), on ports found free there.

use crate::common;

use common::cluster::KVSERVER;
use common::process::{run, succeeded};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A kvserver process started by the test, killed (by pid) on drop; its log printed when
/// the test fails.
struct Node {
    child: Child,
    log: PathBuf,
}

impl Node {
    fn start(dir: &Path, name: &str, args: &[String], env: &[(String, String)]) -> Node {
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(KVSERVER)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("kvserver starts");
        Node { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- {} ----\n{}", self.log.display(), self.log());
        }
    }
}

/// Two free ports on `ip` (client, peer).
fn ports_on(ip: &str) -> (u16, u16) {
    let ports = common::free_ports_on(ip, 2);
    (ports[0], ports[1])
}

/// One member's addresses.
struct Member {
    name: String,
    client: String,
    peer: String,
}

fn members(names: &[&str], first_ip: u8) -> Vec<Member> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let ip = format!("127.0.0.{}", first_ip + i as u8);
            let (client, peer) = ports_on(&ip);
            Member {
                name: name.to_string(),
                client: format!("http://{ip}:{client}"),
                peer: format!("http://{ip}:{peer}"),
            }
        })
        .collect()
}

fn initial_cluster(members: &[Member]) -> String {
    members.iter().map(|m| format!("{}={}", m.name, m.peer)).collect::<Vec<_>>().join(",")
}

fn endpoints(members: &[Member]) -> String {
    members.iter().map(|m| m.client.as_str()).collect::<Vec<_>>().join(",")
}

/// etcdctl, which must be installed under CI=true.
fn etcdctl() -> Option<String> {
    common::tool("etcdctl", "etcd-client").map(|p| p.display().to_string())
}

/// What etcdctl printed for `args` once it succeeds (bounded: 20 s).
fn etcdctl_until_ok(etcdctl: &str, endpoints: &str, args: &[&str]) -> String {
    let mut all = vec!["--endpoints", endpoints, "--dial-timeout", "2s", "--command-timeout", "3s"];
    all.extend_from_slice(args);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let output = run(etcdctl, &all);
        if output.status.success() || Instant::now() >= deadline {
            return succeeded(&output, &format!("etcdctl {}", args.join(" ")));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `etcdctl member list` shows exactly `members`, each with its name and its
/// client URL (which the member publishes itself once running; its name may show before,
/// from `--initial-cluster`).
fn wait_for_members(etcdctl: &str, endpoints: &str, members: &[&Member]) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = etcdctl_until_ok(etcdctl, endpoints, &["member", "list"]);
        let shown = |m: &&Member| {
            list.lines().any(|l| l.contains(&format!(", {}, ", m.name)) && l.contains(&format!("{}, ", m.client)))
        };
        let published =
            members.iter().all(shown) && list.lines().filter(|l| !l.trim().is_empty()).count() == members.len();
        if published {
            return list;
        }
        assert!(Instant::now() < deadline, "members not all published:\n{list}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_cluster_started_with_the_clustering_guides_static_command_lines_serves_etcdctl() {
    let Some(etcdctl) = etcdctl() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = members(&["infra0", "infra1", "infra2"], 10);
    let nodes: Vec<Node> = cluster
        .iter()
        .map(|m| {
            // The guide's second listen URL is loopback's 2379; three members on one host
            // need a port each there.
            let (loopback, _) = ports_on("127.0.0.1");
            let args = [
                "--name",
                &m.name,
                "--initial-advertise-peer-urls",
                &m.peer,
                "--listen-peer-urls",
                &m.peer,
                "--listen-client-urls",
                &format!("{},http://127.0.0.1:{loopback}", m.client),
                "--advertise-client-urls",
                &m.client,
                "--initial-cluster-token",
                "etcd-cluster-1",
                "--initial-cluster",
                &initial_cluster(&cluster),
                "--initial-cluster-state",
                "new",
                // A Raft timing knob of the guide's kind: ignored, with a warning.
                "--heartbeat-interval",
                "100",
            ]
            .map(String::from);
            Node::start(dir.path(), &m.name, &args, &[])
        })
        .collect();
    let all = endpoints(&cluster);
    etcdctl_until_ok(&etcdctl, &all, &["put", "/guide", "static"]);
    let got = etcdctl_until_ok(&etcdctl, &cluster[2].client, &["get", "/guide", "--print-value-only"]);
    assert_eq!(got.trim(), "static");
    let list = wait_for_members(&etcdctl, &all, &cluster.iter().collect::<Vec<_>>());
    for m in &cluster {
        assert!(list.contains(&m.peer) && list.contains(&m.client), "{list}");
    }
    // etcd's default data dir, NAME.etcd, in the working directory.
    assert!(dir.path().join("infra0.etcd").is_dir());
    assert!(nodes[0].log().contains("--heartbeat-interval is ignored"), "{}", nodes[0].log());
}

#[test]
fn a_cluster_configured_by_etcd_variables_alone_serves_etcdctl_and_takes_a_member_added_with_etcdctl() {
    let Some(etcdctl) = etcdctl() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = members(&["env0", "env1", "env2"], 20);
    let variables = |m: &Member, cluster: &[Member], state: &str| {
        [
            ("ETCD_NAME", m.name.clone()),
            ("ETCD_DATA_DIR", dir.path().join(&m.name).display().to_string()),
            ("ETCD_LISTEN_PEER_URLS", m.peer.clone()),
            ("ETCD_INITIAL_ADVERTISE_PEER_URLS", m.peer.clone()),
            ("ETCD_LISTEN_CLIENT_URLS", m.client.clone()),
            ("ETCD_ADVERTISE_CLIENT_URLS", m.client.clone()),
            ("ETCD_INITIAL_CLUSTER", initial_cluster(cluster)),
            ("ETCD_INITIAL_CLUSTER_STATE", state.to_string()),
            ("ETCD_INITIAL_CLUSTER_TOKEN", "env-cluster".to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v))
    };
    let mut nodes: Vec<Node> =
        cluster.iter().map(|m| Node::start(dir.path(), &m.name, &[], &variables(m, &cluster, "new"))).collect();
    let all = endpoints(&cluster);
    etcdctl_until_ok(&etcdctl, &all, &["put", "/env", "variables"]);
    wait_for_members(&etcdctl, &all, &cluster.iter().collect::<Vec<_>>());

    // etcd's way to grow a cluster: member add prints the new member's variables.
    let new = members(&["env3"], 23).pop().expect("one");
    let added = etcdctl_until_ok(&etcdctl, &all, &["member", "add", "env3", &format!("--peer-urls={}", new.peer)]);
    let printed: Vec<(String, String)> = added
        .lines()
        .filter_map(|line| line.split_once('='))
        .filter(|(key, _)| key.starts_with("ETCD_"))
        .map(|(key, value)| (key.to_string(), value.trim_matches('"').to_string()))
        .collect();
    let names: Vec<&str> = printed.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        ["ETCD_NAME", "ETCD_INITIAL_CLUSTER", "ETCD_INITIAL_ADVERTISE_PEER_URLS", "ETCD_INITIAL_CLUSTER_STATE"],
        "{added}"
    );
    let mut env = printed;
    env.push(("ETCD_DATA_DIR".into(), dir.path().join("env3").display().to_string()));
    env.push(("ETCD_LISTEN_PEER_URLS".into(), new.peer.clone()));
    env.push(("ETCD_LISTEN_CLIENT_URLS".into(), new.client.clone()));
    env.push(("ETCD_ADVERTISE_CLIENT_URLS".into(), new.client.clone()));
    nodes.push(Node::start(dir.path(), "env3", &[], &env));
    let list = wait_for_members(&etcdctl, &all, &cluster.iter().chain([&new]).collect::<Vec<_>>());
    assert!(list.contains(&new.client), "{list}");
    // The new member serves what was written before it joined, and takes writes.
    let got = etcdctl_until_ok(&etcdctl, &new.client, &["get", "/env", "--print-value-only"]);
    assert_eq!(got.trim(), "variables");
    etcdctl_until_ok(&etcdctl, &new.client, &["put", "/env/after", "join"]);
    assert!(nodes[3].log().contains("joining the existing cluster"), "{}", nodes[3].log());
}

/// kvserver's standard error when it stops by itself within 10 s (it must: these starts
/// are refused before anything listens); killed and failed otherwise.
fn refused_start(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("stderr");
    let mut child = Command::new(KVSERVER)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("kvserver starts");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("kvserver {args:?} did not stop: {}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    std::fs::read_to_string(&log).unwrap_or_default()
}

#[test]
fn an_etcd_flag_leasekv_does_not_have_stops_the_start_with_its_name() {
    let said = refused_start(&["--name", "x", "--discovery", "https://discovery.etcd.io/abc"], &[]);
    assert!(said.contains("--discovery: etcd's --discovery is not supported by leasekv"), "{said}");
    let said = refused_start(&[], &[("ETCD_ENABLE_V2", "true")]);
    assert!(said.contains("ETCD_ENABLE_V2: etcd's --enable-v2 is not supported"), "{said}");
    let said = refused_start(&["--listen-client-urls", "http://127.0.0.1:0"], &[]);
    assert!(said.contains("--advertise-client-urls is required"), "{said}");
}
