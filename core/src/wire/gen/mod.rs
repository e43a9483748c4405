//! Structure-aware RoCEv2 frame generation for fuzzing *other* receivers.
//!
//! A RoCEv2 receiver drops a frame whose ICRC is wrong, whose DestQP is unknown or whose PSN is
//! outside its window before it looks any further, so random bytes never reach its deeper
//! checks. [`generate`] builds whole Ethernet frames (Ethernet | IPv4 or IPv6 | UDP 4791 | BTH |
//! extended headers | payload | pad | ICRC) around what a [`Target`] knows about the receiver's
//! QP — its QPN, expected PSN, P_Key/Q_Key, path MTU and an MR (R_Key, address, length) — and
//! adds at most one deliberate [`Violation`] per frame. Every frame carries a correct ICRC over
//! the bytes it holds (and a correct IPv4 header checksum) unless the violation is
//! [`Violation::BadIcrc`].
//!
//! Every decision (violation, opcode, fields, lengths, payload seed) is read from an
//! [`Entropy`] cursor, so a libFuzzer input or the bytes of a seeded PRNG fully determine the
//! frame; an exhausted cursor reads zeros, which gives the simplest valid frame.
//!
//! `no_std`, no heap: the frame is written into the caller's buffer, which must hold
//! [`MAX_FRAME_LEN`] bytes for the largest case (4096-byte MTU, IPv6, a VLAN tag, 64 bytes
//! over the MTU).
//!
//! ```
//! use rdmesh_core::wire::gen::{generate, Entropy, Target, Violation, MAX_FRAME_LEN};
//! use rdmesh_core::wire::RocePacket;
//!
//! let target = Target::example_v4();
//! let mut buf = [0u8; MAX_FRAME_LEN];
//! let g = generate(&mut Entropy::new(&[1, 2, 3]), &target, &mut buf).unwrap();
//! if g.violation == Violation::None {
//!     let p = RocePacket::parse(&buf[..g.len]).unwrap();
//!     assert!(p.icrc_valid);
//! }
//! ```

use core::net::{Ipv4Addr, Ipv6Addr};

use super::ethernet::{EthernetRepr, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use super::ib_packet::{pad_len, ICRC_LEN};
use super::icrc;
use super::ip::IpRepr;
use super::ipv4::{self, Ipv4Repr, PROTOCOL_UDP};
use super::ipv6::{Ipv6Repr, NEXT_HEADER_UDP};
use super::roce::{RoceRepr, UdpChecksum};
use super::udp::{self, UdpRepr, ROCE_V2_PORT};
use super::{
    bth, AethRepr, AtomicEthRepr, BthRepr, DethRepr, Error, NakCode, Opcode, Psn, Result, RethRepr,
    Syndrome, Transport, TransportRepr,
};

mod entropy;
mod violation;

pub use entropy::Entropy;
pub use violation::Violation;

/// Buffer size that holds every frame [`generate`] builds: VLAN-tagged Ethernet (18) + IPv6
/// (40) + UDP (8) + BTH (12) + the largest extended headers (28) + 4096 + 64 bytes of payload
/// + pad (3) + ICRC (4), rounded up.
pub const MAX_FRAME_LEN: usize = 4400;

/// Every opcode with a header set (RC, UC, UD and CNP), in wire-value order.
pub const KNOWN_OPCODES: [u8; 38] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,
    0x29, 0x2a, 0x2b, 0x64, 0x65, 0x81,
];

