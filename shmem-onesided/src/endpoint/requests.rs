//! Send and receive requests and the tables that hold them.

use super::*;

/// A send request that has not completed, or a user request that completed
/// and waits for [`Endpoint::wait_send`].
#[derive(Debug)]
pub(super) struct SendReq {
    pub(super) dest: u32,
    /// The user's buffer ([`Endpoint::isend`]), handed back by `wait_send`.
    pub(super) owned: Option<Vec<u8>>,
    /// Waiting for the receiver's FIN (CMA: it reads our buffer until then).
    pub(super) fin: bool,
    /// Waiting for the receiver's match acknowledgement (synchronous mode).
    pub(super) ack: bool,
    /// Fragments not all published yet.
    pub(super) frags: bool,
    /// Created by the user (isend): its completion goes to the feed.
    pub(super) user: bool,
    /// Where it stands in the completion feed.
    pub(super) fed: Fed,
    /// Its wait failed while a live peer might still read the buffer: kept
    /// (buffer alive) until the FIN, then dropped silently.
    pub(super) orphan: bool,
}

impl SendReq {
    #[inline]
    pub(super) fn done(&self) -> bool {
        !self.fin && !self.ack && !self.frags
    }
}

/// Where a user request stands in the completion feed
/// ([`Endpoint::take_completed`]). Kept in the request itself, so that
/// recording and reporting a completion costs no set operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Fed {
    /// Not complete, or not a user request.
    #[default]
    No,
    /// In the feed, not reported yet.
    Queued,
    /// Reported by `take_completed` (never again).
    Reported,
}

/// The send requests. Dropping it leaks (never frees) an owned buffer that
/// a receiver may still be reading by CMA (no FIN yet), so that the
/// receiver reads the data it was promised rather than reused memory.
#[derive(Debug, Default)]
pub(super) struct Sends(pub(super) IdMap<u64, SendReq>);

