//! API errors as `meta.k8s.io/v1` `Status` objects, the shape every Kubernetes client
//! decodes.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A failed request: HTTP code, `reason` and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub code: StatusCode,
    /// Upstream `StatusReason` (`NotFound`, `Unauthorized`, …).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

impl ApiError {
    /// 401 with upstream's message.
    pub fn unauthorized() -> Self {
        Self { code: StatusCode::UNAUTHORIZED, reason: "Unauthorized", message: "Unauthorized".into() }
    }

    /// 403 for a non-resource path, with upstream's message.
    pub fn forbidden_path(user: &str, verb: &str, path: &str) -> Self {
        Self {
            code: StatusCode::FORBIDDEN,
            reason: "Forbidden",
            message: format!("forbidden: User {user:?} cannot {verb} path {path:?}"),
        }
    }

    /// 404 for an unknown path, with upstream's message.
    pub fn not_found_path() -> Self {
        Self {
            code: StatusCode::NOT_FOUND,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        (self.code, Json(body)).into_response()
    }
}
