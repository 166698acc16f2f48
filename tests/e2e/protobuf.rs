//! End-to-end: protobuf request bodies as client-go sends them (`application/vnd.kubernetes.protobuf`)
//! for the kinds kubectl never sends that way — Pods, Leases, Events, Nodes, TokenReviews —
//! and DeleteOptions: a protobuf dry-run delete deletes nothing, a precondition in protobuf
//! holds, and a DELETE body the server cannot read is a 400, never a real delete.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use reqwest::Method;
use serde_json::json;

mod support;
use support::*;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// A length-delimited field (string, bytes, message).
fn bytes(n: u64, b: &[u8]) -> Vec<u8> {
    [varint((n << 3) | 2), varint(b.len() as u64), b.to_vec()].concat()
}

/// A varint field (int32, int64, bool).
fn number(n: u64, v: u64) -> Vec<u8> {
    [varint(n << 3), varint(v)].concat()
}

/// The k8s protobuf envelope: magic, then runtime.Unknown{typeMeta, raw}.
fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> (&'static str, Vec<u8>) {
    let type_meta = [bytes(1, api_version.as_bytes()), bytes(2, kind.as_bytes())].concat();
    (PROTOBUF, [b"k8s\0".to_vec(), bytes(1, &type_meta), bytes(2, raw)].concat())
}

/// ObjectMeta with a name, an empty generateName and the zero creationTimestamp, as Go
/// writes every non-pointer field.
fn meta(name: &str) -> Vec<u8> {
    [bytes(1, name.as_bytes()), bytes(2, b""), bytes(8, b"")].concat()
}

