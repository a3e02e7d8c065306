//! RMA operations: put, get, the accumulates. An operation to a direct
//! target passes the epoch machine's gate and is then a load, a store or a
//! single copy by the origin itself, complete when the call returns; an
//! operation to any other target is posted to the epoch machine, which
//! sends it as an active message.

use super::am;
use super::direct::{completed_read, DirectWin, Mem};
use super::{AccOp, ElemType, Win, ANY_TAG};
use crate::request::{request, Request, Status};
use crate::Error;
use rma_epoch::{acc, CallStatus, Engine, Posted, WinId};

impl Win {
    /// Checks `disp..disp+len` against the target's window.
    fn check_range(&self, rank: i32, disp: u64, len: usize) -> Result<u32, Error> {
        let t = self.target(rank)?;
        if t == rma_epoch::PROC_NULL || len == 0 {
            return Ok(t);
        }
        if let Some(d) = &self.direct {
            if d.is_dynamic() {
                // Checked against the target's attached regions at access.
                return Ok(t);
            }
        }
        let size = self.sizes.get(t as usize).copied().unwrap_or(0);
        let end = disp.checked_add(len as u64);
        if end.is_none_or(|e| e > size) {
            return Err(Error::RmaRange {
                target: rank,
                disp,
                len,
                size,
            });
        }
        Ok(t)
    }

    /// The direct backend and engine rank of `rank` if it is reached
    /// directly, with `disp..disp+len` checked against its window (a
    /// dynamic window's regions are checked at the access, as in
    /// [`Win::check_range`]); `None` for any other rank (`PROC_NULL`, a
    /// rank outside the group, an active-message target), which the
    /// general path handles. The operations' common case, one look-up.
    #[inline(always)]
    fn direct_range(
        &self,
        rank: i32,
        disp: u64,
        len: usize,
    ) -> Result<Option<(&DirectWin, u32)>, Error> {
        let Some(d) = self.direct.as_deref() else {
            return Ok(None);
        };
        let Ok(t) = u32::try_from(rank) else {
            return Ok(None);
        };
        let Some(Some(tg)) = d.targets().get(t as usize) else {
            return Ok(None);
        };
        if len > 0 && !matches!(tg.mem, Mem::Dynamic) {
            let end = disp.checked_add(len as u64);
            if end.is_none_or(|e| e > tg.size) {
                return Err(Error::RmaRange {
                    target: rank,
                    disp,
                    len,
                    size: tg.size,
                });
            }
        }
        Ok(Some((d, t)))
    }

    /// Posts an operation to an active-message target; for a read, returns
    /// the request its data completes.
    fn post_op(
        &self,
        read_from: Option<(i32, Option<Vec<u8>>)>,
        f: impl FnOnce(&mut Engine, WinId) -> Result<Posted, rma_epoch::Error>,
    ) -> Result<Option<Request>, Error> {
        let _one_call = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let dev = self.comm.dev();
        let id = self.id;
        let mut g = am::lock(&dev.rma.state);
        let p = f(&mut g.engine, id)?;
        let req = match read_from {
            Some((src, into)) => {
                let (r, c) = request();
                g.slot(id)?.results.insert(p.token.0, (c, src, into));
                Some(r)
            }
            None => None,
        };
        if p.status == CallStatus::Pending {
            self.drive(g, |st| Ok(st.engine.blocked(id).is_none()))?;
        } else if g.engine.has_actions() {
            am::drain_actions(dev, &mut g)?;
        }
        Ok(req)
    }

    fn read(
        &self,
        target: i32,
        f: impl FnOnce(&mut Engine, WinId) -> Result<Posted, rma_epoch::Error>,
    ) -> Result<Request, Error> {
        let r = self.post_op(Some((target, None)), f)?;
        r.ok_or_else(|| Error::Abandoned)
    }

