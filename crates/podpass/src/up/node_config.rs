//! What `podpass up` tells the nodes that join it, as kubeadm's `init` does (its
//! `upload-config kubelet` phase): the cluster's KubeletConfiguration in
//! `kube-system/kubelet-config` and, beyond kubeadm, its registry in
//! `kube-system/podpass-registry` (the host, registry-auth's exchange URL, how containerd
//! reaches it), both readable by the default node token's group and by nodes through
//! kubeadm's `kubeadm:kubelet-config` Role. Rewritten at every start: the ports may change.

use anyhow::Result;
use podpass_node::join::{
    KUBELET_CONFIG_KEY, KUBELET_CONFIG_MAP, NODE_CONFIG_NAMESPACE as NAMESPACE, REGISTRY_CONFIG_MAP, RegistryConfig,
};
use serde_json::{Value, json};

use super::api::Api;

/// kubeadm's Role and RoleBinding name (`KubeletBaseConfigMapRole`).
const ROLE: &str = "kubeadm:kubelet-config";

/// Publishes `kubelet` (a KubeletConfiguration) and `registry` for joining nodes.
pub(super) async fn publish(api: &Api, kubelet: &str, registry: Option<&RegistryConfig>) -> Result<()> {
    config_map(api, KUBELET_CONFIG_MAP, json!({KUBELET_CONFIG_KEY: kubelet})).await?;
    match registry {
        Some(r) => config_map(api, REGISTRY_CONFIG_MAP, r.to_data()).await?,
        // A cluster that no longer has podpass's registry tells its joining nodes so.
        None => api.delete(&format!("/api/v1/namespaces/{NAMESPACE}/configmaps/{REGISTRY_CONFIG_MAP}")).await?,
    }
    let rules = json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"],
                        "resourceNames": [KUBELET_CONFIG_MAP, REGISTRY_CONFIG_MAP]}]);
    let roles = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles");
    api.ensure(
        &roles,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": ROLE}, "rules": rules}),
    )
    .await?;
    // A cluster from an earlier run: the Role gains the registry's ConfigMap.
    api.merge_patch(&format!("{roles}/{ROLE}"), &json!({"rules": rules})).await?;
    let group = |name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name});
    api.ensure(
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings"),
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": ROLE},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE},
                "subjects": [group("system:nodes"), group(podpass_api::bootstrap_token::NODE_GROUP)]}),
    )
    .await
}

/// Creates ConfigMap `name` with `data`, or sets its keys in the one there (the keys are
/// always the same ones, so nothing stale stays).
async fn config_map(api: &Api, name: &str, data: Value) -> Result<()> {
    let path = format!("/api/v1/namespaces/{NAMESPACE}/configmaps");
    api.ensure(&path, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}))
        .await?;
    api.merge_patch(&format!("{path}/{name}"), &json!({"data": data})).await
}
