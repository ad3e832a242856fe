//! gRPC failures as etcd's gateway reports them: a JSON body `{"error", "code", "message"}`
//! with the HTTP status grpc-gateway v1 gives the code, or, inside a stream, one
//! `{"error": {"grpc_code", "http_code", "message", "http_status"}}` object.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// The HTTP status etcd 3.4's gateway answers a gRPC code with (its grpc-gateway predates
/// v1.16, which sends FAILED_PRECONDITION as 400: etcd 3.4.23 sends 412, e.g. for
/// "lease already exists").
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::REQUEST_TIMEOUT,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// etcd's error body, its fields in etcd's order; `details` as grpc-gateway writes a
/// status's details (each an `Any` in JSON, `@type` first), left out when there are none.
#[derive(serde::Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    message: &'a str,
    code: i32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    details: Vec<serde_json::Value>,
}

/// The details leasekv puts beside an etcd error (`EtcdError::explained`): an `ErrorInfo`
/// and a `LocalizedMessage`, as grpc-gateway renders them.
fn details(status: &Status) -> Vec<serde_json::Value> {
    let mut details = Vec::new();
    if let Some(info) = status.get_details_error_info() {
        details.push(serde_json::json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": info.reason,
            "domain": info.domain,
            "metadata": info.metadata,
        }));
    }
    if let Some(localized) = status.get_details_localized_message() {
        details.push(serde_json::json!({
            "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
            "locale": localized.locale,
            "message": localized.message,
        }));
    }
    details
}

/// The answer to a failed unary call.
pub fn response(status: &Status) -> Response {
    let body = ErrorBody {
        error: status.message(),
        message: status.message(),
        code: status.code() as i32,
        details: details(status),
    };
    let body = serde_json::to_string(&body).expect("a struct of strings and a number serializes");
    (http_status(status.code()), [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The object a stream ends with when it fails.
pub fn stream_error(status: &Status) -> serde_json::Value {
    let http = http_status(status.code());
    let mut error = serde_json::json!({
        "grpc_code": status.code() as i32,
        "http_code": http.as_u16(),
        "message": status.message(),
        "http_status": http.canonical_reason().unwrap_or(""),
    });
    let details = details(status);
    if !details.is_empty() {
        error["details"] = serde_json::Value::Array(details);
    }
    serde_json::json!({ "error": error })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_grpc_gateways_statuses() {
        let expected = [
            (Code::NotFound, 404),
            (Code::InvalidArgument, 400),
            (Code::FailedPrecondition, 412),
            (Code::OutOfRange, 400),
            (Code::Unavailable, 503),
            (Code::DeadlineExceeded, 504),
            (Code::PermissionDenied, 403),
            (Code::Unauthenticated, 401),
            (Code::Unimplemented, 501),
            (Code::Unknown, 500),
            (Code::Internal, 500),
        ];
        for (code, http) in expected {
            assert_eq!(http_status(code).as_u16(), http, "{code:?}");
        }
    }

    #[test]
    fn an_error_body_has_etcds_fields_in_etcds_order() {
        let response = response(&Status::not_found("etcdserver: requested lease not found"));
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let body = futures_util::FutureExt::now_or_never(axum::body::to_bytes(response.into_body(), 1000))
            .expect("an in-memory body is ready")
            .expect("it is small");
        assert_eq!(
            &body[..],
            br#"{"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}"#
        );
    }

    #[test]
    fn a_stream_error_names_both_codes() {
        let error = stream_error(&Status::unavailable("etcdserver: no leader"));
        assert_eq!(
            error,
            serde_json::json!({"error": {"grpc_code": 14, "http_code": 503, "message": "etcdserver: no leader", "http_status": "Service Unavailable"}})
        );
    }

    #[test]
    fn an_explained_error_carries_its_details_as_grpc_gateway_renders_them() {
        let status =
            leasekv_client::EtcdError::RequestTooLarge.explained("KEY_TOO_LARGE", "the key is 9 bytes; at most 8");
        let body = futures_util::FutureExt::now_or_never(axum::body::to_bytes(response(&status).into_body(), 1000))
            .expect("an in-memory body is ready")
            .expect("it is small");
        let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(body["message"], "etcdserver: request is too large");
        assert_eq!(body["details"][0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
        assert_eq!(body["details"][0]["reason"], "KEY_TOO_LARGE");
        assert_eq!(body["details"][1]["message"], "the key is 9 bytes; at most 8");
        assert_eq!(stream_error(&status)["error"]["details"], body["details"]);
    }
}
