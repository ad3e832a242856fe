//! etcd's Lease service: grants, revocations, keepalives (one call or a stream) and TTLs.

use super::*;

impl Client {
    /// Grants a lease of `ttl` seconds; `id` 0 lets the server choose the id.
    pub async fn lease_grant(&self, ttl: i64, id: i64) -> Result<LeaseGrantResponse, ClientError> {
        let request = LeaseGrantRequest { ttl, id };
        self.call("LeaseGrant", unary!(LeaseClient, lease_grant, request)).await
    }

    /// Revokes a lease, deleting its keys.
    pub async fn lease_revoke(&self, id: i64) -> Result<LeaseRevokeResponse, ClientError> {
        let request = LeaseRevokeRequest { id };
        self.call("LeaseRevoke", unary!(LeaseClient, lease_revoke, request)).await
    }

    /// Sends one keepalive on a short-lived stream; TTL 0 in the answer means the lease is gone.
    pub async fn lease_keep_alive_once(&self, id: i64) -> Result<LeaseKeepAliveResponse, ClientError> {
        self.lease_keep_alive(id).await?.keep_alive().await
    }

    /// Opens a keepalive stream for lease `id`; see [`KeepAliveStream::keep_alive`].
    pub async fn lease_keep_alive(&self, id: i64) -> Result<KeepAliveStream, ClientError> {
        let (endpoint, sender, responses) = self.open_keep_alive(id).await?;
        Ok(KeepAliveStream { client: self.clone(), id, endpoint, sender, responses, request_in_flight: true })
    }

    /// Opens the bidirectional stream with the first request already queued: etcd sends its
    /// response headers only with the first answer, so the call would not complete otherwise.
    async fn open_keep_alive(
        &self,
        id: i64,
    ) -> Result<(String, mpsc::Sender<LeaseKeepAliveRequest>, Streaming<LeaseKeepAliveResponse>), ClientError> {
        let (sender, responses) = self
            .call("LeaseKeepAlive", |ch| async move {
                let (sender, receiver) = mpsc::channel(4);
                // Cannot fail: the receiver is alive until the call below consumes it.
                let _ = sender.send(LeaseKeepAliveRequest { id }).await;
                let response = LeaseClient::new(ch).lease_keep_alive(ReceiverStream::new(receiver)).await?;
                Ok(response.map(|stream| (sender, stream)))
            })
            .await?;
        Ok((self.current_endpoint().to_string(), sender, responses))
    }

    /// Remaining and granted TTL of a lease; with `keys`, also its attached keys.
    pub async fn lease_time_to_live(&self, id: i64, keys: bool) -> Result<LeaseTimeToLiveResponse, ClientError> {
        let request = LeaseTimeToLiveRequest { id, keys };
        self.call("LeaseTimeToLive", unary!(LeaseClient, lease_time_to_live, request)).await
    }

    /// The ids of every live lease (etcd's call; see [`Client::list_leases`] for names and TTLs).
    pub async fn lease_leases(&self) -> Result<LeaseLeasesResponse, ClientError> {
        self.call("LeaseLeases", unary!(LeaseClient, lease_leases, LeaseLeasesRequest {})).await
    }
}

/// An open keepalive stream for one lease. Reopens itself once, through the client's failover,
/// when the stream breaks.
#[derive(Debug)]
pub struct KeepAliveStream {
    client: Client,
    id: i64,
    endpoint: String,
    sender: mpsc::Sender<LeaseKeepAliveRequest>,
    responses: Streaming<LeaseKeepAliveResponse>,
    /// A request was sent whose answer has not been read (opening the stream sends one).
    request_in_flight: bool,
}

impl KeepAliveStream {
    /// The lease this stream keeps alive.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// Sends one keepalive and waits for its answer. `ttl` 0 in the answer means the lease is
    /// unknown or expired; callers should stop then. Send about every TTL/3.
    pub async fn keep_alive(&mut self) -> Result<LeaseKeepAliveResponse, ClientError> {
        if !std::mem::take(&mut self.request_in_flight)
            && self.sender.send(LeaseKeepAliveRequest { id: self.id }).await.is_err()
        {
            // The request side is closed only when the call ended; a fresh stream sends its own.
            return self.reopen_and_read().await;
        }
        match self.read_one().await {
            Err(ClientError::StreamClosed { .. }) => self.reopen_and_read().await,
            Err(ClientError::Rpc { status, .. }) if is_retryable(&status) => self.reopen_and_read().await,
            other => other,
        }
    }

    async fn reopen_and_read(&mut self) -> Result<LeaseKeepAliveResponse, ClientError> {
        let (endpoint, sender, responses) = self.client.open_keep_alive(self.id).await?;
        self.endpoint = endpoint;
        self.sender = sender;
        self.responses = responses;
        self.read_one().await
    }

    async fn read_one(&mut self) -> Result<LeaseKeepAliveResponse, ClientError> {
        let method = "LeaseKeepAlive";
        let after = self.client.inner.policy.request_timeout;
        match tokio::time::timeout(after, self.responses.message()).await {
            Ok(Ok(Some(response))) => Ok(response),
            Ok(Ok(None)) => Err(ClientError::StreamClosed { endpoint: self.endpoint.clone(), method }),
            Ok(Err(status)) => {
                Err(ClientError::Rpc { endpoint: self.endpoint.clone(), method, status: Box::new(status) })
            }
            Err(_) => Err(ClientError::Timeout { endpoint: self.endpoint.clone(), method, after }),
        }
    }
}
