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
    SnapshotRequest, StatusRequest, StatusResponse, TxnRequest, TxnResponse,
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
    status.message() == "etcdserver: invalid auth token"
        || status.message() == "etcdserver: revision of auth store is old"
}

/// Why a client operation failed. Messages name the endpoint and the call.
#[derive(Debug, Error)]
pub enum ClientError {
    /// `Client::connect` was given an empty list.
    #[error("no endpoints given")]
    NoEndpoints,
    /// An endpoint string is malformed.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// An `https://` endpoint, and no CA to verify it with.
    #[error("endpoint {0} uses TLS: give the CA that signs its certificate (--cacert, or LEASEKV_CACERT)")]
    TlsNeeded(String),
    /// No endpoint accepted a connection.
    #[error("could not connect to any endpoint after {attempts} attempts: {failures}")]
    Connect {
        /// Connection attempts made (each tries one endpoint).
        attempts: u32,
        /// `endpoint: cause` for each failed attempt, `; `-separated.
        failures: String,
    },
    /// The server answered the call with an error.
    #[error("{method} on {endpoint} failed ({code:?}): {message}", code = status.code(),
        message = append_causes(status.message().to_string(), std::error::Error::source(status.as_ref())))]
    Rpc {
        /// The endpoint that answered.
        endpoint: String,
        /// The gRPC method, e.g. `Put`.
        method: &'static str,
        /// The error as received.
        status: Box<Status>,
    },
    /// Every attempt found its endpoint unreachable or unavailable.
    #[error("{method} failed: no endpoint available after {attempts} attempts: {failures}")]
    Unavailable {
        /// The gRPC method.
        method: &'static str,
        /// Attempts made.
        attempts: u32,
        /// `endpoint: cause` for each failed attempt, `; `-separated.
        failures: String,
    },
    /// The endpoint did not answer in time; not retried, because the call may have been applied.
    #[error("{method} on {endpoint} timed out after {after:?}")]
    Timeout {
        /// The endpoint that was asked.
        endpoint: String,
        /// The gRPC method.
        method: &'static str,
        /// The deadline that passed.
        after: Duration,
    },
    /// A response stream ended although an answer was expected.
    #[error("{method} stream on {endpoint} was closed by the server")]
    StreamClosed {
        /// The endpoint that closed the stream.
        endpoint: String,
        /// The gRPC method.
        method: &'static str,
    },
}

impl ClientError {
    /// The gRPC status code, when the server answered with an error.
    pub fn code(&self) -> Option<Code> {
        match self {
            ClientError::Rpc { status, .. } => Some(status.code()),
            _ => None,
        }
    }

    /// Whether the server said the write may or may not have been applied (its master
    /// went away while it was in flight; see [`crate::outcome`]). Such a write is never
    /// retried by the client: repeat it only if doing it twice is harmless.
    pub fn is_indeterminate(&self) -> bool {
        matches!(self, ClientError::Rpc { status, .. } if crate::outcome::is_indeterminate(status))
    }

    /// Whether the server said the thing asked for does not exist (`NOT_FOUND`).
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(Code::NotFound)
    }
}

/// How hard the client tries before giving up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts per call (and per `connect`), across endpoints.
    pub attempts: u32,
    /// Pause after the first failed attempt; doubled after each further one.
    pub initial_backoff: Duration,
    /// Upper bound of a pause.
    pub max_backoff: Duration,
    /// How long one TCP/HTTP2 connection attempt may take.
    pub connect_timeout: Duration,
    /// Deadline of one unary call (and of one keepalive answer).
    pub request_timeout: Duration,
}

impl Default for RetryPolicy {
    /// 5 attempts with pauses of 0.1, 0.2, 0.4 and 0.8 s: about 1.5 s of waiting plus up to
    /// 1 s per unreachable endpoint, so a dead cluster is reported within a few seconds.
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1600),
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// The pause after failed attempt number `failed` (1-based).
    pub fn backoff(&self, failed: u32) -> Duration {
        let factor = 1u32.checked_shl(failed.saturating_sub(1)).unwrap_or(u32::MAX);
        self.initial_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// Options of [`Client::get`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GetOptions {
    /// Every key starting with the given key.
    pub prefix: bool,
    /// Leave the values out.
    pub keys_only: bool,
    /// Member-local read, possibly stale, instead of linearizable.
    pub serializable: bool,
    /// At most this many keys; 0 for no limit.
    pub limit: i64,
    /// Only count the keys.
    pub count_only: bool,
    /// Read at this past revision; 0 for the current one.
    pub revision: i64,
}

