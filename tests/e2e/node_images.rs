//! End-to-end: `podpass node ensure-image` against the real CNCF registry (htpasswd), on the
//! embedded store. A pod may use an image another pod's secret pulled only when it shows
//! credentials of its own; records on disk are the kubelet's; a crash between the intent
//! and the record leaves the image needing verification; damaged records mean re-verify.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod registry;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use registry::{Registry, pull_secret, sha256};
use serde_json::Value;
use support::PODPASS;

struct Run {
    code: i32,
    json: Value,
    stderr: String,
}

fn ensure(root: &Path, args: &[&str], image: &str) -> Run {
    let out = Command::new(PODPASS)
        .args(["node", "ensure-image", "--root-dir", root.to_str().unwrap()])
        .args(args)
        .arg(image)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("decision JSON: {e}; stderr: {stderr}"));
    Run { code: out.status.code().unwrap_or(-1), json, stderr }
}

fn load(root: &Path, secret: Option<&Path>, image: &str) -> String {
    let mut cmd = Command::new(PODPASS);
    cmd.args(["node", "images", "load", "--root-dir", root.to_str().unwrap()]);
    if let Some(s) = secret {
        cmd.args(["--pull-secret", s.to_str().unwrap()]);
    }
    let out = cmd.arg(image).output().unwrap();
    assert!(out.status.success(), "load: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn kubelet_config(dir: &Path, policy: &str) -> PathBuf {
    let path = dir.join(format!("kubelet-{policy}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimagePullCredentialsVerificationPolicy: {policy}\n"
        ),
    )
    .unwrap();
    path
}

fn record_path(root: &Path, image_ref: &str) -> PathBuf {
    root.join("image_manager/pulled").join(format!("sha256-{}", &sha256(image_ref.as_bytes())[7..]))
}

fn message(r: &Run) -> String {
    r.json["events"].as_array().unwrap().last().unwrap()["message"].as_str().unwrap().to_owned()
}

struct Setup {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    root: PathBuf,
    registry: Registry,
    image: String,
    id: String,
    alice: PathBuf,
    alice_copy: PathBuf,
    mallory: PathBuf,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let registry = Registry::start(&dir.join("registry"), &[("alice", "wonderland"), ("bob", "builder")]);
    let (id, _) = registry.push(("alice", "wonderland"), "team/app", "v1", "private app v1");
    let image = format!("{}/team/app:v1", registry.host);
    let alice = pull_secret(&dir, "alice", "uid-alice", &registry.host, "alice", "wonderland");
    // Another secret (other coordinates) holding the very same credential.
    let alice_copy = pull_secret(&dir, "alice-copy", "uid-alice-copy", &registry.host, "alice", "wonderland");
    let mallory = pull_secret(&dir, "mallory", "uid-mallory", &registry.host, "alice", "guessed");
    let root = dir.join("kubelet");
    Setup { _dir: tmp, dir, root, registry, image, id, alice, alice_copy, mallory }
}

#[test]
fn an_image_pulled_with_a_secret_is_usable_only_with_credentials_on_record() {
    let s = setup();
    let secret = |p: &PathBuf| vec!["--pull-secret".to_owned(), p.to_str().unwrap().to_owned()];
    let with = |extra: Vec<String>, policy: &str| {
        let mut v = extra;
        v.extend(["--pull-policy".to_owned(), policy.to_owned()]);
        v
    };
    let run = |v: Vec<String>| {
        let refs: Vec<&str> = v.iter().map(String::as_str).collect();
        ensure(&s.root, &refs, &s.image)
    };

    // Nobody can pull anonymously.
    let r = run(with(vec![], "IfNotPresent"));
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.json["error"], "ErrImagePull");
    assert!(
        message(&r).starts_with(&format!("Failed to pull image {:?}: failed to authorize", s.image)),
        "{}",
        message(&r)
    );

    // Pod A pulls with its secret; the record names that secret and its credential hash.
    let a = run(with(secret(&s.alice), "IfNotPresent"));
    assert_eq!(a.code, 0, "{}", a.stderr);
    assert_eq!(a.json["pulled"], true);
    assert_eq!(a.json["imageRef"], s.id.as_str());
    assert_eq!(a.json["credentialUsed"]["type"], "secret");
    assert_eq!(a.json["credentialUsed"]["name"], "alice");
    let reasons: Vec<&str> =
        a.json["events"].as_array().unwrap().iter().map(|e| e["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, ["Pulling", "Pulled"]);
    assert!(message(&a).starts_with(&format!("Successfully pulled image {:?} in ", s.image)));
    let record: Value = serde_json::from_slice(&std::fs::read(record_path(&s.root, &s.id)).unwrap()).unwrap();
    assert_eq!(record["kind"], "ImagePulledRecord");
    assert_eq!(record["apiVersion"], "kubelet.config.k8s.io/v1beta1");
    assert_eq!(record["imageRef"], s.id.as_str());
    let entry = &record["credentialMapping"][format!("{}/team/app", s.registry.host)];
    assert_eq!(entry["kubernetesSecrets"][0]["name"], "alice");
    assert_eq!(entry["kubernetesSecrets"][0]["namespace"], "team");
    assert_eq!(entry["kubernetesSecrets"][0]["uid"], "uid-alice");
    assert_eq!(entry["kubernetesSecrets"][0]["credentialHash"].as_str().unwrap().len(), 64);
    assert!(entry.get("nodePodsAccessible").is_none());
    assert!(std::fs::read_dir(s.root.join("image_manager/pulling")).unwrap().next().is_none(), "intent released");

    // Pod A again: present and on record, no pull (a tagged image defaults to IfNotPresent).
    let again = run(secret(&s.alice));
    assert_eq!(again.json["pullPolicy"], "IfNotPresent");
    assert_eq!(again.code, 0);
    assert_eq!(again.json["pulled"], false);
    assert_eq!(
        message(&again),
        format!("Container image {:?} already present on machine and can be accessed by the pod", s.image)
    );

    // Pod B without credentials: present, but it must pull — and cannot.
    let b = run(with(vec![], "IfNotPresent"));
    assert_eq!(b.code, 1);
    assert_eq!(b.json["present"], true);
    assert_eq!(b.json["mustPull"], true);
    assert_eq!(b.json["error"], "ErrImagePull");
    // With pull policy Never, the answer does not reveal the image is there.
    let b_never = run(with(vec![], "Never"));
    assert_eq!(b_never.code, 1);
    assert_eq!(b_never.json["error"], "ErrImageNeverPull");
    assert_eq!(message(&b_never), format!("Container image {:?} is not present with pull policy of Never", s.image));
    // A wrong password cannot use it either.
    let m = run(with(secret(&s.mallory), "IfNotPresent"));
    assert_eq!(m.code, 1, "{}", m.stderr);
    assert_eq!(m.json["mustPull"], true);

    // Another secret with the same credential matches by hash, and is remembered.
    let c = run(with(secret(&s.alice_copy), "Never"));
    assert_eq!(c.code, 0, "{}", c.stderr);
    let record: Value = serde_json::from_slice(&std::fs::read(record_path(&s.root, &s.id)).unwrap()).unwrap();
    let names: Vec<&str> = record["credentialMapping"][format!("{}/team/app", s.registry.host)]["kubernetesSecrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alice", "alice-copy"]);

    // NeverVerify: anyone on the node may use what is there.
    let nv = kubelet_config(&s.dir, "NeverVerify");
    let r = run(with(vec!["--config".into(), nv.to_str().unwrap().into()], "IfNotPresent"));
    assert_eq!(r.code, 0, "{}", r.stderr);

    // The gate off: upstream's plain "already present" for everyone.
    let r = run(with(vec!["--feature-gates".into(), "KubeletEnsureSecretPulledImages=false".into()], "IfNotPresent"));
    assert_eq!(r.code, 0);
    assert_eq!(message(&r), format!("Container image {:?} already present on machine", s.image));

    // records list names who may use it.
    let out = Command::new(PODPASS)
        .args(["node", "records", "list", "--root-dir", s.root.to_str().unwrap()])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(table.contains(&s.id) && table.contains("secret team/alice (uid uid-alice"), "{table}");
}

#[test]
fn preloaded_images_follow_the_policy_and_a_crash_mid_pull_forces_verification() {
    let s = setup();
    // Baked into the node (not through the pull manager): no records.
    let id = load(&s.root, Some(&s.alice), &s.image);
    assert_eq!(id, s.id);
    assert!(!record_path(&s.root, &s.id).exists());
    let metrics = s.dir.join("metrics.txt");
    let r = ensure(&s.root, &["--pull-policy", "IfNotPresent", "--metrics-file", metrics.to_str().unwrap()], &s.image);
    assert_eq!(r.code, 0, "default policy trusts preloaded images: {}", r.stderr);
    let text = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        text.contains(
            r#"kubelet_image_manager_ensure_image_requests_total{pull_policy="ifnotpresent",present_locally="true",pull_required="false"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"kubelet_imagemanager_image_mustpull_checks_total{result="credentialPolicyAllowed"} 1"#),
        "{text}"
    );
    // AlwaysVerify: even a preloaded image needs the pod's own credentials.
    let av = kubelet_config(&s.dir, "AlwaysVerify");
    let r = ensure(&s.root, &["--config", av.to_str().unwrap(), "--pull-policy", "IfNotPresent"], &s.image);
    assert_eq!(r.code, 1);
    assert_eq!(r.json["mustPull"], true);

    // A pull is under way (registry frozen) when the node is killed -9.
    s.registry.signal("-STOP");
    let mut child = Command::new(PODPASS)
        .args(["node", "ensure-image", "--root-dir", s.root.to_str().unwrap(), "--pull-policy", "Always"])
        .args(["--pull-secret", s.alice.to_str().unwrap()])
        .arg(&s.image)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let intent = s.root.join("image_manager/pulling").join(format!("sha256-{}", &sha256(s.image.as_bytes())[7..]));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !intent.exists() {
        assert!(Instant::now() < deadline, "intent not written");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    child.kill().unwrap();
    child.wait().unwrap();
    s.registry.signal("-CONT");
    assert!(intent.exists(), "the intent survives the crash");
    let text = std::fs::read_to_string(&intent).unwrap();
    assert_eq!(
        text.trim(),
        format!(r#"{{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"{}"}}"#, s.image)
    );

    // Restart: housekeeping turns the intent into a record with no credentials, so the image
    // counts as pulled by the node and a pod without credentials must verify.
    let r = ensure(&s.root, &["--pull-policy", "IfNotPresent"], &s.image);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.json["mustPull"], true);
    assert!(!intent.exists());
    let record: Value = serde_json::from_slice(&std::fs::read(record_path(&s.root, &s.id)).unwrap()).unwrap();
    assert!(record.get("credentialMapping").is_none(), "no one is on record: {record}");
    // Pod A proves access by pulling; afterwards it is on record.
    let r = ensure(&s.root, &["--pull-policy", "IfNotPresent", "--pull-secret", s.alice.to_str().unwrap()], &s.image);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["pulled"], true);
}

#[test]
fn damaged_records_mean_reverification_never_a_panic() {
    let s = setup();
    let r = ensure(&s.root, &["--pull-policy", "IfNotPresent", "--pull-secret", s.alice.to_str().unwrap()], &s.image);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let path = record_path(&s.root, &s.id);
    let good = std::fs::read(&path).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", good[..good.len() / 2].to_vec()),
        ("garbage", b"\x00\xff not json".to_vec()),
        ("unknown field", {
            let mut v: Value = serde_json::from_slice(&good).unwrap();
            v["surprise"] = Value::Bool(true);
            serde_json::to_vec(&v).unwrap()
        }),
        ("unknown version", {
            let mut v: Value = serde_json::from_slice(&good).unwrap();
            v["apiVersion"] = Value::String("kubelet.config.k8s.io/v9".into());
            v["credentialMapping"] =
                serde_json::json!({format!("{}/team/app", s.registry.host): {"nodePodsAccessible": true}});
            serde_json::to_vec(&v).unwrap()
        }),
    ];
    for (what, bytes) in cases {
        std::fs::write(&path, &bytes).unwrap();
        let r = ensure(&s.root, &["--pull-policy", "IfNotPresent"], &s.image);
        assert_eq!(r.code, 1, "{what}: a pod without credentials must verify: {}", r.stderr);
        assert_eq!(r.json["mustPull"], true, "{what}");
    }
    // A file under this image's name holding another imageRef is not this image's record
    // (upstream's integrity check answers "not found"): the image then counts as not pulled
    // by the node, which the default policy trusts as preloaded — and AlwaysVerify does not.
    let mut v: Value = serde_json::from_slice(&good).unwrap();
    v["imageRef"] = Value::String("sha256:other".into());
    v["credentialMapping"] = serde_json::json!({format!("{}/team/app", s.registry.host): {"nodePodsAccessible": true}});
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let r = ensure(&s.root, &["--pull-policy", "IfNotPresent"], &s.image);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["present"], true);
    let av = kubelet_config(&s.dir, "AlwaysVerify");
    let r = ensure(&s.root, &["--config", av.to_str().unwrap(), "--pull-policy", "IfNotPresent"], &s.image);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.json["mustPull"], true);

    // A record written in the older v1alpha1 version still reads.
    let mut v: Value = serde_json::from_slice(&good).unwrap();
    v["apiVersion"] = Value::String("kubelet.config.k8s.io/v1alpha1".into());
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let r = ensure(&s.root, &["--pull-policy", "Never", "--pull-secret", s.alice.to_str().unwrap()], &s.image);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A pulled record that cannot be read is replaced by a fresh one after the next successful
/// pull (kubelet: writePulledRecordIfChanged treats an unreadable record as none), so the
/// image does not need pulling for ever after.
#[test]
fn a_corrupt_pulled_record_heals_after_the_next_successful_pull() {
    let s = setup();
    let alice = ["--pull-policy", "IfNotPresent", "--pull-secret", s.alice.to_str().unwrap()];
    assert_eq!(ensure(&s.root, &alice, &s.image).code, 0);
    let path = record_path(&s.root, &s.id);
    std::fs::write(&path, b"{\"kind\": \"ImagePulledRecord\", trunc").unwrap();

    // NeverVerifyAllowlistedImages with this image allowlisted: while the record is
    // unreadable, a pod without credentials must pull (and cannot).
    let allow = s.dir.join("kubelet-allow.yaml");
    std::fs::write(
        &allow,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\n\
             preloadedImagesVerificationAllowlist: [\"{}/team/app\"]\n",
            s.registry.host
        ),
    )
    .unwrap();
    let anonymous = ["--config", allow.to_str().unwrap(), "--pull-policy", "IfNotPresent"];
    let r = ensure(&s.root, &anonymous, &s.image);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("warning: unreadable pulled record:"), "{}", r.stderr);
    assert!(!r.stderr.contains("pull intent"), "{}", r.stderr);

    // alice's pod pulls again; the record is rewritten whole, naming her secret.
    let r = ensure(&s.root, &alice, &s.image);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["mustPull"], true);
    let record: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("the record was healed");
    assert_eq!(record["imageRef"], s.id.as_str());
    let secrets = &record["credentialMapping"][format!("{}/team/app", s.registry.host)]["kubernetesSecrets"];
    assert_eq!(secrets[0]["name"], "alice", "{record}");

    // From now on: alice without pulling, the allowlisted image for anyone, a stranger
    // under the default policy still refused.
    let r = ensure(&s.root, &alice, &s.image);
    assert_eq!((r.code, r.json["mustPull"].clone()), (0, Value::Bool(false)), "{}", r.stderr);
    assert!(!r.stderr.contains("unreadable"), "{}", r.stderr);
    assert_eq!(ensure(&s.root, &anonymous, &s.image).code, 0);
    assert_eq!(ensure(&s.root, &["--pull-policy", "IfNotPresent"], &s.image).code, 1);
}

