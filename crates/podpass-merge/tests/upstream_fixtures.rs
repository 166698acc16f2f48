//! Upstream structured-merge-diff's fixture-driven cases (`merge/*_test.go`), restated:
//! same operations, same expected object and managers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fixture;

use fixture::*;
use podpass_merge::Schema;
use podpass_merge::schema::{ListKind, TypeId};
use serde_json::json;

fn leaf_fields() -> (Schema, TypeId) {
    let mut s = Schema::new();
    let t = strukt(&mut s, &[("numeric", S), ("string", S), ("bool", S)]);
    (s, t)
}

// merge/leaf_test.go: TestUpdateLeaf

#[test]
fn leaf_apply_twice() {
    let (s, t) = leaf_fields();
    run(
        &s,
        t,
        vec![
            apply("default", "v1", json!({"numeric": 1, "string": "string"})),
            apply("default", "v1", json!({"numeric": 2, "string": "string", "bool": false})),
        ],
        json!({"numeric": 2, "string": "string", "bool": false}),
        &[("default", "v1", &[".numeric", ".string", ".bool"])],
    );
}

#[test]
fn leaf_apply_twice_different_versions() {
    let (s, t) = leaf_fields();
    run(
        &s,
        t,
        vec![
            apply("default", "v1", json!({"numeric": 1, "string": "string"})),
            apply("default", "v2", json!({"numeric": 2, "string": "string", "bool": false})),
        ],
        json!({"numeric": 2, "string": "string", "bool": false}),
        &[("default", "v2", &[".numeric", ".string", ".bool"])],
    );
}

#[test]
fn leaf_apply_update_apply_no_conflict() {
    for controller_version in ["v1", "v2"] {
        let (s, t) = leaf_fields();
        run(
            &s,
            t,
            vec![
                apply("default", "v1", json!({"numeric": 1, "string": "string"})),
                update("controller", controller_version, json!({"numeric": 1, "string": "string", "bool": true})),
                apply("default", "v1", json!({"numeric": 2, "string": "string"})),
            ],
            json!({"numeric": 2, "string": "string", "bool": true}),
            &[("default", "v1", &[".numeric", ".string"]), ("controller", controller_version, &[".bool"])],
        );
    }
}

#[test]
fn leaf_apply_update_apply_with_conflict() {
    for controller_version in ["v1", "v2"] {
        let (s, t) = leaf_fields();
        run(
            &s,
            t,
            vec![
                apply("default", "v1", json!({"numeric": 1, "string": "string"})),
                update(
                    "controller",
                    controller_version,
                    json!({"numeric": 1, "string": "controller string", "bool": true}),
                ),
                apply_conflicts(
                    "default",
                    "v1",
                    json!({"numeric": 2, "string": "user string"}),
                    &[("controller", ".string")],
                ),
                force("default", "v1", json!({"numeric": 2, "string": "user string"})),
            ],
            json!({"numeric": 2, "string": "user string", "bool": true}),
            &[("default", "v1", &[".numeric", ".string"]), ("controller", controller_version, &[".bool"])],
        );
    }
}

#[test]
fn leaf_apply_twice_remove() {
    for second in ["v1", "v2"] {
        let (s, t) = leaf_fields();
        run(
            &s,
            t,
            vec![
                apply("default", "v1", json!({"numeric": 1, "string": "string", "bool": false})),
                apply("default", second, json!({"string": "new string"})),
            ],
            json!({"string": "new string"}),
            &[("default", second, &[".string"])],
        );
    }
}

#[test]
fn leaf_update_apply_omits() {
    let (s, t) = leaf_fields();
    run(
        &s,
        t,
        vec![
            apply("default", "v1", json!({"numeric": 2})),
            update("controller", "v1", json!({"numeric": 1})),
            apply("default", "v1", json!({})),
        ],
        json!({"numeric": 1}),
        &[("controller", "v1", &[".numeric"])],
    );
}

#[test]
fn leaf_update_remove_empty_set() {
    let (s, t) = leaf_fields();
    run(
        &s,
        t,
        vec![
            apply("default", "v1", json!({"string": "string"})),
            update("controller", "v1", json!({"string": "new string"})),
        ],
        json!({"string": "new string"}),
        &[("controller", "v1", &[".string"])],
    );
}

