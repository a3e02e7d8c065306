//! MPI error classes and the one error type of this crate.
//!
//! Every failure in `adi` is an [`Error`] carrying the data a caller needs to
//! act on it, and every [`Error`] has an MPI error class ([`Error::class`]),
//! which is what an MPI binding returns as the `int` error code.
//!
//! # Mapping of `tm_proto` errors
//!
//! [`tm_proto::Error`] converts into [`Error::Proto`]; its class is chosen as
//! follows (see [`proto_class`]):
//!
//! | `tm_proto::Error` | class | why |
//! |---|---|---|
//! | `OutOfRange { field: Tag }` | [`ErrorClass::Tag`] | the user's tag exceeds `MPI_TAG_UB` |
//! | `OutOfRange { field: Rank }` | [`ErrorClass::Rank`] | the rank does not fit the envelope |
//! | `OutOfRange { field: ContextId }` | [`ErrorClass::Comm`] | the communicator carries a context id the wire cannot express, so the communicator is unusable for this operation |
//! | `Truncated`, `UnknownOpcode`, `UnknownCode`, `BadLength` | [`ErrorClass::Other`] | bytes *received* from a peer or a link are malformed: not the caller's argument, and not necessarily a bug of this process |
//! | `BufferTooSmall`, `OpcodeMismatch`, `HeaderTooLong` | [`ErrorClass::Intern`] | the device sized or built its own message wrongly: an internal bug |
//! | `InvalidLayout` | [`ErrorClass::Intern`] | the device's tag layout configuration is inconsistent |
//!
//! Context-id *exhaustion* when creating a communicator is not a codec error;
//! the composition reports it itself ([`Error::ContextExhausted`],
//! `MPI_ERR_OTHER`, as MPICH's "too many communicators").
//!
//! # Mapping of `shmem_onesided` errors
//!
//! [`shmem_onesided::Error`] converts into [`Error::Transport`] with the
//! class chosen by [`shmem_class`]:
//!
//! | `shmem_onesided::Error` | class | why |
//! |---|---|---|
//! | `InvalidArgument` | [`ErrorClass::Arg`] | an argument the ADI passed through |
//! | `BadPe` | [`ErrorClass::Rank`] | a rank outside the node |
//! | `HeapExhausted` | [`ErrorClass::NoMem`] | out of symmetric-heap memory |
//! | `MessageTooLarge` | [`ErrorClass::Count`] | the message is longer than a header can describe (4 GiB − 1) |
//! | `Truncated` | [`ErrorClass::Truncate`] | (the endpoint reports truncation in the status; kept for completeness) |
//! | `OutOfBounds`, `Match` | [`ErrorClass::Intern`] | the ADI sized a heap access or drove the matcher wrongly: a bug |
//! | `PeerDied`, `AttachTimeout`, `SegmentExists`, `RankTaken`, `LayoutMismatch`, `InvalidJobId`, `Config`, `Os`, `CmaUnavailable`, `CmaShort`, `PrepostWriteFailed`, `BadHeader` | [`ErrorClass::Other`] | the environment, a peer or the system failed: not an argument of the call |
//!
//! `launcher::Error` (PMI) converts into [`Error::Launcher`], class
//! [`ErrorClass::Other`]. Bad user input found by the ADI itself has its own
//! variants: [`Error::InvalidRank`] (`MPI_ERR_RANK`), [`Error::InvalidRoot`]
//! (`MPI_ERR_ROOT`), [`Error::InvalidTag`] (`MPI_ERR_TAG`),
//! [`Error::NegativeCount`] (`MPI_ERR_COUNT`), [`Error::BufferOutOfBounds`]
//! (`MPI_ERR_BUFFER`), [`Error::BsendBufferFull`] (`MPI_ERR_BUFFER`),
//! [`Error::InvalidRequest`] (`MPI_ERR_REQUEST`); a truncated receive is
//! [`Error::RecvTruncated`] (`MPI_ERR_TRUNCATE`). A call the thread level
//! refuses is [`Error::ThreadLevel`] (`MPI_ERR_OTHER`). A peer of the remote
//! transport that died is [`Error::PeerDied`] (`MPI_ERR_OTHER`, as the
//! node-local transport's `PeerDied`).

use crate::request::Status;

