//! Tests of loading, defaults, overrides and every error message.

use super::etcd::EtcdSettings;
use super::*;
use std::net::TcpListener;

/// A valid 3-node configuration for node 1; tests break one thing in it.
const THREE_NODES: &str = r#"
id = 1
client_addr = "127.0.0.1:12379"
peer_addr = "127.0.0.1:12380"
data_dir = "./data/n1"

[[peers]]
id = 1
client_addr = "127.0.0.1:12379"
peer_addr = "127.0.0.1:12380"

[[peers]]
id = 2
client_addr = "127.0.0.1:22379"
peer_addr = "127.0.0.1:22380"

[[peers]]
id = 3
client_addr = "127.0.0.1:32379"
peer_addr = "127.0.0.1:32380"

[election]
backend = "paxoslease"
lease_time_ms = 800
"#;

fn origin() -> Origin {
    Origin::File(PathBuf::from("cluster/n1.toml"))
}

fn parse(text: &str) -> Result<NodeConfig, ConfigError> {
    NodeConfig::from_toml_str(text, origin(), &Overrides::default())
}

/// The error message for `text`, which must be rejected; asserts that it is one line naming
/// the file.
fn error_of(text: &str) -> String {
    error_with(text, &Overrides::default())
}

fn error_with(text: &str, overrides: &Overrides) -> String {
    let message = match NodeConfig::from_toml_str(text, origin(), overrides) {
        Ok(config) => panic!("expected an error, got {config:?}"),
        Err(e) => e.to_string(),
    };
    assert!(!message.contains('\n'), "not one line: {message:?}");
    message
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cluster")
}

#[test]
fn no_file_gives_a_single_node_on_2379_with_data_in_leasekv_data() {
    let config = NodeConfig::load(None, &Overrides::default()).expect("built-in default");
    assert_eq!(config.id, NodeId(1));
    assert_eq!(config.client_addr.to_string(), "127.0.0.1:2379");
    assert_eq!(config.peer_addr.to_string(), "127.0.0.1:2380");
    assert_eq!(config.data_dir, PathBuf::from("./leasekv-data"));
    assert_eq!(config.members(), vec![NodeId(1)]);
    assert_eq!(config.election.backend, BackendKind::PaxosLease);
    assert_eq!(config.election.lease_time, DEFAULT_LEASE_TIME);
    assert_eq!(config.origin, Origin::Builtin);
    assert_eq!(config.limits(), Limits::default());
    // The node loop takes snapshots itself (off the runtime's worker).
    assert_eq!(
        config.replica_config(),
        ReplicaConfig {
            defer_snapshots: true,
            // Read leases on, a quarter of the election's lease time, voters only.
            read_leases: Some(leasekv_kvstore::log::ReadLeaseConfig::new(DEFAULT_LEASE_TIME / 4, 0.01)),
            ..ReplicaConfig::for_lease_time(DEFAULT_LEASE_TIME)
        }
    );
    assert_eq!(config.lease_config(), LeaseConfig::with_lease_time(DEFAULT_LEASE_TIME));
    assert_eq!(config, NodeConfig::builtin());
}

#[test]
fn a_file_with_only_an_id_takes_the_same_defaults_as_the_builtin() {
    let minimal = parse("id = 1").expect("minimal file");
    assert_eq!(NodeConfig { origin: Origin::Builtin, ..minimal }, NodeConfig::builtin());
}

#[test]
fn every_example_file_parses_validates_and_agrees_with_the_others() {
    let mut cluster_ids = Vec::new();
    for n in 1..=3u32 {
        let path = examples_dir().join(format!("n{n}.toml"));
        let config = NodeConfig::load(Some(&path), &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.id, NodeId(n));
        assert_eq!(config.members(), vec![NodeId(1), NodeId(2), NodeId(3)]);
        assert_eq!(config.client_addr.to_string(), format!("127.0.0.1:{n}2379"));
        assert_eq!(config.peer_addr.to_string(), format!("127.0.0.1:{n}2380"));
        assert_eq!(config.data_dir, PathBuf::from(format!("./leasekv-data/n{n}")));
        assert_eq!(config.election.backend, BackendKind::PaxosLease);
        assert_eq!(config.election.lease_time, Duration::from_millis(800));
        assert_eq!(config.election.max_lease_time, Duration::from_millis(1000));
        assert_eq!(config.other_members().count(), 2);
        cluster_ids.push(config.cluster_id);
    }
    // Derived independently on each node, so it must come out the same.
    assert!(cluster_ids.windows(2).all(|w| w[0] == w[1]), "{cluster_ids:?}");
}

#[test]
fn the_commented_lease_tracker_line_of_the_examples_is_a_valid_switch() {
    let path = examples_dir().join("n2.toml");
    let text = std::fs::read_to_string(&path).expect("example file");
    let switched = text
        .replace("backend = \"paxoslease\"", "")
        .replace("# backend = \"lease-tracker\"", "backend = \"lease-tracker\"");
    let config = NodeConfig::from_toml_str(&switched, Origin::File(path), &Overrides::default()).expect("switched");
    assert_eq!(config.election.backend, BackendKind::LeaseTracker);
    assert_eq!(config.tracker_node(), NodeId(1), "the tracker defaults to the lowest id");
}

