//! `put`, `get` and `del`.

use super::lease;
use super::lease_ref::LeaseRef;
use super::output::{self, OutputFormat};
use anyhow::{bail, Context, Result};
use clap::Args;
use leasekv::client::{Client, GetOptions};
use std::io::{IsTerminal, Read};

/// `put KEY [VALUE] [--lease NAME|ID] [--ttl SECONDS] [--keep-alive]`.
#[derive(Debug, Args)]
pub struct PutArgs {
    /// The key.
    pub key: String,
    /// The value; when omitted, stdin is read if it is not a terminal, else the value is empty.
    pub value: Option<String>,
    /// Attach the key to this lease: a name, or an id (decimal, 0x-hex, or 16 hex digits).
    #[arg(long, value_name = "NAME|ID")]
    pub lease: Option<String>,
    /// Grant the named lease with this TTL when it does not exist yet.
    #[arg(long, value_name = "SECONDS", requires = "lease", value_parser = clap::value_parser!(i64).range(1..))]
    pub ttl: Option<i64>,
    /// Keep the lease alive after the put until Ctrl-C.
    #[arg(long, requires = "lease")]
    pub keep_alive: bool,
}

/// `get KEY [--prefix] [--keys-only] [--serializable]`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// The key (or prefix).
    pub key: String,
    /// Every key starting with KEY.
    #[arg(long)]
    pub prefix: bool,
    /// Print keys without values.
    #[arg(long)]
    pub keys_only: bool,
    /// Local, possibly stale read instead of linearizable.
    #[arg(long)]
    pub serializable: bool,
    /// Read the keys as they were at this revision (kept until compacted).
    #[arg(long, value_name = "REVISION", value_parser = clap::value_parser!(i64).range(1..))]
    pub rev: Option<i64>,
}

/// `compact REVISION [--physical]`.
#[derive(Debug, Args)]
pub struct CompactArgs {
    /// Forget the history below this revision.
    #[arg(value_parser = clap::value_parser!(i64).range(1..))]
    pub revision: i64,
    /// Answer only once the compaction is done (leasekv's always is when it answers).
    #[arg(long)]
    pub physical: bool,
}

/// `del KEY [--prefix]`.
#[derive(Debug, Args)]
pub struct DelArgs {
    /// The key (or prefix).
    pub key: String,
    /// Every key starting with KEY.
    #[arg(long)]
    pub prefix: bool,
}

/// The value to write: the argument, else stdin when it is piped, else empty.
fn read_value(value: Option<String>) -> Result<Vec<u8>> {
    if let Some(value) = value {
        return Ok(value.into_bytes());
    }
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Ok(Vec::new());
    }
    let mut buffer = Vec::new();
    stdin.read_to_end(&mut buffer).context("cannot read the value from stdin")?;
    Ok(buffer)
}

/// The lease id for a put: an id as given; a name resolved, or granted when `ttl` is set.
async fn lease_for_put(client: &Client, lease: &LeaseRef, ttl: Option<i64>) -> Result<i64> {
    let name = match lease {
        LeaseRef::Id(id) => {
            if ttl.is_some() {
                bail!("--ttl creates named leases only; grant an id-only lease with `kvcli lease grant {id} --ttl SECONDS`");
            }
            return Ok(*id);
        }
        LeaseRef::Name(name) => name,
    };
    match client.resolve_name(name).await {
        Ok(id) => Ok(id),
        Err(e) if e.is_not_found() => match ttl {
            Some(ttl) => match client.grant_named(name, ttl).await {
                Ok(granted) => Ok(granted.id),
                // Someone else granted it between our lookup and our grant: use theirs.
                Err(e) if e.code() == Some(tonic::Code::AlreadyExists) => Ok(client.resolve_name(name).await?),
                Err(e) => Err(e).with_context(|| format!("cannot grant lease {name:?}")),
            },
            None => bail!(
                "lease {name:?} not found; grant it first with `kvcli lease grant {name} --ttl SECONDS` \
                 (or pass --ttl SECONDS to put)"
            ),
        },
        Err(e) => Err(e).with_context(|| format!("cannot resolve lease name {name:?}")),
    }
}

/// Runs `put`.
pub async fn put(client: &Client, format: OutputFormat, args: PutArgs) -> Result<()> {
    let value = read_value(args.value)?;
    let lease = args.lease.as_deref().map(LeaseRef::parse);
    let lease_id = match &lease {
        Some(lease) => lease_for_put(client, lease, args.ttl).await?,
        None => 0,
    };
    let response = client.put(args.key, value, lease_id, false).await?;
    let revision = response.header.as_ref().map_or(0, |h| h.revision);
    print!("{}", output::put(format, revision, lease_id));
    if args.keep_alive {
        if let Some(lease) = &lease {
            lease::keep_alive_until_ctrl_c(client, format, lease.name(), lease_id).await?;
        }
    }
    Ok(())
}

/// Runs `get`; a single key that does not exist is an error (exit 1), an empty prefix is not.
pub async fn get(client: &Client, format: OutputFormat, args: GetArgs) -> Result<()> {
    let options = GetOptions {
        prefix: args.prefix,
        keys_only: args.keys_only,
        serializable: args.serializable,
        revision: args.rev.unwrap_or(0),
        ..Default::default()
    };
    let response = match args.prefix {
        // A prefix may hold many keys: read in chunks (etcd 3.7's RangeStream; a server
        // without it answers the plain Range), so no message holds them all.
        true => {
            let request = leasekv::client::proto::etcdserverpb::RangeRequest {
                key: args.key.clone().into_bytes(),
                range_end: leasekv::client::prefix_range_end(args.key.as_bytes()),
                keys_only: options.keys_only,
                serializable: options.serializable,
                revision: options.revision,
                ..Default::default()
            };
            client.range_streamed(request).await?
        }
        false => client.get(args.key.clone(), options).await?,
    };
    if response.kvs.is_empty() && !args.prefix {
        bail!("key {:?} not found", args.key);
    }
    print!("{}", output::kvs(format, &response, args.keys_only));
    Ok(())
}

/// Runs `compact`.
pub async fn compact(client: &Client, format: OutputFormat, args: CompactArgs) -> Result<()> {
    let response = client.compact(args.revision, args.physical).await?;
    let revision = response.header.as_ref().map_or(0, |h| h.revision);
    print!("{}", output::compacted(format, args.revision, revision));
    Ok(())
}

/// Runs `del`.
pub async fn del(client: &Client, format: OutputFormat, args: DelArgs) -> Result<()> {
    let response = client.delete(args.key, args.prefix, false).await?;
    print!("{}", output::deleted(format, &response));
    Ok(())
}
