//! etcd's HTTP/JSON gateway, served on the client port beside gRPC: every RPC leasekv
//! serves as `POST /v3/<service>/<method>` (and the older `/v3beta/` prefix) with a JSON
//! body, the way etcd 3.4's grpc-gateway serves it, so that clients which never speak gRPC
//! (curl, etcd3gw, tooz, shell scripts) work unchanged. Also `GET /version` and the health
//! endpoints (`/health`, `/readyz`, `/livez`) and `/metrics`.
//!
//! Unlike etcd, whose gateway is a proxy that calls the node's own gRPC port over a
//! loopback connection, the routes call the services in process: same code, same errors,
//! one hop less.
//!
//! - [`json`]: the messages as JSON (etcd's field names, proto3's mapping);
//! - [`errors`]: failures as etcd's error bodies and HTTP statuses;
//! - [`streams`]: watch, keepalive and observe as chunked streams of JSON objects;
//! - [`health`]: `/health`, `/readyz`, `/livez`, `/version`.

pub mod errors;
pub mod health;
pub mod json;
pub mod streams;

use crate::api::{
    AuthService, ClusterService, ElectionService, ExtService, KvService, LeaseService, LockService, MaintenanceService,
    Shared, WatchService,
};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post, MethodRouter};
use axum::Router;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_client::proto::leasekv as ext;
use leasekv_client::proto::v3electionpb as election;
use leasekv_client::proto::v3lockpb as lock;
use leasekv_client::EtcdError;
use prost::Message;
use std::future::Future;
use std::sync::Arc;
use tonic::{Request, Status};

/// How much of an oversized body is read (and dropped) before answering, so that a client
/// still sending it gets the answer; a larger one finds the connection closed.
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

/// What the routes call: the node's gRPC services.
pub struct Gateway {
    pub(crate) shared: Arc<Shared>,
    kv: KvService,
    lease: LeaseService,
    cluster: ClusterService,
    maintenance: MaintenanceService,
    watch: WatchService,
    lock: LockService,
    election: ElectionService,
    ext: ExtService,
    auth: AuthService,
    /// Turns true when the node shuts down: the console's overview streams end then.
    pub(crate) stopping: tokio::sync::watch::Receiver<bool>,
    /// The console's overview, composed once for every page that shows it.
    pub(crate) overview: crate::console::overview::OverviewHub,
}

impl Gateway {
    /// A gateway over the node's services; `watch` and `election` are instances of their
    /// own, made like the ones the gRPC server serves.
    pub fn new(
        shared: Arc<Shared>,
        watch: WatchService,
        election: ElectionService,
        stopping: tokio::sync::watch::Receiver<bool>,
    ) -> Arc<Self> {
        Arc::new(Gateway {
            kv: KvService(shared.clone()),
            lease: LeaseService(shared.clone()),
            cluster: ClusterService(shared.clone()),
            maintenance: MaintenanceService(shared.clone()),
            lock: LockService(shared.clone()),
            ext: ExtService(shared.clone()),
            auth: AuthService(shared.clone()),
            watch,
            election,
            shared,
            stopping,
            overview: Default::default(),
        })
    }
}

/// The routes' state.
pub(crate) type Handle = Arc<Gateway>;

