//! PCIe time for the model: a virtual clock, a cost model with cited, configurable parameters
//! ([`PcieParams`]) and a count of the PCIe transactions the device and the driver cause
//! ([`PcieCounters`]).
//!
//! The functional model runs every doorbell to completion synchronously (see
//! [`crate::model`]); this module gives each step a time on one virtual time line, in
//! picoseconds, without changing what the model does:
//!
//! - the **host CPU** has a clock ([`PcieState::cpu`]) that the driver advances for its own
//!   work ([`ModelDevice::cpu_work`](super::ModelDevice::cpu_work): building a WQE, polling a
//!   CQE) and that the device advances for each MMIO store (the doorbell sequence, a BlueFlame
//!   copy);
//! - the **PCIe link** is two servers, downstream (host → NIC: MMIO writes, read
//!   completions) and upstream (NIC → host: read requests, DMA writes), each TLP occupying its
//!   direction for `bytes / TLP bandwidth` in the first free gap at or after it is ready
//!   ([`Calendar`]) and arriving a fixed latency later;
//! - the **NIC** has a doorbell/WQE engine (a FIFO server: per-doorbell and per-WQE processing
//!   time) and a transmit port (a FIFO server at the line rate);
//! - the **remote side** (responder and its ACK) is a fixed turnaround, plus the ACK's wire time.
//!
//! Per send WQE, in ring order: the doorbell (or BlueFlame copy) that announced it arrives;
//! the NIC reads the WQEBBs with DMA reads of up to [`PcieParams::max_wqebbs_per_read`] WQEBBs
//! (none for a BlueFlame WQE), processes the WQE, reads the gather list's bytes (none when
//! inline), transmits the packets, gets the ACK, and — when the WQE is signaled — writes the
//! CQE, visible to the CPU a posted-write latency after it left the NIC. Everything is
//! computed when the functional model fetches the WQE, in ring order: the NIC engine and the
//! port serve WQEs in that order (as an in-order send queue does), the link directions fill
//! gaps in time. `docs/doorbell.md` lists the sources and where this differs from hardware.

use std::collections::VecDeque;

/// Picoseconds on the virtual time line.
pub type Ps = u64;

/// `ns` nanoseconds in picoseconds (rounded).
pub fn ps(ns: f64) -> Ps {
    (ns * 1000.0).round().max(0.0) as Ps
}

