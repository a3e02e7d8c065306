//! The prefix check of the bounded-prefix rule: which software-resident
//! receives could match a message a new receive matches.

use tm_proto::{MatchSpec, Source, Tag};

use crate::hash::FastMap;

/// A software-resident receive's spec as scalars (`src`/`tag` are 0 where
/// `shape` wildcards them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SwSpec {
    pub(super) ctx: u32,
    pub(super) src: u32,
    pub(super) tag: u32,
    pub(super) shape: u8,
}

impl SwSpec {
    #[inline]
    pub(super) fn of(spec: &MatchSpec) -> Self {
        let (src, sw) = match spec.source {
            Source::Rank(s) => (s, 0),
            Source::Any => (0, 2),
        };
        let (tag, tw) = match spec.tag {
            Tag::Value(t) => (t, 0),
            Tag::Any => (0, 1),
        };
        SwSpec {
            ctx: spec.context_id,
            src,
            tag,
            shape: sw | tw,
        }
    }

    /// Whether some message matches both.
    #[inline]
    pub(super) fn overlaps(&self, o: &SwSpec) -> bool {
        let wild = self.shape | o.shape;
        self.ctx == o.ctx
            && (wild & 2 != 0 || self.src == o.src)
            && (wild & 1 != 0 || self.tag == o.tag)
    }
}

/// Software-resident receives, for the O(1) prefix check ("does an older
/// receive that stays in software overlap this one?").
///
/// Up to [`SW_SMALL`] of them are a plain inline list scanned in full (no
/// hashing, no allocation: the common case of a few receives in flight);
/// beyond that, counters by overlap class in a hash map, the same four
/// shapes as the matcher. Counters that drop to zero stay in the map (no
/// insert/remove churn when a key is reused) and are swept once they
/// outnumber the receives. The form goes back to the list when the last
/// receive leaves.
///
/// The counters are only read by eligible posts. When more than
/// `2·len + 64` updates go by without a query (e.g. a stream of small
/// receives that are never offloaded), the counter form is dropped and only
/// the number of receives is kept (*stale*); the next query rebuilds it from
/// the shadow in O(len), which those updates paid for (amortized O(1)).
#[derive(Debug, Clone, Default)]
pub(super) struct SwIndex {
    pub(super) small: smallvec::SmallVec<[SwSpec; SW_SMALL]>,
    pub(super) indexed: bool,
    /// Receives in the counter form (indexed form only).
    pub(super) len: usize,
    pub(super) counts: FastMap<u128, u32>,
    /// Map entries at zero.
    pub(super) zero: usize,
    /// Updates of the counter form since the last query.
    pub(super) idle: usize,
    /// Counter form dropped: `len` is exact, `counts` empty; the next query
    /// must [`rebuild`](Self::rebuild) first.
    pub(super) stale: bool,
}

/// Software-resident receives [`SwIndex`] keeps as a list.
pub(super) const SW_SMALL: usize = 16;

// Counter kinds.
pub(super) const E_ST: u32 = 0; // exact (s,t)
pub(super) const E_SSHAPE: u32 = 1; // (s,*) by s
pub(super) const E_TSHAPE: u32 = 2; // (*,t) by t
pub(super) const E_BYSRC: u32 = 3; // exact or (s,*), by s
pub(super) const E_BYTAG: u32 = 4; // exact or (*,t), by t
pub(super) const E_CTXSHAPE: u32 = 5; // per ctx, per shape (in the src field)
pub(super) const E_CTX: u32 = 6; // per ctx

/// Packed counter key: kind, context, and two fields.
#[inline]
pub(super) fn ckey(kind: u32, c: u32, a: u32, b: u32) -> u128 {
    (u128::from(kind) << 96) | (u128::from(c) << 64) | (u128::from(a) << 32) | u128::from(b)
}

impl SwIndex {
    /// The counters a receive contributes to (4 or 5 of them).
    #[inline]
    pub(super) fn keys(s: &SwSpec) -> ([u128; 5], usize) {
        let c = s.ctx;
        let shape = ckey(E_CTXSHAPE, c, u32::from(s.shape), 0);
        let ctx = ckey(E_CTX, c, 0, 0);
        match s.shape {
            0 => (
                [
                    ckey(E_ST, c, s.src, s.tag),
                    ckey(E_BYSRC, c, s.src, 0),
                    ckey(E_BYTAG, c, 0, s.tag),
                    shape,
                    ctx,
                ],
                5,
            ),
            1 => (
                [
                    ckey(E_SSHAPE, c, s.src, 0),
                    ckey(E_BYSRC, c, s.src, 0),
                    shape,
                    ctx,
                    0,
                ],
                4,
            ),
            2 => (
                [
                    ckey(E_TSHAPE, c, 0, s.tag),
                    ckey(E_BYTAG, c, 0, s.tag),
                    shape,
                    ctx,
                    0,
                ],
                4,
            ),
            _ => ([shape, ctx, 0, 0, 0], 2),
        }
    }

    /// Records a software-resident receive. The stale counter form (the
    /// usual one past [`SW_SMALL`] receives when nothing is offloaded)
    /// only counts, so that check comes first, inlined; `stale` implies
    /// `indexed`.
    #[inline(always)]
    pub(super) fn add(&mut self, spec: &MatchSpec) {
        if self.stale {
            self.len += 1;
            return;
        }
        self.add_fresh(spec);
    }

