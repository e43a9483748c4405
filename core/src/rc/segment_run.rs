//! Segmenting an RDMA WRITE into a run of full-MTU packets in one call.
//!
//! A bulk WRITE is mostly packets that differ from the one before only in their PSN, the
//! AckReq bit and — for a self-placing (split) WRITE — the RETH's virtual address: the
//! RDMA_WRITE_MIDDLE packets of an ordinary WRITE (IBTA vol. 1 §9.4.1: no RETH, payload of
//! exactly the path MTU, pad 0), or the full-MTU RDMA_WRITE_ONLY packets of a split one (each
//! with a RETH whose DMA length is the MTU). [`Requester::poll_transmit`] builds each packet
//! from the work request: it checks the window, the credits and the READ/atomic depth, builds a
//! [`TransportRepr`](crate::wire::TransportRepr), computes its length and emits every header
//! field — work that repeats per packet with the same result but for those fields.
//! [`Requester::poll_transmit_run`] takes the packet just built as a template and writes the
//! next packets of the same message by copying its headers and setting the fields that differ,
//! with the same bookkeeping per packet (the window checked for each, PSN, AckReq every
//! [`MAX_PKTS_PER_ACK`] packets, send times, counters). A host's segmentation offload does the
//! same to a TCP segment's headers. The result is byte for byte what repeated `poll_transmit`
//! calls give (tested below).

use super::counters::RcCounters;
use super::memory::{gather, MemoryAccess};
use super::packet::deque_get;
use super::requester::{Requester, MAX_PKTS_PER_ACK};
use super::timer::Instant;
use super::{Fatal, WcStatus};
use crate::wire::{bth, reth, Opcode};

impl<const SQ: usize> Requester<SQ> {
    /// Continues the message whose previous packet [`poll_transmit`](Self::poll_transmit)
    /// just built into `buf[..len]` with up to `max` more packets like it: packet `j` (1 ..=
    /// `max`) is written to `buf[j * stride..j * stride + len]` (bytes; `stride ≥ len` leaves
    /// room for the host's ICRC between packets). Only packets that differ from the template in
    /// PSN, AckReq and a split WRITE's RETH VA are built: full-MTU RDMA_WRITE_MIDDLE packets of
    /// an RDMA WRITE (with or without immediate), or full-MTU RDMA_WRITE_ONLY packets of a
    /// split one; the run stops before the message's last packet, before a packet the window
    /// does not allow, and at `max` or the end of `buf`. Returns the number built — 0 when the
    /// template is not such a packet of the message at the cursor, a selective resend is
    /// pending, or an RNR wait runs (then `poll_transmit` goes on as usual).
    ///
    /// # Errors
    /// [`Fatal`] after completing the WQE with `LocProtErr` (and flushing the rest) when its
    /// local buffer cannot be read; the packets of the run built before it are not to be sent.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn poll_transmit_run<M: MemoryAccess + ?Sized>(
        &mut self,
        now: Instant,
        mem: &mut M,
        buf: &mut [u8],
        len: usize,
        stride: usize,
        max: usize,
        ctr: &mut RcCounters,
    ) -> Result<usize, Fatal> {
        let mtu = self.mtu.bytes() as usize;
        if max == 0 || stride < len || self.rnr_timer.is_armed() {
            return Ok(0);
        }
        if self.selective() && !self.resend.is_empty() {
            return Ok(0);
        }
        let idx = self.cur_idx;
        let Some(entry) = deque_get(&self.sq, idx) else {
            return Ok(0);
        };
        let (opcode, hl) = if entry.split {
            (Opcode::RcRdmaWriteOnly, bth::HEADER_LEN + reth::HEADER_LEN)
        } else {
            (Opcode::RcRdmaWriteMiddle, bth::HEADER_LEN)
        };
        // The template: this message's packet just before the cursor, a full one of `opcode`.
        let template_ok = entry.wqe.opcode.is_write()
            && self.cur_pkt >= 1
            && len == hl + mtu
            && buf.len() >= len
            && bth::Packet::new_checked(&buf[..len]).is_ok_and(|p| {
                p.opcode() == opcode && p.pad_cnt() == 0 && p.psn().add(1) == self.psn
            });
        if !template_ok {
            return Ok(0);
        }
        let mut built = 0;
        while built < max {
            let entry = match deque_get(&self.sq, idx) {
                Some(e) => e,
                None => break,
            };
            let k = self.cur_pkt;
            let at = (built + 1) * stride;
            if k + 1 >= entry.npkts || at + len > buf.len() || !self.window_allows(entry) {
                break;
            }
            let psn = self.psn;
            debug_assert!(psn == entry.first_psn.add(k));
            let off = k as u64 * mtu as u64;
            let ack_req = self.noack_pkts + 1 >= MAX_PKTS_PER_ACK;
            buf.copy_within(..hl, at);
            let pkt = &mut buf[at..at + len];
            let mut b = bth::Packet::new_unchecked(&mut pkt[..bth::HEADER_LEN]);
            b.set_psn(psn);
            b.set_ack_req(ack_req);
            if entry.split {
                reth::Packet::new_unchecked(&mut pkt[bth::HEADER_LEN..hl])
                    .set_va(entry.wqe.remote_addr.wrapping_add(off));
            }
            if gather(mem, &entry.wqe.sg_list, off, &mut pkt[hl..]).is_err() {
                self.complete_in_error(idx, WcStatus::LocProtErr);
                return Err(Fatal);
            }
            // The bookkeeping of `poll_transmit` for a new packet that is not the last.
            self.count_sent(now, psn, mtu, ctr);
            self.advance_past(psn, 1, ack_req);
            self.cur_pkt += 1;
            built += 1;
        }
        if built > 0 {
            self.arm_retrans_timer(now);
        }
        Ok(built)
    }
}

