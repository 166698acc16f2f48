//! What shape a read answers in, from its `Accept` header (apiserver's
//! `negotiation` with `as=`/`g=`/`v=` parameters): the objects themselves, a Table
//! (`as=Table`, see `table`), or their metadata only (`as=PartialObjectMetadata` for a
//! get or a watch's objects, `as=PartialObjectMetadataList` for a list) — what metadata
//! informers (the garbage collector's) ask for, to be sent no spec or status.

use serde_json::{Value, json};

use super::table::{self, IncludeObject};

/// The shape of a read's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// The objects as stored (converted for the version served).
    Objects,
    /// A Table, its rows holding what `includeObject` says.
    Table(IncludeObject),
    /// `meta.k8s.io/v1` PartialObjectMetadata(List).
    Metadata,
}

/// Whether `accept` asks for PartialObjectMetadata (meta.k8s.io v1 or v1beta1, either
/// the object's or the list's name) before plain JSON.
fn wants_metadata(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    for media in accept.split(',') {
        let mut parts = media.split(';').map(str::trim);
        let base = parts.next().unwrap_or("");
        let params: Vec<&str> = parts.collect();
        let partial = params.iter().any(|p| *p == "as=PartialObjectMetadata" || *p == "as=PartialObjectMetadataList")
            && params.contains(&"g=meta.k8s.io");
        if base == "application/json" && partial {
            return true;
        }
        if base == "application/json" || base == "*/*" {
            return false;
        }
    }
    false
}

impl Shape {
    /// The shape `accept` asks for, with the Table's `includeObject`.
    pub(crate) fn of(accept: Option<&str>, include: IncludeObject) -> Self {
        if table::wants_table(accept) {
            Shape::Table(include)
        } else if wants_metadata(accept) {
            Shape::Metadata
        } else {
            Shape::Objects
        }
    }
}

/// An object's PartialObjectMetadata.
pub(crate) fn partial(object: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({}))})
}

/// The PartialObjectMetadataList of `items` at `rv`.
pub(crate) fn partial_list(items: &[Value], rv: &str) -> Value {
    json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv}, "items": items.iter().map(partial).collect::<Vec<_>>()})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_asked_for_as_client_go_and_kube_rs_ask() {
        let m = IncludeObject::Metadata;
        let kube_rs = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(Shape::of(Some(kube_rs), m), Shape::Metadata);
        let client_go = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(Shape::of(Some(client_go), m), Shape::Metadata);
        assert_eq!(
            Shape::of(Some("application/json, application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"), m),
            Shape::Objects
        );
        assert_eq!(Shape::of(Some("application/json;as=Table;g=meta.k8s.io;v=v1"), m), Shape::Table(m));
        assert_eq!(Shape::of(None, m), Shape::Objects);
        let pod = json!({"kind": "Pod", "metadata": {"name": "a", "uid": "u"}, "spec": {"containers": []}});
        assert_eq!(
            partial(&pod),
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {"name": "a", "uid": "u"}})
        );
        assert_eq!(partial_list(&[pod], "7")["items"][0]["metadata"]["name"], "a");
    }
}
