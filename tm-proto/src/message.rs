//! Whole tag-matching messages: the four kinds a TM-SRQ distinguishes.
//!
//! | kind | layout | constraint |
//! |---|---|---|
//! | eager | `TMH(EAGER) \| payload` | at least 16 bytes |
//! | rendezvous request | `TMH(RNDV) \| RVH \| metadata` | total ≤ `max_rndv_hdr_size` |
//! | FIN | `TMH(FIN) \| RVH copy` | exactly 32 bytes |
//! | no-tag | `0 \| anything` | at least 1 byte; the rest is opaque |
//!
//! Decoding borrows from the input (no copy); encoding writes into a caller's
//! buffer. A sender that wants to build an eager message in place writes the
//! [`Tmh`] with [`Tmh::encode`] and the payload after [`Tmh::LEN`] itself.

use crate::{Error, Opcode, Rvh, Tmh};

/// Receiver limits that decoding and encoding must respect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest rendezvous request, whole message (`tm_caps.max_rndv_hdr_size`).
    pub max_rndv_hdr_size: usize,
}

impl Limits {
    /// The mlx5 value: `MLX5_TM_MAX_RNDV_MSG_SIZE` = 64 bytes.
    pub const MLX5: Limits = Limits {
        max_rndv_hdr_size: 64,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::MLX5
    }
}

/// A decoded (or to-be-encoded) tag-matching message, borrowing its variable
/// part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// `TMH(EAGER) | payload`.
    Eager {
        /// The header; `tmh.opcode` must be [`Opcode::Eager`] to encode.
        tmh: Tmh,
        /// The user data.
        payload: &'a [u8],
    },
    /// `TMH(RNDV) | RVH | metadata`.
    Rndv {
        /// The header; `tmh.opcode` must be [`Opcode::Rndv`] to encode.
        tmh: Tmh,
        /// Where the data is.
        rvh: Rvh,
        /// Optional metadata, read by software only when the request arrives
        /// unexpected.
        metadata: &'a [u8],
    },
    /// `TMH(FIN) | RVH`: the rendezvous is complete; the sender may free its
    /// buffer.
    Fin {
        /// The header; copied from the request with opcode FIN.
        tmh: Tmh,
        /// The request's RVH, copied.
        rvh: Rvh,
    },
    /// `0 | body`: an untagged message. The body is opaque.
    NoTag {
        /// Everything after the opcode byte.
        body: &'a [u8],
    },
}

/// Length of a FIN message.
pub const FIN_LEN: usize = Tmh::LEN + Rvh::LEN;

fn check_opcode(tmh: &Tmh, want: Opcode) -> Result<(), Error> {
    if tmh.opcode == want {
        Ok(())
    } else {
        Err(Error::OpcodeMismatch {
            expected: want,
            got: tmh.opcode,
        })
    }
}