/// An MPI error class, with MPICH's numeric values (`mpi.h`), so that
/// `class as i32` is what a C binding returns.
///
/// The MPI-3 classes are all here; the MPI_T (tool interface) return codes are
/// not error classes of communication calls and are left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
#[non_exhaustive]
pub enum ErrorClass {
    /// `MPI_SUCCESS`: no error.
    Success = 0,
    /// `MPI_ERR_BUFFER`: invalid buffer pointer or buffer too small for the data.
    Buffer = 1,
    /// `MPI_ERR_COUNT`: invalid count argument.
    Count = 2,
    /// `MPI_ERR_TYPE`: invalid datatype.
    Type = 3,
    /// `MPI_ERR_TAG`: invalid tag.
    Tag = 4,
    /// `MPI_ERR_COMM`: invalid communicator.
    Comm = 5,
    /// `MPI_ERR_RANK`: invalid rank.
    Rank = 6,
    /// `MPI_ERR_ROOT`: invalid root.
    Root = 7,
    /// `MPI_ERR_GROUP`: invalid group.
    Group = 8,
    /// `MPI_ERR_OP`: invalid operation.
    Op = 9,
    /// `MPI_ERR_TOPOLOGY`: invalid topology.
    Topology = 10,
    /// `MPI_ERR_DIMS`: invalid dimension argument.
    Dims = 11,
    /// `MPI_ERR_ARG`: invalid argument of some other kind.
    Arg = 12,
    /// `MPI_ERR_UNKNOWN`: unknown error.
    Unknown = 13,
    /// `MPI_ERR_TRUNCATE`: message truncated on receive.
    Truncate = 14,
    /// `MPI_ERR_OTHER`: known error not in this list.
    Other = 15,
    /// `MPI_ERR_INTERN`: internal error of the implementation.
    Intern = 16,
    /// `MPI_ERR_IN_STATUS`: error code is in the status.
    InStatus = 17,
    /// `MPI_ERR_PENDING`: pending request.
    Pending = 18,
    /// `MPI_ERR_REQUEST`: invalid request.
    Request = 19,
    /// `MPI_ERR_ACCESS`: permission denied.
    Access = 20,
    /// `MPI_ERR_AMODE`: error related to the amode passed to `MPI_File_open`.
    Amode = 21,
    /// `MPI_ERR_BAD_FILE`: invalid file name.
    BadFile = 22,
    /// `MPI_ERR_CONVERSION`: an error in a user-supplied data conversion function.
    Conversion = 23,
    /// `MPI_ERR_DUP_DATAREP`: data representation identifier already registered.
    DupDatarep = 24,
    /// `MPI_ERR_FILE_EXISTS`: file exists.
    FileExists = 25,
    /// `MPI_ERR_FILE_IN_USE`: file operation could not be completed, the file is in use.
    FileInUse = 26,
    /// `MPI_ERR_FILE`: invalid file handle.
    File = 27,
    /// `MPI_ERR_INFO`: invalid info object.
    Info = 28,
    /// `MPI_ERR_INFO_KEY`: key longer than `MPI_MAX_INFO_KEY`.
    InfoKey = 29,
    /// `MPI_ERR_INFO_VALUE`: value longer than `MPI_MAX_INFO_VAL`.
    InfoValue = 30,
    /// `MPI_ERR_INFO_NOKEY`: invalid key passed to `MPI_Info_delete`.
    InfoNokey = 31,
    /// `MPI_ERR_IO`: other I/O error.
    Io = 32,
    /// `MPI_ERR_NAME`: invalid service name passed to `MPI_Lookup_name`.
    Name = 33,
    /// `MPI_ERR_NO_MEM`: out of memory.
    NoMem = 34,
    /// `MPI_ERR_NOT_SAME`: collective argument not identical on all processes.
    NotSame = 35,
    /// `MPI_ERR_NO_SPACE`: not enough space.
    NoSpace = 36,
    /// `MPI_ERR_NO_SUCH_FILE`: file does not exist.
    NoSuchFile = 37,
    /// `MPI_ERR_PORT`: invalid port name.
    Port = 38,
    /// `MPI_ERR_QUOTA`: quota exceeded.
    Quota = 39,
    /// `MPI_ERR_READ_ONLY`: read-only file or file system.
    ReadOnly = 40,
    /// `MPI_ERR_SERVICE`: invalid service name passed to `MPI_Unpublish_name`.
    Service = 41,
    /// `MPI_ERR_SPAWN`: error in spawning processes.
    Spawn = 42,
    /// `MPI_ERR_UNSUPPORTED_DATAREP`: unsupported data representation.
    UnsupportedDatarep = 43,
    /// `MPI_ERR_UNSUPPORTED_OPERATION`: unsupported operation.
    UnsupportedOperation = 44,
    /// `MPI_ERR_WIN`: invalid window.
    Win = 45,
    /// `MPI_ERR_BASE`: invalid base passed to `MPI_Free_mem`.
    Base = 46,
    /// `MPI_ERR_LOCKTYPE`: invalid lock type.
    Locktype = 47,
    /// `MPI_ERR_KEYVAL`: invalid attribute key.
    Keyval = 48,
    /// `MPI_ERR_RMA_CONFLICT`: conflicting accesses to a window.
    RmaConflict = 49,
    /// `MPI_ERR_RMA_SYNC`: wrong synchronization of RMA calls.
    RmaSync = 50,
    /// `MPI_ERR_SIZE`: invalid size argument.
    Size = 51,
    /// `MPI_ERR_DISP`: invalid displacement argument.
    Disp = 52,
    /// `MPI_ERR_ASSERT`: invalid assert argument.
    Assert = 53,
    /// `MPI_ERR_RMA_RANGE`: target memory is not part of the window.
    RmaRange = 55,
    /// `MPI_ERR_RMA_ATTACH`: memory cannot be attached.
    RmaAttach = 56,
    /// `MPI_ERR_RMA_SHARED`: memory cannot be shared.
    RmaShared = 57,
    /// `MPI_ERR_RMA_FLAVOR`: passed window has the wrong flavor for the call.
    RmaFlavor = 58,
}

