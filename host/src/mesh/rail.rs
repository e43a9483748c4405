//! One rail: an RC queue pair between a local NIC and a peer's NIC, carrying mesh frames
//! ([`crate::mesh::frame`]) as SENDs into receive slots the peer keeps posted.
//!
//! Each end registers a ring of send slots (frames are copied there, then posted), a ring of
//! receive slots (all posted as receive WQEs), and an 8-byte credit word the peer may RDMA
//! WRITE. Flow control is by credits: an end may have at most as many SENDs outstanding as the
//! peer has receive slots, minus the slots the peer has not re-posted yet. The peer reports how
//! many slots it has re-posted so far (a counter, big-endian u64) by RDMA WRITE into the credit
//! word, so credits never consume a receive WQE and never deadlock; it writes once a quarter of
//! its slots were re-posted since the last report (`Rail::credit_batch`), not per frame. The
//! receiver-not-ready retry (`rnr_retry` 7) stays as a backstop.
//!
//! A placed chunk ([`FrameBody::Placed`], direct placement) is an unsignaled RDMA WRITE into the
//! receiver's registered memory (gathered from the send slot, or from memory registered on this
//! end) followed by the SEND of its payload-less DATA frame from the same slot, so it takes one
//! slot and one credit like a DATA frame.
//!
//! A failed work completion (no ACK after `retry_cnt` retries: link down, peer gone) fails the
//! rail: its QP is moved to ERR, the frames it had in flight are handed back (read out of their
//! send slots) so the rail set can send them on another rail, and the error names the link. An
//! idle rail that someone waits on is probed by re-writing the credit word (a keepalive), so a
//! link that goes down while nothing is in flight is noticed too.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::mesh::buffer::Buffer;
use crate::mesh::codec::{DecodeResult, Reader, Writer};
use crate::mesh::error::{MeshError, Result};
use crate::mesh::frame::{FrameKind, FLAG_PLACED, HEADER_LEN, PLACED_LEN};
use crate::mesh::nic::Nic;
use crate::verbs::{
    AccessFlags, AhAttr, CompletionQueue, Device, MemoryRegion, Mtu, QpAttr, QpCap, QpState,
    QueuePair, Recovery, RecvWr, SendWr, Sge, WcStatus, WrOpcode,
};

const WR_SEND: u64 = 1 << 32;
const WR_RECV: u64 = 2 << 32;
const WR_CREDIT: u64 = 3 << 32;
/// The RDMA WRITE of a placed chunk (unsignaled: only a failure completes it).
const WR_PLACE: u64 = 4 << 32;
/// How often a rail adds its QP's transport counters to the NIC's.
const TRANSPORT_SAMPLE: Duration = Duration::from_millis(20);

/// Slot counts and sizes of one end of a rail, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RailParams {
    /// Send slots (frames in flight at most).
    pub send_slots: u32,
    /// Bytes per send slot (largest frame this end sends).
    pub send_slot_size: u32,
    /// Receive slots kept posted.
    pub recv_slots: u32,
    /// Bytes per receive slot (largest frame this end accepts).
    pub recv_slot_size: u32,
}

/// Payload bytes of a DATA frame at most: 64 KiB, a multiple of 128.
pub const DATA_CHUNK: usize = 64 << 10;
/// Bytes of a data slot: a DATA frame of [`DATA_CHUNK`] bytes and its header.
pub const DATA_SLOT: u32 = (DATA_CHUNK + HEADER_LEN) as u32;
/// Bytes of a control slot (CTS, CLOSE, FAIL, RAIL_DOWN frames).
pub const CTRL_SLOT: u32 = 1024;
/// Bytes each send slot has beyond `send_slot_size` (the largest frame): room for a placed
/// chunk of as many bytes as a DATA frame's payload behind its placed DATA frame (header and
/// length), rounded up to 64 bytes.
const SLOT_EXTRA: u32 = 64;

impl RailParams {
    /// The end that sends message data: 8 data send slots, 64 control receive slots. Eight
    /// 64 KiB frames (512 KiB, 128 packets of 4 KiB) in flight per rail keep a link busy
    /// without bursts that overflow a receiver's queues when several connections share it
    /// (the soft provider has no congestion control of its own yet).
    pub const DATA_SENDER: RailParams = RailParams {
        send_slots: 8,
        send_slot_size: DATA_SLOT,
        recv_slots: 64,
        recv_slot_size: CTRL_SLOT,
    };
    /// The end that receives message data: 64 control send slots, 16 data receive slots.
    pub const DATA_RECEIVER: RailParams = RailParams {
        send_slots: 64,
        send_slot_size: CTRL_SLOT,
        recv_slots: 16,
        recv_slot_size: DATA_SLOT,
    };
}

/// RC timing of a rail's QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpTiming {
    /// Local ACK timeout code: 4.096 µs · 2^timeout (14 ≈ 67 ms).
    pub timeout: u8,
    /// Transport retries before the rail fails (0..=7).
    pub retry_cnt: u8,
}

impl QpTiming {
    /// The ACK timeout in milliseconds.
    pub fn timeout_ms(&self) -> f64 {
        (4096u64 << self.timeout.min(31)) as f64 / 1e6
    }
}

/// What one end of a rail offers for its QP's loss recovery, sent in [`RailInfo`] (protocol
/// 3). Both ends compute the rail's mode from the two offers ([`RecoveryOffer::agree`]) and
/// set it on their QP before it moves to RTR, so no packet is ever sent under another mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecoveryOffer {
    /// IBTA go-back-N only: a hardware QP (the vfio provider, the device model), or an end
    /// configured with `RDMESH_RECOVERY=go-back-n`.
    GoBackN,
    /// Either mode (a soft-provider QP): the rail uses
    /// [`NEGOTIATED_RECOVERY`](rdmesh_core::rc::NEGOTIATED_RECOVERY) unless the other end
    /// asks for one.
    Either,
    /// Selective repeat wanted (`RDMESH_RECOVERY=selective`): the rail uses it when the other
    /// end can.
    Selective,
}

impl RecoveryOffer {
    /// The byte on the wire.
    pub fn code(self) -> u8 {
        match self {
            RecoveryOffer::GoBackN => 0,
            RecoveryOffer::Either => 1,
            RecoveryOffer::Selective => 2,
        }
    }