#[test]
fn unknown_backend_lists_the_valid_ones_with_file_and_position() {
    let message = error_of(&THREE_NODES.replace("\"paxoslease\"", "\"paxos\""));
    assert!(message.starts_with("cluster/n1.toml:"), "{message}");
    assert!(message.contains("unknown election backend \"paxos\""), "{message}");
    assert!(message.contains("expected one of: paxoslease, lease-tracker"), "{message}");
    let line = THREE_NODES.lines().position(|l| l.starts_with("backend")).expect("backend line") + 1;
    assert!(message.starts_with(&format!("cluster/n1.toml:{line}:11: ")), "{message}");
}

#[test]
fn unknown_backend_from_the_command_line_names_the_flag() {
    let overrides = Overrides { backend: Some("raft".into()), ..Overrides::default() };
    let message = error_with(THREE_NODES, &overrides);
    assert!(message.starts_with("--backend: unknown election backend \"raft\""), "{message}");
    assert!(message.contains("paxoslease, lease-tracker"), "{message}");
}

#[test]
fn duplicate_ids_are_rejected() {
    let text = THREE_NODES.replacen("id = 3", "id = 2", 1);
    let message = error_of(&text);
    assert!(message.contains("node id 2 appears more than once in [[peers]]"), "{message}");
}

#[test]
fn duplicate_addresses_are_rejected_naming_both_users() {
    let text = THREE_NODES.replace("127.0.0.1:32380", "127.0.0.1:22380");
    let message = error_of(&text);
    assert!(message.contains("address 127.0.0.1:22380 is used twice"), "{message}");
    assert!(message.contains("node 2 peer_addr") && message.contains("node 3 peer_addr"), "{message}");

    let same = "id = 1\nclient_addr = \"127.0.0.1:5000\"\npeer_addr = \"127.0.0.1:5000\"";
    let message = error_of(same);
    assert!(message.contains("client_addr and peer_addr are both 127.0.0.1:5000"), "{message}");
}

#[test]
fn lease_time_not_below_max_lease_time_is_rejected() {
    for max in [800, 500] {
        let text = format!("{THREE_NODES}max_lease_time_ms = {max}\n");
        let message = error_of(&text);
        assert!(message.starts_with("cluster/n1.toml: [election] lease time (800ms)"), "{message}");
        assert!(message.contains("must be strictly less than max lease time"), "{message}");
    }
}

#[test]
fn drift_bound_out_of_range_is_rejected() {
    for drift in ["0.5", "-0.01", "nan"] {
        let message = error_of(&format!("{THREE_NODES}drift_bound = {drift}\n"));
        assert!(message.contains("drift bound") && message.contains("allowed is 0 to 0.1"), "{message}");
    }
}

#[test]
fn self_missing_from_peers_is_rejected() {
    let overrides = Overrides { id: Some(4), ..Overrides::default() };
    let message = error_with(THREE_NODES, &overrides);
    assert!(message.contains("node 4 is not in its own peer list"), "{message}");
}

#[test]
fn self_listed_with_other_addresses_is_rejected_saying_which() {
    let text = THREE_NODES.replacen("peer_addr = \"127.0.0.1:12380\"", "peer_addr = \"127.0.0.1:12381\"", 1);
    let message = error_of(&text);
    assert!(message.contains("node 1 listens on peer_addr = 127.0.0.1:12381"), "{message}");
    assert!(message.contains("[[peers]] entry says 127.0.0.1:12380"), "{message}");
}

#[test]
fn listening_on_all_interfaces_with_the_advertised_port_is_allowed() {
    let text = THREE_NODES.replacen("client_addr = \"127.0.0.1:12379\"", "client_addr = \"0.0.0.0:12379\"", 1);
    let config = parse(&text).expect("wildcard listen address");
    assert_eq!(config.client_addr.to_string(), "0.0.0.0:12379");

    let text = THREE_NODES.replace("127.0.0.1:32379", "0.0.0.0:32379");
    let message = error_of(&text);
    assert!(message.contains("node 3 client_addr = 0.0.0.0:32379 cannot be reached"), "{message}");
}

#[test]
fn tracker_must_be_a_member() {
    let text = format!("{THREE_NODES}tracker = 7\n");
    let message = error_of(&text);
    assert!(message.contains("[election] tracker = 7 is not a member"), "{message}");
    assert!(message.contains("expected one of the [[peers]] ids: 1, 2, 3"), "{message}");

    let config = parse(&format!("{THREE_NODES}tracker = 3\n")).expect("member tracker");
    assert_eq!(config.tracker_node(), NodeId(3));
}

