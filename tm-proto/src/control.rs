//! Driver control messages: what a tag-matching driver tells its peer
//! outside the four TM message kinds, carried as the body of a no-tag
//! message ([`crate::Message::NoTag`]), which a TM-SRQ delivers whole to a
//! receive buffer without matching it.
//!
//! Today one exchange: the cancellation of a send (`MPI_Cancel`). The
//! sender of a rendezvous request asks the receiver to withdraw it
//! ([`Control::CancelSend`], quoting the request's `app_ctx`); the receiver
//! answers whether it did ([`Control::CancelAnswer`]): `withdrawn` only if
//! no receive had matched the request, in which case the data is never
//! read and no FIN follows.
//!
//! Layout (big-endian, after the no-tag opcode byte 0): a kind byte (1 =
//! cancel request, 2 = cancel answer), the 32-bit `app_ctx`, a flags byte
//! (bit 0: withdrawn; zero in a request).
//!
//! ```
//! use tm_proto::{Control, Limits, Message, CONTROL_LEN};
//!
//! let bytes = Control::CancelAnswer { ctx: 7, withdrawn: true }.encode();
//! assert_eq!(bytes.len(), CONTROL_LEN);
//! let Message::NoTag { body } = Message::decode(&bytes, Limits::MLX5)? else {
//!     unreachable!()
//! };
//! assert_eq!(Control::decode(body)?, Control::CancelAnswer { ctx: 7, withdrawn: true });
//! # Ok::<(), tm_proto::Error>(())
//! ```

use crate::Error;

/// Bytes of a control message on the wire, the no-tag opcode byte
/// included.
pub const CONTROL_LEN: usize = 7;

const KIND_CANCEL: u8 = 1;
const KIND_ANSWER: u8 = 2;
const WITHDRAWN: u8 = 1;

/// A driver control message (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Withdraw my rendezvous request `ctx` if no receive matched it yet.
    CancelSend {
        /// The request's `app_ctx` (as in its TMH).
        ctx: u32,
    },
    /// The answer to [`Control::CancelSend`].
    CancelAnswer {
        /// The request's `app_ctx`.
        ctx: u32,
        /// Withdrawn: no receive will ever match it, its data will not be
        /// read and no FIN follows. Otherwise it was matched and completes
        /// normally.
        withdrawn: bool,
    },
}

impl Control {
    /// The whole no-tag message: opcode byte 0, then the body.
    pub fn encode(&self) -> [u8; CONTROL_LEN] {
        let (kind, ctx, flags) = match *self {
            Control::CancelSend { ctx } => (KIND_CANCEL, ctx, 0),
            Control::CancelAnswer { ctx, withdrawn } => {
                (KIND_ANSWER, ctx, if withdrawn { WITHDRAWN } else { 0 })
            }
        };
        let c = ctx.to_be_bytes();
        [0, kind, c[0], c[1], c[2], c[3], flags]
    }

    /// Decodes a no-tag message's body (the bytes after the opcode).
    ///
    /// # Errors
    /// [`Error::BadLength`] for a body of another length,
    /// [`Error::UnknownCode`] for an unknown kind or flag bits.
    pub fn decode(body: &[u8]) -> Result<Control, Error> {
        let &[kind, a, b, c, d, flags] = body else {
            return Err(Error::BadLength {
                what: "control message",
                expected: CONTROL_LEN - 1,
                got: body.len(),
            });
        };
        let ctx = u32::from_be_bytes([a, b, c, d]);
        match (kind, flags) {
            (KIND_CANCEL, 0) => Ok(Control::CancelSend { ctx }),
            (KIND_ANSWER, 0 | WITHDRAWN) => Ok(Control::CancelAnswer {
                ctx,
                withdrawn: flags == WITHDRAWN,
            }),
            (KIND_CANCEL | KIND_ANSWER, f) => Err(Error::UnknownCode {
                what: "control flags",
                code: f,
            }),
            (k, _) => Err(Error::UnknownCode {
                what: "control kind",
                code: k,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, Message};

    #[test]
    fn round_trips_through_a_no_tag_message() {
        for m in [
            Control::CancelSend { ctx: 0 },
            Control::CancelSend { ctx: u32::MAX },
            Control::CancelAnswer {
                ctx: 0x0102_0304,
                withdrawn: true,
            },
            Control::CancelAnswer {
                ctx: 5,
                withdrawn: false,
            },
        ] {
            let bytes = m.encode();
            match Message::decode(&bytes, Limits::MLX5) {
                Ok(Message::NoTag { body }) => assert_eq!(Control::decode(body), Ok(m)),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            Control::CancelSend { ctx: 0x0a0b_0c0d }.encode(),
            [0, 1, 0x0a, 0x0b, 0x0c, 0x0d, 0]
        );
    }

    #[test]
    fn rejects_what_it_does_not_know() {
        assert!(matches!(
            Control::decode(&[1, 0, 0, 0, 1]),
            Err(Error::BadLength { got: 5, .. })
        ));
        assert!(matches!(
            Control::decode(&[2, 0, 0, 0, 1, 0, 0]),
            Err(Error::BadLength { got: 7, .. })
        ));
        assert!(matches!(
            Control::decode(&[9, 0, 0, 0, 1, 0]),
            Err(Error::UnknownCode { code: 9, .. })
        ));
        assert!(matches!(
            Control::decode(&[1, 0, 0, 0, 1, 1]),
            Err(Error::UnknownCode { code: 1, .. })
        ));
        assert!(matches!(
            Control::decode(&[2, 0, 0, 0, 1, 3]),
            Err(Error::UnknownCode { code: 3, .. })
        ));
    }
}
