//! A reference matcher written literally from the MPI rules: two vectors and
//! linear scans. It is slow on purpose and obviously right, and exists so that
//! [`Matcher`](crate::Matcher) (and any other engine, e.g. a driver's) can be
//! checked against it operation by operation.
//!
//! The rules it encodes (MPI-4.1 §3.5 "Semantics of Point-to-Point
//! Communication", *Order*):
//!
//! - a message arriving is taken by the **earliest-posted** receive it matches;
//! - a receive posted takes the **earliest-arrived** message it matches;
//!   messages arrive in per-(source, context) send order, so no message
//!   overtakes an earlier one from the same source that the receive also
//!   matches;
//! - probe looks at what a receive would take and changes nothing; mprobe
//!   takes it out of the queue;
//! - a later receive (or message) may be matched first when the earlier ones
//!   do not match.
//!
//! Receives an engine keeps outside its posted queue for speed (tm-match's
//! deferred receives) are plain posts here, made when they were deferred;
//! a receive that takes an arriving message without being posted is checked
//! with [`ReferenceMatcher::unposted_takes`].

use tm_proto::{Envelope, MatchSpec};

/// The reference model, generic over the caller's receive `R` and message `M`.
#[derive(Debug, Clone)]
pub struct ReferenceMatcher<R, M> {
    /// Posted receives, oldest first.
    posted: Vec<(MatchSpec, R)>,
    /// Unexpected messages, oldest first.
    unexpected: Vec<(Envelope, M)>,
}

impl<R, M> Default for ReferenceMatcher<R, M> {
    fn default() -> Self {
        ReferenceMatcher {
            posted: Vec::new(),
            unexpected: Vec::new(),
        }
    }
}

impl<R, M> ReferenceMatcher<R, M> {
    /// An empty model.
    pub fn new() -> Self {
        Self::default()
    }

    /// Post a receive: `Some((env, msg))` if it took a queued message (the
    /// receive is then not queued), `None` if it was queued.
    pub fn post(&mut self, spec: MatchSpec, recv: R) -> Option<(Envelope, M)> {
        for i in 0..self.unexpected.len() {
            if spec.matches(&self.unexpected[i].0) {
                return Some(self.unexpected.remove(i));
            }
        }
        self.posted.push((spec, recv));
        None
    }

    /// A message arrives: `Some((spec, recv))` if a posted receive took it,
    /// `None` if it was queued.
    pub fn arrive(&mut self, env: Envelope, msg: M) -> Option<(MatchSpec, R)> {
        for i in 0..self.posted.len() {
            if self.posted[i].0.matches(&env) {
                return Some(self.posted.remove(i));
            }
        }
        self.unexpected.push((env, msg));
        None
    }

    /// A receive that has not been posted (a blocking receive looking at
    /// arrivals before it posts) and a message arriving now with envelope
    /// `env`: whether the receive, posted right after the message arrived,
    /// would take exactly that message: it matches it, no posted receive
    /// takes the message first, and no queued message that the receive
    /// matches is older. Changes nothing.
    pub fn unposted_takes(&self, spec: &MatchSpec, env: &Envelope) -> bool {
        spec.matches(env)
            && !self.posted.iter().any(|(s, _)| s.matches(env))
            && !self.unexpected.iter().any(|(e, _)| spec.matches(e))
    }

    /// Probe: the message a receive with `spec` would take.
    pub fn probe(&self, spec: &MatchSpec) -> Option<(Envelope, &M)> {
        self.unexpected
            .iter()
            .find(|(e, _)| spec.matches(e))
            .map(|(e, m)| (*e, m))
    }

    /// Mprobe: remove and return the message a receive with `spec` would take.
    pub fn improbe(&mut self, spec: &MatchSpec) -> Option<(Envelope, M)> {
        let i = self.unexpected.iter().position(|(e, _)| spec.matches(e))?;
        Some(self.unexpected.remove(i))
    }

    /// Cancel the first queued receive for which `which` holds.
    pub fn cancel_where(&mut self, mut which: impl FnMut(&R) -> bool) -> Option<(MatchSpec, R)> {
        let i = self.posted.iter().position(|(_, r)| which(r))?;
        Some(self.posted.remove(i))
    }

    /// Remove the first queued message for which `which` holds.
    pub fn cancel_message_where(
        &mut self,
        mut which: impl FnMut(&M) -> bool,
    ) -> Option<(Envelope, M)> {
        let i = self.unexpected.iter().position(|(_, m)| which(m))?;
        Some(self.unexpected.remove(i))
    }

    /// Queued receives, oldest first.
    pub fn posted(&self) -> &[(MatchSpec, R)] {
        &self.posted
    }

    /// Queued messages, oldest first.
    pub fn unexpected(&self) -> &[(Envelope, M)] {
        &self.unexpected
    }
}
