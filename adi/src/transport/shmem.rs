//! The node-local transport: [`shmem_onesided::Endpoint`] behind the
//! [`Transport`] seam.
//!
//! Peers are the endpoint's ranks (node-local indices, which
//! `Route::Shmem { local }` and `Route::SelfCopy { local }` carry); the
//! adapter turns the endpoint's statuses into [`RecvStatus`]es with world
//! ranks and its errors into [`Error`]s, and makes the small-message
//! decision of the device ([`Transport::send_small_now`]): a message of
//! up to one header-ring slot (`shmem_onesided::ring::INLINE_MAX`, 40
//! bytes) or, above, up to `TMX_SHMEM_TUNE=inline_ext` bytes in continuation
//! slots goes inline at once.

use super::{
    Alive, ArrivalWatch, InPlace, RecvStart, RecvStatus, SendMode, SendStart, Sink, SmallKind,
    SmallSend, Transport,
};
use crate::Error;
use shmem_onesided::{
    Config, Endpoint, Message, Node, Place, RecvFinished, RecvRequest, SendMode as EpMode,
    SendRequest, Started, Status as EpStatus,
};
use std::mem;
use tm_proto::MatchSpec;

/// What the endpoint reports for a finished send.
type SendDone = shmem_onesided::Result<Option<Vec<u8>>>;

/// The node-local transport of the device.
#[derive(Debug)]
pub(crate) struct ShmemTransport {
    ep: Endpoint,
    /// Node index → world rank.
    local_to_world: Vec<u32>,
    /// Spare lists the endpoint's finished operations are taken into.
    sends_done: Vec<(u64, SendDone)>,
    recvs_done: Vec<RecvFinished>,
}

/// The endpoint's mode of a send.
#[inline(always)]
fn ep_mode(mode: SendMode) -> EpMode {
    match mode {
        SendMode::Standard => EpMode::Standard,
        SendMode::Synchronous => EpMode::Synchronous,
    }
}

/// A watch on one ring's next slot ([`ArrivalWatch`]).
#[derive(Debug)]
pub(crate) struct Watch(shmem_onesided::ArrivalWatch, u64);

impl Watch {
    #[inline(always)]
    pub(crate) fn published(&self) -> bool {
        self.0.published(self.1)
    }
}

impl ShmemTransport {
    /// Attaches this rank to its node's segment at `place` (created by
    /// local rank 0, opened by the others) as node index `local_rank`, with
    /// `config`, and calibrates the inline reply size over the node on
    /// `context` (every local rank calls this before any traffic).
    /// `local_to_world`: the world rank of each node index.
    pub(crate) fn init(
        place: Place,
        local_rank: u32,
        local_to_world: Vec<u32>,
        config: Config,
        context: u32,
    ) -> Result<ShmemTransport, Error> {
        let node = Node::init_at(place, local_rank, local_to_world.len() as u32, config)?;
        let mut ep = Endpoint::new(node);
        ep.calibrate_inline_reply(context)?;
        Ok(ShmemTransport {
            ep,
            local_to_world,
            sends_done: Vec::new(),
            recvs_done: Vec::new(),
        })
    }

    /// Whether a progress pass has work besides reading rings
    /// (`Endpoint::has_local_work`).
    #[inline]
    pub(crate) fn has_local_work(&self) -> bool {
        self.ep.has_local_work()
    }

    /// [`Transport::try_recv`] without the quick look at the source's ring:
    /// one full pass (`Endpoint::try_recv_full`).
    #[inline]
    pub(crate) fn try_recv_full(
        &mut self,
        spec: MatchSpec,
        buf: &mut [u8],
    ) -> Result<Option<RecvStatus>, Error> {
        Ok(self.ep.try_recv_full(spec, buf)?.map(|st| self.st(&st)))
    }

    /// The node segment (same-node windows map it).
    pub(crate) fn node_mut(&mut self) -> &mut Node {
        self.ep.node_mut()
    }

    /// The endpoint's status as a [`RecvStatus`] (the source as a world
    /// rank; `u32::MAX` if the endpoint named no rank of the node).
    #[inline(always)]
    fn status(local_to_world: &[u32], st: &EpStatus) -> RecvStatus {
        RecvStatus {
            source: local_to_world
                .get(st.source as usize)
                .copied()
                .unwrap_or(u32::MAX),
            tag: st.tag,
            len: st.len,
            msg_len: st.msg_len,
            cancelled: st.cancelled,
        }
    }

    #[inline(always)]
    fn st(&self, st: &EpStatus) -> RecvStatus {
        Self::status(&self.local_to_world, st)
    }