/// RC requests that start a message (First, Only, READ request, atomics).
/// (SEND with Invalidate is not among them: invalidating an R_Key that is not a bound
/// memory window's or a fast-registration MR's is an error; it comes with
/// [`Violation::RkeyNearMr`].)
const RC_START: [u8; 9] = [0x00, 0x04, 0x05, 0x06, 0x0a, 0x0b, 0x0c, 0x13, 0x14];
/// Packets an RC requester receives (READ response Only/First, ACK, atomic ACK) and a CNP.
const RC_RESPONSES: [u8; 5] = [0x10, 0x0d, 0x11, 0x12, 0x81];
/// RC Middle and Last packets.
const RC_CONTINUE: [u8; 9] = [0x01, 0x02, 0x03, 0x07, 0x08, 0x09, 0x0e, 0x0f, 0x16];
/// UC packets that start a message.
const UC_START: [u8; 6] = [0x20, 0x24, 0x25, 0x26, 0x2a, 0x2b];
/// UC Middle and Last packets.
const UC_CONTINUE: [u8; 6] = [0x21, 0x22, 0x23, 0x27, 0x28, 0x29];
/// UD SENDs.
const UD_START: [u8; 2] = [0x64, 0x65];
/// RC opcodes with an R_Key (RETH, AtomicETH, IETH).
const RC_KEYED: [u8; 7] = [0x06, 0x0a, 0x0b, 0x0c, 0x13, 0x14, 0x17];
/// UC opcodes with a RETH.
const UC_KEYED: [u8; 3] = [0x26, 0x2a, 0x2b];
/// RC opcodes that need an MR access right (WRITE, READ, atomics).
const RC_DMA_ATOMIC: [u8; 6] = [0x06, 0x0a, 0x0b, 0x0c, 0x13, 0x14];
/// RC opcodes whose RETH names a message length.
const RC_DMA: [u8; 4] = [0x06, 0x0a, 0x0b, 0x0c];
/// RC First packets and RC opcodes without payload.
const RC_LEN: [u8; 6] = [0x00, 0x06, 0x0c, 0x13, 0x14, 0x11];
/// UC First packets.
const UC_LEN: [u8; 2] = [0x20, 0x26];

/// A memory region of the receiver that RETH/AtomicETH/IETH fields aim at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct MrTarget {
    /// Virtual address of the first byte.
    pub va: u64,
    /// Length in bytes (at least 8 for atomics to fit).
    pub len: u64,
    /// The R_Key.
    pub rkey: u32,
    /// The MR allows remote READ (`IBV_ACCESS_REMOTE_READ`).
    pub remote_read: bool,
    /// The MR allows remote WRITE (`IBV_ACCESS_REMOTE_WRITE`).
    pub remote_write: bool,
    /// The MR allows remote atomics (`IBV_ACCESS_REMOTE_ATOMIC`).
    pub remote_atomic: bool,
}

impl MrTarget {
    /// Whether the MR lets `op` through: WRITEs need remote write, READ requests remote
    /// read, CmpSwap/FetchAdd remote atomic; everything else needs nothing.
    pub fn permits(&self, op: Opcode) -> bool {
        if op.is_write() {
            self.remote_write
        } else if op == Opcode::RcRdmaReadRequest {
            self.remote_read
        } else if matches!(op, Opcode::RcCompareSwap | Opcode::RcFetchAdd) {
            self.remote_atomic
        } else {
            true
        }
    }
}

/// The receiver's QP as the generator sees it: the live values frames are built near.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QpTarget {
    /// QP number the frames go to (24 bits).
    pub qpn: u32,
    /// Transport service of the QP: [`Transport::Rc`], [`Transport::Uc`] or [`Transport::Ud`]
    /// (anything else is treated as RC).
    pub service: Transport,
    /// The PSN the receiver expects next.
    pub epsn: Psn,
    /// The receiver's current MSN (for AETHs), 24 bits.
    pub msn: u32,
    /// P_Key of the QP.
    pub pkey: u16,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Source QP written in DETHs (UD), 24 bits.
    pub src_qpn: u32,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096 (clamped into that range).
    pub pmtu: u32,
}

