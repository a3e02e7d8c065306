//! A deterministic simulator of N processes running `rma-epoch` engines over
//! a network with per-pair FIFO channels whose deliveries interleave in a
//! seeded random order, plus a runner for RMA programs.
//!
//! Windows may have direct targets ([`Sim::create_window_split`]): ranks on
//! the same simulated node reach each other's memory directly, and the
//! simulator plays the direct backend: a model of the shared-memory ticket
//! lock per rank (readers by ticket, writers entering when idle) (checking at every grant that holders never conflict), the
//! fence barrier's arrival words, and the PSCW post/complete counters. A
//! started condition (a lock to take, a post to see, ...) is a pending
//! event that the random schedule fires once it holds.
#![allow(dead_code, clippy::unwrap_used, clippy::needless_range_loop)]

use std::collections::{BTreeMap, VecDeque};

use rma_epoch::{
    Action, Backends, Call, CallStatus, DirectAction, ElemType, Engine, Gate, GlobalConfig,
    LockHolder, PoolStats, Posted, Rank, TargetLock, WinId, WindowConfig,
};

/// xorshift64*: small, seeded, deterministic.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A model of `shmem_onesided::winsync::RwTicket`.
#[derive(Debug, Clone, Default)]
pub struct Ticket {
    next: u64,
    write: u64,
    read: u64,
}

impl Ticket {
    fn take(&mut self) -> u64 {
        self.next += 1;
        self.next - 1
    }
    /// Shared: `t` is the reader's ticket. Exclusive: writers take no
    /// ticket and enter only when the lock is idle (`try_exclusive_idle`).
    fn ready(&self, t: u64, exclusive: bool) -> bool {
        if exclusive {
            self.idle()
        } else {
            self.read == t
        }
    }
    fn enter(&mut self, exclusive: bool) {
        if exclusive {
            self.take();
        } else {
            self.read += 1;
        }
    }
    fn release(&mut self, exclusive: bool) {
        self.write += 1;
        if exclusive {
            self.read += 1;
        }
    }
    pub fn idle(&self) -> bool {
        self.write == self.next
    }
}

/// The shared memory of one window's direct backend, and each process's
/// bookkeeping of it (what the driver in `adi` keeps).
#[derive(Debug, Clone, Default)]
pub struct Shm {
    /// Simulated node of each rank.
    pub node: Vec<usize>,
    /// Each rank's window lock.
    pub locks: Vec<Ticket>,
    /// Who holds each rank's lock: (holder, exclusive); holder `n + r` is
    /// rank r's target side (for its active-message origins).
    pub holders: Vec<Vec<(usize, bool)>>,
    /// Fence arrivals, and each rank's fence count.
    pub fence: Vec<u64>,
    pub fence_no: Vec<u64>,
    /// post[origin][target], and what origin consumed of it.
    pub post: Vec<Vec<u64>>,
    pub post_seen: Vec<Vec<u64>>,
    /// complete[target][origin], and what target consumed of it.
    pub complete: Vec<Vec<u64>>,
    pub complete_seen: Vec<Vec<u64>>,
}

/// A direct-backend condition a process waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    Lock {
        target: usize,
        ticket: u64,
        exclusive: bool,
    },
    TargetLock {
        ticket: u64,
        exclusive: bool,
    },
    Barrier {
        no: u64,
    },
    Post {
        target: usize,
    },
    Complete {
        origin: usize,
    },
}

/// Synthetic tokens of direct reads (their results are known at once).
pub const DIRECT_TOKEN: u64 = 1 << 60;

pub struct Sim {
    pub n: usize,
    pub procs: Vec<Engine>,
    /// mem[rank][win]
    pub mem: Vec<Vec<Vec<u8>>>,
    chans: BTreeMap<(Rank, Rank), VecDeque<Vec<u8>>>,
    barrier_req: BTreeMap<WinId, Vec<u32>>,
    barrier_done: BTreeMap<WinId, u32>,
    barrier_events: Vec<(usize, WinId)>,
    pub rng: Rng,
    /// results[rank][token]
    pub results: Vec<BTreeMap<u64, Vec<u8>>>,
    /// Completed calls not yet consumed, per rank.
    pub completed: Vec<Vec<(WinId, Call)>>,
    pub delivered: u64,
    /// Packets sent so far (every `Action::Send`).
    pub sent: u64,
    pub max_in_flight: usize,
    /// Direct backend of the windows that have one.
    pub shm: BTreeMap<WinId, Shm>,
    /// Conditions each process waits for (started, not fired).
    pub polls: Vec<Vec<(WinId, Poll)>>,
    /// Direct operations applied so far.
    pub direct_ops: u64,
    next_direct_token: u64,
}

