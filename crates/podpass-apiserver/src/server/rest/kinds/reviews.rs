//! The create-only reviews (authentication.k8s.io TokenReview and SelfSubjectReview,
//! authorization.k8s.io's access and rules reviews): answered, never stored, so their
//! strategy adds nothing but what answers them.

use k8s_openapi::api::{authentication, authorization};

use super::types::TypeOf;
use super::{Answers, Names, Resource, Strategy};

/// Create-only reviews: nothing is stored, so nothing to add but what answers them.
pub(crate) struct Unstored(Answers);

impl Strategy for Unstored {
    fn answers(&self) -> Option<Answers> {
        Some(self.0)
    }
}

/// The strategy of the reviews the authorizers answer.
static AUTHORIZERS: Unstored = Unstored(Answers::Review);
/// The strategy of TokenReview.
static TOKEN_AUTHENTICATORS: Unstored = Unstored(Answers::TokenReview);

const AUTHENTICATION: &str = "authentication.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";

/// TokenReview, answered by the token authenticators.
pub(crate) const TOKEN_REVIEW: Resource = Resource::review(
    Names { group: AUTHENTICATION, kind: "TokenReview", plural: "tokenreviews", singular: "tokenreview" },
    &TOKEN_AUTHENTICATORS,
    &TypeOf::<authentication::v1::TokenReview>::NEW,
);

/// SelfSubjectReview (`kubectl auth whoami`).
pub(crate) const SELF_SUBJECT_REVIEW: Resource = Resource::review(
    Names {
        group: AUTHENTICATION,
        kind: "SelfSubjectReview",
        plural: "selfsubjectreviews",
        singular: "selfsubjectreview",
    },
    &AUTHORIZERS,
    &TypeOf::<authentication::v1::SelfSubjectReview>::NEW,
);

/// SelfSubjectAccessReview (`kubectl auth can-i`).
pub(crate) const SELF_SUBJECT_ACCESS_REVIEW: Resource = Resource::review(
    Names {
        group: AUTHORIZATION,
        kind: "SelfSubjectAccessReview",
        plural: "selfsubjectaccessreviews",
        singular: "selfsubjectaccessreview",
    },
    &AUTHORIZERS,
    &TypeOf::<authorization::v1::SelfSubjectAccessReview>::NEW,
);

/// SubjectAccessReview.
pub(crate) const SUBJECT_ACCESS_REVIEW: Resource = Resource::review(
    Names {
        group: AUTHORIZATION,
        kind: "SubjectAccessReview",
        plural: "subjectaccessreviews",
        singular: "subjectaccessreview",
    },
    &AUTHORIZERS,
    &TypeOf::<authorization::v1::SubjectAccessReview>::NEW,
);

/// SelfSubjectRulesReview (`kubectl auth can-i --list`).
pub(crate) const SELF_SUBJECT_RULES_REVIEW: Resource = Resource::review(
    Names {
        group: AUTHORIZATION,
        kind: "SelfSubjectRulesReview",
        plural: "selfsubjectrulesreviews",
        singular: "selfsubjectrulesreview",
    },
    &AUTHORIZERS,
    &TypeOf::<authorization::v1::SelfSubjectRulesReview>::NEW,
);

/// LocalSubjectAccessReview: a SubjectAccessReview within one namespace.
pub(crate) const LOCAL_SUBJECT_ACCESS_REVIEW: Resource = Resource::review(
    Names {
        group: AUTHORIZATION,
        kind: "LocalSubjectAccessReview",
        plural: "localsubjectaccessreviews",
        singular: "localsubjectaccessreview",
    },
    &AUTHORIZERS,
    &TypeOf::<authorization::v1::LocalSubjectAccessReview>::NEW,
)
.in_namespaces();