    /// The offer of a wire byte, `None` for an unknown one.
    pub fn from_code(c: u8) -> Option<RecoveryOffer> {
        [
            RecoveryOffer::GoBackN,
            RecoveryOffer::Either,
            RecoveryOffer::Selective,
        ]
        .into_iter()
        .find(|o| o.code() == c)
    }

    /// The offer of an end whose device is `provider` (`"soft"`, `"vfio"`, ...) and whose
    /// configuration forces `forced` (`RDMESH_RECOVERY`, `None`: no preference).
    pub fn of(provider: &str, forced: Option<Recovery>) -> RecoveryOffer {
        if provider != "soft" {
            return RecoveryOffer::GoBackN;
        }
        match forced {
            None => RecoveryOffer::Either,
            Some(Recovery::GoBackN) => RecoveryOffer::GoBackN,
            Some(Recovery::Selective) => RecoveryOffer::Selective,
        }
    }

    /// The mode of a rail whose ends offer `self` and `peer` (symmetric): go-back-N when
    /// either end offers only that (hardware, rxe-like, or forced), selective repeat when
    /// either end asks for it and the other can, else the negotiated default.
    pub fn agree(self, peer: RecoveryOffer) -> Recovery {
        use RecoveryOffer::*;
        match (self, peer) {
            (GoBackN, _) | (_, GoBackN) => Recovery::GoBackN,
            (Selective, _) | (_, Selective) => Recovery::Selective,
            (Either, Either) => rdmesh_core::rc::NEGOTIATED_RECOVERY,
        }
    }
}

/// What one end of a rail tells the other in the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailInfo {
    /// The end's GID, as an IP address.
    pub addr: IpAddr,
    /// Its soft device's UDP port.
    pub udp_port: u16,
    /// Its QP number (24 bits).
    pub qpn: u32,
    /// Its initial send PSN (24 bits): the other end's `rq_psn`.
    pub psn: u32,
    /// The largest path MTU it can use, bytes.
    pub mtu: u32,
    /// Virtual address of its credit word.
    pub credit_va: u64,
    /// R_Key of its credit word.
    pub credit_rkey: u32,
    /// Receive slots it keeps posted.
    pub recv_slots: u32,
    /// Bytes per receive slot.
    pub recv_slot_size: u32,
    /// Its NIC's ceiling, Mb/s.
    pub mbps: u32,
    /// Its netdev name (for naming the link in errors).
    pub netdev: String,
    /// Its port's MAC, when its device knows one: a vfio-provider peer puts it in the QP's
    /// address path (a function on vfio-pci has no netdev, so no ARP resolves it).
    pub mac: Option<[u8; 6]>,
    /// What it offers for loss recovery (protocol 3; one byte after the MAC).
    pub recovery: RecoveryOffer,
}

impl RailInfo {
    /// Encodes the fields in order, big-endian.
    pub fn encode(&self, w: &mut Writer) {
        w.ip(self.addr)
            .u16(self.udp_port)
            .u32(self.qpn)
            .u32(self.psn)
            .u32(self.mtu)
            .u64(self.credit_va)
            .u32(self.credit_rkey)
            .u32(self.recv_slots)
            .u32(self.recv_slot_size)
            .u32(self.mbps)
            .str(&self.netdev, 64);
        match self.mac {
            Some(m) => w.u8(1).raw(&m),
            None => w.u8(0),
        };
        w.u8(self.recovery.code());
    }

    /// Decodes what [`RailInfo::encode`] wrote, checking the ranges.
    pub fn decode(r: &mut Reader<'_>) -> DecodeResult<RailInfo> {
        let i = RailInfo {
            addr: r.ip("rail address")?,
            udp_port: r.u16("rail UDP port")?,
            qpn: r.u32("rail QPN")?,
            psn: r.u32("rail PSN")?,
            mtu: r.u32("rail MTU")?,
            credit_va: r.u64("rail credit address")?,
            credit_rkey: r.u32("rail credit rkey")?,
            recv_slots: r.u32("rail receive slots")?,
            recv_slot_size: r.u32("rail receive slot size")?,
            mbps: r.u32("rail ceiling")?,
            netdev: r.str("rail netdev", 64)?,
            mac: match r.u8("rail MAC present")? {
                0 => None,
                1 => {
                    let b = r.take(6, "rail MAC")?;
                    let mut m = [0u8; 6];
                    m.copy_from_slice(b);
                    Some(m)
                }
                v => return Err(format!("rail MAC flag {v} is not 0 or 1")),
            },
            recovery: {
                let c = r.u8("rail recovery offer")?;
                RecoveryOffer::from_code(c)
                    .ok_or_else(|| format!("rail recovery offer {c} is not 0, 1 or 2"))?
            },
        };
        if i.qpn > 0xff_ffff || i.qpn < 2 || i.psn > 0xff_ffff {
            return Err(format!(
                "rail QPN {:#x} or PSN {:#x} is not a 24-bit RC value",
                i.qpn, i.psn
            ));
        }
        if Mtu::from_bytes(i.mtu).is_none() {
            return Err(format!("rail MTU {} is not 256..4096", i.mtu));
        }
        if i.recv_slots == 0 || i.recv_slots > 4096 || i.recv_slot_size < HEADER_LEN as u32 {
            return Err(format!(
                "rail receive slots {} × {} bytes are out of range",
                i.recv_slots, i.recv_slot_size
            ));
        }
        if i.udp_port == 0 {
            return Err("rail UDP port 0".into());
        }
        Ok(i)
    }
}

/// The bytes of one frame to post: owned bytes, or a header and a chunk of a [`Buffer`] (copied
/// into the send slot when posted).
#[derive(Debug, Clone)]
pub enum FrameBody {
    /// A whole frame.
    Bytes(Vec<u8>),
    /// A DATA header and `len` bytes of `buf` at `offset`.
    Chunk {
        /// The frame header.
        header: [u8; HEADER_LEN],
        /// The application buffer.
        buf: Buffer,
        /// Offset in `buf`.
        offset: usize,
        /// Bytes.
        len: usize,
    },
    /// A chunk of `buf` RDMA WRITTEN into the receiver's registered memory, followed on the
    /// same rail by the placed DATA frame `header` ([`FLAG_PLACED`]; its payload, the length,
    /// is added when posted).
    Placed {
        /// The placed DATA frame's header.
        header: [u8; HEADER_LEN],
        /// The application buffer.
        buf: Buffer,
        /// Offset in `buf`.
        offset: usize,
        /// Bytes.
        len: usize,
        /// The receiver's virtual address of the chunk's first byte.
        remote_va: u64,
        /// The receiver's rkey of the region, per rail (rail order).
        rkeys: crate::mesh::frame::RailKeys,
        /// Where the chunk lies in memory registered on this end (address, lkey per rail):
        /// the WRITE gathers it from there. `None`: it is copied into the send slot first.
        local: Option<crate::mesh::tagged::Placement>,
    },
}

