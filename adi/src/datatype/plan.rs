//! The paper's plan for sending non-contiguous data (§4.2), as a pure
//! function.
//!
//! "A three-case implementation may be most appropriate: small amounts of
//! data in the envelope, modest amounts in an allocated buffer, and large
//! amounts sent in multiple parts." Contiguous data never needs packing and
//! goes to the contiguous routines, which choose their own protocol.
//!
//! | case | when | what the sender does |
//! |---|---|---|
//! | [`SendPlan::Contiguous`] | the data is one range of the user buffer | send that range as is |
//! | [`SendPlan::Envelope`] | packed size ≤ [`PlanLimits::envelope_max`] | pack into the envelope's inline data |
//! | [`SendPlan::Packed`] | ≤ [`PlanLimits::packed_max`] | pack into one buffer, then send it as contiguous data |
//! | [`SendPlan::Pipelined`] | larger | pack and send parts of [`PlanLimits::part_size`] bytes one after another ([`Datatype::pack_part`]) so that at most one part is buffered at a time |
//!
//! The receiver needs no plan: it unpacks whatever arrives at its stream
//! offset with [`Datatype::unpack_part`].
//!
//! The default thresholds ([`PlanLimits::DEFAULT`]) are provisional: the
//! envelope size depends on the transport's header slots and the part size
//! on its bandwidth, so the composition measures them and passes its own.

use super::Datatype;
use crate::Error;

/// Thresholds of the three-case plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanLimits {
    /// Largest packed size carried in the envelope itself.
    pub envelope_max: usize,
    /// Largest packed size packed into one buffer; larger data is pipelined.
    pub packed_max: usize,
    /// Size of each pipelined part (the last may be shorter). Must be > 0.
    pub part_size: usize,
}

impl PlanLimits {
    /// Provisional defaults: 256 B in the envelope, up to 256 KiB in one
    /// buffer, then parts of 64 KiB.
    pub const DEFAULT: PlanLimits = PlanLimits {
        envelope_max: 256,
        packed_max: 256 * 1024,
        part_size: 64 * 1024,
    };
}

impl Default for PlanLimits {
    fn default() -> Self {
        PlanLimits::DEFAULT
    }
}

/// How to send `count` elements of a datatype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendPlan {
    /// The data is bytes `start..start + len` of the user buffer: no packing.
    Contiguous {
        /// First byte, relative to the buffer (never negative once the
        /// buffer has been checked).
        start: isize,
        /// Length in bytes.
        len: usize,
    },
    /// Pack all `len` bytes into the envelope.
    Envelope {
        /// Packed size.
        len: usize,
    },
    /// Pack all `len` bytes into one buffer and send it as contiguous data.
    Packed {
        /// Packed size.
        len: usize,
    },
    /// Send the packed stream in parts of `part_size` bytes.
    Pipelined {
        /// Packed size.
        len: usize,
        /// Bytes per part (the last part may be shorter).
        part_size: usize,
    },
}

/// One part of a pipelined send: packed bytes `offset..offset + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Offset in the packed stream.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

/// Iterator over the parts of a plan; see [`SendPlan::parts`].
#[derive(Debug, Clone)]
pub struct Parts {
    next: usize,
    len: usize,
    part_size: usize,
}

impl Iterator for Parts {
    type Item = Part;

    fn next(&mut self) -> Option<Part> {
        if self.next >= self.len {
            return None;
        }
        let len = self.part_size.min(self.len - self.next);
        let part = Part {
            offset: self.next,
            len,
        };
        self.next += len;
        Some(part)
    }
}

impl SendPlan {
    /// Bytes of message data.
    pub fn len(&self) -> usize {
        match *self {
            SendPlan::Contiguous { len, .. }
            | SendPlan::Envelope { len }
            | SendPlan::Packed { len }
            | SendPlan::Pipelined { len, .. } => len,
        }
    }

    /// `true` for a message without data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The parts in packed-stream order: one part for every case but
    /// [`SendPlan::Pipelined`]; none for an empty message.
    pub fn parts(&self) -> Parts {
        let len = self.len();
        let part_size = match *self {
            SendPlan::Pipelined { part_size, .. } => part_size,
            _ => len,
        };
        Parts {
            next: 0,
            len,
            part_size,
        }
    }
}

/// Chooses how to send `count` elements of `datatype` (committed) under
/// `limits`. Pure: no buffer is touched (the send checks its buffer with the
/// pack call).
pub fn plan_send(datatype: &Datatype, count: i64, limits: &PlanLimits) -> Result<SendPlan, Error> {
    if limits.part_size == 0 {
        return Err(Error::InvalidArgument {
            what: "plan part size is zero",
        });
    }
    if let Some((start, len)) = datatype.contiguous_range(count)? {
        return Ok(SendPlan::Contiguous { start, len });
    }
    let len = datatype.pack_size(count)?;
    let plan = if len <= limits.envelope_max {
        SendPlan::Envelope { len }
    } else if len <= limits.packed_max {
        SendPlan::Packed { len }
    } else {
        SendPlan::Pipelined {
            len,
            part_size: limits.part_size,
        }
    };
    tracing::debug!(?plan, count, "non-contiguous send plan");
    Ok(plan)
}