/// The cost model. [`Default`] is a ConnectX-7 in a PCIe Gen5 x16 slot with a 400 Gb/s port;
/// each field says where its default comes from (`docs/doorbell.md` has the references).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PcieParams {
    /// CPU time to build and store one WQE in the send ring, ns. Default 2: what
    /// `core/benches/mlx5_wqe.rs` measures for ctrl + raddr + data segment (rdma-core's
    /// mlx5dv.h helpers 1.4–1.9 ns, rdmesh's `SqWriter` 1.2–3 ns on the x86 machines it ran
    /// on). Set it from that bench on the machine of interest.
    pub cpu_post_ns: f64,
    /// CPU time of one 8-byte doorbell sequence (rdma-core `post_send_db`: barrier, dbrec
    /// store, `mmio_wc_start`, the 64-bit store, `mmio_flush_writes`), ns. Default 60: an
    /// `sfence` that drains a write-combining buffer to an uncached PCIe target costs the
    /// order of a PCIe posted write leaving the core. Assumption (Kalia et al. ATC'16 §3.1
    /// name MMIOs as the expensive part of posting but give no per-store time).
    pub cpu_doorbell_ns: f64,
    /// CPU time per 64-byte chunk of a BlueFlame copy (8 stores into the WC buffer and the
    /// flush), ns. Default 70 (the doorbell sequence plus seven more stores). Assumption.
    pub cpu_blueflame_ns: f64,
    /// CPU time to read and consume one CQE, ns. Default 5 (one cache miss on a line the
    /// NIC wrote is absorbed by DDIO; assumption).
    pub cpu_poll_ns: f64,
    /// PCIe transfer rate per lane, GT/s. Default 32 (Gen5; ConnectX-7 is Gen5 x16).
    pub gts: f64,
    /// PCIe lanes. Default 16.
    pub lanes: u32,
    /// Data-link overhead as a fraction of the raw rate: ACK and flow-control DLLPs and SKIP
    /// ordered sets. Default 8/168 + 8/168 + 4/1538 (pcie-model `TLP_bw` for Gen5 x16,
    /// MPS 256: the spec's ACK and FC update intervals).
    pub dll_overhead: f64,
    /// Maximum payload size, bytes (DMA writes are split at it). Default 256.
    pub mps: u32,
    /// Maximum read request size, bytes (DMA reads are split at it). Default 512.
    pub mrrs: u32,
    /// Read completion boundary, bytes: read data comes back in completions of this size.
    /// Default 64 (what Neugebauer et al. §3 observe from Intel root complexes; pcie-model
    /// `rcb_chunks`).
    pub rcb: u32,
    /// Bytes around a memory-write TLP's payload: 8 framing/sequence/LCRC + 4 header + 12
    /// 64-bit address header (pcie-model `TLP_MWr_Hdr_Sz`, 64-bit, no ECRC). Default 24.
    pub mwr_overhead: u32,
    /// Bytes of a memory-read request TLP (pcie-model `TLP_MRd_Hdr_Sz`). Default 24.
    pub mrd_overhead: u32,
    /// Bytes around a completion-with-data's payload (pcie-model `TLP_CplD_Hdr_Sz`). Default 20.
    pub cpld_overhead: u32,
    /// Round trip of a small DMA read: request leaves the NIC → first completion byte back, ns.
    /// Default 500 (Neugebauer et al. measure 400–600 ns for small reads on Xeon servers).
    pub dma_read_latency_ns: f64,
    /// One-way latency of a posted write (an MMIO store reaching the NIC, a DMA write becoming
    /// visible in host memory), ns. Default 250 (half the read round trip; assumption).
    pub posted_write_latency_ns: f64,
    /// NIC time to take a doorbell (decode, schedule the send queue), ns. Default 5
    /// (assumption; of the order of one message at the datasheet message rate).
    pub doorbell_proc_ns: f64,
    /// NIC time per WQE, ns. Default 1e9 / 370e6 = 2.70 (ConnectX-7 product brief: up to 370
    /// million messages per second).
    pub wqe_proc_ns: f64,
    /// Largest WQE fetch, in WQEBBs: the NIC reads the WQEBBs a doorbell announces with DMA
    /// reads of at most this many. Default 8 (= MRRS 512 / 64; assumption).
    pub max_wqebbs_per_read: u32,
    /// Port rate, Gb/s. Default 400 (ConnectX-7 NDR / 400GbE).
    pub link_gbps: f64,
    /// Bytes per Ethernet frame beyond the RoCEv2 packet: preamble + SFD 8, inter-frame gap
    /// 12, FCS 4 (IEEE 802.3). Default 24.
    pub frame_overhead: u32,
    /// Propagation delay of the cable, one way, ns. Default 10 (2 m of copper).
    pub propagation_ns: f64,
    /// Responder time from the last byte of a request to its ACK leaving: receive
    /// processing and the posted write of the payload, ns. Default 300 (assumption: a
    /// message's processing plus the payload's posted-write latency).
    pub remote_turnaround_ns: f64,
}

impl Default for PcieParams {
    fn default() -> Self {
        PcieParams {
            cpu_post_ns: 2.0,
            cpu_doorbell_ns: 60.0,
            cpu_blueflame_ns: 70.0,
            cpu_poll_ns: 5.0,
            gts: 32.0,
            lanes: 16,
            dll_overhead: 8.0 / 168.0 + 8.0 / 168.0 + 4.0 / 1538.0,
            mps: 256,
            mrrs: 512,
            rcb: 64,
            mwr_overhead: 24,
            mrd_overhead: 24,
            cpld_overhead: 20,
            dma_read_latency_ns: 500.0,
            posted_write_latency_ns: 250.0,
            doorbell_proc_ns: 5.0,
            wqe_proc_ns: 1e9 / 370e6,
            max_wqebbs_per_read: 8,
            link_gbps: 400.0,
            frame_overhead: 24,
            propagation_ns: 10.0,
            remote_turnaround_ns: 300.0,
        }
    }
}

