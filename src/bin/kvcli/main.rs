//! kvcli: the command line for leasekv (and, for the etcd subset, any etcd cluster).
//!
//! Exit codes: 0 success, 1 a request failed or the thing asked for was not found,
//! 2 usage errors (reported by clap).
//!
//! The code is here, under its binary, so that the client library does not depend on clap,
//! anyhow or serde_json.

mod access;
mod auth;
mod cluster;
mod elect;
mod kv;
mod lease;
mod lease_ref;
mod lock;
mod member;
mod output;
mod snapshot;
mod watch;

use anyhow::Result;
use clap::{Parser, Subcommand};
use output::OutputFormat;
use std::process::ExitCode;

/// kvcli: talk to a leasekv (or etcd) cluster.
#[derive(Debug, Parser)]
#[command(name = "kvcli", version, propagate_version = true)]
pub struct Cli {
    /// Comma-separated endpoints (host:port, http://host:port or https://host:port), tried
    /// in order.
    #[arg(long, global = true, env = "LEASEKV_ENDPOINTS", default_value = "127.0.0.1:2379")]
    pub endpoints: String,
    /// CA certificate (PEM) that signs the servers' certificates: connect over TLS.
    #[arg(long, id = "tls_cacert", global = true, env = "LEASEKV_CACERT")]
    pub cacert: Option<std::path::PathBuf>,
    /// Client certificate (PEM), for servers that verify clients (with --key).
    #[arg(long = "cert", id = "tls_cert", global = true, env = "LEASEKV_CERT")]
    pub cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    // Its own id: `key` is the positional KEY of get, put and del.
    #[arg(long = "key", id = "tls_key", global = true, env = "LEASEKV_KEY")]
    pub key: Option<std::path::PathBuf>,
    /// The user to authenticate as (etcd's auth): NAME:PASSWORD, or NAME with --password.
    // Its own id: `user` is also a subcommand and a positional of `user add`.
    #[arg(long = "user", id = "auth_user", global = true, env = "LEASEKV_USER")]
    pub user: Option<String>,
    /// The password of --user, when it is not given as NAME:PASSWORD.
    #[arg(long = "password", id = "auth_password", global = true, env = "LEASEKV_PASSWORD")]
    pub password: Option<String>,
    /// Output format.
    #[arg(short = 'w', long = "write-out", global = true, value_enum, default_value_t = OutputFormat::Simple)]
    pub write_out: OutputFormat,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// kvcli's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a key (VALUE from stdin when omitted and stdin is not a terminal).
    Put(kv::PutArgs),
    /// Read a key or a prefix.
    Get(kv::GetArgs),
    /// Delete a key or a prefix.
    Del(kv::DelArgs),
    /// Print changes to a key or a prefix as they happen, until Ctrl-C (resumes on another
    /// endpoint without losing events when its node fails).
    Watch(watch::WatchArgs),
    /// Forget the history below a revision.
    Compact(kv::CompactArgs),
    /// Hold a distributed lock while a command runs (or until Ctrl-C); prints its fencing token.
    Lock(lock::LockArgs),
    /// Campaign in an election and lead until Ctrl-C, or `--listen` to its leaders.
    Elect(elect::ElectArgs),
    /// Grant, keep alive, revoke and inspect leases.
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    /// Cluster members, master, election backend, term and revision.
    Status,
    /// List, add, promote, remove or update members (as `etcdctl member`).
    #[command(subcommand)]
    Member(member::MemberCommand),
    /// Ask the answering node to give up mastership.
    StepDown,
    /// Save a snapshot of the cluster's state, or restore one into a new member's data dir.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
    /// Compare every member's hash of its keys and history at one revision.
    Check,
    /// List or disarm alarms (NOSPACE, CORRUPT).
    #[command(subcommand)]
    Alarm(cluster::AlarmCommand),
    /// Give unused disk space back on the answering member.
    Defrag,
    /// Turn auth on or off, or show whether it is on (as `etcdctl auth`).
    #[command(subcommand)]
    Auth(auth::AuthCommand),
    /// Add, delete, list users; grant and revoke their roles (as `etcdctl user`).
    #[command(subcommand)]
    User(auth::UserCommand),
    /// Add, delete, list roles; grant and revoke their permissions (as `etcdctl role`).
    #[command(subcommand)]
    Role(auth::RoleCommand),
    /// Hand mastership to the member with this id (decimal, or hex as `member list` shows it).
    MoveMaster {
        /// The member that should be master.
        member: String,
    },
}

