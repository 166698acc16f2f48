//! Namespace (pkg/registry/core/namespace): a DNS-label name, `Active` with the namespace
//! controller's finalizer on creation, a `/status` subresource and deletion through the
//! namespace controller. What every namespace then holds (ServiceAccount `default`,
//! ConfigMap `kube-root-ca.crt`) is the controller manager's to create, as upstream.

use serde_json::{Value, json};

use super::super::lifecycle;
use super::super::objects::prepare_new;
use super::super::resources::find;
use super::super::table::{age_column, column, name_column, name_middle_age, text};
use super::{Printer, Strategy};
use crate::server::AppState;
use crate::server::status::StatusError;
use crate::store::{ObjectKey, StoreError};

/// The namespace strategy.
pub(crate) struct Namespace;

/// Registered in the resource table.
pub(crate) static NAMESPACE: Namespace = Namespace;

/// The resource.
pub(crate) const RESOURCE: super::Resource = super::Resource::stored(
    super::Names { group: "", kind: "Namespace", plural: "namespaces", singular: "namespace" },
    &NAMESPACE,
    &super::types::TypeOf::<k8s_openapi::api::core::v1::Namespace>::NEW,
)
.cluster_scoped()
.with_short_names(&["ns"]);

impl Strategy for Namespace {
    fn name_problem(&self, name: &str) -> Option<String> {
        (!podpass_token::user::is_dns1123_label(name)).then(|| {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character".to_owned()
        })
    }

    fn prepare_for_create(&self, object: &mut Value) {
        lifecycle::namespace_defaults(object);
    }

    fn prepare_for_update(&self, object: &mut Value, old: &Value) {
        keep_status(object, old);
        // namespaceStrategy: the finalizers change through `/finalize` only.
        match old.pointer("/spec/finalizers") {
            Some(f) => {
                if !object["spec"].is_object() {
                    object["spec"] = json!({});
                }
                object["spec"]["finalizers"] = f.clone();
            }
            None => {
                if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.remove("finalizers");
                }
            }
        }
    }

    fn subresources(&self) -> &'static [super::Subresource] {
        const SUBRESOURCES: [super::Subresource; 2] = [
            super::status("Namespace"),
            super::Subresource {
                name: "finalize",
                kind: "Namespace",
                serves: super::Serves::Part(super::Part::Finalize),
            },
        ];
        &SUBRESOURCES
    }

    fn printer(&self) -> Option<Printer> {
        Some((
            vec![name_column(), column("Status", "string", "", "The status of the namespace", 0), age_column()],
            |o, now| name_middle_age(o, vec![json!(text(o, "/status/phase"))], now),
        ))
    }

    fn deleted_by_controller(&self) -> bool {
        true
    }
}

/// `PrepareForUpdate` of kinds with a `/status` subresource: a main-resource write keeps
/// the stored status.
pub(super) fn keep_status(object: &mut Value, old: &Value) {
    let Some(obj) = object.as_object_mut() else { return };
    match old.get("status") {
        Some(status) => obj.insert("status".into(), status.clone()),
        None => obj.remove("status"),
    };
}

/// At start-up: the namespaces every cluster has (`default`, `kube-system`, `kube-public`,
/// `kube-node-lease`), as kube-apiserver's system namespaces controller creates them.
pub(crate) async fn ensure_system_namespaces(state: &AppState) -> Result<(), StatusError> {
    let res = find("", "namespaces").ok_or_else(StatusError::not_found_path)?;
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let mut object = json!({"metadata": {"name": ns}});
        prepare_new(res, None, &mut object, podpass_token::now_unix())?;
        NAMESPACE.prepare_for_create(&mut object);
        match state.store.create(&ObjectKey::cluster("namespaces", ns), object).await {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