impl PcieParams {
    /// Usable TLP bandwidth of one direction, bytes per ns: lanes × GT/s × 128/130 (Gen3 to
    /// Gen5 line code) less the data-link overhead.
    pub fn tlp_bytes_per_ns(&self) -> f64 {
        let code = if self.gts <= 5.0 {
            8.0 / 10.0
        } else {
            128.0 / 130.0
        };
        self.gts * self.lanes as f64 * code * (1.0 - self.dll_overhead) / 8.0
    }

    /// Time `bytes` occupy one direction of the link, ps.
    pub fn link_ps(&self, bytes: u64) -> Ps {
        ps(bytes as f64 / self.tlp_bytes_per_ns())
    }

    /// Time `bytes` occupy the Ethernet port, ps.
    pub fn wire_ps(&self, bytes: u64) -> Ps {
        ps(bytes as f64 * 8.0 / self.link_gbps)
    }

    /// Wire bytes of the RoCEv2 request packets of a message of `len` bytes at path MTU
    /// `mtu`, with `first_extra` bytes of extended header on the first packet (RETH 16 for
    /// WRITE) — Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 per packet, plus the frame
    /// overhead; returns (packets, bytes).
    pub fn message_wire_bytes(&self, len: u64, mtu: u64, first_extra: u64) -> (u64, u64) {
        let per_packet = 14 + 20 + 8 + 12 + 4 + self.frame_overhead as u64;
        let packets = len.div_ceil(mtu.max(1)).max(1);
        (packets, packets * per_packet + first_extra + len)
    }

    /// Wire bytes of an ACK (BTH + AETH 4).
    pub fn ack_wire_bytes(&self) -> u64 {
        14 + 20 + 8 + 12 + 4 + 4 + self.frame_overhead as u64
    }
}

/// PCIe transactions by type since the counters were reset, and the bytes they put on each
/// direction of the link (TLP overheads included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PcieCounters {
    /// 8-byte MMIO writes to a send doorbell register.
    pub mmio_doorbells: u64,
    /// Write-combined MMIO bursts to a BlueFlame register (one TLP each, up to 64 bytes).
    pub mmio_blueflame: u64,
    /// Other MMIO writes (init segment, CQ and EQ doorbells).
    pub mmio_other: u64,
    /// MMIO reads (non-posted: a request down, a completion up).
    pub mmio_reads: u64,
    /// DMA read requests for send WQEs.
    pub wqe_read_requests: u64,
    /// DMA read requests for payload (gather lists, RDMA READ responses are writes).
    pub data_read_requests: u64,
    /// Completions with data returned to the NIC.
    pub read_completions: u64,
    /// DMA writes of CQEs.
    pub cqe_writes: u64,
    /// DMA writes of EQEs and MSI-X messages.
    pub event_writes: u64,
    /// DMA writes of payload (received data, READ responses).
    pub data_writes: u64,
    /// Bytes on the downstream direction (host → NIC), TLP overheads included.
    pub down_bytes: u64,
    /// Bytes on the upstream direction (NIC → host), TLP overheads included.
    pub up_bytes: u64,
    /// Payload bytes read by DMA (WQEs and data).
    pub read_payload_bytes: u64,
    /// Payload bytes written by DMA (CQEs, EQEs, data).
    pub write_payload_bytes: u64,
    /// Send WQEs that went through the timing model.
    pub wqes: u64,
}

impl PcieCounters {
    /// MMIO writes of every kind.
    pub fn mmio_writes(&self) -> u64 {
        self.mmio_doorbells + self.mmio_blueflame + self.mmio_other
    }

    /// Bytes on both directions.
    pub fn total_bytes(&self) -> u64 {
        self.down_bytes + self.up_bytes
    }
}

/// What the MMIO store being handled is, for the doorbell that it may ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmioArrival {
    /// An 8-byte store that arrived at the NIC at the given time.
    Doorbell(Ps),
    /// A BlueFlame burst (the WQE travels with it) that arrived at the given time.
    BlueFlame(Ps),
}