impl<'a> Message<'a> {
    /// The FIN a receiver sends back for a rendezvous request.
    pub fn fin_for(request_tmh: &Tmh, rvh: Rvh) -> Message<'static> {
        Message::Fin {
            tmh: request_tmh.fin_reply(),
            rvh,
        }
    }

    /// The opcode this message carries.
    pub fn opcode(&self) -> Opcode {
        match self {
            Message::Eager { .. } => Opcode::Eager,
            Message::Rndv { .. } => Opcode::Rndv,
            Message::Fin { .. } => Opcode::Fin,
            Message::NoTag { .. } => Opcode::NoTag,
        }
    }

    /// The TMH, for the tagged kinds.
    pub fn tmh(&self) -> Option<&Tmh> {
        match self {
            Message::Eager { tmh, .. } | Message::Rndv { tmh, .. } | Message::Fin { tmh, .. } => {
                Some(tmh)
            }
            Message::NoTag { .. } => None,
        }
    }

    /// Bytes [`Message::encode`] writes.
    pub fn encoded_len(&self) -> usize {
        match self {
            Message::Eager { payload, .. } => Tmh::LEN + payload.len(),
            Message::Rndv { metadata, .. } => Tmh::LEN + Rvh::LEN + metadata.len(),
            Message::Fin { .. } => FIN_LEN,
            Message::NoTag { body } => 1 + body.len(),
        }
    }

    /// Writes the message at the start of `dst`; returns the bytes written.
    ///
    /// Fails if `dst` is too small, if a rendezvous request would exceed
    /// `limits.max_rndv_hdr_size`, or if a header's opcode disagrees with the
    /// message kind.
    pub fn encode(&self, dst: &mut [u8], limits: Limits) -> Result<usize, Error> {
        let need = self.encoded_len();
        if let Message::Rndv { .. } = self {
            if need > limits.max_rndv_hdr_size {
                return Err(Error::HeaderTooLong {
                    len: need,
                    max: limits.max_rndv_hdr_size,
                });
            }
        }
        let got = dst.len();
        let out = dst.get_mut(..need).ok_or(Error::BufferTooSmall {
            what: "message",
            need,
            got,
        })?;
        match self {
            Message::Eager { tmh, payload } => {
                check_opcode(tmh, Opcode::Eager)?;
                let (h, rest) = out.split_at_mut(Tmh::LEN);
                tmh.encode(h)?;
                rest.copy_from_slice(payload);
            }
            Message::Rndv { tmh, rvh, metadata } => {
                check_opcode(tmh, Opcode::Rndv)?;
                let (h, rest) = out.split_at_mut(Tmh::LEN);
                tmh.encode(h)?;
                let (r, meta) = rest.split_at_mut(Rvh::LEN);
                rvh.encode(r)?;
                meta.copy_from_slice(metadata);
            }
            Message::Fin { tmh, rvh } => {
                check_opcode(tmh, Opcode::Fin)?;
                let (h, r) = out.split_at_mut(Tmh::LEN);
                tmh.encode(h)?;
                rvh.encode(r)?;
            }
            Message::NoTag { body } => {
                let (op, rest) = out.split_at_mut(1);
                op[0] = Opcode::NoTag as u8;
                rest.copy_from_slice(body);
            }
        }
        Ok(need)
    }

    /// Parses a whole received message. Never panics; borrows from `src`.
    pub fn decode(src: &'a [u8], limits: Limits) -> Result<Self, Error> {
        let first = *src.first().ok_or(Error::Truncated {
            what: "message",
            need: 1,
            got: 0,
        })?;
        match Opcode::try_from(first)? {
            Opcode::NoTag => Ok(Message::NoTag { body: &src[1..] }),
            Opcode::Eager => {
                let tmh = Tmh::decode(src)?;
                Ok(Message::Eager {
                    tmh,
                    payload: &src[Tmh::LEN..],
                })
            }
            Opcode::Rndv => {
                if src.len() > limits.max_rndv_hdr_size {
                    return Err(Error::HeaderTooLong {
                        len: src.len(),
                        max: limits.max_rndv_hdr_size,
                    });
                }
                if src.len() < Tmh::LEN + Rvh::LEN {
                    return Err(Error::Truncated {
                        what: "rendezvous request",
                        need: Tmh::LEN + Rvh::LEN,
                        got: src.len(),
                    });
                }
                let tmh = Tmh::decode(src)?;
                let rvh = Rvh::decode(&src[Tmh::LEN..])?;
                Ok(Message::Rndv {
                    tmh,
                    rvh,
                    metadata: &src[Tmh::LEN + Rvh::LEN..],
                })
            }
            Opcode::Fin => {
                if src.len() < FIN_LEN {
                    return Err(Error::Truncated {
                        what: "FIN",
                        need: FIN_LEN,
                        got: src.len(),
                    });
                }
                if src.len() > FIN_LEN {
                    return Err(Error::BadLength {
                        what: "FIN",
                        expected: FIN_LEN,
                        got: src.len(),
                    });
                }
                Ok(Message::Fin {
                    tmh: Tmh::decode(src)?,
                    rvh: Rvh::decode(&src[Tmh::LEN..])?,
                })
            }
        }
    }
}
