//! Packing what a QP has ready into UDP GSO sends, and coalescing ACKs.
//!
//! # GSO batches
//! Packets of one flush are written back to back into one buffer. A UDP GSO send carries
//! segments of one size, and the last may be shorter (udp(7) `UDP_SEGMENT`): full path-MTU
//! packets of a message followed by its shorter last packet go out in one `sendmsg`. A packet
//! longer than the batch's segment size starts a new batch.
//!
//! # ACK coalescing
//! IBTA vol. 1 §9.7.5.1.2 lets a responder acknowledge several requests with one ACK (the ACK's
//! PSN is cumulative), and every ACK costs a datagram through both kernels. The soft provider
//! holds back plain ACKs:
//! - of RDMA WRITE requests — which complete nothing at the responder and whose requester
//!   usually polls memory, not its CQ — until [`ACK_MAX_PSNS`] PSNs are unacknowledged or the
//!   first held ACK is [`ACK_DELAY_NS`] old;
//! - of SEND and WRITE with immediate ("urgent": the requester likely waits for the
//!   completion) only until the QP sends anything else (the reply of a ping-pong goes out with
//!   the ACK in one `sendmmsg`), the progress thread — receiving for no application — ends a
//!   burst, or [`URGENT_ACK_DELAY_NS`] passed.
//!
//! Both bounds are far below any retransmission timeout (4.096 µs · 2^timeout, ≥ 8 ms for
//! perftest's default 14). NAKs, RNR NAKs, READ responses and atomic ACKs leave at once.

use crate::soft::udp_io::{MAX_GSO_BYTES, MAX_GSO_SEGMENTS};

/// The longest a plain ACK of a WRITE is held back, ns.
pub(crate) const ACK_DELAY_NS: u64 = 50_000;
/// The longest an urgent ACK (of a SEND or WRITE with immediate) is held back, ns.
pub(crate) const URGENT_ACK_DELAY_NS: u64 = 20_000;
/// Held ACKs are sent once they would acknowledge this many PSNs past the last ACK sent: half
/// the requester's window of 128 packets (`rc::MAX_UNACKED_PSNS`), the cadence at which an
/// rdmesh or rxe requester asks for ACKs (AckReq every 64 packets, `rc::MAX_PKTS_PER_ACK`), so
/// the window moves while the other half is still in flight. A 64 KiB WRITE (16 packets)
/// asks for an ACK at its end: one ACK per four messages is sent.
pub(crate) const ACK_MAX_PSNS: u32 = 64;
const _: () = assert!(2 * ACK_MAX_PSNS <= rdmesh_core::rc::MAX_UNACKED_PSNS);
/// BTH (12 bytes) + AETH (4 bytes) + ICRC (4 bytes).
const ACK_LEN: usize = 20;
/// RC Acknowledge (IBTA vol. 1 §9.2, Table 38: 0b000_10001).
const OPCODE_RC_ACKNOWLEDGE: u8 = 0x11;

/// Segment accounting of one GSO send being built at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TxBatch {
    /// Bytes written so far.
    pub used: usize,
    /// The segment size (the first packet's length).
    pub seg: usize,
    /// Packets in the batch.
    pub count: usize,
    /// A shorter packet ended the batch.
    closed: bool,
    /// Most packets per send (1: no GSO).
    max_segments: usize,
}

/// What [`TxBatch::push`] did with the packet just written at `used`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Push {
    /// It is part of the batch.
    Added,
    /// It is longer than the batch's segments: send `..used` first, move the packet to the
    /// front and call [`TxBatch::restart`].
    SendFirst,
}

impl TxBatch {
    /// An empty batch of up to `max_segments` packets (1 disables GSO).
    pub(crate) fn new(max_segments: usize) -> TxBatch {
        TxBatch {
            used: 0,
            seg: 0,
            count: 0,
            closed: false,
            max_segments: max_segments.clamp(1, MAX_GSO_SEGMENTS),
        }
    }

    /// A batch of the one packet of `len` bytes at the start of its buffer (sent as a plain
    /// datagram: no GSO).
    pub(crate) fn single(len: usize) -> TxBatch {
        let mut b = TxBatch::new(1);
        b.push(len);
        b
    }

    /// Whether a packet of up to `max_len` bytes may be written at `used` and join the batch;
    /// `false`: send the batch first.
    pub(crate) fn has_room(&self, max_len: usize) -> bool {
        self.count == 0
            || (!self.closed
                && self.count < self.max_segments
                && self.used + max_len <= MAX_GSO_BYTES)
    }