/// Everything [`generate`] needs: the addresses of the frame and the receiver's QP and MR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Target {
    /// Ethernet header; its EtherType must match `ip`'s version.
    pub eth: EthernetRepr,
    /// IP header template (sender → receiver); lengths are computed, protocol must be UDP.
    pub ip: IpRepr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port (4791 for RoCEv2).
    pub dst_port: u16,
    /// UDP checksum policy ([`UdpChecksum::AsGiven`] writes 0).
    pub udp_checksum: UdpChecksum,
    /// The receiver's QP.
    pub qp: QpTarget,
    /// The receiver's MR, if one is known.
    pub mr: Option<MrTarget>,
    /// `true`: the frame goes out as written (a pcap file, a raw socket), so violations in
    /// the IP and UDP headers ([`Violation::LengthField`], [`Violation::BadUdpChecksum`], the
    /// IPv4 reserved flag) are generated. `false`: only the UDP payload is sent, through a UDP
    /// socket whose IP/UDP headers the kernel writes (ICRC computed for IPv4 ID 0 with DF, as
    /// an unconnected socket with `IP_PMTUDISC_DO` sends), so those violations are not.
    pub whole_frame: bool,
}

impl Target {
    /// An RC QP 0x000011 at 10.0.0.2 (from 10.0.0.1, UDP 49152 → 4791), expected PSN 0x100,
    /// MTU 1024, with a 64 KiB MR at 0x7f00_0000_0000 (R_Key 0x1234): for pcap files, where
    /// no live QP exists.
    pub const fn example_v4() -> Target {
        Target {
            eth: EthernetRepr {
                dst: [0x02, 0, 0, 0, 0, 0x02],
                src: [0x02, 0, 0, 0, 0, 0x01],
                vlan: None,
                ethertype: ETHERTYPE_IPV4,
            },
            ip: IpRepr::V4(Ipv4Repr {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                dscp: 26,
                ecn: 2,
                ident: 0,
                dont_frag: true,
                ttl: 64,
                protocol: PROTOCOL_UDP,
                payload_len: 0,
            }),
            src_port: 49152,
            dst_port: ROCE_V2_PORT,
            udp_checksum: UdpChecksum::Zero,
            qp: QpTarget {
                qpn: 0x11,
                service: Transport::Rc,
                epsn: Psn::new(0x100),
                msn: 0,
                pkey: bth::DEFAULT_PKEY,
                qkey: 0x1111_1111,
                src_qpn: 0x12,
                pmtu: 1024,
            },
            mr: Some(MrTarget {
                va: 0x7f00_0000_0000,
                len: 65536,
                rkey: 0x1234,
                remote_read: true,
                remote_write: true,
                remote_atomic: true,
            }),
            whole_frame: true,
        }
    }

    /// As [`example_v4`](Self::example_v4) over IPv6 (fd00::1 → fd00::2), with the UDP
    /// checksum computed (RFC 8200 §8.1 forbids a zero one over IPv6).
    pub const fn example_v6() -> Target {
        let mut t = Self::example_v4();
        t.udp_checksum = UdpChecksum::Compute;
        t.eth.ethertype = ETHERTYPE_IPV6;
        t.ip = IpRepr::V6(Ipv6Repr {
            src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
            traffic_class: 0x68,
            flow_label: 0,
            hop_limit: 64,
            next_header: NEXT_HEADER_UDP,
            payload_len: 0,
        });
        t
    }
}

/// What [`generate`] built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Generated {
    /// Frame length in bytes (no FCS; not padded to 60).
    pub len: usize,
    /// The BTH opcode byte on the wire.
    pub opcode: u8,
    /// The deliberate violation.
    pub violation: Violation,
    /// The BTH PSN on the wire.
    pub psn: Psn,
    /// Bytes between the headers the opcode names and the pad.
    pub payload_len: usize,
    /// `true` when the frame asks for an answer: an RC request with AckReq, or a READ/atomic.
    pub ack_req: bool,
}

/// Builds one frame into `buf` from the decisions in `e`: a violation (none about a third of
/// the time, else any that [`Violation::applies_to`] the target), then the frame for it (see
/// [`generate_violation`]).
///
/// # Errors
/// [`Error::Truncated`] when `buf` is shorter than [`MAX_FRAME_LEN`] and the frame does not
/// fit; [`Error::BadField`] when the target's EtherType and IP version disagree or a 24-bit
/// field of the target overflows.
pub fn generate(e: &mut Entropy<'_>, t: &Target, buf: &mut [u8]) -> Result<Generated> {
    let v = if e.ratio(85, 256) {
        Violation::None
    } else {
        e.choose(&Violation::ALL[1..])
    };
    let v = if v.applies_to(t) { v } else { Violation::None };
    generate_violation(e, t, v, buf)
}

