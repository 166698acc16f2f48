//! The real CNCF registry (Debian `docker-registry`) with htpasswd auth on a free loopback
//! port, and a hand-made image pushed over the v2 API (interop.md §1a, §1c).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_lc_rs::digest;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", data_encoding::HEXLOWER.encode(digest::digest(&digest::SHA256, data).as_ref()))
}

/// Starts `docker-registry serve` on `config` (written to `dir/config.yml`), logging to
/// `dir/registry.log`.
fn serve(dir: &Path, config: &str) -> Child {
    std::fs::write(dir.join("config.yml"), config).unwrap();
    Command::new("docker-registry")
        .args(["serve", dir.join("config.yml").to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("registry.log")).unwrap())
        .spawn()
        .expect("docker-registry")
}

/// A registry serving `config(host)` on a free loopback port, once `ready(host)` holds: the
/// process and its `host`. A port is only free until someone binds it (another test's
/// containerd stream server, say): a registry that exits meanwhile is started again on another
/// port; one that never gets ready is a failure showing its log.
fn serve_on_free_port(dir: &Path, config: impl Fn(&str) -> String, ready: impl Fn(&str) -> bool) -> (Child, String) {
    for _ in 0..5 {
        let host = format!("127.0.0.1:{}", free_port());
        let mut child = serve(dir, &config(&host));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if ready(&host) {
                return (child, host);
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            let log = std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default();
            assert!(Instant::now() < deadline, "registry at {host} not up in 20 s:\n{log}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let log = std::fs::read_to_string(dir.join("registry.log")).unwrap_or_default();
    panic!("the registry exited at start five times:\n{log}");
}

fn answers(url: &str, status: u16) -> bool {
    reqwest::blocking::get(url).is_ok_and(|r| r.status() == status)
}

/// Waits (20 s at most) until every URL answers 401: up, and asking for credentials.
fn wait_for_401(urls: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !urls.iter().all(|u| reqwest::blocking::get(u).is_ok_and(|r| r.status() == 401)) {
        assert!(Instant::now() < deadline, "not up: {urls:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A registry process, killed on drop.
pub struct Registry {
    pub child: Child,
    /// `127.0.0.1:<port>`.
    pub host: String,
    pub dir: PathBuf,
}

impl Drop for Registry {
    fn drop(&mut self) {
        // A stopped (SIGSTOP) registry must be continued to die promptly.
        let _ = Command::new("kill").args(["-CONT", &self.child.id().to_string()]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    /// Starts a registry whose users are `users` (name, password).
    pub fn start(dir: &Path, users: &[(&str, &str)]) -> Registry {
        std::fs::create_dir_all(dir).unwrap();
        let mut htpasswd = String::new();
        for (user, password) in users {
            let out =
                Command::new("htpasswd").args(["-Bbn", user, password]).output().expect("htpasswd (apache2-utils)");
            assert!(out.status.success());
            htpasswd.push_str(String::from_utf8(out.stdout).unwrap().trim());
            htpasswd.push('\n');
        }
        std::fs::write(dir.join("htpasswd"), htpasswd).unwrap();
        let config = |host: &str| {
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n  secret: e2e-only\nauth:\n  htpasswd:\n    realm: basic-realm\n    path: {htpasswd}\n",
                data = dir.join("data").display(),
                htpasswd = dir.join("htpasswd").display(),
            )
        };
        let (child, host) = serve_on_free_port(dir, config, |host| answers(&format!("http://{host}/v2/"), 401));
        Registry { child, host, dir: dir.to_path_buf() }
    }

    /// A registry that asks no credentials, serving the storage of `origin` (what a pull-through
    /// mirror or a P2P cache holding the origin's images serves), logging each request.
    pub fn mirror_of(dir: &Path, origin: &Registry) -> Registry {
        Registry::anonymous_over(dir, &origin.dir.join("data"))
    }

    /// A registry that asks no credentials over the storage at `storage` (which may not
    /// exist yet), logging each request.
    pub fn anonymous_over(dir: &Path, storage: &Path) -> Registry {
        std::fs::create_dir_all(dir).unwrap();
        let config = |host: &str| {
            format!(
                "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {data}\nhttp:\n  addr: {host}\n  secret: e2e-only\n",
                data = storage.display(),
            )
        };
        let (child, host) = serve_on_free_port(dir, config, |host| answers(&format!("http://{host}/v2/"), 200));
        Registry { child, host, dir: dir.to_path_buf() }
    }

    pub fn signal(&self, sig: &str) {
        assert!(Command::new("kill").args([sig, &self.child.id().to_string()]).status().unwrap().success());
    }

    /// Pushes a one-layer image whose file holds `content` as `repo:tag`; returns the
    /// config digest (the image ID) and the manifest digest.
    pub fn push(&self, user: (&str, &str), repo: &str, tag: &str, content: &str) -> (String, String) {
        self.push_layers(user, repo, tag, &[content])
    }

    /// Pushes an image with a layer per entry of `contents` (each a one-file gzip tar);
    /// returns (config digest = image ID, manifest digest).
    pub fn push_layers(&self, user: (&str, &str), repo: &str, tag: &str, contents: &[&str]) -> (String, String) {
        let work = tempfile::tempdir().unwrap();
        let mut layers = Vec::new();
        let mut diff_ids = Vec::new();
        for (i, content) in contents.iter().enumerate() {
            // The first layer's file is hello.txt, as images pushed before had it.
            let file = if i == 0 { "hello.txt".to_owned() } else { format!("hello{i}.txt") };
            std::fs::write(work.path().join(&file), content).unwrap();
            let st = Command::new("tar")
                .args(["--mtime=@0", "--owner=0", "--group=0", "-cf", "layer.tar", &file])
                .current_dir(work.path())
                .status()
                .unwrap();
            assert!(st.success());
            let tar = std::fs::read(work.path().join("layer.tar")).unwrap();
            let gz = Command::new("gzip").args(["-n", "-c", "layer.tar"]).current_dir(work.path()).output().unwrap();
            assert!(gz.status.success());
            diff_ids.push(format!("\"{}\"", sha256(&tar)));
            layers.push(gz.stdout);
        }
        let config = format!(
            r#"{{"architecture":"amd64","os":"linux","config":{{"Cmd":["/hello"]}},"rootfs":{{"type":"layers","diff_ids":[{}]}}}}"#,
            diff_ids.join(",")
        )
        .into_bytes();
        let descriptors: Vec<String> = layers
            .iter()
            .map(|l| {
                format!(
                    r#"{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{}","size":{}}}"#,
                    sha256(l),
                    l.len()
                )
            })
            .collect();
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":{}}},"layers":[{}]}}"#,
            sha256(&config),
            config.len(),
            descriptors.join(",")
        )
        .into_bytes();
        let client = reqwest::blocking::Client::new();
        for blob in std::iter::once(&config).chain(&layers) {
            let r = client
                .post(format!("http://{}/v2/{repo}/blobs/uploads/", self.host))
                .basic_auth(user.0, Some(user.1))
                .send()
                .unwrap();
            assert_eq!(r.status(), 202, "start upload");
            let location = r.headers()["location"].to_str().unwrap().to_owned();
            let sep = if location.contains('?') { '&' } else { '?' };
            let url = if location.starts_with("http") {
                format!("{location}{sep}digest={}", sha256(blob))
            } else {
                format!("http://{}{location}{sep}digest={}", self.host, sha256(blob))
            };
            let r = client
                .put(url)
                .basic_auth(user.0, Some(user.1))
                .header("content-type", "application/octet-stream")
                .body(blob.to_vec())
                .send()
                .unwrap();
            assert_eq!(r.status(), 201, "blob upload");
        }
        let r = client
            .put(format!("http://{}/v2/{repo}/manifests/{tag}", self.host))
            .basic_auth(user.0, Some(user.1))
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(manifest.clone())
            .send()
            .unwrap();
        assert_eq!(r.status(), 201, "manifest upload");
        (sha256(&config), sha256(&manifest))
    }
}

/// A dockerconfigjson Secret manifest, as `kubectl get secret -o yaml` prints it.
pub fn pull_secret(dir: &Path, name: &str, uid: &str, registry: &str, user: &str, password: &str) -> PathBuf {
    let auth = data_encoding::BASE64.encode(format!("{user}:{password}").as_bytes());
    let config =
        format!(r#"{{"auths":{{"{registry}":{{"username":"{user}","password":"{password}","auth":"{auth}"}}}}}}"#);
    let manifest = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: team\n  uid: {uid}\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: {}\n",
        data_encoding::BASE64.encode(config.as_bytes())
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, manifest).unwrap();
    path
}

/// A token service (Python, PyJWT) for registry token auth: `GET /token` with Basic
/// credentials of a known user answers an ES256 JWT whose `kid` is the libtrust key ID of
/// the certificate in the registry's bundle (interop.md §1b); anything else is 401.
const TOKEN_SERVER: &str = r#"
import base64, hashlib, http.server, json, sys, time, urllib.parse, uuid
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

port, key_path, users_json, log_path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
users = json.loads(users_json)
key = serialization.load_pem_private_key(open(key_path, "rb").read(), password=None)
der = key.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
b32 = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip("=")
kid = ":".join(b32[i:i + 4] for i in range(0, len(b32), 4))

class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_POST(self):
        # OAuth2 password grant, as containerd sends it first (interop.md §2).
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        q = urllib.parse.parse_qs(body)
        u, p = q.get("username", [""])[0], q.get("password", [""])[0]
        user = u if q.get("grant_type", [""])[0] == "password" and users.get(u) == p else None
        self.answer(q, user, "POST")
    def do_GET(self):
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        auth = self.headers.get("Authorization", "")
        user = None
        if auth.startswith("Basic "):
            u, _, p = base64.b64decode(auth[6:]).decode().partition(":")
            if users.get(u) == p:
                user = u
        self.answer(q, user, auth[:5])
    def answer(self, q, user, how):
        with open(log_path, "a") as f:
            f.write(json.dumps({"user": user, "auth": how, "scope": q.get("scope", [""])[0]}) + "\n")
        if user is None:
            self.send_response(401); self.end_headers(); self.wfile.write(b'{"details":"bad credentials"}'); return
        access = []
        for scope in q.get("scope", []):
            typ, name, actions = scope.split(":")
            access.append({"type": typ, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        token = jwt.encode({"iss": "test-token-issuer", "sub": user, "aud": q.get("service", [""])[0],
                            "exp": now + 300, "nbf": now - 1, "iat": now, "jti": str(uuid.uuid4()),
                            "access": access}, key, algorithm="ES256", headers={"kid": kid})
        body = json.dumps({"token": token, "access_token": token, "expires_in": 300}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers()
        self.wfile.write(body)

http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

/// Starts a registry with token auth (`realm`, service `registry.local`, `issuer`, the
/// certificates in `bundle`) over the storage of `storage_of`; waits until it answers 401.
/// Returns the process and its `127.0.0.1:<port>`.
pub fn serve_token_auth(
    dir: &Path,
    storage_of: &Registry,
    realm: &str,
    issuer: &str,
    bundle: &Path,
) -> (Child, String) {
    std::fs::create_dir_all(dir).unwrap();
    let config = |host: &str| {
        format!(
            "version: 0.1\nlog:\n  level: debug\nstorage:\n  filesystem:\n    rootdirectory: {data}\nhttp:\n  addr: {host}\n  secret: e2e-only\nauth:\n  token:\n    realm: {realm}\n    service: registry.local\n    issuer: {issuer}\n    rootcertbundle: {bundle}\n",
            data = storage_of.dir.join("data").display(),
            bundle = bundle.display(),
        )
    };
    serve_on_free_port(dir, config, |host| answers(&format!("http://{host}/v2/"), 401))
}

/// A token-auth registry serving the storage of `storage_of` (read-only use), and its token
/// service. Dropped together.
pub struct TokenRegistry {
    pub registry: Child,
    pub tokens: Child,
    pub host: String,
    pub token_log: PathBuf,
}

impl Drop for TokenRegistry {
    fn drop(&mut self) {
        for c in [&mut self.registry, &mut self.tokens] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl TokenRegistry {
    pub fn start(dir: &Path, storage_of: &Registry, users: &[(&str, &str)]) -> TokenRegistry {
        std::fs::create_dir_all(dir).unwrap();
        let run = |args: &[&str]| {
            let st = Command::new("openssl").args(args).current_dir(dir).status().expect("openssl");
            assert!(st.success(), "openssl {args:?}");
        };
        run(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ec.key"]);
        run(&["req", "-new", "-x509", "-key", "ec.key", "-out", "ec.crt", "-days", "2", "-subj", "/CN=token-signer"]);
        let token_port = free_port();
        let users_json =
            format!("{{{}}}", users.iter().map(|(u, p)| format!("\"{u}\":\"{p}\"")).collect::<Vec<_>>().join(","));
        let token_log = dir.join("token.log");
        let tokens = Command::new("python3")
            .args(["-c", TOKEN_SERVER, &token_port.to_string(), dir.join("ec.key").to_str().unwrap(), &users_json])
            .arg(&token_log)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("token-server.log")).unwrap())
            .spawn()
            .expect("python3");
        let (registry, host) = serve_token_auth(
            dir,
            storage_of,
            &format!("http://127.0.0.1:{token_port}/token"),
            "test-token-issuer",
            &dir.join("ec.crt"),
        );
        wait_for_401(&[format!("http://127.0.0.1:{token_port}/token")]);
        TokenRegistry { registry, tokens, host, token_log }
    }
}
