//! How kvcli reaches a member: the TLS files and the user of the command line, used for
//! the endpoints given and for the members that `check` and `move-master` talk to one by
//! one (each with its own URL from the member list).

use leasekv::client::{Client, ClientError, ClientTls, Credentials, RetryPolicy};

/// The TLS configuration and credentials of this run.
#[derive(Clone, Default)]
pub struct Access {
    /// The client's TLS files, when the cluster serves TLS.
    pub tls: Option<ClientTls>,
    /// The user, when the cluster has auth on.
    pub credentials: Option<Credentials>,
}

impl Access {
    /// A client for `endpoints` with this run's TLS and user.
    pub async fn connect(&self, endpoints: &[String], policy: RetryPolicy) -> Result<Client, ClientError> {
        match self.credentials.clone() {
            Some(credentials) => Client::connect_as(endpoints, policy, self.tls.as_ref(), credentials).await,
            None => Client::connect_with_tls(endpoints, policy, self.tls.as_ref()).await,
        }
    }
}