#[test]
fn unknown_fields_are_reported_by_name_and_line() {
    let text = THREE_NODES.replace("lease_time_ms = 800", "lease_tim_ms = 800");
    let message = error_of(&text);
    assert!(message.contains("unknown field `lease_tim_ms`"), "{message}");
    assert!(message.contains("lease_time_ms"), "lists the valid fields: {message}");
    let line = text.lines().position(|l| l.starts_with("lease_tim_ms")).expect("line") + 1;
    assert!(message.starts_with(&format!("cluster/n1.toml:{line}:")), "{message}");
}

#[test]
fn malformed_toml_is_one_line_with_its_position() {
    let message = error_of("id = 1\nclient_addr = \"127.0.0.1:2379\n");
    assert!(message.starts_with("cluster/n1.toml:2:"), "{message}");

    let message = error_of("id = 1\npeer_addr = \"localhost\"\n");
    assert!(message.starts_with("cluster/n1.toml:2:13: "), "{message}");
    assert!(message.contains("socket address"), "{message}");

    let message = error_of("id = \"one\"\n");
    assert!(message.starts_with("cluster/n1.toml:1:6: "), "{message}");
}

#[test]
fn missing_and_zero_ids_are_rejected() {
    let message = error_of("data_dir = \"./x\"");
    assert!(message.contains("id is missing") && message.contains("--id"), "{message}");
    let message = error_of("id = 0");
    assert!(message.contains("id is 0; node ids must be at least 1"), "{message}");
    let message = error_of(&THREE_NODES.replace("id = 3", "id = 0"));
    assert!(message.contains("a [[peers]] id is 0"), "{message}");
}

#[test]
fn limits_and_log_settings_out_of_range_are_rejected() {
    let message = error_of("id = 1\n[limits]\nmax_value_bytes = 100000000\n");
    assert!(message.contains("[limits] max_value_bytes = 100000000 is out of range; allowed is 1 to 67108864"));
    let message = error_of("id = 1\n[limits]\nmax_txn_ops = 0\n");
    assert!(message.contains("[limits] max_txn_ops = 0 is out of range"), "{message}");
    let message = error_of("id = 1\n[log]\nsnapshot_every = 0\n");
    assert!(message.contains("[log]") && message.contains("snapshot_every must be at least 1"), "{message}");
    let message = error_of("id = 1\n[log]\nretain_after_snapshot = 1000001\n");
    assert!(
        message.contains("[log]") && message.contains("retain_after_snapshot must be at most 1000000"),
        "{message}"
    );
}

#[test]
fn limits_and_log_settings_reach_the_store_configs() {
    let text = "id = 1\n[limits]\nmax_key_bytes = 100\nmax_txn_ops = 5\n[log]\nmax_inflight_slots = 3\n";
    let config = parse(text).expect("valid");
    let limits = config.limits();
    assert_eq!((limits.max_key_bytes, limits.max_txn_ops), (100, 5));
    assert_eq!(limits.max_value_bytes, Limits::default().max_value_bytes);
    assert_eq!(limits.quota_bytes, Limits::DEFAULT_QUOTA_BYTES);
    let quota = parse("id = 1\n[storage]\nquota_bytes = 1000000\n").expect("valid").limits().quota_bytes;
    assert_eq!(quota, 1_000_000);
    let message = error_of("id = 1\n[storage]\ncorrupt_check_interval_ms = 5\n");
    assert!(message.contains("[storage] corrupt_check_interval_ms = 5 is too short; at least 100 ms"), "{message}");
    let unchecked = parse("id = 1\n[storage]\ncorrupt_check_interval_ms = 0\n").expect("valid");
    assert_eq!(unchecked.corrupt_check_interval, None);
    assert_eq!(config.state_flush_every, leasekv_kvstore::engine::DEFAULT_FLUSH_EVERY);
    let flushing = parse("id = 1\n[storage]\nengine_flush_ms = 100\n").expect("valid");
    assert_eq!(flushing.state_flush_every, Duration::from_millis(100));
    for wrong in [0, 9, 10_001] {
        let message = error_of(&format!("id = 1\n[storage]\nengine_flush_ms = {wrong}\n"));
        assert!(
            message
                .contains(&format!("[storage] engine_flush_ms = {wrong} is out of range: it must be from 10 to 10000")),
            "{message}"
        );
    }
    let message = error_of("id = 1\n[storage]\nquota = 5\n");
    assert!(message.contains("unknown field `quota`"), "{message}");
    let replica = config.replica_config();
    assert_eq!(replica.max_inflight_slots, 3);
    assert_eq!(replica.retry_interval, ReplicaConfig::for_lease_time(DEFAULT_LEASE_TIME).retry_interval);
    assert_eq!(replica.retain_after_snapshot, ReplicaConfig::for_lease_time(DEFAULT_LEASE_TIME).retain_after_snapshot);
    // A short log, as tests use to make compaction happen after a few writes; 0 keeps no tail.
    let config = parse("id = 1\n[log]\nsnapshot_every = 10\nretain_after_snapshot = 0\n").expect("valid");
    let replica = config.replica_config();
    assert_eq!((replica.snapshot_every, replica.retain_after_snapshot), (10, 0));
}

