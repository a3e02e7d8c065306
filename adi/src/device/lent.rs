//! Operations on lent memory: the caller's own bytes, borrowed by a
//! pending operation until it completes ([`crate::lent`]).

use super::ops::record_send;
use super::{dispatch, lock_core, Device, Mode, Via};
use crate::attr::{ANY_SOURCE, ANY_TAG};
use crate::request::{Request, Status};
use crate::transport::{SendMode, Transport};
use crate::Error;

impl Device {
    /// Starts a send of `data` to world rank `dest` that reads `data` in
    /// place until the returned request completes (a send the transport
    /// finishes in the call is born complete).
    ///
    /// # Safety
    ///
    /// `data` stays valid and unchanged until the request completes (or,
    /// freed, until the operation is complete: at the latest at finalize),
    /// although its borrow ends when this returns.
    pub(crate) unsafe fn start_send_lent(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: Mode,
    ) -> Result<Request, Error> {
        dispatch!(self.dest_of(dest)?, |V, peer| {
            self.start_send_lent_on::<V>(dest, peer, tag, context, data, mode)
        })
    }

    #[inline(always)]
    fn start_send_lent_on<V: Via>(
        &self,
        dest: u32,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: Mode,
    ) -> Result<Request, Error> {
        let len = data.len();
        let t_mode = match mode {
            Mode::Synchronous => SendMode::Synchronous,
            Mode::Standard | Mode::Ready => SendMode::Standard,
        };
        lock_core!(self, g, core);
        // The transport reads `data` until it reports the completion (the
        // caller's contract keeps it valid that long).
        let started = V::pick(core)?.send_borrowed(peer, tag, context, data, t_mode)?;
        self.count_send::<V>(dest);
        let req = match started {
            None => None,
            Some(id) => Some(record_send(core, id, len, None)),
        };
        drop(g);
        match mode {
            Mode::Synchronous => super::bump(&self.counters.sync_sends),
            Mode::Ready => super::bump(&self.counters.ready_sends),
            Mode::Standard => {}
        }
        tracing::debug!(
            dest,
            tag,
            context,
            len,
            ?mode,
            at_once = req.is_none(),
            "lent send started"
        );
        Ok(req.unwrap_or_else(|| Request::completed(Status::new(ANY_SOURCE, ANY_TAG, len))))
    }
}
