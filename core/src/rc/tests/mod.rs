//! RcQp tests: two QPs wired back to back through an in-memory link, every packet emitted and
//! parsed through the wire layer (`TransportRepr::emit`/`parse`), memory in `Vec`s.

mod atomics;
mod basic;
mod congestion;
mod credits;
mod errors;
mod goodput;
mod loss;
mod property;
mod selective;

use std::collections::VecDeque;
use std::vec;
use std::vec::Vec;

use super::*;
use crate::wire::{Opcode, Psn, TransportRepr};

pub(crate) type Qp = RcQp<64, 64>;

/// Access flags of a test memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Access {
    pub(crate) local_write: bool,
    pub(crate) remote_read: bool,
    pub(crate) remote_write: bool,
    pub(crate) remote_atomic: bool,
}

impl Access {
    pub(crate) const ALL: Access = Access {
        local_write: true,
        remote_read: true,
        remote_write: true,
        remote_atomic: true,
    };
}

/// A registered region: `key` is both L_Key and R_Key.
#[derive(Debug, Clone)]
pub(crate) struct Region {
    pub(crate) key: u32,
    pub(crate) addr: u64,
    pub(crate) data: Vec<u8>,
    pub(crate) access: Access,
    /// How many times each byte was written.
    pub(crate) writes: Vec<u32>,
}

/// Vec-backed memory with per-byte write counters, checking keys, bounds and access flags.
#[derive(Debug, Default, Clone)]
pub(crate) struct TestMem {
    pub(crate) regions: Vec<Region>,
}

impl TestMem {
    /// Registers `len` bytes at `addr` under `key`, filled with `fill(i)`.
    pub(crate) fn add(
        &mut self,
        key: u32,
        addr: u64,
        len: usize,
        access: Access,
        fill: impl Fn(usize) -> u8,
    ) {
        self.regions.push(Region {
            key,
            addr,
            data: (0..len).map(fill).collect(),
            access,
            writes: vec![0; len],
        });
    }

    pub(crate) fn region(&self, key: u32) -> &Region {
        self.regions.iter().find(|r| r.key == key).expect("region")
    }

    pub(crate) fn bytes(&self, key: u32, addr: u64, len: usize) -> &[u8] {
        let r = self.region(key);
        let off = (addr - r.addr) as usize;
        &r.data[off..off + len]
    }

    /// The 8 bytes at `addr` as a native-endian u64 (the atomics' byte order).
    pub(crate) fn u64_at(&self, key: u32, addr: u64) -> u64 {
        u64::from_ne_bytes(self.bytes(key, addr, 8).try_into().unwrap())
    }

    pub(crate) fn write_counts(&self, key: u32, addr: u64, len: usize) -> &[u32] {
        let r = self.region(key);
        let off = (addr - r.addr) as usize;
        &r.writes[off..off + len]
    }

    fn locate(
        &mut self,
        key: u32,
        va: u64,
        len: u64,
        kind: AccessKind,
    ) -> Result<(usize, usize), MemError> {
        let (i, r) = self
            .regions
            .iter()
            .enumerate()
            .find(|(_, r)| r.key == key)
            .ok_or(MemError::InvalidKey)?;
        let allowed = match kind {
            AccessKind::LocalRead => true,
            AccessKind::LocalWrite => r.access.local_write,
            AccessKind::RemoteRead => r.access.remote_read,
            AccessKind::RemoteWrite => r.access.remote_write,
            AccessKind::RemoteAtomic => r.access.remote_atomic,
        };
        if !allowed {
            return Err(MemError::AccessDenied);
        }
        let off = va.checked_sub(r.addr).ok_or(MemError::OutOfBounds)?;
        if off.checked_add(len).ok_or(MemError::OutOfBounds)? > r.data.len() as u64 {
            return Err(MemError::OutOfBounds);
        }
        Ok((i, off as usize))
    }
}

impl MemoryAccess for TestMem {
    fn read(
        &mut self,
        key: u32,
        va: u64,
        out: &mut [u8],
        kind: AccessKind,
    ) -> Result<(), MemError> {
        let (i, off) = self.locate(key, va, out.len() as u64, kind)?;
        out.copy_from_slice(&self.regions[i].data[off..off + out.len()]);
        Ok(())
    }