    /// `MPI_Put` of `data` at byte displacement `disp` of `target`. The
    /// data is copied at once (the origin buffer is free on return); it is
    /// complete at the target at the closing synchronization (a direct
    /// target: when the call returns).
    pub fn put(&self, target: i32, disp: u64, data: &[u8]) -> Result<(), Error> {
        if let Some((d, t)) = self.direct_range(target, disp, data.len())? {
            self.gate(t)?;
            return d.store(t, disp, data);
        }
        let t = self.check_range(target, disp, data.len())?;
        if t == rma_epoch::PROC_NULL {
            return Ok(());
        }
        if let Some(d) = self.direct_to(t) {
            self.gate(t)?;
            return d.store(t, disp, data);
        }
        self.post_op(None, |e, w| e.put(w, t, disp, data))?;
        Ok(())
    }

    /// `MPI_Put` with datatypes: `origin_count` elements of `origin_type`
    /// read from `origin`, written as `target_count` elements of
    /// `target_type` starting at byte displacement `disp` of `target`
    /// (both committed; their sizes must match). The origin is packed
    /// once; each contiguous block of the target layout becomes one put
    /// (so a fine-grained target type costs one op per block).
    #[allow(clippy::too_many_arguments)]
    pub fn put_typed(
        &self,
        target: i32,
        disp: u64,
        origin: &[u8],
        origin_type: &crate::Datatype,
        origin_count: i64,
        target_type: &crate::Datatype,
        target_count: i64,
    ) -> Result<(), Error> {
        let total = origin_type.pack_size(origin_count)?;
        if target_type.pack_size(target_count)? != total {
            return Err(Error::InvalidArgument {
                what: "put_typed: origin and target describe different numbers of bytes",
            });
        }
        let t = self.target(target)?;
        if t == rma_epoch::PROC_NULL || total == 0 {
            return Ok(());
        }
        let mut packed = Vec::new();
        origin_type.pack_append(origin, origin_count, &mut packed)?;
        let size = self.sizes.get(t as usize).copied().unwrap_or(0);
        let avail = size.checked_sub(disp).ok_or(Error::RmaRange {
            target,
            disp,
            len: total,
            size,
        })?;
        let avail = usize::try_from(avail).unwrap_or(usize::MAX);
        let segs: Vec<(usize, usize)> = target_type
            .segments(avail, target_count, 0, total)
            .map_err(|_| Error::RmaRange {
                target,
                disp,
                len: total,
                size,
            })?
            .collect();
        let mut off = 0;
        for (start, len) in segs {
            let piece = packed.get(off..off + len).ok_or(Error::Truncated {
                need: off + len,
                have: total,
            })?;
            self.put(target, disp + start as u64, piece)?;
            off += len;
        }
        Ok(())
    }

    /// `MPI_Rput`: as [`Win::put`]; the request is locally complete at once
    /// (the data was copied), remote completion is by flush or unlock.
    pub fn rput(&self, target: i32, disp: u64, data: &[u8]) -> Result<Request, Error> {
        self.put(target, disp, data)?;
        Ok(Request::completed(Status::new(target, ANY_TAG, data.len())))
    }

    /// `MPI_Get`/`MPI_Rget` of `len` bytes at `disp` of `target`: the
    /// request completes with the data as its buffer
    /// ([`Request::take_buffer`]), at the latest at the closing
    /// synchronization (or a `flush_local`).
    pub fn get(&self, target: i32, disp: u64, len: usize) -> Result<Request, Error> {
        let t = self.check_range(target, disp, len)?;
        if t == rma_epoch::PROC_NULL {
            return Ok(completed_read(target, Vec::new()));
        }
        if let Some(d) = self.direct_to(t) {
            self.gate(t)?;
            let mut buf = vec![0u8; len];
            d.load(t, disp, &mut buf)?;
            return Ok(completed_read(target, buf));
        }
        self.read(target, |e, w| e.get(w, t, disp, len))
    }