    #[inline(always)]
    pub(super) fn add_fresh(&mut self, spec: &MatchSpec) {
        let s = SwSpec::of(spec);
        if !self.indexed {
            if self.small.len() < SW_SMALL {
                self.small.push(s);
                return;
            }
            self.migrate();
            if self.stale {
                self.len += 1;
                return;
            }
        }
        self.count_in(&s);
        self.touched();
    }

    /// One update of the counter form: drop it if nobody has read it for
    /// long.
    #[inline]
    pub(super) fn touched(&mut self) {
        self.idle += 1;
        if self.indexed && self.idle > 2 * self.len + 64 {
            self.counts.clear();
            self.zero = 0;
            self.stale = true;
        }
    }

    /// Whether the next query needs [`Self::rebuild`].
    #[inline]
    pub(super) fn is_stale(&self) -> bool {
        self.stale
    }

    /// Rebuilds from every software-resident receive (the shadow's, which
    /// are exactly the ones added and not removed).
    #[inline(never)]
    pub(super) fn rebuild(&mut self, all: impl IntoIterator<Item = MatchSpec>) {
        self.small.clear();
        self.counts.clear();
        self.indexed = false;
        self.len = 0;
        self.zero = 0;
        self.idle = 0;
        self.stale = false;
        for spec in all {
            let s = SwSpec::of(&spec);
            if !self.indexed {
                if self.small.len() < SW_SMALL {
                    self.small.push(s);
                    continue;
                }
                // Past the list: the counter form, built now (a query waits).
                self.indexed = true;
                for x in core::mem::take(&mut self.small) {
                    self.count_in(&x);
                }
            }
            self.count_in(&s);
        }
        self.idle = 0;
    }

    /// The list is full: switch to the counter form, built lazily. The
    /// counters are only worth keeping while someone queries them, so the
    /// form starts stale and the first query rebuilds it (O(len), paid for
    /// by the more than [`SW_SMALL`] adds since the list form began). Many
    /// receives posted and matched with no offload decision in between
    /// (small messages) then cost no hashing at all.
    #[inline(never)]
    pub(super) fn migrate(&mut self) {
        self.indexed = true;
        self.stale = true;
        self.counts.clear();
        self.zero = 0;
        self.idle = 0;
        self.len = self.small.len();
        self.small.clear();
    }

    #[inline]
    pub(super) fn count_in(&mut self, s: &SwSpec) {
        let (keys, n) = Self::keys(s);
        for k in &keys[..n] {
            match self.counts.entry(*k) {
                std::collections::hash_map::Entry::Occupied(mut e) => {
                    let c = e.get_mut();
                    if *c == 0 {
                        self.zero -= 1;
                    }
                    *c += 1;
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(1);
                }
            }
        }
        self.len += 1;
    }

    /// Forgets a software-resident receive (stale form first, inlined, as
    /// in [`Self::add`]).
    #[inline(always)]
    pub(super) fn remove(&mut self, spec: &MatchSpec) {
        if self.stale {
            self.len -= 1;
            if self.len == 0 {
                self.stale = false;
                self.indexed = false;
                self.idle = 0;
            }
            return;
        }
        self.remove_fresh(spec);
    }

    #[inline(always)]
    pub(super) fn remove_fresh(&mut self, spec: &MatchSpec) {
        let s = SwSpec::of(spec);
        if !self.indexed {
            if let Some(pos) = self.small.iter().position(|x| *x == s) {
                self.small.swap_remove(pos);
            }
            return;
        }
        self.count_out(&s);
        self.touched();
    }

    #[inline(never)]
    pub(super) fn count_out(&mut self, s: &SwSpec) {
        let (keys, n) = Self::keys(s);
        for k in &keys[..n] {
            if let Some(c) = self.counts.get_mut(k) {
                *c -= 1;
                if *c == 0 {
                    self.zero += 1;
                }
            }
        }
        self.len -= 1;
        if self.len == 0 {
            self.indexed = false;
            self.counts.clear();
            self.zero = 0;
            self.idle = 0;
        } else if self.zero > 4 * self.len + 64 {
            self.counts.retain(|_, c| *c > 0);
            self.zero = 0;
        }
    }

    #[inline]
    pub(super) fn get(&self, k: u128) -> u32 {
        self.counts.get(&k).copied().unwrap_or(0)
    }

    /// Whether a software-resident receive overlaps `spec` (some message
    /// matches both). Not stale: [`Self::rebuild`] first.
    #[inline]
    pub(super) fn overlaps(&mut self, spec: &MatchSpec) -> bool {
        let s = SwSpec::of(spec);
        if !self.indexed {
            return self.small.iter().any(|x| x.overlaps(&s));
        }
        debug_assert!(!self.stale, "tm-match: stale prefix index queried");
        self.idle = 0;
        let c = s.ctx;
        let shape = |k: u8| self.get(ckey(E_CTXSHAPE, c, u32::from(k), 0));
        let n = match s.shape {
            0 => {
                self.get(ckey(E_ST, c, s.src, s.tag))
                    + self.get(ckey(E_SSHAPE, c, s.src, 0))
                    + self.get(ckey(E_TSHAPE, c, 0, s.tag))
                    + shape(3)
            }
            1 => self.get(ckey(E_BYSRC, c, s.src, 0)) + shape(2) + shape(3),
            2 => self.get(ckey(E_BYTAG, c, 0, s.tag)) + shape(1) + shape(3),
            _ => self.get(ckey(E_CTX, c, 0, 0)),
        };
        n > 0
    }
}
