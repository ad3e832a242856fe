//! A small etcd-v3 client with endpoint failover, plus leasekv's extension calls.
//!
//! Every unary call runs through [`Client::call`]: it sends to the current endpoint and, when
//! the endpoint is unreachable or answers `UNAVAILABLE` (a leasekv node that is not master and
//! cannot forward answers that way too), moves to the next endpoint after a back-off, for a
//! bounded number of attempts. Other errors are returned at once: they are answers, not outages.
//!
//! Retrying after `UNAVAILABLE` can apply a write twice when the connection broke after the
//! server applied it; etcd's own clients accept the same trade-off for puts and deletes.

use crate::endpoint::{parse_endpoint_list, EndpointError};
use crate::errors::EtcdError;
use crate::outcome::is_retryable;
use crate::proto::etcdserverpb::{
    alarm_request::AlarmAction, auth_client::AuthClient, cluster_client::ClusterClient, kv_client::KvClient,
    lease_client::LeaseClient, maintenance_client::MaintenanceClient, AlarmMember, AlarmRequest, AlarmResponse,
    AlarmType, AuthDisableRequest, AuthEnableRequest, AuthRoleAddRequest, AuthRoleDeleteRequest, AuthRoleGetRequest,
    AuthRoleGrantPermissionRequest, AuthRoleListRequest, AuthRoleRevokePermissionRequest, AuthStatusRequest,
    AuthStatusResponse, AuthUserAddRequest, AuthUserChangePasswordRequest, AuthUserDeleteRequest, AuthUserGetRequest,
    AuthUserGrantRoleRequest, AuthUserListRequest, AuthUserRevokeRoleRequest, AuthenticateRequest, CompactionRequest,
    CompactionResponse, DefragmentRequest, DefragmentResponse, DeleteRangeRequest, DeleteRangeResponse, HashKvRequest,
    HashKvResponse, LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseLeasesRequest, LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse, LeaseTimeToLiveRequest,
    LeaseTimeToLiveResponse, MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse, MemberUpdateRequest,
    MemberUpdateResponse, MoveLeaderRequest, MoveLeaderResponse, PutRequest, PutResponse, RangeRequest, RangeResponse,
    RangeStreamResponse, SnapshotRequest, StatusRequest, StatusResponse, TxnRequest, TxnResponse,
};
use crate::proto::leasekv::{
    lease_kv_client::LeaseKvClient, ElectionStatusRequest, ElectionStatusResponse, GrantNamedRequest,
    GrantNamedResponse, LeaseInfo, ListLeasesRequest, ResolveNameRequest, StepDownRequest,
};
use crate::tls::ClientTls;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status, Streaming};

/// A closure for [`Client::call`]: builds the request (cloning it, since each attempt needs
/// its own) and calls `$method` on a fresh `$stub` over the channel it is given. Generated stubs
/// borrow themselves mutably, so the stub must live inside the returned future.
macro_rules! unary {
    ($stub:ident, $method:ident, $request:expr) => {
        |channel| {
            let request = $request;
            async move { $stub::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES).$method(request).await }
        }
    };
}

/// The largest answer a call accepts: etcd's clients' default (`MaxCallRecvMsgSize`,
/// `math.MaxInt32`), so a range over many large values is not refused by the client after
/// the server did the work (tonic's own default is 4 MiB).
pub const MAX_RESPONSE_BYTES: usize = i32::MAX as usize;

/// A user name and password for etcd's auth (etcdctl's `--user name:password`).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user.
    pub user: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("user", &self.user).finish_non_exhaustive()
    }
}

impl Credentials {
    /// `name:password` as etcdctl takes it; `None` without a colon.
    pub fn parse(user: &str) -> Option<Credentials> {
        let (user, password) = user.split_once(':')?;
        Some(Credentials { user: user.to_string(), password: password.to_string() })
    }
}

/// A channel that sends the client's auth token, once it has one.
pub type Conn = InterceptedService<Channel, TokenInterceptor>;