    fn write(&mut self, key: u32, va: u64, data: &[u8], kind: AccessKind) -> Result<(), MemError> {
        let (i, off) = self.locate(key, va, data.len() as u64, kind)?;
        let r = &mut self.regions[i];
        r.data[off..off + data.len()].copy_from_slice(data);
        for w in &mut r.writes[off..off + data.len()] {
            *w += 1;
        }
        Ok(())
    }

    fn check(&mut self, key: u32, va: u64, len: u64, kind: AccessKind) -> Result<(), MemError> {
        self.locate(key, va, len, kind).map(|_| ())
    }
}

/// Which way a packet travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    AtoB,
    BtoA,
}

/// What the link does with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Deliver,
    Drop,
}

/// QPN of side A and side B.
pub(crate) const QPN_A: u32 = 0x11;
pub(crate) const QPN_B: u32 = 0x22;

pub(crate) fn rtr(local: u32, remote: u32, mtu: Mtu, rq_psn: u32) -> RtrConfig {
    RtrConfig {
        local_qpn: local,
        remote_qpn: remote,
        path_mtu: mtu,
        rq_psn: Psn::new(rq_psn),
        pkey: 0xffff,
        min_rnr_timer: 1, // 10 µs
        max_dest_rd_atomic: 4,
    }
}

pub(crate) fn rts(sq_psn: u32) -> RtsConfig {
    RtsConfig {
        sq_psn: Psn::new(sq_psn),
        timeout: 10, // 4.19 ms
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
    }
}

/// Parses one emitted packet the way the host does (headers, then payload without pad).
pub(crate) fn parse(pkt: &[u8]) -> (TransportRepr, &[u8]) {
    let (hdr, hl) = TransportRepr::parse(pkt).expect("emitted packet parses");
    let pad = hdr.bth.pad_cnt as usize;
    assert!(
        pkt[pkt.len() - pad..].iter().all(|&b| b == 0),
        "pad bytes are zero"
    );
    assert_eq!((pkt.len() - hl) % 4, 0, "payload + pad is a multiple of 4");
    (hdr, &pkt[hl..pkt.len() - pad])
}

/// Two QPs back to back.
pub(crate) struct Pair {
    pub(crate) a: Qp,
    pub(crate) b: Qp,
    pub(crate) mem_a: TestMem,
    pub(crate) mem_b: TestMem,
    pub(crate) now: Instant,
    /// Every packet put on the link, in order (with direction), for inspection.
    pub(crate) trace: Vec<(Dir, TransportRepr, usize)>,
    /// When each packet of `trace` was put on the link, and its length in bytes.
    pub(crate) times: Vec<(Instant, usize)>,
    /// Packets in flight.
    pub(crate) a_to_b: VecDeque<Vec<u8>>,
    pub(crate) b_to_a: VecDeque<Vec<u8>>,
    /// ECN codepoint each delivered packet carries (0 = Not-ECT).
    pub(crate) ecn: u8,
    /// [`transmit`](Pair::transmit) continues each packet with
    /// [`RcQp::poll_transmit_run`] (up to [`RUN_MAX`] more), as the soft provider's flush does.
    pub(crate) runs: bool,
    /// Every packet put on the link, in bytes.
    pub(crate) wire: Vec<(Dir, Vec<u8>)>,
}

/// Most packets one [`Pair::transmit`] adds with [`RcQp::poll_transmit_run`].
pub(crate) const RUN_MAX: usize = 15;

/// Send WQE helper.
pub(crate) fn send_wqe(
    wr_id: u64,
    opcode: SendOpcode,
    sges: &[Sge],
    remote_addr: u64,
    rkey: u32,
) -> SendWqe {
    SendWqe {
        wr_id,
        opcode,
        sg_list: heapless::Vec::from_slice(sges).unwrap(),
        remote_addr,
        rkey,
        imm: 0,
        signaled: true,
        solicited: false,
    }
}

pub(crate) fn recv_wqe(wr_id: u64, sges: &[Sge]) -> RecvWqe {
    RecvWqe {
        wr_id,
        sg_list: heapless::Vec::from_slice(sges).unwrap(),
    }
}

pub(crate) fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
    Sge { addr, length, lkey }
}