impl ErrorClass {
    /// Every class, in numeric order.
    pub const ALL: [ErrorClass; 58] = {
        use ErrorClass::*;
        [
            Success,
            Buffer,
            Count,
            Type,
            Tag,
            Comm,
            Rank,
            Root,
            Group,
            Op,
            Topology,
            Dims,
            Arg,
            Unknown,
            Truncate,
            Other,
            Intern,
            InStatus,
            Pending,
            Request,
            Access,
            Amode,
            BadFile,
            Conversion,
            DupDatarep,
            FileExists,
            FileInUse,
            File,
            Info,
            InfoKey,
            InfoValue,
            InfoNokey,
            Io,
            Name,
            NoMem,
            NotSame,
            NoSpace,
            NoSuchFile,
            Port,
            Quota,
            ReadOnly,
            Service,
            Spawn,
            UnsupportedDatarep,
            UnsupportedOperation,
            Win,
            Base,
            Locktype,
            Keyval,
            RmaConflict,
            RmaSync,
            Size,
            Disp,
            Assert,
            RmaRange,
            RmaAttach,
            RmaShared,
            RmaFlavor,
        ]
    };

    /// The numeric value (MPICH's), as an MPI binding returns it.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The class with this numeric value, if any.
    pub fn from_code(code: i32) -> Option<ErrorClass> {
        ErrorClass::ALL.iter().copied().find(|c| c.code() == code)
    }

    /// The C name of the class, for example `"MPI_ERR_TAG"`.
    pub const fn name(self) -> &'static str {
        use ErrorClass::*;
        match self {
            Success => "MPI_SUCCESS",
            Buffer => "MPI_ERR_BUFFER",
            Count => "MPI_ERR_COUNT",
            Type => "MPI_ERR_TYPE",
            Tag => "MPI_ERR_TAG",
            Comm => "MPI_ERR_COMM",
            Rank => "MPI_ERR_RANK",
            Root => "MPI_ERR_ROOT",
            Group => "MPI_ERR_GROUP",
            Op => "MPI_ERR_OP",
            Topology => "MPI_ERR_TOPOLOGY",
            Dims => "MPI_ERR_DIMS",
            Arg => "MPI_ERR_ARG",
            Unknown => "MPI_ERR_UNKNOWN",
            Truncate => "MPI_ERR_TRUNCATE",
            Other => "MPI_ERR_OTHER",
            Intern => "MPI_ERR_INTERN",
            InStatus => "MPI_ERR_IN_STATUS",
            Pending => "MPI_ERR_PENDING",
            Request => "MPI_ERR_REQUEST",
            Access => "MPI_ERR_ACCESS",
            Amode => "MPI_ERR_AMODE",
            BadFile => "MPI_ERR_BAD_FILE",
            Conversion => "MPI_ERR_CONVERSION",
            DupDatarep => "MPI_ERR_DUP_DATAREP",
            FileExists => "MPI_ERR_FILE_EXISTS",
            FileInUse => "MPI_ERR_FILE_IN_USE",
            File => "MPI_ERR_FILE",
            Info => "MPI_ERR_INFO",
            InfoKey => "MPI_ERR_INFO_KEY",
            InfoValue => "MPI_ERR_INFO_VALUE",
            InfoNokey => "MPI_ERR_INFO_NOKEY",
            Io => "MPI_ERR_IO",
            Name => "MPI_ERR_NAME",
            NoMem => "MPI_ERR_NO_MEM",
            NotSame => "MPI_ERR_NOT_SAME",
            NoSpace => "MPI_ERR_NO_SPACE",
            NoSuchFile => "MPI_ERR_NO_SUCH_FILE",
            Port => "MPI_ERR_PORT",
            Quota => "MPI_ERR_QUOTA",
            ReadOnly => "MPI_ERR_READ_ONLY",
            Service => "MPI_ERR_SERVICE",
            Spawn => "MPI_ERR_SPAWN",
            UnsupportedDatarep => "MPI_ERR_UNSUPPORTED_DATAREP",
            UnsupportedOperation => "MPI_ERR_UNSUPPORTED_OPERATION",
            Win => "MPI_ERR_WIN",
            Base => "MPI_ERR_BASE",
            Locktype => "MPI_ERR_LOCKTYPE",
            Keyval => "MPI_ERR_KEYVAL",
            RmaConflict => "MPI_ERR_RMA_CONFLICT",
            RmaSync => "MPI_ERR_RMA_SYNC",
            Size => "MPI_ERR_SIZE",
            Disp => "MPI_ERR_DISP",
            Assert => "MPI_ERR_ASSERT",
            RmaRange => "MPI_ERR_RMA_RANGE",
            RmaAttach => "MPI_ERR_RMA_ATTACH",
            RmaShared => "MPI_ERR_RMA_SHARED",
            RmaFlavor => "MPI_ERR_RMA_FLAVOR",
        }
    }

    /// `true` for [`ErrorClass::Success`].
    pub const fn is_success(self) -> bool {
        matches!(self, ErrorClass::Success)
    }
}