#[test]
fn worker_threads_default_to_half_the_cpus_and_can_be_set() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let config = parse("id = 1\n").expect("valid");
    assert_eq!(config.runtime.worker_threads, (cpus / 2).max(1));
    let config = parse("id = 1\n[runtime]\nworker_threads = 6\n").expect("valid");
    assert_eq!(config.runtime.worker_threads, 6);
    let overrides = Overrides { worker_threads: Some(2), ..Overrides::default() };
    let config =
        NodeConfig::from_toml_str("id = 1\n[runtime]\nworker_threads = 6\n", origin(), &overrides).expect("valid");
    assert_eq!(config.runtime.worker_threads, 2, "the flag wins over the file");
}

#[test]
fn worker_threads_out_of_range_are_rejected_saying_what_is_allowed() {
    let message = error_of("id = 1\n[runtime]\nworker_threads = 0\n");
    assert!(
        message.contains("[runtime] worker_threads = 0 is out of range; allowed is 1 to 1024")
            && message.contains("half of this host's CPUs"),
        "{message}"
    );
    let message = error_of("id = 1\n[runtime]\nworker_threads = 100000\n");
    assert!(message.contains("worker_threads = 100000 is out of range"), "{message}");
    let message = error_of("id = 1\n[runtime]\nthreads = 2\n");
    assert!(message.contains("unknown field `threads`"), "{message}");
}

#[test]
fn overrides_win_over_the_file() {
    let text = "id = 1\nclient_addr = \"127.0.0.1:1000\"\npeer_addr = \"127.0.0.1:1001\"\ndata_dir = \"./a\"\n\
                [election]\nbackend = \"paxoslease\"\nlease_time_ms = 800\n";
    let overrides = Overrides {
        id: Some(5),
        client_addr: Some("127.0.0.1:2000".parse().expect("addr")),
        peer_addr: Some("127.0.0.1:2001".parse().expect("addr")),
        data_dir: Some(PathBuf::from("./b")),
        backend: Some("lease-tracker".into()),
        lease_time_ms: Some(2000),
        worker_threads: Some(3),
        etcd: Default::default(),
    };
    let config = NodeConfig::from_toml_str(text, origin(), &overrides).expect("valid");
    assert_eq!(config.runtime.worker_threads, 3);
    assert_eq!(config.id, NodeId(5));
    assert_eq!(config.client_addr.to_string(), "127.0.0.1:2000");
    assert_eq!(config.peer_addr.to_string(), "127.0.0.1:2001");
    assert_eq!(config.data_dir, PathBuf::from("./b"));
    assert_eq!(config.election.backend, BackendKind::LeaseTracker);
    assert_eq!(config.election.lease_time, Duration::from_secs(2));
    // The default max lease time follows the overridden lease time, keeping T < M.
    assert_eq!(config.election.max_lease_time, Duration::from_millis(2500));
    // Without [[peers]] the single member follows the overridden identity and addresses.
    assert_eq!(config.member(NodeId(5)).and_then(|p| p.client_addr), Some(config.client_addr));
    assert_eq!(config.tracker_node(), NodeId(5));
}

#[test]
fn overrides_apply_to_the_builtin_default() {
    let overrides = Overrides { client_addr: Some("127.0.0.1:4379".parse().expect("addr")), ..Overrides::default() };
    let config = NodeConfig::load(None, &overrides).expect("valid");
    assert_eq!(config.client_addr.to_string(), "127.0.0.1:4379");
    assert_eq!(config.peers[0].client_addr, Some(config.client_addr));
}

/// [`THREE_NODES`] with its `[[peers]]` entries in the given order.
fn three_nodes_in_order(order: [u32; 3]) -> String {
    let (head, rest) = THREE_NODES.split_once("[[peers]]").expect("peers");
    let (_, election) = rest.split_once("[election]").expect("election");
    let peers: String = order
        .iter()
        .map(|n| {
            format!("[[peers]]\nid = {n}\nclient_addr = \"127.0.0.1:{n}2379\"\npeer_addr = \"127.0.0.1:{n}2380\"\n\n")
        })
        .collect();
    format!("{head}{peers}[election]{election}")
}

#[test]
fn cluster_id_is_derived_from_the_members_or_set_explicitly() {
    let a = parse(&three_nodes_in_order([1, 2, 3])).expect("valid");
    assert_eq!(a, parse(THREE_NODES).expect("valid"));
    // The order of [[peers]] does not matter: every node derives the same id.
    let b = parse(&three_nodes_in_order([3, 1, 2])).expect("reordered peers");
    assert_eq!(b.peers[0].id, NodeId(3));
    assert_eq!(a.cluster_id, b.cluster_id);

    let other = parse(&THREE_NODES.replace("127.0.0.1:32380", "127.0.0.1:42380")).expect("valid");
    assert_ne!(a.cluster_id, other.cluster_id);

    let explicit = parse(&THREE_NODES.replacen("data_dir", "cluster_id = 42\ndata_dir", 1)).expect("valid");
    assert_eq!(explicit.cluster_id, 42);
}