    /// The thresholds the node settled on, for the counters printout.
    fn thresholds(&self) -> String {
        let n = self.ep.node();
        let c = n.config();
        let size = |v: u64| {
            if v == u64::MAX {
                "off".to_owned()
            } else {
                v.to_string()
            }
        };
        let how = match n.calibration() {
            None => "not calibrated".to_owned(),
            Some(cal) => match cal.raised_to {
                None => "calibrated: eager did not win at any measured size, kept".to_owned(),
                Some(s) => format!("calibrated: raised to {s}"),
            },
        };
        let reply = match self.ep.reply_calibration() {
            None => "not calibrated".to_owned(),
            Some(cal) => match cal.lowered_to {
                None => "calibrated: inline did not lose at any measured size, kept".to_owned(),
                Some(s) => format!("calibrated: lowered to {s}"),
            },
        };
        format!(
            "cma threshold {}, cma reply {}, cma duplex {} ({how}); inline reply {} ({reply})",
            size(c.cma_threshold),
            size(c.cma_reply),
            size(c.cma_duplex),
            self.ep.reply_cap()
        )
    }
}

/// An endpoint error as the device's (out of line: the fast paths only
/// branch to it).
#[cold]
#[inline(never)]
fn convert(e: shmem_onesided::Error) -> Error {
    Error::from(e)
}

/// Moves an endpoint error out of a harvest list entry, leaving a
/// placeholder (the entry is cleared right after).
#[inline(never)]
fn take_error(e: &mut shmem_onesided::Error) -> Error {
    Error::from(mem::replace(
        e,
        shmem_onesided::Error::InvalidArgument("result taken"),
    ))
}

impl Transport for ShmemTransport {
    type Matched = Message;

    fn small_send(&self) -> SmallSend {
        SmallSend {
            one: shmem_onesided::ring::INLINE_MAX,
            more: self.ep.inline_ext_max(),
        }
    }

    #[inline(always)]
    fn send_small_now(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        kind: SmallKind,
    ) -> bool {
        match kind {
            SmallKind::One => self.ep.isend_inline_now(peer, tag, context, data),
            SmallKind::More => self.ep.isend_inline_ext_now(peer, tag, context, data),
        }
    }

    #[inline(always)]
    fn send_now(&mut self, peer: u32, tag: u32, context: u32, data: &[u8], copy: bool) -> bool {
        if copy {
            self.ep.send_copied_now(peer, tag, context, data)
        } else {
            self.ep
                .isend_now(peer, tag, context, data, EpMode::Standard)
        }
    }

