//! Loss recovery mode of a QP: IBTA go-back-N (the default, interoperable with every RoCE
//! implementation) or IRN-style selective repeat between two rdmesh QPs.
//!
//! Selective repeat (Mittal et al., "Revisiting Network Support for RDMA", SIGCOMM'18;
//! rocev2.md §3.5), as rdmesh puts it on the wire — both ends must use it:
//! - **Self-placing packets.** A plain RDMA WRITE is sent as one RDMA_WRITE_ONLY per packet,
//!   each with its own RETH (VA advanced by `k · PMTU`, the packet's length as DMA length), so the
//!   responder can place any of them on arrival. Every packet is a valid IBTA packet; the cost is
//!   16 bytes of RETH per packet and one MSN step per packet. A WRITE is sent this way only when
//!   no earlier outstanding WQE is a READ/atomic or a WRITE whose remote range overlaps it, so
//!   early placement never reorders memory effects between messages.
//! - **Responder.** Out-of-order RDMA_WRITE_ONLY packets within [`SR_WINDOW`] PSNs of ePSN
//!   are checked (R_Key, bounds, access), placed and remembered in a bitmap; any other
//!   out-of-order packet (SEND, WRITE with immediate, multi-packet WRITE, READ request, atomic —
//!   their placement or effect depends on earlier packets) is dropped. Each new ePSN is NAKed
//!   (PSN sequence error, carrying ePSN = the first missing PSN) once: on the first
//!   out-of-order arrival, and right away when an in-order packet moves ePSN onto another hole.
//!   When ePSN reaches remembered packets they retire in order (MSN, ACK).
//! - **Requester.** A NAK for PSN p resends p and every packet after it that the responder
//!   cannot have kept (all but the self-placing ones), each at most once until the next
//!   timeout; a retransmit timeout resends the oldest unacknowledged packet (and the
//!   non-self-placing ones after it) and then, until everything sent before the timeout is
//!   acknowledged, resends the packet at each new cumulative-ACK point. Timeouts spend
//!   `retry_cnt`; NAK-driven resends do not (every NAK either moves the ACK point or is
//!   suppressed as a repeat). RDMA READ responses are not placed out of order: a lost response
//!   is recovered as in go-back-N (implied NAK / timer, re-READ of the tail).
//! - **In flight.** At most `max_inflight` PSNs (≤ [`SR_WINDOW`]) are outstanding; set it near
//!   one bandwidth-delay product ([`bdp_packets`]).

use super::mtu::Mtu;

/// Bitmap window of selective repeat, in PSNs: the most PSNs the requester has outstanding and
/// the responder remembers beyond ePSN. Equal to the go-back-N window (rxe
/// `RXE_MAX_UNACKED_PSNS`).
pub const SR_WINDOW: u32 = 128;

/// Selective repeat: the responder queues a SACK after this many packets held since the last
/// one (besides the first out-of-order arrival after ePSN moved, and any with AckReq).
pub const SACK_EVERY: u32 = 4;

/// Selective repeat: a PSN counts as lost once the peer holds a PSN at least this far beyond
/// it (reordering by fewer packets causes no resend; RFC 6675's DupThresh).
pub const DUP_THRESH: u32 = 3;

/// Selective repeat: with at most this many PSNs in flight the retransmit timer runs with
/// the short timeout (IRN's RTO_low: too few packets follow a loss to reveal it).
pub const RTO_LOW_PACKETS: u32 = 3;

/// Selective repeat: floor of the retransmit timeout with more than [`RTO_LOW_PACKETS`] in
/// flight. IRN's RTO_high is 320 µs on a 40 Gb/s fabric; a software host sharing its cores
/// stalls for a scheduler slice (~4 ms) often enough that a lower floor fires spuriously.
pub const RTO_HIGH_MIN_NS: u64 = 4_000_000;

/// Selective repeat: floor of the short retransmit timeout (IRN's RTO_low is 100 µs; see
/// [`RTO_HIGH_MIN_NS`] for why a software host needs more).
pub const RTO_LOW_MIN_NS: u64 = 1_000_000;

/// How a QP recovers from lost packets. Both QPs of a connection must use the same mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Recovery {
    /// IBTA go-back-N (rxe behaviour): out-of-order packets are dropped and everything from
    /// the first missing PSN is resent. Interoperates with any RoCE peer.
    #[default]
    GoBackN,
    /// IRN-style selective repeat (see the module docs): only for two rdmesh QPs.
    Selective,
}

/// What two rdmesh ends use when neither forces a mode: `rdmesh bench` without `--recovery`
/// (`host::bench::oob`) and mesh rails whose ends both run the soft provider
/// (`host::mesh::rail`). Kernel rxe, hardware and perftest peers always get go-back-N, whatever
/// this says. `docs/reliability.md` ("Default") has the measurements behind the choice.
pub const NEGOTIATED_RECOVERY: Recovery = Recovery::GoBackN;

/// Packets in flight that keep a path of `rate_mbps` Mb/s and round-trip time `rtt_ns` busy at
/// path MTU `mtu`: ⌈rate · RTT / (8 · PMTU)⌉, at least 1, at most [`SR_WINDOW`]. A starting
/// point for [`RcQp::set_max_inflight`](super::RcQp::set_max_inflight) (IRN "BDP-FC").
pub const fn bdp_packets(rate_mbps: u64, rtt_ns: u64, mtu: Mtu) -> u32 {
    // Mb/s · ns = 10^-3 bit; bytes = rate · rtt / 8000.
    let bytes = (rate_mbps as u128 * rtt_ns as u128).div_ceil(8000);
    let pkts = bytes.div_ceil(mtu.bytes() as u128);
    if pkts == 0 {
        1
    } else if pkts > SR_WINDOW as u128 {
        SR_WINDOW
    } else {
        pkts as u32
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn bdp() {
        // 10 Gb/s · 10 µs = 12_500 B = 4 packets of 4096 (3.05 → 4).
        assert_eq!(bdp_packets(10_000, 10_000, Mtu::Mtu4096), 4);
        // 100 Gb/s · 20 µs = 250_000 B / 1024 = 244.1 → capped at 128.
        assert_eq!(bdp_packets(100_000, 20_000, Mtu::Mtu1024), SR_WINDOW);
        assert_eq!(bdp_packets(0, 10_000, Mtu::Mtu256), 1);
        // 25 Gb/s · 8 µs = 25_000 B / 1024 = 24.4 → 25.
        assert_eq!(bdp_packets(25_000, 8_000, Mtu::Mtu1024), 25);
        assert_eq!(Recovery::default(), Recovery::GoBackN);
    }
}
