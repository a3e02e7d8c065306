//! MPI-3 RMA packets: one fixed 32-byte header, then an optional payload.
//!
//! The packet kinds and flag bits follow MPICH ch3's `mpidpkt.h` (minus the
//! `*_IMMED` twins, which are a transport detail): operations (PUT, GET,
//! ACCUMULATE, GET_ACCUMULATE, FETCH_AND_OP, COMPARE_AND_SWAP), their responses,
//! and the control packets LOCK, LOCK_ACK, LOCK_OP_ACK, UNLOCK, FLUSH, ACK,
//! DECR_AT_COUNTER and POST (the PSCW post message, a 0-byte send in MPICH).
//! There is no RMA_DONE packet: the design's RMA_DONE is the [`RmaFlags::FLUSH`]
//! flag (piggybacked on an operation) or a FLUSH packet, and RMA_DONE_ACK is an
//! ACK packet or the [`RmaFlags::ACK`] flag on a response.
//!
//! ```text
//! RMA header (32 bytes, big-endian fields)
//!  0      1       2        4        8        12        16        24      28     29       32
//!  +------+-------+--------+--------+--------+---------+---------+-------+------+--------+
//!  | kind |acc_op | flags  |  win   | op_id  | sync_id |  disp   |  len  | elem |reserved|
//!  |  u8  |  u8   |  be16  |  be32  |  be32  |  be32   |  be64   | be32  |  u8  |3 bytes |
//!  +------+-------+--------+--------+--------+---------+---------+-------+------+--------+
//! ```
//!
//! `len` is the operation's size in bytes (the data a PUT carries, the data a GET
//! asks for). The payload that follows the header is `len` bytes for PUT,
//! ACCUMULATE, GET_ACCUMULATE, FETCH_AND_OP and every response, `2 * len` bytes
//! for COMPARE_AND_SWAP (origin value, then compare value), and empty for GET and
//! the control packets. `op_id` names the origin's operation (echoed by
//! responses and lock acknowledgements); `sync_id` names the origin's
//! acknowledgement counter (echoed by ACK).
//!
//! ```
//! use tm_proto::rma::{RmaHeader, RmaKind, RmaFlags, RmaPacket, AccOp, ElemType};
//!
//! let hdr = RmaHeader::new(RmaKind::Put, 7)
//!     .with_flags(RmaFlags::LOCK_EXCLUSIVE | RmaFlags::UNLOCK)
//!     .with_target(64, 8);
//! let pkt = RmaPacket { header: hdr, payload: &[1, 2, 3, 4, 5, 6, 7, 8] };
//! let mut buf = [0u8; 64];
//! let n = pkt.encode(&mut buf)?;
//! assert_eq!(n, RmaHeader::LEN + 8);
//! assert_eq!(RmaPacket::decode(&buf[..n])?, pkt);
//! # let _ = (AccOp::Sum, ElemType::U64);
//! # Ok::<(), tm_proto::Error>(())
//! ```

use crate::{fixed, Error};

/// What an RMA packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum RmaKind {
    /// Write `len` bytes at `disp` (payload: the data).
    Put = 1,
    /// Read `len` bytes at `disp` (no payload; answered by [`RmaKind::GetResp`]).
    Get = 2,
    /// Combine `len` bytes into `disp` with `acc_op` on `elem`s (payload: data).
    Accumulate = 3,
    /// Fetch then accumulate (payload: data; answered by
    /// [`RmaKind::GetAccumulateResp`]).
    GetAccumulate = 4,
    /// Fetch-and-op on one element (payload: data; answered by
    /// [`RmaKind::FetchAndOpResp`]).
    FetchAndOp = 5,
    /// Compare-and-swap on one element (payload: origin value then compare
    /// value; answered by [`RmaKind::CompareAndSwapResp`]).
    CompareAndSwap = 6,
    /// Data read by a GET (payload: `len` bytes).
    GetResp = 7,
    /// Old data returned by a GET_ACCUMULATE.
    GetAccumulateResp = 8,
    /// Old value returned by a FETCH_AND_OP.
    FetchAndOpResp = 9,
    /// Old value returned by a COMPARE_AND_SWAP.
    CompareAndSwapResp = 10,
    /// Lock request (flags carry `LOCK_SHARED` or `LOCK_EXCLUSIVE`).
    Lock = 11,
    /// Answer to a LOCK or to a lock piggybacked on an op (flags say granted,
    /// queued or discarded).
    LockAck = 12,
    /// Answer to an op that carried a LOCK and was performed at once.
    LockOpAck = 13,
    /// Release the lock (`UNLOCK_NO_ACK` suppresses the ACK).
    Unlock = 14,
    /// RMA_DONE: acknowledge when every earlier operation has been applied.
    Flush = 15,
    /// RMA_DONE_ACK / UNLOCK_ACK.
    Ack = 16,
    /// PSCW completion: decrement the target's access-completion counter.
    DecrAtCounter = 17,
    /// PSCW post: the target has exposed its window to this origin.
    Post = 18,
}

