//! Synchronization calls, and the driver loop that carries out what the
//! epoch machine asks: its direct actions (locks, barriers, PSCW signals in
//! shared memory, polled until they hold), its other actions (packets,
//! barriers of messages) and the device's progress.

use super::am::{self, RmaState};
use super::direct::{self, DirectWin, Poll, Ready, Started};
use super::{LockType, Win};
use crate::Error;
use rma_epoch::{CallStatus, DirectFence, Engine, Gate, WinId};
use std::sync::atomic::{fence, Ordering};
use std::sync::MutexGuard;

/// Spins on a shared-memory condition before the first progress pass.
const PURE_SPINS: u32 = 64;
/// Waiting iterations between liveness checks of the window's ranks.
const LIVENESS_EVERY: u32 = 1024;
/// Waiting iterations on one condition before the window is looked at again.
const RECHECK_EVERY: u32 = 256;
/// Looks at the other ranks' fence words under the device's RMA lock
/// before a fence waits outside it ([`DirectWin::arrived_within`]).
const LOCKED_LOOKS: u32 = PURE_SPINS;

/// Reports a condition that holds to the epoch machine.
fn report(engine: &mut Engine, id: WinId, p: Poll) -> Result<(), Error> {
    match p {
        Poll::Lock { target, .. } => engine.handle_direct_lock_granted(id, target)?,
        Poll::Barrier { .. } => engine.handle_barrier_complete(id)?,
        Poll::Post { target, .. } => engine.handle_post(id, target)?,
        Poll::Complete { origin, .. } => engine.handle_complete(id, origin)?,
    }
    Ok(())
}

impl Win {
    /// Runs the window's direct actions and fires the conditions that hold
    /// (under the RMA lock).
    fn step_direct(&self, st: &mut RmaState) -> Result<(), Error> {
        let Some(d) = &self.direct else {
            return Ok(());
        };
        let id = self.id;
        let RmaState { engine, slots, .. } = st;
        let slot = slots
            .get_mut(id as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| Error::Rma(rma_epoch::Error::NoSuchWindow(id)))?;
        loop {
            while let Some(a) = engine.poll_direct(id) {
                match d.start(a, &mut slot.seen)? {
                    Started::Done => {}
                    Started::Held(p) => report(engine, id, p)?,
                    Started::Wait(p) => {
                        if matches!(p, Poll::Lock { .. }) {
                            d.note_lock_wait();
                        }
                        slot.polls.push(p);
                    }
                }
            }
            if slot.polls.is_empty() {
                return Ok(());
            }
            let mut fired = false;
            let mut i = 0;
            while i < slot.polls.len() {
                let p = slot.polls[i];
                if d.try_fire(&p, &mut slot.seen)? {
                    slot.polls.swap_remove(i);
                    report(engine, id, p)?;
                    fired = true;
                } else {
                    i += 1;
                }
            }
            // A report may have asked for more.
            if !fired {
                return Ok(());
            }
        }
    }

    /// Carries out the window's synchronization until `done` holds (checked
    /// under the RMA lock, after the direct actions ran and the ready
    /// conditions fired). Between attempts it waits outside the lock:
    /// spinning on a pending shared-memory condition, or running progress
    /// for active messages, with liveness checks.
    pub(super) fn drive(
        &self,
        g: MutexGuard<'_, RmaState>,
        mut done: impl FnMut(&mut RmaState) -> Result<bool, Error>,
    ) -> Result<(), Error> {
        let dev = self.comm.dev();
        let mut g = Some(g);
        let mut idle = 0u32;
        loop {
            let next = {
                let st = g.get_or_insert_with(|| am::lock(&dev.rma.state));
                self.step_direct(st)?;
                if st.engine.has_actions() {
                    am::drain_actions(dev, st)?;
                }
                if done(st)? {
                    return Ok(());
                }
                st.slot(self.id)?.polls.first().copied()
            };
            g = None;
            match (next, &self.direct) {
                (Some(p), Some(d)) => self.wait_for(d, &p, &mut idle)?,
                _ => {
                    dev.check(false)?;
                    idle = idle.wrapping_add(1);
                    dev.relax(idle)?;
                }
            }
        }
    }

    /// Waits (outside every lock) until `p` may hold, running progress so
    /// that other traffic keeps flowing, and checking that the window's
    /// ranks are alive (a lock may be held by a third rank that died).
    /// The condition's words are looked up once ([`DirectWin::ready`]), so
    /// that a look costs a few loads and the spin sees a change soon.
    fn wait_for(&self, d: &DirectWin, p: &Poll, idle: &mut u32) -> Result<(), Error> {
        self.wait_ready(d, &d.ready(p)?, idle)
    }

