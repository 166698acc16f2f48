//! Wire and configuration types of the kubelet and kube-apiserver that `k8s-openapi` does
//! not carry, with their validation: `--feature-gates`, Go durations, the credential
//! provider config and exec protocol, image URL matching, node affinity, resource quantities, and
//! apimachinery-worded field errors.

pub mod bootstrap_token;
pub mod credential_provider;
pub mod cron;
pub mod duration;
pub mod feature_gate;
pub mod field;
pub mod image_url;
pub mod int_or_percent;
pub mod label_selector;
pub mod node_affinity;
pub mod quantity;
pub mod quota;
pub mod rbac_aggregation;
pub mod taint;
pub mod validation;

pub use duration::GoDuration;
pub use feature_gate::{Feature, FeatureGateError, FeatureGates};
