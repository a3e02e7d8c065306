//! The crate's error type.

use std::io;

/// Everything that can go wrong in the PMI client, the PMI server or `tmrun`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// An environment variable has a value that cannot be used.
    #[error("environment variable {var}={value:?} is invalid: {reason}")]
    BadEnv {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A PMI message does not follow the wire grammar.
    #[error("malformed PMI message ({reason}): {message:?}")]
    Malformed {
        /// What is wrong with it.
        reason: String,
        /// The offending message (truncated to 200 bytes).
        message: String,
    },
    /// The server answered with a reply for another command.
    #[error("unexpected PMI reply: expected cmd={expected}, got {got:?}")]
    UnexpectedReply {
        /// The reply command that was expected.
        expected: String,
        /// The reply that arrived (truncated to 200 bytes).
        got: String,
    },
    /// The server answered with `rc != 0`.
    #[error("PMI command {cmd} failed with rc={rc}: {msg}")]
    Rc {
        /// The command that failed.
        cmd: String,
        /// The return code.
        rc: i64,
        /// The server's `msg=` (or `errmsg=`), if any.
        msg: String,
    },
    /// A `get` found no value: the key was never put, or not yet fenced by a barrier.
    #[error("PMI key {key:?} not found ({msg})")]
    KeyNotFound {
        /// The key.
        key: String,
        /// The server's explanation.
        msg: String,
    },
    /// A key cannot be sent on the wire.
    #[error("invalid PMI key {key:?}: {reason}")]
    InvalidKey {
        /// The key.
        key: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A value cannot be sent on the wire as text (use `put_bytes`, which hex-encodes).
    #[error("invalid PMI value for key {key:?}: {reason}")]
    InvalidValue {
        /// The key.
        key: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A value is longer than the server (or the wire) allows.
    #[error("PMI value for key {key:?} is {len} bytes on the wire, the limit is {max}")]
    ValueTooLong {
        /// The key.
        key: String,
        /// The encoded length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value fetched with `get_bytes` is not valid hex.
    #[error("PMI value for key {key:?} is not valid hex: {reason}")]
    BadHex {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// `PMI_process_mapping` could not be parsed.
    #[error("bad PMI_process_mapping {mapping:?}: {reason}")]
    BadMapping {
        /// The mapping string.
        mapping: String,
        /// What is wrong.
        reason: String,
    },
    /// The server closed the connection while a reply was expected.
    #[error("the PMI server closed the connection (while waiting for {waiting_for})")]
    Closed {
        /// The reply that was awaited.
        waiting_for: String,
    },
    /// The environment says a launcher started this process as one rank of
    /// several, but gave it no PMI-1/PMI-2 connection (`PMI_FD`/`PMI_PORT`):
    /// running as a singleton would make N unrelated one-rank jobs.
    #[error(
        "this process was started as one rank of several by {launcher} ({evidence}), \
         but that launcher does not speak PMI-1/PMI-2 to it; tmx does not run it as a \
         singleton: launch with {instead}"
    )]
    ForeignLauncher {
        /// The launcher, as far as the environment tells.
        launcher: String,
        /// The variables that say so.
        evidence: String,
        /// What to launch with instead.
        instead: String,
    },
    /// The PMI connection was already taken by an earlier `Pmi::init` in this process.
    #[error("PMI is already initialized in this process (PMI_FD can be owned once)")]
    AlreadyInitialized,
    /// A `tmrun` command line could not be understood.
    #[error("{0}")]
    Usage(String),
    /// A rank's program could not be started.
    #[error("cannot start {program:?} for rank {rank}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The rank.
        rank: usize,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A system call failed.
    #[error("{context}: {source}")]
    Sys {
        /// What was being done.
        context: String,
        /// The errno.
        #[source]
        source: nix::Error,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn sys(context: impl Into<String>, source: nix::Error) -> Self {
        Error::Sys {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn malformed(reason: impl Into<String>, message: &[u8]) -> Self {
        Error::Malformed {
            reason: reason.into(),
            message: clip(message),
        }
    }
}

/// A lossy, length-bounded rendering of wire bytes for error messages.
pub(crate) fn clip(bytes: &[u8]) -> String {
    let cut = bytes.len().min(200);
    let mut s = String::from_utf8_lossy(&bytes[..cut]).into_owned();
    if bytes.len() > cut {
        s.push_str("...");
    }
    s
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
