//! Loss recovery mode of a QP: IBTA go-back-N (the default, interoperable with every RoCE
//! implementation) or IRN-style selective repeat between two rdmesh QPs.
//!
//! Selective repeat (Mittal et al., "Revisiting Network Support for RDMA", SIGCOMM'18;
//! rocev2.md §3.5), as rdmesh puts it on the wire — both ends must use it; `docs/reliability.md`
//! has the whole description:
//! - **Self-placing packets.** An RDMA WRITE is sent as one RDMA_WRITE_ONLY per packet, each
//!   with its own RETH (with immediate: the last one an RDMA_WRITE_ONLY_WITH_IMMEDIATE whose
//!   RETH names the whole message), unless an earlier outstanding READ/atomic reads or
//!   updates bytes it writes — also when it overlaps an earlier outstanding WRITE (perftest's
//!   and NCCL's buffer reuse); every SEND
//!   packet starts with a placement header (receive sequence number, offset).
//! - **Responder.** Within [`SR_WINDOW`] PSNs of ePSN it places split WRITE_ONLY and SEND
//!   packets and defers READ requests and atomics; they retire in order when ePSN reaches them.
//!   A WRITE packet never overwrites bytes that a later held WRITE_ONLY (same R_Key) placed,
//!   so overlapping WRITEs leave memory as in order. While it holds anything it answers with
//!   SACK blocks (a NAK "PSN sequence error" for ePSN carrying a 256-bit bitmap of what it
//!   holds) when it tells the requester something: on the first out-of-order arrival after
//!   ePSN moved, once a PSN [`DUP_THRESH`] beyond a hole is held (the hole at ePSN or a new
//!   one above the held packets), for a packet that fills a hole below the highest held PSN
//!   (a resend), and every [`SACK_EVERY`] PSNs held. A packet past the hole that it cannot
//!   hold draws one NAK without SACK block per ePSN: the requester then resends at once
//!   everything not held.
//! - **Requester.** A PSN counts as lost once the peer holds one [`DUP_THRESH`] beyond it and
//!   is resent alone (a READ: the run of responses it misses, once a response or ACK/SACK
//!   [`DUP_THRESH`] PSNs beyond a missing response arrived, or anything beyond it arrived
//!   a reorder window ago, [`REORDER_WINDOW_MIN_NS`]; the responder answers re-READs in arrival order, so a later
//!   answer, or a re-READ timer of at least [`RTO_REREAD_MIN_NS`], shows a lost re-READ);
//!   READ responses are placed on arrival; the retransmit timer follows the measured round
//!   trip, with a short RTO_low when at most [`RTO_LOW_PACKETS`] PSNs are undelivered.
//! - **In flight.** New packets stop while `max_inflight` PSNs are *undelivered* (sent, not
//!   acknowledged, not held by the responder — IRN's BDP-FC counts them so) or the oldest
//!   unacknowledged PSN is [`SR_WINDOW`] behind: while a hole is repaired, new packets take
//!   the place of those the responder holds, so the line stays busy. Go-back-N stops at
//!   `max_inflight` unacknowledged PSNs.

use super::mtu::Mtu;

/// Bitmap window of selective repeat, in PSNs: the most PSNs the requester has beyond its
/// oldest unacknowledged one, and the responder remembers beyond ePSN (one SACK block). Twice
/// the in-flight cap ([`MAX_UNACKED_PSNS`](super::MAX_UNACKED_PSNS), rxe's go-back-N
/// window): while a hole is repaired, the requester keeps sending new packets in place of
/// those the responder already holds, so the line stays busy (see the requester's
/// `window_allows`).
pub const SR_WINDOW: u32 = 256;

