//! The device's RMA state (the one `rma_epoch::Engine` and what the
//! driver keeps per window) and MAKE_RMA_PROGRESS: the active-message
//! backend's packets, the engine's actions and the windows' barriers.
//!
//! - **A private communicator per window.** Window creation duplicates the
//!   user's communicator ([`Comm::dup`](crate::Comm::dup), as MPICH does).
//!   Its point-to-point context is *reserved for RMA packets* of this
//!   window (tag 0, any size: `tm_proto::rma` packets, a 32-byte header
//!   plus payload); its collective context carries the window's barriers
//!   (tags `0x100 + round`), the creation-time exchange and the `free`
//!   barrier. A packet is mapped to its local window by the context it
//!   arrived on (the wire header's window id is rewritten to the local one,
//!   so windows created on different communicators never have to agree on
//!   engine ids).
//! - **MAKE_RMA_PROGRESS.** Every progress pass of the device (every wait,
//!   test, blocking receive and `device_check`) also runs [`progress`]
//!   over the windows that have active-message targets: it drains their
//!   RMA contexts (target-side packets are applied to the window memory
//!   right there, under the RMA lock), drains the engine's actions
//!   (packets go out through the same endpoint as point-to-point
//!   messages), steps the windows' nonblocking barriers and polls the
//!   shared-memory lock a window's target side takes for its
//!   active-message origins. A barrier asked for by the engine is a
//!   dissemination barrier of nonblocking sends and receives stepped by
//!   progress: no blocking call ever runs inside progress. Windows whose
//!   ranks are all direct are not visited at all.
//! - **Atomicity.** Every target-side access happens inside one
//!   `Engine::handle_packet` under the RMA lock; on a window with direct
//!   ranks, read-modify-writes also take the rank's accumulate lock (see
//!   `direct.rs`), and the owner's local accesses
//!   ([`Win::with_local`](super::Win::with_local)) take one or the other.

use super::direct::{DirectWin, Poll, Seen};
use super::mem::WinBuf;
use super::ANY_TAG;
use crate::device::{Device, Group, Mode, RecvInto, SendData};
use crate::request::{Completer, Request, Status};
use crate::Error;
use rma_epoch::{Access, Action, Engine, GlobalConfig, WinId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Tag of RMA packets on a window's RMA context.
pub(super) const TAG_RMA: u32 = 0;
/// First tag of the window barrier's rounds (collective context).
pub(super) const TAG_WIN_BARRIER: u32 = 0x100;
/// Largest receive buffer kept between progress passes.
const SCRATCH_KEEP: usize = 16 << 20;
/// Most packets one progress pass takes from one window.
const PACKETS_PER_PASS: usize = 64;

/// The RMA state of a device: the engine and the windows' driver state.
#[derive(Debug)]
pub(crate) struct Rma {
    pub(super) state: Mutex<RmaState>,
    /// Windows with active-message targets: progress does not even take
    /// the lock when there are none.
    pub(super) live: AtomicUsize,
}

#[derive(Debug)]
pub(super) struct RmaState {
    pub(super) engine: Engine,
    /// Per window, indexed by engine id (a freed window leaves a `None`).
    pub(super) slots: Vec<Option<Box<Slot>>>,
    /// Windows with active-message targets (visited by progress).
    pub(super) polled: Vec<WinId>,
    /// Scratch list of window ids (reused by progress).
    ids: Vec<WinId>,
    /// Receive buffer of incoming packets, reused (a fresh buffer per
    /// MiB-sized packet costs hundreds of page faults).
    scratch: Vec<u8>,
}

/// The memory the target side of active messages accesses.
#[derive(Debug)]
pub(super) enum SlotMem {
    /// Private memory of the engine path.
    Private(WinBuf),
    /// The direct backend's memory (heap or private, shared with the
    /// direct origins).
    Direct(Arc<DirectWin>),
}

/// One window's driver state.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) mem: SlotMem,
    /// RMA context (the window communicator's point-to-point context).
    pub(super) ctx: u32,
    /// Barrier context (its collective context).
    pub(super) coll: u32,
    pub(super) rank: u32,
    pub(super) group: Arc<Group>,
    /// Reads waiting for their data: token → (completer, target rank,
    /// the origin buffer to fill if the caller gave one).
    pub(super) results: HashMap<u64, (Completer, i32, Option<Vec<u8>>)>,
    barriers_wanted: u32,
    barrier: Option<IBarrier>,
    /// Shared-memory conditions started and not reported yet.
    pub(super) polls: Vec<Poll>,
    /// Fence and PSCW counts of the shared-memory protocols.
    pub(super) seen: Seen,
    /// This rank's own lock, asked for or held on behalf of active-message
    /// origins.
    target_ticket: Option<OwnLock>,
}

