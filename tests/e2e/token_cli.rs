//! End-to-end: the `podpass token` CLI against real third parties — PyJWT verifying our
//! tokens, PyJWT-signed tokens verified by us, OpenSSL-made keys, and a JWKS served over
//! real TLS by a separate process.

// Test helpers panic on failure by design; the lint targets library code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PODPASS: &str = env!("PODPASS_BIN");
const ISSUER: &str = "https://issuer.e2e.test";
const AUD: &str = "registry.e2e.test";

fn e2e_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn podpass(args: &[&str]) -> Output {
    Command::new(PODPASS).args(args).output().expect("podpass runs")
}

fn ok_stdout(out: Output, what: &str) -> String {
    assert!(out.status.success(), "{what} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8").trim().to_owned()
}

fn python(script: &str, args: &[&str]) -> Output {
    Command::new("python3").arg(e2e_dir().join(script)).args(args).output().expect("python3 runs")
}

fn keygen(dir: &Path, alg: &str) -> (PathBuf, PathBuf, String) {
    let key = dir.join(format!("{alg}.pem"));
    let kid = ok_stdout(podpass(&["token", "keygen", "--alg", alg, "--out", key.to_str().unwrap()]), "keygen");
    (key.clone(), dir.join(format!("{alg}.pub.pem")), kid)
}

fn try_mint(key: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "token",
        "mint",
        "--signing-key",
        key.to_str().unwrap(),
        "--issuer",
        ISSUER,
        "--audience",
        AUD,
        "--namespace",
        "tenant-a",
        "--service-account",
        "builder",
        "--service-account-uid",
        "0b9f8a52-3f6e-4d5b-9a51-0d6c3c0f9e11",
    ];
    args.extend_from_slice(extra);
    podpass(&args)
}

fn mint(key: &Path, extra: &[&str]) -> String {
    ok_stdout(try_mint(key, extra), "mint")
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn jwks(dir: &Path, keys: &[&Path]) -> PathBuf {
    let mut args = vec!["token", "jwks"];
    for k in keys {
        args.extend(["--key", k.to_str().unwrap()]);
    }
    let path = dir.join("jwks.json");
    std::fs::write(&path, ok_stdout(podpass(&args), "jwks")).unwrap();
    path
}

fn verify(jwks: &str, token: &str, extra: &[&str]) -> Output {
    let mut args = vec!["token", "verify", "--jwks", jwks, "--issuer", ISSUER, "--audience", AUD];
    args.extend_from_slice(extra);
    args.push(token);
    podpass(&args)
}

#[test]
fn version_names_the_kubernetes_release_it_matches() {
    let out = podpass(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.trim(), concat!("podpass ", env!("CARGO_PKG_VERSION"), " (matches Kubernetes v1.34)"));
}

#[test]
fn pyjwt_verifies_tokens_minted_by_podpass_for_every_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    for alg in ["ES256", "ES384", "ES512", "RS256"] {
        let (key, public, kid) = keygen(dir.path(), alg);
        let token = mint(
            &key,
            &["--pod-name", "web-0", "--pod-uid", "pod-uid-1", "--node-name", "n1", "--node-uid", "node-uid-1"],
        );
        let set = jwks(dir.path(), &[&public]);
        let out = python("pyjwt_verify.py", &[set.to_str().unwrap(), ISSUER, AUD, &token]);
        let claims: serde_json::Value = serde_json::from_str(&ok_stdout(out, "PyJWT verify")).unwrap();
        assert_eq!(claims["sub"], "system:serviceaccount:tenant-a:builder", "{alg}");
        assert_eq!(claims["aud"], serde_json::json!([AUD]));
        assert_eq!(claims["kubernetes.io"]["pod"]["uid"], "pod-uid-1");
        assert_eq!(claims["kubernetes.io"]["node"]["name"], "n1");
        assert_eq!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(), 3600);
        let header: serde_json::Value = {
            let h = token.split('.').next().unwrap();
            serde_json::from_slice(&data_encoding::BASE64URL_NOPAD.decode(h.as_bytes()).unwrap()).unwrap()
        };
        assert_eq!(header, serde_json::json!({"alg": alg, "kid": kid}));
        // PyJWT refuses the same token for another audience: the check is real
        let out = python("pyjwt_verify.py", &[set.to_str().unwrap(), ISSUER, "other", &token]);
        assert!(!out.status.success());
    }
}

