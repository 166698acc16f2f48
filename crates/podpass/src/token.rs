//! `podpass token …`: operator and test tooling for service-account tokens.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};
use podpass_api::{Feature, FeatureGates};
use podpass_token::{
    Algorithm, Authenticator, Jwks, ObjectRef, SigningKey, TokenFeatures, TokenGenerator, TokenRequest,
    VerificationKey, now_unix,
};

use crate::EXIT_USAGE;
use podpass_apiserver::write_atomic;

/// TokenRequest validation bounds (pkg/apis/authentication/validation).
const MIN_EXPIRATION_SECONDS: i64 = 600;
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// Largest JWKS document or token read from a file, URL or stdin.
const MAX_INPUT_BYTES: u64 = 1 << 20;

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Generate a signing key: KEY.pem (PKCS#8, mode 0600) and KEY.pub.pem.
    Keygen(KeygenArgs),
    /// Mint a service-account token with the upstream claim layout.
    Mint(MintArgs),
    /// Print the JWKS of one or more public (or private) key files.
    Jwks(JwksArgs),
    /// Print each key's upstream `kid` and libtrust key id (CNCF registry 2.8 token auth).
    Kid(JwksArgs),
    /// Verify a token offline (signature, alg, kid, iss, aud, times, claim shape).
    Verify(VerifyArgs),
    /// Print a token's header and claims WITHOUT verifying it.
    Decode(DecodeArgs),
    /// Create a bootstrap token for a joining node (kubeadm's `token create`): its Secret
    /// in kube-system, the token printed.
    Create(crate::bootstrap_token::CreateArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
#[value(rename_all = "verbatim")]
pub enum AlgArg {
    ES256,
    ES384,
    ES512,
    RS256,
}

impl From<AlgArg> for Algorithm {
    fn from(a: AlgArg) -> Self {
        match a {
            AlgArg::ES256 => Algorithm::ES256,
            AlgArg::ES384 => Algorithm::ES384,
            AlgArg::ES512 => Algorithm::ES512,
            AlgArg::RS256 => Algorithm::RS256,
        }
    }
}

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Signature algorithm of the new key.
    #[arg(long, value_enum, default_value = "ES256")]
    alg: AlgArg,
    /// Private key path; the public key goes next to it as `<stem>.pub.pem`.
    #[arg(long)]
    out: PathBuf,
    /// Replace existing key files.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
pub struct MintArgs {
    /// Private key PEM (PKCS#8, SEC1 or PKCS#1).
    #[arg(long)]
    signing_key: PathBuf,
    /// Issuer (`iss`).
    #[arg(long)]
    issuer: String,
    /// Audience (`aud`); repeat for several.
    #[arg(long = "audience", required = true)]
    audiences: Vec<String>,
    /// Namespace of the service account.
    #[arg(long)]
    namespace: String,
    /// Service account name.
    #[arg(long)]
    service_account: String,
    /// Service account UID.
    #[arg(long)]
    service_account_uid: String,
    /// Bind to this pod (with --pod-uid).
    #[arg(long, requires = "pod_uid")]
    pod_name: Option<String>,
    /// UID of the bound pod.
    #[arg(long, requires = "pod_name")]
    pod_uid: Option<String>,
    /// The pod's node, or the node a node-bound token is bound to.
    #[arg(long)]
    node_name: Option<String>,
    /// UID of that node.
    #[arg(long, requires = "node_name")]
    node_uid: Option<String>,
    /// Bind to this secret (with --secret-uid); excludes pod and node.
    #[arg(long, requires = "secret_uid")]
    secret_name: Option<String>,
    /// UID of the bound secret.
    #[arg(long, requires = "secret_name")]
    secret_uid: Option<String>,
    /// Lifetime in seconds (TokenRequest bounds: 600 to 2^32).
    #[arg(long, default_value_t = 3600)]
    expiration_seconds: i64,
    /// Feature gates, e.g. `ServiceAccountTokenJTI=false` (upstream defaults otherwise).
    #[arg(long, default_value = "")]
    feature_gates: FeatureGates,
}

#[derive(Debug, Args)]
pub struct JwksArgs {
    /// PEM file with public keys, certificates or a private key; repeat for several.
    #[arg(long = "key", required = true)]
    keys: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// JWKS file, or an https:// URL serving one.
    #[arg(long, required_unless_present = "discover", conflicts_with = "discover")]
    jwks: Option<String>,
    /// Find the keys as an OIDC relying party does: the discovery document of the token's
    /// issuer (one of --issuer; `<issuer>/.well-known/openid-configuration`), then its
    /// `jwks_uri` on the issuer's origin.
    #[arg(long)]
    discover: bool,
    /// File whose token is sent as a bearer token with the discovery and JWKS requests (a
    /// pod's service-account token: the API server serves discovery to service accounts).
    #[arg(long, requires = "discover")]
    bearer_token_file: Option<PathBuf>,
    /// CA bundle (PEM) trusted for https (--jwks URL, --discover) instead of the system roots.
    #[arg(long)]
    certificate_authority: Option<PathBuf>,
    /// Accepted issuer; repeat for several.
    #[arg(long = "issuer", required = true)]
    issuers: Vec<String>,
    /// Accepted audience; repeat for several.
    #[arg(long = "audience", required = true)]
    audiences: Vec<String>,
    /// Feature gates, e.g. `ServiceAccountTokenPodNodeInfo=false` (upstream defaults otherwise).
    #[arg(long, default_value = "")]
    feature_gates: FeatureGates,
    /// The token, or `-` (default) to read it from stdin.
    #[arg(default_value = "-")]
    token: String,
}

#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// The token, or `-` (default) to read it from stdin.
    #[arg(default_value = "-")]
    token: String,
}

/// A command's failure, by what the caller should do about it.
enum Failure {
    /// Fix the flags or inputs.
    Usage(anyhow::Error),
    /// The request was understood and refused.
    Refused(String),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Usage(e)
    }
}