#[test]
fn a_missing_file_is_reported_with_its_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("absent.toml");
    let message = NodeConfig::load(Some(&path), &Overrides::default()).expect_err("missing").to_string();
    assert!(message.starts_with(&format!("{}: cannot read the configuration file", path.display())), "{message}");
}

/// A valid single-node configuration whose data lives in `dir`, on two ports that were free
/// a moment ago.
fn local_node(dir: &Path) -> NodeConfig {
    // Both listeners are held together so that the two ports differ.
    let client = TcpListener::bind("127.0.0.1:0").expect("client port");
    let peer = TcpListener::bind("127.0.0.1:0").expect("peer port");
    let overrides = Overrides {
        data_dir: Some(dir.to_path_buf()),
        client_addr: Some(client.local_addr().expect("addr")),
        peer_addr: Some(peer.local_addr().expect("addr")),
        ..Overrides::default()
    };
    NodeConfig::load(None, &overrides).expect("valid")
}

#[test]
fn environment_check_creates_the_data_dir_and_leaves_it_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("nested/data");
    let config = local_node(&data);
    config.check_environment().expect("usable environment");
    assert!(data.is_dir());
    assert_eq!(std::fs::read_dir(&data).expect("read dir").count(), 0, "the probe file is removed");
}

#[test]
fn a_port_in_use_is_detected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = TcpListener::bind("127.0.0.1:0").expect("listener");
    let addr = taken.local_addr().expect("addr");
    let mut config = local_node(dir.path());
    config.client_addr = addr;
    config.peers[0].client_addr = Some(addr);
    config.origin = origin();
    let message = config.check_environment().expect_err("port taken").to_string();
    assert!(message.starts_with(&format!("cluster/n1.toml: client address {addr} is already in use (")), "{message}");
    assert!(!message.contains('\n'));
}

#[test]
fn an_unwritable_data_dir_is_reported_with_its_path() {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let under_a_file = file.path().join("sub");
    let config = local_node(&under_a_file);
    let error = config.check_environment().expect_err("not a directory");
    assert!(matches!(error.kind(), ConfigErrorKind::DataDir { .. }));
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("data_dir \"{}\" is not usable: cannot", under_a_file.display())),
        "{message}"
    );

    let config = local_node(file.path());
    let message = config.check_environment().expect_err("a file, not a directory").to_string();
    assert!(message.contains("is not usable"), "{message}");
}

#[test]
fn positions_count_lines_and_characters_from_one() {
    let text = "a\nbé = x\n";
    assert_eq!(Position::of_offset(text, 0), Position { line: 1, column: 1 });
    assert_eq!(Position::of_offset(text, text.find('=').expect("=")), Position { line: 2, column: 4 });
    assert_eq!(Position::of_offset(text, 4), Position { line: 2, column: 2 }, "inside é steps back");
    assert_eq!(Position::of_offset(text, 1000), Position { line: 3, column: 1 });
}

#[test]
fn the_joining_examples_parse_without_an_id_and_ask_the_first_three_members() {
    for n in 4..=5u32 {
        let path = examples_dir().join(format!("n{n}.toml"));
        let config = NodeConfig::load(Some(&path), &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.initial_cluster_state, ClusterState::Existing);
        assert_eq!(config.id, NodeId(0), "the cluster gives the id");
        assert_eq!(config.members(), vec![NodeId(1), NodeId(2), NodeId(3)]);
        assert_eq!(config.client_addr.to_string(), format!("127.0.0.1:{n}2379"));
        assert_eq!(config.peer_addr.to_string(), format!("127.0.0.1:{n}2380"));
    }
}

#[test]
fn initial_cluster_state_defaults_to_new_and_rejects_other_words() {
    assert_eq!(parse(THREE_NODES).expect("valid").initial_cluster_state, ClusterState::New);
    let existing = format!("initial_cluster_state = \"existing\"\n{THREE_NODES}");
    assert_eq!(parse(&existing).expect("valid").initial_cluster_state, ClusterState::Existing);
    let bad = format!("initial_cluster_state = \"joining\"\n{THREE_NODES}");
    assert!(error_of(&bad).contains("initial_cluster_state = \"joining\" is not valid"), "{}", error_of(&bad));
    // A new cluster still needs an id; a joining node needs members to ask.
    assert!(error_of("client_addr = \"127.0.0.1:1\"\n").contains("id is missing"));
    let lonely =
        "initial_cluster_state = \"existing\"\nclient_addr = \"127.0.0.1:42379\"\npeer_addr = \"127.0.0.1:42380\"\n";
    assert!(error_of(lonely).contains("needs [[peers]]"), "{}", error_of(lonely));
}

