//! The framing of [`super::Live`]'s TCP connections.
//!
//! Every frame is a 24-byte header and a payload:
//!
//! ```text
//!  0      1        4       8               16      20       24
//!  +------+--------+-------+---------------+-------+--------+---------
//!  | kind | zero   |   a   |       b       |   c   |  len   | payload
//!  |  u8  | 3 bytes| u32   |      u64      |  u32  |  u32   | len bytes
//!  +------+--------+-------+---------------+-------+--------+---------
//! ```
//!
//! little-endian, with `a`, `b`, `c` by kind:
//!
//! | kind | a | b | c | payload |
//! |---|---|---|---|---|
//! | 1 `SEND` | 0 | 0 | 0 | the message |
//! | 2 `SEND_IMM` | immediate | 0 | 0 | the message |
//! | 3 `READ_REQ` | rkey | request id | length | address (8 bytes) |
//! | 4 `READ_RESP` | `ibv_wc_status` | request id | 0 | the data |
//! | 5 `HELLO` | magic `TMXV` | job id | rank | version, source QPN, destination QPN (3 × u32) |
//! | 6 `HELLO_ACK` | 0 accepted, else refused | job id | rank | the acceptor's QPN (u32) |
//! | 7 `CLOSE` | 0 | 0 | 0 | empty: an orderly close |
//!
//! Each kind caps its payload ([`max_payload`]), checked on the header
//! before any of the payload is buffered: a `SEND` carries at most the
//! largest eager limit (1 GiB) and its header, a `READ_RESP` at most the
//! length its READ asked for (checked by the device, [`super::Live`]), and
//! the control frames their exact sizes. A frame over its cap is a
//! [`FrameError`] and fails the connection.

use super::nic::{Frame, FrameRef};
use crate::verbs::WcStatus;

pub(crate) const HDR: usize = 24;
/// The largest `SEND` payload: the largest eager limit
/// (`TMX_VERBS_EAGER_MAX`, 1 GiB) and a TM header.
pub(crate) const MAX_SEND: usize = (1 << 30) + 64;
/// The largest `READ_RESP` payload (a rendezvous READ is at most
/// 4 GiB - 1 by the RVH); the device also caps it at the READ's length.
pub(crate) const MAX_READ: usize = u32::MAX as usize;
pub(crate) const MAGIC: u32 = u32::from_le_bytes(*b"TMXV");
pub(crate) const VERSION: u32 = 1;

const SEND: u8 = 1;
const SEND_IMM: u8 = 2;
const READ_REQ: u8 = 3;
const READ_RESP: u8 = 4;
const HELLO: u8 = 5;
const HELLO_ACK: u8 = 6;
const CLOSE: u8 = 7;

/// A frame from a peer that breaks the wire protocol: the connection
/// fails with it (its QP goes to the error state naming it), and
/// [`super::Live::frame_errors`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The header names no frame kind.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// The payload announced is over the kind's cap.
    #[error("{kind} frame of {len} bytes over its limit of {max}")]
    TooLarge {
        /// The frame kind (`SEND`, `READ_RESP`, ...).
        kind: &'static str,
        /// The length announced.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// A fixed-size frame of another size.
    #[error("{kind} frame of {len} bytes, expected {expected}")]
    BadSize {
        /// The frame kind.
        kind: &'static str,
        /// The length announced.
        len: usize,
        /// Its size.
        expected: usize,
    },
    /// Fewer bytes than the header and its payload.
    #[error("truncated frame")]
    Truncated,
    /// A `HELLO` without the magic number.
    #[error("not a verbs-tm handshake")]
    NotHandshake,
}

/// The name of frame kind `kind`, `None` if there is no such kind.
pub(crate) fn kind_name(kind: u8) -> Option<&'static str> {
    Some(match kind {
        SEND => "SEND",
        SEND_IMM => "SEND_IMM",
        READ_REQ => "READ_REQ",
        READ_RESP => "READ_RESP",
        HELLO => "HELLO",
        HELLO_ACK => "HELLO_ACK",
        CLOSE => "CLOSE",
        _ => return None,
    })
}

/// The payload cap of frame kind `kind`, and whether it is the exact size.
pub(crate) fn max_payload(kind: u8) -> Result<(usize, bool), FrameError> {
    Ok(match kind {
        SEND | SEND_IMM => (MAX_SEND, false),
        READ_RESP => (MAX_READ, false),
        READ_REQ => (8, true),
        HELLO => (12, true),
        HELLO_ACK => (4, true),
        CLOSE => (0, true),
        k => return Err(FrameError::UnknownKind(k)),
    })
}