#[test]
fn leaf_apply_remove_empty_set() {
    let (s, t) = leaf_fields();
    run(
        &s,
        t,
        vec![apply("default", "v1", json!({"string": "string"})), apply("default", "v1", json!({}))],
        json!({}),
        &[],
    );
}

// merge/set_test.go: TestUpdateSet (and its once-broken apply_twice_remove, which v4 fixes)

fn sets() -> (Schema, TypeId) {
    let mut s = Schema::new();
    let l = list(&mut s, S, ListKind::Set);
    let t = strukt(&mut s, &[("list", l)]);
    (s, t)
}

#[test]
fn set_apply_twice() {
    let (s, t) = sets();
    run(
        &s,
        t,
        vec![
            apply("default", "v1", json!({"list": ["a", "c"]})),
            apply("default", "v1", json!({"list": ["a", "b", "c", "d"]})),
        ],
        json!({"list": ["a", "b", "c", "d"]}),
        &[("default", "v1", &[r#".list[="a"]"#, r#".list[="b"]"#, r#".list[="c"]"#, r#".list[="d"]"#])],
    );
}

#[test]
fn set_apply_update_apply_no_overlap() {
    let (s, t) = sets();
    run(
        &s,
        t,
        vec![
            apply("default", "v1", json!({"list": ["a", "c"]})),
            update("controller", "v1", json!({"list": ["a", "b", "c", "d"]})),
            apply("default", "v1", json!({"list": ["a", "aprime", "c", "cprime"]})),
        ],
        json!({"list": ["a", "aprime", "b", "c", "cprime", "d"]}),
        &[
            ("default", "v1", &[r#".list[="a"]"#, r#".list[="aprime"]"#, r#".list[="c"]"#, r#".list[="cprime"]"#]),
            ("controller", "v1", &[r#".list[="b"]"#, r#".list[="d"]"#]),
        ],
    );
}

#[test]
fn set_apply_update_apply_with_overlap() {
    let (s, t) = sets();
    run(
        &s,
        t,
        vec![
            apply("default", "v1", json!({"list": ["a", "c"]})),
            update("controller", "v1", json!({"list": ["a", "b", "c", "d"]})),
            apply("default", "v1", json!({"list": ["a", "b", "c"]})),
        ],
        json!({"list": ["a", "b", "c", "d"]}),
        &[
            ("default", "v1", &[r#".list[="a"]"#, r#".list[="b"]"#, r#".list[="c"]"#]),
            ("controller", "v1", &[r#".list[="b"]"#, r#".list[="d"]"#]),
        ],
    );
}

#[test]
fn set_apply_twice_reorder() {
    let (s, t) = sets();
    run(
        &s,
        t,
        vec![
            apply("default", "v1", json!({"list": ["a", "b", "c", "d"]})),
            apply("default", "v1", json!({"list": ["a", "d", "c", "b"]})),
        ],
        json!({"list": ["a", "d", "c", "b"]}),
        &[("default", "v1", &[r#".list[="a"]"#, r#".list[="b"]"#, r#".list[="c"]"#, r#".list[="d"]"#])],
    );
}

#[test]
fn set_apply_update_apply_reorder() {
    let (s, t) = sets();
    run(
        &s,
        t,
        vec![
            apply("default", "v1", json!({"list": ["a", "b", "c", "d"]})),
            update("controller", "v1", json!({"list": ["a", "d", "c", "b"]})),
            apply("default", "v1", json!({"list": ["a", "b", "c", "d"]})),
        ],
        json!({"list": ["a", "b", "c", "d"]}),
        &[("default", "v1", &[r#".list[="a"]"#, r#".list[="b"]"#, r#".list[="c"]"#, r#".list[="d"]"#])],
    );
}

#[test]
fn set_apply_twice_remove() {
    let (s, t) = sets();
    run(
        &s,
        t,
        vec![
            apply("default", "v1", json!({"list": ["a", "b", "c", "d"]})),
            apply("default", "v1", json!({"list": ["a", "c"]})),
        ],
        json!({"list": ["a", "c"]}),
        &[("default", "v1", &[r#".list[="a"]"#, r#".list[="c"]"#])],
    );
}

// merge/multiple_appliers_test.go, key_test.go, nested_test.go: the scenarios restated on a
// pod-like schema (a keyed list of structs with a nested keyed list, an atomic list, a
// granular and an atomic map).

fn pods() -> (Schema, TypeId) {
    let mut s = Schema::new();
    let port = strukt(&mut s, &[("containerPort", S), ("protocol", S), ("name", S)]);
    let ports = keyed(&mut s, port, &["containerPort", "protocol"]);
    let args = list(&mut s, S, ListKind::Atomic);
    let container = strukt(&mut s, &[("name", S), ("image", S), ("args", args), ("ports", ports)]);
    let containers = keyed(&mut s, container, &["name"]);
    let labels = map_of(&mut s, S, false);
    let selector = map_of(&mut s, S, true);
    let spec = strukt(&mut s, &[("containers", containers), ("nodeSelector", selector)]);
    let meta = strukt(&mut s, &[("labels", labels)]);
    let t = strukt(&mut s, &[("metadata", meta), ("spec", spec)]);
    (s, t)
}

#[test]
fn keyed_list_two_appliers_own_their_items_and_remove_only_theirs() {
    let (s, t) = pods();
    run(
        &s,
        t,
        vec![
            apply("apply-one", "v1", json!({"spec": {"containers": [{"name": "a", "image": "a:1"}]}})),
            apply("apply-two", "v2", json!({"spec": {"containers": [{"name": "b", "image": "b:1"}]}})),
            apply("apply-one", "v1", json!({"spec": {"containers": [{"name": "c", "image": "c:1"}]}})),
        ],
        json!({"spec": {"containers": [{"name": "b", "image": "b:1"}, {"name": "c", "image": "c:1"}]}}),
        &[
            (
                "apply-one",
                "v1",
                &[
                    r#".spec.containers[name="c"]"#,
                    r#".spec.containers[name="c"].name"#,
                    r#".spec.containers[name="c"].image"#,
                ],
            ),
            (
                "apply-two",
                "v2",
                &[
                    r#".spec.containers[name="b"]"#,
                    r#".spec.containers[name="b"].name"#,
                    r#".spec.containers[name="b"].image"#,
                ],
            ),
        ],
    );
}

#[test]
fn keyed_list_conflict_on_an_items_field_and_force_takes_it() {
    let (s, t) = pods();
    let c = r#".spec.containers[name="a"]"#;
    run(
        &s,
        t,
        vec![
            apply("apply-one", "v1", json!({"spec": {"containers": [{"name": "a", "image": "a:1"}]}})),
            apply_conflicts(
                "apply-two",
                "v1",
                json!({"spec": {"containers": [{"name": "a", "image": "a:2"}]}}),
                &[("apply-one", r#".spec.containers[name="a"].image"#)],
            ),
            force("apply-two", "v1", json!({"spec": {"containers": [{"name": "a", "image": "a:2"}]}})),
        ],
        json!({"spec": {"containers": [{"name": "a", "image": "a:2"}]}}),
        &[
            ("apply-one", "v1", &[c, r#".spec.containers[name="a"].name"#]),
            ("apply-two", "v1", &[c, r#".spec.containers[name="a"].name"#, r#".spec.containers[name="a"].image"#]),
        ],
    );
}

#[test]
fn equal_values_are_shared_and_survive_one_owner_leaving() {
    let (s, t) = pods();
    run(
        &s,
        t,
        vec![
            apply("apply-one", "v1", json!({"metadata": {"labels": {"team": "a", "one": "1"}}})),
            apply("apply-two", "v1", json!({"metadata": {"labels": {"team": "a"}}})),
            apply("apply-one", "v1", json!({"metadata": {"labels": {"one": "1"}}})),
        ],
        json!({"metadata": {"labels": {"team": "a", "one": "1"}}}),
        &[("apply-one", "v1", &[".metadata.labels.one"]), ("apply-two", "v1", &[".metadata.labels.team"])],
    );
}

#[test]
fn an_update_takes_ownership_and_the_applier_then_conflicts() {
    let (s, t) = pods();
    run(
        &s,
        t,
        vec![
            apply("apply-one", "v1", json!({"metadata": {"labels": {"team": "a"}}})),
            update("controller", "v1", json!({"metadata": {"labels": {"team": "b"}}})),
            apply_conflicts(
                "apply-one",
                "v1",
                json!({"metadata": {"labels": {"team": "a"}}}),
                &[("controller", ".metadata.labels.team")],
            ),
        ],
        json!({"metadata": {"labels": {"team": "b"}}}),
        &[("controller", "v1", &[".metadata.labels.team"])],
    );
}

#[test]
fn atomic_list_and_map_are_owned_whole() {
    let (s, t) = pods();
    run(
        &s,
        t,
        vec![
            apply(
                "apply-one",
                "v1",
                json!({"spec": {"nodeSelector": {"a": "1"}, "containers": [{"name": "a", "args": ["x", "y"]}]}}),
            ),
            apply_conflicts(
                "apply-two",
                "v1",
                json!({"spec": {"nodeSelector": {"b": "2"}, "containers": [{"name": "a", "args": ["z"]}]}}),
                &[("apply-one", ".spec.nodeSelector"), ("apply-one", r#".spec.containers[name="a"].args"#)],
            ),
        ],
        json!({"spec": {"nodeSelector": {"a": "1"}, "containers": [{"name": "a", "args": ["x", "y"]}]}}),
        &[(
            "apply-one",
            "v1",
            &[
                ".spec.nodeSelector",
                r#".spec.containers[name="a"]"#,
                r#".spec.containers[name="a"].name"#,
                r#".spec.containers[name="a"].args"#,
            ],
        )],
    );
}

#[test]
fn nested_keyed_list_with_two_keys_removes_an_applied_port() {
    let (s, t) = pods();
    let ports = |list: serde_json::Value| json!({"spec": {"containers": [{"name": "a", "ports": list}]}});
    run(
        &s,
        t,
        vec![
            apply(
                "apply-one",
                "v1",
                ports(json!([{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 80, "protocol": "UDP"}])),
            ),
            apply("apply-one", "v1", ports(json!([{"containerPort": 80, "protocol": "UDP", "name": "dns"}]))),
        ],
        ports(json!([{"containerPort": 80, "protocol": "UDP", "name": "dns"}])),
        &[(
            "apply-one",
            "v1",
            &[
                r#".spec.containers[name="a"]"#,
                r#".spec.containers[name="a"].name"#,
                r#".spec.containers[name="a"].ports[containerPort=80,protocol="UDP"]"#,
                r#".spec.containers[name="a"].ports[containerPort=80,protocol="UDP"].containerPort"#,
                r#".spec.containers[name="a"].ports[containerPort=80,protocol="UDP"].protocol"#,
                r#".spec.containers[name="a"].ports[containerPort=80,protocol="UDP"].name"#,
            ],
        )],
    );
}

#[test]
fn a_struct_no_longer_applied_is_removed_with_its_fields() {
    let (s, t) = pods();
    run(
        &s,
        t,
        vec![
            apply("apply-one", "v1", json!({"metadata": {"labels": {"a": "1"}}, "spec": {"nodeSelector": {"x": "y"}}})),
            apply("apply-one", "v1", json!({"metadata": {"labels": {"a": "1"}}})),
        ],
        json!({"metadata": {"labels": {"a": "1"}}}),
        &[("apply-one", "v1", &[".metadata.labels.a"])],
    );
}

#[test]
fn the_applied_config_is_validated_against_the_schema() {
    let (s, t) = pods();
    let updater = podpass_merge::Updater::new(&s, t);
    let mut managers = podpass_merge::ManagedFields::new();
    let err = |config: serde_json::Value| {
        updater.apply(&json!({}), &config, "v1", &mut managers.clone(), "m", false).unwrap_err().to_string()
    };
    assert_eq!(err(json!({"spec": {"nope": 1}})), ".spec.nope: field not declared in schema");
    assert_eq!(
        err(json!({"spec": {"containers": [{"image": "x"}]}})),
        ".spec.containers[0]: associative list with keys has an element that omits key field \"name\" (and doesn't have default value)"
    );
    assert_eq!(
        err(json!({"spec": {"containers": [{"name": "a"}, {"name": "a"}]}})),
        ".spec.containers[name=\"a\"]: duplicate entries for key"
    );
    assert_eq!(err(json!({"spec": {"containers": "x"}})), ".spec.containers: expected list, got string");
    assert_eq!(err(json!({"metadata": {"labels": {"a": {"b": 1}}}})), ".metadata.labels.a: expected scalar, got map");
    managers.clear();
}