/// This rank's own window lock, taken in shared memory on behalf of its
/// active-message origins ([`Action::TargetLock`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnLock {
    /// Shared: a ticket taken, entered once `held`.
    Shared { ticket: u64, held: bool },
    /// Exclusive: entered only when the lock is idle (no ticket while
    /// waiting, so the request may be replaced by a shared one).
    Exclusive { held: bool },
}

impl Slot {
    pub(super) fn new(mem: SlotMem, ctx: u32, coll: u32, rank: u32, group: Arc<Group>) -> Slot {
        let n = group.world.len();
        Slot {
            mem,
            ctx,
            coll,
            rank,
            group,
            results: HashMap::new(),
            barriers_wanted: 0,
            barrier: None,
            polls: Vec::new(),
            seen: Seen {
                posts: vec![0; n],
                completes: vec![0; n],
            },
            target_ticket: None,
        }
    }

    /// The private memory of an engine window.
    pub(super) fn take_private(&mut self) -> Option<Vec<u8>> {
        match &mut self.mem {
            SlotMem::Private(v) => Some(std::mem::take(v).into_vec()),
            SlotMem::Direct(_) => None,
        }
    }
}

/// A nonblocking dissemination barrier, stepped by progress.
#[derive(Debug)]
struct IBarrier {
    dist: u32,
    round: u32,
    reqs: Option<(Request, Request)>,
}

pub(super) struct Mems<'a>(pub(super) &'a mut Vec<Option<Box<Slot>>>);

impl rma_epoch::WindowMemory for Mems<'_> {
    fn window_mut(&mut self, win: WinId) -> Option<&mut [u8]> {
        match self.0.get_mut(win as usize)?.as_mut()?.mem {
            SlotMem::Private(ref mut v) => Some(&mut v[..]),
            SlotMem::Direct(_) => None,
        }
    }

    fn with_range(
        &mut self,
        win: WinId,
        disp: u64,
        len: usize,
        access: Access,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        let Some(slot) = self.0.get_mut(win as usize).and_then(Option::as_mut) else {
            return false;
        };
        match &mut slot.mem {
            SlotMem::Private(v) => {
                let range = usize::try_from(disp)
                    .ok()
                    .and_then(|d| Some(d..d.checked_add(len)?));
                match range.and_then(|r| v.get_mut(r)) {
                    Some(m) => {
                        f(m);
                        true
                    }
                    None => false,
                }
            }
            SlotMem::Direct(d) => d.target_access(disp, len, access, f),
        }
    }
}

pub(super) fn lock(m: &Mutex<RmaState>) -> MutexGuard<'_, RmaState> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

impl Rma {
    /// The engine with the global pool sizes of `TMX_RMA_*_GLOBAL_POOL_SIZE`.
    pub(crate) fn from_env() -> Result<Rma, Error> {
        let cfg = GlobalConfig::from_lookup(env)?;
        Ok(Rma {
            state: Mutex::new(RmaState {
                engine: Engine::new(cfg),
                slots: Vec::new(),
                polled: Vec::new(),
                ids: Vec::new(),
                scratch: Vec::new(),
            }),
            live: AtomicUsize::new(0),
        })
    }
}