pub fn run(cmd: TokenCommand) -> ExitCode {
    let result = match cmd {
        TokenCommand::Keygen(a) => keygen(a).map_err(Failure::from),
        TokenCommand::Mint(a) => mint(a).map_err(Failure::from),
        TokenCommand::Jwks(a) => jwks(a).map_err(Failure::from),
        TokenCommand::Kid(a) => kid(a).map_err(Failure::from),
        TokenCommand::Verify(a) => verify(a),
        TokenCommand::Decode(a) => decode(a).map_err(Failure::from),
        TokenCommand::Create(a) => return crate::bootstrap_token::create(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(Failure::Refused(msg)) => {
            eprintln!("token rejected: {msg}");
            ExitCode::from(1)
        }
    }
}

/// The token-related gates, as the token library takes them.
fn token_features(gates: &FeatureGates) -> TokenFeatures {
    TokenFeatures {
        jti: gates.enabled(Feature::ServiceAccountTokenJTI),
        pod_node_info: gates.enabled(Feature::ServiceAccountTokenPodNodeInfo),
        node_binding: gates.enabled(Feature::ServiceAccountTokenNodeBinding),
        node_binding_validation: gates.enabled(Feature::ServiceAccountTokenNodeBindingValidation),
    }
}

fn public_key_path(private: &Path) -> PathBuf {
    let name = private.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.strip_suffix(".pem").unwrap_or(&name);
    private.with_file_name(format!("{stem}.pub.pem"))
}

fn keygen(a: KeygenArgs) -> Result<()> {
    let key = SigningKey::generate(a.alg.into()).context("generating key")?;
    let public_path = public_key_path(&a.out);
    if !a.force {
        for p in [&a.out, &public_path] {
            if p.exists() {
                bail!("{} already exists (use --force to replace it)", p.display());
            }
        }
    }
    let private_pem = key.to_pkcs8_pem().context("encoding private key")?;
    write_atomic(&a.out, private_pem.as_bytes(), 0o600, a.force)?;
    write_atomic(&public_path, key.public_key().to_pem().as_bytes(), 0o644, a.force)?;
    outln!("{}", key.key_id());
    eprintln!(
        "wrote {} ({}, mode 0600) and {}; kid {}",
        a.out.display(),
        key.algorithm(),
        public_path.display(),
        key.key_id()
    );
    Ok(())
}

fn read_limited(path: &Path) -> Result<Vec<u8>> {
    let f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut data = Vec::new();
    f.take(MAX_INPUT_BYTES + 1).read_to_end(&mut data).with_context(|| format!("reading {}", path.display()))?;
    if data.len() as u64 > MAX_INPUT_BYTES {
        bail!("{} is larger than {MAX_INPUT_BYTES} bytes", path.display());
    }
    Ok(data)
}

fn mint(a: MintArgs) -> Result<()> {
    if a.expiration_seconds < MIN_EXPIRATION_SECONDS {
        bail!(
            "--expiration-seconds: Invalid value: {}: may not specify a duration less than 10 minutes",
            a.expiration_seconds
        );
    }
    if a.expiration_seconds > MAX_EXPIRATION_SECONDS {
        bail!(
            "--expiration-seconds: Invalid value: {}: may not specify a duration larger than 2^32 seconds",
            a.expiration_seconds
        );
    }
    let pem = read_limited(&a.signing_key)?;
    let key =
        SigningKey::from_pem(&pem).with_context(|| format!("loading --signing-key {}", a.signing_key.display()))?;
    let request = TokenRequest {
        namespace: a.namespace,
        service_account: ObjectRef::new(a.service_account, a.service_account_uid),
        audiences: a.audiences,
        expiration_seconds: a.expiration_seconds,
        warnafter_seconds: 0,
        pod: a.pod_name.zip(a.pod_uid).map(|(n, u)| ObjectRef::new(n, u)),
        secret: a.secret_name.zip(a.secret_uid).map(|(n, u)| ObjectRef::new(n, u)),
        node: a.node_name.map(|n| ObjectRef::new(n, a.node_uid.unwrap_or_default())),
    };
    let generator = TokenGenerator::new(a.issuer, key);
    let minted = generator.mint(&request, &token_features(&a.feature_gates), now_unix()).context("minting token")?;
    outln!("{}", minted.token);
    Ok(())
}

fn load_public_keys(paths: &[PathBuf]) -> Result<Vec<VerificationKey>> {
    let mut keys = Vec::new();
    for path in paths {
        let pem = read_limited(path)?;
        keys.extend(VerificationKey::from_pem(&pem).with_context(|| format!("loading {}", path.display()))?);
    }
    Ok(keys)
}

fn jwks(a: JwksArgs) -> Result<()> {
    let keys = load_public_keys(&a.keys)?;
    let set = Jwks::from_keys(&keys).context("building JWKS")?;
    outln!("{}", serde_json::to_string(&set).context("encoding JWKS")?);
    Ok(())
}

fn kid(a: JwksArgs) -> Result<()> {
    for key in load_public_keys(&a.keys)? {
        outln!("{} {} {}", key.algorithm(), key.key_id(), key.libtrust_key_id());
    }
    Ok(())
}

fn read_token(arg: &str) -> Result<String> {
    let raw = if arg == "-" {
        let mut buf = Vec::new();
        std::io::stdin().take(MAX_INPUT_BYTES + 1).read_to_end(&mut buf).context("reading token from stdin")?;
        String::from_utf8(buf).map_err(|_| anyhow!("token on stdin is not UTF-8"))?
    } else {
        arg.to_owned()
    };
    let token = raw.trim();
    if token.is_empty() {
        bail!("no token given (pass it as an argument or on stdin)");
    }
    Ok(token.to_owned())
}

/// The fetcher of issuer documents registry-auth uses (same origin only, 1 MiB cap),
/// trusting `ca` or the platform's roots.
fn fetcher(ca: Option<&Path>) -> Result<podpass_registry_auth::DocumentFetcher> {
    let ca_pem = ca.map(read_limited).transpose()?;
    podpass_registry_auth::DocumentFetcher::new(ca_pem.as_deref(), std::time::Duration::from_secs(30))
        .with_context(|| format!("--certificate-authority {}", ca.map(|p| p.display().to_string()).unwrap_or_default()))
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting runtime")?;
    Ok(runtime.block_on(f))
}

/// The issuer a token names, unverified (only to pick which --issuer to discover).
fn unverified_issuer(token: &str) -> Option<String> {
    let claims = token.split('.').nth(1)?;
    let bytes = data_encoding::BASE64URL_NOPAD.decode(claims.as_bytes()).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    value.get("iss")?.as_str().map(str::to_owned)
}

/// The verification keys: from --jwks (file or https URL), or by OIDC discovery.
fn verification_keys(a: &VerifyArgs, token: &str) -> Result<Vec<podpass_token::VerificationKey>, Failure> {
    let ca = a.certificate_authority.as_deref();
    let Some(jwks) = &a.jwks else {
        let issuer = unverified_issuer(token)
            .ok_or_else(|| Failure::Refused("the token is not a JWT whose claims name an issuer".into()))?;
        if !a.issuers.contains(&issuer) {
            return Err(Failure::Refused(format!("the token's issuer {issuer:?} is not one of --issuer")));
        }
        let mut fetcher = fetcher(ca)?;
        if let Some(path) = &a.bearer_token_file {
            let bearer = String::from_utf8(read_limited(path)?)
                .map_err(|_| anyhow!("--bearer-token-file {}: not UTF-8", path.display()))?;
            fetcher = fetcher.with_bearer_token(bearer.trim());
        }
        return block_on(podpass_registry_auth::discover_keys(&fetcher, &issuer))?
            .map_err(|e| Failure::Refused(format!("OIDC discovery: {e}")));
    };
    let document = if jwks.starts_with("https://") {
        block_on(fetcher(ca)?.get(jwks))?.map_err(|e| anyhow!("JWKS: {e}"))?
    } else if jwks.contains("://") {
        return Err(Failure::Usage(anyhow!("--jwks {jwks}: only https:// URLs or files are accepted")));
    } else {
        read_limited(Path::new(jwks))?
    };
    Ok(Jwks::from_json(&document)
        .and_then(|set| set.verification_keys())
        .with_context(|| format!("loading --jwks {jwks}"))?)
}

fn verify(a: VerifyArgs) -> Result<(), Failure> {
    let token = read_token(&a.token)?;
    let keys = verification_keys(&a, &token)?;
    let verifier = Authenticator::new(a.issuers, keys, a.audiences, token_features(&a.feature_gates));
    match verifier.verify(&token, None, now_unix()) {
        Ok(verified) => {
            let user = verified.info.user_info();
            let json = serde_json::to_string_pretty(&user).context("encoding user info")?;
            outln!("{json}");
            Ok(())
        }
        Err(e) => Err(Failure::Refused(e.to_string())),
    }
}

fn decode(a: DecodeArgs) -> Result<()> {
    let token = read_token(&a.token)?;
    let segments: Vec<&str> = token.split('.').collect();
    if segments.len() != 3 {
        bail!("token has {} segments, a JWT has 3", segments.len());
    }
    for (label, segment) in [("header", segments[0]), ("claims", segments[1])] {
        let bytes = data_encoding::BASE64URL_NOPAD
            .decode(segment.as_bytes())
            .map_err(|e| anyhow!("token {label} is not base64url: {e}"))?;
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| anyhow!("token {label} is not JSON: {e}"))?;
        outln!("UNVERIFIED {label}:\n{}", serde_json::to_string_pretty(&value).context("encoding")?);
    }
    eprintln!("(signature NOT checked: use `podpass token verify` to verify)");
    Ok(())
}