fn service(t: &Target) -> Transport {
    match t.qp.service {
        Transport::Uc => Transport::Uc,
        Transport::Ud => Transport::Ud,
        _ => Transport::Rc,
    }
}

/// Picks an opcode for violation `v` on a QP of `svc`.
fn pick_opcode(e: &mut Entropy<'_>, t: &Target, v: Violation) -> u8 {
    let svc = service(t);
    let permits = |op: u8| t.mr.map_or(true, |m| m.permits(Opcode::from(op)));
    let start: &[u8] = match svc {
        Transport::Uc => &UC_START,
        Transport::Ud => &UD_START,
        _ => &RC_START,
    };
    let cont: &[u8] = match svc {
        Transport::Uc => &UC_CONTINUE,
        Transport::Ud => &UD_START,
        _ => &RC_CONTINUE,
    };
    match v {
        Violation::OpcodeForOtherQpType => loop {
            let op = e.choose(&KNOWN_OPCODES[..37]);
            if Opcode::from(op).transport() != svc {
                break op;
            }
            // Exhausted input chooses 0x00 forever: step to a UD opcode.
            if e.remaining() == 0 {
                break if svc == Transport::Ud { 0x04 } else { 0x64 };
            }
        },
        Violation::OutOfOrderOpcode => e.choose(cont),
        Violation::RkeyNearMr | Violation::VaOutOfMr => match svc {
            Transport::Uc => e.choose(&UC_KEYED),
            _ => e.choose(&RC_KEYED),
        },
        Violation::DmaLenMismatch => match svc {
            Transport::Uc => e.choose(&UC_KEYED),
            _ => e.choose(&RC_DMA),
        },
        Violation::PayloadLenWrong => match svc {
            Transport::Uc => e.choose(&UC_LEN),
            Transport::Ud => e.choose(&UD_START),
            _ => e.choose(&RC_LEN),
        },
        Violation::PayloadOverMtu | Violation::PadCntMismatch => loop {
            let op = e.choose(start);
            if Opcode::from(op).header_set().is_some_and(|h| h.payload) || e.remaining() == 0 {
                break if op == 0x0c || op == 0x13 || op == 0x14 {
                    0x04
                } else {
                    op
                };
            }
        },
        Violation::TruncatedHeaders => loop {
            let op = e.choose(start);
            if Opcode::from(op)
                .header_set()
                .is_some_and(|h| h.ext_len() > 0)
            {
                break op;
            }
            if e.remaining() == 0 {
                break start[start.len() - 1];
            }
        },
        Violation::AccessNotGranted => {
            let keyed: &[u8] = match svc {
                Transport::Uc => &UC_KEYED,
                _ => &RC_DMA_ATOMIC,
            };
            let n = keyed.iter().filter(|&&op| !permits(op)).count();
            let k = e.below(n.max(1));
            keyed
                .iter()
                .copied()
                .filter(|&op| !permits(op))
                .nth(k)
                .unwrap_or(start[0])
        }
        _ => {
            if svc == Transport::Rc && e.ratio(1, 8) {
                e.choose(&RC_RESPONSES)
            } else {
                // An operation the MR allows (SENDs always are).
                let mut op = e.choose(start);
                for _ in 0..8 {
                    if permits(op) {
                        break;
                    }
                    op = e.choose(start);
                }
                if permits(op) {
                    op
                } else {
                    start[0]
                }
            }
        }
    }
}

/// A reserved, RD or vendor opcode value.
fn unknown_opcode(e: &mut Entropy<'_>) -> u8 {
    let mut v = e.byte();
    while Opcode::from(v).header_set().is_some() {
        v = v.wrapping_add(0x15);
    }
    v
}