    /// `MPI_Get`/`MPI_Rget` into an origin buffer: reads `buf.len()` bytes
    /// at `disp` of `target` into `buf`, which the request owns until it
    /// completes and hands back by [`Request::take_buffer`] (so a loop of
    /// reads reuses one buffer instead of allocating one per read). To a
    /// direct target the request is complete on return.
    pub fn get_into(&self, target: i32, disp: u64, mut buf: Vec<u8>) -> Result<Request, Error> {
        let len = buf.len();
        let t = self.check_range(target, disp, len)?;
        if t == rma_epoch::PROC_NULL {
            buf.clear();
            return Ok(completed_read(target, buf));
        }
        if let Some(d) = self.direct_to(t) {
            self.gate(t)?;
            d.load(t, disp, &mut buf)?;
            return Ok(completed_read(target, buf));
        }
        let r = self.post_op(Some((target, Some(buf))), |e, w| e.get(w, t, disp, len))?;
        r.ok_or_else(|| Error::Abandoned)
    }

    /// `MPI_Get` into the caller's memory when `target` is reached directly
    /// (its window is in this node's shared segment or readable by single
    /// copy): loads `buf.len()` bytes at `disp` of `target` into `buf` and
    /// returns `true`; the read is complete. Returns `false`, touching
    /// nothing, when `target` is reached by messages: use [`Win::get`] or
    /// [`Win::get_into`] then. `PROC_NULL` is a completed empty read.
    pub fn get_direct(&self, target: i32, disp: u64, buf: &mut [u8]) -> Result<bool, Error> {
        if let Some((d, t)) = self.direct_range(target, disp, buf.len())? {
            self.gate(t)?;
            d.load(t, disp, buf)?;
            return Ok(true);
        }
        let t = self.check_range(target, disp, buf.len())?;
        if t == rma_epoch::PROC_NULL {
            return Ok(true);
        }
        let Some(d) = self.direct_to(t) else {
            return Ok(false);
        };
        self.gate(t)?;
        d.load(t, disp, buf)?;
        Ok(true)
    }

    /// `MPI_Rget`: [`Win::get`], issued at once, so that waiting for the
    /// request completes it without a later synchronization call (a plain
    /// `get` to a target reached by messages may wait in a batch until a
    /// flush or the end of the epoch).
    pub fn rget(&self, target: i32, disp: u64, len: usize) -> Result<Request, Error> {
        let r = self.get(target, disp, len)?;
        self.issue_now(target)?;
        Ok(r)
    }

    /// `MPI_Rget_accumulate`: [`Win::get_accumulate`], issued at once (see
    /// [`Win::rget`]).
    pub fn rget_accumulate(
        &self,
        target: i32,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
    ) -> Result<Request, Error> {
        let r = self.get_accumulate(target, disp, data, elem, op)?;
        self.issue_now(target)?;
        Ok(r)
    }

    /// Issues what is queued for `target` now ([`Engine::issue_now`]).
    fn issue_now(&self, target: i32) -> Result<(), Error> {
        let t = self.target(target)?;
        if t == rma_epoch::PROC_NULL || self.direct_to(t).is_some() {
            return Ok(());
        }
        let _one_call = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let dev = self.comm.dev();
        let mut g = am::lock(&dev.rma.state);
        g.engine.issue_now(self.id, t)?;
        if g.engine.has_actions() {
            am::drain_actions(dev, &mut g)?;
        }
        Ok(())
    }

    /// `MPI_Accumulate`: `target[disp..] = target[disp..] op data` element
    /// by element (`data` holds whole elements of `elem`), atomically per
    /// element.
    pub fn accumulate(
        &self,
        target: i32,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
    ) -> Result<(), Error> {
        if let Some((d, t)) = self.direct_range(target, disp, data.len())? {
            check_acc(op, elem, data.len(), false)?;
            self.gate(t)?;
            d.accumulate(t, disp, data, elem, op, false)?;
            return Ok(());
        }
        let t = self.check_range(target, disp, data.len())?;
        if t == rma_epoch::PROC_NULL {
            return Ok(());
        }
        if let Some(d) = self.direct_to(t) {
            check_acc(op, elem, data.len(), false)?;
            self.gate(t)?;
            d.accumulate(t, disp, data, elem, op, false)?;
            return Ok(());
        }
        self.post_op(None, |e, w| e.accumulate(w, t, disp, data, elem, op))?;
        Ok(())
    }