impl core::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything that can go wrong in `adi`.
///
/// Each variant maps to one MPI error class through [`Error::class`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A count, block length or number of blocks is negative.
    #[error("{what} must not be negative, got {value}")]
    NegativeCount {
        /// Which argument.
        what: &'static str,
        /// The value given.
        value: i64,
    },
    /// A size, extent or displacement computed from the arguments does not fit
    /// the address space (`isize`/`usize`).
    #[error("{what} overflows the address space")]
    Overflow {
        /// What was being computed.
        what: &'static str,
    },
    /// An argument is invalid in a way not covered by a more specific variant
    /// (for example arrays of different lengths).
    #[error("invalid argument: {what}")]
    InvalidArgument {
        /// What is wrong.
        what: &'static str,
    },
    /// The datatype was used for communication or packing before
    /// [`Datatype::commit`](crate::Datatype::commit).
    #[error("datatype used before commit")]
    NotCommitted,
    /// The flattened form of a datatype would have more blocks than this
    /// implementation supports (see [`MAX_FLAT_BLOCKS`](crate::datatype::MAX_FLAT_BLOCKS)).
    #[error("datatype flattens to more than {max} blocks")]
    TooManyBlocks {
        /// The limit.
        max: usize,
    },
    /// Datatype constructors nested deeper than
    /// [`MAX_DEPTH`](crate::datatype::MAX_DEPTH).
    #[error("datatype nested deeper than {max} levels")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// `count` elements of the datatype touch bytes outside the user buffer
    /// (`lo..hi` relative to its start). Nothing was read or written.
    #[error("buffer of {len} bytes does not cover bytes {lo}..{hi} that the datatype touches")]
    BufferOutOfBounds {
        /// First byte touched (may be negative).
        lo: i128,
        /// One past the last byte touched.
        hi: i128,
        /// Length of the buffer given.
        len: usize,
    },
    /// Packed data does not fit the output buffer, or the packed input holds
    /// less than the unpack asked for. Nothing was written.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A byte offset into a packed stream lies beyond its end.
    #[error("offset {offset} is beyond the end of a {len}-byte packed stream")]
    OffsetOutOfRange {
        /// The offset given.
        offset: usize,
        /// Length of the packed stream.
        len: usize,
    },
    /// An operation completed with an error known only by its class (the
    /// completer gave no detailed error).
    #[error("operation failed with {0}")]
    Failed(ErrorClass),
    /// The device dropped an operation without completing it. The request is
    /// complete with this error so that no wait hangs forever.
    #[error("the device abandoned the operation before completing it")]
    Abandoned,
    /// One request of a set failed in `waitany`/`testany`.
    #[error("request {index} failed: {source}")]
    AtIndex {
        /// Position of the request in the slice.
        index: usize,
        /// Its error.
        #[source]
        source: Box<Error>,
    },
    /// At least one request of a set failed in `waitall`/`testall`/
    /// `waitsome`/`testsome` (`MPI_ERR_IN_STATUS`): every completed request
    /// has its status here, with its own class in [`Status::error`].
    #[error("{failed} of {} completed requests failed", statuses.len())]
    InStatus {
        /// How many statuses carry an error.
        failed: usize,
        /// `(index, status)` of every request completed by the call.
        statuses: Vec<(usize, Status)>,
    },
    /// A wire codec error (envelope out of range, malformed message).
    #[error(transparent)]
    Proto(#[from] tm_proto::Error),
    /// A rank argument outside the communicator (and not `PROC_NULL`, or
    /// `ANY_SOURCE` where a receive allows it).
    #[error("rank {rank} is not in a communicator of size {size}")]
    InvalidRank {
        /// The rank given.
        rank: i32,
        /// The communicator's size.
        size: i32,
    },
    /// A root argument outside the communicator.
    #[error("root {root} is not in a communicator of size {size}")]
    InvalidRoot {
        /// The root given.
        root: i32,
        /// The communicator's size.
        size: i32,
    },
    /// A tag outside `0..=TAG_UB` (or `ANY_TAG` where a receive allows it).
    #[error("tag {tag} is outside 0..={ub} (MPI_TAG_UB)")]
    InvalidTag {
        /// The tag given.
        tag: i32,
        /// `MPI_TAG_UB`.
        ub: i32,
    },
    /// A receive matched a message longer than its buffer
    /// (`MPI_ERR_TRUNCATE`). The first `status.count` bytes (the buffer's
    /// size) were delivered, nothing past the buffer was written, and the
    /// message was consumed.
    #[error("message of {msg_len} bytes from rank {} (tag {}) truncated to the {}-byte buffer", status.source, status.tag, status.count)]
    RecvTruncated {
        /// What was delivered: source, tag, and the bytes written.
        status: Status,
        /// Length of the message that was sent.
        msg_len: usize,
    },
    /// A buffered send found no room in the attached buffer (a full buffer
    /// is an error, never a block), or no buffer is attached.
    #[error("buffered send needs {need} bytes of the attached buffer, {free} are free (attached: {attached})")]
    BsendBufferFull {
        /// Bytes the message needs (data plus `BSEND_OVERHEAD`).
        need: usize,
        /// Largest free region.
        free: usize,
        /// Size of the attached buffer (0: none attached).
        attached: usize,
    },
    /// An operation on a request that is null, already freed, or not of the
    /// kind the call needs.
    #[error("invalid request: {what}")]
    InvalidRequest {
        /// What is wrong.
        what: &'static str,
    },
    /// A call the device's thread level does not allow: under
    /// [`crate::ThreadLevel::Funneled`], a call from a thread other than the
    /// one that initialized the device (`MPI_THREAD_FUNNELED` makes it
    /// erroneous; here it is refused), or a re-entrant call.
    #[error("thread level: {what}")]
    ThreadLevel {
        /// What was refused.
        what: &'static str,
    },
    /// The device is not initialized (no `adi::init`) or already finalized.
    #[error("the device is {what}")]
    NotInitialized {
        /// `"not initialized"` or `"finalized"`.
        what: &'static str,
    },
    /// A peer is on another node and no transport between nodes could
    /// start (`verbs-tm`: neither a tag-matching RDMA device nor the
    /// software provider over TCP; the reason is logged at init).
    #[error("rank {rank} is on node {node} but this rank is on node {my_node}: no inter-node transport (verbs-tm) could start: {reason}")]
    NoInterNodeTransport {
        /// The remote rank (in `MPI_COMM_WORLD`).
        rank: u32,
        /// Its node.
        node: usize,
        /// This rank's node.
        my_node: usize,
        /// Why no transport started.
        reason: String,
    },
    /// A peer reached through the remote transport died (its connection
    /// closed without a goodbye, or failed): the operations that wait for
    /// it fail with this instead of hanging.
    #[error("rank {rank} died: {detail}")]
    PeerDied {
        /// The dead rank (in `MPI_COMM_WORLD`).
        rank: u32,
        /// What the transport saw.
        detail: String,
    },
    /// The transport between nodes (`verbs-tm`) failed: its message, and
    /// the MPI class it maps to (`MPI_ERR_COUNT` for a message larger than
    /// the rendezvous can describe, `MPI_ERR_OTHER` otherwise).
    #[error("inter-node transport (verbs-tm): {detail}")]
    InterNode {
        /// The MPI class of the transport error.
        class: ErrorClass,
        /// The transport's error message.
        detail: String,
    },
    /// The intra-node transport failed; `class` is chosen by
    /// [`shmem_class`], `detail` is its message.
    #[error("shmem transport: {detail}")]
    Transport {
        /// The MPI class of the transport error.
        class: ErrorClass,
        /// The transport's error message.
        detail: String,
    },
    /// The launcher's PMI client failed (init, key exchange, barrier,
    /// finalize).
    #[error("launcher (PMI): {detail}")]
    Launcher {
        /// The launcher's error message.
        detail: String,
    },
    /// No context id is free on every member of the parent communicator
    /// (MPICH: "too many communicators").
    #[error("no free context id left ({max} communicators at most)")]
    ContextExhausted {
        /// How many communicators the context-id space holds.
        max: usize,
    },
    /// A reduction operation that is not defined for the element type (a
    /// bitwise operation on floating-point data).
    #[error("reduction {op} is not defined for {ty}")]
    InvalidOp {
        /// The operation.
        op: &'static str,
        /// The element type.
        ty: &'static str,
    },
    /// An RMA synchronization or window error from the epoch engine
    /// (`rma_epoch::Error`): an operation outside an epoch, unlock without
    /// lock, a call while another is in progress, ... Its class is chosen
    /// by [`rma_class`].
    #[error("RMA: {0}")]
    Rma(rma_epoch::Error),
    /// An RMA access past the end of the target's window
    /// (`MPI_ERR_RMA_RANGE`).
    #[error("RMA access of {len} bytes at displacement {disp} is outside rank {target}'s window of {size} bytes")]
    RmaRange {
        /// The target rank.
        target: i32,
        /// The displacement (bytes).
        disp: u64,
        /// The access length (bytes).
        len: usize,
        /// The target window's size (bytes).
        size: u64,
    },
    /// An invalid group argument (`MPI_ERR_GROUP`): a process listed
    /// twice, a group that is not a subset of the communicator's.
    #[error("invalid group: {what}")]
    InvalidGroup {
        /// What is wrong.
        what: &'static str,
    },
    /// A communicator that cannot be used for the call (`MPI_ERR_COMM`):
    /// an intercommunicator where an intracommunicator is needed, or the
    /// reverse.
    #[error("invalid communicator: {what}")]
    InvalidComm {
        /// What is wrong.
        what: &'static str,
    },
    /// A topology call on a communicator without that topology, or a
    /// topology description that is inconsistent (`MPI_ERR_TOPOLOGY`).
    #[error("invalid topology: {what}")]
    InvalidTopology {
        /// What is wrong.
        what: &'static str,
    },
    /// An invalid dimension argument (`MPI_ERR_DIMS`).
    #[error("invalid dimensions: {what}")]
    InvalidDims {
        /// What is wrong.
        what: &'static str,
    },
    /// An invalid attribute key (`MPI_ERR_KEYVAL`).
    #[error("invalid keyval: {what}")]
    InvalidKeyval {
        /// What is wrong.
        what: &'static str,
    },
    /// An invalid info key or value, or a key not present
    /// (`MPI_ERR_INFO_KEY`, `MPI_ERR_INFO_VALUE`, `MPI_ERR_INFO_NOKEY`).
    #[error("info: {what}")]
    InvalidInfo {
        /// `InfoKey`, `InfoValue` or `InfoNokey`.
        class: ErrorClass,
        /// What is wrong.
        what: &'static str,
    },
    /// A call outside what this implementation supports
    /// (`MPI_ERR_UNSUPPORTED_OPERATION`): MPI-IO, dynamic processes, ...
    #[error("unsupported: {what}")]
    Unsupported {
        /// What was asked for.
        what: &'static str,
    },
    /// Memory for a buffer sized by the caller's arguments (a count times
    /// an extent, a packed message, a collective's temporary) could not be
    /// had: more than the address space, or more than the system gives.
    /// Nothing was sent or received.
    #[error("cannot allocate {bytes} bytes for {what}")]
    NoMem {
        /// The size asked for (saturated at `usize::MAX`).
        bytes: usize,
        /// What the memory was for.
        what: &'static str,
    },
    /// A window that lives in shared memory (`allocate_shared`,
    /// `MPI_ERR_RMA_SHARED`) or reaches its targets' memory only by single
    /// copy (`create_dynamic`, `MPI_ERR_UNSUPPORTED_OPERATION`) was asked
    /// of a communicator whose ranks are on more than one node. The call
    /// failed on every rank.
    #[error(
        "{what} needs every rank of the communicator on one node; this communicator spans nodes"
    )]
    SpansNodes {
        /// The constructor.
        what: &'static str,
        /// Its MPI error class.
        class: ErrorClass,
    },
    /// Another rank of the window dropped it without `MPI_Win_free`
    /// (`MPI_ERR_WIN`): this rank's `free` gives up instead of waiting for
    /// it.
    #[error("rank {rank} of the window dropped it without freeing it")]
    WinAbandoned {
        /// The rank (in the window's group) that dropped it.
        rank: i32,
    },
    /// The members of a rooted collective disagree: a message came from a
    /// member that passed another root, or from another collective call
    /// (the members did not call the collectives in the same order). The
    /// message was consumed; the call failed on this rank only.
    #[error("{op}: rank {peer} of the communicator sent with root {theirs:?}, this rank passed root {ours} (every member must pass the same root, and call collectives in the same order)")]
    RootMismatch {
        /// The collective.
        op: &'static str,
        /// This rank's root.
        ours: i32,
        /// The sender (communicator rank).
        peer: i32,
        /// The sender's root (modulo 2^21), if its message was of this
        /// collective at all.
        theirs: Option<i32>,
    },
    /// A `TMX_ADI_*` environment variable is malformed.
    #[error("environment variable {var}={value:?} is invalid: {reason}")]
    Config {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        reason: &'static str,
    },
}

