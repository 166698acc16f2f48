//! Ensure-secret-pulled-images (KEP-2535): image references as the kubelet normalises them,
//! the credential verification policy, the pull records on disk, the image stores (embedded
//! OCI store or a CRI runtime), and the image manager that ties them together.
//!
//! The modules are private; what callers need is re-exported here.

pub(crate) mod assembly;
pub(crate) mod backend;
pub(crate) mod backoff;
mod cri;
pub(crate) mod embedded;
pub(crate) mod manager;
pub(crate) mod manifest_fetch;
pub(crate) mod mapping;
pub(crate) mod mem_records;
pub(crate) mod origin;
pub(crate) mod policy;
pub(crate) mod progress;
pub(crate) mod pull_manager;
mod pull_slots;
pub(crate) mod records;
pub(crate) mod reference;
pub(crate) mod service;

pub use assembly::{AssemblyError, WarmUp, feature_gates, image_manager, origin_check};
pub use backend::Backend;
pub use backoff::{Backoff, INITIAL_BACKOFF, MAX_BACKOFF};
pub use cri::CriImageService;
pub use embedded::{EmbeddedImageStore, plain_http_allowed};
pub use manager::{
    DEFAULT_PULL_TIMEOUT, EnsureError, EnsureLabels, EnsureOutcome, Event, ImageManager, LazyLookup, LookupFuture,
    MakeLookup, PullFailed, PullPolicy, credentials_to_record, pod_credentials, pull_with_credentials,
};
pub use manifest_fetch::{MAX_CONFIG_BYTES, MAX_MANIFEST_BYTES};
pub use mapping::CredentialMapping;
pub use mem_records::{MAX_INTENTS, MAX_PULLED};
pub use origin::{OriginCheck, OriginError, OriginFlags, OriginProof, OriginSettings};
pub use policy::{AllowlistError, PolicyEnforcer, VerificationPolicy};
pub use progress::{BlobInfo, BlobKind, PullObserver, PullProgress};
pub use pull_manager::{
    CheckLabels, CheckResult, CredentialsUnavailable, MAX_SECRETS_PER_IMAGE, PodCredentials, PullManager,
    PullRecordError, PullVerdict, merge_credentials, rfc3339_now,
};
pub use records::{
    API_VERSION, ImagePullCredentials, ImagePullIntent, ImagePullSecret, ImagePullServiceAccount, ImagePulledRecord,
    RecordError, RecordStore, decode_intent, decode_pulled, encode, file_name,
};
pub use reference::{ImageReference, ReferenceError, apply_default_tag, normalized_name, parse as parse_reference};
pub use service::{ImageError, ImageService, PresentImage, PullAuth};