    /// `MPI_Raccumulate`: as [`Win::accumulate`], with a request that is
    /// locally complete at once.
    pub fn raccumulate(
        &self,
        target: i32,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
    ) -> Result<Request, Error> {
        self.accumulate(target, disp, data, elem, op)?;
        Ok(Request::completed(Status::new(target, ANY_TAG, data.len())))
    }

    /// `MPI_Get_accumulate` (and `MPI_Rget_accumulate`): accumulates
    /// `data` and returns the old contents as the request's buffer.
    /// [`AccOp::NoOp`] makes it an atomic read.
    pub fn get_accumulate(
        &self,
        target: i32,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
    ) -> Result<Request, Error> {
        let t = self.check_range(target, disp, data.len())?;
        if let Some(r) = self.direct_fetch(target, t, disp, data, elem, op, false)? {
            return Ok(r);
        }
        self.read(target, |e, w| e.get_accumulate(w, t, disp, data, elem, op))
    }

    /// `MPI_Fetch_and_op` on one element: `data` is one `elem`; the old
    /// value is the request's buffer.
    pub fn fetch_and_op(
        &self,
        target: i32,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
    ) -> Result<Request, Error> {
        let t = self.check_range(target, disp, data.len())?;
        if let Some(r) = self.direct_fetch(target, t, disp, data, elem, op, true)? {
            return Ok(r);
        }
        self.read(target, |e, w| e.fetch_and_op(w, t, disp, data, elem, op))
    }

    /// `MPI_Compare_and_swap` on one element: stores `origin` if the
    /// target equals `compare`; the old value is the request's buffer.
    pub fn compare_and_swap(
        &self,
        target: i32,
        disp: u64,
        origin: &[u8],
        compare: &[u8],
        elem: ElemType,
    ) -> Result<Request, Error> {
        let t = self.check_range(target, disp, origin.len())?;
        if t == rma_epoch::PROC_NULL {
            return Ok(completed_read(target, Vec::new()));
        }
        if let Some(d) = self.direct_to(t) {
            if origin.len() != compare.len() || origin.len() != elem.size() {
                return Err(Error::Rma(rma_epoch::Error::InvalidAccumulate {
                    op: AccOp::Replace,
                    elem,
                    len: origin.len(),
                }));
            }
            self.gate(t)?;
            let old = d.compare_and_swap(t, disp, origin, compare)?;
            return Ok(completed_read(target, old));
        }
        self.read(target, |e, w| {
            e.compare_and_swap(w, t, disp, origin, compare, elem)
        })
    }

    /// Get-accumulate and fetch-and-op to a direct target (or
    /// `PROC_NULL`); `None` for an active-message target.
    #[allow(clippy::too_many_arguments)]
    fn direct_fetch(
        &self,
        target: i32,
        t: u32,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
        one: bool,
    ) -> Result<Option<Request>, Error> {
        let direct = self.direct_to(t);
        if t != rma_epoch::PROC_NULL && direct.is_none() {
            return Ok(None);
        }
        check_acc(op, elem, data.len(), one)?;
        let Some(d) = direct else {
            return Ok(Some(completed_read(target, Vec::new())));
        };
        self.gate(t)?;
        let old = d.accumulate(t, disp, data, elem, op, true)?;
        Ok(Some(completed_read(target, old.unwrap_or_default())))
    }
}

/// The accumulate checks the epoch machine makes for active messages, for
/// direct operations: the operation applies to the element type, and the
/// data is whole elements (exactly one for fetch-and-op).
fn check_acc(op: AccOp, elem: ElemType, len: usize, one: bool) -> Result<(), Error> {
    let ok = acc::op_valid(op, elem) && len % elem.size() == 0 && (!one || len == elem.size());
    if ok {
        Ok(())
    } else {
        Err(Error::Rma(rma_epoch::Error::InvalidAccumulate {
            op,
            elem,
            len,
        }))
    }
}