/// Connects and runs the command; the caller prints the error and sets the exit code. A
/// command run under `lock` passes its exit status back.
pub async fn run(cli: Cli) -> Result<Option<i32>> {
    match cli.command {
        Command::Snapshot(snapshot::SnapshotCommand::Restore(args)) => return snapshot::restore(args).map(|()| None),
        Command::Snapshot(snapshot::SnapshotCommand::Status(args)) => {
            return snapshot::status(cli.write_out, args).map(|()| None)
        }
        _ => {}
    }
    let endpoints = leasekv::client::parse_endpoint_list(&cli.endpoints)?;
    let access = access::Access {
        tls: leasekv::client::ClientTls::from_files(cli.cacert.as_deref(), cli.cert.as_deref(), cli.key.as_deref())?,
        credentials: credentials(cli.user.as_deref(), cli.password.as_deref())?,
    };
    let client = access.connect(&endpoints, Default::default()).await?;
    let format = cli.write_out;
    if let Command::Lock(args) = cli.command {
        return lock::lock(&client, args).await;
    }
    match cli.command {
        Command::Lock(_) => unreachable!("handled above"),
        Command::Elect(args) => elect::elect(&client, format, args).await,
        Command::Put(args) => kv::put(&client, format, args).await,
        Command::Get(args) => kv::get(&client, format, args).await,
        Command::Del(args) => kv::del(&client, format, args).await,
        Command::Watch(args) => watch::watch(&client, format, args).await,
        Command::Compact(args) => kv::compact(&client, format, args).await,
        Command::Lease(command) => lease::run(&client, format, command).await,
        Command::Status => cluster::status(&client, format).await,
        Command::Member(command) => member::run(&client, format, command).await,
        Command::StepDown => cluster::step_down(&client).await,
        Command::Snapshot(snapshot::SnapshotCommand::Save(args)) => snapshot::save(&client, args).await,
        Command::Snapshot(snapshot::SnapshotCommand::Restore(_) | snapshot::SnapshotCommand::Status(_)) => {
            unreachable!("handled above")
        }
        Command::Check => cluster::check(&client, &access, format).await,
        Command::Alarm(command) => cluster::alarm(&client, command).await,
        Command::Defrag => cluster::defrag(&client).await,
        Command::MoveMaster { member } => cluster::move_master(&client, &access, &member).await,
        Command::Auth(command) => auth::auth(&client, command).await,
        Command::User(command) => auth::user(&client, command).await,
        Command::Role(command) => auth::role(&client, command).await,
    }
    .map(|()| None)
}

/// `--user NAME:PASSWORD`, or `--user NAME --password PASSWORD`.
fn credentials(user: Option<&str>, password: Option<&str>) -> Result<Option<leasekv::client::Credentials>> {
    use leasekv::client::Credentials;
    match (user, password) {
        (None, None) => Ok(None),
        (None, Some(_)) => anyhow::bail!("--password needs --user NAME"),
        (Some(user), Some(password)) => {
            Ok(Some(Credentials { user: user.to_string(), password: password.to_string() }))
        }
        (Some(user), None) => Credentials::parse(user)
            .map(Some)
            .ok_or_else(|| anyhow::anyhow!("--user {user}: give the password as --user NAME:PASSWORD or --password")),
    }
}