impl Sim {
    pub fn new(n: usize, seed: u64, global: GlobalConfig) -> Self {
        Sim {
            n,
            procs: (0..n).map(|_| Engine::new(global)).collect(),
            mem: vec![Vec::new(); n],
            chans: BTreeMap::new(),
            barrier_req: BTreeMap::new(),
            barrier_done: BTreeMap::new(),
            barrier_events: Vec::new(),
            rng: Rng::new(seed),
            results: vec![BTreeMap::new(); n],
            completed: vec![Vec::new(); n],
            delivered: 0,
            sent: 0,
            max_in_flight: 0,
            shm: BTreeMap::new(),
            polls: vec![Vec::new(); n],
            direct_ops: 0,
            next_direct_token: DIRECT_TOKEN,
        }
    }

    /// Creates a window on every rank, `size` bytes each, configured by `f`.
    pub fn create_window(&mut self, size: u64, f: impl Fn(&mut WindowConfig)) -> WinId {
        self.create_window_split(size, None, f)
    }

    /// [`Sim::create_window`] with direct targets: with `Some(k)`, rank `r`
    /// sits on simulated node `r % k` and reaches the ranks of its node
    /// directly (`Some(1)`: every rank).
    pub fn create_window_split(
        &mut self,
        size: u64,
        split: Option<usize>,
        f: impl Fn(&mut WindowConfig),
    ) -> WinId {
        let n = self.n;
        let mut id = 0;
        for r in 0..n {
            let mut cfg = WindowConfig::new(n as u32, r as u32, size);
            f(&mut cfg);
            let backends = match split {
                None => Backends::active_messages(),
                Some(k) => Backends::direct((0..n).filter(|q| q % k == r % k).map(|q| q as Rank)),
            };
            id = self.procs[r].create_window_with(cfg, backends).unwrap();
            let w = id as usize;
            if self.mem[r].len() <= w {
                self.mem[r].resize(w + 1, Vec::new());
            }
            self.mem[r][w] = vec![0u8; size as usize];
        }
        if let Some(k) = split {
            self.shm.insert(
                id,
                Shm {
                    node: (0..n).map(|r| r % k).collect(),
                    locks: vec![Ticket::default(); n],
                    holders: vec![Vec::new(); n],
                    fence: vec![0; n],
                    fence_no: vec![0; n],
                    post: vec![vec![0; n]; n],
                    post_seen: vec![vec![0; n]; n],
                    complete: vec![vec![0; n]; n],
                    complete_seen: vec![vec![0; n]; n],
                },
            );
        }
        id
    }

    /// Whether `p`'s program waits for its direct backend (a lock, a
    /// barrier, a post, a complete). Its target side's own lock request
    /// ([`Poll::TargetLock`]) is served by progress and blocks nothing.
    pub fn blocked(&self, p: usize) -> bool {
        self.polls[p]
            .iter()
            .any(|(_, q)| !matches!(q, Poll::TargetLock { .. }))
    }

    /// Delivers events until `p`'s program waits for nothing of its direct
    /// backend (as `adi` returns from a call only then).
    pub fn drive(&mut self, p: usize) {
        self.pump_all();
        for _ in 0..1_000_000 {
            if !self.blocked(p) {
                return;
            }
            if !self.deliver_one() {
                panic!("deadlock: rank {p} waits for {:?}", self.polls[p]);
            }
        }
        panic!("rank {p} never got {:?}", self.polls[p]);
    }

    /// A direct operation of `p` to `t` on window 0: the gate (driving the
    /// backend while it says wait), then the access. Returns the read's
    /// token.
    pub fn direct_op(&mut self, p: usize, t: usize, op: DirectOp) -> Result<u64, rma_epoch::Error> {
        loop {
            match self.procs[p].direct_access(0, t as Rank)? {
                Gate::Open => return Ok(self.apply_direct(p, 0, t, &op)),
                Gate::Wait => {
                    self.pump(p);
                    assert!(
                        self.blocked(p) || self.in_flight() > 0,
                        "gate waits for nothing"
                    );
                    if self.blocked(p) {
                        self.drive(p);
                    } else {
                        self.deliver_one();
                    }
                }
            }
        }
    }

    /// Whether `p` reaches `t` directly in `win`.
    pub fn is_direct(&self, p: usize, win: WinId, t: usize) -> bool {
        self.procs[p].is_direct(win, t as Rank)
    }

    fn shm(&mut self, win: WinId) -> &mut Shm {
        self.shm
            .get_mut(&win)
            .expect("a window with a direct backend")
    }