/// A send doorbell as the NIC saw it: the WQEBBs up to `end` are announced at `at`;
/// `bf_index` is the WQE a BlueFlame copy carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoorbellSeen {
    /// Producer counter after the last WQE announced.
    pub end: u16,
    /// Arrival at the NIC, ps.
    pub at: Ps,
    /// WQE index delivered by BlueFlame (needs no fetch).
    pub bf_index: Option<u16>,
}

/// Per-QP timing state.
#[derive(Debug, Clone, Default)]
pub struct QpTiming {
    /// Doorbells not yet fully fetched, oldest first.
    pub doorbells: VecDeque<DoorbellSeen>,
    /// The WQE fetch read in progress: (first WQEBB, WQEBBs, arrival of its first
    /// completion's last byte, ps per completion).
    pub read: Option<(u16, u16, Ps, Ps)>,
    /// Time each WQE's ACK is back at the NIC, by ring slot (sized at first use).
    pub done: Vec<Ps>,
}

/// The busy intervals of one direction of the link. Transfers are placed in the first gap
/// at or after the time they are ready, so a transfer computed later by the functional model
/// (a later doorbell) can still go before one computed earlier that happens later in time (a
/// read completion 500 ns out).
#[derive(Debug, Clone, Default)]
pub struct Calendar {
    busy: std::collections::BTreeMap<Ps, Ps>,
}

impl Calendar {
    /// Most intervals kept; the oldest are forgotten beyond this.
    const KEEP: usize = 1 << 16;

    /// Reserves `dur` of link time at or after `t`, in the first free gaps (a transfer of
    /// several TLPs may use several gaps: the link is work-conserving); returns the end.
    pub fn reserve(&mut self, t: Ps, dur: Ps) -> Ps {
        let mut start = t;
        let mut left = dur;
        loop {
            if let Some((_, &e)) = self.busy.range(..=start).next_back() {
                start = start.max(e);
            }
            let next = self.busy.range(start..).next().map(|(&s, _)| s);
            let piece = match next {
                Some(s) if s - start < left => s - start,
                _ => left,
            };
            if piece > 0 {
                self.insert(start, start + piece);
            }
            left -= piece;
            if left == 0 {
                return start + piece;
            }
            start += piece;
        }
    }

    fn insert(&mut self, start: Ps, end: Ps) {
        let (mut lo, mut hi) = (start, end);
        if let Some((&s, &e)) = self.busy.range(..=lo).next_back() {
            if e == lo {
                lo = s;
                self.busy.remove(&s);
            }
        }
        if let Some(e) = self.busy.remove(&hi) {
            hi = e;
        }
        self.busy.insert(lo, hi);
        while self.busy.len() > Self::KEEP {
            let first = *self.busy.keys().next().expect("non-empty");
            self.busy.remove(&first);
        }
    }

    /// End of the last busy interval.
    pub fn last(&self) -> Ps {
        self.busy.values().next_back().copied().unwrap_or(0)
    }
}

/// The model's clock and link state (one per device; its own host CPU).
#[derive(Debug, Clone, Default)]
pub struct PcieState {
    /// Cost model.
    pub params: PcieParams,
    /// Transaction counts.
    pub counters: PcieCounters,
    /// The host CPU's clock, ps.
    pub cpu: Ps,
    /// Downstream direction's busy intervals.
    pub down_link: Calendar,
    /// Upstream direction's busy intervals.
    pub up_link: Calendar,
    /// NIC engine free at, ps.
    pub engine_free: Ps,
    /// Transmit port free at, ps.
    pub wire_free: Ps,
    /// The MMIO store being handled (set by the BAR for the doorbell code).
    pub arrival: Option<MmioArrival>,
    /// CQE visibility times, per CQ, in CQE order, until the driver takes them.
    pub cqe_times: std::collections::BTreeMap<u32, VecDeque<Ps>>,
}

/// Bytes of one read completion stream of `len` payload bytes (split at the RCB).
fn completions(p: &PcieParams, len: u64) -> (u64, u64) {
    let n = len.div_ceil(p.rcb as u64).max(1);
    (n, n * p.cpld_overhead as u64 + len)
}

