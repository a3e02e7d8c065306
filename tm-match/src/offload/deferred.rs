//! Deferred receives: posted receives the model keeps outside its shadow
//! while nothing else is posted, queued or parked, so that a window of
//! receives made before their messages costs a queue push and pop each
//! instead of a matcher entry and a match.

use tm_proto::{Envelope, MatchSpec, Source, Tag};

use super::{HwState, Offload, Slot};
use crate::{Error, RecvId};

/// A deferred receive (its source is the model's `deferred_source`).
#[derive(Debug, Clone)]
pub(super) struct Deferred<R> {
    /// Its handle (reserved in the shadow: the one it keeps there).
    pub(super) id: RecvId,
    /// Its tag, or [`ANY_TAG`].
    pub(super) tag: u64,
    pub(super) ctx: u32,
    pub(super) recv: R,
}

/// [`Deferred::tag`] of an `ANY_TAG` receive (above every tag value).
const ANY_TAG: u64 = 1 << 32;

impl<R> Deferred<R> {
    /// Its spec, given the deferred receives' source.
    pub(super) fn spec(&self, source: u32) -> MatchSpec {
        MatchSpec {
            context_id: self.ctx,
            source: Source::Rank(source),
            tag: if self.tag == ANY_TAG {
                Tag::Any
            } else {
                Tag::Value(self.tag as u32)
            },
        }
    }

    /// Whether a message from the deferred receives' source with envelope
    /// `env` matches it (the source checked by the caller).
    #[inline(always)]
    fn takes(&self, env: &Envelope) -> bool {
        self.ctx == env.context_id && (self.tag == u64::from(env.tag) || self.tag == ANY_TAG)
    }
}

/// The receive a message would be matched to ([`Offload::peek_arrival`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeekedRecv<'a, R> {
    /// The receive's handle.
    pub id: RecvId,
    /// The receive.
    pub recv: &'a R,
    /// The engine holds it (or an add or delete for it is in flight).
    pub offloaded: bool,
    /// It is deferred ([`Offload::defer`]).
    pub deferred: bool,
}

impl<R, M> Offload<R, M> {
    /// Defers a receive (see [deferred receives](crate::offload#deferred-receives)): when `spec` names one
    /// source, nothing is posted, queued or parked, and every deferred
    /// receive names the same source, the receive is recorded in the
    /// deferred queue (never offered to the engine) and its handle returned.
    /// Otherwise `Err(recv)`, nothing changed: post it instead.
    #[inline(always)]
    pub fn defer(&mut self, spec: MatchSpec, recv: R) -> Result<RecvId, R> {
        let Source::Rank(source) = spec.source else {
            return Err(recv);
        };
        if !self.may_defer(source) {
            return Err(recv);
        }
        let tag = match spec.tag {
            Tag::Value(t) => u64::from(t),
            Tag::Any => ANY_TAG,
        };
        let id = self.shadow.reserve_posted();
        self.deferred_source = source;
        self.deferred.push_back(Deferred {
            id,
            tag,
            ctx: spec.context_id,
            recv,
        });
        self.stats.deferred += 1;
        Ok(id)
    }

    /// Whether [`Offload::defer`] would take a receive from `source` now:
    /// nothing posted, queued or parked, and every deferred receive names
    /// `source`. A caller with work to do before deferring (a look at the
    /// source's line) asks this first, for nothing changes it.
    #[inline(always)]
    pub fn may_defer(&self, source: u32) -> bool {
        // While receives are deferred the shadow is empty (see the rule):
        // only the source is left to check.
        if self.deferred.is_empty() {
            self.queues_empty()
        } else {
            source == self.deferred_source
        }
    }

    /// Deferred receives.
    #[inline]
    pub fn deferred_len(&self) -> usize {
        self.deferred.len()
    }

    /// The source every deferred receive names, while any exists.
    #[inline]
    pub fn deferred_source(&self) -> Option<u32> {
        (!self.deferred.is_empty()).then_some(self.deferred_source)
    }