    /// Runs the direct backend's steps of `p`: one-shot ones at once,
    /// conditions into `polls[p]`.
    fn run_direct(&mut self, p: usize) {
        let wins: Vec<WinId> = self.shm.keys().copied().collect();
        for w in wins {
            while let Some(d) = self.procs[p].poll_direct(w) {
                let sh = self.shm(w);
                match d {
                    DirectAction::Lock { target, exclusive } => {
                        let ticket = if exclusive {
                            0
                        } else {
                            sh.locks[target as usize].take()
                        };
                        self.polls[p].push((
                            w,
                            Poll::Lock {
                                target: target as usize,
                                ticket,
                                exclusive,
                            },
                        ));
                    }
                    DirectAction::Unlock { target, exclusive } => {
                        release(sh, target as usize, p, exclusive);
                    }
                    DirectAction::Barrier => {
                        sh.fence_no[p] += 1;
                        sh.fence[p] = sh.fence_no[p];
                        let no = sh.fence_no[p];
                        self.polls[p].push((w, Poll::Barrier { no }));
                    }
                    DirectAction::Post { origin } => {
                        assert_eq!(sh.node[origin as usize], sh.node[p], "post across nodes");
                        sh.post[origin as usize][p] += 1;
                    }
                    DirectAction::AwaitPost { target } => {
                        let target = target as usize;
                        self.polls[p].push((w, Poll::Post { target }));
                    }
                    DirectAction::Complete { target } => {
                        assert_eq!(
                            sh.node[target as usize], sh.node[p],
                            "complete across nodes"
                        );
                        sh.complete[target as usize][p] += 1;
                    }
                    DirectAction::AwaitComplete { origin } => {
                        let origin = origin as usize;
                        self.polls[p].push((w, Poll::Complete { origin }));
                    }
                }
            }
            // The target side holds its shared-memory lock exactly while
            // active-message origins hold its lock, in their mode.
            let holder = self.procs[p].lock_holder(w).unwrap().clone();
            let tl = self.procs[p].target_lock(w).unwrap();
            match holder {
                LockHolder::Free => {}
                LockHolder::Shared(_) => {
                    assert_eq!(tl, TargetLock::Held { exclusive: false }, "rank {p}")
                }
                LockHolder::Exclusive(_) => {
                    assert_eq!(tl, TargetLock::Held { exclusive: true }, "rank {p}")
                }
            }
        }
    }

    /// Whether `p`'s poll `i` holds now.
    fn poll_ready(&self, p: usize, i: usize) -> bool {
        let (w, poll) = self.polls[p][i];
        let sh = &self.shm[&w];
        match poll {
            Poll::Lock {
                target,
                ticket,
                exclusive,
            } => sh.locks[target].ready(ticket, exclusive),
            Poll::TargetLock { ticket, exclusive } => sh.locks[p].ready(ticket, exclusive),
            Poll::Barrier { no } => sh.fence.iter().all(|f| *f >= no),
            Poll::Post { target } => sh.post[p][target] > sh.post_seen[p][target],
            Poll::Complete { origin } => sh.complete[p][origin] > sh.complete_seen[p][origin],
        }
    }

    /// Fires `p`'s poll `i` (which holds): consumes it and reports the event.
    fn fire(&mut self, p: usize, i: usize) {
        let (w, poll) = self.polls[p].swap_remove(i);
        let n = self.n;
        let sh = self.shm(w);
        match poll {
            Poll::Lock {
                target, exclusive, ..
            } => {
                sh.locks[target].enter(exclusive);
                hold(sh, target, p, exclusive);
                self.procs[p]
                    .handle_direct_lock_granted(w, target as Rank)
                    .unwrap();
            }
            Poll::TargetLock { exclusive, .. } => {
                sh.locks[p].enter(exclusive);
                hold(sh, p, n + p, exclusive);
                self.procs[p]
                    .handle_target_lock_granted(w, exclusive, &mut self.mem[p])
                    .unwrap();
            }
            Poll::Barrier { .. } => self.procs[p].handle_barrier_complete(w).unwrap(),
            Poll::Post { target } => {
                sh.post_seen[p][target] += 1;
                self.procs[p].handle_post(w, target as Rank).unwrap();
            }
            Poll::Complete { origin } => {
                sh.complete_seen[p][origin] += 1;
                self.procs[p].handle_complete(w, origin as Rank).unwrap();
            }
        }
        self.pump(p);
    }

    /// The polls that hold now: (process, index).
    fn ready_polls(&self) -> Vec<(usize, usize)> {
        (0..self.n)
            .flat_map(|p| (0..self.polls[p].len()).map(move |i| (p, i)))
            .filter(|&(p, i)| self.poll_ready(p, i))
            .collect()
    }

