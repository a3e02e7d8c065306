//! RMA operations posted to the engine (to active-message targets): put,
//! get and the accumulates enter the op table, to be issued by ISSUE_OPS.

use super::*;

impl Engine {
    #[allow(clippy::too_many_arguments)]
    fn post_op(
        &mut self,
        win: WinId,
        kind: RmaKind,
        target: Rank,
        disp: u64,
        len: usize,
        data: Vec<u8>,
        acc_op: AccOp,
        elem: ElemType,
    ) -> Result<Posted, Error> {
        let mut token = OpToken(0);
        let status = self.call(win, |c| {
            let proc_null = target == PROC_NULL;
            if !proc_null {
                c.w.check_rank(target)?;
                if c.is_direct(target) {
                    return Err(c.w.wrong_backend(target));
                }
            }
            let len32 = u32::try_from(len).map_err(|_| Error::TooLarge {
                len,
                max: u32::MAX as usize,
            })?;
            match c.w.access {
                _ if proc_null => {}
                AccessState::Unset => {
                    return Err(Error::NoEpoch {
                        win: c.w.id,
                        state: c.w.access,
                    })
                }
                AccessState::PerTarget if c.w.lock_epoch_count == 0 => {
                    return Err(Error::NoEpoch {
                        win: c.w.id,
                        state: c.w.access,
                    })
                }
                AccessState::PerTarget if c.find(target).is_none() && c.w.lock_evictions == 0 => {
                    return Err(Error::NotLocked {
                        win: c.w.id,
                        target,
                    });
                }
                AccessState::PscwIssued | AccessState::PscwGranted
                    if c.w.group.binary_search(&target).is_err() =>
                {
                    return Err(Error::NotInGroup {
                        win: c.w.id,
                        target,
                    });
                }
                _ => {}
            }
            if matches!(
                kind,
                RmaKind::Accumulate | RmaKind::GetAccumulate | RmaKind::FetchAndOp
            ) && (!acc::op_valid(acc_op, elem) || len % elem.size() != 0)
            {
                return Err(Error::InvalidAccumulate {
                    op: acc_op,
                    elem,
                    len,
                });
            }
            token = OpToken(c.w.next_token);
            c.w.next_token += 1;
            if len == 0 || proc_null {
                // Zero-count ops and ops on PROC_NULL are no-ops (a read
                // delivers an empty result).
                if kind.is_read() {
                    c.out.push_back(Action::Result {
                        win: c.w.id,
                        token,
                        data: Vec::new(),
                    });
                }
                return Ok(None);
            }
            Ok(Some(Blocked::PostOp {
                op: Box::new(NewOp {
                    kind,
                    target,
                    disp,
                    len: len32,
                    acc_op,
                    elem,
                    data,
                    token: token.0,
                }),
            }))
        })?;
        Ok(Posted { token, status })
    }

    /// `MPI_Put`: write `data` at byte displacement `disp` of `target`.
    pub fn put(
        &mut self,
        win: WinId,
        target: Rank,
        disp: u64,
        data: &[u8],
    ) -> Result<Posted, Error> {
        self.post_op(
            win,
            RmaKind::Put,
            target,
            disp,
            data.len(),
            data.to_vec(),
            AccOp::Replace,
            ElemType::Byte,
        )
    }

    /// `MPI_Get`: read `len` bytes at `disp` of `target`; the data comes back
    /// as [`Action::Result`] with the returned token.
    pub fn get(
        &mut self,
        win: WinId,
        target: Rank,
        disp: u64,
        len: usize,
    ) -> Result<Posted, Error> {
        self.post_op(
            win,
            RmaKind::Get,
            target,
            disp,
            len,
            Vec::new(),
            AccOp::Replace,
            ElemType::Byte,
        )
    }

    /// `MPI_Accumulate`: `target[disp..] = target[disp..] op data`, per element.
    pub fn accumulate(
        &mut self,
        win: WinId,
        target: Rank,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
    ) -> Result<Posted, Error> {
        self.post_op(
            win,
            RmaKind::Accumulate,
            target,
            disp,
            data.len(),
            data.to_vec(),
            op,
            elem,
        )
    }

    /// `MPI_Get_accumulate`: like [`Engine::accumulate`], returning the old
    /// contents as [`Action::Result`].
    pub fn get_accumulate(
        &mut self,
        win: WinId,
        target: Rank,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
    ) -> Result<Posted, Error> {
        self.post_op(
            win,
            RmaKind::GetAccumulate,
            target,
            disp,
            data.len(),
            data.to_vec(),
            op,
            elem,
        )
    }

    /// `MPI_Fetch_and_op` on one element (`data` is one element).
    pub fn fetch_and_op(
        &mut self,
        win: WinId,
        target: Rank,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
    ) -> Result<Posted, Error> {
        if data.len() != elem.size() {
            return Err(Error::InvalidAccumulate {
                op,
                elem,
                len: data.len(),
            });
        }
        self.post_op(
            win,
            RmaKind::FetchAndOp,
            target,
            disp,
            data.len(),
            data.to_vec(),
            op,
            elem,
        )
    }

    /// `MPI_Compare_and_swap`: if `target[disp..]` equals `compare`, store
    /// `origin`; the old value comes back as [`Action::Result`].
    pub fn compare_and_swap(
        &mut self,
        win: WinId,
        target: Rank,
        disp: u64,
        origin: &[u8],
        compare: &[u8],
        elem: ElemType,
    ) -> Result<Posted, Error> {
        if origin.len() != compare.len() || origin.len() != elem.size() {
            return Err(Error::InvalidAccumulate {
                op: AccOp::Replace,
                elem,
                len: origin.len(),
            });
        }
        let mut data = origin.to_vec();
        data.extend_from_slice(compare);
        self.post_op(
            win,
            RmaKind::CompareAndSwap,
            target,
            disp,
            origin.len(),
            data,
            AccOp::Replace,
            elem,
        )
    }
}