    /// The oldest deferred receive: the one [`Offload::take_deferred`]
    /// offers the next message to.
    #[inline]
    pub fn deferred_front(&self) -> Option<&R> {
        self.deferred.front().map(|d| &d.recv)
    }

    /// The youngest deferred receive.
    #[inline]
    pub fn deferred_back(&self) -> Option<&R> {
        self.deferred.back().map(|d| &d.recv)
    }

    /// Offers the oldest deferred receive a message with envelope `env`:
    /// the next message of the deferred receives' source that the caller
    /// has not handed to the model (the caller offers that source's
    /// messages in order; each is either taken here or handed to the model).
    /// When the receive matches it, it takes it: the receive leaves the
    /// model, which changes exactly as after [`Offload::arrive`]
    /// (`from_engine = false`) or an engine
    /// [`EngineEvent::Unexpected`](super::EngineEvent::Unexpected)
    /// (`from_engine = true`) that completed that receive, and its handle
    /// and `R` are returned; no completion is queued (the caller delivers
    /// the message and completes the receive). Otherwise `None`, nothing
    /// changed: hand the message to the model as usual (another deferred
    /// receive may match it, or none).
    #[inline(always)]
    pub fn take_deferred(&mut self, env: &Envelope, from_engine: bool) -> Option<(RecvId, R)> {
        let d = self.deferred.front()?;
        if env.source != self.deferred_source || !d.takes(env) || self.shadow.posted_len() != 0 {
            return None;
        }
        let d = self.deferred.pop_front()?;
        self.stats.sw_matches += 1;
        if from_engine {
            self.counted();
        }
        Some((d.id, d.recv))
    }

    /// Moves every deferred receive into the posted queue, oldest first, as
    /// software-resident receives (never offered to the engine), under the
    /// handles they have: from then on they match as if they had been posted
    /// when they were deferred. [`Offload::post`], [`Offload::post_software`],
    /// [`Offload::arrive`] and an engine
    /// [`EngineEvent::Unexpected`](super::EngineEvent::Unexpected) do this
    /// first by themselves; a caller calls it before anything else that
    /// must see them posted (its own probes, say).
    ///
    /// # Errors
    /// [`Error::QueueFull`] from the matcher; the receives not moved yet stay
    /// deferred.
    pub fn post_deferred(&mut self) -> Result<(), Error> {
        let source = self.deferred_source;
        while let Some(d) = self.deferred.pop_front() {
            let spec = d.spec(source);
            let slot = Slot {
                recv: d.recv,
                state: HwState::Sw,
            };
            if let Err((e, slot)) = self.shadow.enqueue_reserved(d.id, spec, slot) {
                self.deferred.push_front(Deferred {
                    recv: slot.recv,
                    ..d
                });
                return Err(e);
            }
            self.sw.add(&spec);
            self.stats.deferred_posted += 1;
        }
        Ok(())
    }

    /// The receive a message with envelope `env` would be matched to if it
    /// arrived now (changing nothing): the oldest matching posted receive,
    /// or, while receives are deferred, the oldest matching deferred one.
    /// `None` when it would be queued, or while a message is parked (the
    /// parked message is matched first).
    pub fn peek_arrival(&self, env: &Envelope) -> Option<PeekedRecv<'_, R>> {
        if self.parked_len() != 0 {
            return None;
        }
        if !self.deferred.is_empty() {
            if env.source != self.deferred_source {
                return None;
            }
            let d = self.deferred.iter().find(|d| d.takes(env))?;
            return Some(PeekedRecv {
                id: d.id,
                recv: &d.recv,
                offloaded: false,
                deferred: true,
            });
        }
        let loc = self.shadow.find_posted(env)?;
        let slot = self.shadow.recv_at(loc);
        Some(PeekedRecv {
            id: self.shadow.posted_id(loc),
            recv: &slot.recv,
            offloaded: slot.state != HwState::Sw,
            deferred: false,
        })
    }

    /// Removes deferred receive `id`, if it is one.
    pub(super) fn cancel_deferred(&mut self, id: RecvId) -> Option<R> {
        let i = self.deferred.iter().position(|d| d.id == id)?;
        self.deferred.remove(i).map(|d| d.recv)
    }
}