#[test]
fn client_go_protobuf_bodies_for_every_kind_and_delete_options() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = start(d, &[]);
    ok(admin_kubectl(d, &["create", "namespace", "team"]), "create namespace");
    wait_namespace_ready(&s, "team");

    // A Pod that opts out of the automounted token and projects its own.
    let token = [bytes(1, b"registry.example"), number(2, 3600), bytes(3, b"token")].concat();
    let volume = [bytes(1, b"reg"), bytes(2, &bytes(26, &bytes(1, &bytes(4, &token))))].concat();
    let mount = [bytes(1, b"reg"), number(2, 1), bytes(3, b"/var/run/reg")].concat();
    let container = [
        bytes(1, b"app"),
        bytes(2, b"registry.example/app:1"),
        bytes(9, &mount),
        bytes(14, b""), // imagePullPolicy left to defaulting
        bytes(8, &bytes(2, &[bytes(1, b"cpu"), bytes(2, &bytes(1, b"250m"))].concat())),
        number(16, 0),
    ]
    .concat();
    let spec = [bytes(1, &volume), bytes(2, &container), number(21, 0)].concat();
    let pod = [bytes(1, &meta("web")), bytes(2, &spec), bytes(3, b"")].concat();
    let (code, answer) =
        admin_raw_request(&s, Method::POST, "/api/v1/namespaces/team/pods", Some(envelope("v1", "Pod", &pod)));
    assert_eq!(code, 201, "{answer}");
    let (_, stored) = admin_get(&s, "/api/v1/namespaces/team/pods/web");
    assert_eq!(stored["spec"]["automountServiceAccountToken"], false, "the opt-out survives: {stored}");
    let c = &stored["spec"]["containers"][0];
    assert_eq!(c["imagePullPolicy"], "IfNotPresent", "defaulted as for JSON: {c}");
    assert_eq!(c["resources"]["requests"]["cpu"], "250m");
    assert_eq!(c["volumeMounts"][0], json!({"name": "reg", "readOnly": true, "mountPath": "/var/run/reg"}));
    let source = &stored["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(source["audience"], "registry.example");
    assert!(
        !stored["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"].as_str().unwrap().starts_with("kube-api-access")),
        "no token volume was injected: {stored}"
    );
    assert!(stored["metadata"]["creationTimestamp"].is_string(), "server-set");

    // A Lease renewed to the microsecond, and a core Event.
    let micro = [number(1, 1_795_344_902), number(2, 123_456_000)].concat();
    let lease = [bytes(1, &meta("leader")), bytes(2, &[bytes(1, b"node-1"), number(2, 40), bytes(4, &micro)].concat())];
    let lease = envelope("coordination.k8s.io/v1", "Lease", &lease.concat());
    let (code, answer) =
        admin_raw_request(&s, Method::POST, "/apis/coordination.k8s.io/v1/namespaces/team/leases", Some(lease));
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["spec"]["renewTime"], "2026-11-22T10:55:02.123456Z");
    let involved = [bytes(1, b"Pod"), bytes(2, b"team"), bytes(3, b"web")].concat();
    let event = [
        bytes(1, &meta("web.1")),
        bytes(2, &involved),
        bytes(3, b"Pulled"),
        bytes(4, b"pulled the image"),
        bytes(6, &number(1, 1_795_344_902)),
        number(8, 1),
        bytes(9, b"Normal"),
    ];
    let event = envelope("v1", "Event", &event.concat());
    let (code, answer) = admin_raw_request(&s, Method::POST, "/api/v1/namespaces/team/events", Some(event));
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["firstTimestamp"], "2026-11-22T10:55:02Z");
    assert_eq!(answer["involvedObject"]["name"], "web");

    // A Node with capacity, as a kubelet registers.
    let capacity = [bytes(1, b"cpu"), bytes(2, &bytes(1, b"2"))].concat();
    let node = [bytes(1, &meta("node-9")), bytes(2, b""), bytes(3, &bytes(1, &capacity))].concat();
    let (code, answer) = admin_raw_request(&s, Method::POST, "/api/v1/nodes", Some(envelope("v1", "Node", &node)));
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["status"]["capacity"]["cpu"], "2");

    // A TokenReview of a token kubectl minted.
    let minted = ok(admin_kubectl(d, &["-n", "team", "create", "token", "default"]), "create token");
    let review = envelope("authentication.k8s.io/v1", "TokenReview", &bytes(2, &bytes(1, minted.trim().as_bytes())));
    let (code, answer) =
        admin_raw_request(&s, Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews", Some(review));
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["status"]["authenticated"], true, "{answer}");
    assert_eq!(answer["status"]["user"]["username"], "system:serviceaccount:team:default");

    // DeleteOptions in protobuf: a dry run deletes nothing, a failed precondition is a 409.
    let pod_path = "/api/v1/namespaces/team/pods/web";
    let dry = envelope("v1", "DeleteOptions", &bytes(5, b"All"));
    let (code, answer) = admin_raw_request(&s, Method::DELETE, pod_path, Some(dry));
    assert_eq!(code, 200, "{answer}");
    assert_eq!(admin_get(&s, pod_path).0, 200, "a dry-run delete deleted the pod");
    let stale = envelope("v1", "DeleteOptions", &bytes(2, &bytes(1, b"not-the-uid")));
    let (code, answer) = admin_raw_request(&s, Method::DELETE, pod_path, Some(stale));
    assert_eq!(code, 409, "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("Precondition failed: UID in precondition"), "{answer}");
    // A body that cannot be read is refused, not taken as "no options".
    let garbled = ("application/json", br#"{"dryRun": ["All"]"#.to_vec());
    let (code, answer) = admin_raw_request(&s, Method::DELETE, pod_path, Some(garbled));
    assert_eq!(code, 400, "{answer}");
    let wrong_kind = envelope("v1", "ConfigMap", b"");
    assert_eq!(admin_raw_request(&s, Method::DELETE, pod_path, Some(wrong_kind)).0, 400);
    assert_eq!(admin_get(&s, pod_path).0, 200, "still there");
    // ... and an empty protobuf DeleteOptions deletes (the pod is on no node: at once).
    let plain = envelope("v1", "DeleteOptions", &number(1, 0));
    let (code, answer) = admin_raw_request(&s, Method::DELETE, pod_path, Some(plain));
    assert_eq!(code, 200, "{answer}");
    assert_eq!(admin_get(&s, pod_path).0, 404);
}