impl From<shmem_onesided::Error> for Error {
    /// A dead peer ([`shmem_onesided::Error::PeerDied`]) ends this process
    /// here unless [`crate::OnPeerDeath::Return`] was chosen.
    fn from(e: shmem_onesided::Error) -> Self {
        if let shmem_onesided::Error::PeerDied { rank, pid } = &e {
            crate::init::peer_died(*rank, *pid);
        }
        Error::Transport {
            class: shmem_class(&e),
            detail: e.to_string(),
        }
    }
}

impl From<rma_epoch::Error> for Error {
    fn from(e: rma_epoch::Error) -> Self {
        Error::Rma(e)
    }
}

/// The MPI error class of an `rma_epoch` error: epoch misuse is
/// `MPI_ERR_RMA_SYNC`, a bad rank `MPI_ERR_RANK`, an invalid accumulate
/// `MPI_ERR_OP`, an unknown window `MPI_ERR_WIN`, a bad `TMX_RMA_*`
/// setting or a malformed packet `MPI_ERR_OTHER`/`MPI_ERR_INTERN`.
pub fn rma_class(e: &rma_epoch::Error) -> ErrorClass {
    use rma_epoch::Error as R;
    match e {
        R::NoEpoch { .. }
        | R::WrongEpoch { .. }
        | R::WrongExposure { .. }
        | R::AlreadyLocked { .. }
        | R::NotLocked { .. }
        | R::NotInGroup { .. }
        | R::CallInProgress { .. }
        | R::FreeInEpoch { .. } => ErrorClass::RmaSync,
        R::RankOutOfRange { .. } => ErrorClass::Rank,
        R::InvalidAccumulate { .. } => ErrorClass::Op,
        R::TooLarge { .. } => ErrorClass::Count,
        R::NoSuchWindow(_) => ErrorClass::Win,
        R::Packet { .. } | R::WrongBackend { .. } => ErrorClass::Intern,
        _ => ErrorClass::Other,
    }
}