/// Two pods pull the image at once (pull policy Always), alice's secret and a wrong
/// password: alice's succeeds, the other fails, and only alice's secret is on record.
/// Returns alice's decision.
fn parallel_pulls(s: &Setup, cfg: &Path, extra: &[&str]) -> Value {
    let spawn = |secret: &Path| {
        Command::new(PODPASS)
            .args(["node", "ensure-image", "--root-dir", s.root.to_str().unwrap(), "--config", cfg.to_str().unwrap()])
            .args(extra)
            .args(["--pull-policy", "Always", "--pull-secret", secret.to_str().unwrap()])
            .arg(&s.image)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (good, bad) = (spawn(&s.alice), spawn(&s.mallory));
    let good = good.wait_with_output().unwrap();
    let bad = bad.wait_with_output().unwrap();
    assert_eq!(good.status.code(), Some(0), "{}", String::from_utf8_lossy(&good.stderr));
    assert_eq!(bad.status.code(), Some(1), "{}", String::from_utf8_lossy(&bad.stderr));
    let record: Value = serde_json::from_slice(&std::fs::read(record_path(&s.root, &s.id)).unwrap()).unwrap();
    let secrets = &record["credentialMapping"][format!("{}/team/app", s.registry.host)]["kubernetesSecrets"];
    assert_eq!(secrets.as_array().unwrap().len(), 1, "{record}");
    assert_eq!(secrets[0]["name"], "alice");
    serde_json::from_slice(&good.stdout).unwrap()
}

#[test]
fn two_pods_pull_in_parallel_with_different_credentials_only_the_successful_one_is_recorded() {
    let s = setup();
    let cfg = s.dir.join("parallel.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nserializeImagePulls: false\nmaxParallelImagePulls: 2\n",
    )
    .unwrap();
    parallel_pulls(&s, &cfg, &[]);
    // Only the pod whose pull succeeded may use the image.
    let a = ensure(&s.root, &["--pull-policy", "Never", "--pull-secret", s.alice.to_str().unwrap()], &s.image);
    assert_eq!(a.code, 0, "{}", a.stderr);
    let m = ensure(&s.root, &["--pull-policy", "Never", "--pull-secret", s.mallory.to_str().unwrap()], &s.image);
    assert_eq!(m.code, 1);
    assert_eq!(m.json["error"], "ErrImageNeverPull");
}

#[test]
fn gc_prunes_records_of_removed_images() {
    let s = setup();
    let r = ensure(&s.root, &["--pull-policy", "IfNotPresent", "--pull-secret", s.alice.to_str().unwrap()], &s.image);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let gc = |root: &Path| {
        let out = Command::new(PODPASS).args(["node", "gc", "--root-dir", root.to_str().unwrap()]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(gc(&s.root).trim(), "pruned 0 records");
    assert!(record_path(&s.root, &s.id).exists());
    // The image leaves the store (as image GC would remove it); its content goes too.
    let out = Command::new(PODPASS)
        .args(["node", "images", "remove", "--root-dir", s.root.to_str().unwrap(), &s.image])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let blob = s.root.join("images/blobs/sha256").join(&s.id[7..]);
    assert!(!blob.exists(), "config blob removed");
    let out = Command::new(PODPASS)
        .args(["node", "images", "list", "--root-dir", s.root.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains(&s.id));
    // The record outlives the image until GC prunes it.
    assert!(record_path(&s.root, &s.id).exists());
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(gc(&s.root).trim(), "pruned 1 records");
    assert!(!record_path(&s.root, &s.id).exists());
}

mod containerd;

#[test]
fn on_containerd_two_parallel_pulls_record_only_the_successful_credential() {
    let s = setup();
    let ctd = containerd::Containerd::start(&s.dir.join("ctd"));
    let ep = ctd.endpoint.as_str();
    let cfg = s.dir.join("parallel.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nserializeImagePulls: false\n",
    )
    .unwrap();
    // Nothing present, no credentials: containerd's anonymous pull is refused.
    let r = ensure(&s.root, &["--container-runtime-endpoint", ep, "--pull-policy", "IfNotPresent"], &s.image);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(message(&r).contains("rpc error: code = "), "{}", message(&r));

    let decision = parallel_pulls(&s, &cfg, &["--container-runtime-endpoint", ep]);
    // containerd's image ID is the config digest, as the embedded store's.
    assert_eq!(decision["imageRef"], s.id.as_str());

    let with = |secret: &Path, policy: &str| {
        ensure(
            &s.root,
            &["--container-runtime-endpoint", ep, "--pull-policy", policy, "--pull-secret", secret.to_str().unwrap()],
            &s.image,
        )
    };
    let a = with(&s.alice, "Never");
    assert_eq!(a.code, 0, "{}", a.stderr);
    assert_eq!(
        message(&a),
        format!("Container image {:?} already present on machine and can be accessed by the pod", s.image)
    );
    let m = with(&s.mallory, "Never");
    assert_eq!(m.code, 1);
    assert_eq!(m.json["error"], "ErrImageNeverPull");
    // IfNotPresent: the pod must pull, and containerd refuses its credential.
    let m = with(&s.mallory, "IfNotPresent");
    assert_eq!(m.code, 1);
    assert_eq!(m.json["mustPull"], true);

    // Housekeeping and GC see containerd's images.
    let out = Command::new(PODPASS)
        .args(["node", "gc", "--root-dir", s.root.to_str().unwrap(), "--container-runtime-endpoint", ep])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "pruned 0 records");
    let out = Command::new(PODPASS)
        .args(["node", "images", "list", "--root-dir", s.root.to_str().unwrap(), "--container-runtime-endpoint", ep])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(list.contains(&s.id) && list.contains(&s.image), "{list}");
}

/// A credential provider (no token attributes) answering alice's credential for the registry.
fn provider(dir: &Path, registry: &str) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("provider-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\ncat >/dev/null\necho '{{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"cacheKeyType\":\"Registry\",\"auth\":{{\"{registry}\":{{\"username\":\"alice\",\"password\":\"wonderland\"}}}}}}'\n"
    );
    std::fs::write(bin.join("registry-login"), script).unwrap();
    std::fs::set_permissions(bin.join("registry-login"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.join("providers.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: registry-login\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [\"{registry}\"]\n  defaultCacheDuration: 0s\n"
        ),
    )
    .unwrap();
    (config, bin)
}

#[test]
fn images_pulled_with_a_service_accounts_credentials_are_recorded_to_that_service_account() {
    let s = setup();
    let (config, bin) = provider(&s.dir, &s.registry.host);
    let run = |sa: Option<&str>, policy: &str, with_provider: bool| {
        let mut args = vec!["--pull-policy", policy];
        if with_provider {
            args.extend([
                "--image-credential-provider-config",
                config.to_str().unwrap(),
                "--image-credential-provider-bin-dir",
                bin.to_str().unwrap(),
            ]);
        }
        if let Some(sa) = sa {
            args.extend(["--service-account", sa]);
        }
        ensure(&s.root, &args, &s.image)
    };
    let r = run(Some("team/builder/uid-1"), "IfNotPresent", true);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["credentialUsed"]["type"], "serviceAccount");
    let record: Value = serde_json::from_slice(&std::fs::read(record_path(&s.root, &s.id)).unwrap()).unwrap();
    assert_eq!(
        record["credentialMapping"][format!("{}/team/app", s.registry.host)]["kubernetesServiceAccounts"],
        serde_json::json!([{"uid": "uid-1", "namespace": "team", "name": "builder"}])
    );
    // The same service account (namespace, name and UID) may use it without pulling.
    let r = run(Some("team/builder/uid-1"), "Never", true);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // A recreated service account of the same name is another identity.
    let r = run(Some("team/builder/uid-2"), "Never", true);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.json["error"], "ErrImageNeverPull");
    // It may pull for itself, and is then on record too (distinct entries by UID).
    let r = run(Some("team/builder/uid-2"), "IfNotPresent", true);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["pulled"], true);
    let record: Value = serde_json::from_slice(&std::fs::read(record_path(&s.root, &s.id)).unwrap()).unwrap();
    let uids: Vec<&str> =
        record["credentialMapping"][format!("{}/team/app", s.registry.host)]["kubernetesServiceAccounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["uid"].as_str().unwrap())
            .collect();
    assert_eq!(uids, ["uid-1", "uid-2"]);
    // A pod with neither the service account nor a secret must pull, and cannot.
    let r = run(None, "IfNotPresent", false);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.json["mustPull"], true);
    // With the provider but without a service account, its credential is node-wide: the
    // pull succeeds and the image becomes usable by every pod (as upstream records it).
    let r = run(None, "IfNotPresent", true);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["credentialUsed"]["type"], "nodeWide");
    let record: Value = serde_json::from_slice(&std::fs::read(record_path(&s.root, &s.id)).unwrap()).unwrap();
    assert_eq!(
        record["credentialMapping"][format!("{}/team/app", s.registry.host)],
        serde_json::json!({"nodePodsAccessible": true})
    );
    let r = run(None, "Never", false);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A `podpass apiserver` for the test, and a kubeconfig for the node agent, which runs as