/// Adds the `token` metadata etcd servers read the caller from.
#[derive(Debug, Clone)]
pub struct TokenInterceptor(Arc<std::sync::RwLock<Option<MetadataValue<Ascii>>>>);

impl tonic::service::Interceptor for TokenInterceptor {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(token) = self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone() {
            request.metadata_mut().insert("token", token);
        }
        Ok(request)
    }
}

/// Whether the server refused a token that authenticating again would replace.
fn is_stale_token(status: &Status) -> bool {
    EtcdError::of(status).is_some_and(EtcdError::needs_new_token)
}

mod auth;
mod cluster;
mod error;
mod ext;
mod kv;
mod lease;
mod options;

pub use error::ClientError;
use error::{error_chain, status_summary};
pub use lease::KeepAliveStream;
pub use options::{prefix_range_end, GetOptions, RetryPolicy};

/// A connection to a leasekv (or etcd) cluster. Cheap to clone; clones share connections.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Normalised endpoint URLs, in the caller's order.
    endpoints: Vec<String>,
    /// One channel per endpoint; tonic channels reconnect by themselves after a failure.
    /// Each sends the auth token, once there is one.
    channels: Vec<Conn>,
    /// The user and password to authenticate with (etcd's auth), if any.
    credentials: Option<Credentials>,
    /// The token every call carries (shared by the channels' interceptors).
    token: Arc<std::sync::RwLock<Option<MetadataValue<Ascii>>>>,
    /// Index of the endpoint calls go to first.
    current: AtomicUsize,
    policy: RetryPolicy,
}

impl Client {
    /// Connects with the default [`RetryPolicy`]. Endpoints may be `host:port` or URLs; they
    /// are tried in order until one accepts a connection.
    pub async fn connect(endpoints: &[String]) -> Result<Client, ClientError> {
        Client::connect_with(endpoints, RetryPolicy::default()).await
    }

    /// Connects with an explicit retry policy.
    pub async fn connect_with(endpoints: &[String], policy: RetryPolicy) -> Result<Client, ClientError> {
        Client::connect_with_tls(endpoints, policy, None).await
    }

    /// Connects with an explicit retry policy, over TLS when `tls` is given: then every
    /// endpoint uses TLS (`host:port` and `http://` ones too, as etcdctl does with
    /// `--cacert`). An `https://` endpoint without `tls` is refused: no system trust store
    /// is used, the CA must be named.
    pub async fn connect_with_tls(
        endpoints: &[String],
        policy: RetryPolicy,
        tls: Option<&ClientTls>,
    ) -> Result<Client, ClientError> {
        let urls = endpoints.iter().map(|e| parse_endpoint_list(e)).collect::<Result<Vec<_>, _>>()?;
        let mut urls: Vec<String> = urls.into_iter().flatten().collect();
        if urls.is_empty() {
            return Err(ClientError::NoEndpoints);
        }
        if tls.is_some() {
            for url in &mut urls {
                if let Some(rest) = url.strip_prefix("http://") {
                    *url = format!("https://{rest}");
                }
            }
        } else if let Some(url) = urls.iter().find(|u| u.starts_with("https://")) {
            return Err(ClientError::TlsNeeded(url.clone()));
        }
        let mut builders = Vec::with_capacity(urls.len());
        for url in &urls {
            let builder =
                Endpoint::from_shared(url.clone()).map_err(|e| EndpointError::Invalid(url.clone(), error_chain(&e)))?;
            let builder = match tls {
                Some(tls) => builder
                    .tls_config(tls.config())
                    .map_err(|e| EndpointError::Invalid(url.clone(), error_chain(&e)))?,
                None => builder,
            };
            let builder = builder
                .connect_timeout(policy.connect_timeout)
                .tcp_nodelay(true)
                // Detects a silently dead peer on idle connections (e.g. a long keepalive stream).
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_timeout(Duration::from_secs(5));
            builders.push(builder);
        }
        let mut failures = Vec::new();
        let attempts = policy.attempts.max(1);
        for attempt in 0..attempts {
            let index = attempt as usize % builders.len();
            match builders[index].connect().await {
                Ok(connected) => {
                    // The others connect on first use, so failing over costs nothing up front.
                    let token = Arc::new(std::sync::RwLock::new(None));
                    let channels = builders
                        .iter()
                        .enumerate()
                        .map(|(i, b)| if i == index { connected.clone() } else { b.connect_lazy() })
                        .map(|channel| InterceptedService::new(channel, TokenInterceptor(token.clone())))
                        .collect();
                    let inner = Inner {
                        endpoints: urls,
                        channels,
                        current: AtomicUsize::new(index),
                        policy,
                        credentials: None,
                        token,
                    };
                    return Ok(Client { inner: Arc::new(inner) });
                }
                Err(e) => failures.push(format!("{}: {}", urls[index], error_chain(&e))),
            }
            // Pause only after a full round: another endpoint may well be up right now.
            let round_done = (attempt as usize + 1).is_multiple_of(builders.len());
            if round_done && attempt + 1 < attempts {
                tokio::time::sleep(policy.backoff(attempt / builders.len() as u32 + 1)).await;
            }
        }
        Err(ClientError::Connect { attempts, failures: failures.join("; ") })
    }

