//! Point-to-point calls composed of the basic ones: `MPI_Sendrecv` and
//! `MPI_Sendrecv_replace` ([`Comm::sendrecv`], [`Comm::sendrecv_replace`]).

use crate::comm::{Comm, Source, Tag};
use crate::request::Status;
use crate::Error;

impl Comm {
    /// `MPI_Sendrecv`: sends `send` to `dest` and receives into `recv`
    /// from `source`, as one call that cannot deadlock with a matching
    /// `sendrecv` on the peer (the receive is posted before the send
    /// starts). Returns the receive's status (truncation as in
    /// [`Comm::recv`]).
    pub fn sendrecv(
        &self,
        send: &[u8],
        dest: i32,
        sendtag: i32,
        recv: &mut [u8],
        source: impl Into<Source>,
        recvtag: impl Into<Tag>,
    ) -> Result<Status, Error> {
        // SAFETY: `recv` is borrowed, so untouched by anyone else, for
        // the whole call, and the receive completes before it returns: a
        // wait that fails (a dead peer) withdraws it.
        let mut r = unsafe { self.irecv_raw(recv.as_mut_ptr(), recv.len(), source, recvtag) }?;
        let sent = self.send(send, dest, sendtag);
        let got = self.wait(&mut r);
        if got.is_err() && !r.is_complete() {
            let _ = self.cancel(&r);
        }
        sent?;
        got
    }

    /// `MPI_Sendrecv_replace`: sends `buf` to `dest`, then receives into
    /// the same buffer from `source`.
    pub fn sendrecv_replace(
        &self,
        buf: &mut [u8],
        dest: i32,
        sendtag: i32,
        source: impl Into<Source>,
        recvtag: impl Into<Tag>,
    ) -> Result<Status, Error> {
        let out = buf.to_vec();
        self.sendrecv(&out, dest, sendtag, buf, source, recvtag)
    }
}
