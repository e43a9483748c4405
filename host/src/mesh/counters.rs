//! Per-NIC counters of the mesh transport: frames and bytes each NIC sent and received, how
//! much of that was message data, how much it forwarded for other nodes (relay), and rail
//! failures. They show which link each peer's traffic took and how a striped message split
//! across rails.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters of one NIC, shared by every rail on it.
#[derive(Debug, Default)]
pub struct NicCounters {
    tx_frames: AtomicU64,
    tx_bytes: AtomicU64,
    tx_data_bytes: AtomicU64,
    rx_frames: AtomicU64,
    rx_bytes: AtomicU64,
    rx_data_bytes: AtomicU64,
    relayed_bytes: AtomicU64,
    rails_opened: AtomicU64,
    rail_failures: AtomicU64,
    retransmitted_packets: AtomicU64,
    ack_timeouts: AtomicU64,
}

/// A snapshot of [`NicCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NicCountersSnapshot {
    /// Frames posted (SENDs of mesh frames), all kinds.
    pub tx_frames: u64,
    /// Bytes of those frames, headers included.
    pub tx_bytes: u64,
    /// Message data bytes sent (DATA frame payloads), relayed data included.
    pub tx_data_bytes: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Bytes of those frames, headers included.
    pub rx_bytes: u64,
    /// Message data bytes received (DATA frame payloads), data to relay included.
    pub rx_data_bytes: u64,
    /// Data bytes this NIC sent on behalf of other nodes (relay egress).
    pub relayed_bytes: u64,
    /// Rails (RC connections) opened on this NIC.
    pub rails_opened: u64,
    /// Rails on this NIC that failed (link down, peer gone).
    pub rail_failures: u64,
    /// RoCE packets its rails' QPs sent again (go-back-N or selective retransmission).
    pub retransmitted_packets: u64,
    /// Local ACK timeouts its rails' QPs took.
    pub ack_timeouts: u64,
}

fn add(a: &AtomicU64, v: u64) {
    a.fetch_add(v, Ordering::Relaxed);
}

impl NicCounters {
    /// Counts one frame sent: `bytes` in all, `data` of them message data.
    pub fn sent(&self, bytes: u64, data: u64) {
        add(&self.tx_frames, 1);
        add(&self.tx_bytes, bytes);
        add(&self.tx_data_bytes, data);
    }

    /// Counts one frame received.
    pub fn received(&self, bytes: u64, data: u64) {
        add(&self.rx_frames, 1);
        add(&self.rx_bytes, bytes);
        add(&self.rx_data_bytes, data);
    }

    /// Counts data bytes forwarded for another node.
    pub fn relayed(&self, data: u64) {
        add(&self.relayed_bytes, data);
    }

    /// Counts a rail opened.
    pub fn rail_opened(&self) {
        add(&self.rails_opened, 1);
    }

    /// Counts a rail failure.
    pub fn rail_failed(&self) {
        add(&self.rail_failures, 1);
    }

    /// Adds a rail's new retransmissions and ACK timeouts.
    pub fn transport(&self, retransmitted: u64, timeouts: u64) {
        add(&self.retransmitted_packets, retransmitted);
        add(&self.ack_timeouts, timeouts);
    }

    /// The current values.
    pub fn snapshot(&self) -> NicCountersSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        NicCountersSnapshot {
            tx_frames: l(&self.tx_frames),
            tx_bytes: l(&self.tx_bytes),
            tx_data_bytes: l(&self.tx_data_bytes),
            rx_frames: l(&self.rx_frames),
            rx_bytes: l(&self.rx_bytes),
            rx_data_bytes: l(&self.rx_data_bytes),
            relayed_bytes: l(&self.relayed_bytes),
            rails_opened: l(&self.rails_opened),
            rail_failures: l(&self.rail_failures),
            retransmitted_packets: l(&self.retransmitted_packets),
            ack_timeouts: l(&self.ack_timeouts),
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn counts() {
        let c = NicCounters::default();
        c.sent(100, 68);
        c.sent(32, 0);
        c.received(50, 18);
        c.relayed(18);
        c.rail_opened();
        c.rail_failed();
        c.transport(3, 1);
        let s = c.snapshot();
        assert_eq!((s.tx_frames, s.tx_bytes, s.tx_data_bytes), (2, 132, 68));
        assert_eq!((s.rx_frames, s.rx_bytes, s.rx_data_bytes), (1, 50, 18));
        assert_eq!(
            (s.relayed_bytes, s.rails_opened, s.rail_failures),
            (18, 1, 1)
        );
        assert_eq!((s.retransmitted_packets, s.ack_timeouts), (3, 1));
    }
}