/// One unary RPC: the request body decoded as `req` (a message's full name), `call`
/// applied, the answer encoded as `resp`.
fn unary<Req, Resp, F, Fut>(req: &'static str, resp: &'static str, call: F) -> MethodRouter<Handle>
where
    Req: Message + Default + 'static,
    Resp: Message + 'static,
    F: Fn(Handle, Request<Req>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<tonic::Response<Resp>, Status>> + Send + 'static,
{
    post(move |State(gateway): State<Handle>, http: axum::extract::Request| async move {
        let (parts, body) = http.into_parts();
        let limit = gateway.shared.limits.gateway_body_limit();
        let body = match read_body(body, limit).await {
            Ok(body) => body,
            Err(status) => return errors::response(&status),
        };
        let request = match json::decode::<Req>(req, &body) {
            Ok(request) => request,
            Err(status) => return errors::response(&status),
        };
        match call(gateway, grpc_request(parts, request)).await {
            Ok(answer) => {
                let mut response = json_response(json::encode(resp, answer.get_ref()));
                // A Range answer's read budget stays held until its JSON is sent.
                if let Some(hold) = answer.extensions().get::<crate::read_budget::AnswerHold>() {
                    response.extensions_mut().insert(hold.clone());
                }
                response
            }
            Err(status) => errors::response(&status),
        }
    })
}

/// A gRPC request as the services take it, with the HTTP request's headers as metadata (so
/// etcd's `Authorization: <token>` header names the caller, as in etcd's gateway) and its
/// connection's extensions (a TLS client certificate).
fn grpc_request<T>(parts: axum::http::request::Parts, message: T) -> Request<T> {
    let metadata = tonic::metadata::MetadataMap::from_headers(parts.headers);
    Request::from_parts(metadata, parts.extensions, message)
}

/// The caller of a gateway request (see [`crate::auth`]).
fn caller_of_http(gateway: &Gateway, parts: axum::http::request::Parts) -> Result<crate::auth::Caller, Status> {
    crate::auth::caller_of(&gateway.shared.node, &grpc_request(parts, ()))
}

/// Reads a request body of at most `limit` bytes (`[limits] max_request_bytes`, with room for
/// base64 and JSON: [`crate::config::ClientLimits::gateway_body_limit`]); a larger one is
/// refused with etcd's message.
async fn read_body(body: Body, limit: usize) -> Result<Bytes, Status> {
    use tokio_stream::StreamExt;
    let mut chunks = body.into_data_stream();
    let mut read = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| Status::invalid_argument(format!("unreadable request body: {e}")))?;
        total += chunk.len();
        if total <= limit {
            read.extend_from_slice(&chunk);
        } else if total > DRAIN_LIMIT {
            // Past this, stop reading: the connection closes with the answer.
            break;
        }
    }
    if total > limit {
        // The rest was read and dropped, so that a client still sending its body sees the
        // answer instead of a broken pipe.
        return Err(EtcdError::RequestTooLarge.explained(
            "REQUEST_TOO_LARGE",
            format!(
                "the gateway reads bodies of at most {limit} bytes ([limits] max_request_bytes, --max-request-bytes)"
            ),
        ));
    }
    Ok(Bytes::from(read))
}

fn json_response(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A streaming RPC's chunked answer.
fn stream_response(body: Body) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn watch(State(gateway): State<Handle>, http: axum::extract::Request) -> Response {
    let (parts, body) = http.into_parts();
    let caller = match caller_of_http(&gateway, parts) {
        Ok(caller) => caller,
        Err(status) => return errors::response(&status),
    };
    let failure = streams::Failure::default();
    let requests = match streams::requests::<pb::WatchRequest>("etcdserverpb.WatchRequest", body, failure.clone()).await
    {
        Ok(requests) => requests,
        Err(status) => return errors::response(&status),
    };
    let responses = gateway.watch.open(caller, requests);
    stream_response(streams::answer("etcdserverpb.WatchResponse", responses, failure))
}

async fn keep_alive(State(gateway): State<Handle>, http: axum::extract::Request) -> Response {
    let (parts, body) = http.into_parts();
    if let Err(status) = caller_of_http(&gateway, parts).and_then(|c| c.authenticated()) {
        return errors::response(&status);
    }
    let failure = streams::Failure::default();
    let name = "etcdserverpb.LeaseKeepAliveRequest";
    let requests = match streams::requests::<pb::LeaseKeepAliveRequest>(name, body, failure.clone()).await {
        Ok(requests) => requests,
        Err(status) => return errors::response(&status),
    };
    let responses = gateway.lease.keep_alive(requests);
    stream_response(streams::answer("etcdserverpb.LeaseKeepAliveResponse", responses, failure))
}

async fn observe(State(gateway): State<Handle>, http: axum::extract::Request) -> Response {
    let (parts, body) = http.into_parts();
    use election::election_server::Election;
    let request = match read_body(body, gateway.shared.limits.gateway_body_limit())
        .await
        .and_then(|b| json::decode::<election::LeaderRequest>("v3electionpb.LeaderRequest", &b))
    {
        Ok(request) => request,
        Err(status) => return errors::response(&status),
    };
    match gateway.election.observe(grpc_request(parts, request)).await {
        Ok(answers) => stream_response(streams::answer(
            "v3electionpb.LeaderResponse",
            answers.into_inner(),
            streams::Failure::default(),
        )),
        Err(status) => errors::response(&status),
    }
}

async fn snapshot(State(gateway): State<Handle>, http: axum::extract::Request) -> Response {
    let (parts, body) = http.into_parts();
    use pb::maintenance_server::Maintenance;
    if let Err(status) = read_body(body, gateway.shared.limits.gateway_body_limit())
        .await
        .and_then(|b| json::decode::<pb::SnapshotRequest>("etcdserverpb.SnapshotRequest", &b))
    {
        return errors::response(&status);
    }
    match gateway.maintenance.snapshot(grpc_request(parts, pb::SnapshotRequest {})).await {
        Ok(answers) => stream_response(streams::answer(
            "etcdserverpb.SnapshotResponse",
            answers.into_inner(),
            streams::Failure::default(),
        )),
        Err(status) => errors::response(&status),
    }
}

/// Requests no route takes: gRPC calls of an unknown method get gRPC's UNIMPLEMENTED (as
/// tonic answers them); other requests etcd's plain 404s, the gateway's under its
/// prefixes and Go's HTTP mux's elsewhere.
async fn not_found(uri: Uri, headers: HeaderMap) -> Response {
    let grpc = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        return Status::unimplemented("unknown method").into_http::<Body>().into_response();
    }
    let gateway = PREFIXES.iter().any(|p| uri.path().strip_prefix(p).is_some_and(|rest| rest.starts_with('/')));
    let text = if gateway { "Not Found\n" } else { "404 page not found\n" };
    (StatusCode::NOT_FOUND, text).into_response()
}