fn main() -> ExitCode {
    let args = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("kvcli: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(code)) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            // `{:#}` puts anyhow's context chain on one line: "what we did: why it failed".
            eprintln!("kvcli: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kvcli").chain(args.iter().copied()))
    }

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn put_with_named_lease_and_ttl() {
        let cli =
            parse(&["--endpoints", "a:1,b:2", "put", "/k", "v", "--lease", "server1", "--ttl", "10", "--keep-alive"])
                .unwrap();
        assert_eq!(cli.endpoints, "a:1,b:2");
        let Command::Put(put) = cli.command else { panic!("not put") };
        assert_eq!(put.key, "/k");
        assert_eq!(put.value.as_deref(), Some("v"));
        assert_eq!(put.lease.as_deref(), Some("server1"));
        assert_eq!(put.ttl, Some(10));
        assert!(put.keep_alive);
    }

    #[test]
    fn ttl_and_keep_alive_need_a_lease() {
        assert_eq!(
            parse(&["put", "/k", "v", "--ttl", "5"]).unwrap_err().kind(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            parse(&["put", "/k", "--keep-alive"]).unwrap_err().kind(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            parse(&["put", "/k", "v", "--lease", "x", "--ttl", "0"]).unwrap_err().kind(),
            clap::error::ErrorKind::ValueValidation
        );
    }

    #[test]
    fn get_flags_and_output_format() {
        let cli = parse(&["get", "/s/", "--prefix", "--keys-only", "-w", "json"]).unwrap();
        assert_eq!(cli.write_out, OutputFormat::Json);
        let Command::Get(get) = cli.command else { panic!("not get") };
        assert!(get.prefix && get.keys_only && !get.serializable);
        assert!(parse(&["get", "/k", "-w", "yaml"]).is_err());
    }

    #[test]
    fn lease_subcommands() {
        let cli = parse(&["lease", "grant", "server1", "--ttl", "30"]).unwrap();
        assert!(
            matches!(cli.command, Command::Lease(lease::LeaseCommand::Grant { ref name, ttl: 30 }) if name == "server1")
        );
        let cli = parse(&["lease", "ttl", "0x2a", "--keys"]).unwrap();
        assert!(matches!(cli.command, Command::Lease(lease::LeaseCommand::Ttl { keys: true, .. })));
        assert!(parse(&["lease", "grant", "server1"]).is_err(), "--ttl is required");
        assert!(matches!(parse(&["lease", "list"]).unwrap().command, Command::Lease(lease::LeaseCommand::List)));
    }

    #[test]
    fn watch_lock_elect_and_history_flags() {
        let cli = parse(&["watch", "/s/", "--prefix", "--rev", "5", "--prev-kv"]).unwrap();
        assert!(matches!(cli.command, Command::Watch(ref w) if w.prefix && w.rev == Some(5) && w.prev_kv));
        let cli = parse(&["lock", "L", "--ttl", "3", "--", "sh", "-c", "echo hi"]).unwrap();
        assert!(matches!(cli.command, Command::Lock(ref l) if l.ttl == 3 && l.command == ["sh", "-c", "echo hi"]));
        assert!(matches!(parse(&["elect", "E", "--listen"]).unwrap().command, Command::Elect(ref e) if e.listen));
        assert!(parse(&["elect", "E"]).is_err(), "a proposal or --listen is required");
        assert!(parse(&["elect", "E", "p", "--listen"]).is_err());
        assert!(
            matches!(parse(&["get", "/k", "--rev", "3"]).unwrap().command, Command::Get(ref g) if g.rev == Some(3))
        );
        assert!(parse(&["compact", "0"]).is_err());
    }

    #[test]
    fn default_endpoint_and_format() {
        // The env var would override the default; this test only runs the parser on fixed args.
        let cli = parse(&["status"]).unwrap();
        assert_eq!(cli.write_out, OutputFormat::Simple);
        assert!(matches!(cli.command, Command::Status));
        assert!(matches!(parse(&["step-down"]).unwrap().command, Command::StepDown));
    }
}
