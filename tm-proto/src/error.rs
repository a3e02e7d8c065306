//! The one error type of this crate.

/// Which envelope field a value belongs to, for [`Error::OutOfRange`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// The communicator's context id.
    ContextId,
    /// A process rank (the message's source).
    Rank,
    /// The user's message tag.
    Tag,
}

impl core::fmt::Display for Field {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Field::ContextId => "context id",
            Field::Rank => "rank",
            Field::Tag => "tag",
        })
    }
}

/// Everything that can go wrong while encoding or decoding.
///
/// Decoding never panics: every malformed input maps to one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input ends before the structure does.
    #[error("truncated {what}: need {need} bytes, got {got}")]
    Truncated {
        /// What was being decoded.
        what: &'static str,
        /// Bytes the structure needs.
        need: usize,
        /// Bytes the input has.
        got: usize,
    },
    /// The output buffer is smaller than the encoding.
    #[error("buffer too small to encode {what}: need {need} bytes, got {got}")]
    BufferTooSmall {
        /// What was being encoded.
        what: &'static str,
        /// Bytes the encoding needs.
        need: usize,
        /// Bytes the buffer has.
        got: usize,
    },
    /// The TMH opcode byte is not one of `IBV_TMH_{NO_TAG,RNDV,FIN,EAGER}`.
    #[error("unknown TMH opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// A code byte of an RMA packet (kind, accumulate operation or element type)
    /// that this version does not know.
    #[error("unknown RMA {what} code {code:#04x}")]
    UnknownCode {
        /// Which field: "packet kind", "accumulate operation" or "element type".
        what: &'static str,
        /// The byte received.
        code: u8,
    },
    /// An encode was asked to write a message kind with a header of another kind.
    #[error("header opcode {got:?} does not fit a {expected:?} message")]
    OpcodeMismatch {
        /// The opcode the message kind requires.
        expected: crate::Opcode,
        /// The opcode the header carried.
        got: crate::Opcode,
    },
    /// A rendezvous request (TMH | RVH | metadata) is longer than the receiver's
    /// `max_rndv_hdr_size`.
    #[error("rendezvous header of {len} bytes exceeds the maximum of {max}")]
    HeaderTooLong {
        /// Length of the whole rendezvous request.
        len: usize,
        /// The limit in force.
        max: usize,
    },
    /// A fixed-size message (FIN) carries bytes after its end.
    #[error("{what} must be exactly {expected} bytes, got {got}")]
    BadLength {
        /// What was being decoded.
        what: &'static str,
        /// The only valid length.
        expected: usize,
        /// The length received.
        got: usize,
    },
    /// An envelope value does not fit the tag layout.
    #[error("{field} {value} out of range: the tag layout allows at most {max}")]
    OutOfRange {
        /// The field that overflowed.
        field: Field,
        /// The value given.
        value: u64,
        /// The largest value the layout can carry.
        max: u64,
    },
    /// A tag layout whose field widths are unusable.
    #[error("invalid tag layout ({context_bits}+{rank_bits}+{tag_bits} bits): {reason}")]
    InvalidLayout {
        /// Bits for the context id.
        context_bits: u32,
        /// Bits for the source rank.
        rank_bits: u32,
        /// Bits for the user tag.
        tag_bits: u32,
        /// Why it is rejected.
        reason: &'static str,
    },
}