impl PcieState {
    /// A clock at 0 with `params`.
    pub fn new(params: PcieParams) -> PcieState {
        PcieState {
            params,
            ..PcieState::default()
        }
    }

    /// Restarts the time line at 0 (counters kept).
    pub fn reset_clock(&mut self) {
        let (params, counters) = (self.params, self.counters);
        *self = PcieState::new(params);
        self.counters = counters;
    }

    /// The latest time anything on this device is busy until (a stand-in for "now" on the
    /// device side, for events the model does not time individually).
    pub fn device_now(&self) -> Ps {
        self.cpu
            .max(self.down_link.last())
            .max(self.up_link.last())
            .max(self.engine_free)
            .max(self.wire_free)
    }

    /// A downstream TLP of `bytes` leaving the host at `t`: returns its arrival at the NIC.
    pub fn down(&mut self, t: Ps, bytes: u64, latency: Ps) -> Ps {
        let dur = self.params.link_ps(bytes);
        self.counters.down_bytes += bytes;
        self.down_link.reserve(t, dur) + latency
    }

    /// An upstream TLP of `bytes` leaving the NIC at `t`: returns the time its last byte
    /// left the link (add a latency for its arrival).
    pub fn up(&mut self, t: Ps, bytes: u64) -> Ps {
        let dur = self.params.link_ps(bytes);
        self.counters.up_bytes += bytes;
        self.up_link.reserve(t, dur)
    }

    /// An MMIO write of `len` payload bytes (not a doorbell): counted, CPU time unchanged.
    pub fn mmio_other(&mut self, len: u64) {
        self.counters.mmio_other += 1;
        let t = self.cpu;
        let lat = ps(self.params.posted_write_latency_ns);
        self.down(t, len + self.params.mwr_overhead as u64, lat);
    }

    /// An MMIO read: a request down, a completion up; the CPU waits for it.
    pub fn mmio_read(&mut self, len: u64) {
        self.counters.mmio_reads += 1;
        let p = self.params;
        let t = self.cpu;
        let at = self.down(t, p.mrd_overhead as u64, ps(p.posted_write_latency_ns));
        let back = self.up(at, len + p.cpld_overhead as u64) + ps(p.posted_write_latency_ns);
        self.cpu = self.cpu.max(back);
    }

    /// The 8-byte send doorbell: the CPU runs the doorbell sequence, the store crosses the
    /// link. Returns its arrival at the NIC.
    pub fn mmio_doorbell(&mut self) -> Ps {
        self.counters.mmio_doorbells += 1;
        let p = self.params;
        self.cpu += ps(p.cpu_doorbell_ns);
        let t = self.cpu;
        self.down(t, 8 + p.mwr_overhead as u64, ps(p.posted_write_latency_ns))
    }

    /// A BlueFlame burst of `len` bytes (one write-combined TLP). Returns its arrival.
    pub fn mmio_blueflame(&mut self, len: u64) -> Ps {
        self.counters.mmio_blueflame += 1;
        let p = self.params;
        self.cpu += ps(p.cpu_blueflame_ns * (len as f64 / 64.0).max(1.0));
        let t = self.cpu;
        self.down(
            t,
            len + p.mwr_overhead as u64,
            ps(p.posted_write_latency_ns),
        )
    }

    /// A DMA write of `len` payload bytes leaving the NIC at `t` (split at MPS): returns when
    /// it is visible in host memory. `kind` picks the counter.
    pub fn dma_write(&mut self, t: Ps, len: u64, kind: WriteKind) -> Ps {
        let p = self.params;
        let tlps = len.div_ceil(p.mps as u64).max(1);
        match kind {
            WriteKind::Cqe => self.counters.cqe_writes += tlps,
            WriteKind::Event => self.counters.event_writes += tlps,
            WriteKind::Data => self.counters.data_writes += tlps,
        }
        self.counters.write_payload_bytes += len;
        let end = self.up(t, len + tlps * p.mwr_overhead as u64);
        end + ps(p.posted_write_latency_ns)
    }