    /// Whether a packet of `len` bytes may still end the batch as its last segment (the
    /// batch's segment size or shorter, within the GSO limits).
    pub(crate) fn can_append(&self, len: usize) -> bool {
        self.count > 0
            && !self.closed
            && len <= self.seg
            && self.count < self.max_segments
            && self.used + len <= MAX_GSO_BYTES
    }

    /// Accounts for a packet of `len` bytes just written at `used`.
    pub(crate) fn push(&mut self, len: usize) -> Push {
        if self.count == 0 {
            self.restart(len);
            return Push::Added;
        }
        if len > self.seg {
            return Push::SendFirst;
        }
        self.closed = len < self.seg;
        self.count += 1;
        self.used += len;
        Push::Added
    }

    /// How many more packets of exactly the segment size `len` bytes may follow the last one
    /// in the batch (0 when `len` is not its segment size, a shorter packet closed it, or it
    /// is empty).
    pub(crate) fn room_for(&self, len: usize) -> usize {
        if self.count == 0 || self.closed || len != self.seg {
            return 0;
        }
        (self.max_segments - self.count).min(MAX_GSO_BYTES.saturating_sub(self.used) / len)
    }

    /// Accounts for `n` packets of the segment size written after the last one (at most
    /// [`room_for`](Self::room_for) of it).
    pub(crate) fn push_run(&mut self, n: usize) {
        debug_assert!(n <= self.room_for(self.seg));
        self.count += n;
        self.used += n * self.seg;
    }

    /// Starts over with one packet of `len` bytes at the front.
    pub(crate) fn restart(&mut self, len: usize) {
        self.used = len;
        self.seg = len;
        self.count = 1;
        self.closed = false;
    }

    /// Empties the batch.
    pub(crate) fn clear(&mut self) {
        self.used = 0;
        self.count = 0;
        self.closed = false;
    }

    /// `(offset, length)` of each packet: segment `i` is sent with IPv4 ID `i`.
    pub(crate) fn packets(&self) -> impl Iterator<Item = (usize, usize)> {
        let (seg, used) = (self.seg.max(1), self.used);
        (0..used).step_by(seg).map(move |o| (o, seg.min(used - o)))
    }
}

/// The PSN of `ib` (BTH .. pad, no ICRC) when it is a plain RC ACK (AETH syndrome class ACK).
pub(crate) fn plain_ack_psn(ib: &[u8]) -> Option<u32> {
    if ib.len() != ACK_LEN - 4 || ib[0] != OPCODE_RC_ACKNOWLEDGE || ib[12] >> 5 != 0 {
        return None;
    }
    Some(u32::from_be_bytes([0, ib[9], ib[10], ib[11]]))
}

/// Whether ACKs of requests with this BTH opcode may be held back: RC RDMA WRITE First,
/// Middle, Last and Only (IBTA vol. 1 Table 38), not those with immediate data.
pub(crate) fn coalesces_acks_of(opcode: u8) -> bool {
    matches!(opcode, 0x06 | 0x07 | 0x08 | 0x0a)
}

/// Whether the ACK of a request with BTH `opcode` and SE bit `solicited` is urgent (held only
/// until the QP sends anything, at most [`URGENT_ACK_DELAY_NS`]) rather than coalesced like a
/// WRITE's ([`ACK_DELAY_NS`], [`ACK_MAX_PSNS`]): every request [`coalesces_acks_of`] does not
/// name, except — on a QP with lazy SEND ACKs (`QueuePair::set_lazy_send_acks`) — one without
/// SE, whose ACK then rides with anything the QP sends ([`AckHold::ride_any`]).
pub(crate) fn urgent_ack_of(opcode: u8, solicited: bool, lazy_send_acks: bool) -> bool {
    !coalesces_acks_of(opcode) && (solicited || !lazy_send_acks)
}

/// The plain ACK a QP holds back, if any.
#[derive(Debug, Clone, Default)]
pub(crate) struct AckHold {
    pkt: [u8; ACK_LEN],
    held: bool,
    /// When the oldest ACK now covered was held, ns since the device epoch.
    since_ns: u64,
    psn: u32,
    /// PSN of the last ACK sent.
    sent_psn: Option<u32>,
    /// The held ACK covers a SEND or WRITE with immediate.
    urgent: bool,
    /// The held ACK covers a SEND without SE on a QP with lazy SEND ACKs: it rides with any
    /// packet the QP sends (nobody waits for it, but it costs nothing there).
    rides_any: bool,
}

