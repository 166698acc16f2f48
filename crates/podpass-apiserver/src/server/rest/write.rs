//! The generic registry's writes (upstream: `genericregistry.Store` Create/Update and the
//! patch handler): server metadata, the kind's strategy, admission, dry runs, the write,
//! and what runs after it. Nothing here names a kind; what a kind adds is its strategy's.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::admission::{self, Attributes, Operation};
use super::apply::{self, Applied};
use super::field_validation::{self, FieldValidation};
pub(super) use super::kinds::Part;
use super::kinds::{AfterWrite, BeginWrite, Reserved, Written};
use super::objects::{prepare_new, prepare_update};
use super::resources::Resource;
use super::{check_depth, dry_run, json_response, key, lifecycle, patch};
use crate::field::Field;
use crate::server::status::StatusError;
use crate::server::{AppState, User};
use crate::store::{StoreError, Stored};

/// One request to a stored resource: who asks, for what, where, and whether it persists.
pub(super) struct Target<'a> {
    /// The server.
    pub state: &'a Arc<AppState>,
    /// The (possibly impersonated) user.
    pub user: &'a User,
    /// The resource whose storage and strategy serve the request.
    pub res: &'static Resource,
    /// The resource the client addressed: `res`, or a version of it served from its
    /// storage (converted).
    pub served: &'static Resource,
    /// The namespace of the path (namespaced kinds).
    pub ns: Option<&'a str>,
    /// Whether the write persists (`dryRun`).
    pub write: dry_run::Write,
    /// The field manager the write's changes are recorded under.
    pub manager: &'a str,
    /// An apply takes conflicting fields (`force=true`).
    pub force: bool,
    /// What admission adds to the answer (warnings, audit annotations).
    pub notes: &'a admission::Notes,
}

/// A request body as sent: its media type, bytes, and the field validation asked for.
#[derive(Clone, Copy)]
pub(super) struct Body<'a> {
    /// `Content-Type`.
    pub content_type: &'a str,
    /// The bytes.
    pub bytes: &'a [u8],
    /// `fieldValidation`.
    pub mode: FieldValidation,
}

impl Target<'_> {
    fn attributes<'a>(&'a self, name: &'a str, operation: Operation) -> Attributes<'a> {
        Attributes {
            user: self.user,
            res: self.res,
            subresource: "",
            namespace: self.ns,
            name,
            operation,
            notes: self.notes,
            dry_run: self.write.is_dry_run(),
        }
    }

    /// The strategy's hook once a write is stored.
    pub(super) async fn after_write(
        &self,
        written: Written,
        name: &str,
        stored: &Stored,
        old: Option<&Value>,
    ) -> Result<(), StatusError> {
        let write = AfterWrite { written, name, revision: stored.revision, object: &stored.object, old };
        self.res.strategy.after_write(self.state, write).await
    }

    /// The strategy's reservation for a write of `object` (replacing `old`).
    async fn begin_write(&self, name: &str, old: Option<&Value>, object: &mut Value) -> Result<Reserved, StatusError> {
        let write = BeginWrite { namespace: self.ns, name, old, dry_run: self.write.is_dry_run(), user: self.user };
        self.res.strategy.begin_write(self.state, write, object).await
    }
}

/// POST of a new object (genericregistry `Store.Create` behind the create handler); the
/// creator owns what it sent.
pub(super) async fn create(t: &Target<'_>, mut object: Value) -> Result<Response, StatusError> {
    apply::track_update(t.res, false, &json!({}), &mut object, t.manager)?;
    create_tracked(t, object).await
}