/// Checks a complete header (`hdr` holds at least [`HDR`] bytes) against
/// its kind's cap; the payload length.
pub(crate) fn check_header(hdr: &[u8]) -> Result<usize, FrameError> {
    let len = payload_len(hdr);
    let (max, exact) = max_payload(hdr[0])?;
    let kind = kind_name(hdr[0]).unwrap_or("?");
    if exact && len != max {
        return Err(FrameError::BadSize {
            kind,
            len,
            expected: max,
        });
    }
    if len > max {
        return Err(FrameError::TooLarge { kind, len, max });
    }
    Ok(len)
}

/// A frame on a connection: a device frame or connection control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wire {
    Dev(Frame),
    Hello {
        job: u64,
        rank: u32,
        src_qpn: u32,
        dst_qpn: u32,
        version: u32,
    },
    HelloAck {
        refused: u32,
        job: u64,
        rank: u32,
        qpn: u32,
    },
    Close,
}

/// A frame decoded in place: device frames borrow their payload from the
/// receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireRef<'a> {
    Dev(FrameRef<'a>),
    Hello {
        job: u64,
        rank: u32,
        src_qpn: u32,
        dst_qpn: u32,
        version: u32,
    },
    HelloAck {
        refused: u32,
        job: u64,
        rank: u32,
        qpn: u32,
    },
    Close,
}

impl WireRef<'_> {
    /// An owned copy.
    pub(crate) fn to_owned(self) -> Wire {
        match self {
            WireRef::Dev(f) => Wire::Dev(f.to_owned()),
            WireRef::Hello {
                job,
                rank,
                src_qpn,
                dst_qpn,
                version,
            } => Wire::Hello {
                job,
                rank,
                src_qpn,
                dst_qpn,
                version,
            },
            WireRef::HelloAck {
                refused,
                job,
                rank,
                qpn,
            } => Wire::HelloAck {
                refused,
                job,
                rank,
                qpn,
            },
            WireRef::Close => Wire::Close,
        }
    }
}

fn header(kind: u8, a: u32, b: u64, c: u32, len: usize) -> [u8; HDR] {
    let mut h = [0u8; HDR];
    h[0] = kind;
    h[4..8].copy_from_slice(&a.to_le_bytes());
    h[8..16].copy_from_slice(&b.to_le_bytes());
    h[16..20].copy_from_slice(&c.to_le_bytes());
    h[20..24].copy_from_slice(&(len as u32).to_le_bytes());
    h
}

/// Encodes a frame as a header and a payload (kept apart, so that a large
/// payload is not copied again).
pub(crate) fn encode(w: Wire) -> ([u8; HDR], Vec<u8>) {
    let (h, p) = match w {
        Wire::Dev(Frame::Send { imm, data }) => match imm {
            Some(i) => (header(SEND_IMM, i, 0, 0, data.len()), data),
            None => (header(SEND, 0, 0, 0, data.len()), data),
        },
        Wire::Dev(Frame::ReadReq { id, va, rkey, len }) => (
            header(READ_REQ, rkey, id, len, 8),
            va.to_le_bytes().to_vec(),
        ),
        Wire::Dev(Frame::ReadResp { id, status, data }) => {
            (header(READ_RESP, status.0, id, 0, data.len()), data)
        }
        Wire::Hello {
            job,
            rank,
            src_qpn,
            dst_qpn,
            version,
        } => {
            let mut p = version.to_le_bytes().to_vec();
            p.extend_from_slice(&src_qpn.to_le_bytes());
            p.extend_from_slice(&dst_qpn.to_le_bytes());
            (header(HELLO, MAGIC, job, rank, p.len()), p)
        }
        Wire::HelloAck {
            refused,
            job,
            rank,
            qpn,
        } => (
            header(HELLO_ACK, refused, job, rank, 4),
            qpn.to_le_bytes().to_vec(),
        ),
        Wire::Close => (header(CLOSE, 0, 0, 0, 0), Vec::new()),
    };
    (h, p)
}

/// The header of a SEND (with `imm`: SEND_WITH_IMM) of `len` bytes (its
/// payload follows it on the wire, written from elsewhere).
pub(crate) fn send_header(imm: Option<u32>, len: usize) -> [u8; HDR] {
    match imm {
        Some(i) => header(SEND_IMM, i, 0, 0, len),
        None => header(SEND, 0, 0, 0, len),
    }
}

