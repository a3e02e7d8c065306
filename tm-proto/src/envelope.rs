//! MPI envelope ↔ 64-bit TM tag, and receive match specs ↔ `(tag, mask)`.
//!
//! An MPI message is matched on its envelope `(context id, source rank, tag)`.
//! A tag-matching engine (a TM-SRQ, or our own queues) matches 64-bit tags under
//! a mask: an entry `(tag, mask)` accepts a message tag `t` iff
//! `((t ^ tag) & mask) == 0`. This module packs the envelope into those 64 bits
//! so that the masked compare is *exactly* the MPI rule:
//!
//! - context ids must be equal (never wildcarded);
//! - the source must be equal unless the receive says `ANY_SOURCE`;
//! - the tag must be equal unless the receive says `ANY_TAG`.
//!
//! # Bit layout
//!
//! The context id is in the high bits, the source rank in the middle and the
//! user tag in the low bits (the order MPICH's OFI netmod uses). The default,
//! [`TagLayout::DEFAULT`], is 16 + 24 + 24:
//!
//! ```text
//!  63            48 47                    24 23                     0
//!  +---------------+------------------------+------------------------+
//!  |  context id   |      source rank       |        user tag        |
//!  |   16 bits     |        24 bits         |        24 bits         |
//!  +---------------+------------------------+------------------------+
//! ```
//!
//! Limits of the default: 65 536 context ids (`0..=65535`, as MPICH's 16-bit
//! context ids), ranks `0..=16_777_215` (jobs of up to 2²⁴ processes), tags
//! `0..=16_777_215` (`MPI_TAG_UB` = 16 777 215; MPI requires at least 32 767).
//! Other splits are available through [`TagLayout::new`]; sender and receiver
//! must use the same layout.
//!
//! Wildcards need no reserved values: `ANY_SOURCE` and `ANY_TAG` clear the
//! field's bits in the *mask*, so every rank and tag value is usable. Internal
//! (e.g. collective) traffic should use its own context id rather than reserved
//! tags, so that a user's `ANY_TAG` receive can never match it.

use crate::error::{Error, Field};

/// How the 64 tag bits are split between context id, rank and tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TagLayout {
    context_bits: u32,
    rank_bits: u32,
    tag_bits: u32,
}

/// An MPI message envelope as the sender knows it (no wildcards).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Envelope {
    /// Communicator context id.
    pub context_id: u32,
    /// Rank of the sending process in the communicator.
    pub source: u32,
    /// The user's tag (non-negative in MPI).
    pub tag: u32,
}

/// The source a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// `MPI_ANY_SOURCE`.
    Any,
    /// Exactly this rank.
    Rank(u32),
}

/// The tag a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tag {
    /// `MPI_ANY_TAG`.
    Any,
    /// Exactly this tag.
    Value(u32),
}

/// What a posted receive accepts: a context id (never a wildcard), a source and
/// a tag (each possibly a wildcard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MatchSpec {
    /// Communicator context id.
    pub context_id: u32,
    /// Source rank or `ANY_SOURCE`.
    pub source: Source,
    /// Tag or `ANY_TAG`.
    pub tag: Tag,
}

impl MatchSpec {
    /// The MPI matching rule, computed directly on the envelope.
    pub fn matches(&self, env: &Envelope) -> bool {
        self.context_id == env.context_id
            && match self.source {
                Source::Any => true,
                Source::Rank(r) => r == env.source,
            }
            && match self.tag {
                Tag::Any => true,
                Tag::Value(t) => t == env.tag,
            }
    }
}

/// A `(tag, mask)` pair as a tag-matching list entry holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TagMask {
    /// The tag bits to compare.
    pub tag: u64,
    /// Which bits take part in the compare (1 = must be equal).
    pub mask: u64,
}

impl TagMask {
    /// The TM-SRQ rule: `((msg_tag ^ tag) & mask) == 0`.
    #[inline]
    pub const fn matches(&self, msg_tag: u64) -> bool {
        ((msg_tag ^ self.tag) & self.mask) == 0
    }
}

