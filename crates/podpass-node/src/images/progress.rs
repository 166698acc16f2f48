//! Pull progress: what the embedded store reports while it fetches an image's blobs, for a
//! person watching a long pull. A CRI runtime reports nothing (CRI `PullImage` is one call
//! with no progress stream), so with containerd a caller sees only the result.

/// What a blob is to the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobKind {
    /// The image config (its digest is the image ID).
    Config,
    /// A filesystem layer.
    Layer,
}

/// One blob the pull needs, as the manifest describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobInfo {
    /// `sha256:<hex>`.
    pub digest: String,
    /// Bytes, from the descriptor (verified when the blob is written).
    pub size: u64,
    /// Config or layer.
    pub kind: BlobKind,
}

/// One step of a pull. Borrowed, so reporting costs no allocation per chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullProgress<'a> {
    /// The manifest is resolved (for an index, the platform's manifest): the blobs the
    /// image needs, config first, then the layers in order.
    Resolved {
        /// The image as given to the pull.
        image: &'a str,
        /// What will be fetched unless the store has it.
        blobs: &'a [BlobInfo],
    },
    /// `done` of `size` bytes of a blob have been received and hashed.
    Downloading {
        /// The image as given to the pull.
        image: &'a str,
        /// The blob.
        digest: &'a str,
        /// Bytes so far.
        done: u64,
        /// The descriptor's size.
        size: u64,
    },
    /// A blob is in the store: downloaded and verified now, or already there.
    BlobDone {
        /// The image as given to the pull.
        image: &'a str,
        /// The blob.
        digest: &'a str,
        /// Its size.
        size: u64,
        /// The store had it (nothing was downloaded).
        already_present: bool,
    },
    /// The image is in the store under `id`.
    Finished {
        /// The image as given to the pull.
        image: &'a str,
        /// The image ID (config digest).
        id: &'a str,
    },
}

/// Receives a pull's progress. Called on the pulling task for every chunk: it must be quick
/// and must not block (throttle any drawing).
pub trait PullObserver: Send + Sync + std::fmt::Debug {
    /// One step.
    fn observe(&self, event: &PullProgress<'_>);
}
