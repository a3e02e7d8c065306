//! The two fixed headers of rdma-core's tag matching: TMH and RVH.
//!
//! Layouts are those of `struct ibv_tmh` and `struct ibv_rvh` in rdma-core's
//! `infiniband/tm_types.h`; multi-byte fields are big-endian on the wire
//! (`htobe32`/`htobe64`), because the mlx5 provider converts the tag of a list
//! ADD with `htobe64` and compares it with the bytes of the message.
//!
//! ```text
//! TMH (16 bytes)                         RVH (16 bytes, right after a TMH)
//!  0        1        4         8      16   0          8        12       16
//!  +--------+--------+---------+-------+   +----------+--------+--------+
//!  | opcode |reserved| app_ctx |  tag  |   |    va    |  rkey  |  len   |
//!  |   u8   | 3 bytes| be32    | be64  |   |   be64   |  be32  |  be32  |
//!  +--------+--------+---------+-------+   +----------+--------+--------+
//! ```

use crate::{fixed, Error};

/// `enum ibv_tmh_op`: what a tag-matching message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Opcode {
    /// `IBV_TMH_NO_TAG`: an untagged message, delivered whole to an SRQ buffer.
    NoTag = 0,
    /// `IBV_TMH_RNDV`: a rendezvous request (TMH | RVH | metadata).
    Rndv = 1,
    /// `IBV_TMH_FIN`: rendezvous completion (TMH | RVH copy).
    Fin = 2,
    /// `IBV_TMH_EAGER`: an eager message (TMH | payload).
    Eager = 3,
}

impl TryFrom<u8> for Opcode {
    type Error = Error;

    fn try_from(b: u8) -> Result<Self, Error> {
        Ok(match b {
            0 => Opcode::NoTag,
            1 => Opcode::Rndv,
            2 => Opcode::Fin,
            3 => Opcode::Eager,
            other => return Err(Error::UnknownOpcode(other)),
        })
    }
}

/// Tag Matching Header, `struct ibv_tmh`: 16 bytes at the start of every tagged
/// message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tmh {
    /// What the message is.
    pub opcode: Opcode,
    /// Bytes 1..4. rdma-core says "must be zero" but matching ignores them; UCX
    /// keeps private data here, and a FIN copies them from its request, so they
    /// are carried through unchanged rather than rejected.
    pub reserved: [u8; 3],
    /// Opaque 32-bit context, reported to the receiver as `ibv_wc_tm_info.priv`.
    pub app_ctx: u32,
    /// The 64-bit tag the receiver matches on (see [`crate::TagLayout`]).
    pub tag: u64,
}

impl Tmh {
    /// Encoded size: 16 bytes.
    pub const LEN: usize = 16;

    /// A header with zero reserved bytes.
    pub const fn new(opcode: Opcode, app_ctx: u32, tag: u64) -> Self {
        Tmh {
            opcode,
            reserved: [0; 3],
            app_ctx,
            tag,
        }
    }

    /// The FIN header that answers this rendezvous request: same `reserved`,
    /// `app_ctx` and `tag`, opcode FIN.
    pub const fn fin_reply(&self) -> Self {
        Tmh {
            opcode: Opcode::Fin,
            ..*self
        }
    }

    /// The 16 wire bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = self.opcode as u8;
        b[1..4].copy_from_slice(&self.reserved);
        b[4..8].copy_from_slice(&self.app_ctx.to_be_bytes());
        b[8..16].copy_from_slice(&self.tag.to_be_bytes());
        b
    }

    /// Parses the 16 wire bytes.
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Result<Self, Error> {
        let [op, r0, r1, r2, c0, c1, c2, c3, t0, t1, t2, t3, t4, t5, t6, t7] = *b;
        Ok(Tmh {
            opcode: Opcode::try_from(op)?,
            reserved: [r0, r1, r2],
            app_ctx: u32::from_be_bytes([c0, c1, c2, c3]),
            tag: u64::from_be_bytes([t0, t1, t2, t3, t4, t5, t6, t7]),
        })
    }

    /// Writes the header at the start of `dst`; returns the bytes written (16).
    pub fn encode(&self, dst: &mut [u8]) -> Result<usize, Error> {
        fixed::write(dst, "TMH", self.to_bytes())
    }

    /// Reads a header from the start of `src` (extra bytes are left alone).
    pub fn decode(src: &[u8]) -> Result<Self, Error> {
        Self::from_bytes(fixed::read(src, "TMH")?)
    }
}

/// Rendezvous Header, `struct ibv_rvh`: where the receiver must RDMA-read the
/// data from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rvh {
    /// Address of the sender's buffer.
    pub va: u64,
    /// Remote key of the sender's memory region (needs REMOTE_READ access).
    pub rkey: u32,
    /// Number of bytes the receiver must read.
    pub len: u32,
}

impl Rvh {
    /// Encoded size: 16 bytes.
    pub const LEN: usize = 16;

    /// The 16 wire bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..16].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Parses the 16 wire bytes (every bit pattern is a valid RVH).
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Self {
        let [v0, v1, v2, v3, v4, v5, v6, v7, k0, k1, k2, k3, l0, l1, l2, l3] = *b;
        Rvh {
            va: u64::from_be_bytes([v0, v1, v2, v3, v4, v5, v6, v7]),
            rkey: u32::from_be_bytes([k0, k1, k2, k3]),
            len: u32::from_be_bytes([l0, l1, l2, l3]),
        }
    }

    /// Writes the header at the start of `dst`; returns the bytes written (16).
    pub fn encode(&self, dst: &mut [u8]) -> Result<usize, Error> {
        fixed::write(dst, "RVH", self.to_bytes())
    }

    /// Reads a header from the start of `src`.
    pub fn decode(src: &[u8]) -> Result<Self, Error> {
        Ok(Self::from_bytes(fixed::read(src, "RVH")?))
    }
}
