//! A lease as the user names it: a numeric id or a name registered with GrantNamed.

use anyhow::{bail, Context, Result};
use leasekv::client::Client;
use std::fmt;

/// What the user typed where a lease is expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseRef {
    /// A lease id: `0x`-prefixed hex, exactly 16 hex digits (as etcdctl prints ids), or decimal.
    Id(i64),
    /// A lease name, resolved through the leasekv extension.
    Name(String),
}

impl LeaseRef {
    /// Classifies `text`. Only unambiguous spellings are ids, so a name like `cafe` stays a name.
    pub fn parse(text: &str) -> LeaseRef {
        let text = text.trim();
        let is_hex = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_hexdigit());
        let parsed = if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            u64::from_str_radix(hex, 16).ok().map(|id| id as i64)
        } else if text.len() == 16 && is_hex(text) {
            // Exactly 16 hex digits is how etcdctl and kvcli print ids, so it reads back as
            // hex even when every digit is decimal. The cast keeps the bits of large ids.
            u64::from_str_radix(text, 16).ok().map(|id| id as i64)
        } else if text.bytes().all(|b| b.is_ascii_digit()) {
            text.parse::<i64>().ok()
        } else {
            None
        };
        if let Some(id) = parsed {
            return LeaseRef::Id(id);
        }
        LeaseRef::Name(text.to_string())
    }

    /// The name, when this is one.
    pub fn name(&self) -> Option<&str> {
        match self {
            LeaseRef::Name(name) => Some(name),
            LeaseRef::Id(_) => None,
        }
    }

    /// The lease id: an id as is, a name looked up on the cluster.
    pub async fn resolve(&self, client: &Client) -> Result<i64> {
        match self {
            LeaseRef::Id(id) => Ok(*id),
            LeaseRef::Name(name) => match client.resolve_name(name).await {
                Ok(id) => Ok(id),
                Err(e) if e.is_not_found() => bail!("lease {name:?} not found"),
                Err(e) => Err(e).with_context(|| format!("cannot resolve lease name {name:?}")),
            },
        }
    }
}

impl fmt::Display for LeaseRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseRef::Id(id) => write!(f, "{}", hex_id(*id)),
            LeaseRef::Name(name) => f.write_str(name),
        }
    }
}

/// An id as etcdctl prints it: 16 lower-case hex digits of its bits.
pub fn hex_id(id: i64) -> String {
    format!("{:016x}", id as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_ids_and_words_are_names() {
        assert_eq!(LeaseRef::parse("42"), LeaseRef::Id(42));
        assert_eq!(LeaseRef::parse("0x2a"), LeaseRef::Id(42));
        assert_eq!(LeaseRef::parse("694d77aa9e38260f"), LeaseRef::Id(0x694d77aa9e38260f));
        assert_eq!(LeaseRef::parse("ffffffffffffffff"), LeaseRef::Id(-1));
        assert_eq!(LeaseRef::parse("0000000000000077"), LeaseRef::Id(0x77), "16 digits are hex");
        assert_eq!(LeaseRef::parse("7587861231234567890"), LeaseRef::Id(7587861231234567890));
        assert_eq!(LeaseRef::parse("server1"), LeaseRef::Name("server1".into()));
        assert_eq!(LeaseRef::parse("cafe"), LeaseRef::Name("cafe".into()));
        assert_eq!(LeaseRef::parse("0xzz"), LeaseRef::Name("0xzz".into()));
        // Too large for an i64: a name rather than a silently wrapped id.
        assert_eq!(LeaseRef::parse("99999999999999999999"), LeaseRef::Name("99999999999999999999".into()));
    }

    #[test]
    fn ids_print_as_etcdctl_does() {
        assert_eq!(hex_id(42), "000000000000002a");
        assert_eq!(LeaseRef::Id(0x694d77aa9e38260f).to_string(), "694d77aa9e38260f");
        assert_eq!(LeaseRef::parse(&hex_id(-5)), LeaseRef::Id(-5));
    }
}
