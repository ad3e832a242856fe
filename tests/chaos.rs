//! The chaos harness (`src/bin/chaos`) in CI: every fault class at least once on a 3-node
//! cluster of real kvserver processes (both election backends) and of etcd, and every
//! negative control caught (four control runs at a time, the etcd run beside the second
//! wave). About five minutes in all.
//!
//! Needs root (network namespaces and FUSE mounts), `/dev/fuse`, `ip` (iproute2), `nft` (nftables) and, for the etcd
//! run, `etcd` (etcd-server). Without them the tests are skipped with a note, except under
//! `CI=true`, where they fail. `CHAOS_SEED` fixes the seeds; by default each run takes a new
//! one and prints it, and a failure keeps the run's logs and history (the path is printed).

mod common;

use std::process::Command;
use std::sync::Mutex;

/// One chaos run at a time: they share the machine's two cores and its namespaces' names.
static SERIAL: Mutex<()> = Mutex::new(());

/// Whether this process may create network namespaces and has the tools the harness runs.
/// Missing under `CI=true` is a failure.
fn can_run(needs_etcd: bool) -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false);
    if !root {
        assert!(!common::in_ci(), "the chaos tests need root under CI=true (network namespaces)");
        eprintln!("skipped: the chaos tests need root (network namespaces)");
        return false;
    }
    let mut tools = vec![("ip", "iproute2"), ("nft", "nftables")];
    if needs_etcd {
        tools.push(("etcd", "etcd-server"));
    }
    for (name, package) in tools {
        if common::tool(name, package).is_none() {
            eprintln!("skipped: {name} is not installed (Debian package {package})");
            return false;
        }
    }
    // The power-loss class mounts a FUSE file system (the lazy disk) under each node.
    if !std::path::Path::new("/dev/fuse").exists() {
        assert!(!common::in_ci(), "the chaos tests need /dev/fuse under CI=true (the power-loss fault's lazy disks)");
        eprintln!("skipped: /dev/fuse is missing (the power-loss fault's lazy disks)");
        return false;
    }
    true
}

/// The seed of a run: `CHAOS_SEED`, else new each time.
fn seed() -> String {
    std::env::var("CHAOS_SEED").unwrap_or_else(|_| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos());
        (nanos as u64).to_string()
    })
}

/// Runs the harness with `args` and returns its exit code and output; the output is
/// echoed so that a failing test shows the run's table and anomalies.
fn chaos(args: &[&str]) -> (i32, String) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    chaos_beside_others(args)
}

/// [`chaos`] for a caller that holds [`SERIAL`] (and may run several of these at once).
fn chaos_beside_others(args: &[&str]) -> (i32, String) {
    let seed = seed();
    let mut command = Command::new(env!("CARGO_BIN_EXE_chaos"));
    command.args(args).args(["--seed", &seed]);
    if !args.contains(&"etcd") {
        command.args(["--program", env!("CARGO_BIN_EXE_kvserver")]);
    }
    eprintln!("running chaos {} --seed {seed}", args.join(" "));
    let output = command.output().expect("the chaos binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}\n{stderr}");
    if let Some(dir) = kept_dir(&stderr) {
        LAST_RUN_DIRS.lock().unwrap_or_else(|e| e.into_inner()).push((args.join(" "), dir));
    }
    (output.status.code().unwrap_or(-1), stdout)
}

/// The directory a chaos run kept its nodes' data and logs in, as it says on its last
/// words: the binary removes it when a run passes and keeps it when it finds an anomaly,
/// so that a failure can be looked at.
fn kept_dir(stderr: &str) -> Option<std::path::PathBuf> {
    let line = stderr.lines().rev().find(|line| line.contains(" are kept in "))?;
    let (_, dir) = line.rsplit_once(" are kept in ")?;
    Some(std::path::PathBuf::from(dir.trim()))
}

/// The directories of the runs started so far, by their arguments.
static LAST_RUN_DIRS: Mutex<Vec<(String, std::path::PathBuf)>> = Mutex::new(Vec::new());

/// Removes what the run with `args` kept: a negative control's anomalies are expected, and
/// twelve runs' data dirs a CI run were left in the temp dir.
fn discard_run_dir(args: &[&str]) {
    let args = args.join(" ");
    let mut dirs = LAST_RUN_DIRS.lock().unwrap_or_else(|e| e.into_inner());
    dirs.retain(|(run, dir)| {
        if *run == args {
            let _ = std::fs::remove_dir_all(dir);
        }
        *run != args
    });
}