    /// A DMA read of `len` bytes issued by the NIC at `t` (split at MRRS, completions at the
    /// RCB). Returns when the last byte is at the NIC. `wqe` picks the counter.
    pub fn dma_read(&mut self, t: Ps, len: u64, wqe: bool) -> Ps {
        let p = self.params;
        let reqs = len.div_ceil(p.mrrs as u64).max(1);
        if wqe {
            self.counters.wqe_read_requests += reqs;
        } else {
            self.counters.data_read_requests += reqs;
        }
        self.counters.read_payload_bytes += len;
        let sent = self.up(t, reqs * p.mrd_overhead as u64);
        let (n, bytes) = completions(&p, len);
        self.counters.read_completions += n;
        self.down(sent + ps(p.dma_read_latency_ns), bytes, 0)
    }
}

/// What a DMA write carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// A CQE.
    Cqe,
    /// An EQE or an MSI-X message.
    Event,
    /// Payload.
    Data,
}

/// One send WQE as the timing model needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WqeShape {
    /// WQE index.
    pub index: u16,
    /// WQEBBs.
    pub wqebbs: u16,
    /// Ring size in WQEBBs.
    pub ring_wqebbs: u32,
    /// Gather-list bytes read from host memory (0 for inline or READ).
    pub gather_bytes: u64,
    /// Message length on the wire (request payload; READ: 0 on the request side).
    pub wire_bytes: u64,
    /// Extended header bytes on the first packet (RETH 16 for WRITE / READ, 0 for SEND).
    pub first_extra: u64,
    /// Response bytes coming back (READ, atomics) and written to host memory.
    pub response_bytes: u64,
    /// Path MTU, bytes.
    pub mtu: u64,
    /// A NOP: no packet, no ACK.
    pub nop: bool,
}

impl PcieState {
    /// Times one WQE the functional model has just fetched (ring order) and returns when its
    /// ACK (or response) is back at the NIC; records it in `qp` for the CQE.
    pub fn send_wqe(&mut self, qp: &mut QpTiming, w: WqeShape) -> Ps {
        let p = self.params;
        if qp.done.len() != w.ring_wqebbs as usize {
            qp.done = vec![0; w.ring_wqebbs as usize];
        }
        // The doorbell that announced this WQE (drop those fully fetched).
        while let Some(d) = qp.doorbells.front() {
            let ahead = d.end.wrapping_sub(w.index);
            if ahead == 0 || ahead > 0x8000 {
                qp.doorbells.pop_front();
            } else {
                break;
            }
        }
        let db = qp.doorbells.front().copied().unwrap_or(DoorbellSeen {
            end: w.index.wrapping_add(w.wqebbs),
            at: self.device_now(),
            bf_index: None,
        });
        self.counters.wqes += 1;
        // The doorbell itself costs the engine once (when its first WQE is processed).
        let ready = if db.bf_index == Some(w.index) {
            qp.read = None;
            db.at
        } else {
            // WQEBB k of the WQE arrives with completion (index + k) of the current read.
            let mut last = 0;
            for k in 0..w.wqebbs {
                let bb = w.index.wrapping_add(k);
                let covered = qp
                    .read
                    .filter(|&(s, n, _, _)| bb.wrapping_sub(s) < n)
                    .is_some();
                if !covered {
                    let slot = u32::from(bb) & (w.ring_wqebbs - 1);
                    let to_end = (w.ring_wqebbs - slot) as u16;
                    let announced = db.end.wrapping_sub(bb).clamp(1, 0x8000);
                    let n = announced
                        .min(p.max_wqebbs_per_read as u16)
                        .min(to_end)
                        .max(1);
                    let issue = db.at + ps(p.doorbell_proc_ns);
                    let (_, per) = completions(&p, 64);
                    let end = self.dma_read(issue, u64::from(n) * 64, true);
                    let per_ps = p.link_ps(per);
                    let first = end - per_ps * u64::from(n - 1);
                    qp.read = Some((bb, n, first, per_ps));
                }
                let (s, _, first, per) = qp.read.expect("set above");
                last = last.max(first + per * u64::from(bb.wrapping_sub(s)));
            }
            last
        };
        let start = ready.max(self.engine_free);
        self.engine_free = start + ps(p.wqe_proc_ns);
        let processed = self.engine_free;
        let data = if w.gather_bytes > 0 {
            self.dma_read(processed, w.gather_bytes, false)
        } else {
            processed
        };
        let slot = (u32::from(w.index) & (w.ring_wqebbs - 1)) as usize;
        if w.nop {
            qp.done[slot] = processed;
            return processed;
        }
        let (_, bytes) = p.message_wire_bytes(w.wire_bytes, w.mtu, w.first_extra);
        let tx_start = data.max(self.wire_free);
        self.wire_free = tx_start + p.wire_ps(bytes);
        let mut back = self.wire_free
            + 2 * ps(p.propagation_ns)
            + ps(p.remote_turnaround_ns)
            + p.wire_ps(p.ack_wire_bytes());
        if w.response_bytes > 0 {
            let (_, rbytes) = p.message_wire_bytes(w.response_bytes, w.mtu, 4);
            back += p.wire_ps(rbytes);
            back = self.dma_write(back, w.response_bytes, WriteKind::Data);
        }
        qp.done[slot] = back;
        back
    }