impl From<launcher::Error> for Error {
    fn from(e: launcher::Error) -> Self {
        Error::Launcher {
            detail: e.to_string(),
        }
    }
}

/// The MPI error class of a `shmem_onesided` error; the table in the
/// [module documentation](self) gives the reasons.
pub fn shmem_class(e: &shmem_onesided::Error) -> ErrorClass {
    use shmem_onesided::Error as S;
    match e {
        S::InvalidArgument(_) => ErrorClass::Arg,
        S::BadPe { .. } => ErrorClass::Rank,
        S::HeapExhausted { .. } => ErrorClass::NoMem,
        S::MessageTooLarge { .. } => ErrorClass::Count,
        S::Truncated { .. } => ErrorClass::Truncate,
        S::OutOfBounds { .. } => ErrorClass::Intern,
        S::Match(_) => ErrorClass::Intern,
        S::Config { .. }
        | S::InvalidJobId { .. }
        | S::Os { .. }
        | S::SegmentExists { .. }
        | S::AttachTimeout { .. }
        | S::LayoutMismatch { .. }
        | S::RankTaken { .. }
        | S::PeerDied { .. }
        | S::CmaUnavailable { .. }
        | S::CmaShort { .. }
        | S::PrepostWriteFailed { .. }
        | S::BadHeader { .. } => ErrorClass::Other,
        // Non-exhaustive: a variant added later is "known error not in this
        // list" until mapped here.
        _ => ErrorClass::Other,
    }
}