    /// [`Win::wait_for`] on a condition whose words were looked up already:
    /// returns when it holds, or after [`RECHECK_EVERY`] looks.
    fn wait_ready(&self, d: &DirectWin, ready: &Ready<'_>, idle: &mut u32) -> Result<(), Error> {
        let dev = self.comm.dev();
        let mut spins = 0u32;
        loop {
            if ready.holds() {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins < PURE_SPINS {
                std::hint::spin_loop();
                continue;
            }
            dev.check(false)?;
            if spins % LIVENESS_EVERY == 0 {
                d.check_alive()?;
            }
            *idle = idle.wrapping_add(1);
            dev.relax(*idle)?;
            if spins % RECHECK_EVERY == 0 {
                return Ok(());
            }
        }
    }

    /// Whether a call on the window is over: nothing pending in the epoch
    /// machine, no shared-memory condition outstanding but the completes an
    /// exposure epoch waits for (only `wait`/`test` need those).
    #[inline]
    fn settled(&self, st: &mut RmaState) -> Result<bool, Error> {
        Ok(!st.engine.is_blocked(self.id)
            && st
                .slot(self.id)?
                .polls
                .iter()
                .all(|p| matches!(p, Poll::Complete { .. })))
    }

    /// Runs a synchronization call of the epoch machine and carries it out.
    pub(super) fn call(
        &self,
        f: impl FnOnce(&mut Engine, WinId) -> Result<CallStatus, rma_epoch::Error>,
    ) -> Result<(), Error> {
        // With active-message targets a call may stay pending: one at a time
        // (the engine's rule).
        let _one = (!self.all_direct).then(|| self.calls.lock().unwrap_or_else(|p| p.into_inner()));
        let dev = self.comm.dev();
        let mut g = am::lock(&dev.rma.state);
        let st = f(&mut g.engine, self.id)?;
        if st == CallStatus::Done && !g.engine.has_actions() {
            if !g.engine.has_direct(self.id) {
                return Ok(());
            }
            // One-shot steps (an unlock, a signal) and conditions that hold
            // at once (an uncontended lock) need no waiting.
            self.step_direct(&mut g)?;
            if !g.engine.has_actions() && self.settled(&mut g)? {
                return Ok(());
            }
        }
        self.drive(g, |st| self.settled(st))
    }

    /// A call that the epoch machine answers at once for a direct target
    /// (`flush*`: every direct operation is complete when it returns), then
    /// a full memory barrier.
    #[inline]
    fn direct_flush(
        &self,
        f: impl FnOnce(&mut Engine, WinId) -> Result<CallStatus, rma_epoch::Error>,
    ) -> Result<(), Error> {
        let st = f(&mut am::lock(&self.comm.dev().rma.state).engine, self.id)?;
        debug_assert_eq!(st, CallStatus::Done);
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// The gate of an operation to the direct target `t`: returns once the
    /// epoch allows it (after taking a lazy lock, seeing a post or the end
    /// of a barrier if needed).
    #[inline(always)]
    pub(super) fn gate(&self, t: u32) -> Result<(), Error> {
        let mut g = am::lock(&self.comm.dev().rma.state);
        direct::bump_locked(&direct::GLOBAL.ops);
        match g.engine.direct_access(self.id, t)? {
            Gate::Open => Ok(()),
            Gate::Wait => self.gate_wait(g, t),
        }
    }

    /// The gate's wait (out of line: the open gate is the data path).
    #[cold]
    #[inline(never)]
    fn gate_wait(&self, g: MutexGuard<'_, RmaState>, t: u32) -> Result<(), Error> {
        self.drive(g, |st| {
            Ok(st.engine.direct_access(self.id, t)? == Gate::Open)
        })
    }

    // ----------------------------------------------- synchronization

    /// `MPI_Win_fence(assert)` ([`assert::NOPRECEDE`](super::assert::NOPRECEDE),
    /// [`assert::NOSUCCEED`](super::assert::NOSUCCEED), ...).
    pub fn fence(&self, assert: u32) -> Result<(), Error> {
        match &self.direct {
            Some(d) if self.all_direct => self.fence_shm(d, assert),
            _ => self.call(|e, w| e.fence(w, assert)),
        }
    }

    /// `fence` of a window whose ranks are all direct: the epoch machine
    /// lets this thread carry out the shared-memory barrier itself
    /// ([`Engine::fence_direct_now`]: arrive under the lock and look at
    /// the other ranks' words for a short while, [`LOCKED_LOOKS`]; if a
    /// rank has not arrived by then, [`DirectFence::Barrier`]: wait for it
    /// outside the lock, then report).
    #[inline]
    fn fence_shm(&self, d: &DirectWin, assert: u32) -> Result<(), Error> {
        let id = self.id;
        let mut g = am::lock(&self.comm.dev().rma.state);
        // General if steps are queued (none between calls, normally): they
        // go first. Otherwise this thread arrives at the barrier (under the
        // lock) and the fence is over if every rank arrived already.
        let mut no = 0;
        let mut failed = None;
        let fd = g.engine.fence_direct_now(id, assert, || {
            match d.arrive().and_then(|n| {
                no = n;
                Ok(d.all_arrived(n)? || d.arrived_within(n, LOCKED_LOOKS)?)
            }) {
                Ok(all) => all,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        match fd {
            DirectFence::General => {
                drop(g);
                return self.fence_general(assert);
            }
            // The window is idle (the engine's short path), and the lock
            // was held throughout: only actions of other windows can be
            // queued.
            DirectFence::Done => {
                if g.engine.has_actions() {
                    return self.fence_drive(g);
                }
                return Ok(());
            }
            DirectFence::Barrier => {
                drop(g);
                g = self.fence_wait(d, no)?;
                g.engine.handle_barrier_complete(id)?;
            }
        }
        // The lean answer leaves nothing else to do (unless another thread
        // started something while the lock was let go).
        if g.engine.has_actions() || !g.engine.is_idle(id) {
            return self.fence_drive(g);
        }
        Ok(())
    }

    /// `fence` by the general algorithm (and its driver).
    #[cold]
    #[inline(never)]
    fn fence_general(&self, assert: u32) -> Result<(), Error> {
        self.call(|e, w| e.fence(w, assert))
    }

    /// Waits (outside the lock) until every rank arrived at fence barrier
    /// `no`; returns the RMA lock again. The fence words are looked up once
    /// per fence ([`DirectWin::ready`]; no allocation for two ranks), and
    /// the spin's last look is the answer (no second, checked look).
    #[cold]
    #[inline(never)]
    fn fence_wait(&self, d: &DirectWin, no: u64) -> Result<MutexGuard<'_, RmaState>, Error> {
        let ready = d.ready(&Poll::Barrier { no })?;
        let mut idle = 0u32;
        while !ready.holds() {
            self.wait_ready(d, &ready, &mut idle)?;
        }
        Ok(am::lock(&self.comm.dev().rma.state))
    }

    #[cold]
    #[inline(never)]
    fn fence_drive(&self, g: MutexGuard<'_, RmaState>) -> Result<(), Error> {
        self.drive(g, |st| self.settled(st))
    }

    /// A PSCW group as the epoch machine's ranks (`PROC_NULL` is not a
    /// member), sorted without duplicates, given to `f`: on the stack for
    /// small groups (no allocation per epoch).
    #[inline]
    fn with_group<T>(
        &self,
        group: &[i32],
        f: impl FnOnce(&[u32]) -> Result<T, Error>,
    ) -> Result<T, Error> {
        const INLINE: usize = 16;
        let rank = |r: i32| match self.target(r)? {
            rma_epoch::PROC_NULL => Err(Error::InvalidRank {
                rank: r,
                size: self.size(),
            }),
            t => Ok(t),
        };
        if group.len() <= INLINE {
            let mut buf = [0u32; INLINE];
            for (b, r) in buf.iter_mut().zip(group) {
                *b = rank(*r)?;
            }
            let g = &mut buf[..group.len()];
            if g.windows(2).all(|w| w[0] < w[1]) {
                return f(g);
            }
            g.sort_unstable();
            let mut n = 0;
            for i in 0..g.len() {
                if n == 0 || g[i] != g[n - 1] {
                    g[n] = g[i];
                    n += 1;
                }
            }
            return f(&g[..n]);
        }
        let mut g = group
            .iter()
            .map(|r| rank(*r))
            .collect::<Result<Vec<u32>, Error>>()?;
        g.sort_unstable();
        g.dedup();
        f(&g)
    }

    /// `MPI_Win_start`: an access epoch to the ranks of `group` (waits for
    /// the posts of the direct ones, as MPICH does for same-node targets).
    pub fn start(&self, group: &[i32], assert: u32) -> Result<(), Error> {
        self.with_group(group, |g| self.call(|e, w| e.start(w, g, assert)))
    }

    /// `MPI_Win_complete`.
    pub fn complete(&self) -> Result<(), Error> {
        self.call(|e, w| e.complete(w))
    }

    /// `MPI_Win_post`: an exposure epoch to the ranks of `group`.
    pub fn post(&self, group: &[i32], assert: u32) -> Result<(), Error> {
        self.with_group(group, |g| self.call(|e, w| e.post(w, g, assert)))
    }

    /// `MPI_Win_wait`.
    pub fn wait(&self) -> Result<(), Error> {
        self.call(|e, w| e.wait(w))
    }

    /// `MPI_Win_test`: `true` if the exposure epoch ended (as `wait`).
    pub fn test(&self) -> Result<bool, Error> {
        let _one = (!self.all_direct).then(|| self.calls.lock().unwrap_or_else(|p| p.into_inner()));
        let dev = self.comm.dev();
        let done = {
            let mut g = am::lock(&dev.rma.state);
            let mut done = g.engine.test(self.id)?;
            if !done {
                // Look at the completes once.
                self.step_direct(&mut g)?;
                if g.engine.has_actions() {
                    am::drain_actions(dev, &mut g)?;
                }
                done = g.engine.test(self.id)?;
            }
            done
        };
        if !done {
            dev.check(false)?;
        }
        Ok(done)
    }

    /// `MPI_Win_lock(lock_type, rank, assert)`: on a direct target, returns
    /// once the lock is held.
    pub fn lock(&self, lock_type: LockType, rank: i32, assert: u32) -> Result<(), Error> {
        let t = self.target(rank)?;
        if t == rma_epoch::PROC_NULL {
            return Ok(());
        }
        let ex = lock_type.exclusive();
        self.call(|e, w| e.lock(w, ex, t, assert))
    }

    /// `MPI_Win_unlock(rank)`: returns once every operation to `rank` is
    /// complete at the target and the lock is released.
    pub fn unlock(&self, rank: i32) -> Result<(), Error> {
        let t = self.target(rank)?;
        if t == rma_epoch::PROC_NULL {
            return Ok(());
        }
        self.call(|e, w| e.unlock(w, t))
    }

    /// `MPI_Win_lock_all(assert)`: a shared lock on every rank (taken
    /// lazily, at the first operation to each).
    pub fn lock_all(&self, assert: u32) -> Result<(), Error> {
        self.call(|e, w| e.lock_all(w, assert))
    }

    /// `MPI_Win_unlock_all`.
    pub fn unlock_all(&self) -> Result<(), Error> {
        self.call(|e, w| e.unlock_all(w))
    }

    /// `MPI_Win_flush(rank)`: operations to `rank` are complete there.
    pub fn flush(&self, rank: i32) -> Result<(), Error> {
        let t = self.target(rank)?;
        if t == rma_epoch::PROC_NULL {
            return Ok(());
        }
        if self.direct_to(t).is_some() {
            return self.direct_flush(|e, w| e.flush(w, t));
        }
        self.call(|e, w| e.flush(w, t))?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// `MPI_Win_flush_local(rank)`: operations to `rank` are complete here
    /// (origin buffers reusable, reads delivered).
    pub fn flush_local(&self, rank: i32) -> Result<(), Error> {
        let t = self.target(rank)?;
        if t == rma_epoch::PROC_NULL {
            return Ok(());
        }
        if self.direct_to(t).is_some() {
            return self.direct_flush(|e, w| e.flush_local(w, t));
        }
        self.call(|e, w| e.flush_local(w, t))?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// `MPI_Win_flush_all`.
    pub fn flush_all(&self) -> Result<(), Error> {
        if self.all_direct {
            return self.direct_flush(|e, w| e.flush_all(w));
        }
        self.call(|e, w| e.flush_all(w))?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// `MPI_Win_flush_local_all`.
    pub fn flush_local_all(&self) -> Result<(), Error> {
        if self.all_direct {
            return self.direct_flush(|e, w| e.flush_local_all(w));
        }
        self.call(|e, w| e.flush_local_all(w))?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// `MPI_Win_sync`: a full memory barrier (SeqCst fence) between this
    /// process's earlier and later accesses to the window, and one progress
    /// pass.
    pub fn sync(&self) -> Result<(), Error> {
        fence(Ordering::SeqCst);
        self.comm.dev().check(false)
    }
}