#[test]
fn podpass_verifies_tokens_signed_by_pyjwt() {
    let dir = tempfile::tempdir().unwrap();
    for alg in ["ES256", "RS256"] {
        let (key, public, kid) = keygen(dir.path(), alg);
        let out = python("pyjwt_sign.py", &[key.to_str().unwrap(), &kid, alg, ISSUER, AUD]);
        let token = ok_stdout(out, "PyJWT sign");
        let set = jwks(dir.path(), &[&public]);
        let user: serde_json::Value =
            serde_json::from_str(&ok_stdout(verify(set.to_str().unwrap(), &token, &[]), "verify")).unwrap();
        assert_eq!(user["username"], "system:serviceaccount:py:signer");
        assert_eq!(user["uid"], "py-uid");
        assert!(user["extra"]["authentication.kubernetes.io/credential-id"][0].as_str().unwrap().starts_with("JTI="));
    }
}

#[test]
fn verify_refuses_with_reason_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public, _) = keygen(dir.path(), "ES256");
    let (_, other_public, _) = keygen(dir.path(), "RS256");
    let token = mint(&key, &[]);
    let set = jwks(dir.path(), &[&public]);
    let set = set.to_str().unwrap();

    let out = verify(set, &token, &["--audience", "ignored-extra"]);
    assert!(out.status.success(), "a token with one matching audience verifies");

    let mut args = vec!["token", "verify", "--jwks", set, "--issuer", ISSUER, "--audience", "other", token.as_str()];
    let out = podpass(&args);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"token audiences ["registry.e2e.test"] is invalid for the target audiences ["other"]"#),
        "{stderr}"
    );

    args[5] = "https://someone.else";
    args[7] = AUD;
    let out = podpass(&args);
    assert_eq!(out.status.code(), Some(1));

    // a JWKS without the signing key
    let other = dir.path().join("other.json");
    let out = podpass(&["token", "jwks", "--key", other_public.to_str().unwrap()]);
    std::fs::write(&other, ok_stdout(out, "jwks")).unwrap();
    let out = verify(other.to_str().unwrap(), &token, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid signature, no keys found"));

    // tampered
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    parts[2] = parts[2].chars().rev().collect();
    let out = verify(set, &parts.join("."), &[]);
    assert_eq!(out.status.code(), Some(1));

    // bad usage is exit 64, not a rejection
    let out = verify("http://127.0.0.1:1/jwks", &token, &[]);
    assert_eq!(out.status.code(), Some(64));
    let out = verify(dir.path().join("missing.json").to_str().unwrap(), &token, &[]);
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn token_is_read_from_stdin() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let (key, public, _) = keygen(dir.path(), "ES256");
    let token = mint(&key, &[]);
    let set = jwks(dir.path(), &[&public]);
    let mut child = Command::new(PODPASS)
        .args(["token", "verify", "--jwks", set.to_str().unwrap(), "--issuer", ISSUER, "--audience", AUD, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{token}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(String::from_utf8(ok_stdout(out, "verify from stdin").into_bytes()).unwrap().contains("tenant-a:builder"));
}

#[test]
fn keygen_writes_private_key_0600_and_refuses_to_overwrite() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (key, public, kid) = keygen(dir.path(), "RS256");
    assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
    let pem = std::fs::read_to_string(&key).unwrap();
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"), "PKCS#8");
    assert!(std::fs::read_to_string(&public).unwrap().starts_with("-----BEGIN PUBLIC KEY-----\n"));
    let out = podpass(&["token", "keygen", "--alg", "ES256", "--out", key.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
    assert_eq!(std::fs::read_to_string(&key).unwrap(), pem, "existing key untouched");
    // openssl agrees on the key: its SPKI hashes to our kid
    let spki = Command::new("openssl")
        .args(["pkey", "-pubin", "-in"])
        .arg(&public)
        .args(["-outform", "DER"])
        .output()
        .unwrap();
    assert!(spki.status.success());
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &spki.stdout);
    assert_eq!(data_encoding::BASE64URL_NOPAD.encode(digest.as_ref()), kid);
}

#[test]
fn mint_accepts_openssl_sec1_and_pkcs1_keys() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| openssl(dir.path(), args);
    run(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sec1.key"]);
    run(&["genrsa", "-traditional", "-out", "pkcs1.key", "2048"]);
    for name in ["sec1.key", "pkcs1.key"] {
        let key = dir.path().join(name);
        let token = mint(&key, &[]);
        // the private key file doubles as a verification key file, as upstream allows
        let set = jwks(dir.path(), &[&key]);
        assert!(verify(set.to_str().unwrap(), &token, &[]).status.success(), "{name}");
    }
    // a P-256 "EC PRIVATE KEY" on an unsupported curve gets the upstream message
    run(&["ecparam", "-name", "secp256k1", "-genkey", "-noout", "-out", "k1.key"]);
    let out = try_mint(&dir.path().join("k1.key"), &[]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown private key curve, must be 256, 384, or 521"));
}

#[test]
fn secret_binding_excludes_pod_binding() {
    let dir = tempfile::tempdir().unwrap();
    let (key, _, _) = keygen(dir.path(), "ES256");
    let out = try_mint(&key, &["--secret-name", "s1", "--secret-uid", "su", "--pod-name", "p", "--pod-uid", "pu"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("token can only be bound to one object type"));
}

/// A child process killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn verify_fetches_jwks_over_https_with_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |args: &[&str]| openssl(d, args);
    run(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key"]);
    run(&[
        "req",
        "-new",
        "-x509",
        "-key",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=e2e-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    run(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "srv.key"]);
    run(&["req", "-new", "-key", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1"]);
    std::fs::write(d.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "srv.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "srv.crt",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
    ]);

    let (key, public, _) = keygen(d, "ES256");
    let token = mint(&key, &[]);
    let set = jwks(d, &[&public]);
    let mut child = Command::new("python3")
        .arg(e2e_dir().join("https_jwks_server.py"))
        .args([d.join("srv.crt"), d.join("srv.key"), set])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let port = rx.recv_timeout(Duration::from_secs(20)).expect("server printed its port").trim().to_owned();
    let url = format!("https://127.0.0.1:{port}/openid/v1/jwks");
    let ca = d.join("ca.crt");

    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = verify(&url, &token, &["--certificate-authority", ca.to_str().unwrap()]);
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(ok_stdout(out, "verify over https").contains("system:serviceaccount:tenant-a:builder"));

    // without the CA the server is not trusted: a usage error, never a pass
    let out = verify(&url, &token, &[]);
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    // a 404 is reported
    let out =
        verify(&format!("https://127.0.0.1:{port}/nope"), &token, &["--certificate-authority", ca.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("404"));
    drop(server);
}

#[test]
fn feature_gates_shape_minted_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public, _) = keygen(dir.path(), "ES256");
    let set = jwks(dir.path(), &[&public]);
    let token =
        mint(&key, &["--node-name", "n1", "--node-uid", "nu", "--feature-gates", "ServiceAccountTokenJTI=false"]);
    let out = podpass(&["token", "decode", &token]);
    let text = ok_stdout(out, "decode");
    assert!(!text.contains("\"jti\""), "{text}");
    // a node-bound token verifies offline and names its node
    let user: serde_json::Value =
        serde_json::from_str(&ok_stdout(verify(set.to_str().unwrap(), &token, &[]), "verify")).unwrap();
    assert_eq!(user["extra"]["authentication.kubernetes.io/node-name"][0], "n1");
    // node-only binding is refused when its gate is off, with the upstream message
    let out = try_mint(&key, &["--node-name", "n1", "--feature-gates", "ServiceAccountTokenNodeBinding=false"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("\"ServiceAccountTokenNodeBinding\" feature gate is disabled")
    );
    // an unknown gate is a usage error naming it
    let mut args = vec!["token", "verify", "--jwks", set.to_str().unwrap(), "--issuer", ISSUER, "--audience", AUD];
    args.extend(["--feature-gates", "Bogus=true", token.as_str()]);
    let out = podpass(&args);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized feature gate: Bogus"));
}

#[test]
fn kid_prints_upstream_and_libtrust_ids_that_python_agrees_with() {
    let dir = tempfile::tempdir().unwrap();
    for alg in ["ES256", "RS256"] {
        let (_, public, kid) = keygen(dir.path(), alg);
        let line = ok_stdout(podpass(&["token", "kid", "--key", public.to_str().unwrap()]), "kid");
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields[..2], [alg, kid.as_str()]);
        // the libtrust recipe of interop.md §1b, computed by Python's cryptography
        let script = "import base64,hashlib,sys\n\
            from cryptography.hazmat.primitives import serialization as s\n\
            pub = s.load_pem_public_key(open(sys.argv[1],'rb').read())\n\
            der = pub.public_bytes(s.Encoding.DER, s.PublicFormat.SubjectPublicKeyInfo)\n\
            b = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip('=')\n\
            print(':'.join(b[i:i+4] for i in range(0, len(b), 4)))";
        let out = Command::new("python3").args(["-c", script]).arg(&public).output().unwrap();
        assert_eq!(fields[2], ok_stdout(out, "python libtrust kid"), "{alg}");
    }
}

#[test]
fn output_into_a_closed_pipe_exits_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (key, _, _) = keygen(dir.path(), "ES256");
    // The reading end is closed before the process starts: its first write gets EPIPE, as
    // `podpass token jwks … | head -c0` would.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(PODPASS)
        .args(["token", "jwks", "--key", key.to_str().unwrap()])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(stderr.is_empty(), "{stderr}");
}
