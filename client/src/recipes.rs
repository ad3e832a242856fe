//! Sessions, locks and elections: etcd's Lock and Election services, with a session lease
//! kept alive in the background for as long as the caller holds what it won.

use crate::client::{Client, ClientError};
use crate::proto::v3electionpb::election_client::ElectionClient;
use crate::proto::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest, LeaderResponse, ResignRequest, ResignResponse,
};
use crate::proto::v3lockpb::lock_client::LockClient;
use crate::proto::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};
use std::time::Duration;
use tokio::sync::watch;
use tonic::Streaming;

/// A lease kept alive by a background task until [`Session::close`] (or drop). What is held
/// with it (a lock, a leadership) ends when the session does; [`Session::lost`] says when
/// the keepalives stopped working.
#[derive(Debug)]
pub struct Session {
    client: Client,
    id: i64,
    keeper: tokio::task::JoinHandle<()>,
    alive: watch::Receiver<bool>,
}

impl Session {
    /// The session's lease.
    pub fn lease(&self) -> i64 {
        self.id
    }

    /// Resolves when the lease could no longer be kept alive (expired, revoked, or no
    /// endpoint answered): whatever the session held is then gone.
    pub async fn lost(&mut self) {
        while *self.alive.borrow() {
            if self.alive.changed().await.is_err() {
                return;
            }
        }
    }

    /// Stops the keepalives and revokes the lease, releasing everything held with it.
    pub async fn close(self) -> Result<(), ClientError> {
        self.keeper.abort();
        self.client.lease_revoke(self.id).await.map(drop)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

impl Client {
    /// Grants a lease of `ttl` seconds and keeps it alive (every third of its TTL) until the
    /// session is closed or dropped.
    pub async fn session(&self, ttl: i64) -> Result<Session, ClientError> {
        let granted = self.lease_grant(ttl, 0).await?;
        let mut stream = self.lease_keep_alive(granted.id).await?;
        let (alive_tx, alive) = watch::channel(true);
        let keeper = tokio::spawn(async move {
            let mut interval = Duration::from_millis(((granted.ttl.max(1) * 1000) / 3) as u64);
            loop {
                tokio::time::sleep(interval).await;
                match stream.keep_alive().await {
                    Ok(answer) if answer.ttl > 0 => {
                        interval = Duration::from_millis(((answer.ttl * 1000) / 3) as u64);
                    }
                    _ => {
                        let _ = alive_tx.send(false);
                        return;
                    }
                }
            }
        });
        Ok(Session { client: self.clone(), id: granted.id, keeper, alive })
    }

    /// Acquires the lock `name` with `lease`, waiting as long as it takes.
    pub async fn lock(&self, name: impl Into<Vec<u8>>, lease: i64) -> Result<LockResponse, ClientError> {
        let request = LockRequest { name: name.into(), lease };
        self.call_with_deadline("Lock", None, |channel| {
            let request = request.clone();
            async move { LockClient::new(channel).lock(request).await }
        })
        .await
    }

    /// Releases a lock by the key [`Client::lock`] returned.
    pub async fn unlock(&self, key: impl Into<Vec<u8>>) -> Result<UnlockResponse, ClientError> {
        let request = UnlockRequest { key: key.into() };
        self.call("Unlock", |channel| {
            let request = request.clone();
            async move { LockClient::new(channel).unlock(request).await }
        })
        .await
    }

    /// Campaigns in election `name` with `value`, waiting until this lease leads.
    pub async fn campaign(
        &self,
        name: impl Into<Vec<u8>>,
        lease: i64,
        value: impl Into<Vec<u8>>,
    ) -> Result<CampaignResponse, ClientError> {
        let request = CampaignRequest { name: name.into(), lease, value: value.into() };
        self.call_with_deadline("Campaign", None, |channel| {
            let request = request.clone();
            async move { ElectionClient::new(channel).campaign(request).await }
        })
        .await
    }

    /// Gives up the leadership won as `leader`.
    pub async fn resign(&self, leader: LeaderKey) -> Result<ResignResponse, ClientError> {
        let request = ResignRequest { leader: Some(leader) };
        self.call("Resign", |channel| {
            let request = request.clone();
            async move { ElectionClient::new(channel).resign(request).await }
        })
        .await
    }

    /// The current leader of election `name`.
    pub async fn leader(&self, name: impl Into<Vec<u8>>) -> Result<LeaderResponse, ClientError> {
        let request = LeaderRequest { name: name.into() };
        self.call("Leader", |channel| {
            let request = request.clone();
            async move {
                ElectionClient::new(channel)
                    .max_decoding_message_size(crate::client::MAX_RESPONSE_BYTES)
                    .leader(request)
                    .await
            }
        })
        .await
    }

    /// The leader of election `name` now (once there is one) and at every change.
    pub async fn observe(&self, name: impl Into<Vec<u8>>) -> Result<Streaming<LeaderResponse>, ClientError> {
        let request = LeaderRequest { name: name.into() };
        self.call("Observe", |channel| {
            let request = request.clone();
            async move {
                ElectionClient::new(channel)
                    .max_decoding_message_size(crate::client::MAX_RESPONSE_BYTES)
                    .observe(request)
                    .await
            }
        })
        .await
    }
}
