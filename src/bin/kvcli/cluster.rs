//! `status` and `step-down`.

use super::access::Access;
use super::output::{self, OutputFormat, StatusReport};
use anyhow::Result;
use leasekv::client::{Client, EtcdError};
use tonic::Code;

/// Runs `status`: etcd's MemberList and Status, plus the election view when the server has
/// the leasekv extension (plain etcd does not; its fields are then shown as `-`).
pub async fn status(client: &Client, format: OutputFormat) -> Result<()> {
    let members = client.member_list().await?;
    let status = client.status().await?;
    let header = status.header.unwrap_or_default();
    let mut report = StatusReport {
        endpoint: client.current_endpoint().to_string(),
        members: members.members,
        member_id: header.member_id,
        master_id: status.leader,
        version: status.version,
        revision: header.revision,
        ..Default::default()
    };
    match client.election_status().await {
        Ok(election) => {
            report.backend = Some(election.backend);
            report.term = election.term.map(|t| format!("{}.{}.{}", t.counter, t.epoch, t.node));
            report.is_master = Some(election.is_master);
        }
        Err(e) if e.code() == Some(Code::Unimplemented) => {
            report.term = Some(status.raft_term.to_string());
        }
        Err(e) => return Err(e.into()),
    }
    print!("{}", output::status(format, &report));
    Ok(())
}

/// `kvcli alarm ...`.
#[derive(Debug, clap::Subcommand)]
pub enum AlarmCommand {
    /// Every raised alarm, one per line (`memberID:1 alarm:NOSPACE`, as etcdctl prints them).
    List,
    /// Disarm every raised alarm (free space first: NOSPACE comes back while its cause is there).
    Disarm,
}

/// Runs `alarm list|disarm`.
pub async fn alarm(client: &Client, command: AlarmCommand) -> Result<()> {
    let alarms = match command {
        AlarmCommand::List => client.alarm_list().await?,
        AlarmCommand::Disarm => client.alarm_disarm_all().await?,
    };
    for alarm in alarms {
        let name = leasekv::client::proto::etcdserverpb::AlarmType::try_from(alarm.alarm)
            .map_or_else(|_| alarm.alarm.to_string(), |t| t.as_str_name().to_string());
        println!("memberID:{} alarm:{name}", alarm.member_id);
    }
    Ok(())
}

/// Runs `defrag`.
pub async fn defrag(client: &Client) -> Result<()> {
    client.defragment().await?;
    println!("Finished defragmenting {}", client.current_endpoint());
    Ok(())
}

/// Runs `move-master MEMBER`: asks the master (found through the answering member's
/// status) to hand mastership over, and waits for it.
pub async fn move_master(client: &Client, access: &Access, member: &str) -> Result<()> {
    let members = client.member_list().await?.members;
    let target = members
        .iter()
        .find(|m| m.id.to_string() == member || format!("{:x}", m.id) == member.to_lowercase() || m.name == member)
        .ok_or_else(|| anyhow::anyhow!("no member {member}; members are {}", member_names(&members)))?;
    let master_id = client.status().await?.leader;
    let master = members
        .iter()
        .find(|m| m.id == master_id)
        .ok_or_else(|| anyhow::anyhow!("no master is known right now; try again in a moment"))?;
    let endpoint = master.client_urls.first().cloned().unwrap_or_default();
    let on_master = access.connect(&[endpoint], Default::default()).await?;
    let started = std::time::Instant::now();
    if let Err(error) = on_master.move_leader(target.id).await {
        // etcd's answer when the target has not taken over within the server's wait; the
        // hand-over may still complete (a loaded member), so look before calling it failed.
        if error.etcd_error() != Some(EtcdError::LeaderTransferTimeout) || !became_master(client, target.id).await {
            return Err(error.into());
        }
    }
    println!("Mastership moved from {:x} to {:x} in {} ms", master.id, target.id, started.elapsed().as_millis());
    Ok(())
}