/// Selective repeat: the responder queues a SACK after this many packets held since the last
/// one (counted in PSNs: a READ request holds its reservation; besides the SACKs that reveal a hole, [`DUP_THRESH`] PSNs beyond it, and those for a
/// packet that fills a hole: `Responder::out_of_order`). They only move what the responder
/// holds out of the requester's in-flight count, so they come at the loss-free ACK cadence:
/// the soft provider sends one plain ACK per 64 PSNs (`host::soft::tx_batch::ACK_MAX_PSNS`,
/// half of `MAX_UNACKED_PSNS`), and every AckReq packet asks for one (`MAX_PKTS_PER_ACK`).
/// Each SACK is a datagram and, on a host, a wake-up of the requester's thread. (16 until
/// 2026-11-26, with a SACK for every AckReq packet besides.)
pub const SACK_EVERY: u32 = 32;

/// Selective repeat: a PSN counts as lost once the peer holds a PSN at least this far beyond
/// it (reordering by fewer packets causes no resend; RFC 6675's DupThresh).
pub const DUP_THRESH: u32 = 3;

/// Selective repeat: shortest reorder window for READ responses, ns. A missing READ
/// response that fewer than [`DUP_THRESH`] later PSNs overtook counts as lost once the first
/// response beyond it arrived this long ago (`Requester::reorder_window_ns`: a quarter of the
/// smoothed round trip, at least this, at most [`RTO_LOW_MIN_NS`]) — RACK's reordering
/// window (RFC 8985 §6.2: RTT/4), so that a response overtaken by one or two others is not
/// read again while a lost one at the tail of a stuck window is still asked for well before
/// RTO_low.
pub const REORDER_WINDOW_MIN_NS: u64 = 50_000;

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

/// Selective repeat: floor of the time a re-READ's answer may take before the requester asks
/// again (`Requester::reread_rto_ns`). The responder answers re-READs ahead of its response
/// queue, so the answer is due within one unloaded round trip; a spurious re-READ costs one
/// request and the duplicates of its run, a lost one a stuck window until the timer.
pub const RTO_REREAD_MIN_NS: u64 = 250_000;

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
/// (`host::mesh::rail`). Selective repeat: it wins or ties at every loss rate measured,
/// loss-free included, with the bench's default buffer footprint (every WRITE to the same
/// buffer, perftest's and NCCL's reuse) — `docs/reliability.md`, "Default". Kernel rxe,
/// hardware QPs, the device model, perftest and `rdmesh pingpong` peers always get go-back-N,
/// whatever this says.
pub const NEGOTIATED_RECOVERY: Recovery = Recovery::Selective;

/// Packets in flight that keep a path of `rate_mbps` Mb/s and round-trip time `rtt_ns` busy at
/// path MTU `mtu`: ⌈rate · RTT / (8 · PMTU)⌉, at least 1, at most
/// [`MAX_UNACKED_PSNS`](super::MAX_UNACKED_PSNS). A starting point for
/// [`RcQp::set_max_inflight`](super::RcQp::set_max_inflight) (IRN "BDP-FC").
pub const fn bdp_packets(rate_mbps: u64, rtt_ns: u64, mtu: Mtu) -> u32 {
    // Mb/s · ns = 10^-3 bit; bytes = rate · rtt / 8000.
    let bytes = (rate_mbps as u128 * rtt_ns as u128).div_ceil(8000);
    let pkts = bytes.div_ceil(mtu.bytes() as u128);
    if pkts == 0 {
        1
    } else if pkts > super::MAX_UNACKED_PSNS as u128 {
        super::MAX_UNACKED_PSNS
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
        assert_eq!(
            bdp_packets(100_000, 20_000, Mtu::Mtu1024),
            crate::rc::MAX_UNACKED_PSNS
        );
        assert_eq!(bdp_packets(0, 10_000, Mtu::Mtu256), 1);
        // 25 Gb/s · 8 µs = 25_000 B / 1024 = 24.4 → 25.
        assert_eq!(bdp_packets(25_000, 8_000, Mtu::Mtu1024), 25);
        assert_eq!(Recovery::default(), Recovery::GoBackN);
    }
}