/// A create whose managed fields are already set (a create, or an apply that creates).
async fn create_tracked(t: &Target<'_>, mut object: Value) -> Result<Response, StatusError> {
    let (state, res) = (t.state, t.res);
    // Admission sees a generateName create before its name exists, so its refusals name
    // the generateName (`pods "web-" is forbidden`), as upstream's `extractResourceName`.
    let generated = object.pointer("/metadata/name").and_then(Value::as_str).is_none_or(str::is_empty);
    let generate_name = object.pointer("/metadata/generateName").and_then(Value::as_str).map(str::to_owned);
    let name = prepare_new(res, t.ns, &mut object, podpass_token::now_unix())?;
    let admitted_as = match (generated, generate_name) {
        (true, Some(prefix)) if !prefix.is_empty() => prefix,
        _ => name.clone(),
    };
    let ns_uid = match t.ns {
        Some(ns) => Some(admission::namespace_lifecycle(state, res, ns, &name).await?),
        None => None,
    };
    res.strategy.default(&name, &mut object)?;
    let attrs = t.attributes(&admitted_as, Operation::Create);
    admission::mutate(state, &attrs, &mut object).await?;
    res.strategy.prepare_for_create(&mut object);
    let reserved = t.begin_write(&name, None, &mut object).await?;
    let k = key(res, t.ns, &name);
    let created = match validate_and_create(t, &attrs, &name, &k, object).await {
        Ok(NewObject::Stored(created)) => created,
        Ok(NewObject::DryRun(object)) => return Ok(json_response(StatusCode::CREATED, object)),
        Err(e) => {
            reserved.release(state).await;
            return Err(e);
        }
    };
    if let (Some(ns), Some(uid)) = (t.ns, &ns_uid) {
        lifecycle::after_create(state, res, ns, uid, &k, &created).await?;
    }
    t.after_write(Written::Created, &name, &created, None).await?;
    Ok(json_response(StatusCode::CREATED, created.object))
}

/// A create once validated: stored, or as it would be.
enum NewObject {
    Stored(Stored),
    DryRun(Value),
}

/// `Validate`, validating admission, then the store's create (or, in a dry run, the
/// conflict check alone).
async fn validate_and_create(
    t: &Target<'_>,
    attrs: &Attributes<'_>,
    name: &str,
    k: &crate::store::ObjectKey,
    object: Value,
) -> Result<NewObject, StatusError> {
    let (state, res) = (t.state, t.res);
    res.strategy.validate(name, &object)?;
    admission::validate(state, attrs, Some(&object), None).await?;
    if t.write.is_dry_run() {
        // DryRunnableStorage.Create: an existing object is still a conflict; the answer is
        // the object as it would be stored (no resourceVersion), and nothing else runs.
        return match state.store.get(k).await {
            Ok(_) => Err(StoreError::AlreadyExists { resource: res.plural.to_owned(), name: name.to_owned() }.into()),
            Err(StoreError::NotFound { .. }) => Ok(NewObject::DryRun(object)),
            Err(e) => Err(e.into()),
        };
    }
    Ok(NewObject::Stored(state.store.create(k, object).await?))
}

/// What an update and a patch share once the replacement is known: server metadata
/// carried over, finalizer rules, the strategy's defaults, mutating admission (not through
/// `/status`), `ValidateUpdate`, and validating admission.
async fn admit_replacement(
    t: &Target<'_>,
    name: &str,
    part: Part,
    current: &Value,
    object: &mut Value,
) -> Result<Reserved, StatusError> {
    let res = t.res;
    prepare_update(res, current, object, name)?;
    lifecycle::check_finalizer_update(res.kind, name, current, object)?;
    res.strategy.default(name, object)?;
    if part == Part::Main {
        admission::mutate_update(&t.attributes(name, Operation::Update), object);
    }
    let reserved = t.begin_write(name, Some(current), object).await?;
    match validate_replacement(t, name, part, current, object).await {
        Ok(()) => Ok(reserved),
        Err(e) => {
            reserved.release(t.state).await;
            Err(e)
        }
    }
}

/// `ValidateUpdate` and validating admission of a replacement.
async fn validate_replacement(
    t: &Target<'_>,
    name: &str,
    part: Part,
    current: &Value,
    object: &Value,
) -> Result<(), StatusError> {
    t.res.strategy.validate_update(name, object, current)?;
    if part != Part::Main {
        admission::validate_part(t.state, &t.attributes(name, Operation::Update), part, object, current).await?;
    }
    // A version served from another's storage adds its own update rules (events.k8s.io/v1:
    // ValidateEventUpdate), on the stored shapes as upstream's internal Event.
    if let Some(conversion) = t.served.conversion {
        conversion.validate_update(name, object, current)?;
    }
    admission::validate(t.state, &t.attributes(name, Operation::Update), Some(object), Some(current)).await
}

/// PUT of a whole object, or of its status through `/status`.
pub(super) async fn update(t: &Target<'_>, name: &str, part: Part, object: Value) -> Result<Response, StatusError> {
    Ok(json_response(StatusCode::OK, update_object(t, name, part, object).await?))
}