impl Error {
    /// The MPI error class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::NegativeCount { .. } | Error::Overflow { .. } => ErrorClass::Count,
            Error::InvalidArgument { .. } | Error::OffsetOutOfRange { .. } => ErrorClass::Arg,
            Error::NotCommitted | Error::TooManyBlocks { .. } | Error::TooDeep { .. } => {
                ErrorClass::Type
            }
            Error::BufferOutOfBounds { .. } => ErrorClass::Buffer,
            Error::Truncated { .. } => ErrorClass::Truncate,
            Error::Failed(class) => *class,
            Error::Abandoned => ErrorClass::Intern,
            Error::AtIndex { source, .. } => source.class(),
            Error::InStatus { .. } => ErrorClass::InStatus,
            Error::Proto(e) => proto_class(e),
            Error::InvalidRank { .. } => ErrorClass::Rank,
            Error::InvalidRoot { .. } => ErrorClass::Root,
            Error::InvalidTag { .. } => ErrorClass::Tag,
            Error::RecvTruncated { .. } => ErrorClass::Truncate,
            Error::BsendBufferFull { .. } => ErrorClass::Buffer,
            Error::InvalidRequest { .. } => ErrorClass::Request,
            Error::NotInitialized { .. }
            | Error::ThreadLevel { .. }
            | Error::NoInterNodeTransport { .. }
            | Error::PeerDied { .. }
            | Error::Launcher { .. }
            | Error::ContextExhausted { .. }
            | Error::Config { .. } => ErrorClass::Other,
            Error::Transport { class, .. } | Error::InterNode { class, .. } => *class,
            Error::InvalidOp { .. } => ErrorClass::Op,
            Error::Rma(e) => rma_class(e),
            Error::RmaRange { .. } => ErrorClass::RmaRange,
            Error::InvalidGroup { .. } => ErrorClass::Group,
            Error::InvalidComm { .. } => ErrorClass::Comm,
            Error::InvalidTopology { .. } => ErrorClass::Topology,
            Error::InvalidDims { .. } => ErrorClass::Dims,
            Error::InvalidKeyval { .. } => ErrorClass::Keyval,
            Error::InvalidInfo { class, .. } => *class,
            Error::Unsupported { .. } => ErrorClass::UnsupportedOperation,
            Error::NoMem { .. } => ErrorClass::NoMem,
            Error::WinAbandoned { .. } => ErrorClass::Win,
            Error::SpansNodes { class, .. } => *class,
            Error::RootMismatch { .. } => ErrorClass::Root,
        }
    }
}