/// The header of a successful READ response of `len` bytes (its payload
/// is written after it from elsewhere: the responder's region).
pub(crate) fn read_resp_ok_header(id: u64, len: usize) -> [u8; HDR] {
    header(READ_RESP, WcStatus::SUCCESS.0, id, 0, len)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// The payload length announced by a complete header (`hdr` holds at
/// least [`HDR`] bytes).
pub(crate) fn payload_len(hdr: &[u8]) -> usize {
    u32_at(hdr, 20) as usize
}

/// The request id and status of a READ response's header (`hdr` holds at
/// least [`HDR`] bytes); `None` for other frames.
pub(crate) fn read_resp_header(hdr: &[u8]) -> Option<(u64, WcStatus)> {
    (hdr.first() == Some(&READ_RESP) && hdr.len() >= HDR)
        .then(|| (u64_at(hdr, 8), WcStatus(u32_at(hdr, 4))))
}

/// Decodes one frame from `buf`, in place. `Err` names a protocol error
/// (also a `buf` shorter than the header and the payload it announces).
pub(crate) fn decode(buf: &[u8]) -> Result<WireRef<'_>, FrameError> {
    if buf.len() < HDR {
        return Err(FrameError::Truncated);
    }
    let (h, p) = buf.split_at(HDR);
    let (a, b, c) = (u32_at(h, 4), u64_at(h, 8), u32_at(h, 16));
    let len = check_header(h)?;
    let p = p.get(..len).ok_or(FrameError::Truncated)?;
    Ok(match h[0] {
        SEND => WireRef::Dev(FrameRef::Send { imm: None, data: p }),
        SEND_IMM => WireRef::Dev(FrameRef::Send {
            imm: Some(a),
            data: p,
        }),
        READ_REQ => WireRef::Dev(FrameRef::ReadReq {
            id: b,
            va: u64_at(p, 0),
            rkey: a,
            len: c,
        }),
        READ_RESP => WireRef::Dev(FrameRef::ReadResp {
            id: b,
            status: WcStatus(a),
            data: p,
        }),
        HELLO => {
            if a != MAGIC {
                return Err(FrameError::NotHandshake);
            }
            WireRef::Hello {
                job: b,
                rank: c,
                version: u32_at(p, 0),
                src_qpn: u32_at(p, 4),
                dst_qpn: u32_at(p, 8),
            }
        }
        HELLO_ACK => WireRef::HelloAck {
            refused: a,
            job: b,
            rank: c,
            qpn: u32_at(p, 0),
        },
        CLOSE => WireRef::Close,
        k => return Err(FrameError::UnknownKind(k)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let frames = [
            Wire::Dev(Frame::Send {
                imm: None,
                data: vec![1, 2, 3],
            }),
            Wire::Dev(Frame::Send {
                imm: Some(7),
                data: vec![],
            }),
            Wire::Dev(Frame::ReadReq {
                id: 9,
                va: 1 << 40,
                rkey: 3,
                len: 100,
            }),
            Wire::Dev(Frame::ReadResp {
                id: 9,
                status: WcStatus::REM_ACCESS_ERR,
                data: vec![5; 10],
            }),
            Wire::Hello {
                job: 42,
                rank: 3,
                src_qpn: 1,
                dst_qpn: 2,
                version: VERSION,
            },
            Wire::HelloAck {
                refused: 0,
                job: 42,
                rank: 1,
                qpn: 5,
            },
            Wire::Close,
        ];
        for f in frames {
            let (h, p) = encode(f.clone());
            assert_eq!(payload_len(&h), p.len());
            let mut b = h.to_vec();
            b.extend_from_slice(&p);
            assert_eq!(decode(&b).map(WireRef::to_owned), Ok(f.clone()));
            // Short buffers are protocol errors, not panics.
            for cut in 0..b.len() {
                assert!(decode(&b[..cut]).is_err(), "{cut} of {} bytes", b.len());
            }
            let resp = match f {
                Wire::Dev(Frame::ReadResp { id, status, .. }) => Some((id, status)),
                _ => None,
            };
            assert_eq!(read_resp_header(&b), resp);
        }
        let mut bad = encode(Wire::Close).0;
        bad[0] = 99;
        assert_eq!(decode(&bad).map(|_| ()), Err(FrameError::UnknownKind(99)));
    }

    #[test]
    fn oversized_and_missized_headers_are_refused() {
        let send = header(SEND, 0, 0, 0, MAX_SEND);
        assert_eq!(check_header(&send), Ok(MAX_SEND));
        let send = header(SEND_IMM, 0, 0, 0, MAX_SEND + 1);
        assert_eq!(
            check_header(&send),
            Err(FrameError::TooLarge {
                kind: "SEND_IMM",
                len: MAX_SEND + 1,
                max: MAX_SEND
            })
        );
        let req = header(READ_REQ, 0, 0, 0, 9);
        assert_eq!(
            check_header(&req),
            Err(FrameError::BadSize {
                kind: "READ_REQ",
                len: 9,
                expected: 8
            })
        );
        // Refused from the header alone: no payload follows.
        let close = header(CLOSE, 0, 0, 0, 1 << 31);
        assert!(matches!(
            decode(&close),
            Err(FrameError::BadSize { kind: "CLOSE", .. })
        ));
    }
}