    #[inline]
    fn send_fill_now(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> bool {
        self.ep.send_now_with(peer, tag, context, len, fill)
    }

    #[inline(always)]
    fn isend(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        mode: SendMode,
    ) -> Result<SendStart, Error> {
        match self
            .ep
            .isend_or_done(peer, tag, context, data, ep_mode(mode))
        {
            Ok(Started::Done(buf)) => Ok(SendStart::Done(buf)),
            Ok(Started::Pending(sreq)) => Ok(SendStart::Pending(sreq.id())),
            Err(e) => Err(convert(e)),
        }
    }

    #[inline]
    fn send_borrowed(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<Option<u64>, Error> {
        match self
            .ep
            .send_or_start(peer, tag, context, data, ep_mode(mode))
        {
            Ok(Started::Done(())) => Ok(None),
            Ok(Started::Pending(sreq)) => Ok(Some(sreq.id())),
            Err(e) => Err(convert(e)),
        }
    }

    fn isend_borrowed(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<u64, Error> {
        Ok(self
            .ep
            .isend_borrowed(peer, tag, context, data, ep_mode(mode))?
            .id())
    }

    /// The endpoint withdraws a send no receive has matched (a
    /// synchronous or CMA-sized one; small eager sends are complete
    /// already): the receiver does it during its progress, so this returns
    /// once the receiver is inside any call
    /// ([`shmem_onesided::Endpoint::cancel_send`]).
    fn cancel_send(&mut self, id: u64) -> Result<bool, Error> {
        Ok(self.ep.cancel_send(&SendRequest::from_id(id))?)
    }

    #[inline(always)]
    fn irecv(
        &mut self,
        spec: MatchSpec,
        buf: Vec<u8>,
        consumer: Option<InPlace>,
    ) -> Result<RecvStart, Error> {
        let started = match consumer {
            Some(c) => self.ep.irecv_or_done_in_place(spec, buf, c),
            None => self.ep.irecv_or_done(spec, buf),
        };
        match started {
            Ok(Started::Pending(rreq)) => Ok(RecvStart::Pending(rreq.id())),
            Ok(Started::Done((Ok(st), buf))) => Ok(RecvStart::Done(Ok(self.st(&st)), buf)),
            Ok(Started::Done((Err(e), buf))) => Ok(RecvStart::Done(Err(convert(e)), buf)),
            Err(e) => Err(convert(e)),
        }
    }

    /// Received in place: the endpoint writes into the lent memory
    /// ([`shmem_onesided::Endpoint::irecv_or_done_lent`]), and the
    /// buffer handed back is empty.
    #[allow(unsafe_code)]
    #[inline(always)]
    unsafe fn irecv_lent(
        &mut self,
        spec: MatchSpec,
        ptr: *mut u8,
        len: usize,
    ) -> Result<RecvStart, Error> {
        // SAFETY: the caller's contract is the endpoint's.
        match unsafe { self.ep.irecv_or_done_lent(spec, ptr, len) } {
            Ok(Started::Pending(rreq)) => Ok(RecvStart::Pending(rreq.id())),
            Ok(Started::Done(Ok(st))) => Ok(RecvStart::Done(Ok(self.st(&st)), Vec::new())),
            Ok(Started::Done(Err(e))) => Ok(RecvStart::Done(Err(convert(e)), Vec::new())),
            Err(e) => Err(convert(e)),
        }
    }

    #[inline(always)]
    fn recv_arrived(
        &mut self,
        spec: MatchSpec,
        buf: &mut [u8],
    ) -> Result<Option<RecvStatus>, Error> {
        match self.ep.recv_arrived(spec, buf) {
            Ok(Some(st)) => Ok(Some(self.st(&st))),
            Ok(None) => Ok(None),
            Err(e) => Err(convert(e)),
        }
    }

    #[inline]
    fn recv_now(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<RecvStatus>, Error> {
        Ok(self.ep.recv_now(spec, buf)?.map(|st| self.st(&st)))
    }

    #[inline]
    fn try_recv(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<RecvStatus>, Error> {
        Ok(self.ep.try_recv(spec, buf)?.map(|st| self.st(&st)))
    }

    fn recv_arrived_with(
        &mut self,
        spec: MatchSpec,
        cap: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<Option<RecvStatus>, Error> {
        Ok(self
            .ep
            .recv_arrived_with(spec, cap, f)?
            .map(|st| self.st(&st)))
    }

    fn front_open(&self, spec: MatchSpec) -> bool {
        self.ep.front_open(spec)
    }

    #[inline]
    fn arrival_watch(&self, peer: u32) -> Option<ArrivalWatch> {
        self.ep
            .arrival_watch(peer)
            .map(|(w, next)| ArrivalWatch(Watch(w, next)))
    }

    fn cancel_recv(&mut self, id: u64) -> Result<bool, Error> {
        Ok(self.ep.cancel_recv(&RecvRequest::from_id(id))?)
    }

    fn iprobe(&mut self, spec: MatchSpec) -> Result<Option<RecvStatus>, Error> {
        Ok(self.ep.iprobe(spec)?.map(|st| self.st(&st)))
    }

    fn improbe(&mut self, spec: MatchSpec) -> Result<Option<(Message, RecvStatus)>, Error> {
        Ok(self.ep.improbe(spec)?.map(|(m, st)| (m, self.st(&st))))
    }

    fn imrecv(&mut self, msg: Message, buf: Vec<u8>) -> Result<RecvStart, Error> {
        Ok(RecvStart::Pending(self.ep.imrecv(msg, buf)?.id()))
    }

    #[inline]
    fn progress(&mut self) -> Result<usize, Error> {
        Ok(self.ep.progress()?)
    }

    /// The entries are read in place, field by field, and only the buffer
    /// is moved out (by the sink): moving whole entries out of the list
    /// the endpoint has just written (`drain`) made wide copies of
    /// narrowly written memory, which stalled on store-to-load
    /// forwarding. The lists are cleared at the end.
    #[inline(always)]
    fn collect(&mut self) -> bool {
        self.ep
            .take_finished(&mut self.sends_done, &mut self.recvs_done);
        !(self.sends_done.is_empty() && self.recvs_done.is_empty())
    }

    #[inline(always)]
    fn drain<S: Sink>(&mut self, sink: &mut S) {
        let ShmemTransport {
            local_to_world,
            sends_done,
            recvs_done,
            ..
        } = self;
        for (id, result) in sends_done.iter_mut() {
            match result {
                Ok(buf) => sink.send_done(*id, Ok(buf)),
                Err(e) => sink.send_done(*id, Err(take_error(e))),
            }
        }
        sends_done.clear();
        for f in recvs_done.iter_mut() {
            match &mut f.result {
                Ok(st) => sink.recv_done(f.id, Ok(Self::status(local_to_world, st)), &mut f.buf),
                Err(e) => sink.recv_done(f.id, Err(take_error(e)), &mut f.buf),
            }
        }
        recvs_done.clear();
    }

    fn queued(&self) -> usize {
        self.ep.queued()
    }

    fn check_alive(&mut self, which: Alive) -> Result<(), Error> {
        match which {
            Alive::Peer(p) => {
                if p != self.ep.rank() {
                    self.ep.check_alive(Some(p))?;
                }
            }
            Alive::Waited => self.ep.check_alive(None)?,
            Alive::All => {
                let me = self.ep.rank();
                for p in (0..self.ep.size()).filter(|p| *p != me) {
                    self.ep.check_alive(Some(p))?;
                }
            }
        }
        Ok(())
    }

    fn finalize(self) -> Result<Vec<(&'static str, String)>, Error> {
        let thresholds = self.thresholds();
        let counters = self.ep.finalize()?;
        Ok(vec![
            ("shmem counters", counters.to_string()),
            ("shmem thresholds", thresholds),
        ])
    }
}

impl crate::device::Device {
    /// Runs `f` on the node segment of the node-local transport under the
    /// core lock: same-node windows (`crate::win`) map it.
    pub(crate) fn with_node<T>(
        &self,
        f: impl FnOnce(&mut Node) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.with_local(|t| f(t.node_mut()))
    }
}