impl FrameBody {
    /// Frame length, header included.
    pub fn len(&self) -> usize {
        match self {
            FrameBody::Bytes(b) => b.len(),
            FrameBody::Chunk { len, .. } => HEADER_LEN + len,
            FrameBody::Placed { .. } => HEADER_LEN + PLACED_LEN,
        }
    }

    /// Bytes of the send slot the frame needs (a placed chunk's bytes stay in the slot too).
    pub fn slot_len(&self) -> usize {
        match self {
            FrameBody::Placed {
                len, local: None, ..
            } => HEADER_LEN + PLACED_LEN + len,
            _ => self.len(),
        }
    }

    /// `true` for an empty frame (never posted).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn kind(&self) -> FrameKind {
        match self {
            FrameBody::Bytes(b) => FrameKind::from(b.first().copied().unwrap_or(0)),
            FrameBody::Chunk { header, .. } | FrameBody::Placed { header, .. } => {
                FrameKind::from(header[0])
            }
        }
    }

    /// Writes the frame's bytes as the rail sends them into `out` (at least [`FrameBody::slot_len`]
    /// bytes; a placed chunk copied through the slot also gets its chunk behind the frame).
    ///
    /// Errors: a buffer range that is invalid or lent memory that was released.
    pub(crate) fn write_into(&self, out: &mut [u8]) -> Result<()> {
        match self {
            FrameBody::Bytes(b) => out[..b.len()].copy_from_slice(b),
            FrameBody::Chunk {
                header,
                buf,
                offset,
                len,
            } => {
                out[..HEADER_LEN].copy_from_slice(header);
                buf.read(*offset, &mut out[HEADER_LEN..HEADER_LEN + len])?;
            }
            FrameBody::Placed {
                header,
                buf,
                offset,
                len,
                local,
                ..
            } => {
                out[..HEADER_LEN].copy_from_slice(header);
                out[HEADER_LEN..HEADER_LEN + PLACED_LEN]
                    .copy_from_slice(&(*len as u64).to_be_bytes());
                if local.is_none() {
                    let at = HEADER_LEN + PLACED_LEN;
                    buf.read(*offset, &mut out[at..at + len])?;
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
struct PeerSide {
    credit_va: u64,
    credit_rkey: u32,
    recv_slots: u32,
    recv_slot_size: u32,
    mbps: u32,
}

/// One rail (see the module docs).
#[derive(Debug)]
pub struct Rail {
    nic: Arc<Nic>,
    /// The device of the rail's shard ([`Nic::shard`]).
    device: Device,
    /// Whether polling the rail's CQ drives its device when the CQ is empty (receives on
    /// the polling thread). Off when the connection's pump drives the device before it takes
    /// the connection ([`Rail::set_drives`]).
    drives: bool,
    /// The protection domain of the rail's QP.
    pd: crate::verbs::ProtectionDomain,
    /// The rail's index in its rail set (both ends number rails alike): which rkey of a
    /// placement is this rail's.
    index: usize,
    link: String,
    peer_addr: IpAddr,
    qp: QueuePair,
    cq: CompletionQueue,
    send_mr: MemoryRegion,
    recv_mr: MemoryRegion,
    credit_mr: MemoryRegion,
    credit_src: MemoryRegion,
    params: RailParams,
    psn: u32,
    timing: QpTiming,
    /// What this end offers for loss recovery, and the mode agreed at [`Rail::connect`].
    offer: RecoveryOffer,
    recovery: Recovery,
    /// The path MTU chosen at [`Rail::connect`], bytes (0 before).
    path_mtu: u32,
    peer: Option<PeerSide>,
    free_send: Vec<u32>,
    /// Per send slot: the frame's token, its length and, for a placed chunk, the chunk's
    /// bytes (behind the frame in the slot).
    in_flight: Vec<Option<(u64, u32, Option<FrameBody>)>>,
    sent: u64,
    freed: u64,
    reported: u64,
    write_in_flight: bool,
    inbox: VecDeque<(u32, u32)>,
    failed: Option<MeshError>,
    last_activity: Instant,
    /// QP retransmissions and timeouts already added to the NIC's counters, and when.
    reported_transport: (u64, u64, Instant),
    /// The work requests every post fills in place ([`WrScratch`]).
    wrs: WrScratch,
}

/// The work requests a rail posts, filled in place for each post: a [`SendWr`]'s SGE list is a
/// `Vec`, allocated here once instead of once per frame.
#[derive(Debug)]
struct WrScratch {
    /// `[0]`: a placed chunk's RDMA WRITE; `[1]`: a frame's SEND, posted alone or behind it.
    send: [SendWr; 2],
    /// The credit WRITE.
    credit: SendWr,
    /// A receive slot's re-post.
    recv: [RecvWr; 1],
}

impl WrScratch {
    fn new() -> WrScratch {
        let wr = || SendWr::new(0, WrOpcode::Send, vec![Sge::default()]);
        WrScratch {
            send: [wr(), wr()],
            credit: wr(),
            recv: [RecvWr {
                wr_id: 0,
                sg_list: vec![Sge::default()],
            }],
        }
    }
}

/// Fills `wr` (one of [`WrScratch`]'s, whose SGE list holds one entry) for a post.
fn fill(wr: &mut SendWr, wr_id: u64, opcode: WrOpcode, sge: Sge, signaled: bool, solicited: bool) {
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.sg_list.clear();
    wr.sg_list.push(sge);
    wr.signaled = signaled;
    wr.solicited = solicited;
}

/// Whether the SEND of a frame of `kind` sets SE: every kind but CTS. The peer's QPs hold the
/// ACKs of SENDs without SE like those of WRITEs ([`Rail::connect`],
/// `QueuePair::set_lazy_send_acks`), so the ACK of a CTS — whose completion nobody waits for
/// (token `NO_TOKEN`) — rides with the peer's next packet instead of costing a datagram; a
/// DATA frame's ACK completes its send request, a CLOSE's lets the connection finish, so they
/// stay urgent.
fn solicited(kind: FrameKind) -> bool {
    kind != FrameKind::Cts
}

fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    crate::mesh::auth::fill_random(&mut b);
    u32::from_be_bytes(b)
}

impl Rail {
    /// Creates the QP (in INIT, receives posted) and the slot rings of one end on `nic`, toward
    /// the peer address `peer_addr`, on the device of progress shard `shard`
    /// ([`Nic::shard`]). `recovery`: the loss recovery this end insists on
    /// (`RDMESH_RECOVERY`), `None` to let the handshake choose ([`RecoveryOffer`]).
    ///
    /// Errors: [`MeshError::Host`] when a verbs call fails.
    pub fn new(
        nic: Arc<Nic>,
        shard: usize,
        peer_addr: IpAddr,
        params: RailParams,
        timing: QpTiming,
        recovery: Option<Recovery>,
    ) -> Result<Rail> {
        let (device, pd) = nic.shard(shard);
        let (device, pd) = (device.clone(), pd.clone());
        let host = |what: &str, e: crate::Error| {
            MeshError::Host(format!("rail on {}: {what}: {e}", nic.spec.label()))
        };
        let cq = device
            .create_cq((params.send_slots + params.recv_slots + 8) as usize)
            .map_err(|e| host("creating the CQ", e))?;
        let qp = pd
            .create_qp(
                &cq,
                &cq,
                QpCap {
                    // A placed chunk takes two WRs (its WRITE and its DATA frame's SEND).
                    max_send_wr: 2 * params.send_slots + 4,
                    max_recv_wr: params.recv_slots,
                    max_sge: 1,
                },
            )
            .map_err(|e| host("creating the QP", e))?;
        let lw = AccessFlags::LOCAL_WRITE;
        let reg = |len: usize, access| {
            pd.register(len, access)
                .map_err(|e| host("registering memory", e))
        };
        let send_mr = reg(
            (params.send_slots * (params.send_slot_size + SLOT_EXTRA)) as usize,
            lw,
        )?;
        let recv_mr = reg((params.recv_slots * params.recv_slot_size) as usize, lw)?;
        let credit_mr = reg(8, lw | AccessFlags::REMOTE_WRITE)?;
        let credit_src = reg(8, lw)?;
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(lw | AccessFlags::REMOTE_WRITE),
            ..Default::default()
        })
        .map_err(|e| host("moving the QP to INIT", e))?;
        let recvs: Vec<RecvWr> = (0..params.recv_slots)
            .map(|s| RecvWr {
                wr_id: WR_RECV | u64::from(s),
                sg_list: vec![Sge {
                    addr: recv_mr.addr() + u64::from(s * params.recv_slot_size),
                    length: params.recv_slot_size,
                    lkey: recv_mr.lkey(),
                }],
            })
            .collect();
        qp.post_recv(&recvs)
            .map_err(|e| host("posting receive slots", e))?;
        let link = format!(
            "{} {} -> {} (QPN {:#08x})",
            nic.spec.netdev,
            nic.spec.addr.ip,
            peer_addr,
            qp.qp_num()
        );
        Ok(Rail {
            link,
            peer_addr,
            qp,
            cq,
            send_mr,
            recv_mr,
            credit_mr,
            credit_src,
            params,
            psn: random_u32() & 0xff_ffff,
            timing,
            offer: RecoveryOffer::of(device.provider(), recovery),
            recovery: Recovery::GoBackN,
            path_mtu: 0,
            peer: None,
            free_send: (0..params.send_slots).rev().collect(),
            in_flight: vec![None; params.send_slots as usize],
            sent: 0,
            freed: 0,
            reported: 0,
            write_in_flight: false,
            inbox: VecDeque::new(),
            failed: None,
            last_activity: Instant::now(),
            reported_transport: (0, 0, Instant::now()),
            nic,
            device,
            drives: true,
            pd,
            index: 0,
            wrs: WrScratch::new(),
        })
    }

    /// The protection domain of the rail's QP (where memory it reaches is registered).
    pub fn pd(&self) -> &crate::verbs::ProtectionDomain {
        &self.pd
    }

    /// Bytes between send slots: the largest frame plus [`SLOT_EXTRA`].
    fn slot_stride(&self) -> usize {
        (self.params.send_slot_size + SLOT_EXTRA) as usize
    }

    /// Sets the rail's index in its rail set ([`crate::mesh::railset::RailSet::new`]).
    pub fn set_index(&mut self, index: usize) {
        self.index = index;
    }

    /// What the peer needs to connect to this end.
    pub fn local_info(&self) -> RailInfo {
        RailInfo {
            addr: self.nic.spec.addr.ip,
            udp_port: self.device.local_addr().port(),
            qpn: self.qp.qp_num(),
            psn: self.psn,
            mtu: self.nic.max_mtu(),
            credit_va: self.credit_mr.addr(),
            credit_rkey: self.credit_mr.rkey(),
            recv_slots: self.params.recv_slots,
            recv_slot_size: self.params.recv_slot_size,
            mbps: (self.nic.spec.gbps * 1000.0).round().min(u32::MAX as f64) as u32,
            netdev: self.nic.spec.netdev.clone(),
            mac: self.device.mac(),
            recovery: self.offer,
        }
    }

    /// The loss recovery of the rail's QP: go-back-N until [`Rail::connect`], then the mode
    /// The path MTU chosen at [`Rail::connect`] (the route's, capped by both ends), bytes.
    pub fn path_mtu(&self) -> u32 {
        self.path_mtu
    }

    /// both ends agreed on (as the QP itself reports it).
    pub fn recovery(&self) -> Recovery {
        debug_assert_eq!(self.qp.recovery(), self.recovery);
        self.qp.recovery()
    }

    /// Connects to the peer's end: RTR then RTS. The path MTU is the smaller of both ends'.
    ///
    /// Errors: [`MeshError::Handshake`]-worthy text in [`MeshError::Host`] when the peer's
    /// slots are smaller than the frames this end sends, or a transition fails.
    pub fn connect(&mut self, peer: &RailInfo) -> Result<()> {
        if peer.recv_slot_size < self.params.send_slot_size {
            return Err(MeshError::Host(format!(
                "rail {}: the peer's receive slots of {} bytes are smaller than this end's frames of {} bytes (different rdmesh versions?)",
                self.link, peer.recv_slot_size, self.params.send_slot_size
            )));
        }
        let (local_mtu, why) = self.nic.path_mtu(peer.addr);
        let mtu = Mtu::from_bytes(local_mtu.min(peer.mtu)).unwrap_or(Mtu::Mtu1024);
        let family = if peer.addr.is_ipv4() {
            if crate::mesh::route::prefer_ipv6() {
                "IPv4 (the peer has no IPv6 address on this link)"
            } else {
                "IPv4 (preferred; RDMESH_PREFER_IPV6=1 picks IPv6 where both ends have it)"
            }
        } else if crate::mesh::route::prefer_ipv6() {
            "IPv6 (RDMESH_PREFER_IPV6=1)"
        } else {
            "IPv6 (no IPv4 address of the peer on this link)"
        };
        // Both ends compute the same mode from the two offers; it is set while the QP is
        // still in INIT, before either end can send a packet on it.
        let recovery = self.offer.agree(peer.recovery);
        self.path_mtu = mtu.bytes();
        tracing::info!(
            netdev = %self.nic.spec.netdev,
            local = %self.nic.spec.addr.ip,
            peer = %peer.addr,
            path_mtu = mtu.bytes(),
            peer_max_mtu = peer.mtu,
            mtu_source = %why,
            family,
            ?recovery,
            local_offer = ?self.offer,
            peer_offer = ?peer.recovery,
            "rail path chosen"
        );
        let host = |what: &str, e: crate::Error| {
            MeshError::Host(format!("rail {}: {what}: {e}", self.link))
        };
        if recovery != Recovery::GoBackN {
            self.qp
                .set_recovery(recovery)
                .map_err(|e| host("choosing the loss recovery", e))?;
        }
        self.recovery = recovery;
        // CTS frames go as SENDs without SE, every other frame with SE (`post_with`,
        // `post_placed`): the ACK of a CTS — which nobody waits for — rides with this rail's
        // next packet instead of leaving alone after 20 µs (docs/benchmarks.md, 2026-11-26
        // 19:40 UTC: one such datagram per 8 KiB message). The peer speaks the same protocol
        // version, so its DATA frames carry SE.
        self.qp.set_lazy_send_acks(true);
        if self.device.provider() != "soft" {
            let mac = peer.mac.ok_or_else(|| {
                MeshError::Host(format!(
                    "rail {}: the peer's end ({} {}) told no MAC in the handshake, and this end's                      {} device has no ARP to learn it",
                    self.link,
                    peer.netdev,
                    peer.addr,
                    self.device.provider()
                ))
            })?;
            self.device.set_neighbor(peer.addr, mac);
        }
        self.qp
            .modify(&QpAttr {
                qp_state: Some(QpState::Rtr),
                ah_attr: Some(AhAttr {
                    dgid: peer.addr,
                    udp_port: peer.udp_port,
                }),
                path_mtu: Some(mtu),
                dest_qp_num: Some(peer.qpn),
                rq_psn: Some(peer.psn),
                max_dest_rd_atomic: Some(1),
                min_rnr_timer: Some(1),
                ..Default::default()
            })
            .map_err(|e| host("moving the QP to RTR", e))?;
        self.qp
            .modify(&QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(self.psn),
                timeout: Some(self.timing.timeout),
                retry_cnt: Some(self.timing.retry_cnt),
                rnr_retry: Some(7),
                max_rd_atomic: Some(1),
                ..Default::default()
            })
            .map_err(|e| host("moving the QP to RTS", e))?;
        self.link = format!(
            "{} {} -> {} {} (QPN {:#08x} -> {:#08x}, MTU {})",
            self.nic.spec.netdev,
            self.nic.spec.addr.ip,
            peer.netdev,
            peer.addr,
            self.qp.qp_num(),
            peer.qpn,
            mtu.bytes()
        );
        self.peer = Some(PeerSide {
            credit_va: peer.credit_va,
            credit_rkey: peer.credit_rkey,
            recv_slots: peer.recv_slots,
            recv_slot_size: peer.recv_slot_size,
            mbps: peer.mbps,
        });
        self.nic.counters.rail_opened();
        tracing::info!(link = %self.link, "mesh rail up");
        Ok(())
    }

    /// The link, for messages: `netdev addr -> peer-netdev peer-addr (QPN …)`.
    pub fn link(&self) -> &str {
        &self.link
    }

    /// The local NIC.
    pub fn nic(&self) -> &Arc<Nic> {
        &self.nic
    }

    /// The peer's address on this rail.
    pub fn peer_addr(&self) -> IpAddr {
        self.peer_addr
    }

    /// The rail's weight in striping: the smaller of both NICs' ceilings, Gb/s.
    pub fn gbps(&self) -> f64 {
        let peer = self
            .peer
            .map_or(f64::INFINITY, |p| f64::from(p.mbps) / 1000.0);
        self.nic.spec.gbps.min(peer).max(0.001)
    }

    /// The error the rail failed with, if it did.
    pub fn failure(&self) -> Option<&MeshError> {
        self.failed.as_ref()
    }

    /// `true` while the rail works.
    pub fn is_up(&self) -> bool {
        self.failed.is_none() && self.peer.is_some()
    }

    /// The largest frame this rail may send, bytes.
    pub fn max_frame(&self) -> usize {
        let peer = self.peer.map_or(0, |p| p.recv_slot_size);
        self.params.send_slot_size.min(peer) as usize
    }

    fn credits(&self) -> u64 {
        let Some(p) = self.peer else { return 0 };
        let mut b = [0u8; 8];
        // The credit word is 8 bytes; reading it cannot fail.
        let _ = self.credit_mr.read(0, &mut b);
        (u64::from(p.recv_slots) + u64::from_be_bytes(b)).saturating_sub(self.sent)
    }

    /// Whether a frame of `len` bytes can be posted now (rail up, a send slot free, a credit).
    pub fn can_post(&self, len: usize) -> bool {
        self.is_up() && !self.free_send.is_empty() && len <= self.max_frame() && self.credits() > 0
    }

    /// Posts one frame; `token` comes back from [`Rail::poll`] when its SEND completes.
    ///
    /// Errors: the rail's failure (the frame was not posted); [`MeshError::Request`] when the
    /// frame cannot be posted now ([`Rail::can_post`] is false) or its buffer range is invalid.
    pub fn post(&mut self, token: u64, body: &FrameBody) -> Result<()> {
        if let FrameBody::Placed { .. } = body {
            return self.post_placed(token, body);
        }
        self.post_with(token, body.len(), body.kind(), |out| body.write_into(out))
    }

    /// Whether `body` can be posted now: [`Rail::can_post`], and a placed chunk fits a send
    /// slot and has an rkey for this rail.
    pub fn can_post_body(&self, body: &FrameBody) -> bool {
        if let FrameBody::Placed { rkeys, local, .. } = body {
            if body.slot_len() > self.slot_stride()
                || self.index >= rkeys.len()
                || local.as_ref().is_some_and(|l| self.index >= l.keys.len())
            {
                return false;
            }
        }
        self.can_post(body.len())
    }

    /// Posts a placed chunk: its bytes go into a send slot behind the placed DATA frame, an
    /// unsignaled RDMA WRITE sends them to the receiver's registered memory, and the SEND of
    /// the frame follows on the same QP (its completion completes both).
    fn post_placed(&mut self, token: u64, body: &FrameBody) -> Result<()> {
        let FrameBody::Placed {
            len,
            remote_va,
            rkeys,
            local,
            ..
        } = body
        else {
            unreachable!("post_placed is called for placed chunks");
        };
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.can_post_body(body) {
            return Err(MeshError::Request(format!(
                "rail {}: no room for a placed chunk of {len} bytes",
                self.link
            )));
        }
        let slot = self.free_send.pop().expect("checked");
        let off = slot as usize * self.slot_stride();
        let slot_len = body.slot_len();
        if let Err(e) = self
            .send_mr
            .with_range(off, slot_len, |m| body.write_into(m))
            .map_err(|e| MeshError::Host(e.to_string()))
            .and_then(|r| r)
        {
            self.free_send.push(slot);
            return Err(e);
        }
        let base = self.send_mr.addr() + off as u64;
        let frame_len = HEADER_LEN + PLACED_LEN;
        let [write, send] = &mut self.wrs.send;
        fill(
            write,
            WR_PLACE | u64::from(slot),
            WrOpcode::RdmaWrite {
                remote_addr: *remote_va,
                rkey: rkeys[self.index],
            },
            match local {
                Some(l) => Sge {
                    addr: l.va,
                    length: *len as u32,
                    lkey: l.keys[self.index],
                },
                None => Sge {
                    addr: base + frame_len as u64,
                    length: *len as u32,
                    lkey: self.send_mr.lkey(),
                },
            },
            false,
            false,
        );
        fill(
            send,
            WR_SEND | u64::from(slot),
            WrOpcode::Send,
            Sge {
                addr: base,
                length: frame_len as u32,
                lkey: self.send_mr.lkey(),
            },
            true,
            solicited(FrameKind::Data),
        );
        if let Err(e) = self.qp.post_send(&self.wrs.send) {
            self.free_send.push(slot);
            self.fail(format!("posting a placed chunk failed: {e}"));
            return Err(self.failed.clone().expect("just failed"));
        }
        self.in_flight[slot as usize] = Some((token, frame_len as u32, Some(body.clone())));
        self.sent += 1;
        self.nic
            .counters
            .sent((frame_len + len) as u64, *len as u64);
        Ok(())
    }

    /// Posts a copy of a whole frame (what a relay forwards).
    ///
    /// Errors: as [`Rail::post`].
    pub fn post_slice(&mut self, token: u64, frame: &[u8]) -> Result<()> {
        let kind = FrameKind::from(frame.first().copied().unwrap_or(0));
        self.post_with(token, frame.len(), kind, |out| {
            out.copy_from_slice(frame);
            Ok(())
        })
    }

    fn post_with(
        &mut self,
        token: u64,
        len: usize,
        kind: FrameKind,
        write: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.can_post(len) {
            return Err(MeshError::Request(format!(
                "rail {}: no room for a frame of {len} bytes",
                self.link
            )));
        }
        let slot = self.free_send.pop().expect("checked");
        let off = slot as usize * self.slot_stride();
        if let Err(e) = self.send_mr.with(|m| write(&mut m[off..off + len])) {
            self.free_send.push(slot);
            return Err(e);
        }
        fill(
            &mut self.wrs.send[1],
            WR_SEND | u64::from(slot),
            WrOpcode::Send,
            Sge {
                addr: self.send_mr.addr() + off as u64,
                length: len as u32,
                lkey: self.send_mr.lkey(),
            },
            true,
            solicited(kind),
        );
        if let Err(e) = self.qp.post_send(std::slice::from_ref(&self.wrs.send[1])) {
            self.free_send.push(slot);
            self.fail(format!("posting a SEND failed: {e}"));
            return Err(self.failed.clone().expect("just failed"));
        }
        self.in_flight[slot as usize] = Some((token, len as u32, None));
        self.sent += 1;
        let data = if kind == FrameKind::Data {
            (len - HEADER_LEN) as u64
        } else {
            0
        };
        self.nic.counters.sent(len as u64, data);
        Ok(())
    }

    /// The device the rail's QP is on (its shard's, [`Nic::shard`]).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether [`Rail::poll`] drives the device when its CQ is empty.
    pub fn drives(&self) -> bool {
        self.drives
    }

    /// Sets whether [`Rail::poll`] drives the device when the CQ is empty (`true`, the
    /// default) or only takes the completions already queued (`false`: the caller drives the
    /// device itself, [`crate::mesh::railset::RailSet::drive_outside`]).
    pub fn set_drives(&mut self, drives: bool) {
        self.drives = drives;
    }

    /// Processes completions: tokens of frames whose SEND completed go to `done`, received
    /// frames to the inbox ([`Rail::next_frame`]). Returns whether anything happened.
    pub fn poll(&mut self, done: &mut Vec<u64>) -> bool {
        let mut any = false;
        while let Some(wc) = if self.drives {
            self.cq.poll_one()
        } else {
            self.cq.poll_ready()
        } {
            any = true;
            let slot = (wc.wr_id & 0xffff_ffff) as u32;
            let ok = wc.status == WcStatus::Success;
            match wc.wr_id & !0xffff_ffff {
                WR_SEND if ok => {
                    if let Some((token, _, _)) =
                        self.in_flight.get_mut(slot as usize).and_then(Option::take)
                    {
                        self.free_send.push(slot);
                        done.push(token);
                    }
                }
                WR_RECV if ok => {
                    let off = (slot * self.params.recv_slot_size) as usize;
                    let len = wc.byte_len.min(self.params.recv_slot_size);
                    let mut head = [0u8; HEADER_LEN + PLACED_LEN];
                    let n = (len as usize).min(head.len());
                    let _ = self.recv_mr.read(off, &mut head[..n]);
                    let data = match crate::mesh::frame::Frame::new_checked(&head[..n]) {
                        Ok(f) if f.kind() == FrameKind::Data => f
                            .placed_len()
                            .unwrap_or(u64::from(len).saturating_sub(HEADER_LEN as u64)),
                        _ => 0,
                    };
                    self.nic.counters.received(u64::from(len), data);
                    self.inbox.push_back((slot, len));
                }
                WR_CREDIT if ok => self.write_in_flight = false,
                _ if wc.status == WcStatus::WrFlushErr => {}
                _ => {
                    let reason = self.status_reason(wc.status);
                    self.fail(reason);
                }
            }
        }
        if any {
            let now = Instant::now();
            self.last_activity = now;
            // Retransmissions and timeouts show as completions, so sampling when something
            // completed misses none (and an idle poll reads no clock).
            if now.duration_since(self.reported_transport.2) >= TRANSPORT_SAMPLE {
                self.sample_transport();
            }
        }
        if self.is_up()
            && !self.write_in_flight
            && self.freed - self.reported >= self.credit_batch()
        {
            self.write_credits();
        }
        any
    }

    /// Adds the QP's new retransmissions and ACK timeouts to the NIC's counters.
    fn sample_transport(&mut self) {
        let c = self.qp.counters();
        let (r, t, _) = self.reported_transport;
        self.nic.counters.transport(
            c.retransmitted_packets.saturating_sub(r),
            c.timeouts.saturating_sub(t),
        );
        self.reported_transport = (
            c.retransmitted_packets.max(r),
            c.timeouts.max(t),
            Instant::now(),
        );
    }

    fn status_reason(&self, status: WcStatus) -> String {
        let netdev = &self.nic.spec.netdev;
        match status {
            WcStatus::RetryExcErr => format!(
                "no acknowledgement after {} retries of the {:.1} ms ACK timeout (IBV_WC_RETRY_EXC_ERR): the link is down, unplugged or the peer stopped; check `ip link show {netdev}` on both ends and that the peer process runs",
                self.timing.retry_cnt,
                self.timing.timeout_ms()
            ),
            WcStatus::RnrRetryExcErr => "the peer kept no receive posted (IBV_WC_RNR_RETRY_EXC_ERR): it stopped serving the connection".into(),
            WcStatus::RemAccessErr => "the peer refused a credit write (IBV_WC_REM_ACCESS_ERR): do both ends run the same rdmesh version?".into(),
            s => format!("work completion status {s:?}"),
        }
    }

    /// Fails the rail with `reason` (first failure wins): QP to ERR, counters, log.
    pub fn fail(&mut self, reason: String) {
        if self.failed.is_some() {
            return;
        }
        tracing::warn!(link = %self.link, %reason, counters = ?self.qp.counters(), "mesh rail failed");
        self.failed = Some(MeshError::LinkDown {
            link: self.link.clone(),
            reason,
        });
        self.nic.counters.rail_failed();
        self.sample_transport();
        let _ = self.qp.modify(&QpAttr::state(QpState::Err));
    }

    /// After a failure: the frames that were in flight, as `(token, bytes)`, read back from
    /// their send slots (the QP is in ERR and sends nothing more). Each is handed back once.
    pub fn take_failed_frames(&mut self) -> Vec<(u64, FrameBody)> {
        if self.failed.is_none() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for slot in 0..self.in_flight.len() {
            if let Some((token, len, placed)) = self.in_flight[slot].take() {
                let off = slot * self.slot_stride();
                if let Some(FrameBody::Placed {
                    mut header,
                    buf,
                    offset,
                    len,
                    ..
                }) = placed
                {
                    // A placed chunk goes again as a plain DATA frame, without the flag
                    // (whether the WRITE landed is unknown; the copy lands the bytes anyway).
                    header[1] &= !FLAG_PLACED;
                    let chunk = FrameBody::Chunk {
                        header,
                        buf,
                        offset,
                        len,
                    };
                    out.push((token, chunk));
                    continue;
                }
                let mut v = vec![0u8; len as usize];
                let _ = self.send_mr.read(off, &mut v);
                out.push((token, FrameBody::Bytes(v)));
            }
        }
        out
    }

    /// The oldest received frame not released yet: `(slot, length)`.
    pub fn next_frame(&self) -> Option<(u32, u32)> {
        self.inbox.front().copied()
    }

    /// Runs `f` on the bytes of received frame `(slot, len)`.
    pub fn with_frame<R>(&self, slot: u32, len: u32, f: impl FnOnce(&[u8]) -> R) -> R {
        let off = (slot * self.params.recv_slot_size) as usize;
        self.recv_mr.with(|m| f(&m[off..off + len as usize]))
    }

    /// Releases the oldest received frame: its slot is posted again and the credit returned.
    pub fn release_front(&mut self) {
        let Some((slot, _)) = self.inbox.pop_front() else {
            return;
        };
        if self.failed.is_some() {
            return;
        }
        let [wr] = &mut self.wrs.recv;
        wr.wr_id = WR_RECV | u64::from(slot);
        wr.sg_list.clear();
        wr.sg_list.push(Sge {
            addr: self.recv_mr.addr() + u64::from(slot * self.params.recv_slot_size),
            length: self.params.recv_slot_size,
            lkey: self.recv_mr.lkey(),
        });
        if let Err(e) = self.qp.post_recv(&self.wrs.recv) {
            self.fail(format!("re-posting a receive slot failed: {e}"));
            return;
        }
        self.freed += 1;
        if !self.write_in_flight && self.freed - self.reported >= self.credit_batch() {
            self.write_credits();
        }
    }

    /// Re-posted receive slots that make one credit WRITE: a quarter of the slots (at least
    /// one). The peer then always holds at least three quarters of its credits less what is in
    /// flight, and a peer that ran out has `recv_slots` unreported slots coming back here, so a
    /// WRITE always follows; one WRITE (a packet, and its ACK) per four frames instead of one
    /// per frame is what a small-message exchange saves.
    fn credit_batch(&self) -> u64 {
        u64::from(self.params.recv_slots / 4).max(1)
    }

    fn write_credits(&mut self) {
        let Some(p) = self.peer else { return };
        if self.failed.is_some() {
            return;
        }
        let _ = self.credit_src.write(0, &self.freed.to_be_bytes());
        fill(
            &mut self.wrs.credit,
            WR_CREDIT,
            WrOpcode::RdmaWrite {
                remote_addr: p.credit_va,
                rkey: p.credit_rkey,
            },
            Sge {
                addr: self.credit_src.addr(),
                length: 8,
                lkey: self.credit_src.lkey(),
            },
            true,
            false,
        );
        match self.qp.post_send(std::slice::from_ref(&self.wrs.credit)) {
            Ok(()) => {
                self.reported = self.freed;
                self.write_in_flight = true;
            }
            Err(e) => self.fail(format!("posting the credit write failed: {e}")),
        }
    }

    /// Probes an idle rail: when nothing completed for `idle` and no credit write is in flight,
    /// re-writes the credit word so that a dead link fails the rail within the retry time.
    pub fn keepalive(&mut self, idle: Duration) {
        if self.is_up() && !self.write_in_flight && self.last_activity.elapsed() >= idle {
            self.last_activity = Instant::now();
            self.write_credits();
        }
    }

    /// Whether frames are in flight or received and not released.
    pub fn busy(&self) -> bool {
        self.in_flight.iter().any(Option::is_some) || !self.inbox.is_empty()
    }
}

