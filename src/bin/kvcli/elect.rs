//! `elect NAME [PROPOSAL]` and `elect NAME --listen`.

use super::output::{self, OutputFormat};
use anyhow::{bail, Context, Result};
use clap::Args;
use leasekv::client::Client;

/// `elect NAME [PROPOSAL] [--ttl S] | elect NAME --listen`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The election's name.
    pub name: String,
    /// The value to lead with.
    #[arg(required_unless_present = "listen", conflicts_with = "listen")]
    pub proposal: Option<String>,
    /// Print the leader and every change of leader, without campaigning.
    #[arg(short = 'l', long)]
    pub listen: bool,
    /// TTL of the session lease: how long leadership outlives this process if it dies.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i64).range(1..))]
    pub ttl: i64,
}

/// Runs `elect`: campaigns and, once leader, prints the leader key and value and holds
/// leadership until Ctrl-C (then resigns); with `--listen`, prints each leader as it changes.
pub async fn elect(client: &Client, format: OutputFormat, args: ElectArgs) -> Result<()> {
    if args.listen {
        return listen(client, format, &args.name).await;
    }
    let proposal = args.proposal.unwrap_or_default();
    let mut session = client.session(args.ttl).await.context("cannot start a session")?;
    let won = tokio::select! {
        won = client.campaign(args.name.clone(), session.lease(), proposal.clone()) => won.context("campaign failed")?,
        _ = tokio::signal::ctrl_c() => {
            let _ = session.close().await;
            return Ok(());
        }
    };
    let Some(leader) = won.leader else { bail!("the server answered the campaign without a leader key") };
    print!("{}", output::leader(format, &leader.key, proposal.as_bytes(), leader.rev));
    let lost = tokio::select! {
        _ = tokio::signal::ctrl_c() => false,
        _ = session.lost() => true,
    };
    let _ = client.resign(leader).await;
    let _ = session.close().await;
    if lost {
        bail!("lost leadership: the session lease could not be kept alive");
    }
    Ok(())
}

async fn listen(client: &Client, format: OutputFormat, name: &str) -> Result<()> {
    loop {
        let mut stream = client.observe(name.to_string()).await.context("cannot observe the election")?;
        loop {
            let next = tokio::select! {
                next = stream.message() => next,
                _ = tokio::signal::ctrl_c() => return Ok(()),
            };
            match next {
                Ok(Some(answer)) => {
                    if let Some(kv) = answer.kv {
                        print!("{}", output::leader(format, &kv.key, &kv.value, kv.create_revision));
                    }
                }
                // The node went away: observe again through another endpoint.
                Ok(None) | Err(_) => break,
            }
        }
        eprintln!("kvcli: elect: the observation stream ended; observing again");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