    /// A CQE for QP `qp` (its ACK time `acked`, or the device's "now") written to CQ `cqn`:
    /// records when the CPU can see it.
    pub fn cqe(&mut self, cqn: u32, acked: Option<Ps>) -> Ps {
        let t = acked.unwrap_or_else(|| self.device_now());
        let visible = self.dma_write(t, 64, WriteKind::Cqe);
        self.cqe_times.entry(cqn).or_default().push_back(visible);
        visible
    }
}

/// A posting pattern for [`PcieParams::predict`]: RDMA WRITEs of `size` bytes, `batch` WQEs
/// per doorbell, one CQE per `signal_every` WQEs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pattern {
    /// Message size, bytes.
    pub size: u64,
    /// WQEs per doorbell (per MMIO).
    pub batch: f64,
    /// WQEs per CQE.
    pub signal_every: f64,
    /// The doorbell is a BlueFlame copy of the (single, one-WQEBB) WQE.
    pub blueflame: bool,
    /// Path MTU, bytes.
    pub mtu: u64,
}

/// The back-of-the-envelope of `docs/doorbell.md`: each resource's time per WQE and the
/// WQE rate they allow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// Host CPU, ns per WQE.
    pub cpu_ns: f64,
    /// PCIe downstream, ns per WQE.
    pub down_ns: f64,
    /// PCIe upstream, ns per WQE.
    pub up_ns: f64,
    /// NIC engine, ns per WQE.
    pub nic_ns: f64,
    /// Ethernet port, ns per WQE.
    pub wire_ns: f64,
    /// Downstream bytes per WQE.
    pub down_bytes: f64,
    /// Upstream bytes per WQE.
    pub up_bytes: f64,
}

impl Prediction {
    /// The slowest resource's time per WQE, ns, and its name.
    pub fn bottleneck(&self) -> (f64, &'static str) {
        [
            (self.cpu_ns, "cpu"),
            (self.down_ns, "pcie-down"),
            (self.up_ns, "pcie-up"),
            (self.nic_ns, "nic"),
            (self.wire_ns, "wire"),
        ]
        .into_iter()
        .fold((0.0, "cpu"), |a, b| if b.0 > a.0 { b } else { a })
    }

    /// WQEs per second: one over the bottleneck's time per WQE.
    pub fn wqe_per_s(&self) -> f64 {
        1e9 / self.bottleneck().0
    }
}