impl AckHold {
    /// Holds `ib` (a plain ACK, BTH + AETH) with PSN `psn`, replacing an older held one;
    /// `true` when it superseded one (which is then never sent).
    /// `urgent`: it acknowledges a request whose requester likely waits (see the module docs).
    pub(crate) fn hold(&mut self, now_ns: u64, ib: &[u8], psn: u32, urgent: bool) -> bool {
        let superseded = self.held;
        if !self.held {
            self.since_ns = now_ns;
            self.urgent = false;
            self.rides_any = false;
        }
        self.urgent |= urgent;
        self.held = true;
        self.pkt[..ib.len()].copy_from_slice(ib);
        self.psn = psn;
        superseded
    }

    /// Lets the held ACK ride with whatever the QP sends next, however young (an ACK of a
    /// SEND without SE on a QP with lazy SEND ACKs: held like a WRITE's, but never worth a
    /// datagram of its own when a packet goes anyway).
    pub(crate) fn ride_any(&mut self) {
        self.rides_any = self.held;
    }

    /// Whether an ACK is held.
    pub(crate) fn held(&self) -> bool {
        self.held
    }

    /// Whether an urgent ACK is held.
    pub(crate) fn urgent(&self) -> bool {
        self.held && self.urgent
    }

    /// Whether the held ACK should go along with data being sent now: it is urgent, half of its
    /// delay has passed (it would soon need a datagram of its own), or it is due (the PSN
    /// bound: riding, it costs no datagram of its own either).
    pub(crate) fn rides(&self, now_ns: u64) -> bool {
        self.held
            && (self.urgent
                || self.rides_any
                || now_ns.saturating_sub(self.since_ns) >= self.delay() / 2
                || self.due(now_ns))
    }

    /// Whether the held ACK must go now.
    pub(crate) fn due(&self, now_ns: u64) -> bool {
        self.held
            && (now_ns.saturating_sub(self.since_ns) >= self.delay()
                || self.sent_psn.map_or(true, |s| {
                    self.psn.wrapping_sub(s) & 0x00ff_ffff >= ACK_MAX_PSNS
                }))
    }

    /// When the held ACK goes at the latest, ns since the device epoch.
    pub(crate) fn deadline(&self) -> Option<u64> {
        self.held.then_some(self.since_ns + self.delay())
    }

    fn delay(&self) -> u64 {
        if self.urgent {
            URGENT_ACK_DELAY_NS
        } else {
            ACK_DELAY_NS
        }
    }

    /// Takes the held ACK into `buf` (BTH + AETH, room left for the ICRC); its length.
    pub(crate) fn take(&mut self, buf: &mut [u8]) -> Option<usize> {
        if !self.held {
            return None;
        }
        self.held = false;
        self.sent_psn = Some(self.psn);
        let n = ACK_LEN - 4;
        buf[..n].copy_from_slice(&self.pkt[..n]);
        Some(n)
    }

    #[cfg(test)]
    /// Records an ACK sent at once (a later held ACK counts PSNs from it) and drops the held
    /// one it supersedes.
    pub(crate) fn sent(&mut self, psn: u32) {
        self.held = false;
        self.sent_psn = Some(psn);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn batches(lens: &[usize], max_segments: usize) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        let mut b = TxBatch::new(max_segments);
        let mut cur = Vec::new();
        for &len in lens {
            if !b.has_room(len) {
                out.push(std::mem::take(&mut cur));
                b.clear();
            }
            match b.push(len) {
                Push::Added => cur.push(len),
                Push::SendFirst => {
                    out.push(std::mem::take(&mut cur));
                    b.restart(len);
                    cur.push(len);
                }
            }
        }
        if b.count > 0 {
            out.push(cur);
        }
        out
    }