/// Asserts a run passed: exit 0 and a last line with no anomaly and no lost write.
fn assert_passed(args: &[&str]) {
    let (code, stdout) = chaos(args);
    let last = stdout.lines().last().unwrap_or("");
    assert!(
        code == 0 && last.contains(" lost=0 ") && last.ends_with(" anomalies=0"),
        "chaos {} failed (exit {code}): {last}",
        args.join(" ")
    );
}

/// [`assert_passed`] for etcd, but for a master change during the read storm (an
/// availability target of leasekv's, see below) and etcd 3.4's known lease bug: a leader stuck (paused,
/// or blocked on its disk) goes on renewing keepalives and revoking leases after the others
/// elected a new one (etcd-io/etcd#12528 and #15247, fixed by #16822 in releases later than
/// Debian's 3.4.23). The harness sees it as a key gone earlier than its TTL after an
/// acknowledged keepalive, now and then under pause-master (seen once in CI). The etcd run
/// validates the harness rather than examines etcd, so that anomaly is printed and let
/// through; any other anomaly, or a lost write, fails as for leasekv.
fn assert_passed_on_etcd(args: &[&str], code: i32, stdout: &str) {
    let last = stdout.lines().last().unwrap_or("");
    let counted = last.rsplit_once(" anomalies=").and_then(|(_, n)| n.parse::<usize>().ok());
    let anomalies: Vec<&str> = stdout.lines().filter_map(|line| line.strip_prefix("anomaly: ")).collect();
    let etcds_lease_bug = |a: &&str| a.contains(" seen gone ") && a.ends_with("earlier than TTL/(1+ε)");
    // Availability, not safety: leasekv must keep its master through a read storm (the
    // reads issue), etcd 3.4 need not. Once in CI, beside four negative-control clusters,
    // etcd's term went from 3 to 11 during the storm (one of its members had exited by
    // itself earlier in the run).
    let etcds_storm_elections = |a: &&str| a.starts_with("the read storm alone cost a master change");
    let known = |a: &&str| etcds_lease_bug(a) || etcds_storm_elections(a);
    let clean = code == 0 && counted == Some(0);
    // Every anomaly printed (at most 20 are) and each of them a known one.
    let only_the_known_bug =
        code == 1 && counted == Some(anomalies.len()) && !anomalies.is_empty() && anomalies.iter().all(known);
    assert!(
        last.contains(" lost=0 ") && (clean || only_the_known_bug),
        "chaos {} failed (exit {code}): {last}",
        args.join(" ")
    );
    if only_the_known_bug {
        eprintln!(
            "note: etcd showed {} known anomalies (a lease renewed or revoked on a stale leader, etcd 3.4's bug; \
             a master change in the read storm); not a harness failure",
            anomalies.len()
        );
    }
}

#[test]
fn every_fault_class_on_leasekv_with_paxoslease() {
    if can_run(false) {
        assert_passed(&["--nodes", "3", "--duration", "25", "--faults", "all", "--backend", "paxoslease"]);
    }
}

/// The tracker is a single point of failure: its faults show as unavailability, never as
/// an anomaly. The faults that reach the election (the master's and the tracker's node
/// stopped, cut off, restarted or slowed, and a read storm); the others act on the log and
/// the storage, which the two backends share and the PaxosLease run covers.
///
/// Not in the default run: the tracker is the comparison backend, its run took 51 s of a
/// CI run that must stay under 30 minutes (it was 31.4), and its election is covered by
/// `lease/tests/integration/backend.rs` on every backend. Run it with
/// `cargo test --all-features --test chaos -- --ignored` (as root).
#[test]
#[ignore = "the comparison backend's chaos run, on demand: cargo test --all-features --test chaos -- --ignored"]
fn the_election_faults_on_leasekv_with_the_lease_tracker() {
    if can_run(false) {
        let faults =
            "kill-master,kill-all,pause-master,isolate-master,split-majority,clock-skew,slow-cpu,power-loss,read-storm";
        assert_passed(&["--nodes", "3", "--duration", "12", "--faults", faults, "--backend", "lease-tracker"]);
    }
}

/// The same workload and faults against etcd: validates the harness (minus the white-box
/// lease log, the clock and the sync failpoint, which apply to leasekv only). Without the
/// faults that need leasekv's test build (its clock and its storage's sync failpoint). Run
/// beside the negative controls ([`every_negative_control_is_caught_and_etcd_passes_every_fault_class`]): both only wait on
/// their clusters most of the time, and one after the other they took 90 s more of CI.
const ETCD_RUN: &[&str] = &[
    "--nodes",
    "3",
    "--duration",
    "25",
    "--faults",
    "kill-master,kill-majority,kill-all,pause-master,isolate-master,split-majority,bridge,one-way,slow-cpu,disk-full,slow-links,lossy-links,power-loss,isolate-follower,pause-follower,read-storm",
    "--target",
    "etcd",
];

