//! `kvcli member`: etcd's MemberList, MemberAdd, MemberPromote, MemberRemove and
//! MemberUpdate, printed as etcdctl prints them (member ids in hex, as etcdctl shows and
//! takes them).

use crate::output::OutputFormat;
use anyhow::{Context, Result};
use clap::Subcommand;
use leasekv::client::proto::etcdserverpb::Member;
use leasekv::client::Client;

/// `kvcli member ...`.
#[derive(Debug, Subcommand)]
pub enum MemberCommand {
    /// List the members: ID, started or unstarted, name, peer URLs, client URLs, learner.
    List,
    /// Add a member; then start it with `initial_cluster_state = "existing"`.
    Add {
        /// The new member's name (it publishes its own name when it starts; shown here only).
        name: String,
        /// Where peers reach it, comma separated `http://host:port` URLs.
        #[arg(long = "peer-urls", required = true)]
        peer_urls: String,
        /// Add it as a learner: it catches up without voting, then `member promote` it.
        #[arg(long)]
        learner: bool,
    },
    /// Make a learner that caught up a voter.
    Promote {
        /// The member's id in hex, as `member list` shows it.
        id: String,
    },
    /// Remove a member.
    Remove {
        /// The member's id in hex, as `member list` shows it.
        id: String,
    },
    /// Change a member's peer URLs.
    Update {
        /// The member's id in hex, as `member list` shows it.
        id: String,
        /// Its new peer URLs, comma separated.
        #[arg(long = "peer-urls", required = true)]
        peer_urls: String,
    },
}

/// A member id as etcdctl takes it: hexadecimal.
fn parse_id(id: &str) -> Result<u64> {
    u64::from_str_radix(id.trim_start_matches("0x"), 16)
        .with_context(|| format!("bad member ID {id:?}: expected hex, as `member list` shows it"))
}

fn urls(list: &str) -> Vec<String> {
    list.split(',').map(str::trim).filter(|u| !u.is_empty()).map(String::from).collect()
}

/// One line of `member list`, as etcdctl's simple format.
fn line(m: &Member) -> String {
    let started = if m.name.is_empty() { "unstarted" } else { "started" };
    format!(
        "{:x}, {started}, {}, {}, {}, {}",
        m.id,
        m.name,
        m.peer_urls.join(","),
        m.client_urls.join(","),
        m.is_learner
    )
}

fn json_member(m: &Member) -> serde_json::Value {
    serde_json::json!({
        "ID": m.id,
        "name": m.name,
        "peerURLs": m.peer_urls,
        "clientURLs": m.client_urls,
        "isLearner": m.is_learner,
    })
}

/// Runs one `member` subcommand.
pub async fn run(client: &Client, format: OutputFormat, command: MemberCommand) -> Result<()> {
    match command {
        MemberCommand::List => {
            let list = client.member_list().await?;
            if matches!(format, OutputFormat::Json) {
                let members: Vec<_> = list.members.iter().map(json_member).collect();
                println!("{}", serde_json::json!({ "members": members }));
            } else {
                for m in &list.members {
                    println!("{}", line(m));
                }
            }
        }
        MemberCommand::Add { name, peer_urls, learner } => {
            let peer_urls = urls(&peer_urls);
            let added = client.member_add(peer_urls.clone(), learner).await?;
            let cluster = added.header.map_or(0, |h| h.cluster_id);
            let id = added.member.as_ref().map_or(0, |m| m.id);
            let kind = if learner { "Learner" } else { "Member" };
            println!("{kind} {id:x} added to cluster {cluster:x}");
            println!();
            println!("# in the new member's configuration file (see examples/cluster/n4.toml):");
            println!("id = {id}   # {name}");
            println!(
                "peer_addr = \"{}\"",
                peer_urls.first().map_or("", |u| u.trim_start_matches("http://").trim_start_matches("https://"))
            );
            println!("initial_cluster_state = \"existing\"");
        }
        MemberCommand::Promote { id } => {
            let id = parse_id(&id)?;
            let answer = client.member_promote(id).await?;
            println!("Member {id:x} promoted in cluster {:x}", answer.header.map_or(0, |h| h.cluster_id));
        }
        MemberCommand::Remove { id } => {
            let id = parse_id(&id)?;
            let answer = client.member_remove(id).await?;
            println!("Member {id:x} removed from cluster {:x}", answer.header.map_or(0, |h| h.cluster_id));
        }
        MemberCommand::Update { id, peer_urls } => {
            let id = parse_id(&id)?;
            let answer = client.member_update(id, urls(&peer_urls)).await?;
            println!("Member {id:x} updated in cluster {:x}", answer.header.map_or(0, |h| h.cluster_id));
        }
    }
    Ok(())
}
