//! The feature gates that change how service-account tokens are minted and validated.

/// Token-related feature gates, with upstream defaults (all on in the 1.34 era).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenFeatures {
    /// `ServiceAccountTokenJTI`: every token carries a `jti`; the credential id is `JTI=<jti>`.
    pub jti: bool,
    /// `ServiceAccountTokenPodNodeInfo`: pod-bound tokens carry the pod's node.
    pub pod_node_info: bool,
    /// `ServiceAccountTokenNodeBinding`: tokens may be bound to a Node alone.
    pub node_binding: bool,
    /// `ServiceAccountTokenNodeBindingValidation`: node-bound tokens are checked against
    /// the Node object.
    pub node_binding_validation: bool,
}

impl Default for TokenFeatures {
    fn default() -> Self {
        Self { jti: true, pod_node_info: true, node_binding: true, node_binding_validation: true }
    }
}
