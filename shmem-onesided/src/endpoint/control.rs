//! Control headers: FIN (a CMA read finished) and ACK (a synchronous message
//! matched), sent and handled.

use super::*;

impl Endpoint {
    /// Publishes a control header (FIN, ACK) to `dest`: straight to the
    /// ring or its outbox, ahead of staged data (control carries no
    /// ordering with messages).
    pub(super) fn enqueue_ctl(&mut self, dest: u32, hdr: Header) {
        let seg = self.node.segment();
        let p = &mut self.peers[dest as usize];
        p.control_out += 1;
        if p.outbox
            .send_with(seg.ring(seg.rank(), dest), hdr, &mut |_| {})
            == Sent::Queued
        {
            tracing::debug!(dest, kind = hdr.kind, "control header queued locally");
        }
    }

    /// The receiver's FIN for CMA send `id` (`matched`: it also matched it).
    pub(super) fn handle_fin(&mut self, id: u64, matched: bool) {
        if !self.split_sends.is_empty() {
            self.settle_split(id);
        }
        let Some(r) = self.sends.get_mut(&id) else {
            tracing::warn!(id, "FIN for an unknown send ignored");
            return;
        };
        if !r.fin {
            return;
        }
        r.fin = false;
        if matched {
            r.ack = false;
        }
        if r.done() {
            self.finish_send(id);
        }
    }

    /// The receiver matched synchronous send `id`.
    pub(super) fn handle_ack(&mut self, id: u64) {
        let Some(r) = self.sends.get_mut(&id) else {
            tracing::warn!(id, "match acknowledgement for an unknown send ignored");
            return;
        };
        if !r.ack {
            return;
        }
        r.ack = false;
        if r.done() {
            self.finish_send(id);
        }
    }

    /// Tells a CMA sender that we finished reading its buffer.
    /// `matched`: the FIN is sent because a receive matched the message
    /// (not because it was pulled aside), so it also acknowledges a
    /// synchronous send ([`Flags::MATCHED`]).
    pub(super) fn send_fin(&mut self, h: &Header, matched: bool) {
        let mut c = [0u8; 8];
        c.copy_from_slice(&h.ext[..8]);
        let flags = if matched && h.has(Flags::SYNC) {
            Flags::MATCHED
        } else {
            Flags::NONE
        };
        let fin = Header {
            kind: Kind::Fin.byte(),
            flags: flags.bits(),
            source: self.rank(),
            word: u64::from_le_bytes(c),
            ..Header::default()
        };
        self.enqueue_ctl(h.source, fin);
    }

    /// A message with [`Flags::SYNC`] was matched (received, or taken by a
    /// matched probe): tells its sender, unless the CMA FIN just did.
    /// (The check inlined, the acknowledgement out of line: most messages
    /// are not synchronous.)
    #[inline(always)]
    pub(super) fn matched_sync(&mut self, h: &Header, copied: bool) {
        if !h.has(Flags::SYNC) || (h.kind == Kind::Cma && !copied) {
            return;
        }
        self.ack_sync(h);
    }

    /// [`Endpoint::matched_sync`]'s acknowledgement.
    #[inline(never)]
    pub(super) fn ack_sync(&mut self, h: &Header) {
        let id = sync_id(h);
        if h.source == self.rank() {
            self.handle_ack(id);
            return;
        }
        self.counters.sync_acks += 1;
        let ack = Header {
            kind: Kind::Ack.byte(),
            source: self.rank(),
            word: id,
            ..Header::default()
        };
        tracing::debug!(dest = h.source, "synchronous message matched: ack");
        self.enqueue_ctl(h.source, ack);
    }
}
