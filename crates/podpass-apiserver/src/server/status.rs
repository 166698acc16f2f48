//! API errors as `meta.k8s.io/v1` `Status` objects, the shape every Kubernetes client
//! decodes.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A failed request: HTTP code, `reason` and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusError {
    /// HTTP status.
    pub code: StatusCode,
    /// Upstream `StatusReason` (`NotFound`, `Unauthorized`, …).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details` of the Status (the causes of an apply conflict), when there are any.
    pub details: Option<Box<serde_json::Value>>,
}

impl StatusError {
    /// 401 with upstream's message.
    pub fn unauthorized() -> Self {
        Self { code: StatusCode::UNAUTHORIZED, reason: "Unauthorized", message: "Unauthorized".into(), details: None }
    }

    /// 403 with a message already worded.
    pub fn forbidden_raw(message: String) -> Self {
        Self { code: StatusCode::FORBIDDEN, reason: "Forbidden", message, details: None }
    }

    /// 404 for an unknown path, with upstream's message.
    pub fn not_found_path() -> Self {
        Self {
            code: StatusCode::NOT_FOUND,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
            details: None,
        }
    }
}

impl StatusError {
    /// Any status with reason and message.
    pub fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        Self { code, reason, message: message.into(), details: None }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    /// 422 Invalid (field validation).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message)
    }

    /// 404 for a named object (`pods "web" not found`).
    pub fn not_found(resource: &str, name: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NotFound", format!("{resource} {name:?} not found"))
    }

    /// 405 for a verb a resource does not serve.
    pub fn method_not_supported(verb: &str, resource: &str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({verb} {resource})"),
        )
    }

    /// 415 for bodies in a media type this endpoint does not decode.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {content_type:?})"
            ),
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", format!("Internal error occurred: {message}"))
    }
}

/// A write the server makes of an object of its own (the `kubernetes` Service and its
/// endpoints) failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OwnWriteError {
    /// The store refused it.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// Its resource is not served.
    #[error("{0} are not served")]
    NotServed(&'static str),
    /// The object the server made is not valid.
    #[error("{}", .0.message)]
    Invalid(StatusError),
}

impl From<crate::store::StoreError> for StatusError {
    fn from(e: crate::store::StoreError) -> Self {
        use crate::store::StoreError as E;
        let message = e.to_string();
        match e {
            E::NotFound { .. } => Self::new(StatusCode::NOT_FOUND, "NotFound", message),
            E::AlreadyExists { .. } => Self::new(StatusCode::CONFLICT, "AlreadyExists", message),
            E::Conflict { .. } => Self::new(StatusCode::CONFLICT, "Conflict", message),
            E::Gone { .. } => Self::new(StatusCode::GONE, "Expired", message),
            E::TooLargeResourceVersion { .. } => Self::new(StatusCode::GATEWAY_TIMEOUT, "Timeout", message),
            E::Invalid(_) => Self::bad_request(message),
            E::Backend { .. } | E::Unavailable(_) => {
                Self::new(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", message)
            }
        }
    }
}

impl IntoResponse for StatusError {
    fn into_response(self) -> Response {
        let mut body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        if let Some(details) = self.details {
            body["details"] = *details;
        }
        // A 429 says when to come back, as upstream's (`Retry-After: 1`).
        let mut response = (self.code, Json(body)).into_response();
        if self.code == StatusCode::TOO_MANY_REQUESTS {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}
