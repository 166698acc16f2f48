//! Wire and configuration types of the kubelet and kube-apiserver that `k8s-openapi` does
//! not carry, with their validation. It grows with the node agent; today it holds the
//! `--feature-gates` parser every podpass component shares.

pub mod feature_gate;

pub use feature_gate::{Feature, FeatureGateError, FeatureGates};
