//! `watch KEY [--prefix] [--rev N] [--prev-kv]`: prints every change as it arrives.

use super::output::{self, OutputFormat};
use anyhow::{Context, Result};
use clap::Args;
use leasekv::client::{prefix_range_end, Client, WatchOptions, WatchUpdate};
use std::io::Write;

/// `watch KEY [--prefix] [--rev N] [--prev-kv]`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The key (or prefix).
    pub key: String,
    /// Every key starting with KEY.
    #[arg(long)]
    pub prefix: bool,
    /// Start at this revision (replaying the history kept since then) instead of now.
    #[arg(long, value_name = "REVISION", value_parser = clap::value_parser!(i64).range(1..))]
    pub rev: Option<i64>,
    /// Print each key's previous value too.
    #[arg(long)]
    pub prev_kv: bool,
}

/// Runs `watch` until Ctrl-C. When the node serving it fails, the watch moves to the next
/// endpoint and resumes after the last revision printed (said on stderr), so no event is
/// printed twice or missed; it stops with an error only if no endpoint takes it or the
/// history it needs was compacted.
pub async fn watch(client: &Client, format: OutputFormat, args: WatchArgs) -> Result<()> {
    let key = args.key.into_bytes();
    let options = WatchOptions {
        range_end: if args.prefix { prefix_range_end(&key) } else { Vec::new() },
        start_revision: args.rev.unwrap_or(0),
        prev_kv: args.prev_kv,
        ..WatchOptions::default()
    };
    let mut watch = client.watch(key, options).await.context("cannot open the watch")?;
    let mut stdout = std::io::stdout();
    loop {
        let update = tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            update = watch.next() => update,
        };
        match update.context("the watch ended")? {
            WatchUpdate::Response(response) => {
                if response.events.is_empty() {
                    continue;
                }
                let text = output::events(format, &response.events);
                // A closed stdout (e.g. `kvcli watch … | head`) ends the watch quietly.
                if stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()).is_err() {
                    return Ok(());
                }
            }
            WatchUpdate::Resumed { endpoint, from_revision, cause } => {
                eprintln!("kvcli: watch: {cause}; resumed on {endpoint} from revision {from_revision}");
            }
        }
    }
}