const fn ones(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

impl TagLayout {
    /// 16 bits of context id, 24 of rank, 24 of tag.
    pub const DEFAULT: TagLayout = TagLayout {
        context_bits: 16,
        rank_bits: 24,
        tag_bits: 24,
    };

    /// Smallest tag field MPI allows: `MPI_TAG_UB` must be at least 32 767.
    pub const MIN_TAG_BITS: u32 = 15;

    /// A layout with the given widths, which must add up to 64. Each field is at
    /// most 32 bits wide (values are `u32`), the context id and rank at least 1,
    /// and the tag at least [`Self::MIN_TAG_BITS`].
    pub const fn new(context_bits: u32, rank_bits: u32, tag_bits: u32) -> Result<Self, Error> {
        let reason = if context_bits + rank_bits + tag_bits != 64 {
            Some("the widths must add up to 64")
        } else if context_bits > 32 || rank_bits > 32 || tag_bits > 32 {
            Some("no field may be wider than 32 bits")
        } else if context_bits == 0 || rank_bits == 0 {
            Some("context id and rank need at least one bit")
        } else if tag_bits < Self::MIN_TAG_BITS {
            Some("MPI requires tags up to at least 32767 (15 bits)")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::InvalidLayout {
                context_bits,
                rank_bits,
                tag_bits,
                reason,
            }),
            None => Ok(TagLayout {
                context_bits,
                rank_bits,
                tag_bits,
            }),
        }
    }

    /// Bits of the context id field.
    pub const fn context_bits(&self) -> u32 {
        self.context_bits
    }

    /// Bits of the rank field.
    pub const fn rank_bits(&self) -> u32 {
        self.rank_bits
    }

    /// Bits of the tag field.
    pub const fn tag_bits(&self) -> u32 {
        self.tag_bits
    }

    /// Largest encodable tag (`MPI_TAG_UB`).
    pub const fn max_tag(&self) -> u32 {
        ones(self.tag_bits) as u32
    }

    /// Largest encodable rank; a job may have at most `max_rank() + 1` processes.
    pub const fn max_rank(&self) -> u32 {
        ones(self.rank_bits) as u32
    }

    /// Largest encodable context id.
    pub const fn max_context_id(&self) -> u32 {
        ones(self.context_bits) as u32
    }

    /// Number of distinct context ids.
    pub const fn context_ids(&self) -> u64 {
        1u64 << self.context_bits
    }

    const fn tag_shift(&self) -> u32 {
        0
    }

    const fn rank_shift(&self) -> u32 {
        self.tag_bits
    }

    const fn context_shift(&self) -> u32 {
        self.tag_bits + self.rank_bits
    }

    /// Mask of the context id bits.
    pub const fn context_mask(&self) -> u64 {
        ones(self.context_bits) << self.context_shift()
    }

    /// Mask of the rank bits.
    pub const fn rank_mask(&self) -> u64 {
        ones(self.rank_bits) << self.rank_shift()
    }

    /// Mask of the tag bits.
    pub const fn tag_mask(&self) -> u64 {
        ones(self.tag_bits) << self.tag_shift()
    }

    #[inline]
    fn check(field: Field, value: u32, max: u32) -> Result<u64, Error> {
        if value > max {
            Err(Error::OutOfRange {
                field,
                value: u64::from(value),
                max: u64::from(max),
            })
        } else {
            Ok(u64::from(value))
        }
    }

    /// Packs a sender's envelope into a TM tag. Values that do not fit are an
    /// error, never truncated.
    #[inline]
    pub fn encode(&self, env: Envelope) -> Result<u64, Error> {
        let ctx = Self::check(Field::ContextId, env.context_id, self.max_context_id())?;
        let src = Self::check(Field::Rank, env.source, self.max_rank())?;
        let tag = Self::check(Field::Tag, env.tag, self.max_tag())?;
        Ok((ctx << self.context_shift()) | (src << self.rank_shift()) | (tag << self.tag_shift()))
    }

    /// Unpacks a TM tag. Every 64-bit value is some envelope, so this cannot
    /// fail.
    pub const fn decode(&self, tag: u64) -> Envelope {
        Envelope {
            context_id: ((tag & self.context_mask()) >> self.context_shift()) as u32,
            source: ((tag & self.rank_mask()) >> self.rank_shift()) as u32,
            tag: ((tag & self.tag_mask()) >> self.tag_shift()) as u32,
        }
    }

    /// The `(tag, mask)` list entry that matches exactly the messages `spec`
    /// accepts. Wildcard fields are zero in both tag and mask.
    pub fn match_bits(&self, spec: MatchSpec) -> Result<TagMask, Error> {
        let ctx = Self::check(Field::ContextId, spec.context_id, self.max_context_id())?;
        let mut tag = ctx << self.context_shift();
        let mut mask = self.context_mask();
        if let Source::Rank(r) = spec.source {
            tag |= Self::check(Field::Rank, r, self.max_rank())? << self.rank_shift();
            mask |= self.rank_mask();
        }
        if let Tag::Value(t) = spec.tag {
            tag |= Self::check(Field::Tag, t, self.max_tag())? << self.tag_shift();
            mask |= self.tag_mask();
        }
        Ok(TagMask { tag, mask })
    }
}

