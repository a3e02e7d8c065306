//! The engine's side of the offload model: what a TM-SRQ does in hardware,
//! and what a shared-memory sender does when it matches its message against
//! the entries a receiver advertised to it.

use tm_proto::TagMask;

/// The engine's match of one message against its list of entries (the
/// [`Action::Add`](super::Action::Add) entries it holds, in list order): a
/// message with 64-bit tag `t` goes to the **first** active entry whose
/// `((t ^ tag) & mask) == 0`, and only to that one. An engine never skips a
/// matching entry for a later one: if that entry cannot take the message
/// (a buffer too small, an entry not active yet because the counts
/// disagree), the message goes to software as unexpected, where the model
/// matches it against the whole posted queue in order (the earliest posted
/// receive wins, as MPI requires).
///
/// Feed the entries in list order to [`EngineScan::offer`]; it answers
/// `true` for the one entry the message goes to, `false` for every other.
///
/// ```
/// use tm_match::offload::EngineScan;
/// use tm_proto::{Envelope, MatchSpec, Source, Tag, TagLayout};
///
/// let layout = TagLayout::DEFAULT;
/// let any = layout.match_bits(MatchSpec { context_id: 0, source: Source::Rank(1), tag: Tag::Any })?;
/// let seven = layout.match_bits(MatchSpec { context_id: 0, source: Source::Rank(1), tag: Tag::Value(7) })?;
/// let msg = layout.encode(Envelope { context_id: 0, source: 1, tag: 7 })?;
/// let mut scan = EngineScan::new(msg);
/// // Both match; only the first in list order takes the message.
/// assert_eq!([scan.offer(&any), scan.offer(&seven)], [true, false]);
/// # Ok::<(), tm_proto::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineScan {
    tag: u64,
    found: bool,
}

impl EngineScan {
    /// A scan for a message with 64-bit tag `msg_tag` (`TagLayout::encode`).
    #[inline]
    pub const fn new(msg_tag: u64) -> Self {
        EngineScan {
            tag: msg_tag,
            found: false,
        }
    }

    /// The next entry in list order: `true` if the message goes to it (the
    /// first entry that matches; every entry after it answers `false`).
    #[inline]
    pub fn offer(&mut self, entry: &TagMask) -> bool {
        if self.found || !entry.matches(self.tag) {
            return false;
        }
        self.found = true;
        true
    }

    /// Whether an entry took the message.
    #[inline]
    pub fn found(&self) -> bool {
        self.found
    }
}