impl Pair {
    /// A pair in RTS with A's sq_psn = B's rq_psn = `psn_ab`, and B→A starting at `psn_ba`.
    pub(crate) fn new(mtu: Mtu, psn_ab: u32, psn_ba: u32) -> Pair {
        Self::new_in(Recovery::GoBackN, mtu, psn_ab, psn_ba)
    }

    /// [`Pair::new`] with both QPs in loss recovery mode `recovery`.
    pub(crate) fn new_in(recovery: Recovery, mtu: Mtu, psn_ab: u32, psn_ba: u32) -> Pair {
        Self::with_recovery(
            recovery,
            rtr(QPN_A, QPN_B, mtu, psn_ba),
            rts(psn_ab),
            rtr(QPN_B, QPN_A, mtu, psn_ab),
            rts(psn_ba),
        )
    }

    pub(crate) fn with(
        rtr_a: RtrConfig,
        rts_a: RtsConfig,
        rtr_b: RtrConfig,
        rts_b: RtsConfig,
    ) -> Pair {
        Self::with_recovery(Recovery::GoBackN, rtr_a, rts_a, rtr_b, rts_b)
    }

    pub(crate) fn with_recovery(
        recovery: Recovery,
        rtr_a: RtrConfig,
        rts_a: RtsConfig,
        rtr_b: RtrConfig,
        rts_b: RtsConfig,
    ) -> Pair {
        let mut a = Qp::new(rtr_a);
        let mut b = Qp::new(rtr_b);
        assert!(a.set_recovery(recovery) && b.set_recovery(recovery));
        a.to_rts(rts_a);
        b.to_rts(rts_b);
        Pair {
            a,
            b,
            mem_a: TestMem::default(),
            mem_b: TestMem::default(),
            now: Instant(1_000_000),
            trace: Vec::new(),
            times: Vec::new(),
            a_to_b: VecDeque::new(),
            b_to_a: VecDeque::new(),
            ecn: 0,
            runs: false,
            wire: Vec::new(),
        }
    }

    /// Polls one packet from a side onto the link. Returns `false` when it had nothing.
    /// With [`Pair::runs`], the packet is followed by the run of packets
    /// [`RcQp::poll_transmit_run`] builds after it.
    pub(crate) fn transmit(&mut self, dir: Dir) -> bool {
        const STRIDE: usize = 4096 + 64;
        let mut buf = vec![0u8; STRIDE * (RUN_MAX + 1)];
        let (qp, mem, q) = match dir {
            Dir::AtoB => (&mut self.a, &mut self.mem_a, &mut self.a_to_b),
            Dir::BtoA => (&mut self.b, &mut self.mem_b, &mut self.b_to_a),
        };
        let cap = qp.max_packet_len();
        let Some(n) = qp.poll_transmit(self.now, mem, &mut buf[..cap]) else {
            return false;
        };
        let more = if self.runs {
            // The ICRC's 4 bytes between packets, as in a GSO batch.
            qp.poll_transmit_run(self.now, mem, &mut buf, n, n + 4, RUN_MAX)
        } else {
            0
        };
        for j in 0..=more {
            let pkt = &buf[j * (n + 4)..j * (n + 4) + n];
            let (hdr, payload) = parse(pkt);
            self.trace.push((dir, hdr, payload.len()));
            self.times.push((self.now, n));
            self.wire.push((dir, pkt.to_vec()));
            q.push_back(pkt.to_vec());
        }
        true
    }

    /// Hands a raw packet to the receiving side.
    pub(crate) fn deliver(&mut self, dir: Dir, pkt: &[u8]) {
        let (hdr, payload) = parse(pkt);
        let (qp, mem) = match dir {
            Dir::AtoB => (&mut self.b, &mut self.mem_b),
            Dir::BtoA => (&mut self.a, &mut self.mem_a),
        };
        if self.ecn == 0 {
            qp.handle_packet(self.now, &hdr, payload, mem);
        } else {
            qp.handle_packet_ecn(self.now, &hdr, payload, self.ecn, mem);
        }
    }

    /// Moves the receiving side's pending CNP (if any) straight to the other side, through the
    /// wire layer. Returns `true` when one moved.
    pub(crate) fn forward_cnp(&mut self, dir: Dir) -> bool {
        let mut buf = [0u8; 64];
        let (from, to, mem) = match dir {
            Dir::AtoB => (&mut self.b, &mut self.a, &mut self.mem_a),
            Dir::BtoA => (&mut self.a, &mut self.b, &mut self.mem_b),
        };
        let Some(n) = from.poll_cnp(&mut buf) else {
            return false;
        };
        let (hdr, hl) = TransportRepr::parse(&buf[..n]).expect("CNP parses");
        assert_eq!(hl, n);
        to.handle_packet(self.now, &hdr, &[], mem);
        true
    }