/// The MPI error class of a `tm_proto` error; the table in the
/// [module documentation](self) gives the reasons.
pub fn proto_class(e: &tm_proto::Error) -> ErrorClass {
    use tm_proto::{Error as P, Field};
    match e {
        P::OutOfRange {
            field: Field::Tag, ..
        } => ErrorClass::Tag,
        P::OutOfRange {
            field: Field::Rank, ..
        } => ErrorClass::Rank,
        P::OutOfRange {
            field: Field::ContextId,
            ..
        } => ErrorClass::Comm,
        P::Truncated { .. } | P::UnknownOpcode(_) | P::UnknownCode { .. } | P::BadLength { .. } => {
            ErrorClass::Other
        }
        P::BufferTooSmall { .. }
        | P::OpcodeMismatch { .. }
        | P::HeaderTooLong { .. }
        | P::InvalidLayout { .. } => ErrorClass::Intern,
        // `tm_proto::Error` is non-exhaustive: a variant added later is
        // reported as "known error not in this list" until mapped here.
        _ => ErrorClass::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tm_proto::{Envelope, TagLayout};

    #[test]
    fn mpich_numeric_values() {
        assert_eq!(ErrorClass::Success.code(), 0);
        assert_eq!(ErrorClass::Buffer.code(), 1);
        assert_eq!(ErrorClass::Tag.code(), 4);
        assert_eq!(ErrorClass::Truncate.code(), 14);
        assert_eq!(ErrorClass::Other.code(), 15);
        assert_eq!(ErrorClass::Intern.code(), 16);
        assert_eq!(ErrorClass::InStatus.code(), 17);
        assert_eq!(ErrorClass::Pending.code(), 18);
        assert_eq!(ErrorClass::Request.code(), 19);
        assert_eq!(ErrorClass::NoMem.code(), 34);
        assert_eq!(ErrorClass::Win.code(), 45);
        assert_eq!(ErrorClass::RmaSync.code(), 50);
        assert_eq!(ErrorClass::RmaFlavor.code(), 58);
    }

    #[test]
    fn all_is_sorted_unique_and_round_trips() {
        for w in ErrorClass::ALL.windows(2) {
            assert!(w[0].code() < w[1].code(), "{:?} !< {:?}", w[0], w[1]);
        }
        for c in ErrorClass::ALL {
            assert_eq!(ErrorClass::from_code(c.code()), Some(c));
            assert!(c.name().starts_with("MPI_"));
        }
        assert_eq!(ErrorClass::from_code(54), None);
        assert_eq!(ErrorClass::from_code(-1), None);
        assert_eq!(ErrorClass::Tag.to_string(), "MPI_ERR_TAG");
    }

    #[test]
    fn proto_errors_map_to_classes() {
        let l = TagLayout::DEFAULT;
        let env = |context_id, source, tag| Envelope {
            context_id,
            source,
            tag,
        };
        let tag_err: Error = l.encode(env(0, 0, u32::MAX)).unwrap_err().into();
        assert_eq!(tag_err.class(), ErrorClass::Tag);
        let rank_err: Error = l.encode(env(0, u32::MAX, 0)).unwrap_err().into();
        assert_eq!(rank_err.class(), ErrorClass::Rank);
        let ctx_err: Error = l.encode(env(u32::MAX, 0, 0)).unwrap_err().into();
        assert_eq!(ctx_err.class(), ErrorClass::Comm);
        let decode_err: Error = tm_proto::Message::decode(&[], tm_proto::Limits::MLX5)
            .unwrap_err()
            .into();
        assert_eq!(decode_err.class(), ErrorClass::Other);
        let layout_err: Error = TagLayout::new(1, 1, 1).unwrap_err().into();
        assert_eq!(layout_err.class(), ErrorClass::Intern);
    }

    #[test]
    fn a_dead_remote_peer_is_other() {
        let e = Error::PeerDied {
            rank: 3,
            detail: "connection closed".into(),
        };
        assert_eq!(e.class(), ErrorClass::Other);
        assert_eq!(e.to_string(), "rank 3 died: connection closed");
    }

    #[test]
    fn nested_errors_keep_the_inner_class() {
        let e = Error::AtIndex {
            index: 3,
            source: Box::new(Error::Truncated { need: 8, have: 4 }),
        };
        assert_eq!(e.class(), ErrorClass::Truncate);
        assert_eq!(Error::Failed(ErrorClass::Other).class(), ErrorClass::Other);
        assert_eq!(Error::Abandoned.class(), ErrorClass::Intern);
    }
}
