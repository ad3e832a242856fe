//! leasekv's client side: the gRPC API definitions and a small failover client.
//!
//! - [`proto`]: code generated from `client/proto/`: etcd's v3 API subset (`etcdserverpb`,
//!   `mvccpb`) and leasekv's extension service (`leasekv`).
//!   Both client stubs and server traits are generated; the server crate implements the traits.
//! - [`Session`], locks and elections ([`recipes`]): etcd's Lock and Election services.
//! - [`Watch`]: a watch that resumes on another endpoint when its stream breaks.
//! - [`Client`]: an ergonomic wrapper that tries endpoints in order and fails over on
//!   connection errors and `UNAVAILABLE`.

#![deny(missing_docs)]

pub mod client;
pub mod endpoint;
pub mod errors;
pub mod outcome;
pub mod recipes;
pub mod tls;
pub mod watch;

pub use client::{prefix_range_end, Client, ClientError, Conn, Credentials, GetOptions, KeepAliveStream, RetryPolicy};
pub use endpoint::{normalize_endpoint, parse_endpoint_list, EndpointError};
pub use errors::EtcdError;
pub use outcome::{indeterminate_write, is_indeterminate, INDETERMINATE_WRITE};
pub use recipes::Session;
pub use tls::{ClientTls, TlsOptionError};
pub use watch::{Watch, WatchError, WatchOptions, WatchUpdate};

/// Generated protobuf messages, gRPC clients and server traits.
pub mod proto {
    /// etcd's key-value records and events (wire-compatible with etcd's `mvccpb`).
    pub mod mvccpb {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("mvccpb");
    }

    /// etcd's auth records (users' options, permissions), as the Auth service carries them.
    pub mod authpb {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("authpb");
    }

    /// etcd's v3 API subset: KV, Watch, Lease, Cluster, Maintenance, Auth.
    pub mod etcdserverpb {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("etcdserverpb");
    }

    /// etcd's Lock service (`v3lockpb.Lock`).
    pub mod v3lockpb {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("v3lockpb");
    }

    /// etcd's Election service (`v3electionpb.Election`).
    pub mod v3electionpb {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("v3electionpb");
    }

    /// leasekv's extension service (`leasekv.v1.LeaseKv`): named leases, election status.
    pub mod leasekv {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("leasekv.v1");
    }
}
