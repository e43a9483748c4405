//! [`ModelCounters`]: what the driver made the device do, so that doorbell and signaling
//! policies can be compared (MMIO writes per WQE, WQEBBs fetched, CQEs written).

/// Event counts of one model device since creation or the last
/// [`ModelDevice::reset_counters`](super::ModelDevice::reset_counters). All plain counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModelCounters {
    /// MMIO stores of any width to BAR0.
    pub mmio_writes: u64,
    /// 32-bit MMIO stores.
    pub mmio_writes32: u64,
    /// 64-bit MMIO stores.
    pub mmio_writes64: u64,
    /// MMIO loads.
    pub mmio_reads: u64,
    /// Stores to the init segment (cmdq address, NIC interface state, command doorbell).
    pub init_seg_writes: u64,
    /// Command doorbells (`cmd_dbell` stores).
    pub cmd_doorbells: u64,
    /// Send doorbells (stores to a UAR's BlueFlame/doorbell register at 0x800 + k·size).
    pub send_doorbells: u64,
    /// BlueFlame stores that were part of a WQE copy (beyond the first 8 bytes).
    pub blueflame_writes: u64,
    /// CQ arm doorbells (UAR + 0x20).
    pub cq_doorbells: u64,
    /// EQ doorbells (UAR + 0x40 arm, + 0x48 update).
    pub eq_doorbells: u64,
    /// Doorbells the device could not use (unknown UAR page or QPN/CQN/EQN, bad offset).
    pub bad_doorbells: u64,
    /// Firmware commands executed (any status).
    pub commands_executed: u64,
    /// Commands that completed with a status other than OK, or a delivery error.
    pub commands_failed: u64,
    /// WQEBBs the device read from send queues.
    pub wqebbs_fetched: u64,
    /// Send WQEs executed (handed to the RC engine, NOPs included).
    pub wqes_executed: u64,
    /// Receive WQEs the device read.
    pub recv_wqes_fetched: u64,
    /// CQEs written (including error CQEs).
    pub cqes_written: u64,
    /// Error CQEs written.
    pub error_cqes: u64,
    /// CQEs dropped because the CQ was full (overrun).
    pub cq_overruns: u64,
    /// EQEs written.
    pub eqes_written: u64,
    /// Interrupts raised.
    pub interrupts: u64,
    /// RoCEv2 frames sent on the link.
    pub frames_sent: u64,
    /// RoCEv2 frames received from the link.
    pub frames_received: u64,
    /// Received frames dropped (bad ICRC, wrong MAC, unknown QPN, not RoCEv2).
    pub frames_dropped: u64,
    /// Device DMA accesses that hit no mapping (IOMMU faults).
    pub dma_faults: u64,
}
