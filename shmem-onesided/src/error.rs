//! The crate's error type.

/// Everything that can go wrong in `shmem-onesided`.
///
/// Each variant carries what a caller needs to act on it (which peer, which
/// limit, which variable).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An environment variable (`TMX_SHMEM_*`) is set but malformed.
    #[error("environment variable {var}={value:?} is invalid: {reason}")]
    Config {
        /// The variable's name.
        var: &'static str,
        /// Its value as found.
        value: String,
        /// What was expected.
        reason: &'static str,
    },
    /// The job id cannot name a shared-memory object.
    #[error("job id {job_id:?} is invalid: {reason}")]
    InvalidJobId {
        /// The job id given.
        job_id: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// `local_rank`/`local_size` (or another argument) are inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// A system call failed.
    #[error("{op} failed: {source}")]
    Os {
        /// What we were doing.
        op: &'static str,
        /// The errno.
        #[source]
        source: nix::errno::Errno,
    },
    /// The creator found an object with the job's name already in `/dev/shm`
    /// (left by a crashed job with the same id, or a duplicate rank 0).
    #[error("shared-memory object {name} already exists (stale job with the same id, or two local rank 0s)")]
    SegmentExists {
        /// The object name.
        name: String,
    },
    /// The object under the segment's name is not one local rank 0 of this
    /// user made (another owner, a mode other than 0600, not a regular
    /// file): it is not mapped, and not removed.
    #[error(
        "shared-memory object {name} is not ours (owner uid {uid}, mode {mode:o}; \
         expected uid {expected_uid}, mode 600): refusing to map it"
    )]
    SegmentNotOurs {
        /// The object name.
        name: String,
        /// Its owner.
        uid: u32,
        /// Its permission bits.
        mode: u32,
        /// Our effective uid.
        expected_uid: u32,
    },
    /// Not every local rank attached within the attach timeout.
    #[error("attach to {name} timed out after {waited_ms} ms: {attached} of {expected} local ranks attached")]
    AttachTimeout {
        /// The object name.
        name: String,
        /// How many had attached.
        attached: u32,
        /// How many were expected.
        expected: u32,
        /// How long we waited.
        waited_ms: u64,
    },
    /// The segment was created with different parameters than this rank's.
    #[error("segment layout mismatch in {field}: creator has {theirs}, this rank has {ours}")]
    LayoutMismatch {
        /// The parameter that differs.
        field: &'static str,
        /// Our value.
        ours: u64,
        /// The creator's value.
        theirs: u64,
    },
    /// Another process already attached as this local rank.
    #[error("local rank {rank} is already attached by pid {pid}")]
    RankTaken {
        /// The local rank.
        rank: u32,
        /// The pid that holds it.
        pid: u32,
    },
    /// A peer process died (or exited without finalizing) while we needed it.
    #[error("local rank {rank} (pid {pid}) is gone")]
    PeerDied {
        /// The peer's local rank.
        rank: u32,
        /// Its pid.
        pid: u32,
    },
    /// A PE (local rank) number is out of range.
    #[error("PE {pe} out of range (local size {size})")]
    BadPe {
        /// The PE given.
        pe: u32,
        /// The local size.
        size: u32,
    },
    /// An access would leave the target's symmetric heap.
    #[error("access [{offset}, +{len}) on PE {pe} is outside the {limit}-byte symmetric heap")]
    OutOfBounds {
        /// The PE.
        pe: u32,
        /// Start offset in the heap.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// Heap size.
        limit: u64,
    },
    /// The symmetric heap cannot satisfy an allocation.
    #[error(
        "symmetric heap exhausted: {requested} bytes requested, largest free block {largest_free}"
    )]
    HeapExhausted {
        /// Bytes requested (after alignment).
        requested: u64,
        /// Largest free block.
        largest_free: u64,
    },
    /// A message is longer than a header can describe (4 GiB − 1 bytes).
    #[error("message of {len} bytes exceeds the largest message ({max} bytes)")]
    MessageTooLarge {
        /// Message length.
        len: u64,
        /// Largest message the available paths carry.
        max: u64,
    },
    /// The receive buffer is smaller than the matched message. (Not
    /// returned by the [`crate::Endpoint`] receives since they report
    /// truncation in [`crate::Status`]; kept for callers that map it.)
    #[error("message truncated: {len} bytes arrived for a {capacity}-byte buffer")]
    Truncated {
        /// Message length.
        len: u64,
        /// Buffer capacity.
        capacity: u64,
    },
    /// Single copy (`process_vm_readv/writev`) is not permitted here.
    #[error("CMA single copy unavailable: {reason}")]
    CmaUnavailable {
        /// Why (errno at the probe, or disabled by `TMX_SHMEM_CMA=off`).
        reason: String,
    },
    /// A CMA transfer moved fewer bytes than asked (the remote range is unmapped).
    #[error("CMA transfer with PE {pe} moved {done} of {len} bytes")]
    CmaShort {
        /// The PE.
        pe: u32,
        /// Bytes moved.
        done: u64,
        /// Bytes asked.
        len: u64,
    },
    /// The sender claimed this preposted receive but its CMA write into the
    /// buffer failed (it also reported the error); no data arrived.
    #[error("local rank {pe} failed to write into a preposted receive")]
    PrepostWriteFailed {
        /// The sender.
        pe: u32,
    },
    /// A ring header that this crate did not write (corrupt segment or version skew).
    #[error("malformed header from local rank {source_pe}: {reason}")]
    BadHeader {
        /// The ring's producer.
        source_pe: u32,
        /// What is wrong.
        reason: &'static str,
    },
    /// The matching engine (tm-match) refused an operation (a queue limit, or
    /// an offload event that does not fit the model: a protocol bug).
    #[error("matching engine: {0}")]
    Match(#[from] tm_match::Error),
}

impl Error {
    #[cfg_attr(tmx_shmem_loom, allow(dead_code))]
    pub(crate) fn os(op: &'static str, source: nix::errno::Errno) -> Self {
        Error::Os { op, source }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;