/// A gateway path asked with another method than POST.
async fn method_not_allowed() -> Response {
    (StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n").into_response()
}

/// The CORS headers etcd (with its default `--cors '*'`) adds to every gateway answer, so
/// that a browser page may call the gateway.
async fn cors(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    headers.insert("access-control-allow-methods", HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"));
    headers.insert("access-control-allow-headers", HeaderValue::from_static("accept, content-type, authorization"));
    response
}

/// Every gateway path, under `/v3` (and its aliases) and `/v3beta`.
pub(crate) fn routes() -> Vec<(&'static str, MethodRouter<Handle>)> {
    use election::election_server::Election;
    use ext::lease_kv_server::LeaseKv;
    use lock::lock_server::Lock;
    use pb::auth_server::Auth;
    use pb::cluster_server::Cluster;
    use pb::kv_server::Kv;
    use pb::lease_server::Lease;
    use pb::maintenance_server::Maintenance;
    let lease_revoke =
        unary("etcdserverpb.LeaseRevokeRequest", "etcdserverpb.LeaseRevokeResponse", |g: Handle, r| async move {
            g.lease.lease_revoke(r).await
        });
    let lease_time_to_live = unary(
        "etcdserverpb.LeaseTimeToLiveRequest",
        "etcdserverpb.LeaseTimeToLiveResponse",
        |g: Handle, r| async move { g.lease.lease_time_to_live(r).await },
    );
    let lease_leases =
        unary("etcdserverpb.LeaseLeasesRequest", "etcdserverpb.LeaseLeasesResponse", |g: Handle, r| async move {
            g.lease.lease_leases(r).await
        });
    vec![
        (
            "/kv/range",
            unary("etcdserverpb.RangeRequest", "etcdserverpb.RangeResponse", |g: Handle, r| async move {
                g.kv.range(r).await
            }),
        ),
        (
            "/kv/put",
            unary(
                "etcdserverpb.PutRequest",
                "etcdserverpb.PutResponse",
                |g: Handle, r| async move { g.kv.put(r).await },
            ),
        ),
        (
            "/kv/deleterange",
            unary("etcdserverpb.DeleteRangeRequest", "etcdserverpb.DeleteRangeResponse", |g: Handle, r| async move {
                g.kv.delete_range(r).await
            }),
        ),
        (
            "/kv/txn",
            unary(
                "etcdserverpb.TxnRequest",
                "etcdserverpb.TxnResponse",
                |g: Handle, r| async move { g.kv.txn(r).await },
            ),
        ),
        (
            "/kv/compaction",
            unary("etcdserverpb.CompactionRequest", "etcdserverpb.CompactionResponse", |g: Handle, r| async move {
                g.kv.compact(r).await
            }),
        ),
        ("/watch", post(watch)),
        (
            "/lease/grant",
            unary("etcdserverpb.LeaseGrantRequest", "etcdserverpb.LeaseGrantResponse", |g: Handle, r| async move {
                g.lease.lease_grant(r).await
            }),
        ),
        ("/lease/revoke", lease_revoke.clone()),
        ("/kv/lease/revoke", lease_revoke),
        ("/lease/keepalive", post(keep_alive)),
        ("/lease/timetolive", lease_time_to_live.clone()),
        ("/kv/lease/timetolive", lease_time_to_live),
        ("/lease/leases", lease_leases.clone()),
        ("/kv/lease/leases", lease_leases),
        (
            "/cluster/member/list",
            unary("etcdserverpb.MemberListRequest", "etcdserverpb.MemberListResponse", |g: Handle, r| async move {
                g.cluster.member_list(r).await
            }),
        ),
        (
            "/cluster/member/add",
            unary("etcdserverpb.MemberAddRequest", "etcdserverpb.MemberAddResponse", |g: Handle, r| async move {
                g.cluster.member_add(r).await
            }),
        ),
        (
            "/cluster/member/remove",
            unary("etcdserverpb.MemberRemoveRequest", "etcdserverpb.MemberRemoveResponse", |g: Handle, r| async move {
                g.cluster.member_remove(r).await
            }),
        ),
        (
            "/cluster/member/update",
            unary("etcdserverpb.MemberUpdateRequest", "etcdserverpb.MemberUpdateResponse", |g: Handle, r| async move {
                g.cluster.member_update(r).await
            }),
        ),
        (
            "/cluster/member/promote",
            unary(
                "etcdserverpb.MemberPromoteRequest",
                "etcdserverpb.MemberPromoteResponse",
                |g: Handle, r| async move { g.cluster.member_promote(r).await },
            ),
        ),
        (
            "/maintenance/status",
            unary("etcdserverpb.StatusRequest", "etcdserverpb.StatusResponse", |g: Handle, r| async move {
                g.maintenance.status(r).await
            }),
        ),
        (
            "/lock/lock",
            unary("v3lockpb.LockRequest", "v3lockpb.LockResponse", |g: Handle, r| async move { g.lock.lock(r).await }),
        ),
        (
            "/lock/unlock",
            unary(
                "v3lockpb.UnlockRequest",
                "v3lockpb.UnlockResponse",
                |g: Handle, r| async move { g.lock.unlock(r).await },
            ),
        ),
        (
            "/election/campaign",
            unary("v3electionpb.CampaignRequest", "v3electionpb.CampaignResponse", |g: Handle, r| async move {
                g.election.campaign(r).await
            }),
        ),
        (
            "/election/proclaim",
            unary("v3electionpb.ProclaimRequest", "v3electionpb.ProclaimResponse", |g: Handle, r| async move {
                g.election.proclaim(r).await
            }),
        ),
        (
            "/election/leader",
            unary("v3electionpb.LeaderRequest", "v3electionpb.LeaderResponse", |g: Handle, r| async move {
                g.election.leader(r).await
            }),
        ),
        ("/election/observe", post(observe)),
        (
            "/maintenance/alarm",
            unary("etcdserverpb.AlarmRequest", "etcdserverpb.AlarmResponse", |g: Handle, r| async move {
                g.maintenance.alarm(r).await
            }),
        ),
        (
            "/maintenance/transfer-leadership",
            unary("etcdserverpb.MoveLeaderRequest", "etcdserverpb.MoveLeaderResponse", |g: Handle, r| async move {
                g.maintenance.move_leader(r).await
            }),
        ),
        (
            "/maintenance/defragment",
            unary("etcdserverpb.DefragmentRequest", "etcdserverpb.DefragmentResponse", |g: Handle, r| async move {
                g.maintenance.defragment(r).await
            }),
        ),
        (
            "/maintenance/hash",
            unary("etcdserverpb.HashRequest", "etcdserverpb.HashResponse", |g: Handle, r| async move {
                g.maintenance.hash(r).await
            }),
        ),
        (
            "/maintenance/hashkv",
            unary("etcdserverpb.HashKVRequest", "etcdserverpb.HashKVResponse", |g: Handle, r| async move {
                g.maintenance.hash_kv(r).await
            }),
        ),
        ("/maintenance/snapshot", post(snapshot)),
        (
            "/election/resign",
            unary("v3electionpb.ResignRequest", "v3electionpb.ResignResponse", |g: Handle, r| async move {
                g.election.resign(r).await
            }),
        ),
        // etcd's Auth service.
        (
            "/auth/enable",
            unary("etcdserverpb.AuthEnableRequest", "etcdserverpb.AuthEnableResponse", |g: Handle, r| async move {
                g.auth.auth_enable(r).await
            }),
        ),
        (
            "/auth/disable",
            unary("etcdserverpb.AuthDisableRequest", "etcdserverpb.AuthDisableResponse", |g: Handle, r| async move {
                g.auth.auth_disable(r).await
            }),
        ),
        (
            "/auth/status",
            unary("etcdserverpb.AuthStatusRequest", "etcdserverpb.AuthStatusResponse", |g: Handle, r| async move {
                g.auth.auth_status(r).await
            }),
        ),
        (
            "/auth/authenticate",
            unary("etcdserverpb.AuthenticateRequest", "etcdserverpb.AuthenticateResponse", |g: Handle, r| async move {
                g.auth.authenticate(r).await
            }),
        ),
        (
            "/auth/user/add",
            unary("etcdserverpb.AuthUserAddRequest", "etcdserverpb.AuthUserAddResponse", |g: Handle, r| async move {
                g.auth.user_add(r).await
            }),
        ),
        (
            "/auth/user/get",
            unary("etcdserverpb.AuthUserGetRequest", "etcdserverpb.AuthUserGetResponse", |g: Handle, r| async move {
                g.auth.user_get(r).await
            }),
        ),
        (
            "/auth/user/list",
            unary("etcdserverpb.AuthUserListRequest", "etcdserverpb.AuthUserListResponse", |g: Handle, r| async move {
                g.auth.user_list(r).await
            }),
        ),
        (
            "/auth/user/delete",
            unary(
                "etcdserverpb.AuthUserDeleteRequest",
                "etcdserverpb.AuthUserDeleteResponse",
                |g: Handle, r| async move { g.auth.user_delete(r).await },
            ),
        ),
        (
            "/auth/user/changepw",
            unary(
                "etcdserverpb.AuthUserChangePasswordRequest",
                "etcdserverpb.AuthUserChangePasswordResponse",
                |g: Handle, r| async move { g.auth.user_change_password(r).await },
            ),
        ),
        (
            "/auth/user/grant",
            unary(
                "etcdserverpb.AuthUserGrantRoleRequest",
                "etcdserverpb.AuthUserGrantRoleResponse",
                |g: Handle, r| async move { g.auth.user_grant_role(r).await },
            ),
        ),
        (
            "/auth/user/revoke",
            unary(
                "etcdserverpb.AuthUserRevokeRoleRequest",
                "etcdserverpb.AuthUserRevokeRoleResponse",
                |g: Handle, r| async move { g.auth.user_revoke_role(r).await },
            ),
        ),
        (
            "/auth/role/add",
            unary("etcdserverpb.AuthRoleAddRequest", "etcdserverpb.AuthRoleAddResponse", |g: Handle, r| async move {
                g.auth.role_add(r).await
            }),
        ),
        (
            "/auth/role/get",
            unary("etcdserverpb.AuthRoleGetRequest", "etcdserverpb.AuthRoleGetResponse", |g: Handle, r| async move {
                g.auth.role_get(r).await
            }),
        ),
        (
            "/auth/role/list",
            unary("etcdserverpb.AuthRoleListRequest", "etcdserverpb.AuthRoleListResponse", |g: Handle, r| async move {
                g.auth.role_list(r).await
            }),
        ),
        (
            "/auth/role/delete",
            unary(
                "etcdserverpb.AuthRoleDeleteRequest",
                "etcdserverpb.AuthRoleDeleteResponse",
                |g: Handle, r| async move { g.auth.role_delete(r).await },
            ),
        ),
        (
            "/auth/role/grant",
            unary(
                "etcdserverpb.AuthRoleGrantPermissionRequest",
                "etcdserverpb.AuthRoleGrantPermissionResponse",
                |g: Handle, r| async move { g.auth.role_grant_permission(r).await },
            ),
        ),
        (
            "/auth/role/revoke",
            unary(
                "etcdserverpb.AuthRoleRevokePermissionRequest",
                "etcdserverpb.AuthRoleRevokePermissionResponse",
                |g: Handle, r| async move { g.auth.role_revoke_permission(r).await },
            ),
        ),
        // Our extension service, under a prefix of its own.
        (
            "/leasekv/grantnamed",
            unary("leasekv.v1.GrantNamedRequest", "leasekv.v1.GrantNamedResponse", |g: Handle, r| async move {
                g.ext.grant_named(r).await
            }),
        ),
        (
            "/leasekv/resolvename",
            unary("leasekv.v1.ResolveNameRequest", "leasekv.v1.ResolveNameResponse", |g: Handle, r| async move {
                g.ext.resolve_name(r).await
            }),
        ),
        (
            "/leasekv/listleases",
            unary("leasekv.v1.ListLeasesRequest", "leasekv.v1.ListLeasesResponse", |g: Handle, r| async move {
                g.ext.list_leases(r).await
            }),
        ),
        (
            "/leasekv/electionstatus",
            unary("leasekv.v1.ElectionStatusRequest", "leasekv.v1.ElectionStatusResponse", |g: Handle, r| async move {
                g.ext.election_status(r).await
            }),
        ),
        (
            "/leasekv/stepdown",
            unary("leasekv.v1.StepDownRequest", "leasekv.v1.StepDownResponse", |g: Handle, r| async move {
                g.ext.step_down(r).await
            }),
        ),
    ]
}

/// The route an HTTP request is counted under in the metrics: its path when it is one the
/// node serves, else `other` (so that a scan of random paths adds no label values).
pub fn route_label(path: &str) -> &str {
    static PATHS: std::sync::OnceLock<std::collections::HashSet<String>> = std::sync::OnceLock::new();
    let paths = PATHS.get_or_init(|| {
        let gateway = routes().into_iter().flat_map(|(path, _)| PREFIXES.iter().map(move |p| format!("{p}{path}")));
        let plain = ["/version", "/health", "/readyz", "/livez", "/metrics"].map(String::from);
        gateway.chain(plain).collect()
    });
    if paths.contains(path) {
        path
    } else {
        "other"
    }
}

/// The API prefixes etcd 3.4 serves the gateway under.
pub const PREFIXES: &[&str] = &["/v3", "/v3beta"];

/// The gateway's router, to be served beside the gRPC services (whose paths,
/// `/etcdserverpb.KV/Range` and so on, it leaves alone), with the console at `/ui` as
/// `console` says.
pub fn router(gateway: Arc<Gateway>, console: crate::config::ConsoleMode) -> Router {
    let mut gateway_routes = Router::new();
    for (path, route) in routes() {
        for prefix in PREFIXES {
            gateway_routes =
                gateway_routes.route(&format!("{prefix}{path}"), route.clone().fallback(method_not_allowed));
        }
    }
    gateway_routes
        .layer(axum::middleware::map_response(cors))
        // Plain handlers in etcd, answering any method.
        .route("/version", any(health::version))
        .route("/health", any(health::health))
        .route("/readyz", any(health::readyz))
        .route("/livez", any(health::livez))
        .route("/metrics", any(health::metrics))
        .merge(crate::console::router(console, routes()))
        .fallback(not_found)
        .with_state(gateway)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_a_route_names_is_in_the_descriptors() {
        // The unary routes name their messages when they are built; building them all
        // resolves nothing yet, so resolve the names the source mentions.
        let source = include_str!("mod.rs");
        let mut names = 0;
        for quoted in source.split('"').skip(1).step_by(2) {
            if quoted.starts_with("etcdserverpb.")
                || quoted.starts_with("v3lockpb.")
                || quoted.starts_with("v3electionpb.")
                || quoted.starts_with("leasekv.v1.")
            {
                json::descriptor(quoted);
                names += 1;
            }
        }
        assert!(names >= 40, "only {names} message names found in the routes");
    }
}
