//! The header format: message kinds, flags and the helpers that build and
//! read headers.

use super::*;

/// What a header is: the `kind` byte of every header this endpoint
/// publishes (wire values 1–9; a header with any other value is
/// malformed and reported as such by the receive that takes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// The payload (at most [`INLINE_MAX`] bytes) is in the header itself
    /// (`word`, then `ext`; its length also in `aux`).
    Inline = 1,
    /// The payload is in the sender's eager area, in the block at offset
    /// `word` (after the block's flag line).
    Eager = 2,
    /// The payload is at address `word` of the sender process (CMA); the
    /// send's id is in `ext[0..8]`, and the receiver answers with
    /// [`Kind::Fin`] once it has read it.
    Cma = 3,
    /// The receiver finished reading CMA send `word` (control: not a
    /// message).
    Fin = 4,
    /// One chunk of a pipelined message, or one fragment of a message
    /// larger than the eager area (sent when CMA is unavailable).
    /// `nbytes` is the whole message's length, `ext[0..8]` this chunk's
    /// length, `word` its eager offset; the first chunk has
    /// [`Flags::FIRST`] and carries the envelope. The chunks of one message
    /// are consecutive in the pair's ring.
    Frag = 5,
    /// The receiver matched synchronous send `word` (control; sent for
    /// [`Flags::SYNC`] messages, except a CMA message read at match time,
    /// whose FIN carries [`Flags::MATCHED`] instead).
    Ack = 6,
    /// An inline message longer than one slot: its first 40 bytes ride in
    /// the header (`word` + `ext`), the other `nbytes - 40` in the
    /// following ring slots (continuation slots, 60 bytes each; see
    /// [`crate::ring::Producer::try_push_ext`]). Up to
    /// `TMX_SHMEM_TUNE=inline_ext` bytes, never synchronous.
    InlineExt = 7,
    /// The sender asks to withdraw its unmatched send `word` (`MPI_Cancel`;
    /// control: not a message); the receiver answers [`Kind::Cancelled`].
    Cancel = 8,
    /// The answer to [`Kind::Cancel`] for send `word` (control):
    /// [`Flags::WITHDRAWN`] if the message was removed before any receive
    /// matched it (it will never be received), none if it was matched.
    Cancelled = 9,
}

impl Kind {
    /// The kind a header's `kind` byte names, or `None` for a byte no
    /// sender of this crate writes.
    #[inline(always)]
    pub const fn of(byte: u8) -> Option<Kind> {
        match byte {
            1 => Some(Kind::Inline),
            2 => Some(Kind::Eager),
            3 => Some(Kind::Cma),
            4 => Some(Kind::Fin),
            5 => Some(Kind::Frag),
            6 => Some(Kind::Ack),
            7 => Some(Kind::InlineExt),
            8 => Some(Kind::Cancel),
            9 => Some(Kind::Cancelled),
            _ => None,
        }
    }

    /// The byte written into a header's `kind`.
    #[inline(always)]
    pub const fn byte(self) -> u8 {
        self as u8
    }
}

/// A header's `kind` byte compared with a [`Kind`] (`h.kind == Kind::Eager`).
impl PartialEq<Kind> for u8 {
    #[inline(always)]
    fn eq(&self, kind: &Kind) -> bool {
        *self == *kind as u8
    }
}

/// The bits of a header's `flags` byte. Bits a peer sets that this crate
/// does not know are kept and ignored; [`Flags::IN_PLACE`] and
/// [`Flags::HELD`] are local markers, never sent, cleared from every
/// arriving chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u8);

impl Flags {
    /// No flag.
    pub const NONE: Flags = Flags(0);
    /// The first chunk of a pipelined or fragmented message ([`Kind::Frag`]).
    pub const FIRST: Flags = Flags(1);
    /// On a [`Kind::Cancelled`] answer: the message was withdrawn.
    pub const WITHDRAWN: Flags = Flags(1);
    /// The sender counted this message in the receiver's
    /// [`Phase`](crate::prepost::Phase) before publishing it (an
    /// engine-unexpected message of the prepost protocol).
    pub const COUNTED: Flags = Flags(2);
    /// A synchronous-mode message: the receiver acknowledges its match
    /// ([`Kind::Ack`]) quoting the send id in `ext[8..16]`.
    pub const SYNC: Flags = Flags(4);
    /// On a FIN: the receiver read the CMA message because a receive
    /// matched it (so the FIN also acknowledges a synchronous send).
    pub const MATCHED: Flags = Flags(8);
    /// On a CMA header: the sender may share the copy
    /// (`TMX_SHMEM_TUNE=cma_split`; see [`crate::ring::SplitWords`]).
    pub const SPLIT: Flags = Flags(0x10);
    /// Local marker on a reassembled pipelined message (never sent): its
    /// chunks are still in the sender's eager area, their headers kept by
    /// the endpoint under `(source, first chunk's offset)`.
    pub const HELD: Flags = Flags(0x40);
    /// Local marker on a reassembled pipelined message (never sent): its
    /// payload was copied straight into the buffer of the receive it is
    /// bound to match.
    pub const IN_PLACE: Flags = Flags(0x80);

    /// The flags of a header's `flags` byte.
    #[inline(always)]
    pub const fn from_bits(bits: u8) -> Flags {
        Flags(bits)
    }

