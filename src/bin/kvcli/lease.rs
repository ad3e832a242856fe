//! `lease grant|keep-alive|revoke|ttl|list`.

use super::lease_ref::LeaseRef;
use super::output::{self, LeaseRow, OutputFormat};
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use leasekv::client::Client;
use std::time::Duration;
use tonic::Code;

/// Lease commands; NAME may also be a numeric id everywhere.
#[derive(Debug, Subcommand)]
pub enum LeaseCommand {
    /// Grant a lease under NAME (or with the given numeric id).
    Grant {
        /// Lease name or id.
        name: String,
        /// Time to live in seconds (the server may raise it to its minimum).
        #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(i64).range(1..))]
        ttl: i64,
    },
    /// Keep a lease alive until Ctrl-C, printing each renewed TTL.
    KeepAlive {
        /// Lease name or id.
        name: String,
    },
    /// Revoke a lease, deleting its keys.
    Revoke {
        /// Lease name or id.
        name: String,
    },
    /// Remaining and granted TTL of a lease.
    Ttl {
        /// Lease name or id.
        name: String,
        /// Also list the attached keys.
        #[arg(long)]
        keys: bool,
    },
    /// Every live lease with name and remaining TTL.
    List,
}

/// Runs one lease command.
pub async fn run(client: &Client, format: OutputFormat, command: LeaseCommand) -> Result<()> {
    match command {
        LeaseCommand::Grant { name, ttl } => match LeaseRef::parse(&name) {
            LeaseRef::Id(id) => {
                let granted = client.lease_grant(ttl, id).await?;
                if !granted.error.is_empty() {
                    bail!("lease grant failed: {}", granted.error);
                }
                print!("{}", output::granted(format, None, granted.id, granted.ttl));
                Ok(())
            }
            LeaseRef::Name(name) => {
                let granted = client.grant_named(&name, ttl).await.map_err(|e| match e.code() {
                    Some(Code::AlreadyExists) => anyhow::anyhow!("lease {name:?} already exists: {e}"),
                    _ => e.into(),
                })?;
                print!("{}", output::granted(format, Some(&name), granted.id, granted.ttl));
                Ok(())
            }
        },
        LeaseCommand::KeepAlive { name } => {
            let lease = LeaseRef::parse(&name);
            let id = lease.resolve(client).await?;
            keep_alive_until_ctrl_c(client, format, lease.name(), id).await
        }
        LeaseCommand::Revoke { name } => {
            let lease = LeaseRef::parse(&name);
            let id = lease.resolve(client).await?;
            client.lease_revoke(id).await?;
            print!("{}", output::revoked(format, lease.name(), id));
            Ok(())
        }
        LeaseCommand::Ttl { name, keys } => {
            let lease = LeaseRef::parse(&name);
            let id = lease.resolve(client).await?;
            let response = client.lease_time_to_live(id, keys).await?;
            if response.ttl < 0 {
                bail!("lease {lease} not found or expired");
            }
            print!("{}", output::time_to_live(format, lease.name(), &response));
            Ok(())
        }
        LeaseCommand::List => {
            let rows = list(client).await?;
            print!("{}", output::lease_list(format, &rows));
            Ok(())
        }
    }
}

/// Leases with names from the extension; against plain etcd (no extension), ids from
/// LeaseLeases and TTLs from TimeToLive.
async fn list(client: &Client) -> Result<Vec<LeaseRow>> {
    match client.list_leases().await {
        Ok(leases) => Ok(leases
            .into_iter()
            .map(|l| LeaseRow {
                id: l.id,
                name: l.name,
                granted_ttl: l.granted_ttl,
                remaining_ms: (l.remaining_ttl_ms >= 0).then_some(l.remaining_ttl_ms),
            })
            .collect()),
        Err(e) if e.code() == Some(Code::Unimplemented) => {
            let mut rows = Vec::new();
            for lease in client.lease_leases().await?.leases {
                let ttl = client.lease_time_to_live(lease.id, false).await?;
                if ttl.ttl < 0 {
                    continue; // expired between the two calls
                }
                rows.push(LeaseRow {
                    id: lease.id,
                    name: String::new(),
                    granted_ttl: ttl.granted_ttl,
                    remaining_ms: Some(ttl.ttl * 1000),
                });
            }
            Ok(rows)
        }
        Err(e) => Err(e.into()),
    }
}

/// The pause between keepalives: a third of the TTL, as etcd's clients do, at least 100 ms.
pub fn keep_alive_interval(ttl_seconds: i64) -> Duration {
    Duration::from_millis((ttl_seconds.max(0) as u64).saturating_mul(1000) / 3).max(Duration::from_millis(100))
}

/// Sends keepalives for lease `id` until Ctrl-C, printing each answer.
pub async fn keep_alive_until_ctrl_c(client: &Client, format: OutputFormat, name: Option<&str>, id: i64) -> Result<()> {
    let label = output::lease_label(name, id);
    let mut stream = client.lease_keep_alive(id).await.with_context(|| format!("cannot keep lease {label} alive"))?;
    loop {
        let answer = tokio::select! {
            answer = stream.keep_alive() => answer.with_context(|| format!("keepalive of lease {label} failed"))?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        if answer.ttl <= 0 {
            bail!("lease {label} expired or was revoked");
        }
        print!("{}", output::kept_alive(format, name, id, answer.ttl));
        tokio::select! {
            _ = tokio::time::sleep(keep_alive_interval(answer.ttl)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alive_every_third_of_the_ttl() {
        assert_eq!(keep_alive_interval(9), Duration::from_secs(3));
        assert_eq!(keep_alive_interval(1), Duration::from_millis(333));
        assert_eq!(keep_alive_interval(0), Duration::from_millis(100));
    }
}
