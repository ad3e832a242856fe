//! The cluster-level tests: each module starts real `kvserver` processes (and etcd, etcdctl
//! or a browser beside them) and drives them as a user would.
//!
//! One test binary rather than one per file: each binary links the whole server, and
//! eighteen of them took about a third of CI's build. The chaos runs stay a binary of their
//! own (`tests/chaos.rs`): they need the fault-injection build and run one at a time.
//! `cargo test --test integration <module>::` runs one module's tests.

#[path = "../common/mod.rs"]
mod common;

mod against_etcd;
mod auth;
mod authority;
mod cluster;
mod console;
mod disk_full;
mod etcd_export;
mod etcd_flags;
mod etcd_import;
mod etcdctl_conformance;
mod gateway;
mod lock_election;
mod make_mirror;
mod membership;
mod operations;
mod overload;
mod reads;
mod rolling_upgrade;
mod rpcs_against_etcd;
mod tls;
mod upgrade;