/// [`update`]'s object as stored (as it would be, for a dry run).
pub(super) async fn update_object(
    t: &Target<'_>,
    name: &str,
    part: Part,
    mut object: Value,
) -> Result<Value, StatusError> {
    let (state, res) = (t.state, t.res);
    let k = key(res, t.ns, name);
    let current = state.store.get(&k).await?;
    let expected = match object.field("/metadata/resourceVersion").and_then(Value::as_str) {
        Some(rv) => {
            Some(rv.parse::<u64>().map_err(|_| StatusError::bad_request(format!("invalid resourceVersion {rv:?}")))?)
        }
        None => None,
    };
    apply::track_update(res, part == Part::Status, &current.object, &mut object, t.manager)?;
    split_status(res, part, &current.object, &mut object);
    let reserved = admit_replacement(t, name, part, &current.object, &mut object).await?;
    if t.write.is_dry_run() {
        return dry_run_update(res, name, object, expected.unwrap_or(current.revision), &current);
    }
    let updated = match state.store.update(&k, object, expected.or(Some(current.revision))).await {
        Ok(updated) => updated,
        Err(e) => {
            reserved.release(state).await;
            return Err(e.into());
        }
    };
    t.after_write(Written::Updated, name, &updated, Some(&current.object)).await?;
    lifecycle::finish_if_finalized(state, &k, updated).await
}

/// A dry-run update's answer (DryRunnableStorage.GuaranteedUpdate): the precondition still
/// holds or it is a conflict, and the object is what would be stored, at the current
/// resourceVersion.
fn dry_run_update(
    res: &Resource,
    name: &str,
    mut object: Value,
    expected: u64,
    current: &Stored,
) -> Result<Value, StatusError> {
    if expected != current.revision {
        return Err(StoreError::Conflict { resource: res.plural.to_owned(), name: name.to_owned() }.into());
    }
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(current.revision.to_string()));
    }
    Ok(object)
}

/// What a write may change: through `/status` the status only (everything else is the
/// current object's, upstream's status strategies), through `pods/ephemeralcontainers`
/// `spec.ephemeralContainers` only (podEphemeralContainersStrategy), through
/// `namespaces/finalize` `spec.finalizers` only; through the main
/// resource what the kind's `PrepareForUpdate` leaves (kinds with a `/status` subresource
/// keep the stored status).
fn split_status(res: &Resource, part: Part, current: &Value, object: &mut Value) {
    match part {
        Part::Status | Part::Approval => {
            let status = object.get("status").cloned().unwrap_or(Value::Null);
            *object = current.clone();
            object["status"] = status;
            res.strategy.prepare_for_part_update(part, object, current);
        }
        Part::EphemeralContainers => {
            let ephemeral = object.field("/spec/ephemeralContainers").cloned();
            *object = current.clone();
            if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                match ephemeral {
                    Some(e) => spec.insert("ephemeralContainers".into(), e),
                    None => spec.remove("ephemeralContainers"),
                };
            }
        }
        Part::Finalize => {
            // namespaceFinalizeStrategy: the finalizers are the one thing written.
            let finalizers = object.field("/spec/finalizers").cloned();
            *object = current.clone();
            if !object["spec"].is_object() {
                object["spec"] = json!({});
            }
            match finalizers {
                Some(f) => object["spec"]["finalizers"] = f,
                None => {
                    if let Some(spec) = object["spec"].as_object_mut() {
                        spec.remove("finalizers");
                    }
                }
            }
        }
        Part::Main => res.strategy.prepare_for_update(object, current),
    }
}

/// The patch types of `Content-Type` (apimachinery types.PatchType).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/json-patch+json` (RFC 6902).
    Json,
}

/// The media type of server-side apply.
pub(super) const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// Conflicts a patch retries on before giving up (upstream retries patches internally).
const PATCH_RETRIES: usize = 5;

