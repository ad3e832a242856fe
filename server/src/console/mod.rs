//! The web console: a page for operators, served by every node on its client port at `/ui`
//! (see docs/console.md).
//!
//! The page is static (HTML, a few ES modules and a stylesheet in `src/console/assets`, embedded in
//! the binary at compile time) and does everything through etcd's HTTP/JSON gateway, which
//! the same port serves: the console's calls go to `/ui/api/v3/<service>/<method>`, the
//! gateway's own routes mounted a second time. The user's token rides along as etcd's
//! `Authorization` header, so a call is checked with the user's permissions and fails with
//! etcd's error exactly as the same call from etcdctl would. Mounting the routes apart lets
//! `[console] mode = "read-only"` take the writing ones away without touching the gateway.
//!
//! Two routes are the console's own: `/ui/api/console` (the mode and this node) and
//! `/ui/api/overview`, a stream of the cluster's state as this node sees it (see
//! [`overview`]).

pub mod overview;

use crate::config::ConsoleMode;
use crate::gateway::Handle;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, MethodRouter};
use axum::Router;

/// The console's files, embedded at compile time.
#[derive(rust_embed::Embed)]
#[folder = "src/console/assets/"]
struct Assets;

/// The gateway paths (after `/v3`) that only read: all a read-only console may call.
/// Everything else (put, delete, txn, lease grant, revoke and keepalive, compaction, the
/// member, alarm and auth changes, lock and election calls) is refused there.
pub const READ_ONLY_PATHS: &[&str] = &[
    "/kv/range",
    "/watch",
    "/lease/timetolive",
    "/kv/lease/timetolive",
    "/lease/leases",
    "/kv/lease/leases",
    "/cluster/member/list",
    "/maintenance/status",
    "/auth/authenticate",
    "/auth/status",
    "/election/leader",
    "/leasekv/resolvename",
    "/leasekv/listleases",
    "/leasekv/electionstatus",
];

/// The console's routes for `mode` (none when it is off), over the gateway's state.
pub fn router(mode: ConsoleMode, routes: Vec<(&'static str, MethodRouter<Handle>)>) -> Router<Handle> {
    if mode == ConsoleMode::Off {
        return Router::new();
    }
    let mut api = Router::new();
    for (path, route) in routes {
        if mode == ConsoleMode::ReadOnly && !READ_ONLY_PATHS.contains(&path) {
            api = api.route(&format!("/v3{path}"), axum::routing::any(refused_read_only));
        } else {
            api = api.route(&format!("/v3{path}"), route);
        }
    }
    let info = get(move |State(gateway): State<Handle>| async move { console_info(&gateway, mode) });
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        // Browsers ask for it on every page whatever the page names; a 404 is an error in
        // every browser's console.
        .route("/favicon.ico", get(|| asset(Path("favicon.svg".to_string()))))
        .route("/ui/", get(|| asset(Path("index.html".to_string()))))
        .route("/ui/{*file}", get(asset))
        .route("/ui/api/console", info)
        .route("/ui/api/overview", get(overview::stream))
        .nest("/ui/api", api)
        .layer(axum::middleware::map_response(security_headers))
}

/// A call a read-only console may not make: 403 with etcd's error body.
async fn refused_read_only() -> Response {
    let body = serde_json::json!({
        "error": "the console is read-only on this node ([console] mode = \"read-only\"): it does not change anything",
        "code": 7,
        "message": "the console is read-only on this node ([console] mode = \"read-only\"): it does not change anything",
    });
    (StatusCode::FORBIDDEN, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// `/ui/api/console`: what the page needs to know before it draws anything.
fn console_info(gateway: &Handle, mode: ConsoleMode) -> Response {
    let shared = &gateway.shared;
    let body = serde_json::json!({
        "mode": mode,
        "node_id": format!("{:x}", shared.me.0),
        "version": env!("CARGO_PKG_VERSION"),
        "auth_enabled": shared.node.auth().is_enabled(),
    });
    ([(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], body.to_string())
        .into_response()
}

/// One embedded file, with its content type; 404 for any other path.
async fn asset(Path(file): Path<String>) -> Response {
    match Assets::get(&file) {
        Some(content) => {
            let mime = content.metadata.mimetype().to_string();
            ([(header::CONTENT_TYPE, mime), (header::CACHE_CONTROL, "no-cache".to_string())], content.data)
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "404 page not found\n").into_response(),
    }
}

/// The page may load only its own files and talk only to its own node: a value shown in it
/// can never run as script, nor the page be framed by another site.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
             frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    );
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    response
}

#[cfg(test)]
mod tests;