impl Drop for Rail {
    fn drop(&mut self) {
        self.sample_transport();
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn rail_info_roundtrip_and_checks() {
        let i = RailInfo {
            addr: "192.168.100.1".parse().unwrap(),
            udp_port: 4791,
            qpn: 0x12,
            psn: 0xabcdef,
            mtu: 4096,
            credit_va: 0x7f00_0000_1000,
            credit_rkey: 0x1234,
            recv_slots: 32,
            recv_slot_size: DATA_SLOT,
            mbps: 100_000,
            netdev: "enp1s0f0np0".into(),
            mac: Some([2, 0, 0, 0, 0, 9]),
            recovery: RecoveryOffer::Selective,
        };
        let mut w = Writer::new();
        i.encode(&mut w);
        // The recovery offer is the last byte.
        assert_eq!(w.0.last(), Some(&2));
        let mut r = Reader::new(&w.0);
        assert_eq!(RailInfo::decode(&mut r).unwrap(), i);
        r.finish("rail").unwrap();
        let none = RailInfo {
            mac: None,
            recovery: RecoveryOffer::GoBackN,
            ..i.clone()
        };
        let mut w = Writer::new();
        none.encode(&mut w);
        assert_eq!(RailInfo::decode(&mut Reader::new(&w.0)).unwrap(), none);
        // An unknown recovery offer, and a protocol-2 rail info (no offer byte), are refused.
        let mut w = Writer::new();
        i.encode(&mut w);
        *w.0.last_mut().unwrap() = 3;
        let e = RailInfo::decode(&mut Reader::new(&w.0)).unwrap_err();
        assert!(e.contains("recovery offer 3"), "{e}");
        let mut w = Writer::new();
        i.encode(&mut w);
        w.0.pop();
        assert!(RailInfo::decode(&mut Reader::new(&w.0)).is_err());
        for bad in [
            RailInfo {
                qpn: 1 << 24,
                ..i.clone()
            },
            RailInfo {
                mtu: 1500,
                ..i.clone()
            },
            RailInfo {
                recv_slots: 0,
                ..i.clone()
            },
            RailInfo {
                udp_port: 0,
                ..i.clone()
            },
        ] {
            let mut w = Writer::new();
            bad.encode(&mut w);
            assert!(RailInfo::decode(&mut Reader::new(&w.0)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_cts_frames_go_unsolicited() {
        assert!(!solicited(FrameKind::Cts));
        for k in [
            FrameKind::Data,
            FrameKind::Abort,
            FrameKind::Close,
            FrameKind::Fail,
            FrameKind::RailDown,
            FrameKind::Unknown(9),
        ] {
            assert!(solicited(k), "{k:?}");
        }
    }

    #[test]
    fn recovery_offers_agree_symmetrically() {
        use RecoveryOffer::*;
        let all = [GoBackN, Either, Selective];
        for a in all {
            assert_eq!(RecoveryOffer::from_code(a.code()), Some(a));
            for b in all {
                assert_eq!(a.agree(b), b.agree(a), "{a:?} {b:?}");
            }
            // A go-back-N-only end (hardware, rxe-like, or forced) always wins.
            assert_eq!(a.agree(GoBackN), Recovery::GoBackN);
        }
        assert_eq!(RecoveryOffer::from_code(3), None);
        assert_eq!(Selective.agree(Either), Recovery::Selective);
        assert_eq!(Selective.agree(Selective), Recovery::Selective);
        assert_eq!(Either.agree(Either), rdmesh_core::rc::NEGOTIATED_RECOVERY);
        // Only the soft provider offers selective repeat.
        assert_eq!(RecoveryOffer::of("soft", None), Either);
        assert_eq!(
            RecoveryOffer::of("soft", Some(Recovery::Selective)),
            Selective
        );
        assert_eq!(RecoveryOffer::of("soft", Some(Recovery::GoBackN)), GoBackN);
        for hw in ["vfio", "model"] {
            assert_eq!(RecoveryOffer::of(hw, Some(Recovery::Selective)), GoBackN);
        }
    }

    #[test]
    fn timing_text() {
        let t = QpTiming {
            timeout: 14,
            retry_cnt: 3,
        };
        assert!((t.timeout_ms() - 67.1).abs() < 0.1);
    }
}
