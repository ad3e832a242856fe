//! `status` and `step-down`.

use super::output::{self, OutputFormat, StatusReport};
use anyhow::Result;
use leasekv::client::Client;
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

/// Runs `step-down`.
pub async fn step_down(client: &Client) -> Result<()> {
    client.step_down().await?;
    println!("OK");
    Ok(())
}