    /// Moves packets until nothing moves, deciding each packet's fate with `fate`, and
    /// advancing time to the next deadline when idle. Returns after `max_steps` events at most.
    pub(crate) fn run_with(
        &mut self,
        max_steps: usize,
        mut fate: impl FnMut(Dir, &TransportRepr, &[u8]) -> Fate,
    ) {
        for _ in 0..max_steps {
            let mut moved = false;
            for dir in [Dir::AtoB, Dir::BtoA] {
                while self.transmit(dir) {
                    moved = true;
                }
            }
            for dir in [Dir::AtoB, Dir::BtoA] {
                let q = match dir {
                    Dir::AtoB => &mut self.a_to_b,
                    Dir::BtoA => &mut self.b_to_a,
                };
                if let Some(pkt) = q.pop_front() {
                    moved = true;
                    let (hdr, payload) = parse(&pkt);
                    if fate(dir, &hdr, payload) == Fate::Deliver {
                        self.deliver(dir, &pkt);
                    }
                }
            }
            if moved {
                continue;
            }
            let next = match (self.a.next_deadline(), self.b.next_deadline()) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, None) => x,
                (None, y) => y,
            };
            let Some(t) = next else { return };
            self.now = self.now.max(t);
            self.a.handle_timeout(self.now);
            self.b.handle_timeout(self.now);
        }
        panic!("link did not settle within {max_steps} steps");
    }

    /// Moves packets (lossless) until neither side sends anything; no time passes.
    pub(crate) fn settle(&mut self) {
        loop {
            let mut moved = false;
            for dir in [Dir::AtoB, Dir::BtoA] {
                while self.transmit(dir) {
                    moved = true;
                }
            }
            while let Some(pkt) = self.a_to_b.pop_front() {
                self.deliver(Dir::AtoB, &pkt);
                moved = true;
            }
            while let Some(pkt) = self.b_to_a.pop_front() {
                self.deliver(Dir::BtoA, &pkt);
                moved = true;
            }
            if !moved {
                return;
            }
        }
    }

    /// Advances time to the earliest deadline and runs both sides' timers; `false` if none.
    pub(crate) fn fire_timer(&mut self) -> bool {
        let next = match (self.a.next_deadline(), self.b.next_deadline()) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, None) => x,
            (None, y) => y,
        };
        let Some(t) = next else { return false };
        self.now = self.now.max(t);
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
        true
    }

    /// Runs with a lossless link.
    pub(crate) fn run(&mut self) {
        self.run_with(1_000_000, |_, _, _| Fate::Deliver);
    }

    pub(crate) fn send_completions(&mut self, side: Dir) -> Vec<WorkCompletion> {
        let qp = if side == Dir::AtoB {
            &mut self.a
        } else {
            &mut self.b
        };
        core::iter::from_fn(|| qp.poll_send_completion()).collect()
    }

    pub(crate) fn recv_completions(&mut self, side: Dir) -> Vec<WorkCompletion> {
        let qp = if side == Dir::AtoB {
            &mut self.a
        } else {
            &mut self.b
        };
        core::iter::from_fn(|| qp.poll_recv_completion()).collect()
    }

    /// Packets of the trace sent in `dir` with `opcode`.
    pub(crate) fn count(&self, dir: Dir, opcode: Opcode) -> usize {
        self.trace
            .iter()
            .filter(|(d, h, _)| *d == dir && h.bth.opcode == opcode)
            .count()
    }
}

/// Deterministic test pattern.
pub(crate) fn pattern(seed: u8) -> impl Fn(usize) -> u8 {
    move |i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8)
}

/// The completion the tests expect for a successful WQE on side A.
pub(crate) fn ok_wc(wr_id: u64, opcode: WcOpcode, byte_len: u32, qp_num: u32) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode,
        byte_len,
        imm_data: None,
        qp_num,
    }
}

/// `(wr_id, status)` of each completion, in order: what most error and recovery tests compare.
pub(crate) fn statuses(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}