impl RmaKind {
    /// Every kind, in code order.
    pub const ALL: [RmaKind; 18] = [
        RmaKind::Put,
        RmaKind::Get,
        RmaKind::Accumulate,
        RmaKind::GetAccumulate,
        RmaKind::FetchAndOp,
        RmaKind::CompareAndSwap,
        RmaKind::GetResp,
        RmaKind::GetAccumulateResp,
        RmaKind::FetchAndOpResp,
        RmaKind::CompareAndSwapResp,
        RmaKind::Lock,
        RmaKind::LockAck,
        RmaKind::LockOpAck,
        RmaKind::Unlock,
        RmaKind::Flush,
        RmaKind::Ack,
        RmaKind::DecrAtCounter,
        RmaKind::Post,
    ];

    /// Payload bytes a packet of this kind carries for an operation of `len`
    /// bytes, or `None` if `2 * len` overflows.
    pub fn payload_len(self, len: u32) -> Option<usize> {
        let len = len as usize;
        match self {
            RmaKind::Put
            | RmaKind::Accumulate
            | RmaKind::GetAccumulate
            | RmaKind::FetchAndOp
            | RmaKind::GetResp
            | RmaKind::GetAccumulateResp
            | RmaKind::FetchAndOpResp
            | RmaKind::CompareAndSwapResp => Some(len),
            RmaKind::CompareAndSwap => len.checked_mul(2),
            RmaKind::Get
            | RmaKind::Lock
            | RmaKind::LockAck
            | RmaKind::LockOpAck
            | RmaKind::Unlock
            | RmaKind::Flush
            | RmaKind::Ack
            | RmaKind::DecrAtCounter
            | RmaKind::Post => Some(0),
        }
    }

    /// True for the operation kinds an origin issues (PUT .. COMPARE_AND_SWAP).
    pub fn is_op(self) -> bool {
        (self as u8) <= RmaKind::CompareAndSwap as u8
    }

    /// True for operations that read target memory and are answered by a
    /// response carrying data.
    pub fn is_read(self) -> bool {
        matches!(
            self,
            RmaKind::Get | RmaKind::GetAccumulate | RmaKind::FetchAndOp | RmaKind::CompareAndSwap
        )
    }
}

impl TryFrom<u8> for RmaKind {
    type Error = Error;

    /// Unknown kind bytes map to [`Error::UnknownCode`].
    fn try_from(b: u8) -> Result<Self, Error> {
        const WHAT: &str = "packet kind";
        RmaKind::ALL
            .iter()
            .copied()
            .find(|k| *k as u8 == b)
            .ok_or(Error::UnknownCode {
                what: WHAT,
                code: b,
            })
    }
}

/// The OR-able flag bits of an RMA packet (MPICH's `MPIDI_CH3_PKT_FLAG_RMA_*`
/// values). Unknown bits are carried through unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RmaFlags(pub u16);