/// node n1 (`system:node:n1`, group `system:nodes`) as a kubelet does.
fn control_plane(s: &Setup) -> (support::Server, PathBuf) {
    let data = s.dir.join("apiserver");
    std::fs::create_dir(&data).unwrap();
    let server = support::start(&data, &[]);
    let out = Command::new(PODPASS)
        .args(["apiserver", "kubeconfig", "--data-dir", data.to_str().unwrap()])
        .args(["--user", "system:node:n1", "--group", "system:nodes"])
        .output()
        .unwrap();
    let kubeconfig = s.dir.join("n1.kubeconfig");
    std::fs::write(&kubeconfig, support::ok(out, "node kubeconfig")).unwrap();
    (server, kubeconfig)
}

/// POST as admin to the control plane.
fn api_post(s: &support::Server, path: &str, body: Value) -> Value {
    let resp = support::client(&s.dir)
        .post(format!("{}{path}", s.url))
        .bearer_auth(support::admin_token(&s.dir))
        .json(&body)
        .send()
        .unwrap();
    assert!(resp.status().is_success(), "POST {path}: {}", resp.text().unwrap());
    resp.json().unwrap()
}

#[test]
fn through_the_api_a_pod_of_another_tenant_cannot_use_an_image_pulled_with_a_secret() {
    let s = setup();
    let (server, kubeconfig) = control_plane(&s);
    for ns in ["team", "other"] {
        api_post(
            &server,
            "/api/v1/namespaces",
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
        support::wait_namespace_ready(&server, ns);
    }
    let config = format!(r#"{{"auths":{{"{}":{{"username":"alice","password":"wonderland"}}}}}}"#, s.registry.host);
    let secret = api_post(
        &server,
        "/api/v1/namespaces/team/secrets",
        serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": data_encoding::BASE64.encode(config.as_bytes())}}),
    );
    let pod = |ns: &str, name: &str, secrets: Value| {
        api_post(
            &server,
            &format!("/api/v1/namespaces/{ns}/pods"),
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"nodeName": "n1", "imagePullSecrets": secrets,
                         "containers": [{"name": "app", "image": s.image}]}}),
        )
    };
    pod("team", "web", serde_json::json!([{"name": "regcred"}]));
    pod("other", "intruder", serde_json::json!([]));
    let run = |pod: &str, policy: &str| {
        ensure(
            &s.root,
            &["--kubeconfig", kubeconfig.to_str().unwrap(), "--pod", pod, "--pull-policy", policy],
            &s.image,
        )
    };
    let web = run("team/web", "IfNotPresent");
    assert_eq!(web.code, 0, "{}", web.stderr);
    assert_eq!(web.json["credentialUsed"]["name"], "regcred");
    assert_eq!(web.json["credentialUsed"]["uid"], secret["metadata"]["uid"]);
    let intruder = run("other/intruder", "IfNotPresent");
    assert_eq!(intruder.code, 1, "{}", intruder.stderr);
    assert_eq!(intruder.json["present"], true);
    assert_eq!(intruder.json["mustPull"], true);
    let again = run("team/web", "Never");
    assert_eq!(again.code, 0, "{}", again.stderr);
}