/// Fills `out` with a cheap xorshift stream from `seed` (payload bytes).
fn fill_payload(seed: u32, out: &mut [u8]) {
    let mut s = seed | 1;
    for b in out.iter_mut() {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        *b = (s >> 24) as u8;
    }
}

/// Builds one frame with violation `v` (forced; see [`Violation::applies_to`] for the
/// combinations that make sense — others degrade to the closest frame they can, and
/// [`Violation::LengthField`] / [`Violation::BadUdpChecksum`] are built even when
/// `t.whole_frame` is `false`) into `buf`.
///
/// # Errors
/// As [`generate`].
pub fn generate_violation(
    e: &mut Entropy<'_>,
    t: &Target,
    v: Violation,
    buf: &mut [u8],
) -> Result<Generated> {
    let svc = service(t);
    let pmtu = t.qp.pmtu.clamp(256, 4096).next_power_of_two().min(4096) as usize;
    let base = pick_opcode(e, t, v);
    let raw_opcode = if v == Violation::UnknownOpcode {
        unknown_opcode(e)
    } else {
        base
    };
    // Emit an unknown opcode as a SEND Only of the QP's transport, then overwrite the byte.
    let emit_opcode = Opcode::from(if v == Violation::UnknownOpcode {
        match svc {
            Transport::Uc => 0x24,
            Transport::Ud => 0x64,
            _ => 0x04,
        }
    } else {
        base
    });
    let hs = emit_opcode.header_set().ok_or(Error::UnknownOpcode)?;

    // PSN.
    let epsn = t.qp.epsn;
    let psn = match v {
        Violation::PsnAhead => epsn.add(match e.below(4) {
            0 => 1 << 22,
            1 => (1 << 23) - 1,
            2 => 1 << 23,
            _ => e.range(1, 16) as u32,
        }),
        Violation::PsnBehind => epsn.sub(match e.below(3) {
            0 => (1 << 23) - 1,
            1 => 1 << 23,
            _ => e.range(1, 16) as u32,
        }),
        _ if RC_RESPONSES.contains(&base) && svc == Transport::Rc => {
            // Responses carry the requester's PSNs: near the expected one.
            epsn.add(e.range(0, 4) as u32)
        }
        _ => epsn,
    };
    let dest_qp = match v {
        Violation::WrongQpn => {
            (match e.below(6) {
                0 => 0,
                1 => 1,
                2 => bth::MAX_QPN,
                3 => t.qp.qpn.wrapping_add(1),
                4 => t.qp.qpn.wrapping_sub(1),
                _ => t.qp.qpn.wrapping_add(2),
            }) & bth::MAX_QPN
        }
        _ => t.qp.qpn,
    };
    let dest_qp = if v == Violation::WrongQpn && dest_qp == t.qp.qpn {
        t.qp.qpn ^ 0x80
    } else {
        dest_qp
    };
    let pkey = match v {
        Violation::WrongPkey => {
            let k = match e.below(4) {
                0 => 0x0000,
                1 => 0x7fff,
                2 => 0x8000,
                _ => e.u16(),
            };
            if k == t.qp.pkey {
                k ^ 0x0001
            } else {
                k
            }
        }
        _ => t.qp.pkey,
    };
    let is_cnp = emit_opcode == Opcode::Cnp;
    let bth_repr = BthRepr {
        opcode: emit_opcode,
        solicited: e.ratio(1, 8),
        mig_req: false,
        pad_cnt: 0,
        pkey,
        fecn: e.ratio(1, 16),
        becn: is_cnp || e.ratio(1, 16),
        dest_qp,
        ack_req: !is_cnp && !e.ratio(1, 4),
        psn,
    };
    let mut tr = TransportRepr::new(bth_repr);

    // Payload length.
    let first = emit_opcode.is_first();
    let middle = emit_opcode.is_middle();
    let mut payload_len = if !hs.payload {
        0
    } else if first || middle {
        if v == Violation::PayloadLenWrong {
            e.range(0, pmtu as u64 - 1) as usize
        } else {
            pmtu
        }
    } else {
        match e.below(8) {
            0 => 0,
            1..=4 => e.range(1, 16) as usize,
            5 => pmtu,
            _ => e.range(17, pmtu as u64) as usize,
        }
    };
    if v == Violation::PayloadOverMtu {
        payload_len = pmtu + e.range(1, 64) as usize;
    }
    if v == Violation::PadCntMismatch && payload_len == 0 && hs.payload {
        payload_len = e.range(1, 7) as usize;
    }
    let mr = t.mr.unwrap_or(MrTarget {
        va: 0x1000,
        len: 1 << 20,
        rkey: 0x100,
        remote_read: true,
        remote_write: true,
        remote_atomic: true,
    });
    if hs.reth && emit_opcode.is_write() && (payload_len as u64) > mr.len {
        payload_len = mr.len as usize;
    }

    // Extended headers.
    let rkey = match v {
        Violation::RkeyNearMr => match e.below(5) {
            0 => mr.rkey.wrapping_add(1),
            1 => mr.rkey.wrapping_sub(1),
            2 => mr.rkey.wrapping_add(2),
            3 => mr.rkey.wrapping_sub(2),
            // Same index (bits 31:8), another key byte (rxe's and mlx5's layout).
            _ => mr.rkey ^ (u32::from(e.byte()) | 1),
        },
        _ => mr.rkey,
    };
    if hs.reth {
        let dma_len: u64 = if emit_opcode.is_write() {
            if emit_opcode.is_first() {
                (payload_len as u64 + e.range(1, 3 * pmtu as u64)).min(mr.len.max(1))
            } else {
                payload_len as u64
            }
        } else {
            // READ request.
            match e.below(4) {
                0 => e.range(1, 16),
                1 => pmtu as u64,
                2 => e.range(1, mr.len.min(16 * pmtu as u64)),
                _ => e.range(1, mr.len.min(4 * pmtu as u64)),
            }
        };
        let dma_len = dma_len.min(mr.len);
        let mut va = mr.va + e.range(0, mr.len - dma_len);
        let mut dma = dma_len as u32;
        match v {
            Violation::VaOutOfMr => {
                let k = e.range(1, 64);
                match e.below(4) {
                    0 => va = mr.va.wrapping_sub(k),
                    1 => {
                        va = mr.va + mr.len - dma_len.min(k).max(1);
                        dma = dma.max(k as u32 + 1);
                    }
                    2 => va = mr.va + mr.len,
                    _ => va = u64::MAX - k,
                }
                if dma == 0 {
                    dma = 1;
                }
            }
            Violation::DmaLenMismatch => {
                dma = if emit_opcode == Opcode::RcRdmaReadRequest {
                    match e.below(3) {
                        0 => 0,
                        1 => 1 << 31,
                        _ => u32::MAX,
                    }
                } else if emit_opcode.is_first() {
                    (payload_len as u32).saturating_sub(e.range(1, 64) as u32)
                } else {
                    let k = e.range(1, 64) as u32;
                    if e.bool() || payload_len == 0 {
                        payload_len as u32 + k
                    } else {
                        (payload_len as u32).saturating_sub(k)
                    }
                };
                if emit_opcode.is_first() && dma as usize == payload_len {
                    dma = dma.saturating_sub(1);
                }
            }
            _ => {}
        }
        tr.reth = Some(RethRepr {
            va,
            rkey,
            dma_len: dma,
        });
    }
    if hs.atomic_eth {
        let slots = (mr.len / 8).max(1);
        let mut va = mr.va + 8 * e.range(0, slots - 1);
        if v == Violation::VaOutOfMr {
            va = match e.below(3) {
                0 => va + e.range(1, 7),
                1 => mr.va.wrapping_sub(8),
                _ => mr.va + mr.len,
            };
        }
        tr.atomic_eth = Some(AtomicEthRepr {
            va,
            rkey,
            swap_add: e.u64(),
            compare: e.u64(),
        });
    }
    if hs.deth {
        tr.deth = Some(DethRepr {
            qkey: t.qp.qkey,
            src_qp: t.qp.src_qpn & bth::MAX_QPN,
        });
    }
    if hs.immdt {
        tr.imm = Some(e.u32());
    }
    if hs.ieth {
        tr.ieth = Some(rkey);
    }
    if hs.aeth {
        let syndrome = match e.below(8) {
            0 => Syndrome::RnrNak {
                timer: e.byte() & 0x1f,
            },
            1 => Syndrome::Nak(NakCode::from(e.byte() % 5)),
            2 => Syndrome::Ack {
                credit: e.byte() & 0x1f,
            },
            _ => Syndrome::ACK_UNLIMITED,
        };
        tr.aeth = Some(AethRepr {
            syndrome,
            msn: t.qp.msn.wrapping_add(e.range(0, 2) as u32) & bth::MAX_QPN,
        });
    }
    if hs.atomic_ack_eth {
        tr.atomic_ack = Some(e.u64());
    }

    // Emit the well-formed frame, then apply the violation to its bytes.
    let repr = RoceRepr {
        eth: t.eth,
        ip: t.ip,
        udp: UdpRepr {
            src_port: t.src_port,
            dst_port: t.dst_port,
            payload_len: 0,
            checksum: 0,
        },
        transport: tr,
    };
    let extra = if v == Violation::PayloadLenWrong && !hs.payload {
        e.range(1, 16) as usize
    } else {
        0
    };
    if repr.frame_len(payload_len) + extra > buf.len() {
        return Err(Error::Truncated);
    }
    let seed = e.u32();
    let ib_at = t.eth.buffer_len() + t.ip.header_len() + udp::HEADER_LEN;
    // Headers with no payload, then the payload and pad written in place (no second buffer);
    // lengths, PadCnt and the ICRC are fitted below.
    let n0 = repr.emit(&[], UdpChecksum::Zero, buf)?;
    let pay_at = n0 - ICRC_LEN;
    let pad = pad_len(payload_len);
    fill_payload(seed, &mut buf[pay_at..pay_at + payload_len]);
    buf[pay_at + payload_len..pay_at + payload_len + pad].fill(0);
    let mut n = pay_at + payload_len + pad + ICRC_LEN;
    buf[ib_at + 1] = (buf[ib_at + 1] & !0x30) | ((pad as u8) << 4);
    set_lengths(buf, t, n);
    let ip_at = t.eth.buffer_len();
    let udp_at = ip_at + t.ip.header_len();

    match v {
        Violation::UnknownOpcode => buf[ib_at] = raw_opcode,
        Violation::BadTver => buf[ib_at + 1] |= e.range(1, 15) as u8,
        Violation::ReservedBits => match e.below(4) {
            0 => buf[ib_at + 8] |= e.range(1, 0x7f) as u8,
            1 => buf[ib_at + 4] |= e.range(1, 0x3f) as u8,
            2 if hs.deth => buf[ib_at + bth::HEADER_LEN + 4] = e.range(1, 0xff) as u8,
            _ => match t.ip {
                IpRepr::V4(_) if t.whole_frame => buf[ip_at + 6] |= 0x80,
                _ => buf[ib_at + 8] |= 0x01,
            },
        },
        Violation::PadCntMismatch => {
            let pad = (buf[ib_at + 1] >> 4) & 3;
            let new = (pad + e.range(1, 3) as u8) & 3;
            buf[ib_at + 1] = (buf[ib_at + 1] & !0x30) | (new << 4);
        }
        Violation::PayloadLenWrong if extra > 0 => {
            // Payload bytes before the ICRC of an opcode that carries none.
            fill_payload(seed ^ 0x5a5a, &mut buf[n - ICRC_LEN..n - ICRC_LEN + extra]);
            n += extra;
            set_lengths(buf, t, n);
        }
        Violation::TruncatedHeaders => {
            let ext = hs.ext_len().max(1);
            let keep = ib_at + bth::HEADER_LEN + e.below(ext);
            n = keep + ICRC_LEN;
            set_lengths(buf, t, n);
        }
        Violation::LengthField => {
            let actual_udp = (n - udp_at) as u16;
            let delta = match e.below(5) {
                0 => 0u16.wrapping_sub(e.range(1, 8) as u16),
                1 => e.range(1, 8) as u16,
                2 => 0u16.wrapping_sub(actual_udp - 8),
                3 => 0u16.wrapping_sub(actual_udp),
                _ => 0xffffu16.wrapping_sub(actual_udp),
            };
            if delta == 0 {
                set_udp_len(buf, udp_at, actual_udp.wrapping_add(1));
            } else if e.bool() {
                set_udp_len(buf, udp_at, actual_udp.wrapping_add(delta));
            } else {
                let at = match t.ip {
                    IpRepr::V4(_) => ip_at + 2,
                    IpRepr::V6(_) => ip_at + 4,
                };
                let cur = u16::from_be_bytes([buf[at], buf[at + 1]]);
                buf[at..at + 2].copy_from_slice(&cur.wrapping_add(delta).to_be_bytes());
            }
        }
        _ => {}
    }

    // Checksums: IPv4 header, ICRC over the bytes present, then the UDP checksum (it covers
    // the ICRC).
    if let IpRepr::V4(_) = t.ip {
        ipv4::Packet::new_unchecked(&mut buf[ip_at..udp_at]).fill_checksum();
    }
    let crc = icrc::compute(
        &buf[ip_at..udp_at],
        &buf[udp_at..ib_at],
        &buf[ib_at..n - ICRC_LEN],
    )?;
    let mut wire = icrc::to_wire(crc);
    if v == Violation::BadIcrc {
        wire[e.below(4)] ^= 1 << e.below(8);
    }
    buf[n - ICRC_LEN..n].copy_from_slice(&wire);
    let compute_udp = t.udp_checksum == UdpChecksum::Compute || v == Violation::BadUdpChecksum;
    if compute_udp && v != Violation::LengthField {
        let mut ip = t.ip;
        ip.set_payload_len((n - udp_at) as u16);
        udp::Packet::new_unchecked(&mut buf[udp_at..n]).fill_checksum(&ip);
        if v == Violation::BadUdpChecksum {
            let c = u16::from_be_bytes([buf[udp_at + 6], buf[udp_at + 7]]);
            let bad = match c ^ (1 << e.below(16)) {
                0 => 0x0001,
                b => b,
            };
            buf[udp_at + 6..udp_at + 8].copy_from_slice(&bad.to_be_bytes());
        }
    }
    let payload_len = match v {
        Violation::TruncatedHeaders => 0,
        _ => payload_len + extra,
    };
    Ok(Generated {
        len: n,
        opcode: raw_opcode,
        violation: v,
        psn,
        payload_len,
        ack_req: bth_repr.ack_req
            || matches!(
                emit_opcode,
                Opcode::RcRdmaReadRequest | Opcode::RcCompareSwap | Opcode::RcFetchAdd
            ),
    })
}

fn set_udp_len(buf: &mut [u8], udp_at: usize, len: u16) {
    buf[udp_at + 4..udp_at + 6].copy_from_slice(&len.to_be_bytes());
}

/// Rewrites the IP and UDP length fields for a frame of `n` bytes.
fn set_lengths(buf: &mut [u8], t: &Target, n: usize) {
    let ip_at = t.eth.buffer_len();
    let udp_at = ip_at + t.ip.header_len();
    let udp_len = (n - udp_at) as u16;
    set_udp_len(buf, udp_at, udp_len);
    match t.ip {
        IpRepr::V4(_) => {
            let total = (n - ip_at) as u16;
            buf[ip_at + 2..ip_at + 4].copy_from_slice(&total.to_be_bytes());
        }
        IpRepr::V6(_) => buf[ip_at + 4..ip_at + 6].copy_from_slice(&udp_len.to_be_bytes()),
    }
}

#[cfg(test)]
mod test;