    /// The byte written into a header's `flags`.
    #[inline(always)]
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether every flag of `other` is set.
    #[inline(always)]
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for Flags {
    type Output = Flags;
    #[inline(always)]
    fn bitor(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
}

impl core::ops::BitOrAssign for Flags {
    #[inline(always)]
    fn bitor_assign(&mut self, other: Flags) {
        self.0 |= other.0;
    }
}

/// The endpoint's view of a header's `kind` and `flags` bytes.
impl Header {
    /// Whether flag `f` is set.
    #[inline(always)]
    pub(crate) fn has(&self, f: Flags) -> bool {
        self.flags & f.0 != 0
    }

    /// Sets the flags of `f`.
    #[inline(always)]
    pub(crate) fn set(&mut self, f: Flags) {
        self.flags |= f.0;
    }

    /// Clears the flags of `f`.
    #[inline(always)]
    pub(crate) fn clear(&mut self, f: Flags) {
        self.flags &= !f.0;
    }
}

/// Prepost result word: the claimer's CMA write failed (no data).
pub(super) const RESULT_FAILED: u64 = 1 << 63;

#[inline]
pub(super) fn envelope(h: &Header) -> Envelope {
    Envelope {
        context_id: h.context,
        source: h.source,
        tag: h.tag,
    }
}

/// The largest inline-with-continuation message for a setting of
/// `wanted` bytes and a ring of `ring_slots`, whose header and
/// continuation slots take at most `1/share` of the ring (no continuation
/// at all if that is less than two slots): `TMX_SHMEM_TUNE=inline_ext` takes a
/// quarter, `TMX_SHMEM_TUNE=inline_reply` half.
pub(super) fn inline_cap(wanted: u64, ring_slots: u32, share: u32) -> usize {
    let slots = u64::from(ring_slots / share);
    if slots < 2 {
        return INLINE_MAX;
    }
    let cap = INLINE_MAX as u64 + (slots - 1) * crate::ring::EXT_SLOT_BYTES as u64;
    wanted.min(cap).max(INLINE_MAX as u64) as usize
}

/// The largest inline-with-continuation message for `inline_ext` and a ring
/// of `ring_slots`: a quarter of the ring (so a ring of fewer than 8 slots
/// has none).
pub(super) fn ext_max(inline_ext: u64, ring_slots: u32) -> usize {
    inline_cap(inline_ext, ring_slots, 4)
}

/// The largest message sent inline as a reply for `inline_reply` and a
/// ring of `ring_slots`: half the ring.
pub(super) fn reply_max(inline_reply: u64, ring_slots: u32) -> usize {
    inline_cap(inline_reply, ring_slots, 2)
}

/// Takes the continuation of inline-ext header `h` (just polled from `ring`)
/// out of the ring: the whole payload (the header's 40 bytes, then the
/// tail), or `None` for a length the ring cannot carry (a corrupt header;
/// the receive reports it).
pub(super) fn take_ext_vec(inb: &mut Consumer, ring: RingRef<'_>, h: &Header) -> Option<Vec<u8>> {
    let len = h.nbytes as usize;
    if len <= INLINE_MAX || ext_slots(len - INLINE_MAX) + 1 > ring.capacity() {
        return None;
    }
    let (head, _) = h.inline_payload();
    let mut v = vec![0u8; len];
    v[..INLINE_MAX].copy_from_slice(&head);
    inb.take_ext(ring, &mut v[INLINE_MAX..]).then_some(v)
}

/// The synchronous-send id a [`Flags::SYNC`] header quotes (`ext[8..16]`).
#[inline]
pub(super) fn sync_id(h: &Header) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.ext[8..16]);
    u64::from_le_bytes(b)
}

/// The header of an inline message (`data`, at most [`INLINE_MAX`] bytes,
/// carried in the header itself).
#[inline(always)]
pub(super) fn inline_header(
    source: u32,
    tag: u32,
    context: u32,
    flags: Flags,
    data: &[u8],
) -> Header {
    let mut h = Header {
        kind: Kind::Inline.byte(),
        flags: flags.bits(),
        // <= INLINE_MAX (the callers' condition)
        nbytes: data.len() as u32,
        source,
        tag,
        context,
        ..Header::default()
    };
    h.set_inline(data);
    h
}

/// Counts a message delivered from `source` into a buffer of `cap` bytes
/// (`n` of its `h.nbytes` bytes: truncated when fewer, which is counted and
/// traced, not an error) and returns its status.
#[inline(always)]
pub(super) fn delivered(
    counters: &mut Counters,
    source: u32,
    h: &Header,
    n: usize,
    cap: usize,
) -> Status {
    let msg_len = h.nbytes as usize;
    counters.received += 1;
    if n < msg_len {
        counters.truncated += 1;
        tracing::debug!(
            source,
            msg_len,
            capacity = cap,
            "message truncated to the receive buffer"
        );
    }
    Status {
        source,
        tag: h.tag,
        context: h.context,
        len: n,
        msg_len,
        cancelled: false,
    }
}

/// Copies the first `dst.len()` (at most [`INLINE_MAX`]) inline bytes of
/// `h` (`word`, then `ext`) into `dst`, straight from the header's fields
/// (no intermediate array).
#[inline]
pub(super) fn copy_inline(h: &Header, dst: &mut [u8]) {
    let n = dst.len().min(INLINE_MAX);
    let word = h.word.to_le_bytes();
    if let Some(d) = dst.first_chunk_mut::<8>() {
        // A fixed 8-byte store, not a `memcpy` call of a variable length.
        *d = word;
    } else {
        dst[..n].copy_from_slice(&word[..n]);
    }
    if n > 8 {
        dst[8..n].copy_from_slice(&h.ext[..n - 8]);
    }
}