#[test]
fn the_embedded_store_pulls_from_a_token_auth_registry_with_the_pods_credentials() {
    let s = setup();
    let tr = registry::TokenRegistry::start(&s.dir.join("token-registry"), &s.registry, &[("alice", "wonderland")]);
    let image = format!("{}/team/app:v1", tr.host);
    let alice = pull_secret(&s.dir, "alice-t", "uid-alice-t", &tr.host, "alice", "wonderland");
    let wrong = pull_secret(&s.dir, "wrong-t", "uid-wrong-t", &tr.host, "alice", "nope");
    let r = ensure(&s.root, &["--pull-policy", "IfNotPresent", "--pull-secret", alice.to_str().unwrap()], &image);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json["imageRef"], s.id.as_str(), "same content, same image ID");
    // The token service saw alice's Basic credentials and granted a pull scope.
    let log = std::fs::read_to_string(&tr.token_log).unwrap();
    assert!(log.contains(r#""user": "alice", "auth": "Basic", "scope": "repository:team/app:pull""#), "{log}");
    // Without credentials, or with wrong ones, the token service refuses: no pull, no use.
    let r = ensure(&s.root, &["--pull-policy", "IfNotPresent"], &image);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.json["mustPull"], true);
    let r = ensure(&s.root, &["--pull-policy", "IfNotPresent", "--pull-secret", wrong.to_str().unwrap()], &image);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(message(&r).contains("failed to authorize"), "{}", message(&r));
}