impl RmaState {
    #[inline]
    pub(super) fn slot(&mut self, win: WinId) -> Result<&mut Slot, Error> {
        self.slots
            .get_mut(win as usize)
            .and_then(Option::as_mut)
            .map(|s| &mut **s)
            .ok_or_else(|| Error::Rma(rma_epoch::Error::NoSuchWindow(win)))
    }

    /// Registers `slot` for window `win` (polled by progress if `am`).
    pub(super) fn insert(&mut self, rma: &Rma, win: WinId, slot: Slot, am: bool) {
        let i = win as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i] = Some(Box::new(slot));
        if am {
            self.polled.push(win);
            rma.live.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Forgets window `win`'s slot.
    pub(super) fn remove(&mut self, rma: &Rma, win: WinId) -> Option<Box<Slot>> {
        let s = self.slots.get_mut(win as usize)?.take();
        if let Some(i) = self.polled.iter().position(|w| *w == win) {
            self.polled.swap_remove(i);
            rma.live.fetch_sub(1, Ordering::AcqRel);
        }
        s
    }
}

/// What one RMA progress pass did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Progressed {
    /// Reads delivered and pending calls completed.
    pub(crate) completed: usize,
    /// Packets received and applied.
    pub(crate) packets: usize,
}

/// MAKE_RMA_PROGRESS: one pass over every window with active-message
/// targets (incoming packets, engine actions, barriers). Never blocks: if
/// another thread is inside the RMA state, this pass skips it. Inlined:
/// without such windows (every point-to-point progress pass calls it) it
/// is one load.
#[inline]
pub(crate) fn progress(dev: &Device) -> Result<Progressed, Error> {
    if dev.rma.live.load(Ordering::Acquire) == 0 {
        return Ok(Progressed::default());
    }
    progress_windows(dev)
}

/// Whether no window has active-message targets ([`progress`] is then
/// one load and does nothing).
#[inline]
pub(crate) fn idle(dev: &Device) -> bool {
    dev.rma.live.load(Ordering::Acquire) == 0
}

/// [`progress`] with windows alive.
fn progress_windows(dev: &Device) -> Result<Progressed, Error> {
    let mut g = match dev.rma.state.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::WouldBlock) => return Ok(Progressed::default()),
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
    };
    let st = &mut *g;
    let mut done = 0;
    let mut packets = 0;
    let mut ids = std::mem::take(&mut st.ids);
    ids.clear();
    ids.extend(st.polled.iter().copied());
    let r = (|| {
        for &win in &ids {
            packets += receive_packets(dev, st, win)?;
            poll_target_lock(st, win)?;
        }
        for _ in 0..8 {
            done += drain_actions(dev, st)?;
            let mut barriers = 0;
            for &win in &ids {
                if step_barrier(dev, st, win)? {
                    st.engine.handle_barrier_complete(win)?;
                    barriers += 1;
                }
            }
            if barriers == 0 {
                break;
            }
        }
        done += drain_actions(dev, st)?;
        Ok::<(), Error>(())
    })();
    st.ids = ids;
    r.map(|()| Progressed {
        completed: done,
        packets,
    })
}

fn receive_packets(dev: &Device, st: &mut RmaState, win: WinId) -> Result<usize, Error> {
    let Some(slot) = st.slots.get(win as usize).and_then(Option::as_ref) else {
        return Ok(0);
    };
    let mut n = 0;
    let spec = tm_proto::MatchSpec {
        context_id: slot.ctx,
        source: tm_proto::Source::Any,
        tag: tm_proto::Tag::Value(TAG_RMA),
    };
    let group = Arc::clone(&slot.group);
    let mut scratch = std::mem::take(&mut st.scratch);
    let r = (|| {
        for _ in 0..PACKETS_PER_PASS {
            let Some((world, len)) = dev.try_take(spec, &mut scratch)? else {
                break;
            };
            let from = group.of_world.get(world as usize).copied().unwrap_or(-1);
            let Some(bytes) = scratch.get_mut(..len).filter(|b| b.len() >= 8 && from >= 0) else {
                tracing::warn!(world, len, "stray RMA packet dropped");
                continue;
            };
            // The header's window id is the sender's engine id: use ours.
            bytes[4..8].copy_from_slice(&win.to_be_bytes());
            tracing::trace!(win, from, len, "RMA packet");
            st.engine
                .handle_packet(from as u32, bytes, &mut Mems(&mut st.slots))?;
            n += 1;
        }
        Ok::<(), Error>(())
    })();
    if scratch.capacity() > SCRATCH_KEEP {
        scratch = Vec::new();
    }
    st.scratch = scratch;
    r.map(|()| n)
}

