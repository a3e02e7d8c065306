//! The frames between two connected QPs of the software device: owned
//! (queued for a peer, or held while the device cannot take them) and
//! borrowed (parsed in place from a driver's receive buffer).

use crate::verbs::{CqId, Wc, WcStatus};

/// What travels between two connected QPs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// SEND or SEND_WITH_IMM.
    Send { imm: Option<u32>, data: Vec<u8> },
    /// An RDMA READ request.
    ReadReq {
        id: u64,
        va: u64,
        rkey: u32,
        len: u32,
    },
    /// The answer to a READ: the data, or an error status.
    ReadResp {
        id: u64,
        status: WcStatus,
        data: Vec<u8>,
    },
}

impl Frame {
    /// The frame's borrowed view, as [`Nic::receive`] takes it.
    pub(crate) fn as_ref(&self) -> FrameRef<'_> {
        match self {
            Frame::Send { imm, data } => FrameRef::Send { imm: *imm, data },
            Frame::ReadReq { id, va, rkey, len } => FrameRef::ReadReq {
                id: *id,
                va: *va,
                rkey: *rkey,
                len: *len,
            },
            Frame::ReadResp { id, status, data } => FrameRef::ReadResp {
                id: *id,
                status: *status,
                data,
            },
        }
    }
}

/// An arriving frame, borrowed from where it was received (a connection's
/// receive buffer, parsed in place): the device copies the payload once,
/// into the memory it lands in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameRef<'a> {
    /// SEND or SEND_WITH_IMM.
    Send { imm: Option<u32>, data: &'a [u8] },
    /// An RDMA READ request.
    ReadReq {
        id: u64,
        va: u64,
        rkey: u32,
        len: u32,
    },
    /// The answer to a READ.
    ReadResp {
        id: u64,
        status: WcStatus,
        data: &'a [u8],
    },
}

impl FrameRef<'_> {
    /// An owned copy (a frame that must wait: RNR).
    pub(crate) fn to_owned(self) -> Frame {
        match self {
            FrameRef::Send { imm, data } => Frame::Send {
                imm,
                data: data.to_vec(),
            },
            FrameRef::ReadReq { id, va, rkey, len } => Frame::ReadReq { id, va, rkey, len },
            FrameRef::ReadResp { id, status, data } => Frame::ReadResp {
                id,
                status,
                data: data.to_vec(),
            },
        }
    }
}

/// Bytes `off..off + len` of memory region `mr` (with key `key`): the data
/// of a READ response that the driver writes to the wire straight from the
/// responder's region ([`Nic::set_in_place_reads`](super::Nic::set_in_place_reads)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RegionRef {
    pub(crate) mr: u32,
    pub(crate) key: u32,
    pub(crate) off: usize,
    pub(crate) len: usize,
}

/// What the device queues for a peer: a frame, or a successful READ
/// response whose data is still in the responder's region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outgoing {
    Frame(Frame),
    ReadResp {
        id: u64,
        data: RegionRef,
    },
    /// A SEND whose payload is still in the sender's region
    /// ([`Nic::set_in_place_sends`](super::Nic::set_in_place_sends)): its
    /// completion, if signaled, is `done`, delivered by
    /// [`Nic::complete_send`](super::Nic::complete_send) once the payload
    /// has left (the region may be reused only then, as on a NIC).
    Send {
        imm: Option<u32>,
        data: RegionRef,
        done: Option<(CqId, Wc)>,
    },
}

/// The device cannot take an arriving SEND yet (no SRQ buffer: RNR);
/// nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rnr;