/// A provider that exchanges the pod's service-account token for the registry credential:
/// alice's password only when a token bound to a pod came with the request.
const TOKEN_EXCHANGE_PLUGIN: &str = r#"#!/usr/bin/env python3
import base64, json, sys
req = json.load(sys.stdin)
tok = req.get("serviceAccountToken", "")
claims = {}
if tok.count(".") == 2:
    part = tok.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
ok = "pod" in claims.get("kubernetes.io", {})
password = "wonderland" if ok else "no-token"
registry = sys.argv[1]
print(json.dumps({"kind": "CredentialProviderResponse", "apiVersion": req["apiVersion"],
                  "cacheKeyType": "Registry", "cacheDuration": "0s",
                  "auth": {registry: {"username": "alice", "password": password}}}))
"#;

#[test]
fn a_pod_pulls_with_its_own_service_account_token_and_only_that_identity_is_recorded() {
    use std::os::unix::fs::PermissionsExt;
    let s = setup();
    let (server, kubeconfig) = control_plane(&s);
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
    api_post(&server, "/api/v1/namespaces", ns);
    support::wait_namespace_ready(&server, "team");
    let sa = api_post(
        &server,
        "/api/v1/namespaces/team/serviceaccounts",
        serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder"}}),
    );
    api_post(
        &server,
        "/api/v1/namespaces/team/serviceaccounts",
        serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "other"}}),
    );
    // The pod names the provider's audience in a projected token volume, so the node may
    // request that token for it (NodeRestriction).
    let pod = |name: &str, account: &str| {
        api_post(
            &server,
            "/api/v1/namespaces/team/pods",
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"nodeName": "n1", "serviceAccountName": account,
                         "containers": [{"name": "app", "image": s.image}],
                         "volumes": [{"name": "registry-token", "projected": {"sources": [
                             {"serviceAccountToken": {"audience": "registry.local", "path": "token"}}]}}]}}),
        )
    };
    pod("web", "builder");
    pod("batch", "other");
    let bin = s.dir.join("exchange-bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("token-exchange"), TOKEN_EXCHANGE_PLUGIN).unwrap();
    std::fs::set_permissions(bin.join("token-exchange"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = s.dir.join("exchange.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: token-exchange\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [\"{host}\"]\n  defaultCacheDuration: 0s\n  args: [\"{host}\"]\n  tokenAttributes:\n    serviceAccountTokenAudience: registry.local\n    cacheType: Token\n    requireServiceAccount: true\n",
            host = s.registry.host
        ),
    )
    .unwrap();
    let run = |pod: &str, policy: &str| {
        ensure(
            &s.root,
            &[
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--pod",
                pod,
                "--image-credential-provider-config",
                config.to_str().unwrap(),
                "--image-credential-provider-bin-dir",
                bin.to_str().unwrap(),
                "--pull-policy",
                policy,
            ],
            &s.image,
        )
    };
    let web = run("team/web", "IfNotPresent");
    assert_eq!(web.code, 0, "{}", web.stderr);
    assert_eq!(web.json["credentialUsed"]["type"], "serviceAccount");
    assert_eq!(web.json["credentialUsed"]["uid"], sa["metadata"]["uid"]);
    let record: Value = serde_json::from_slice(&std::fs::read(record_path(&s.root, &s.id)).unwrap()).unwrap();
    assert_eq!(
        record["credentialMapping"][format!("{}/team/app", s.registry.host)]["kubernetesServiceAccounts"],
        serde_json::json!([{"uid": sa["metadata"]["uid"], "namespace": "team", "name": "builder"}])
    );
    // Another service account's pod is not on record: with Never it may not use the image.
    let batch = run("team/batch", "Never");
    assert_eq!(batch.code, 1, "{}", batch.stderr);
    assert_eq!(batch.json["error"], "ErrImageNeverPull");
    // web again: on record, no pull.
    let again = run("team/web", "Never");
    assert_eq!(again.code, 0, "{}", again.stderr);
}

#[test]
fn containerd_pulls_from_a_token_auth_registry_with_the_pods_credentials() {
    let s = setup();
    let tr = registry::TokenRegistry::start(&s.dir.join("token-registry"), &s.registry, &[("alice", "wonderland")]);
    let ctd = containerd::Containerd::start(&s.dir.join("ctd"));
    let image = format!("{}/team/app:v1", tr.host);
    let alice = pull_secret(&s.dir, "alice-t", "uid-alice-t", &tr.host, "alice", "wonderland");
    let wrong = pull_secret(&s.dir, "wrong-t", "uid-wrong-t", &tr.host, "alice", "nope");
    let run = |secret: &Path| {
        ensure(
            &s.root,
            &[
                "--container-runtime-endpoint",
                &ctd.endpoint,
                "--pull-policy",
                "IfNotPresent",
                "--pull-secret",
                secret.to_str().unwrap(),
            ],
            &image,
        )
    };
    let w = run(&wrong);
    assert_eq!(w.code, 1, "{}", w.stderr);
    let a = run(&alice);
    assert_eq!(a.code, 0, "{}", a.stderr);
    assert_eq!(a.json["imageRef"], s.id.as_str());
    // containerd exchanged alice's credential at the token service (password grant).
    let log = std::fs::read_to_string(&tr.token_log).unwrap();
    assert!(log.contains(r#""user": "alice", "auth": "POST", "scope": "repository:team/app:pull""#), "{log}");
    let w = run(&wrong);
    assert_eq!(w.code, 1, "a wrong password may not use what alice pulled: {}", w.stderr);
    assert_eq!(w.json["mustPull"], true);
}

/// `images load` with progress: a line per layer and the totals when not a terminal, a
/// block redrawn in place on one (`script` gives the command a pty), nothing with `none`.
#[test]
fn image_pulls_show_per_layer_progress_and_totals() {
    let s = setup();
    let (id, _) = s.registry.push_layers(("alice", "wonderland"), "team/big", "v1", &["one", "two two", "three"]);
    let image = format!("{}/team/big:v1", s.registry.host);
    let load_with = |root: &Path, progress: &str| {
        let out = Command::new(PODPASS)
            .args(["node", "images", "load", "--root-dir", root.to_str().unwrap(), "--progress", progress])
            .args(["--pull-secret", s.alice.to_str().unwrap(), &image])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), id);
        stderr
    };

    // Not a terminal: the plan, a line per blob as it lands, then the totals.
    let first = load_with(&s.root, "auto");
    let lines: Vec<&str> = first.lines().collect();
    assert_eq!(lines.len(), 6, "{first}");
    assert!(lines[0].starts_with(&format!("pulling {image}: 3 layers, ")), "{first}");
    assert!(lines[1].starts_with(&format!("  config {} ", &id[7..19])) && lines[1].ends_with(" pulled"), "{first}");
    for (i, line) in lines[2..5].iter().enumerate() {
        assert!(line.starts_with(&format!("  layer {}/3 ", i + 1)) && line.ends_with(" B pulled"), "{first}");
    }
    assert!(lines[5].starts_with(&format!("pulled {image}: 3 layers, ")), "{first}");
    assert!(lines[5].contains(" downloaded, 0 B already present, in "), "{first}");

    // Pulled again (load always asks the registry): every blob is already in the store.
    let again = load_with(&s.root, "plain");
    assert_eq!(again.matches(" already present\n").count(), 4, "{again}");
    assert!(again.contains(": 3 layers, 0 B downloaded, "), "{again}");

    // Nothing at all with --progress none.
    assert_eq!(load_with(&s.root, "none"), "");

    // On a terminal (auto): the block is drawn, then redrawn in place (cursor back over its
    // five lines), ending with every layer pulled and the totals.
    let fresh = s.dir.join("tty-node");
    let command = format!(
        "{PODPASS} node images load --root-dir {} --pull-secret {} {image}",
        fresh.display(),
        s.alice.display()
    );
    let out = Command::new("script").args(["-qec", &command, "/dev/null"]).output().unwrap();
    let tty = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{tty}");
    assert!(tty.contains("\x1b[5F"), "{tty:?}");
    let last = tty.rsplit("\x1b[5F").next().unwrap();
    assert_eq!(last.matches(" pulled ").count(), 4, "{last:?}");
    assert!(last.contains(&format!("pulled {image}: 3 layers, ")), "{last:?}");
    assert!(tty.contains(&id), "{tty:?}");
}

/// A mirror in front of the registry that serves every image without asking for credentials
/// (a pull-through cache, a P2P mirror): containerd pulls through it, so a pull proves
/// nothing. The node verifies each pull at the image's own registry (HEAD of the manifest by
/// digest, with the pod's credentials), and only that answer lets the pod use the image;
/// the layers still come from the mirror. `--trust-runtime-pulls` is the kubelet's
/// behaviour, and lets anyone through.
#[test]
fn a_mirror_that_asks_no_credentials_proves_nothing_access_is_verified_at_the_images_registry() {
    use podpass_node::runtime::containerd::RegistryHost;
    let s = setup();
    let mirror = Registry::mirror_of(&s.dir.join("mirror"), &s.registry);
    let ctd = containerd::Containerd::start_with_registries(
        &s.dir.join("ctd"),
        &[RegistryHost::Mirrored {
            mirror: format!("http://{}", mirror.host),
            origin: Box::new(RegistryHost::PlainHttp(s.registry.host.clone())),
        }],
    );
    let av = kubelet_config(&s.dir, "AlwaysVerify");
    let run = |secret: Option<&Path>, policy: &str, extra: &[&str]| {
        let mut args = vec!["--container-runtime-endpoint", &ctd.endpoint, "--pull-policy", policy];
        args.extend(["--config", av.to_str().unwrap()]);
        if let Some(secret) = secret {
            args.extend(["--pull-secret", secret.to_str().unwrap()]);
        }
        args.extend(extra);
        ensure(&s.root, &args, &s.image)
    };
    let blob_gets = || {
        std::fs::read_to_string(mirror.dir.join("registry.log")).unwrap().matches("/v2/team/app/blobs/sha256:").count()
    };

    // team-a (alice) pulls: the layers come from the mirror, the registry confirms alice.
    let a = run(Some(&s.alice), "IfNotPresent", &[]);
    assert_eq!(a.code, 0, "{}\n{}", a.stderr, a.json);
    assert_eq!(a.json["imageRef"], s.id.as_str());
    assert_eq!(a.json["verifiedAt"]["registry"], s.registry.host.as_str(), "{}", a.json);
    assert_eq!(a.json["verifiedAt"]["auth"], "basic");
    assert!(a.json["verifiedAt"]["digest"].as_str().unwrap().starts_with("sha256:"));
    assert!(blob_gets() > 0, "containerd took the layers from the mirror");

    // Nobody else proves access through the mirror: no credentials, or a wrong password,
    // pull through it and are refused by the registry; the image stays alice's.
    for (who, secret) in [("anonymous", None), ("a wrong password", Some(s.mallory.as_path()))] {
        let r = run(secret, "IfNotPresent", &[]);
        assert_eq!(r.code, 1, "{who}: {}", r.json);
        assert_eq!(r.json["error"], "ErrImagePull", "{who}");
        assert_eq!(r.json["mustPull"], true, "{who}");
        let m = r.json["message"].as_str().unwrap();
        assert!(m.contains("verifying at the image's registry") && m.contains(&s.registry.host), "{who}: {m}");
        assert!(r.json.get("imageRef").is_none(), "{who}: {}", r.json);
        let never = run(secret, "Never", &[]);
        assert_eq!(never.json["error"], "ErrImageNeverPull", "{who} is not on record");
    }
    let again = run(Some(&s.alice), "Never", &[]);
    assert_eq!(again.code, 0, "alice is on record: {}", again.json);

    // The kubelet's behaviour, named by the flag: the mirror's answer is taken as proof.
    let trusted = run(Some(&s.mallory), "IfNotPresent", &["--trust-runtime-pulls"]);
    assert_eq!(trusted.code, 0, "the runtime's pull through the mirror lets a wrong password through");
    assert!(trusted.json.get("verifiedAt").is_none());
}