    #[test]
    fn equal_segments_then_one_shorter_share_a_send() {
        assert_eq!(
            batches(&[4124, 4124, 100, 4124, 200], 64),
            [vec![4124, 4124, 100], vec![4124, 200]]
        );
        // A longer packet starts a new batch; 16 packets of 4124 bytes exceed 64 KiB.
        assert_eq!(batches(&[100, 4124], 64), [vec![100], vec![4124]]);
        let b = batches(&[4124; 16], 64);
        assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), [15, 1]);
        // Without GSO every packet is its own send.
        assert_eq!(batches(&[8, 8], 1), [vec![8], vec![8]]);
        let mut t = TxBatch::new(64);
        assert!(!t.can_append(4), "an empty batch has no segment size yet");
        t.push(10);
        assert!(t.can_append(10) && !t.can_append(11));
        t.push(10);
        t.push(4);
        assert_eq!(
            t.packets().collect::<Vec<_>>(),
            [(0, 10), (10, 10), (20, 4)]
        );
    }

    #[test]
    fn a_run_fills_the_batch_to_its_limits() {
        let mut t = TxBatch::new(64);
        assert_eq!(
            t.room_for(4124),
            0,
            "an empty batch has no segment size yet"
        );
        t.push(4124);
        // 15 segments of 4124 bytes fit 65507: 14 more.
        assert_eq!(t.room_for(4124), 14);
        assert_eq!(t.room_for(4000), 0, "only packets of the segment size");
        t.push_run(14);
        assert_eq!((t.count, t.used, t.room_for(4124)), (15, 15 * 4124, 0));
        assert!(!t.has_room(4124));
        // The segment count limits too; a shorter packet closes the batch.
        let mut t = TxBatch::new(4);
        t.push(100);
        assert_eq!(t.room_for(100), 3);
        t.push(50);
        assert_eq!(t.room_for(100), 0);
    }

    #[test]
    fn acks_are_held_until_psns_or_time_run_out() {
        let mut ack = [0u8; 16];
        ack[0] = OPCODE_RC_ACKNOWLEDGE;
        ack[11] = 5;
        assert_eq!(plain_ack_psn(&ack), Some(5));
        ack[12] = 0b011_00000; // NAK
        assert_eq!(plain_ack_psn(&ack), None);
        ack[12] = 0;
        let mut h = AckHold::default();
        h.sent(4);
        assert!(!h.hold(1_000, &ack, 5, false));
        assert!(!h.due(1_000));
        assert!(!h.rides(1_000) && h.rides(1_000 + ACK_DELAY_NS / 2));
        assert!(h.due(1_000 + ACK_DELAY_NS));
        assert_eq!(h.deadline(), Some(1_000 + ACK_DELAY_NS));
        assert!(
            h.hold(2_000, &ack, 4 + ACK_MAX_PSNS, false),
            "supersedes the held one"
        );
        assert!(h.due(2_000), "a quarter window unacknowledged");
        assert!(h.rides(2_000), "a due ACK rides with data sent now");
        let mut buf = [0u8; 20];
        assert_eq!(h.take(&mut buf), Some(16));
        assert_eq!(h.take(&mut buf), None);
        assert!(coalesces_acks_of(0x0a) && !coalesces_acks_of(0x0b) && !coalesces_acks_of(0x04));
        // An urgent ACK has the shorter bound.
        let mut u = AckHold::default();
        u.sent(4);
        u.hold(0, &ack, 5, true);
        assert!(u.urgent() && !u.due(URGENT_ACK_DELAY_NS - 1) && u.due(URGENT_ACK_DELAY_NS));
        assert_eq!(u.take(&mut buf), Some(16));
        assert!(!u.urgent());
        // SEND only (0x04) and SEND last (0x02): urgent unless the QP is lazy and SE is clear;
        // WRITEs never.
        for op in [0x04, 0x02] {
            assert!(urgent_ack_of(op, false, false) && urgent_ack_of(op, true, false));
            assert!(
                urgent_ack_of(op, true, true),
                "SE keeps a SEND's ACK urgent"
            );
            assert!(
                !urgent_ack_of(op, false, true),
                "a lazy QP holds an unsolicited SEND's"
            );
        }
        assert!(!urgent_ack_of(0x0a, true, false) && !urgent_ack_of(0x0a, false, true));
        // A lazy SEND ACK: held as a WRITE's, but it rides with anything sent.
        let mut l = AckHold::default();
        l.sent(4);
        l.hold(0, &ack, 5, false);
        assert!(!l.rides(1));
        l.ride_any();
        assert!(l.rides(1) && !l.urgent());
        assert!(!l.due(ACK_DELAY_NS - 1) && l.due(ACK_DELAY_NS));
        assert_eq!(l.take(&mut buf), Some(16));
        l.hold(10, &ack, 6, false);
        assert!(!l.rides(11), "taking it ends the riding rule");
    }
}