#[test]
fn tls_sections_are_read_and_checked() {
    let with = |tls: &str| format!("{THREE_NODES}\n{tls}");
    let config = parse(&with(
        "[tls.client]\ncert = \"c.crt\"\nkey = \"c.key\"\nca = \"ca.crt\"\nrequire_client_cert = true\n\
         [tls.peer]\ncert = \"p.crt\"\nkey = \"p.key\"\nca = \"ca.crt\"\n",
    ))
    .unwrap();
    let client = config.tls.client.as_ref().unwrap();
    assert!(client.require_client_cert && client.ca == Some(PathBuf::from("ca.crt")));
    assert_eq!(config.tls.peer.as_ref().unwrap().cert, PathBuf::from("p.crt"));
    assert_eq!((config.tls.client_scheme(), config.tls.peer_scheme()), ("https", "https"));
    assert_eq!(parse(THREE_NODES).unwrap().tls, crate::tls::TlsSettings::default());

    let error = error_of(&with("[tls.client]\ncert = \"c.crt\"\nkey = \"c.key\"\nrequire_client_cert = true\n"));
    assert!(error.contains("require_client_cert = true needs `ca`"), "{error}");
    let error = error_of(&with("[tls.peer]\ncert = \"p.crt\"\nkey = \"p.key\"\n"));
    assert!(error.contains("missing field `ca`"), "{error}");
    let error = error_of(&with("[tls.peer]\ncert = \"p.crt\"\nkey = \"p.key\"\nca = \"x\"\nverify = false\n"));
    assert!(error.contains("unknown field `verify`"), "{error}");
}

#[test]
fn a_missing_tls_file_fails_the_environment_check_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = local_node(dir.path());
    config.tls.client = Some(crate::tls::ClientPortTls {
        cert: dir.path().join("absent.crt"),
        key: dir.path().join("absent.key"),
        ca: None,
        require_client_cert: false,
    });
    let error = config.check_environment().unwrap_err().to_string();
    assert!(error.contains("absent.crt") && error.contains("cannot read it"), "{error}");
}

#[test]
fn client_limits_default_reach_the_services_and_are_checked() {
    let config = parse("id = 1\n").expect("valid");
    assert_eq!(config.client_limits, ClientLimits::DEFAULT);
    assert_eq!(config.client_limits.max_request_bytes, 1_572_864, "etcd's --max-request-bytes default");
    assert_eq!(config.limits().max_leases, 1_000_000);
    assert_eq!(config.watch_settings().stream.max_watchers, 10_000);
    // etcd's receive limit: the request limit and 512 KiB of framing.
    assert_eq!(config.client_limits.grpc_message_limit(), 1_572_864 + 524_288);

    let text = "id = 1\n[limits]\nmax_request_bytes = 4096\nmax_client_connections = 7\nmax_concurrent_streams = 9\n\
                max_watchers_per_stream = 11\nmax_leases = 13\n";
    let config = parse(text).expect("valid");
    let client = &config.client_limits;
    assert_eq!(
        (
            client.max_request_bytes,
            client.max_client_connections,
            client.max_concurrent_streams,
            client.max_watchers_per_stream
        ),
        (4096, 7, 9, 11)
    );
    assert_eq!(config.limits().max_leases, 13);
    assert_eq!(config.watch_settings().stream.max_watchers, 11);
    assert!(client.gateway_body_limit() > client.grpc_message_limit() * 4 / 3, "room for base64");

    for (text, expected) in [
        ("max_request_bytes = 10", "[limits] max_request_bytes = 10 is out of range; allowed is 1024 to 67108864"),
        ("max_client_connections = 0", "[limits] max_client_connections = 0 is out of range; allowed is 1 to 10000000"),
        ("max_concurrent_streams = 0", "[limits] max_concurrent_streams = 0 is out of range"),
        ("max_watchers_per_stream = 0", "[limits] max_watchers_per_stream = 0 is out of range"),
        ("max_leases = 0", "[limits] max_leases = 0 is out of range; allowed is 1 to 100000000"),
        ("max_concurrent_streams = -1", "invalid value"),
    ] {
        let message = error_of(&format!("id = 1\n[limits]\n{text}\n"));
        assert!(message.contains(expected), "{text}: {message}");
    }
}