impl RmaFlags {
    /// No flag.
    pub const NONE: RmaFlags = RmaFlags(0);
    /// Acquire a shared lock before performing the op (piggybacked LOCK).
    pub const LOCK_SHARED: RmaFlags = RmaFlags(1);
    /// Acquire an exclusive lock before performing the op.
    pub const LOCK_EXCLUSIVE: RmaFlags = RmaFlags(2);
    /// Release the lock after the op (piggybacked UNLOCK).
    pub const UNLOCK: RmaFlags = RmaFlags(4);
    /// RMA_DONE: acknowledge once this and every earlier op is applied.
    pub const FLUSH: RmaFlags = RmaFlags(8);
    /// Reserved (MPICH defines it and never uses it).
    pub const REQ_ACK: RmaFlags = RmaFlags(16);
    /// Decrement the PSCW access-completion counter after the op.
    pub const DECR_AT_COUNTER: RmaFlags = RmaFlags(32);
    /// Reserved (MPICH defines it; MODE_NOCHECK is purely origin-side).
    pub const NOCHECK: RmaFlags = RmaFlags(64);
    /// This response also acknowledges a FLUSH/UNLOCK (RMA_DONE_ACK).
    pub const ACK: RmaFlags = RmaFlags(128);
    /// The lock was granted.
    pub const LOCK_GRANTED: RmaFlags = RmaFlags(256);
    /// The lock request was queued with its data.
    pub const LOCK_QUEUED_DATA_QUEUED: RmaFlags = RmaFlags(512);
    /// The lock request was queued but its data dropped: resend the op after
    /// the grant.
    pub const LOCK_QUEUED_DATA_DISCARDED: RmaFlags = RmaFlags(1024);
    /// No lock-queue entry was free: resend the lock request.
    pub const LOCK_DISCARDED: RmaFlags = RmaFlags(2048);
    /// Do not acknowledge this UNLOCK.
    pub const UNLOCK_NO_ACK: RmaFlags = RmaFlags(4096);
    /// Ask for the response inline (transport hint).
    pub const IMMED_RESP: RmaFlags = RmaFlags(8192);
    /// Part of a streamed accumulate (transport hint).
    pub const STREAM: RmaFlags = RmaFlags(16384);

    /// True if every bit of `other` is set in `self`.
    pub const fn contains(self, other: RmaFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if any bit of `other` is set in `self`.
    pub const fn intersects(self, other: RmaFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// `self` with the bits of `other` cleared.
    pub const fn without(self, other: RmaFlags) -> RmaFlags {
        RmaFlags(self.0 & !other.0)
    }
}

impl core::ops::BitOr for RmaFlags {
    type Output = RmaFlags;
    fn bitor(self, rhs: RmaFlags) -> RmaFlags {
        RmaFlags(self.0 | rhs.0)
    }
}

impl core::ops::BitOrAssign for RmaFlags {
    fn bitor_assign(&mut self, rhs: RmaFlags) {
        self.0 |= rhs.0;
    }
}

/// The reduction of an accumulate (MPI's predefined operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum AccOp {
    /// `MPI_REPLACE` (also what PUT/GET packets carry).
    #[default]
    Replace = 0,
    /// `MPI_SUM`.
    Sum = 1,
    /// `MPI_PROD`.
    Prod = 2,
    /// `MPI_MIN`.
    Min = 3,
    /// `MPI_MAX`.
    Max = 4,
    /// `MPI_BAND`.
    Band = 5,
    /// `MPI_BOR`.
    Bor = 6,
    /// `MPI_BXOR`.
    Bxor = 7,
    /// `MPI_LAND`.
    Land = 8,
    /// `MPI_LOR`.
    Lor = 9,
    /// `MPI_LXOR`.
    Lxor = 10,
    /// `MPI_NO_OP` (get-accumulate / fetch-and-op only).
    NoOp = 11,
}

impl AccOp {
    /// Every operation, in code order.
    pub const ALL: [AccOp; 12] = [
        AccOp::Replace,
        AccOp::Sum,
        AccOp::Prod,
        AccOp::Min,
        AccOp::Max,
        AccOp::Band,
        AccOp::Bor,
        AccOp::Bxor,
        AccOp::Land,
        AccOp::Lor,
        AccOp::Lxor,
        AccOp::NoOp,
    ];
}

impl TryFrom<u8> for AccOp {
    type Error = Error;

