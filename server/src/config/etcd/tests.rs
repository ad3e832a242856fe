use super::*;
use std::time::Duration;

fn flags(list: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    list.iter().map(|(f, v)| (*f, v.to_string())).collect()
}

fn env(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn layer(flag_list: &[(&'static str, &str)]) -> Result<EtcdLayer, EtcdError> {
    EtcdLayer::of(&EtcdSettings::gather(flags(flag_list), Vec::new())?)
}

/// The command line of infra0 in etcd's clustering guide ("Static"), on loopback.
const GUIDE: &[(&str, &str)] = &[
    ("name", "infra0"),
    ("initial-advertise-peer-urls", "http://127.0.0.10:2380"),
    ("listen-peer-urls", "http://127.0.0.10:2380"),
    ("listen-client-urls", "http://127.0.0.10:2379,http://127.0.0.1:2379"),
    ("advertise-client-urls", "http://127.0.0.10:2379"),
    ("initial-cluster-token", "etcd-cluster-1"),
    ("initial-cluster", "infra0=http://127.0.0.10:2380,infra1=http://127.0.0.11:2380,infra2=http://127.0.0.12:2380"),
    ("initial-cluster-state", "new"),
];

#[test]
fn the_clustering_guides_static_command_line_translates_with_etcds_meaning() {
    let layer = layer(GUIDE).expect("the guide's flags");
    assert_eq!(layer.name.as_deref(), Some("infra0"));
    assert_eq!(layer.data_dir, None);
    assert_eq!(layer.default_data_dir, Some(PathBuf::from("infra0.etcd")), "etcd's default data dir");
    let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
    assert_eq!(layer.client_addrs, vec![addr("127.0.0.10:2379"), addr("127.0.0.1:2379")]);
    assert_eq!(layer.advertise_client_urls, vec!["http://127.0.0.10:2379".to_string()]);
    assert_eq!(layer.peer_addr, Some(addr("127.0.0.10:2380")));
    assert_eq!(layer.advertise_peer_addr, Some(addr("127.0.0.10:2380")));
    assert_eq!(layer.cluster_state, Some(ClusterState::New));
    assert_eq!(layer.cluster_token.as_deref(), Some("etcd-cluster-1"));
    let ids: Vec<(u32, &str)> = layer.initial_cluster_ids().iter().map(|(id, m)| (*id, m.name.as_str())).collect();
    assert_eq!(ids, vec![(1, "infra0"), (2, "infra1"), (3, "infra2")]);
    assert_eq!(layer.me_in_initial_cluster().map(|(id, _)| id), Some(1));
    assert!(layer.warnings.is_empty(), "{:?}", layer.warnings);
}

#[test]
fn ids_follow_the_names_not_the_order_of_the_list() {
    let a =
        layer(&[("name", "b"), ("initial-cluster", "a=http://127.0.0.1:1,b=http://127.0.0.1:2,c=http://127.0.0.1:3")]);
    let b =
        layer(&[("name", "b"), ("initial-cluster", "c=http://127.0.0.1:3,b=http://127.0.0.1:2,a=http://127.0.0.1:1")]);
    let id = |l: Result<EtcdLayer, EtcdError>| l.expect("valid").me_in_initial_cluster().map(|(id, _)| id);
    assert_eq!(id(a), Some(2));
    assert_eq!(id(b), Some(2));
}

#[test]
fn a_flag_wins_over_its_variable_and_variables_alone_work() {
    let settings = EtcdSettings::gather(
        flags(&[("name", "from-flag")]),
        env(&[("ETCD_NAME", "from-env"), ("ETCD_DATA_DIR", "/var/lib/etcd"), ("PATH", "/bin")]),
    )
    .expect("valid");
    let layer = EtcdLayer::of(&settings).expect("valid");
    assert_eq!(layer.name.as_deref(), Some("from-flag"));
    assert_eq!(layer.data_dir, Some(PathBuf::from("/var/lib/etcd")));
    assert_eq!(settings.get("data-dir").map(|g| g.from_env), Some(true));
}

#[test]
fn raft_timing_is_ignored_with_a_warning_and_unsupported_flags_are_refused_by_name() {
    let args = [
        "kvserver",
        "--name",
        "n",
        "--heartbeat-interval",
        "100",
        "--election-timeout=1000",
        "--pre-vote",
        "--data-dir",
        "d",
    ]
    .map(OsString::from)
    .to_vec();
    let (kept, warnings) = sift_args(args).expect("ignored, not refused");
    assert_eq!(kept, ["kvserver", "--name", "n", "--data-dir", "d"].map(OsString::from).to_vec());
    assert_eq!(warnings.len(), 3);
    assert!(warnings[0].starts_with("--heartbeat-interval is ignored: a timing knob of Raft"), "{warnings:?}");

    let refused = sift_args(["kvserver", "--discovery=https://discovery.etcd.io/x"].map(OsString::from).to_vec())
        .expect_err("discovery");
    assert_eq!(
        refused.to_string(),
        "--discovery: etcd's --discovery is not supported by leasekv: leasekv has no discovery service; list the members with --initial-cluster"
    );
    let refused = EtcdSettings::gather(Vec::new(), env(&[("ETCD_PROXY", "on")])).expect_err("proxy");
    assert!(refused.to_string().starts_with("ETCD_PROXY: etcd's --proxy is not supported"), "{refused}");
    let warned = EtcdSettings::gather(Vec::new(), env(&[("ETCD_SNAPSHOT_COUNT", "5"), ("ETCD_NO_SUCH", "1")]))
        .expect("warnings only");
    assert_eq!(warned.warnings.len(), 2, "{:?}", warned.warnings);
    assert!(warned.is_empty(), "nothing to apply");
}

#[test]
fn bad_values_name_the_flag_and_say_what_is_allowed() {
    let cases: Vec<(Vec<(&'static str, &str)>, &str)> = vec![
        (
            vec![("listen-client-urls", "http://127.0.0.1:2379")],
            "--listen-client-urls: --advertise-client-urls is required",
        ),
        (vec![("listen-peer-urls", "http://127.0.0.1:1,http://127.0.0.1:2")], "2 URLs given"),
        (vec![("listen-peer-urls", "127.0.0.1:2380")], "is not a URL"),
        (vec![("listen-peer-urls", "unix://127.0.0.1:2380")], "scheme \"unix\" is not supported"),
        (vec![("listen-peer-urls", "http://127.0.0.1")], "names no port"),
        (vec![("listen-peer-urls", "https://127.0.0.1:2380")], "no certificate is given"),
        (vec![("initial-cluster", "infra0")], "is not NAME=PEER_URL"),
        (vec![("initial-cluster", "a=http://127.0.0.1:1,a=http://127.0.0.1:2")], "listed twice"),
        (vec![("initial-cluster-state", "old")], "use \"new\" or \"existing\""),
        (vec![("quota-backend-bytes", "2GB")], "--quota-backend-bytes: \"2GB\" is not a whole number"),
        (vec![("cert-file", "c.pem")], "--cert-file: needs --key-file too"),
        (vec![("client-cert-auth", "true")], "needs --cert-file and --key-file"),
        (vec![("peer-cert-file", "c.pem"), ("peer-key-file", "k.pem")], "needs --peer-trusted-ca-file too"),
        (vec![("auto-compaction-mode", "hourly")], "is not a compaction mode"),
        (vec![("auto-compaction-retention", "soon")], "--auto-compaction-retention: retention = \"soon\""),
    ];
    for (given, expected) in &cases {
        let error = layer(given).expect_err(expected).to_string();
        assert!(error.contains(expected), "{given:?}: {error}");
    }
    // A port written out as the scheme's default is a port.
    let layer = layer(&[("listen-peer-urls", "http://127.0.0.1:80")]).expect("port 80");
    assert_eq!(layer.peer_addr.map(|a| a.port()), Some(80));
}

#[test]
fn auto_compaction_follows_etcd_a_bare_periodic_retention_counts_hours_and_zero_is_off() {
    let policy = |f: &[(&'static str, &str)]| layer(f).expect("valid").compaction;
    assert_eq!(
        policy(&[("auto-compaction-retention", "1")]),
        Some(CompactionPolicy::Periodic(Duration::from_secs(3600)))
    );
    assert_eq!(
        policy(&[("auto-compaction-mode", "periodic"), ("auto-compaction-retention", "30m")]),
        Some(CompactionPolicy::Periodic(Duration::from_secs(1800)))
    );
    assert_eq!(
        policy(&[("auto-compaction-mode", "revision"), ("auto-compaction-retention", "1000")]),
        Some(CompactionPolicy::Revisions(1000))
    );
    assert_eq!(
        policy(&[("auto-compaction-mode", "revision")]),
        Some(CompactionPolicy::Off),
        "etcd's default retention"
    );
    assert_eq!(policy(&[]), None, "the file's or leasekv's default");
}

#[test]
fn tls_flags_fill_both_ports() {
    let layer = layer(&[
        ("cert-file", "c.pem"),
        ("key-file", "k.pem"),
        ("trusted-ca-file", "ca.pem"),
        ("client-cert-auth", ""),
        ("peer-cert-file", "pc.pem"),
        ("peer-key-file", "pk.pem"),
        ("peer-trusted-ca-file", "ca.pem"),
        ("peer-client-cert-auth", "false"),
        ("listen-client-urls", "https://127.0.0.1:2379"),
        ("advertise-client-urls", "https://127.0.0.1:2379"),
        ("listen-peer-urls", "https://127.0.0.1:2380"),
    ])
    .expect("valid");
    let client = layer.client_tls.expect("client TLS");
    assert_eq!((client.ca, client.require_client_cert), (Some(PathBuf::from("ca.pem")), true));
    assert_eq!(layer.peer_tls.expect("peer TLS").key, PathBuf::from("pk.pem"));
    assert_eq!(layer.warnings.len(), 1, "peer certificates are always verified: {:?}", layer.warnings);
}

#[test]
fn go_flag_forms_are_taken_single_dashes_and_refused_switches_set_to_false() {
    let args = ["kvserver", "-name", "infra0", "-data-dir=d", "--enable-v2=false", "-h"].map(OsString::from).to_vec();
    let (kept, warnings) = sift_args(args).expect("nothing refused");
    assert_eq!(kept, ["kvserver", "--name", "infra0", "--data-dir=d", "-h"].map(OsString::from).to_vec());
    assert_eq!(warnings, vec!["--enable-v2=false is ignored: leasekv does not do it either".to_string()]);
    assert!(sift_args(["kvserver", "--enable-v2=true"].map(OsString::from).to_vec()).is_err());
    let settings = EtcdSettings::gather(Vec::new(), env(&[("ETCD_AUTO_TLS", "false")])).expect("false is fine");
    assert_eq!(settings.warnings.len(), 1);
    assert!(EtcdSettings::gather(Vec::new(), env(&[("ETCD_AUTO_TLS", "true")])).is_err());
}

#[test]
fn a_variable_shadowed_by_its_flag_is_reported() {
    let settings = EtcdSettings::gather(flags(&[("name", "a")]), env(&[("ETCD_NAME", "b")])).expect("valid");
    assert_eq!(settings.warnings, vec!["ETCD_NAME is shadowed by --name".to_string()]);
}

#[test]
fn initial_cluster_urls_follow_the_peer_tls_flags() {
    let plain = layer(&[("initial-cluster", "a=https://127.0.0.1:2380")]).expect_err("https without certificates");
    assert!(plain.to_string().contains("no certificate is given"), "{plain}");
    let tls = [
        ("peer-cert-file", "c"),
        ("peer-key-file", "k"),
        ("peer-trusted-ca-file", "ca"),
        ("initial-cluster", "a=http://127.0.0.1:2380"),
    ];
    assert!(layer(&tls).expect_err("http with certificates").to_string().contains("use https"));
}