#[cfg(test)]
mod test {
    use std::vec;
    use std::vec::Vec;

    use super::super::tests::{pattern, recv_wqe, send_wqe, sge, Access, Dir, Pair};
    use super::super::{Mtu, Recovery, SendOpcode, MAX_UNACKED_PSNS};
    use crate::wire::Opcode;

    const KEY_A: u32 = 0xa0;
    const KEY_B: u32 = 0xb0;
    const BASE_A: u64 = 0x10_0000;
    const BASE_B: u64 = 0x80_0000;
    const LEN: usize = 300_000;

    /// Posts WRITEs (plain, with immediate, over two SGEs, overlapping) of lengths around
    /// multiples of the MTU, and a SEND between them, then moves packets until both sides are
    /// idle. Returns the pair.
    fn exchange(recovery: Recovery, mtu: Mtu, max_inflight: u32, runs: bool) -> Pair {
        let mut p = Pair::new_in(recovery, mtu, 0xff_fff0, 77);
        p.runs = runs;
        p.a.set_max_inflight(max_inflight);
        p.mem_a.add(KEY_A, BASE_A, LEN, Access::ALL, pattern(1));
        p.mem_b.add(KEY_B, BASE_B, LEN, Access::ALL, pattern(2));
        let m = mtu.bytes();
        for i in 0..4 {
            p.b.post_recv(recv_wqe(100 + i, &[sge(BASE_B + 250_000, 4096, KEY_B)]))
                .unwrap();
        }
        let writes = [
            (SendOpcode::RdmaWrite, 20 * m + 3, 0u64),
            (SendOpcode::RdmaWriteWithImm, 5 * m, 8),
            (SendOpcode::Send, 100, 0),
            (SendOpcode::RdmaWrite, 3 * m, 16),
            (SendOpcode::RdmaWrite, 2 * m - 1, 8),
            (SendOpcode::RdmaWriteWithImm, 33 * m + 1, 64),
        ];
        for (i, &(op, len, at)) in writes.iter().enumerate() {
            let half = len / 3;
            let sges = [
                sge(BASE_A + at, half, KEY_A),
                sge(BASE_A + at + half as u64, len - half, KEY_A),
            ];
            let remote = if op == SendOpcode::Send {
                0
            } else {
                BASE_B + at
            };
            p.a.post_send(send_wqe(i as u64, op, &sges, remote, KEY_B))
                .unwrap();
        }
        p.run();
        p
    }