/// Polls the shared-memory lock a window's target side asked for on behalf
/// of its active-message origins; reports the grant.
fn poll_target_lock(st: &mut RmaState, win: WinId) -> Result<(), Error> {
    let Some(slot) = st.slots.get_mut(win as usize).and_then(Option::as_mut) else {
        return Ok(());
    };
    let SlotMem::Direct(d) = &slot.mem else {
        return Ok(());
    };
    let entered = match slot.target_ticket {
        Some(OwnLock::Shared {
            ticket,
            held: false,
        }) => d
            .own_lock_try_shared(ticket)?
            .then_some(OwnLock::Shared { ticket, held: true }),
        Some(OwnLock::Exclusive { held: false }) => d
            .own_lock_try_exclusive()?
            .then_some(OwnLock::Exclusive { held: true }),
        _ => None,
    };
    if let Some(now) = entered {
        slot.target_ticket = Some(now);
        let exclusive = matches!(now, OwnLock::Exclusive { .. });
        st.engine
            .handle_target_lock_granted(win, exclusive, &mut Mems(&mut st.slots))?;
    }
    Ok(())
}

/// Runs the engine's actions (packets, barriers, results, completions, the
/// target side's shared-memory lock); returns how many reads and calls
/// completed.
pub(super) fn drain_actions(dev: &Device, st: &mut RmaState) -> Result<usize, Error> {
    let mut done = 0;
    while let Some(a) = st.engine.poll_action() {
        match a {
            Action::Send { to, bytes } => {
                let win = engine_win_of_send(&bytes);
                let Some(slot) = st.slots.get(win as usize).and_then(Option::as_ref) else {
                    tracing::warn!(to, "RMA packet of an unknown window not sent");
                    continue;
                };
                let world = slot.group.world.get(to as usize).copied().ok_or_else(|| {
                    Error::InvalidRank {
                        rank: to as i32,
                        size: slot.group.world.len() as i32,
                    }
                })?;
                let req = dev.start_send(
                    world,
                    TAG_RMA,
                    slot.ctx,
                    SendData::Owned(bytes),
                    Mode::Standard,
                    None,
                )?;
                req.free();
            }
            Action::Barrier { win } => {
                if let Ok(slot) = st.slot(win) {
                    slot.barriers_wanted += 1;
                    tracing::debug!(win, "window barrier requested");
                }
            }
            Action::Result { win, token, data } => {
                if let Some((c, src, into)) = st
                    .slots
                    .get_mut(win as usize)
                    .and_then(Option::as_mut)
                    .and_then(|s| s.results.remove(&token.0))
                {
                    let status = Status::new(src, ANY_TAG, data.len());
                    match into {
                        Some(mut buf) => {
                            let n = buf.len().min(data.len());
                            buf[..n].copy_from_slice(&data[..n]);
                            c.complete_with_buffer(status, buf);
                        }
                        None => c.complete_with_buffer(status, data),
                    }
                    done += 1;
                }
            }
            Action::Completed { win, call } => {
                tracing::debug!(win, ?call, "RMA call completed");
                done += 1;
            }
            Action::TargetLock { win, exclusive } => {
                // Polled by the next progress pass, not here: the engine may
                // replace a waiting exclusive request by a shared one before
                // this drain is over, and a grant must answer the latest.
                let slot = st.slot(win)?;
                if let SlotMem::Direct(d) = &slot.mem {
                    tracing::debug!(win, exclusive, "own lock asked for active-message origins");
                    slot.target_ticket = match slot.target_ticket {
                        None | Some(OwnLock::Exclusive { held: false }) if exclusive => {
                            Some(OwnLock::Exclusive { held: false })
                        }
                        None | Some(OwnLock::Exclusive { held: false }) => Some(OwnLock::Shared {
                            ticket: d.own_lock_ticket()?,
                            held: false,
                        }),
                        // Held: the request this one replaced was granted
                        // first (and reported so); it is stale.
                        Some(
                            held @ (OwnLock::Exclusive { held: true }
                            | OwnLock::Shared { held: true, .. }),
                        ) => {
                            tracing::debug!(win, exclusive, "stale own-lock request ignored");
                            Some(held)
                        }
                        // A waiting shared request (a ticket taken) is never
                        // replaced by the engine.
                        Some(other) => {
                            tracing::error!(win, ?other, exclusive, "own lock asked for again");
                            Some(other)
                        }
                    };
                }
            }
            Action::TargetUnlock { win, exclusive } => {
                let slot = st.slot(win)?;
                if let SlotMem::Direct(d) = &slot.mem {
                    slot.target_ticket = None;
                    d.own_lock_release(exclusive)?;
                }
            }
        }
    }
    Ok(done)
}