    /// Unknown operation bytes map to [`Error::UnknownCode`].
    fn try_from(b: u8) -> Result<Self, Error> {
        const WHAT: &str = "accumulate operation";
        AccOp::ALL
            .iter()
            .copied()
            .find(|k| *k as u8 == b)
            .ok_or(Error::UnknownCode {
                what: WHAT,
                code: b,
            })
    }
}

/// The predefined element type an accumulate works on (native byte order in
/// the payload, as MPI's homogeneous data representation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum ElemType {
    /// Plain bytes (`MPI_BYTE`): only REPLACE and NO_OP, plus bitwise ops.
    #[default]
    Byte = 0,
    /// `MPI_INT32_T`.
    I32 = 1,
    /// `MPI_INT64_T`.
    I64 = 2,
    /// `MPI_UINT32_T`.
    U32 = 3,
    /// `MPI_UINT64_T`.
    U64 = 4,
    /// `MPI_FLOAT`.
    F32 = 5,
    /// `MPI_DOUBLE`.
    F64 = 6,
}

impl ElemType {
    /// Every element type, in code order.
    pub const ALL: [ElemType; 7] = [
        ElemType::Byte,
        ElemType::I32,
        ElemType::I64,
        ElemType::U32,
        ElemType::U64,
        ElemType::F32,
        ElemType::F64,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            ElemType::Byte => 1,
            ElemType::I32 | ElemType::U32 | ElemType::F32 => 4,
            ElemType::I64 | ElemType::U64 | ElemType::F64 => 8,
        }
    }
}

impl TryFrom<u8> for ElemType {
    type Error = Error;

    /// Unknown type bytes map to [`Error::UnknownCode`].
    fn try_from(b: u8) -> Result<Self, Error> {
        const WHAT: &str = "element type";
        ElemType::ALL
            .iter()
            .copied()
            .find(|k| *k as u8 == b)
            .ok_or(Error::UnknownCode {
                what: WHAT,
                code: b,
            })
    }
}

/// The fixed 32-byte header of every RMA packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RmaHeader {
    /// What the packet is.
    pub kind: RmaKind,
    /// Reduction of an accumulate ([`AccOp::Replace`] for others).
    pub acc_op: AccOp,
    /// Piggybacked synchronization and replies.
    pub flags: RmaFlags,
    /// Window id (windows are created collectively, so ids agree).
    pub win: u32,
    /// The origin's operation id, echoed by responses and lock acks.
    pub op_id: u32,
    /// The origin's acknowledgement counter id, echoed by ACK.
    pub sync_id: u32,
    /// Target displacement in bytes.
    pub disp: u64,
    /// Operation size in bytes.
    pub len: u32,
    /// Element type of an accumulate.
    pub elem: ElemType,
    /// Bytes 29..32, carried through unchanged.
    pub reserved: [u8; 3],
}

impl RmaHeader {
    /// Encoded size: 32 bytes.
    pub const LEN: usize = 32;

    /// A header of `kind` for window `win`; every other field zero.
    pub const fn new(kind: RmaKind, win: u32) -> Self {
        RmaHeader {
            kind,
            acc_op: AccOp::Replace,
            flags: RmaFlags::NONE,
            win,
            op_id: 0,
            sync_id: 0,
            disp: 0,
            len: 0,
            elem: ElemType::Byte,
            reserved: [0; 3],
        }
    }

    /// Sets the flags.
    pub const fn with_flags(mut self, flags: RmaFlags) -> Self {
        self.flags = flags;
        self
    }

    /// Sets displacement and length.
    pub const fn with_target(mut self, disp: u64, len: u32) -> Self {
        self.disp = disp;
        self.len = len;
        self
    }

    /// Sets operation and acknowledgement ids.
    pub const fn with_ids(mut self, op_id: u32, sync_id: u32) -> Self {
        self.op_id = op_id;
        self.sync_id = sync_id;
        self
    }

    /// Sets the accumulate operation and element type.
    pub const fn with_acc(mut self, acc_op: AccOp, elem: ElemType) -> Self {
        self.acc_op = acc_op;
        self.elem = elem;
        self
    }