    /// The normalised endpoint URLs.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// The endpoint calls currently go to first.
    pub fn current_endpoint(&self) -> &str {
        &self.inner.endpoints[self.current_index()]
    }

    /// The retry policy in force.
    pub fn policy(&self) -> RetryPolicy {
        self.inner.policy
    }

    fn current_index(&self) -> usize {
        self.inner.current.load(Ordering::Relaxed) % self.inner.endpoints.len()
    }

    /// Moves to the endpoint after `failed`, unless another task already moved on.
    fn fail_over_from(&self, failed: usize) {
        let next = (failed + 1) % self.inner.endpoints.len();
        let _ = self.inner.current.compare_exchange(failed, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Moves to the endpoint after `endpoint` (a stream on it broke), unless another task
    /// already moved on.
    pub(crate) fn fail_over_from_endpoint(&self, endpoint: &str) {
        if let Some(index) = self.inner.endpoints.iter().position(|e| e == endpoint) {
            self.fail_over_from(index);
        }
    }

    /// Runs one unary call with failover: `f` is invoked with the channel of the endpoint to try.
    pub(crate) async fn call<T, F, Fut>(&self, method: &'static str, f: F) -> Result<T, ClientError>
    where
        F: FnMut(Conn) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.call_with_deadline(method, Some(self.inner.policy.request_timeout), f).await
    }

    /// [`Self::call`] with another deadline per attempt, or none for calls that wait by
    /// design (Lock, Campaign): they end when the server answers or the caller drops them.
    pub(crate) async fn call_with_deadline<T, F, Fut>(
        &self,
        method: &'static str,
        deadline: Option<Duration>,
        mut f: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(Conn) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let policy = self.inner.policy;
        let mut reauthenticated = false;
        let deadline = deadline.unwrap_or(Duration::MAX);
        let attempts = policy.attempts.max(1);
        let mut failures = Vec::new();
        for attempt in 1..=attempts {
            let index = self.current_index();
            let endpoint = &self.inner.endpoints[index];
            let mut outcome = timeout_or_wait(deadline, f(self.inner.channels[index].clone())).await;
            // etcd's clients authenticate again when the token expired or the auth store
            // changed since it was issued, and retry at once (once per call).
            if let Ok(Err(status)) = &outcome {
                if !reauthenticated && self.inner.credentials.is_some() && is_stale_token(status) {
                    reauthenticated = true;
                    self.authenticate().await?;
                    outcome = timeout_or_wait(deadline, f(self.inner.channels[index].clone())).await;
                }
            }
            match outcome {
                Ok(Ok(response)) => return Ok(response.into_inner()),
                Ok(Err(status)) if is_retryable(&status) => {
                    failures.push(format!("{endpoint}: {}", status_summary(&status)));
                    self.fail_over_from(index);
                }
                Ok(Err(status)) => {
                    return Err(ClientError::Rpc { endpoint: endpoint.clone(), method, status: Box::new(status) })
                }
                Err(_) => return Err(ClientError::Timeout { endpoint: endpoint.clone(), method, after: deadline }),
            }
            if attempt < attempts {
                tokio::time::sleep(policy.backoff(attempt)).await;
            }
        }
        Err(ClientError::Unavailable { method, attempts, failures: failures.join("; ") })
    }

    /// Connects as `user` (etcd's auth): authenticates at once and sends the token with
    /// every call, authenticating again when the server says it is stale.
    pub async fn connect_as(
        endpoints: &[String],
        policy: RetryPolicy,
        tls: Option<&ClientTls>,
        credentials: Credentials,
    ) -> Result<Client, ClientError> {
        let client = Client::connect_with_tls(endpoints, policy, tls).await?;
        let inner = Arc::into_inner(client.inner).ok_or(ClientError::NoEndpoints)?;
        let client = Client { inner: Arc::new(Inner { credentials: Some(credentials), ..inner }) };
        match client.authenticate().await {
            // Auth is off: no token is needed (etcd serves such a client too).
            Err(error) if error.etcd_error() == Some(EtcdError::AuthNotEnabled) => Ok(client),
            Err(error) => Err(error),
            Ok(()) => Ok(client),
        }
    }

    /// Asks for a token with the credentials and keeps it for later calls.
    async fn authenticate(&self) -> Result<(), ClientError> {
        let Some(credentials) = self.inner.credentials.clone() else { return Ok(()) };
        *self.inner.token.write().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        let request = AuthenticateRequest { name: credentials.user, password: credentials.password };
        let answer = Box::pin(self.call("Authenticate", unary!(AuthClient, authenticate, request.clone()))).await?;
        let token = MetadataValue::try_from(answer.token.as_str()).map_err(|_| ClientError::Connect {
            attempts: 1,
            failures: "the server sent a token that is not ASCII".into(),
        })?;
        *self.inner.token.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(token);
        Ok(())
    }
}

/// `future` within `deadline` (`Duration::MAX`: no deadline).
async fn timeout_or_wait<F: Future>(deadline: Duration, future: F) -> Result<F::Output, tokio::time::error::Elapsed> {
    if deadline == Duration::MAX {
        return Ok(future.await);
    }
    tokio::time::timeout(deadline, future).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte() {
        assert_eq!(prefix_range_end(b"/servers/"), b"/servers0".to_vec());
        assert_eq!(prefix_range_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_range_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_range_end(b""), vec![0]);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let policy = RetryPolicy::default();
        let pauses: Vec<u128> = (1..=7).map(|n| policy.backoff(n).as_millis()).collect();
        assert_eq!(pauses, vec![100, 200, 400, 800, 1600, 1600, 1600]);
        assert_eq!(policy.backoff(200), policy.max_backoff);
    }

    #[tokio::test]
    async fn connect_reports_every_failed_endpoint() {
        // Port 1 on loopback: nothing listens there, so connecting fails at once.
        let policy = RetryPolicy { attempts: 2, initial_backoff: Duration::from_millis(1), ..RetryPolicy::default() };
        let err = Client::connect_with(&["127.0.0.1:1".to_string()], policy).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("after 2 attempts"), "{text}");
        assert!(text.contains("http://127.0.0.1:1"), "{text}");
    }

    #[tokio::test]
    async fn connect_rejects_bad_input() {
        assert!(matches!(Client::connect(&[]).await, Err(ClientError::NoEndpoints)));
        assert!(matches!(Client::connect(&["nohost".to_string()]).await, Err(ClientError::Endpoint(_))));
    }
}