/// The `range_end` that makes a range cover every key starting with `prefix`.
///
/// etcd's rule: increment the last byte that is not 0xff and cut after it; when there is none
/// (empty prefix or all 0xff), `"\0"`, which means "to the end of the key space".
pub fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

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
            Err(ClientError::Rpc { status, .. }) if status.message() == "etcdserver: authentication is not enabled" => {
                Ok(client)
            }
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

    // ----- Auth -----

    /// Turns auth on (the `root` user with the `root` role must exist).
    pub async fn auth_enable(&self) -> Result<(), ClientError> {
        self.call("AuthEnable", unary!(AuthClient, auth_enable, AuthEnableRequest {})).await.map(drop)
    }

    /// Turns auth off (root only).
    pub async fn auth_disable(&self) -> Result<(), ClientError> {
        self.call("AuthDisable", unary!(AuthClient, auth_disable, AuthDisableRequest {})).await.map(drop)
    }

    /// Whether auth is on, and the auth store's revision.
    pub async fn auth_status(&self) -> Result<AuthStatusResponse, ClientError> {
        self.call("AuthStatus", unary!(AuthClient, auth_status, AuthStatusRequest {})).await
    }

    /// Adds a user; `password` `None` adds one that cannot authenticate with a password
    /// (etcd's `--no-password`: for client-certificate users).
    pub async fn user_add(&self, name: &str, password: Option<&str>) -> Result<(), ClientError> {
        let request = AuthUserAddRequest {
            name: name.to_string(),
            password: password.unwrap_or_default().to_string(),
            options: Some(crate::proto::authpb::UserAddOptions { no_password: password.is_none() }),
            hashed_password: String::new(),
        };
        self.call("UserAdd", unary!(AuthClient, user_add, request.clone())).await.map(drop)
    }

    /// Deletes a user.
    pub async fn user_delete(&self, name: &str) -> Result<(), ClientError> {
        let request = AuthUserDeleteRequest { name: name.to_string() };
        self.call("UserDelete", unary!(AuthClient, user_delete, request.clone())).await.map(drop)
    }

    /// A user's roles.
    pub async fn user_get(&self, name: &str) -> Result<Vec<String>, ClientError> {
        let request = AuthUserGetRequest { name: name.to_string() };
        Ok(self.call("UserGet", unary!(AuthClient, user_get, request.clone())).await?.roles)
    }

    /// Every user's name, sorted.
    pub async fn user_list(&self) -> Result<Vec<String>, ClientError> {
        Ok(self.call("UserList", unary!(AuthClient, user_list, AuthUserListRequest {})).await?.users)
    }

    /// Changes a user's password (root only).
    pub async fn user_change_password(&self, name: &str, password: &str) -> Result<(), ClientError> {
        let request = AuthUserChangePasswordRequest {
            name: name.to_string(),
            password: password.to_string(),
            hashed_password: String::new(),
        };
        self.call("UserChangePassword", unary!(AuthClient, user_change_password, request.clone())).await.map(drop)
    }

    /// Grants `role` to `user`.
    pub async fn user_grant_role(&self, user: &str, role: &str) -> Result<(), ClientError> {
        let request = AuthUserGrantRoleRequest { user: user.to_string(), role: role.to_string() };
        self.call("UserGrantRole", unary!(AuthClient, user_grant_role, request.clone())).await.map(drop)
    }

    /// Revokes `role` from `user`.
    pub async fn user_revoke_role(&self, user: &str, role: &str) -> Result<(), ClientError> {
        let request = AuthUserRevokeRoleRequest { name: user.to_string(), role: role.to_string() };
        self.call("UserRevokeRole", unary!(AuthClient, user_revoke_role, request.clone())).await.map(drop)
    }

    /// Adds a role without permissions.
    pub async fn role_add(&self, name: &str) -> Result<(), ClientError> {
        let request = AuthRoleAddRequest { name: name.to_string() };
        self.call("RoleAdd", unary!(AuthClient, role_add, request.clone())).await.map(drop)
    }

    /// Deletes a role (and revokes it from every user).
    pub async fn role_delete(&self, name: &str) -> Result<(), ClientError> {
        let request = AuthRoleDeleteRequest { role: name.to_string() };
        self.call("RoleDelete", unary!(AuthClient, role_delete, request.clone())).await.map(drop)
    }

    /// A role's permissions.
    pub async fn role_get(&self, name: &str) -> Result<Vec<crate::proto::authpb::Permission>, ClientError> {
        let request = AuthRoleGetRequest { role: name.to_string() };
        Ok(self.call("RoleGet", unary!(AuthClient, role_get, request.clone())).await?.perm)
    }

    /// Every role's name, sorted.
    pub async fn role_list(&self) -> Result<Vec<String>, ClientError> {
        Ok(self.call("RoleList", unary!(AuthClient, role_list, AuthRoleListRequest {})).await?.roles)
    }

    /// Grants `role` a permission on a key (`range_end` empty), a range, or every key from
    /// `key` on (`range_end` `\0`).
    pub async fn role_grant_permission(
        &self,
        role: &str,
        permission: crate::proto::authpb::Permission,
    ) -> Result<(), ClientError> {
        let request = AuthRoleGrantPermissionRequest { name: role.to_string(), perm: Some(permission) };
        self.call("RoleGrantPermission", unary!(AuthClient, role_grant_permission, request.clone())).await.map(drop)
    }

    /// Revokes `role`'s permission on exactly this key and range end.
    pub async fn role_revoke_permission(&self, role: &str, key: &[u8], range_end: &[u8]) -> Result<(), ClientError> {
        let request = AuthRoleRevokePermissionRequest {
            role: role.to_string(),
            key: key.to_vec(),
            range_end: range_end.to_vec(),
        };
        self.call("RoleRevokePermission", unary!(AuthClient, role_revoke_permission, request.clone())).await.map(drop)
    }

    // ----- KV -----

    /// Writes `key = value`, attached to `lease_id` (0 for none); `prev_kv` asks for the old pair.
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        lease_id: i64,
        prev_kv: bool,
    ) -> Result<PutResponse, ClientError> {
        let request =
            PutRequest { key: key.into(), value: value.into(), lease: lease_id, prev_kv, ..Default::default() };
        self.call("Put", unary!(KvClient, put, request.clone())).await
    }

    /// Reads one key or, with `options.prefix`, every key starting with `key`.
    pub async fn get(&self, key: impl Into<Vec<u8>>, options: GetOptions) -> Result<RangeResponse, ClientError> {
        let key = key.into();
        let range_end = if options.prefix { prefix_range_end(&key) } else { Vec::new() };
        let request = RangeRequest {
            key,
            range_end,
            limit: options.limit,
            serializable: options.serializable,
            keys_only: options.keys_only,
            count_only: options.count_only,
            revision: options.revision,
            ..Default::default()
        };
        self.range(request).await
    }

    /// A raw Range call, for options [`Client::get`] does not offer.
    pub async fn range(&self, request: RangeRequest) -> Result<RangeResponse, ClientError> {
        self.call("Range", unary!(KvClient, range, request.clone())).await
    }

    /// Deletes one key or, with `prefix`, every key starting with `key`.
    pub async fn delete(
        &self,
        key: impl Into<Vec<u8>>,
        prefix: bool,
        prev_kv: bool,
    ) -> Result<DeleteRangeResponse, ClientError> {
        let key = key.into();
        let range_end = if prefix { prefix_range_end(&key) } else { Vec::new() };
        let request = DeleteRangeRequest { key, range_end, prev_kv };
        self.call("DeleteRange", unary!(KvClient, delete_range, request.clone())).await
    }

    /// A transaction, passed through as given.
    pub async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, ClientError> {
        self.call("Txn", unary!(KvClient, txn, request.clone())).await
    }

    /// Discards history before `revision`.
    pub async fn compact(&self, revision: i64, physical: bool) -> Result<CompactionResponse, ClientError> {
        let request = CompactionRequest { revision, physical };
        self.call("Compact", unary!(KvClient, compact, request)).await
    }

    // ----- Lease -----

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

    // ----- Cluster and maintenance -----

    /// The cluster's members.
    pub async fn member_list(&self) -> Result<MemberListResponse, ClientError> {
        self.call("MemberList", unary!(ClusterClient, member_list, MemberListRequest { linearizable: false })).await
    }

    /// Adds a member reached at `peer_urls` (`http://host:port`), as a learner or a voter;
    /// the answer names its id (`member`) and lists every member.
    pub async fn member_add(&self, peer_urls: Vec<String>, learner: bool) -> Result<MemberAddResponse, ClientError> {
        let request = MemberAddRequest { peer_urls, is_learner: learner };
        self.call("MemberAdd", unary!(ClusterClient, member_add, request.clone())).await
    }

    /// Removes member `id`.
    pub async fn member_remove(&self, id: u64) -> Result<MemberRemoveResponse, ClientError> {
        self.call("MemberRemove", unary!(ClusterClient, member_remove, MemberRemoveRequest { id })).await
    }

    /// Makes learner `id` a voter. While the previous change settles the cluster answers
    /// UNAVAILABLE ("unhealthy cluster"), which this retries like any unavailable answer.
    pub async fn member_promote(&self, id: u64) -> Result<MemberPromoteResponse, ClientError> {
        self.call("MemberPromote", unary!(ClusterClient, member_promote, MemberPromoteRequest { id })).await
    }

    /// Changes member `id`'s peer URLs.
    pub async fn member_update(&self, id: u64, peer_urls: Vec<String>) -> Result<MemberUpdateResponse, ClientError> {
        let request = MemberUpdateRequest { id, peer_urls };
        self.call("MemberUpdate", unary!(ClusterClient, member_update, request.clone())).await
    }

    /// Status of the member that answers (the current endpoint).
    pub async fn status(&self) -> Result<StatusResponse, ClientError> {
        self.call("Status", unary!(MaintenanceClient, status, StatusRequest {})).await
    }

    /// The raised alarms (NOSPACE, CORRUPT) of every member.
    pub async fn alarm_list(&self) -> Result<Vec<AlarmMember>, ClientError> {
        let request = AlarmRequest { action: AlarmAction::Get as i32, member_id: 0, alarm: AlarmType::None as i32 };
        Ok(self.call("Alarm", unary!(MaintenanceClient, alarm, request)).await?.alarms)
    }

    /// Disarms every raised alarm (etcdctl's `alarm disarm`); returns the alarms disarmed.
    /// A NOSPACE alarm whose cause is still there is raised again by the next write.
    pub async fn alarm_disarm_all(&self) -> Result<Vec<AlarmMember>, ClientError> {
        let mut disarmed = Vec::new();
        for alarm in self.alarm_list().await? {
            let request =
                AlarmRequest { action: AlarmAction::Deactivate as i32, member_id: alarm.member_id, alarm: alarm.alarm };
            let response: AlarmResponse = self.call("Alarm", unary!(MaintenanceClient, alarm, request)).await?;
            disarmed.extend(response.alarms);
        }
        Ok(disarmed)
    }

    /// Asks the master to hand mastership to member `target_id` (etcd's MoveLeader); the
    /// answering member must be the master (`etcdserver: not leader` otherwise).
    pub async fn move_leader(&self, target_id: u64) -> Result<MoveLeaderResponse, ClientError> {
        self.call("MoveLeader", unary!(MaintenanceClient, move_leader, MoveLeaderRequest { target_id })).await
    }

    /// Asks the answering member to give unused disk space back (etcd's Defragment).
    pub async fn defragment(&self) -> Result<DefragmentResponse, ClientError> {
        self.call("Defragment", unary!(MaintenanceClient, defragment, DefragmentRequest {})).await
    }

    /// The hash of the answering member's keys and history up to `revision` (0: its
    /// current revision), etcd's HashKV: members that agree give equal hashes for equal
    /// revisions and compaction points.
    pub async fn hash_kv(&self, revision: i64) -> Result<HashKvResponse, ClientError> {
        self.call("HashKV", unary!(MaintenanceClient, hash_kv, HashKvRequest { revision })).await
    }

    /// A snapshot of the answering member's state (etcd's Snapshot): the whole stream,
    /// checked to have ended where its `remaining_bytes` said it would. For leasekv it is
    /// a backup file that `kvserver restore` reads.
    pub async fn snapshot(&self) -> Result<Vec<u8>, ClientError> {
        let mut stream =
            self.call_with_deadline("Snapshot", None, unary!(MaintenanceClient, snapshot, SnapshotRequest {})).await?;
        let endpoint = self.current_endpoint().to_string();
        let failed =
            |status| ClientError::Rpc { endpoint: endpoint.clone(), method: "Snapshot", status: Box::new(status) };
        let mut file = Vec::new();
        let mut remaining = None;
        while let Some(chunk) = stream.message().await.map_err(failed)? {
            file.extend_from_slice(&chunk.blob);
            remaining = Some(chunk.remaining_bytes);
        }
        match remaining {
            Some(0) => Ok(file),
            Some(short) => Err(failed(Status::data_loss(format!("the snapshot stream ended {short} bytes short")))),
            None => Err(failed(Status::data_loss("the snapshot stream ended before its first chunk"))),
        }
    }

    // ----- leasekv extension -----

    /// Grants a lease under a unique `name`.
    pub async fn grant_named(&self, name: &str, ttl: i64) -> Result<GrantNamedResponse, ClientError> {
        let request = GrantNamedRequest { name: name.to_string(), ttl };
        self.call("GrantNamed", unary!(LeaseKvClient, grant_named, request.clone())).await
    }

    /// The id of the live lease called `name`; [`ClientError::is_not_found`] when there is none.
    pub async fn resolve_name(&self, name: &str) -> Result<i64, ClientError> {
        let request = ResolveNameRequest { name: name.to_string() };
        let response = self.call("ResolveName", unary!(LeaseKvClient, resolve_name, request.clone())).await?;
        Ok(response.id)
    }

    /// Every live lease with its name, granted TTL and remaining time.
    pub async fn list_leases(&self) -> Result<Vec<LeaseInfo>, ClientError> {
        let response = self.call("ListLeases", unary!(LeaseKvClient, list_leases, ListLeasesRequest {})).await?;
        Ok(response.leases)
    }

    /// The answering node's view of the master election.
    pub async fn election_status(&self) -> Result<ElectionStatusResponse, ClientError> {
        self.call("ElectionStatus", unary!(LeaseKvClient, election_status, ElectionStatusRequest {})).await
    }

    /// Asks the answering node to give up mastership.
    pub async fn step_down(&self) -> Result<(), ClientError> {
        self.call("StepDown", unary!(LeaseKvClient, step_down, StepDownRequest {})).await?;
        Ok(())
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

/// `future` within `deadline` (`Duration::MAX`: no deadline).
async fn timeout_or_wait<F: Future>(deadline: Duration, future: F) -> Result<F::Output, tokio::time::error::Elapsed> {
    if deadline == Duration::MAX {
        return Ok(future.await);
    }
    tokio::time::timeout(deadline, future).await
}

/// The status message with its cause chain, which for connection failures holds the reason
/// (e.g. "Connection refused").
fn status_summary(status: &Status) -> String {
    let mut text = status.message().to_string();
    if text.is_empty() {
        text = format!("{:?}", status.code());
    }
    append_causes(text, std::error::Error::source(status))
}

/// An error with its causes, `: `-joined; tonic's transport errors say little at the top level.
fn error_chain(error: &dyn std::error::Error) -> String {
    append_causes(error.to_string(), error.source())
}

/// Appends each cause in the chain from `source` that `text` does not already say.
fn append_causes(mut text: String, mut source: Option<&(dyn std::error::Error + 'static)>) -> String {
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
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