    /// Applies a direct operation of `p` to `t`'s memory now (after
    /// [`Gate::Open`]); a read's result is stored under a fresh token.
    pub fn apply_direct(&mut self, p: usize, win: WinId, t: usize, op: &DirectOp) -> u64 {
        self.direct_ops += 1;
        let m = &mut self.mem[t][win as usize];
        let cell =
            |m: &mut Vec<u8>, c: usize| u64::from_ne_bytes(m[c * 8..c * 8 + 8].try_into().unwrap());
        let set = |m: &mut Vec<u8>, c: usize, v: u64| {
            m[c * 8..c * 8 + 8].copy_from_slice(&v.to_ne_bytes())
        };
        let old = match *op {
            DirectOp::Put { cell: c, val } => {
                set(m, c, val);
                None
            }
            DirectOp::Get { cell: c } => Some(cell(m, c)),
            DirectOp::Sum {
                cell: c,
                val,
                fetch,
            } => {
                let o = cell(m, c);
                set(m, c, o.wrapping_add(val));
                fetch.then_some(o)
            }
            DirectOp::Cas {
                cell: c,
                val,
                compare,
            } => {
                let o = cell(m, c);
                if o == compare {
                    set(m, c, val);
                }
                Some(o)
            }
        };
        let tok = self.next_direct_token;
        self.next_direct_token += 1;
        if let Some(o) = old {
            self.results[p].insert(tok, o.to_ne_bytes().to_vec());
        }
        tok
    }

    /// Moves every action of `p` into the network / barrier / result tables.
    pub fn pump(&mut self, p: usize) {
        while let Some(a) = self.procs[p].poll_action() {
            match a {
                Action::Send { to, bytes } => {
                    self.sent += 1;
                    self.chans
                        .entry((p as Rank, to))
                        .or_default()
                        .push_back(bytes);
                }
                Action::Barrier { win } => {
                    let n = self.n;
                    let req = self.barrier_req.entry(win).or_insert_with(|| vec![0; n]);
                    req[p] += 1;
                    let min = *req.iter().min().unwrap();
                    let done = self.barrier_done.entry(win).or_insert(0);
                    while *done < min {
                        *done += 1;
                        for r in 0..n {
                            self.barrier_events.push((r, win));
                        }
                    }
                }
                Action::Result { token, data, .. } => {
                    assert!(
                        self.results[p].insert(token.0, data).is_none(),
                        "result delivered twice"
                    );
                }
                Action::Completed { win, call } => self.completed[p].push((win, call)),
                Action::TargetLock { win, exclusive } => {
                    // A waiting exclusive request may be replaced (it holds
                    // no ticket); a shared one never is.
                    if let Some(i) = self.polls[p]
                        .iter()
                        .position(|(w, q)| *w == win && matches!(q, Poll::TargetLock { .. }))
                    {
                        assert!(
                            matches!(
                                self.polls[p][i].1,
                                Poll::TargetLock {
                                    exclusive: true,
                                    ..
                                }
                            ),
                            "rank {p}: a waiting shared own-lock request replaced"
                        );
                        self.polls[p].swap_remove(i);
                    }
                    let ticket = if exclusive {
                        0
                    } else {
                        self.shm(win).locks[p].take()
                    };
                    self.polls[p].push((win, Poll::TargetLock { ticket, exclusive }));
                }
                Action::TargetUnlock { win, exclusive } => {
                    let n = self.n;
                    release(self.shm(win), p, n + p, exclusive);
                }
            }
        }
        if !self.shm.is_empty() {
            self.run_direct(p);
        }
        let inflight: usize = self.chans.values().map(|q| q.len()).sum();
        self.max_in_flight = self.max_in_flight.max(inflight);
    }

    pub fn pump_all(&mut self) {
        for p in 0..self.n {
            self.pump(p);
        }
    }

    pub fn in_flight(&self) -> usize {
        self.chans.values().map(|q| q.len()).sum::<usize>()
            + self.barrier_events.len()
            + self.ready_polls().len()
    }

    /// Delivers one random pending event; false if there is none.
    pub fn deliver_one(&mut self) -> bool {
        let live: Vec<(Rank, Rank)> = self
            .chans
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
            .collect();
        let ready = self.ready_polls();
        let total = live.len() + self.barrier_events.len() + ready.len();
        if total == 0 {
            return false;
        }
        let i = self.rng.below(total);
        if i >= live.len() + self.barrier_events.len() {
            let (p, k) = ready[i - live.len() - self.barrier_events.len()];
            self.fire(p, k);
        } else if i < live.len() {
            let (from, to) = live[i];
            let bytes = self
                .chans
                .get_mut(&(from, to))
                .unwrap()
                .pop_front()
                .unwrap();
            self.procs[to as usize]
                .handle_packet(from, &bytes, &mut self.mem[to as usize])
                .unwrap();
            self.pump(to as usize);
        } else {
            let (r, win) = self.barrier_events.swap_remove(i - live.len());
            self.procs[r].handle_barrier_complete(win).unwrap();
            self.pump(r);
        }
        self.delivered += 1;
        true
    }

