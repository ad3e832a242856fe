//! `lock NAME [--ttl S] [-- COMMAND ...]`: hold a distributed lock.

use anyhow::{bail, Context, Result};
use clap::Args;
use leasekv::client::{Client, GetOptions};

/// `lock NAME [--ttl SECONDS] [-- COMMAND ...]`.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock's name.
    pub name: String,
    /// TTL of the session lease that holds the lock: how long the lock outlives this
    /// process if it dies without releasing it.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i64).range(1..))]
    pub ttl: i64,
    /// Run this while holding the lock, then release it; without it, hold until Ctrl-C.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Runs `lock`: waits for the lock, prints its key and fencing token, holds it while the
/// command runs (it gets them as `LEASEKV_LOCK_KEY` and `LEASEKV_LOCK_TOKEN`) or until
/// Ctrl-C, then releases it. The exit status is the command's. If the session is lost
/// while the command runs, the command is killed and kvcli fails: the lock is no longer
/// held, so its side effects must not go on.
pub async fn lock(client: &Client, args: LockArgs) -> Result<Option<i32>> {
    let mut session = client.session(args.ttl).await.context("cannot start a session")?;
    let acquired = tokio::select! {
        acquired = client.lock(args.name.clone(), session.lease()) => acquired.context("cannot acquire the lock")?,
        _ = tokio::signal::ctrl_c() => {
            let _ = session.close().await;
            return Ok(None);
        }
    };
    let key = acquired.key;
    // The key's create revision: it only grows from one holder to the next, so a resource
    // that remembers the highest token it saw can refuse a stale holder.
    let token = match client.get(key.clone(), GetOptions::default()).await {
        Ok(found) => found.kvs.first().map_or(0, |kv| kv.create_revision),
        Err(e) => bail!("acquired the lock but cannot read its key: {e}"),
    };
    let key_text = String::from_utf8_lossy(&key).into_owned();
    println!("{key_text}");
    println!("fencing token: {token}");
    let outcome = if args.command.is_empty() {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => Ok(None),
            _ = session.lost() => Err(anyhow::anyhow!("lost the lock: the session lease could not be kept alive")),
        }
    } else {
        let mut child = tokio::process::Command::new(&args.command[0])
            .args(&args.command[1..])
            .env("LEASEKV_LOCK_KEY", &key_text)
            .env("LEASEKV_LOCK_TOKEN", token.to_string())
            .spawn()
            .with_context(|| format!("cannot run {:?}", args.command[0]))?;
        tokio::select! {
            status = child.wait() => Ok(Some(status.context("waiting for the command")?.code().unwrap_or(1))),
            _ = session.lost() => {
                let _ = child.kill().await;
                Err(anyhow::anyhow!("lost the lock while the command ran (session lease expired); the command was killed"))
            }
        }
    };
    let _ = client.unlock(key).await;
    let _ = session.close().await;
    outcome
}