/// Whether `target` is master within a few more seconds (bounded polling).
async fn became_master(client: &Client, target: u64) -> bool {
    for _ in 0..50 {
        if client.status().await.is_ok_and(|status| status.leader == target) {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}

fn member_names(members: &[leasekv::client::proto::etcdserverpb::Member]) -> String {
    members.iter().map(|m| format!("{:x} ({})", m.id, m.name)).collect::<Vec<_>>().join(", ")
}

/// Runs `step-down`.
pub async fn step_down(client: &Client) -> Result<()> {
    client.step_down().await?;
    println!("OK");
    Ok(())
}

/// One member's answer to `check`.
struct MemberHash {
    id: u64,
    endpoint: String,
    answer: Result<(u32, i64), String>,
}

/// Runs `check`: every member's HashKV at one revision (the lowest any member has
/// applied, so that all can answer), side by side. Fails when a member cannot answer or
/// two members that hashed from the same compaction point disagree.
pub async fn check(client: &Client, access: &Access, format: OutputFormat) -> Result<()> {
    let members = client.member_list().await?.members;
    let mut clients = Vec::new();
    for member in &members {
        let endpoint = member.client_urls.first().cloned().unwrap_or_default();
        clients.push((member.id, endpoint.clone(), one_endpoint(access, &endpoint).await));
    }
    let mut revision = i64::MAX;
    for (_, _, member) in &clients {
        if let Ok(member) = member {
            if let Ok(status) = member.status().await {
                revision = revision.min(status.header.map_or(i64::MAX, |h| h.revision));
            }
        }
    }
    if revision == i64::MAX {
        anyhow::bail!("no member answered Status");
    }
    let mut answers = Vec::new();
    for (id, endpoint, member) in clients {
        let answer = match member {
            Ok(member) => match member.hash_kv(revision).await {
                Ok(hash) => Ok((hash.hash, hash.compact_revision)),
                Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e),
        };
        answers.push(MemberHash { id, endpoint, answer });
    }
    let verdict = verdict(&answers);
    print!("{}", output::check(format, revision, &check_rows(&answers), &verdict));
    match verdict {
        Ok(_) => Ok(()),
        Err(problem) => Err(anyhow::anyhow!(problem)),
    }
}

/// A client for one member only: `check` must hear from each, not from whichever answers.
async fn one_endpoint(access: &Access, endpoint: &str) -> Result<Client, String> {
    let policy = leasekv::client::RetryPolicy { attempts: 3, ..Default::default() };
    access.connect(&[endpoint.to_string()], policy).await.map_err(|e| e.to_string())
}

fn check_rows(answers: &[MemberHash]) -> Vec<Vec<String>> {
    answers
        .iter()
        .map(|a| match &a.answer {
            Ok((hash, compacted)) => {
                vec![format!("{:x}", a.id), a.endpoint.clone(), hash.to_string(), compacted.to_string(), String::new()]
            }
            Err(e) => vec![format!("{:x}", a.id), a.endpoint.clone(), "-".into(), "-".into(), e.clone()],
        })
        .collect()
}

/// Ok with the number of members that agree, or what is wrong.
fn verdict(answers: &[MemberHash]) -> Result<usize, String> {
    let failed: Vec<String> = answers.iter().filter(|a| a.answer.is_err()).map(|a| format!("{:x}", a.id)).collect();
    if !failed.is_empty() {
        return Err(format!("member(s) {} did not answer", failed.join(", ")));
    }
    let mut by_compaction: std::collections::BTreeMap<i64, Vec<(u64, u32)>> = Default::default();
    for a in answers {
        if let Ok((hash, compacted)) = a.answer {
            by_compaction.entry(compacted).or_default().push((a.id, hash));
        }
    }
    for (compacted, hashes) in &by_compaction {
        if hashes.iter().any(|(_, h)| *h != hashes[0].1) {
            let list: Vec<String> = hashes.iter().map(|(id, h)| format!("{id:x}={h}")).collect();
            return Err(format!("hash mismatch from compaction point {compacted}: {}", list.join(" ")));
        }
    }
    Ok(answers.len())
}