/// The read limits: the largest answer (etcd's gRPC send limit by default; at least one key
/// of the largest value) and the read memory budget.
#[test]
fn the_response_limit_and_the_read_budget_are_checked_saying_what_is_allowed() {
    let config = parse("id = 1\n").expect("defaults");
    assert_eq!(config.limits().max_response_bytes, 2_147_483_647, "etcd's math.MaxInt32");
    assert_eq!(config.reads.memory_budget_bytes, 1 << 30);
    let config = parse("id = 1\n[limits]\nmax_response_bytes = 4194304\n[reads]\nmemory_budget_bytes = 134217728\n")
        .expect("both set");
    assert_eq!((config.limits().max_response_bytes, config.reads.memory_budget_bytes), (4 << 20, 128 << 20));
    for (text, expected) in [
        (
            "[limits]\nmax_response_bytes = 1000",
            "[limits] max_response_bytes = 1000 is out of range; allowed is 1575424 (a key of the largest value",
        ),
        ("[limits]\nmax_response_bytes = 4294967296", "allowed is 1575424 (a key of the largest value, max_key_bytes + max_value_bytes, with room to spare) to 2147483647"),
        ("[limits]\nmax_value_bytes = 4194304\nmax_response_bytes = 4194304", "max_response_bytes = 4194304 is out of range; allowed is 4196864"),
        ("[reads]\nmemory_budget_bytes = 1024", "[reads] memory_budget_bytes = 1024 is too small; at least 67108864"),
    ] {
        let message = error_of(&format!("id = 1\n{text}\n"));
        assert!(message.contains(expected), "{text}: {message}");
    }
}