impl core::ops::Deref for Sends {
    type Target = IdMap<u64, SendReq>;
    #[inline]
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl core::ops::DerefMut for Sends {
    #[inline]
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Sends {
    fn drop(&mut self) {
        for r in self.0.values_mut().filter(|r| r.fin) {
            if let Some(v) = r.owned.take() {
                core::mem::forget(v);
            }
        }
    }
}

/// Where a receive request's data goes.
#[derive(Debug)]
pub(super) enum ReqBuf {
    /// An [`Endpoint::irecv`] buffer, owned until the request completes.
    Owned(Vec<u8>),
    /// The buffer of the blocked [`Endpoint::recv`] / [`Endpoint::try_recv`]
    /// call, passed down to progress.
    Caller,
    /// The caller's memory, lent until the request completes
    /// ([`Endpoint::irecv_or_done_lent`]).
    Lent(Lent),
}

/// Memory an [`Endpoint::irecv_or_done_lent`] caller lends to its receive:
/// `len` bytes at `addr`, valid and untouched by anyone else until the
/// request completes (the caller's contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Lent {
    pub(super) addr: usize,
    pub(super) len: usize,
}

impl Lent {
    /// The lent bytes.
    ///
    /// # Safety
    ///
    /// The request holding `self` is pending (the lender's contract keeps
    /// the memory valid and untouched until then), and no other slice of
    /// it is alive.
    #[inline(always)]
    pub(super) unsafe fn bytes<'a>(self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: the caller's contract.
        unsafe { core::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

impl ReqBuf {
    /// The request's own memory: an owned buffer or lent bytes (`None`:
    /// the blocked call's buffer).
    #[inline(always)]
    pub(super) fn memory(&mut self) -> Option<&mut [u8]> {
        match self {
            ReqBuf::Owned(v) => Some(&mut v[..]),
            // SAFETY: a request holds lent memory only while pending (it
            // is taken out as it completes), and the slice borrows `self`.
            ReqBuf::Lent(l) => Some(unsafe { l.bytes() }),
            ReqBuf::Caller => None,
        }
    }

    /// The capacity of the request's own memory (`None`: the blocked
    /// call's buffer).
    #[inline(always)]
    pub(super) fn capacity(&self) -> Option<usize> {
        match self {
            ReqBuf::Owned(v) => Some(v.len()),
            ReqBuf::Lent(l) => Some(l.len),
            ReqBuf::Caller => None,
        }
    }

    /// The owned buffer to hand back at completion (empty for lent
    /// memory and the blocked call's buffer).
    #[inline(always)]
    pub(super) fn into_vec(self) -> Vec<u8> {
        match self {
            ReqBuf::Owned(v) => v,
            ReqBuf::Lent(_) | ReqBuf::Caller => Vec::new(),
        }
    }
}

/// A completed receive's result as a request holds it: the (rare) error
/// boxed, so that a request stays small (`Error` is 64 bytes, `Status` 32)
/// and the per-message moves of [`Req`] stay short.
pub(super) type Done = core::result::Result<Status, Box<Error>>;

/// A [`Done`] as the public `Result`.
#[inline(always)]
pub(super) fn unbox(d: Done) -> Result<Status> {
    d.map_err(|e| *e)
}

/// A `Result` as a [`Done`].
#[inline(always)]
pub(super) fn boxed(r: Result<Status>) -> Done {
    r.map_err(Box::new)
}

/// Records `d` as a request's result. A request completes once: the value
/// replaced is `None`, dropped inline (no call) if it ever is not.
#[inline(always)]
pub(super) fn set_done(slot: &mut Option<Done>, d: Done) {
    if let Some(Err(e)) = slot.replace(d) {
        drop(e);
    }
}

/// Records completed user receive `req` (`key`) in the completion feed,
/// once (a request the user does not wait on through the feed is left).
#[inline(always)]
pub(super) fn feed_once(req: &mut Req, key: u64, feed: &mut Vec<(u64, bool)>, queued: &mut usize) {
    if req.user && req.fed == Fed::No {
        req.fed = Fed::Queued;
        feed.push((key, false));
        *queued += 1;
    }
}

#[derive(Debug)]
pub(super) struct Req {
    pub(super) spec: MatchSpec,
    pub(super) buf: ReqBuf,
    pub(super) done: Option<Done>,
    /// Its handle in the offload model while queued there.
    pub(super) id: Option<RecvId>,
    /// A user-visible request: its completion goes to the feed.
    pub(super) user: bool,
    /// Where it stands in the completion feed.
    pub(super) fed: Fed,
}

/// A receive the offload model handed to the "engine": advertised (or to be
/// advertised) in the prepost ring to `peer`.
#[derive(Debug, Clone, Copy)]
pub(super) struct EngineEntry {
    /// The request it belongs to.
    pub(super) key: u64,
    pub(super) peer: u32,
    pub(super) context: u32,
    pub(super) addr: u64,
    pub(super) capacity: u64,
    /// Index in the prepost ring once posted (`None`: not published, so the
    /// sender can never claim it).
    pub(super) index: Option<u64>,
    /// A delete found it claimed: waiting for the sender's DONE.
    pub(super) deleting: bool,
}

/// Receive requests and advertised entries. Dropping it leaks (never frees)
/// an owned buffer that a sender may still be writing into.
#[derive(Debug, Default)]
pub(super) struct Requests {
    pub(super) reqs: IdTable<Req>,
    pub(super) engine: IdMap<RecvId, EngineEntry>,
    /// The receive of the blocked `recv`/`try_recv` call (there is at most
    /// one at a time), kept out of the map: the hot path of a blocking
    /// receive then does no hashing for its request.
    pub(super) caller: Option<(u64, Req)>,
}

impl Requests {
    #[inline]
    pub(super) fn get(&self, key: u64) -> Option<&Req> {
        match &self.caller {
            Some((k, r)) if *k == key => Some(r),
            _ => self.reqs.get(key),
        }
    }

    #[inline]
    pub(super) fn get_mut(&mut self, key: u64) -> Option<&mut Req> {
        match &mut self.caller {
            Some((k, r)) if *k == key => Some(r),
            _ => self.reqs.get_mut(key),
        }
    }

    /// Records `req`. The blocked call's request, and one that completes
    /// inside its call (`at_once`: taken back before the call returns), go
    /// to the `caller` slot (no hashing); the others to the map.
    #[inline(always)]
    pub(super) fn insert(&mut self, key: u64, req: Req, at_once: bool) {
        if at_once || matches!(req.buf, ReqBuf::Caller) {
            // A caller request left behind (never, normally) goes to the map.
            if let Some((k, old)) = self.caller.replace((key, req)) {
                self.reqs.insert(k, old);
            }
        } else {
            self.reqs.insert(key, req);
        }
    }

    #[inline]
    pub(super) fn remove(&mut self, key: u64) -> Option<Req> {
        match &self.caller {
            Some((k, _)) if *k == key => self.caller.take().map(|(_, r)| r),
            _ => self.reqs.remove(key),
        }
    }

    /// Removes request `key` if it has completed (one lookup).
    #[inline(always)]
    pub(super) fn remove_if_done(&mut self, key: u64) -> Option<Req> {
        match &self.caller {
            Some((k, r)) if *k == key => {
                if r.done.is_some() {
                    self.caller.take().map(|(_, r)| r)
                } else {
                    None
                }
            }
            _ => {
                if self.reqs.get(key).is_some_and(|r| r.done.is_some()) {
                    self.reqs.remove(key)
                } else {
                    None
                }
            }
        }
    }

    /// [`IdTable::take_where`] over the caller slot and the map.
    #[inline(always)]
    pub(super) fn take_where<R>(
        &mut self,
        key: u64,
        f: impl FnOnce(&mut Req) -> Option<R>,
    ) -> Option<R> {
        match &mut self.caller {
            Some((k, r)) if *k == key => {
                let out = f(r)?;
                self.caller = None;
                Some(out)
            }
            _ => self.reqs.take_where(key, f),
        }
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Req> {
        self.reqs.values().chain(self.caller.iter().map(|(_, r)| r))
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        for e in self.engine.values() {
            if let Some(r) = self.reqs.get_mut(e.key) {
                if let ReqBuf::Owned(v) = core::mem::replace(&mut r.buf, ReqBuf::Caller) {
                    // A sender may still CMA-write into it: never free it.
                    core::mem::forget(v);
                }
            }
        }
    }
}
