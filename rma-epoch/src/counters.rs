//! Protocol counters of one window, printable at finalize.

use core::fmt;

/// What one window did, origin and target side. Plain numbers; `Display` prints
/// them on one line each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Operations handed to the transport (retransmissions included).
    pub ops_issued: u64,
    /// LOCK packets sent (per-target protocol and window protocol).
    pub lock_packets: u64,
    /// LOCK requests piggybacked on an operation.
    pub locks_piggybacked: u64,
    /// Single-short-op epochs sent as one LOCK-OP-UNLOCK packet.
    pub lock_op_unlock: u64,
    /// FLUSH/UNLOCK/DECR flags piggybacked on an operation.
    pub sync_piggybacked: u64,
    /// Stand-alone FLUSH packets (RMA_DONE).
    pub flush_packets: u64,
    /// Stand-alone UNLOCK packets.
    pub unlock_packets: u64,
    /// Stand-alone DECR_AT_COUNTER packets (PSCW complete).
    pub decr_packets: u64,
    /// Target elements reclaimed by RESTORE_TARGET_ELEM_RESOURCES.
    pub restore_target: u64,
    /// Times RESTORE_OP_ELEM_RESOURCES flushed a target for op elements.
    pub restore_op: u64,
    /// LOCK_ALL switches from the per-target to the window protocol.
    pub lock_all_fallbacks: u64,
    /// Ops re-sent after LOCK_DISCARDED or LOCK_QUEUED_DATA_DISCARDED.
    pub retransmits: u64,
    /// Ops applied to this process's window memory (target side).
    pub ops_applied: u64,
    /// Locks granted on arrival (target side).
    pub locks_granted_at_once: u64,
    /// Lock requests queued (target side).
    pub locks_queued: u64,
    /// Piggybacked op data buffered in the lock queue (target side).
    pub lock_data_queued: u64,
    /// Piggybacked op data dropped for lack of buffer (target side).
    pub lock_data_discarded: u64,
    /// Lock requests refused for lack of a lock-queue entry (target side).
    pub locks_discarded: u64,
    /// ACKs and LOCK acks sent (target side).
    pub acks_sent: u64,
    /// UNLOCKs from an origin that held no lock (a re-created NOCHECK target).
    pub spurious_unlocks: u64,
    /// Ops outside this process's window memory, dropped (reads get an empty
    /// answer).
    pub out_of_bounds: u64,
    /// Packets that did not fit the state they found (stale ids), ignored.
    pub stray_packets: u64,
    /// Operations to direct targets allowed by the gate (the driver loaded
    /// or stored the target's memory itself).
    pub direct_ops: u64,
    /// Locks taken on direct targets (lock epochs and lazy `lock_all` locks).
    pub direct_locks: u64,
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: [(&str, u64); 24] = [
            ("ops issued", self.ops_issued),
            ("lock packets", self.lock_packets),
            ("locks piggybacked", self.locks_piggybacked),
            ("lock-op-unlock", self.lock_op_unlock),
            ("sync flags piggybacked", self.sync_piggybacked),
            ("flush packets", self.flush_packets),
            ("unlock packets", self.unlock_packets),
            ("decr packets", self.decr_packets),
            ("restore target", self.restore_target),
            ("restore op", self.restore_op),
            ("lock_all fallbacks", self.lock_all_fallbacks),
            ("retransmits", self.retransmits),
            ("ops applied", self.ops_applied),
            ("locks granted at once", self.locks_granted_at_once),
            ("locks queued", self.locks_queued),
            ("lock data queued", self.lock_data_queued),
            ("lock data discarded", self.lock_data_discarded),
            ("locks discarded", self.locks_discarded),
            ("acks sent", self.acks_sent),
            ("spurious unlocks", self.spurious_unlocks),
            ("out of bounds", self.out_of_bounds),
            ("stray packets", self.stray_packets),
            ("direct ops", self.direct_ops),
            ("direct locks", self.direct_locks),
        ];
        for (name, v) in rows {
            writeln!(f, "{name:>24}: {v}")?;
        }
        Ok(())
    }
}