/// etcd's flags as given on a command line (none from the environment).
fn etcd_flags(flags: &[(&'static str, &str)]) -> Overrides {
    let given = flags.iter().map(|(f, v)| (*f, v.to_string()));
    Overrides { etcd: EtcdSettings::gather(given, Vec::new()).expect("known flags"), ..Overrides::default() }
}

const GUIDE_INFRA1: &[(&str, &str)] = &[
    ("name", "infra1"),
    ("initial-advertise-peer-urls", "http://127.0.0.11:2380"),
    ("listen-peer-urls", "http://127.0.0.11:2380"),
    ("listen-client-urls", "http://127.0.0.11:2379,http://127.0.0.1:2379"),
    ("advertise-client-urls", "http://127.0.0.11:2379"),
    ("initial-cluster-token", "etcd-cluster-1"),
    ("initial-cluster", "infra0=http://127.0.0.10:2380,infra1=http://127.0.0.11:2380,infra2=http://127.0.0.12:2380"),
    ("initial-cluster-state", "new"),
];

#[test]
fn etcds_static_bootstrap_flags_make_a_member_of_three_without_a_file() {
    let config = NodeConfig::load(None, &etcd_flags(GUIDE_INFRA1)).expect("valid");
    assert_eq!((config.id, config.name.as_deref()), (NodeId(2), Some("infra1")));
    assert_eq!(config.data_dir, PathBuf::from("infra1.etcd"));
    assert_eq!(config.client_addr.to_string(), "127.0.0.11:2379");
    assert_eq!(config.client_listen_addrs().len(), 2);
    assert_eq!(config.client_urls(), vec!["http://127.0.0.11:2379".to_string()]);
    assert_eq!(config.peer_addr.to_string(), "127.0.0.11:2380");
    let peers: Vec<(u32, Option<&str>, Option<SocketAddr>)> =
        config.peers.iter().map(|p| (p.id.0, p.name.as_deref(), p.client_addr)).collect();
    assert_eq!(peers, vec![(1, Some("infra0"), None), (2, Some("infra1"), None), (3, Some("infra2"), None)]);
    // Every member derives the same cluster id; another token gives another.
    let infra0 = [("name", "infra0"), ("listen-peer-urls", "http://127.0.0.10:2380")];
    let other = NodeConfig::load(None, &etcd_flags(&[&GUIDE_INFRA1[2..], &infra0[..]].concat())).expect("valid");
    assert_eq!(other.id, NodeId(1));
    assert_eq!(other.cluster_id, config.cluster_id);
    let retokened = [&GUIDE_INFRA1[..5], &[("initial-cluster-token", "another")][..], &GUIDE_INFRA1[6..]].concat();
    assert_ne!(NodeConfig::load(None, &etcd_flags(&retokened)).expect("valid").cluster_id, config.cluster_id);
}

#[test]
fn etcd_variables_alone_configure_a_node_and_flags_win_over_them_and_over_the_file() {
    let env = [
        ("ETCD_NAME", "infra2"),
        ("ETCD_INITIAL_CLUSTER", "infra0=http://127.0.0.10:2380,infra2=http://127.0.0.12:2380"),
    ];
    let settings = EtcdSettings::gather(Vec::new(), env.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .expect("known variables");
    let config = NodeConfig::load(None, &Overrides { etcd: settings.clone(), ..Overrides::default() }).expect("valid");
    assert_eq!((config.id, config.peer_addr.to_string()), (NodeId(2), "127.0.0.12:2380".to_string()));

    let variable = || vec![("ETCD_DATA_DIR".to_string(), "/env".to_string())];
    let flags = EtcdSettings::gather(vec![("data-dir", "/flag".to_string())], variable()).expect("known");
    let text = "id = 1\ndata_dir = \"/file\"\n";
    let config =
        NodeConfig::from_toml_str(text, origin(), &Overrides { etcd: flags, ..Overrides::default() }).expect("valid");
    assert_eq!(config.data_dir, PathBuf::from("/flag"));
    let env_only = EtcdSettings::gather(Vec::new(), variable()).expect("known");
    let config = NodeConfig::from_toml_str(text, origin(), &Overrides { etcd: env_only, ..Overrides::default() })
        .expect("valid");
    assert_eq!(config.data_dir, PathBuf::from("/env"));
}

#[test]
fn etcds_own_checks_of_the_initial_cluster_hold() {
    let missing = NodeConfig::load(None, &etcd_flags(&[("name", "infra9"), GUIDE_INFRA1[6]])).expect_err("not listed");
    assert_eq!(
        missing.to_string(),
        "--initial-cluster does not list this member's name \"infra9\"; list it (NAME=PEER_URL), or give the --name it has there"
    );
    let mismatch = NodeConfig::load(
        None,
        &etcd_flags(&[("name", "infra1"), ("initial-advertise-peer-urls", "http://127.0.0.99:2380"), GUIDE_INFRA1[6]]),
    )
    .expect_err("another URL");
    assert!(mismatch.to_string().contains("infra1=http://127.0.0.11:2380"), "{mismatch}");
    // A joining member takes its id from the cluster, not from its place in the list.
    let joining = NodeConfig::load(
        None,
        &etcd_flags(&[("name", "infra1"), GUIDE_INFRA1[6], ("initial-cluster-state", "existing")]),
    )
    .expect("valid");
    assert_eq!(joining.id, NodeId(0));
    assert_eq!(joining.peer_addr.to_string(), "127.0.0.11:2380");
}

#[test]
fn etcds_name_alone_makes_a_cluster_of_this_member_with_etcds_data_dir() {
    let config = NodeConfig::load(None, &etcd_flags(&[("name", "solo")])).expect("valid");
    assert_eq!((config.id, config.name.as_deref()), (NodeId(1), Some("solo")));
    assert_eq!(config.data_dir, PathBuf::from("solo.etcd"));
    assert_eq!(config.peers.len(), 1);
    assert_eq!(config.client_addr, DEFAULT_CLIENT_ADDR);
}

#[test]
fn etcds_default_data_dir_yields_to_the_files() {
    let text = "id = 1\ndata_dir = \"/var/lib/leasekv\"\n";
    let config = NodeConfig::from_toml_str(text, origin(), &etcd_flags(&[("name", "infra0")])).expect("valid");
    assert_eq!(config.data_dir, PathBuf::from("/var/lib/leasekv"));
    let config = NodeConfig::from_toml_str("id = 1\n", origin(), &etcd_flags(&[("name", "infra0")])).expect("valid");
    assert_eq!(config.data_dir, PathBuf::from("infra0.etcd"));
}

#[test]
fn read_leases_are_on_by_default_for_a_quarter_of_the_lease_time_and_can_be_turned_off() {
    let config = parse("id = 1\n[election]\nlease_time_ms = 800\n").expect("valid");
    assert!(config.reads.leases && !config.reads.learners);
    assert_eq!(config.reads.lease_time, Duration::from_millis(200));
    let reads = config.replica_config().read_leases.expect("on");
    assert_eq!((reads.lease_time, reads.drift_bound, reads.learners), (Duration::from_millis(200), 0.01, false));
    let off = parse("id = 1\n[reads]\nleases = false\n").expect("valid");
    let reads = off.replica_config().read_leases.expect("kept, to wait out an earlier master's after a takeover");
    assert!(!reads.grant);
    let tuned = parse("id = 1\n[reads]\nlease_time_ms = 500\nlearners = true\n").expect("valid");
    let reads = tuned.replica_config().read_leases.expect("on");
    assert_eq!((reads.lease_time, reads.learners), (Duration::from_millis(500), true));
    for bad in ["lease_time_ms = 5", "lease_time_ms = 199", "lease_time_ms = 1001"] {
        let message = error_of(&format!("id = 1\n[reads]\n{bad}\n"));
        assert!(message.contains("[reads] lease_time_ms") && message.contains("at least 200"), "{message}");
    }
    let message = error_of("id = 1\n[reads]\nleases = \"yes\"\n");
    assert!(message.contains("invalid type") && message.contains(":3:"), "{message}");
}

#[test]
fn the_console_is_on_by_default_and_can_be_made_read_only_or_turned_off() {
    use crate::config::ConsoleMode;
    assert_eq!(parse("id = 1\n").expect("valid").console, ConsoleMode::On);
    assert_eq!(NodeConfig::builtin().console, ConsoleMode::On);
    for (text, mode) in [("on", ConsoleMode::On), ("read-only", ConsoleMode::ReadOnly), ("off", ConsoleMode::Off)] {
        let config = parse(&format!("id = 1\n[console]\nmode = \"{text}\"\n")).expect("valid");
        assert_eq!(config.console, mode);
    }
    let message = error_of("id = 1\n[console]\nmode = \"readonly\"\n");
    assert!(message.contains("unknown variant `readonly`") && message.contains("read-only"), "{message}");
    assert!(message.contains(":3:"), "the line is named: {message}");
}