impl Default for TagLayout {
    fn default() -> Self {
        TagLayout::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_limits() {
        let l = TagLayout::DEFAULT;
        assert_eq!(l.max_tag(), 16_777_215);
        assert_eq!(l.max_rank(), 16_777_215);
        assert_eq!(l.max_context_id(), 65_535);
        assert_eq!(l.context_ids(), 65_536);
        assert_eq!(l.context_mask() | l.rank_mask() | l.tag_mask(), u64::MAX);
        assert_eq!(l.context_mask() & l.rank_mask(), 0);
        assert_eq!(l.rank_mask() & l.tag_mask(), 0);
    }

    #[test]
    fn documented_bit_positions() {
        let l = TagLayout::DEFAULT;
        let t = l
            .encode(Envelope {
                context_id: 0xABCD,
                source: 0x12_3456,
                tag: 0x78_9ABC,
            })
            .unwrap();
        assert_eq!(t, 0xABCD_123456_789ABC);
    }

    #[test]
    fn invalid_layouts_are_rejected() {
        assert!(TagLayout::new(16, 24, 23).is_err()); // 63 bits
        assert!(TagLayout::new(0, 32, 32).is_err()); // no context bits
        assert!(TagLayout::new(32, 18, 14).is_err()); // tag below MPI minimum
        assert!(TagLayout::new(8, 40, 16).is_err()); // rank wider than u32
        assert!(TagLayout::new(20, 20, 24).is_ok());
        assert!(TagLayout::new(1, 31, 32).is_ok());
    }

    #[test]
    fn out_of_range_values_are_errors() {
        let l = TagLayout::DEFAULT;
        let too_big_tag = Envelope {
            context_id: 0,
            source: 0,
            tag: 1 << 24,
        };
        assert_eq!(
            l.encode(too_big_tag),
            Err(Error::OutOfRange {
                field: Field::Tag,
                value: 1 << 24,
                max: (1 << 24) - 1
            })
        );
        let spec = MatchSpec {
            context_id: 1 << 16,
            source: Source::Any,
            tag: Tag::Any,
        };
        assert!(matches!(
            l.match_bits(spec),
            Err(Error::OutOfRange {
                field: Field::ContextId,
                ..
            })
        ));
    }

    #[test]
    fn wildcards_clear_mask_bits() {
        let l = TagLayout::DEFAULT;
        let any = l
            .match_bits(MatchSpec {
                context_id: 7,
                source: Source::Any,
                tag: Tag::Any,
            })
            .unwrap();
        assert_eq!(any.mask, l.context_mask());
        let e = |source, tag| {
            l.encode(Envelope {
                context_id: 7,
                source,
                tag,
            })
            .unwrap()
        };
        assert!(any.matches(e(3, 99)));
        assert!(any.matches(e(l.max_rank(), l.max_tag())));
        let other_ctx = l
            .encode(Envelope {
                context_id: 8,
                source: 3,
                tag: 99,
            })
            .unwrap();
        assert!(!any.matches(other_ctx));
    }
}
