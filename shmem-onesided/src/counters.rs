//! Protocol counters, printable at finalize.

use core::fmt;

/// What the transport did, per process.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Sends whose payload rode inline in the header slot.
    pub inline_sends: u64,
    /// Sends copied into the sender's eager area (MP_Lite's buffered sends).
    pub buffered_sends: u64,
    /// Sends written straight into a receive buffer the receiver preposted
    /// (MP_Lite's preposted hits; CMA write, no header, no copy).
    pub preposted_hits: u64,
    /// Times a send found a matching prepost it could not trust yet (a
    /// message of this sender was still unprocessed: the gap) and buffered.
    pub ignored_preposts: u64,
    /// Receives advertised in a prepost ring (receiver side).
    pub preposts: u64,
    /// Preposts the receiver withdrew because it completed the receive in
    /// software (or cancelled it); the sender had not claimed them.
    pub preposts_withdrawn: u64,
    /// Sends delivered by CMA single copy (receiver `process_vm_readv`).
    pub cma_sends: u64,
    /// CMA messages whose copy the sender shared (it wrote the second half
    /// while we read the first; receiver side, `TMX_SHMEM_TUNE=cma_split`).
    pub cma_split_shared: u64,
    /// Split offers withdrawn because the sender had not claimed them when
    /// we finished our half (we read the rest; receiver side).
    pub cma_split_withdrawn: u64,
    /// CMA messages read together with others of the same sender in one
    /// `process_vm_readv` call (receiver side: posted receives that their
    /// messages matched in one progress pass).
    pub cma_batched: u64,
    /// Those calls.
    pub cma_batches: u64,
    /// Unexpected CMA messages at or below `TMX_SHMEM_TUNE=cma_threshold` read
    /// into private memory on arrival, their FIN returned at once
    /// (receiver side): sends of eager sizes never wait for their receive.
    pub cma_pulled: u64,
    /// Sends larger than the eager area, cut into fragments (CMA unavailable).
    pub fragmented_sends: u64,
    /// Sends above `TMX_SHMEM_TUNE=pipeline_min` that fit the eager area, sent
    /// as pipelined chunks (each published as soon as it is copied).
    pub pipelined_sends: u64,
    /// Pipelined or fragmented messages whose chunks the receiver copied
    /// straight into the receive buffer (no reassembly copy; receiver side).
    pub pipelined_in_place: u64,
    /// Times a send found the peer's ring full after re-reading its consumer
    /// index and started queueing locally (backpressure events).
    pub backpressure_events: u64,
    /// Sends held locally because the eager area was full.
    pub staged_sends: u64,
    /// Re-reads of a peer's consumer index (the cached one said "full").
    pub index_rereads: u64,
    /// Messages received (matched and delivered).
    pub received: u64,
    /// Receives (`irecv`, `irecv_or_done`, the preposting `recv`) queued
    /// in the matcher because their message had not arrived; the other
    /// receives matched at once (receiver side).
    pub posted_recvs: u64,
    /// Nonblocking receives deferred (kept out of the matcher while their
    /// source's ring was empty, `TMX_SHMEM_TUNE=defer_recv`); those later
    /// posted are also in `posted_recvs`.
    pub deferred_recvs: u64,
    /// Headers that arrived before a matching receive (unexpected).
    pub unexpected: u64,
    /// Largest number of unmatched headers held at once.
    pub unexpected_max: u64,
    /// Synchronous-mode sends ([`crate::SendMode::Synchronous`]).
    pub sync_sends: u64,
    /// Match acknowledgements sent to synchronous senders (receiver side;
    /// a CMA FIN that also acknowledges is not counted).
    pub sync_acks: u64,
    /// Sends to this rank itself (a local copy through the matcher).
    pub self_sends: u64,
    /// Receives that got a message longer than their buffer (truncated).
    pub truncated: u64,
    /// Receives cancelled before they matched.
    pub cancelled_recvs: u64,
    /// Sends withdrawn before any receive matched them (counted on the
    /// side that withdrew them: the receiver, or the sender for a message
    /// it still held).
    pub cancelled_sends: u64,
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "inline sends {}, buffered sends {}, preposted hits {}, ignored preposts {}, \
             preposts {} (withdrawn {}), cma sends {} (split copies {}, withdrawn {}, batched {} in {} calls, read aside {}), \
             fragmented sends {}, \
             pipelined sends {} (received in place {}), backpressure events {}, \
             staged sends {}, index re-reads {}, received {} (posted first {}, deferred {}), \
             unexpected {} (max held {}), \
             sync sends {}, sync acks {}, self sends {}, truncated {}, cancelled receives {}, \
             cancelled sends {}",
            self.inline_sends,
            self.buffered_sends,
            self.preposted_hits,
            self.ignored_preposts,
            self.preposts,
            self.preposts_withdrawn,
            self.cma_sends,
            self.cma_split_shared,
            self.cma_split_withdrawn,
            self.cma_batched,
            self.cma_batches,
            self.cma_pulled,
            self.fragmented_sends,
            self.pipelined_sends,
            self.pipelined_in_place,
            self.backpressure_events,
            self.staged_sends,
            self.index_rereads,
            self.received,
            self.posted_recvs,
            self.deferred_recvs,
            self.unexpected,
            self.unexpected_max,
            self.sync_sends,
            self.sync_acks,
            self.self_sends,
            self.truncated,
            self.cancelled_recvs,
            self.cancelled_sends
        )
    }
}