impl PcieParams {
    /// Steady-state time per WQE on every resource for `pat`, from the parameters alone:
    ///
    /// - CPU: `cpu_post + cpu_doorbell / N` (BlueFlame: `cpu_blueflame`) `+ cpu_poll / K`;
    /// - downstream: the doorbell TLP `/ N` (BlueFlame: the 64-byte TLP), the WQEBB's read
    ///   completion (not with BlueFlame), the payload's completions (RCB-sized), at the TLP
    ///   bandwidth;
    /// - upstream: WQE read requests (`ceil(N / max_wqebbs_per_read) / N`), payload read
    ///   requests (`ceil(size / MRRS)`), the CQE write `/ K`;
    /// - NIC: `wqe_proc` (+ `doorbell_proc / N`, which only delays the fetch, not counted);
    /// - wire: the request packets' bytes at the port rate.
    pub fn predict(&self, pat: Pattern) -> Prediction {
        let n = pat.batch.max(1.0);
        let k = pat.signal_every.max(1.0);
        let cpu = self.cpu_post_ns
            + if pat.blueflame {
                self.cpu_blueflame_ns
            } else {
                self.cpu_doorbell_ns
            } / n
            + self.cpu_poll_ns / k;
        let (data_cpl, data_cpl_bytes) = completions(self, pat.size);
        let _ = data_cpl;
        let mut down = if pat.blueflame {
            (64 + self.mwr_overhead) as f64 / n
        } else {
            (8 + self.mwr_overhead) as f64 / n + (64 + self.cpld_overhead) as f64
        };
        let mut up = (64 + self.mwr_overhead) as f64 / k;
        if !pat.blueflame {
            up += (n / self.max_wqebbs_per_read as f64).ceil() / n * self.mrd_overhead as f64;
        }
        if pat.size > 0 {
            down += data_cpl_bytes as f64;
            up += pat.size.div_ceil(self.mrrs as u64) as f64 * self.mrd_overhead as f64;
        }
        let bw = self.tlp_bytes_per_ns();
        let (_, wire) = self.message_wire_bytes(pat.size, pat.mtu, 16);
        Prediction {
            cpu_ns: cpu,
            down_ns: down / bw,
            up_ns: up / bw,
            nic_ns: self.wqe_proc_ns,
            wire_ns: wire as f64 * 8.0 / self.link_gbps,
            down_bytes: down,
            up_bytes: up,
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn gen5_x16_tlp_bandwidth_matches_pcie_model() {
        let p = PcieParams::default();
        // 32 GT/s x 16 x 128/130 = 504.1 Gb/s raw; less ~9.8 % DLLP/SKIP = ~454.8 Gb/s.
        let gbps = p.tlp_bytes_per_ns() * 8.0;
        assert!((gbps - 454.8).abs() < 0.5, "{gbps}");
        // A 64-byte completion (84 B) takes ~1.48 ns.
        assert_eq!(p.link_ps(84), 1478);
    }

    #[test]
    fn calendar_fills_gaps() {
        let mut c = Calendar::default();
        assert_eq!(c.reserve(1000, 100), 1100);
        assert_eq!(c.reserve(0, 100), 100); // before the first interval
        assert_eq!(c.reserve(950, 100), 1150); // 50 before 1000, 50 after 1100
        assert_eq!(c.reserve(100, 50), 150); // right after [0, 100)
        assert_eq!(c.last(), 1150);
    }

    #[test]
    fn write_64b_on_the_wire() {
        let p = PcieParams::default();
        // 64 B RDMA WRITE: 14+20+8+12+16+64+4 = 138 B + 24 = 162 B at 400 Gb/s = 3.24 ns.
        let (n, b) = p.message_wire_bytes(64, 1024, 16);
        assert_eq!((n, b), (1, 162));
        assert_eq!(p.wire_ps(b), 3240);
    }

    #[test]
    fn doorbell_batch_reads_up_to_eight_wqebbs() {
        let mut s = PcieState::new(PcieParams::default());
        let mut q = QpTiming::default();
        let at = s.mmio_doorbell();
        q.doorbells.push_back(DoorbellSeen {
            end: 16,
            at,
            bf_index: None,
        });
        for i in 0..16 {
            s.send_wqe(
                &mut q,
                WqeShape {
                    index: i,
                    wqebbs: 1,
                    ring_wqebbs: 256,
                    gather_bytes: 64,
                    wire_bytes: 64,
                    first_extra: 16,
                    response_bytes: 0,
                    mtu: 1024,
                    nop: false,
                },
            );
        }
        assert_eq!(s.counters.wqe_read_requests, 2);
        assert_eq!(s.counters.data_read_requests, 16);
        assert_eq!(s.counters.mmio_doorbells, 1);
        assert_eq!(s.counters.wqes, 16);
    }
}