    /// The 32 wire bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = self.kind as u8;
        b[1] = self.acc_op as u8;
        b[2..4].copy_from_slice(&self.flags.0.to_be_bytes());
        b[4..8].copy_from_slice(&self.win.to_be_bytes());
        b[8..12].copy_from_slice(&self.op_id.to_be_bytes());
        b[12..16].copy_from_slice(&self.sync_id.to_be_bytes());
        b[16..24].copy_from_slice(&self.disp.to_be_bytes());
        b[24..28].copy_from_slice(&self.len.to_be_bytes());
        b[28] = self.elem as u8;
        b[29..32].copy_from_slice(&self.reserved);
        b
    }

    /// Parses the 32 wire bytes.
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Result<Self, Error> {
        let [k, a, f0, f1, w0, w1, w2, w3, o0, o1, o2, o3, s0, s1, s2, s3, d0, d1, d2, d3, d4, d5, d6, d7, l0, l1, l2, l3, e, r0, r1, r2] =
            *b;
        Ok(RmaHeader {
            kind: RmaKind::try_from(k)?,
            acc_op: AccOp::try_from(a)?,
            flags: RmaFlags(u16::from_be_bytes([f0, f1])),
            win: u32::from_be_bytes([w0, w1, w2, w3]),
            op_id: u32::from_be_bytes([o0, o1, o2, o3]),
            sync_id: u32::from_be_bytes([s0, s1, s2, s3]),
            disp: u64::from_be_bytes([d0, d1, d2, d3, d4, d5, d6, d7]),
            len: u32::from_be_bytes([l0, l1, l2, l3]),
            elem: ElemType::try_from(e)?,
            reserved: [r0, r1, r2],
        })
    }

    /// Writes the header at the start of `dst`; returns the bytes written (32).
    pub fn encode(&self, dst: &mut [u8]) -> Result<usize, Error> {
        fixed::write(dst, "RMA header", self.to_bytes())
    }

    /// Reads a header from the start of `src` (extra bytes are left alone).
    pub fn decode(src: &[u8]) -> Result<Self, Error> {
        Self::from_bytes(fixed::read(src, "RMA header")?)
    }

    /// Payload bytes this header announces (see [`RmaKind::payload_len`]).
    pub fn payload_len(&self) -> Result<usize, Error> {
        self.kind.payload_len(self.len).ok_or(Error::BadLength {
            what: "RMA payload",
            expected: usize::MAX,
            got: self.len as usize,
        })
    }
}

/// A whole RMA packet: header and the payload it announces, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmaPacket<'a> {
    /// The header.
    pub header: RmaHeader,
    /// Exactly [`RmaHeader::payload_len`] bytes.
    pub payload: &'a [u8],
}

impl<'a> RmaPacket<'a> {
    /// Encoded size of this packet.
    pub fn len(&self) -> usize {
        RmaHeader::LEN + self.payload.len()
    }

    /// Always false: a packet has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes header and payload into `dst`; returns the bytes written.
    ///
    /// Fails with [`Error::BadLength`] if the payload does not have the length
    /// the header announces, and [`Error::BufferTooSmall`] if `dst` is short.
    pub fn encode(&self, dst: &mut [u8]) -> Result<usize, Error> {
        let want = self.header.payload_len()?;
        if want != self.payload.len() {
            return Err(Error::BadLength {
                what: "RMA payload",
                expected: want,
                got: self.payload.len(),
            });
        }
        let need = RmaHeader::LEN + want;
        let got = dst.len();
        let out = dst.get_mut(..need).ok_or(Error::BufferTooSmall {
            what: "RMA packet",
            need,
            got,
        })?;
        let (h, p) = out.split_at_mut(RmaHeader::LEN);
        h.copy_from_slice(&self.header.to_bytes());
        p.copy_from_slice(self.payload);
        Ok(need)
    }

    /// Parses a whole packet: `src` must be exactly header plus announced
    /// payload ([`Error::Truncated`] if shorter, [`Error::BadLength`] if longer).
    pub fn decode(src: &'a [u8]) -> Result<Self, Error> {
        let header = RmaHeader::decode(src)?;
        let want = header.payload_len()?;
        let rest = src.get(RmaHeader::LEN..).unwrap_or(&[]);
        if rest.len() < want {
            return Err(Error::Truncated {
                what: "RMA payload",
                need: want,
                got: rest.len(),
            });
        }
        if rest.len() > want {
            return Err(Error::BadLength {
                what: "RMA packet",
                expected: RmaHeader::LEN.saturating_add(want),
                got: src.len(),
            });
        }
        Ok(RmaPacket {
            header,
            payload: rest,
        })
    }
}