/// The window id in an outgoing packet's header (bytes 4..8).
pub(super) fn engine_win_of_send(bytes: &[u8]) -> WinId {
    match bytes.get(4..8) {
        Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
        _ => u32::MAX,
    }
}

/// Steps the window's barrier; `true` when one just completed.
fn step_barrier(dev: &Device, st: &mut RmaState, win: WinId) -> Result<bool, Error> {
    let Some(slot) = st.slots.get_mut(win as usize).and_then(Option::as_mut) else {
        return Ok(false);
    };
    if slot.barrier.is_none() && slot.barriers_wanted > 0 {
        slot.barriers_wanted -= 1;
        slot.barrier = Some(IBarrier {
            dist: 1,
            round: 0,
            reqs: None,
        });
    }
    let n = slot.group.world.len() as u32;
    let me = slot.rank;
    let Some(b) = slot.barrier.as_mut() else {
        return Ok(false);
    };
    loop {
        match &b.reqs {
            None => {
                if b.dist >= n {
                    slot.barrier = None;
                    tracing::debug!(win, "window barrier complete");
                    return Ok(true);
                }
                let to = (me + b.dist) % n;
                let from = (me + n - b.dist % n) % n;
                let tag = TAG_WIN_BARRIER + b.round;
                let world_to = slot.group.world.get(to as usize).copied().unwrap_or(0);
                let world_from = slot.group.world.get(from as usize).copied().unwrap_or(0);
                let spec = tm_proto::MatchSpec {
                    context_id: slot.coll,
                    source: tm_proto::Source::Rank(world_from),
                    tag: tm_proto::Tag::Value(tag),
                };
                let r =
                    dev.start_recv(spec, Vec::new(), RecvInto::Owned, Arc::clone(&slot.group))?;
                let s = dev.start_send(
                    world_to,
                    tag,
                    slot.coll,
                    SendData::Owned(Vec::new()),
                    Mode::Standard,
                    None,
                )?;
                b.reqs = Some((s, r));
            }
            Some((s, r)) => {
                if s.is_complete() && r.is_complete() {
                    b.reqs = None;
                    b.dist = b.dist.saturating_mul(2);
                    b.round += 1;
                } else {
                    return Ok(false);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_id_is_read_from_the_header() {
        let h = tm_proto::rma::RmaHeader::new(tm_proto::rma::RmaKind::Put, 0x0102_0304);
        assert_eq!(engine_win_of_send(&h.to_bytes()), 0x0102_0304);
        assert_eq!(engine_win_of_send(&[1, 2, 3]), u32::MAX);
    }
}