    /// A flush that continues packets with runs puts the same bytes on the wire, in the same
    /// order, as one that polls each packet, and both ends finish in the same state.
    #[test]
    fn a_run_equals_the_packets_polled_one_by_one() {
        for recovery in [Recovery::GoBackN, Recovery::Selective] {
            for mtu in [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096] {
                for max_inflight in [MAX_UNACKED_PSNS, 20, 7, 1] {
                    let case = std::format!("{recovery:?}, {mtu:?}, in flight {max_inflight}");
                    let mut one = exchange(recovery, mtu, max_inflight, false);
                    let mut run = exchange(recovery, mtu, max_inflight, true);
                    assert_eq!(run.wire.len(), one.wire.len(), "{case}");
                    for (i, (x, y)) in run.wire.iter().zip(&one.wire).enumerate() {
                        assert_eq!(x, y, "{case}: packet {i}");
                    }
                    assert_eq!(run.a.counters(), one.a.counters(), "{case}");
                    assert_eq!(run.b.counters(), one.b.counters(), "{case}");
                    assert_eq!(
                        run.mem_b.bytes(KEY_B, BASE_B, LEN),
                        one.mem_b.bytes(KEY_B, BASE_B, LEN),
                        "{case}"
                    );
                    assert_eq!(
                        run.send_completions(Dir::AtoB),
                        one.send_completions(Dir::AtoB),
                        "{case}"
                    );
                    assert_eq!(
                        run.recv_completions(Dir::BtoA),
                        one.recv_completions(Dir::BtoA),
                        "{case}"
                    );
                }
            }
        }
    }

    /// Runs do build packets: a 40-packet WRITE with the window open leaves in a few
    /// transmits — a go-back-N WRITE's first packet (RDMA_WRITE_FIRST, with a RETH) alone,
    /// then the second as the template of a run; a split WRITE's first packet starts a run.
    #[test]
    fn runs_build_the_middle_of_a_message() {
        for recovery in [Recovery::GoBackN, Recovery::Selective] {
            let mtu = Mtu::Mtu1024;
            let mut p = Pair::new_in(recovery, mtu, 10, 20);
            p.mem_a.add(KEY_A, BASE_A, LEN, Access::ALL, pattern(3));
            p.mem_b.add(KEY_B, BASE_B, LEN, Access::ALL, pattern(4));
            let len = 40 * mtu.bytes();
            let sges = [sge(BASE_A, len, KEY_A)];
            p.a.post_send(send_wqe(1, SendOpcode::RdmaWrite, &sges, BASE_B, KEY_B))
                .unwrap();
            p.runs = true;
            let mut calls = vec![];
            while p.transmit(Dir::AtoB) {
                calls.push(p.wire.len());
            }
            let want = match recovery {
                // 1, 1 + 16, 1 + 16 + 16, the last 7 (6 in a run after the template, the last
                // packet alone).
                Recovery::GoBackN => vec![1, 17, 33, 39, 40],
                Recovery::Selective => vec![16, 32, 39, 40],
            };
            assert_eq!(calls, want, "{recovery:?}");
            let opcodes: Vec<Opcode> = p
                .trace
                .iter()
                .filter(|(d, _, _)| *d == Dir::AtoB)
                .map(|(_, h, _)| h.bth.opcode)
                .collect();
            assert_eq!(opcodes.len(), 40, "{recovery:?}");
            p.run();
            assert_eq!(
                p.mem_b.bytes(KEY_B, BASE_B, len as usize),
                p.mem_a.bytes(KEY_A, BASE_A, len as usize),
                "{recovery:?}"
            );
        }
    }
}
