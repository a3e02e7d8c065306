//! Protocol counters, printable at finalize.

use core::fmt;

/// What the transport did, per process.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Sends whose payload rode inline in the header slot.
    pub inline_sends: u64,
    /// Sends copied into the sender's eager area (MP_Lite's buffered sends).
    pub buffered_sends: u64,
    /// Sends delivered by CMA single copy (receiver `process_vm_readv`).
    pub cma_sends: u64,
    /// Sends larger than the eager area, cut into fragments (CMA unavailable).
    pub fragmented_sends: u64,
    /// Times a send found the peer's ring full after re-reading its consumer
    /// index and started queueing locally (backpressure events).
    pub backpressure_events: u64,
    /// Sends held locally because the eager area was full.
    pub staged_sends: u64,
    /// Re-reads of a peer's consumer index (the cached one said "full").
    pub index_rereads: u64,
    /// Messages received (matched and delivered).
    pub received: u64,
    /// Headers that arrived before a matching receive (unexpected).
    pub unexpected: u64,
    /// Largest number of unmatched headers held at once.
    pub unexpected_max: u64,
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "inline sends {}, buffered sends {}, cma sends {}, fragmented sends {}, \
             backpressure events {}, \
             staged sends {}, index re-reads {}, received {}, unexpected {} (max held {})",
            self.inline_sends,
            self.buffered_sends,
            self.cma_sends,
            self.fragmented_sends,
            self.backpressure_events,
            self.staged_sends,
            self.index_rereads,
            self.received,
            self.unexpected,
            self.unexpected_max
        )
    }
}
