//! The create-only reviews (TokenReview, SelfSubjectReview, the access and rules reviews):
//! each is a REST handler of its own upstream, answering about its body and storing
//! nothing; here each resource is routed to its handler (TokenReview's typed body is
//! decoded and routed before, in `handle`).

use std::sync::Arc;

use axum::response::Response;
use serde_json::Value;

use super::resources::Resource;
use super::{rules_review, token};
use crate::server::status::StatusError;
use crate::server::{AppState, User};

/// The create-only reviews: each answers about its body and stores nothing.
pub(super) async fn review(
    state: &Arc<AppState>,
    user: &User,
    res: &Resource,
    ns: Option<&str>,
    object: Value,
) -> Result<Response, StatusError> {
    match res.plural {
        "selfsubjectreviews" => token::self_subject_review(user, &object),
        "selfsubjectaccessreviews" => token::self_subject_access_review(state, user, object).await,
        "subjectaccessreviews" => token::subject_access_review(state, object).await,
        "selfsubjectrulesreviews" => rules_review::self_subject_rules_review(state, user, &object).await,
        "localsubjectaccessreviews" => {
            rules_review::local_subject_access_review(state, ns.unwrap_or_default(), object).await
        }
        _ => Err(StatusError::method_not_supported("create", res.plural)),
    }
}