pub(super) async fn patch(
    t: &Target<'_>,
    name: &str,
    part: Part,
    body: &Body<'_>,
) -> Result<(Response, Vec<String>), StatusError> {
    let Body { content_type, bytes: body, mode } = *body;
    let (state, res) = (t.state, t.res);
    let media = content_type.split(';').next().unwrap_or("").trim();
    let kind = match media {
        "application/merge-patch+json" => PatchKind::Merge,
        "application/strategic-merge-patch+json" => PatchKind::Strategic,
        "application/json-patch+json" => PatchKind::Json,
        APPLY_PATCH => return apply_patch(t, name, part, body, mode).await,
        other => return Err(StatusError::unsupported_media_type(other)),
    };
    let patch: Value =
        serde_json::from_slice(body).map_err(|e| StatusError::bad_request(format!("error decoding patch: {e}")))?;
    check_depth(&patch)?;
    let json_patch = match kind {
        PatchKind::Json => Some(patch::decode_json_patch(&patch)?),
        _ => None,
    };
    // Duplicates are the patch body's; unknown fields are the patched object's.
    let duplicates: Vec<String> = if json_patch.is_none() && mode != FieldValidation::Ignore {
        field_validation::duplicate_fields(body).into_iter().map(|p| format!("duplicate field {p:?}")).collect()
    } else {
        Vec::new()
    };
    let k = key(res, t.ns, name);
    let mut attempt = 0;
    loop {
        let current = state.store.get(&k).await?;
        // A patch is written against the version the client addresses.
        let conversion = t.served.conversion;
        let mut object = match conversion {
            Some(c) => c.to_served(current.object.clone()),
            None => current.object.clone(),
        };
        match (&json_patch, kind) {
            (Some(ops), _) => patch::apply_json_patch(&mut object, ops)?,
            (None, PatchKind::Strategic) => patch::strategic_merge_patch(&mut object, &patch),
            (None, _) => patch::merge_patch(&mut object, &patch),
        }
        if let Some(c) = conversion {
            object = c.to_stored(object);
        }
        // A patch that sets a resourceVersion (any patch type, a JSON patch's `replace` of
        // /metadata/resourceVersion included) makes it a precondition; otherwise the current
        // one. Read before the subresource split, which keeps the current metadata.
        let before = current.object.field("/metadata/resourceVersion");
        let patched_rv = object.field("/metadata/resourceVersion").filter(|rv| Some(*rv) != before).cloned();
        let precondition = patch.field("/metadata/resourceVersion").cloned().or(patched_rv);
        let expected = match &precondition {
            Some(rv) => {
                let text = rv.as_str().unwrap_or_default();
                text.parse::<u64>().map_err(|_| StatusError::bad_request(format!("invalid resourceVersion {rv}")))?
            }
            None => current.revision,
        };
        apply::track_update(res, part == Part::Status, &current.object, &mut object, t.manager)?;
        split_status(res, part, &current.object, &mut object);
        let mut warnings = field_validation::validate(mode, res.group, res.version, res.kind, None, &mut object)?;
        if !duplicates.is_empty() {
            if mode == FieldValidation::Strict {
                return Err(StatusError::bad_request(format!("strict decoding error: {}", duplicates.join(", "))));
            }
            if mode == FieldValidation::Warn {
                warnings.extend(duplicates.iter().cloned());
            }
        }
        check_depth(&object)?;
        let reserved = admit_replacement(t, name, part, &current.object, &mut object).await?;
        if t.write.is_dry_run() {
            return Ok((
                json_response(StatusCode::OK, dry_run_update(res, name, object, expected, &current)?),
                warnings,
            ));
        }
        match state.store.update(&k, object, Some(expected)).await {
            Ok(updated) => {
                t.after_write(Written::Updated, name, &updated, Some(&current.object)).await?;
                let answer = json_response(StatusCode::OK, lifecycle::finish_if_finalized(state, &k, updated).await?);
                return Ok((answer, warnings));
            }
            Err(StoreError::Conflict { .. }) if attempt < PATCH_RETRIES && precondition.is_none() => {
                reserved.release(state).await;
                attempt += 1;
            }
            Err(e) => {
                reserved.release(state).await;
                return Err(e.into());
            }
        }
    }
}

