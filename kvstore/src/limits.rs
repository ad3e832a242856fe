//! Size limits on requests. Every limit has a clear error ([`crate::KvError`]) that names
//! the limit and the size that broke it.

use serde::{Deserialize, Serialize};

/// Request size limits, checked where a request enters the store (before it is proposed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Longest key, bytes (1.5 KiB).
    pub max_key_bytes: usize,
    /// Longest value, bytes (1.5 MiB, etcd's default request size limit).
    pub max_value_bytes: usize,
    /// Most operations in one branch of a Txn (etcd's default: 128).
    pub max_txn_ops: usize,
    /// Longest lease name, bytes.
    pub max_lease_name_bytes: usize,
    /// The space quota (etcd's `--quota-backend-bytes`): bytes of data in use (see
    /// [`crate::StateMachine::bytes_in_use`]) beyond which writes that add data are refused
    /// and the NOSPACE alarm is raised. 0: no quota.
    #[serde(default)]
    pub quota_bytes: u64,
    /// Most live leases the store holds; a grant beyond it is refused
    /// ([`crate::KvError::TooManyLeases`]). Checked by the master when a grant is proposed,
    /// so leases granted concurrently may overshoot it by the grants in flight.
    #[serde(default = "Limits::default_max_leases")]
    pub max_leases: usize,
    /// Largest Range answer, bytes as encoded on the wire: a unary Range past it is refused
    /// ([`crate::KvError::ResponseTooLarge`]) rather than built, so a reader holds at most
    /// this much of one answer. etcd's gRPC send limit (2 GiB − 1) by default.
    #[serde(default = "Limits::default_max_response_bytes")]
    pub max_response_bytes: u64,
}

impl Limits {
    /// etcd's default quota, 2 GiB.
    pub const DEFAULT_QUOTA_BYTES: u64 = 2 << 30;
    /// The default cap on live leases: far above what lease-per-session clients use, low
    /// enough that the lease table (about 100 B a lease) stays well under a gigabyte.
    pub const DEFAULT_MAX_LEASES: usize = 1_000_000;

    /// etcd's gRPC send limit (`math.MaxInt32`): the largest answer it sends.
    pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = (1 << 31) - 1;

    fn default_max_leases() -> usize {
        Self::DEFAULT_MAX_LEASES
    }

    fn default_max_response_bytes() -> u64 {
        Self::DEFAULT_MAX_RESPONSE_BYTES
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key_bytes: 1536,
            max_value_bytes: 1536 * 1024,
            max_txn_ops: 128,
            max_lease_name_bytes: 256,
            quota_bytes: Self::DEFAULT_QUOTA_BYTES,
            max_leases: Self::DEFAULT_MAX_LEASES,
            max_response_bytes: Self::DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}