    /// Delivers until nothing is in flight (or the budget runs out).
    pub fn settle(&mut self, budget: u64) {
        self.pump_all();
        let mut n = 0;
        while self.deliver_one() {
            n += 1;
            assert!(n < budget, "network did not settle");
        }
    }

    /// Drives the network until `p` has completed `call` on `win`.
    pub fn wait_call(&mut self, p: usize, win: WinId, call: Call) {
        self.pump_all();
        for _ in 0..1_000_000 {
            if let Some(i) = self.completed[p].iter().position(|c| *c == (win, call)) {
                self.completed[p].remove(i);
                return;
            }
            if !self.deliver_one() {
                panic!("deadlock: rank {p} waits for {call:?} with nothing in flight");
            }
        }
        panic!("rank {p} never completed {call:?}");
    }

    /// Completes a call that returned `st` (drives the network if pending).
    pub fn finish(&mut self, p: usize, win: WinId, call: Call, st: CallStatus) {
        if st == CallStatus::Pending {
            self.wait_call(p, win, call);
        } else {
            self.pump(p);
        }
    }

    pub fn read_u64(&self, rank: usize, win: WinId, cell: usize) -> u64 {
        let m = &self.mem[rank][win as usize];
        u64::from_ne_bytes(m[cell * 8..cell * 8 + 8].try_into().unwrap())
    }

    pub fn write_u64(&mut self, rank: usize, win: WinId, cell: usize, v: u64) {
        let m = &mut self.mem[rank][win as usize];
        m[cell * 8..cell * 8 + 8].copy_from_slice(&v.to_ne_bytes());
    }

    pub fn result_u64(&self, rank: usize, posted: Posted) -> u64 {
        let d = &self.results[rank][&posted.token.0];
        u64::from_ne_bytes(d[..8].try_into().unwrap())
    }

    pub fn pools_ok(&self) {
        for (r, e) in self.procs.iter().enumerate() {
            let (go, gt) = e.global_pools();
            check_pool(go, r);
            check_pool(gt, r);
            let mut w = 0;
            while e.has_window(w) {
                let (o, t) = e.window_pools(w).unwrap();
                check_pool(o, r);
                check_pool(t, r);
                w += 1;
            }
        }
    }
}

/// A direct operation (cells are u64).
#[derive(Debug, Clone, Copy)]
pub enum DirectOp {
    Put { cell: usize, val: u64 },
    Get { cell: usize },
    Sum { cell: usize, val: u64, fetch: bool },
    Cas { cell: usize, val: u64, compare: u64 },
}

/// Records `holder`'s grant of `target`'s lock, checking that no holder
/// conflicts.
fn hold(sh: &mut Shm, target: usize, holder: usize, exclusive: bool) {
    let h = &mut sh.holders[target];
    if exclusive {
        assert!(
            h.is_empty(),
            "exclusive lock of {target} granted to {holder} while held by {h:?}"
        );
    } else {
        assert!(
            h.iter().all(|(_, x)| !x),
            "shared lock of {target} granted to {holder} while held exclusively by {h:?}"
        );
    }
    h.push((holder, exclusive));
}

fn release(sh: &mut Shm, target: usize, holder: usize, exclusive: bool) {
    let h = &mut sh.holders[target];
    let i = h
        .iter()
        .position(|x| *x == (holder, exclusive))
        .unwrap_or_else(|| panic!("{holder} releases a lock of {target} it does not hold: {h:?}"));
    h.swap_remove(i);
    sh.locks[target].release(exclusive);
}

fn check_pool(s: PoolStats, r: usize) {
    assert!(s.in_use <= s.capacity, "rank {r}: pool over capacity {s:?}");
    assert!(
        s.high_water <= s.capacity,
        "rank {r}: pool high water over capacity {s:?}"
    );
    assert!(
        s.constructed <= s.capacity,
        "rank {r}: pool constructed over capacity {s:?}"
    );
}

// ---------------------------------------------------------------------------
// RMA programs

/// Window layout of the program tests (u64 cells): `[0, n)` put cells (cell p
/// written only by rank p), `n, n+1` accumulate cells (SUM by everybody),
/// `n+2, n+3` constants (`rank * 1000 + i`, never written).
pub fn cells(n: usize) -> usize {
    n + 4
}