/// PATCH with `application/apply-patch+yaml` (upstream's applyPatcher): the configuration is
/// merged by the field manager; a missing object is created (201), an unchanged one is
/// answered as it is, nothing persists in a dry run.
async fn apply_patch(
    t: &Target<'_>,
    name: &str,
    part: Part,
    body: &[u8],
    mode: FieldValidation,
) -> Result<(Response, Vec<String>), StatusError> {
    let config = apply::decode_apply_body(body)?;
    // Decoded leniently (the last of duplicate keys wins), then checked strictly under
    // Strict or Warn only, as upstream's applyPatcher does with yaml.UnmarshalStrict.
    let duplicates: Vec<String> = if mode == FieldValidation::Ignore {
        Vec::new()
    } else {
        field_validation::duplicate_yaml_fields(body).iter().map(|p| format!("duplicate field {p:?}")).collect()
    };
    if mode == FieldValidation::Strict && !duplicates.is_empty() {
        return Err(StatusError::bad_request(format!("error strict decoding YAML: {}", duplicates.join(", "))));
    }
    let (answer, mut warnings) = apply_config(t, name, part, config, mode).await?;
    if mode == FieldValidation::Warn {
        warnings.extend(duplicates);
    }
    Ok((answer, warnings))
}

/// Applies the decoded configuration `config` (see [`apply_patch`]).
async fn apply_config(
    t: &Target<'_>,
    name: &str,
    part: Part,
    mut config: Value,
    mode: FieldValidation,
) -> Result<(Response, Vec<String>), StatusError> {
    let (state, res) = (t.state, t.res);
    for (field, want) in [("name", Some(name)), ("namespace", t.ns)] {
        let Some(want) = want else { continue };
        match config.pointer(&format!("/metadata/{field}")).and_then(Value::as_str) {
            Some(sent) if sent != want => {
                return Err(StatusError::bad_request(format!(
                    "the {field} of the object ({sent}) does not match the {field} on the URL ({want})"
                )));
            }
            Some(_) => {}
            None => {
                if let Some(meta) = config.as_object_mut().map(|o| o.entry("metadata").or_insert_with(|| json!({}))) {
                    meta[field] = json!(want);
                }
            }
        }
    }
    if let Some(c) = t.served.conversion {
        c.validate(name, &config)?;
        config = c.to_stored(config);
    }
    let k = key(res, t.ns, name);
    let mut attempt = 0;
    loop {
        let current = match state.store.get(&k).await {
            Ok(current) => current,
            Err(StoreError::NotFound { .. }) if part == Part::Main => {
                // A uid in the configuration names an object that does not exist (any
                // more): the patch handler's conflict (patch.go, applyPatch).
                if let Some(uid) = config.pointer("/metadata/uid").and_then(Value::as_str).filter(|u| !u.is_empty()) {
                    return Err(StatusError::new(
                        StatusCode::CONFLICT,
                        "Conflict",
                        format!(
                            "Operation cannot be fulfilled on {} {name:?}: uid mismatch: the provided object specified uid {uid}, and no existing object was found",
                            res.plural
                        ),
                    ));
                }
                let mut object = match apply::apply(res, false, None, &config, t.manager, t.force)? {
                    Applied::Write(object) => object,
                    Applied::Unchanged => config.clone(),
                };
                let warnings = field_validation::validate(mode, res.group, res.version, res.kind, None, &mut object)?;
                return Ok((create_tracked(t, object).await?, warnings));
            }
            Err(e) => return Err(e.into()),
        };
        let mut object =
            match apply::apply(res, part == Part::Status, Some(&current.object), &config, t.manager, t.force)? {
                Applied::Write(object) => object,
                Applied::Unchanged => return Ok((json_response(StatusCode::OK, current.object), Vec::new())),
            };
        split_status(res, part, &current.object, &mut object);
        let warnings = field_validation::validate(mode, res.group, res.version, res.kind, None, &mut object)?;
        check_depth(&object)?;
        let reserved = admit_replacement(t, name, part, &current.object, &mut object).await?;
        if t.write.is_dry_run() {
            return Ok((
                json_response(StatusCode::OK, dry_run_update(res, name, object, current.revision, &current)?),
                warnings,
            ));
        }
        match state.store.update(&k, object, Some(current.revision)).await {
            Ok(updated) => {
                t.after_write(Written::Updated, name, &updated, Some(&current.object)).await?;
                let answer = json_response(StatusCode::OK, lifecycle::finish_if_finalized(state, &k, updated).await?);
                return Ok((answer, warnings));
            }
            Err(StoreError::Conflict { .. }) if attempt < PATCH_RETRIES => {
                reserved.release(state).await;
                attempt += 1;
            }
            Err(e) => {
                reserved.release(state).await;
                return Err(e.into());
            }
        }
    }
}
