//! Identifiers shared by every backend.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A node's identity in the cluster; unique and stable across restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// The resource a lease is about. A node runs one independent lease instance per resource
/// (PaxosLease section 8); the master lease is one resource among them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourceId(pub u64);

impl ResourceId {
    /// The resource whose holder is the cluster's master.
    pub const MASTER: ResourceId = ResourceId(0);
}

impl fmt::Display for ResourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == ResourceId::MASTER {
            f.write_str("master")
        } else {
            write!(f, "resource-{}", self.0)
        }
    }
}