pub fn const_value(rank: usize, i: usize) -> u64 {
    rank as u64 * 1000 + i as u64
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Put {
        target: usize,
        val: u64,
    },
    Get {
        target: usize,
        own: bool,
    },
    Acc {
        target: usize,
        cell: usize,
        val: u64,
    },
    GetAcc {
        target: usize,
        cell: usize,
        val: u64,
    },
    Fop {
        target: usize,
        cell: usize,
        val: u64,
    },
    Cas {
        target: usize,
        val: u64,
    },
}

impl Op {
    pub fn target(&self) -> usize {
        match *self {
            Op::Put { target, .. }
            | Op::Get { target, .. }
            | Op::Acc { target, .. }
            | Op::GetAcc { target, .. }
            | Op::Fop { target, .. }
            | Op::Cas { target, .. } => target,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Fence(u32),
    Post(Vec<Rank>),
    Start(Vec<Rank>),
    Complete,
    Wait,
    Lock {
        target: usize,
        exclusive: bool,
        nocheck: bool,
    },
    Unlock(usize),
    LockAll(bool),
    UnlockAll,
    Flush(usize),
    FlushLocal(usize),
    FlushAll,
    FlushLocalAll,
    Op(Op),
    /// A simulator-level barrier between phases (not an engine call).
    Barrier,
}

/// Runs one program per rank on window 0 (created by the caller with
/// `cells(n) * 8` bytes), in a random interleaving, and checks every read
/// against the sequential specification. Returns the number of events.
pub fn run_programs(sim: &mut Sim, programs: &[Vec<Step>], budget: u64) -> Result<u64, String> {
    let n = sim.n;
    let win: WinId = 0;
    // Initial memory: constants.
    for r in 0..n {
        for i in 0..2 {
            sim.write_u64(r, win, n + 2 + i, const_value(r, i));
        }
    }
    // own[p][t]: what rank p last wrote into its cell on target t.
    let mut own = vec![vec![0u64; n]; n];
    let mut acc = vec![[0u64; 2]; n];
    let mut expect: Vec<BTreeMap<u64, u64>> = vec![BTreeMap::new(); n];
    let mut pc = vec![0usize; n];
    let mut waiting: Vec<Option<Call>> = vec![None; n];
    let mut at_barrier = vec![false; n];
    let mut events = 0u64;
    loop {
        sim.pump_all();
        // Consume completions.
        for p in 0..n {
            if let Some(c) = waiting[p] {
                if let Some(i) = sim.completed[p].iter().position(|x| *x == (win, c)) {
                    sim.completed[p].remove(i);
                    waiting[p] = None;
                }
            }
        }
        if at_barrier
            .iter()
            .enumerate()
            .all(|(p, b)| *b || pc[p] >= programs[p].len())
            && at_barrier.iter().any(|b| *b)
        {
            for p in 0..n {
                if at_barrier[p] {
                    at_barrier[p] = false;
                    pc[p] += 1;
                }
            }
        }
        // A process waiting for its direct backend (a lock, a barrier, a
        // post) does nothing else, as in adi.
        let runnable: Vec<usize> = (0..n)
            .filter(|&p| {
                waiting[p].is_none()
                    && !sim.blocked(p)
                    && !at_barrier[p]
                    && pc[p] < programs[p].len()
            })
            .collect();
        let net = sim.in_flight();
        if runnable.is_empty() && net == 0 {
            let done = (0..n).all(|p| {
                pc[p] >= programs[p].len() && waiting[p].is_none() && sim.polls[p].is_empty()
            });
            if done {
                break;
            }
            return Err(format!(
                "deadlock: pc={pc:?} waiting={waiting:?} at_barrier={at_barrier:?} polls={:?} \
                 holders={:?} locks={:?}",
                sim.polls,
                sim.shm.get(&win).map(|s| s.holders.clone()),
                sim.shm.get(&win).map(|s| s.locks.clone()),
            ));
        }
        events += 1;
        if events > budget {
            return Err(format!("budget exhausted: pc={pc:?} waiting={waiting:?}"));
        }
        let pick = sim.rng.below(runnable.len() + usize::from(net > 0) * 2);
        if pick >= runnable.len() {
            sim.deliver_one();
            sim.pools_ok();
            continue;
        }
        let p = runnable[pick];
        let step = programs[p][pc[p]].clone();
        if step == Step::Barrier {
            at_barrier[p] = true;
            continue;
        }
        if let Step::Op(op) = &step {
            let t = op.target();
            if sim.is_direct(p, win, t) {
                match sim.procs[p].direct_access(win, t as Rank) {
                    Ok(Gate::Wait) => {
                        // Run the backend's steps; retried when they fired.
                        sim.pump(p);
                        continue;
                    }
                    Ok(Gate::Open) => {}
                    Err(err) => return Err(format!("rank {p} step {step:?}: {err}")),
                }
                pc[p] += 1;
                let d = match *op {
                    Op::Put { target, val } => {
                        own[p][target] = val;
                        DirectOp::Put { cell: p, val }
                    }
                    Op::Get { target, own: o } => {
                        let (cell, v) = if o {
                            (p, own[p][target])
                        } else {
                            (n + 2, const_value(target, 0))
                        };
                        let tok = sim.apply_direct(p, win, t, &DirectOp::Get { cell });
                        expect[p].insert(tok, v);
                        continue;
                    }
                    Op::Acc { target, cell, val } => {
                        acc[target][cell] = acc[target][cell].wrapping_add(val);
                        DirectOp::Sum {
                            cell: n + cell,
                            val,
                            fetch: false,
                        }
                    }
                    Op::GetAcc { target, cell, val } | Op::Fop { target, cell, val } => {
                        acc[target][cell] = acc[target][cell].wrapping_add(val);
                        DirectOp::Sum {
                            cell: n + cell,
                            val,
                            fetch: true,
                        }
                    }
                    Op::Cas { target, val } => {
                        let old = own[p][target];
                        own[p][target] = val;
                        let tok = sim.apply_direct(
                            p,
                            win,
                            t,
                            &DirectOp::Cas {
                                cell: p,
                                val,
                                compare: old,
                            },
                        );
                        expect[p].insert(tok, old);
                        continue;
                    }
                };
                sim.apply_direct(p, win, t, &d);
                continue;
            }
        }
        pc[p] += 1;
        let e = &mut sim.procs[p];
        let (st, call) = match &step {
            Step::Fence(a) => (e.fence(win, *a), Call::Fence),
            Step::Post(g) => (e.post(win, g, 0), Call::Wait),
            Step::Start(g) => (e.start(win, g, 0), Call::Complete),
            Step::Complete => (e.complete(win), Call::Complete),
            Step::Wait => (e.wait(win), Call::Wait),
            Step::Lock {
                target,
                exclusive,
                nocheck,
            } => (
                e.lock(
                    win,
                    *exclusive,
                    *target as Rank,
                    if *nocheck {
                        rma_epoch::assert::NOCHECK
                    } else {
                        0
                    },
                ),
                Call::Lock,
            ),
            Step::Unlock(t) => (e.unlock(win, *t as Rank), Call::Unlock),
            Step::LockAll(nc) => (
                e.lock_all(win, if *nc { rma_epoch::assert::NOCHECK } else { 0 }),
                Call::UnlockAll,
            ),
            Step::UnlockAll => (e.unlock_all(win), Call::UnlockAll),
            Step::Flush(t) => (e.flush(win, *t as Rank), Call::Flush),
            Step::FlushLocal(t) => (e.flush_local(win, *t as Rank), Call::FlushLocal),
            Step::FlushAll => (e.flush_all(win), Call::FlushAll),
            Step::FlushLocalAll => (e.flush_local_all(win), Call::FlushLocalAll),
            Step::Op(op) => {
                let t = op.target();
                let r = match *op {
                    Op::Put { target, val } => {
                        own[p][target] = val;
                        e.put(win, target as Rank, (p * 8) as u64, &val.to_ne_bytes())
                    }
                    Op::Get { target, own: o } => {
                        let (cell, v) = if o {
                            (p, own[p][target])
                        } else {
                            (n + 2, const_value(target, 0))
                        };
                        let r = e.get(win, target as Rank, (cell * 8) as u64, 8);
                        if let Ok(posted) = &r {
                            expect[p].insert(posted.token.0, v);
                        }
                        r
                    }
                    Op::Acc { target, cell, val } => {
                        acc[target][cell] = acc[target][cell].wrapping_add(val);
                        e.accumulate(
                            win,
                            target as Rank,
                            ((n + cell) * 8) as u64,
                            &val.to_ne_bytes(),
                            ElemType::U64,
                            rma_epoch::AccOp::Sum,
                        )
                    }
                    Op::GetAcc { target, cell, val } => {
                        acc[target][cell] = acc[target][cell].wrapping_add(val);
                        e.get_accumulate(
                            win,
                            target as Rank,
                            ((n + cell) * 8) as u64,
                            &val.to_ne_bytes(),
                            ElemType::U64,
                            rma_epoch::AccOp::Sum,
                        )
                    }
                    Op::Fop { target, cell, val } => {
                        acc[target][cell] = acc[target][cell].wrapping_add(val);
                        e.fetch_and_op(
                            win,
                            target as Rank,
                            ((n + cell) * 8) as u64,
                            &val.to_ne_bytes(),
                            ElemType::U64,
                            rma_epoch::AccOp::Sum,
                        )
                    }
                    Op::Cas { target, val } => {
                        let old = own[p][target];
                        own[p][target] = val;
                        let r = e.compare_and_swap(
                            win,
                            target as Rank,
                            (p * 8) as u64,
                            &val.to_ne_bytes(),
                            &old.to_ne_bytes(),
                            ElemType::U64,
                        );
                        if let Ok(posted) = &r {
                            expect[p].insert(posted.token.0, old);
                        }
                        r
                    }
                };
                let _ = t;
                (r.map(|p| p.status), Call::Op)
            }
            Step::Barrier => unreachable!(),
        };
        match st {
            Ok(CallStatus::Done) => {}
            Ok(CallStatus::Pending) => waiting[p] = Some(call),
            Err(err) => return Err(format!("rank {p} step {step:?}: {err}")),
        }
    }
    // Sequential specification.
    for t in 0..n {
        for p in 0..n {
            let got = sim.read_u64(t, win, p);
            if got != own[p][t] {
                return Err(format!(
                    "target {t} cell of rank {p}: got {got}, want {}",
                    own[p][t]
                ));
            }
        }
        for c in 0..2 {
            let got = sim.read_u64(t, win, n + c);
            if got != acc[t][c] {
                return Err(format!(
                    "target {t} acc cell {c}: got {got}, want {}",
                    acc[t][c]
                ));
            }
            let k = sim.read_u64(t, win, n + 2 + c);
            if k != const_value(t, c) {
                return Err(format!("target {t} constant {c} overwritten: {k}"));
            }
        }
    }
    for p in 0..n {
        for (tok, want) in &expect[p] {
            let Some(d) = sim.results[p].get(tok) else {
                return Err(format!("rank {p}: no result for token {tok}"));
            };
            let got = u64::from_ne_bytes(d[..8].try_into().unwrap());
            if got != *want {
                return Err(format!("rank {p}: read token {tok} got {got}, want {want}"));
            }
        }
    }
    // Every epoch closed, every lock released, nothing outstanding.
    if let Some(sh) = sim.shm.get(&win) {
        for (t, l) in sh.locks.iter().enumerate() {
            if !l.idle() || !sh.holders[t].is_empty() {
                return Err(format!("lock of {t} still held: {:?}", sh.holders[t]));
            }
        }
    }
    for p in 0..n {
        if !sim.procs[p].is_quiescent(win) {
            return Err(format!(
                "rank {p} not quiescent: access {:?}, lock {:?}, queue {:?}",
                sim.procs[p].access_state(win),
                sim.procs[p].lock_holder(win),
                sim.procs[p].lock_queue(win)
            ));
        }
        let (o, t) = sim.procs[p].window_pools(win).unwrap();
        let (go, gt) = sim.procs[p].global_pools();
        if o.in_use + go.in_use + t.in_use + gt.in_use != 0 {
            return Err(format!(
                "rank {p} leaks elements: {o:?} {t:?} {go:?} {gt:?}"
            ));
        }
    }
    Ok(events)
}

// ---------------------------------------------------------------------------
// Synchronous helpers for scenario tests (window 0).

/// Calls `f` on every rank first (a collective), then drives each to completion.
pub fn all(
    sim: &mut Sim,
    call: Call,
    f: impl Fn(&mut Engine, usize) -> Result<CallStatus, rma_epoch::Error>,
) {
    let sts: Vec<CallStatus> = (0..sim.n)
        .map(|r| f(&mut sim.procs[r], r).unwrap())
        .collect();
    for (r, st) in sts.into_iter().enumerate() {
        sim.finish(r, 0, call, st);
    }
}

/// One rank's call, driven to completion.
pub fn one(
    sim: &mut Sim,
    r: usize,
    call: Call,
    f: impl FnOnce(&mut Engine) -> Result<CallStatus, rma_epoch::Error>,
) {
    let st = f(&mut sim.procs[r]).unwrap();
    sim.finish(r, 0, call, st);
}

/// One rank's RMA op, driven until it entered the op table.
pub fn op(
    sim: &mut Sim,
    r: usize,
    f: impl FnOnce(&mut Engine) -> Result<Posted, rma_epoch::Error>,
) -> Posted {
    let p = f(&mut sim.procs[r]).unwrap();
    sim.finish(r, 0, Call::Op, p.status);
    p
}

pub fn u64b(v: u64) -> [u8; 8] {
    v.to_ne_bytes()
}