/// Each negative control, with the fault that exposes it, must be caught by a safety check
/// (a linearizability violation, a lost write, overlapping master leases, a watcher's
/// events that differ from the history or a transaction's writes at two revisions), not
/// merely by a missing verdict or a slow convergence.
///
/// [`CONTROLS_AT_ONCE`] runs at a time: a run of three nodes kept a fifth of the two cores
/// busy (eight runs one after another: 270 s of wall time, 97 s of CPU), and each run has
/// its own namespaces (named after its process id). A busier machine can hide a control's
/// window (seen once: `ack-before-fsync`), so a control missed beside the others runs once
/// more alone; missed twice, the test fails.
///
/// The etcd run ([`ETCD_RUN`]) goes beside the second wave, and must pass. Not beside the
/// first: its faults include `slow-cpu`, and under it `read-lease-expired` (which needs
/// reads to reach an isolated follower after its lease ran out) went uncaught once in CI
/// with 4 controls beside it (caught alone at the same seed, and at three others, 10-12
/// anomalies each). The controls of the second wave were each caught with etcd beside.
#[test]
fn every_negative_control_is_caught_and_etcd_passes_every_fault_class() {
    if !can_run(true) {
        return;
    }
    let controls = [
        ("read-lease-expired", "isolate-follower"),
        ("follower-reads", "isolate-master"),
        ("stale-lease-check", "pause-master"),
        ("fast-clock", "clock-skew"),
        ("ack-before-fsync", "power-loss"),
        ("watch-resume-gap", "kill-master"),
        ("skip-fdatasync", "power-loss"),
        ("split-txn", "kill-master"),
    ];
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut etcd = None;
    let mut missed: Vec<(&str, &str, i32)> = Vec::new();
    for (index, wave) in controls.chunks(CONTROLS_AT_ONCE).enumerate() {
        if index == 1 {
            etcd = Some(std::thread::spawn(|| chaos_beside_others(ETCD_RUN)));
        }
        let runs: Vec<_> = wave
            .iter()
            .map(|&(control, faults)| {
                let handle = std::thread::spawn(move || chaos_beside_others(&control_args(control, faults)));
                (control, faults, handle)
            })
            .collect();
        for (control, faults, handle) in runs {
            let (code, stdout) = handle.join().unwrap_or_else(|_| (-1, String::new()));
            if code == 1 && caught(&stdout) {
                discard_run_dir(&control_args(control, faults));
            } else {
                missed.push((control, faults, code));
            }
        }
    }
    let etcd = etcd.unwrap_or_else(|| std::thread::spawn(|| chaos_beside_others(ETCD_RUN)));
    let (code, stdout) = etcd.join().unwrap_or_else(|_| (-1, String::new()));
    // A control missed beside the others runs once more, alone (after the etcd run): `ack-before-fsync` went
    // uncaught once in CI beside three controls and etcd (0 anomalies at its seed there),
    // and was caught alone at that seed (26 anomalies). The check must still catch it.
    let missed: Vec<String> = missed
        .into_iter()
        .filter(|&(control, faults, _)| {
            let (code, stdout) = chaos_beside_others(&control_args(control, faults));
            let caught_alone = code == 1 && caught(&stdout);
            if caught_alone {
                discard_run_dir(&control_args(control, faults));
            }
            !caught_alone
        })
        .map(|(control, _, code)| format!("{control} (exit {code} beside the others, and missed alone too)"))
        .collect();
    assert!(missed.is_empty(), "negative controls not caught: {}", missed.join(", "));
    assert_passed_on_etcd(ETCD_RUN, code, &stdout);
}

/// Whether a control's run was caught by a safety check (not merely by a missing verdict
/// or a slow convergence).
fn caught(stdout: &str) -> bool {
    stdout.lines().any(|l| {
        l.starts_with("anomaly: not linearizable")
            || l.starts_with("anomaly: lost write")
            || l.starts_with("anomaly: master leases overlap")
            || (l.starts_with("anomaly: watcher") && l.contains("committed between revisions"))
            || l.starts_with("anomaly: txn not atomic")
    })
}

/// The arguments of the run of negative control `control` under `faults`.
fn control_args(control: &'static str, faults: &'static str) -> [&'static str; 8] {
    ["--nodes", "3", "--duration", "12", "--faults", faults, "--break", control]
}

/// Negative-control runs at once (see [`every_negative_control_is_caught_and_etcd_passes_every_fault_class`]).
const CONTROLS_AT_ONCE: usize = 4;
