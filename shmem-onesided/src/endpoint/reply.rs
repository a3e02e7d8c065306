//! Which way a send of a middle size goes: inline or by CMA as a reply in a
//! ping-pong, by CMA while messages flow both ways.

use super::*;

/// [`Endpoint::duplex`] halves its counts of messages taken and sent once
/// together they pass this: it answers for about the last this many.
pub(super) const DUPLEX_SPAN: u64 = 256;

/// [`Endpoint::duplex`] says no before it has seen this many messages
/// sent (the first sends of a stream follow the message that started
/// it).
pub(super) const DUPLEX_MIN: u64 = 8;

impl Endpoint {
    /// Whether a message of `len` bytes (more than `inline_ext_max`) to `dest`
    /// goes inline as a reply (`TMX_SHMEM_TUNE=inline_reply`): at most
    /// `inline_reply_max` bytes, and [`Endpoint::ask_reply`] says it is one. In
    /// a ping-pong every message is such a reply, and the receiver then
    /// reads the payload with its header instead of after it, from a block
    /// it must also release.
    #[inline]
    pub(super) fn inline_as_reply(&mut self, dest: u32, len: usize) -> bool {
        len <= self.inline_reply_max && self.ask_reply(dest)
    }

    /// Whether a message of `len` bytes is in the range that goes by CMA
    /// when it is a reply (`TMX_SHMEM_TUNE=cma_reply`): CMA available, above
    /// that setting and at most `TMX_SHMEM_TUNE=cma_threshold` (above which
    /// every message goes by CMA).
    #[inline]
    pub(super) fn cma_reply_size(&self, len: usize) -> bool {
        let cfg = self.node.config();
        let len = len as u64;
        len > cfg.cma_reply && len <= cfg.cma_threshold && self.cma_ok()
    }

    /// Whether we have a receive outstanding: deferred, or posted to the
    /// matcher. A sender that has one is likely copying messages in as
    /// well as out (see `PREFETCH_STEP`).
    #[inline]
    pub(super) fn recv_outstanding(&self) -> bool {
        self.matching.deferred_len() != 0 || self.matching.posted_len() > 0
    }

    /// Whether a message of `len` bytes to `dest` goes by CMA because
    /// messages flow both ways (`TMX_SHMEM_TUNE=cma_duplex`): CMA available,
    /// above that setting and at most `TMX_SHMEM_TUNE=cma_threshold`, and
    /// [`Endpoint::duplex`]. The receiver reads it in one copy, with the
    /// others it matches in the same pass ([`Endpoint::read_late`]),
    /// instead of both cores copying it in and out while they also copy
    /// the other way's messages.
    #[inline]
    pub(super) fn cma_duplex_now(&mut self, dest: u32, len: usize) -> bool {
        let cfg = self.node.config();
        let len = len as u64;
        len > cfg.cma_duplex && len <= cfg.cma_threshold && self.cma_ok() && self.duplex(dest)
    }

    /// Whether messages flow both ways between us and `dest`: over the
    /// recent traffic (decayed, see [`DUPLEX_SPAN`]) we sent it at least
    /// [`DUPLEX_MIN`] messages and took at least half as many from its
    /// ring (ring slots: an inline message with continuation slots counts
    /// for each). Control headers (FIN, ACK) do not count, so CMA sends,
    /// which bring a FIN back for each, do not make a stream look duplex.
    /// Asking twice in a row answers the same.
    pub(super) fn duplex(&mut self, dest: u32) -> bool {
        let p = &mut self.peers[dest as usize];
        let taken = p.inbox.consumed().saturating_sub(p.control_in);
        let sent = p.outbox.producer().pushed().saturating_sub(p.control_out);
        p.duplex_in += taken.saturating_sub(p.duplex_seen.0);
        p.duplex_out += sent.saturating_sub(p.duplex_seen.1);
        p.duplex_seen = (taken, sent);
        if p.duplex_in + p.duplex_out > DUPLEX_SPAN {
            p.duplex_in /= 2;
            p.duplex_out /= 2;
        }
        let duplex = p.duplex_out >= DUPLEX_MIN && p.duplex_in * 2 >= p.duplex_out;
        if duplex != p.duplex_was {
            p.duplex_was = duplex;
            tracing::debug!(
                dest,
                duplex,
                taken = p.duplex_in,
                sent = p.duplex_out,
                "traffic both ways changed"
            );
        }
        duplex
    }

    /// Records a send to `dest` of a size that a reply sends another way
    /// (inline, or by CMA) and says whether it is a reply: a message was
    /// taken from `dest`'s ring since the last send that asked, and that
    /// ask was the only one since the take before (strict alternation).
    /// Not while more than one eager block is in flight (a window of sends
    /// went before: the blocks are taken back lazily, so at the first send
    /// of the next window they still count). So at most one such message
    /// per message taken from `dest` goes the reply's way.
    #[inline]
    pub(super) fn ask_reply(&mut self, dest: u32) -> bool {
        let reply = self.would_reply(dest);
        let p = &mut self.peers[dest as usize];
        let taken = p.inbox.consumed();
        if taken == p.reply_mark {
            p.reply_run = p.reply_run.saturating_add(1);
        } else {
            p.reply_mark = taken;
            p.reply_run = 1;
        }
        reply
    }

    /// What [`Endpoint::ask_reply`] answers now, without recording the
    /// ask. A window of eager sends before it (more than one block in
    /// flight) says bandwidth, not a ping-pong.
    #[inline]
    pub(super) fn would_reply(&self, dest: u32) -> bool {
        let p = &self.peers[dest as usize];
        p.inbox.consumed() != p.reply_mark && p.reply_run <= 1 && self.eager.in_flight() <= 1
    }
}
