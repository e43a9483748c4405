//! `arbitrary::Arbitrary` for every header `Repr` (feature `arbitrary`).
//!
//! Every value is valid by construction for its field widths, so that a fuzzer's bytes turn
//! into reprs that `check()` accepts and `emit` writes: 24-bit QPNs, PSNs and MSNs, 2-bit pad
//! counts, 5-bit AETH credit/timer codes, 6-bit DSCP, 20-bit flow labels, 12-bit VLAN IDs. A
//! [`TransportRepr`] carries exactly the extended headers its opcode names and a [`RoceRepr`]'s
//! EtherType, IP protocol and UDP port say RoCEv2 (destination port 4791 unless the input asks
//! otherwise one time in 64). Protocol violations are the job of the generator
//! ([`super::gen`]), which builds on these.
//!
//! Written by hand rather than derived: `derive(Arbitrary)` emits code that names `::std`,
//! which this `#![no_std]` crate cannot.

use core::net::{Ipv4Addr, Ipv6Addr};

use arbitrary::{Arbitrary, Result, Unstructured};

use super::aeth::{AethRepr, NakCode, Syndrome};
use super::ethernet::{EthernetRepr, VlanTag, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use super::gen::{MrTarget, QpTarget, Target, Violation};
use super::ip::IpRepr;
use super::ipv4::{Ipv4Repr, PROTOCOL_UDP};
use super::ipv6::{Ipv6Repr, NEXT_HEADER_UDP};
use super::roce::{RoceRepr, UdpChecksum};
use super::udp::{UdpRepr, ROCE_V2_PORT};
use super::{
    AtomicAckEthRepr, AtomicEthRepr, BthRepr, CnpRepr, DethRepr, IethRepr, ImmDtRepr, Opcode, Psn,
    RethRepr, Transport, TransportRepr,
};

/// A value in `0..=mask` (`mask` a run of low bits).
fn bits(u: &mut Unstructured<'_>, mask: u32) -> Result<u32> {
    Ok(u32::arbitrary(u)? & mask)
}

fn u24(u: &mut Unstructured<'_>) -> Result<u32> {
    bits(u, 0x00ff_ffff)
}

impl<'a> Arbitrary<'a> for Opcode {
    /// Any of the 256 values (reserved and vendor ones included: `Opcode::Unknown`).
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(Opcode::from(u8::arbitrary(u)?))
    }
    fn size_hint(_: usize) -> (usize, Option<usize>) {
        (1, Some(1))
    }
}

impl<'a> Arbitrary<'a> for Psn {
    /// A 24-bit PSN.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(Psn::new(u24(u)?))
    }
}

impl<'a> Arbitrary<'a> for NakCode {
    /// One of the five defined codes, or a reserved 5-bit value.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(NakCode::from(bits(u, 0x1f)? as u8))
    }
}

impl<'a> Arbitrary<'a> for Syndrome {
    /// ACK, RNR NAK or NAK with an in-range code; one time in 16 a reserved byte.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(match u.int_in_range(0u8..=15)? {
            0..=6 => Syndrome::Ack {
                credit: bits(u, 0x1f)? as u8,
            },
            7..=9 => Syndrome::RnrNak {
                timer: bits(u, 0x1f)? as u8,
            },
            10..=14 => Syndrome::Nak(NakCode::arbitrary(u)?),
            // Bit 7 set, or bits 6:5 = 10: both decode as Reserved and round-trip.
            _ => Syndrome::from(if bool::arbitrary(u)? {
                0x80 | u8::arbitrary(u)?
            } else {
                0x40 | (u8::arbitrary(u)? & 0x1f)
            }),
        })
    }
}

impl<'a> Arbitrary<'a> for BthRepr {
    /// Any opcode; `pad_cnt` 0..=3 and a 24-bit DestQP.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(BthRepr {
            opcode: Opcode::arbitrary(u)?,
            solicited: bool::arbitrary(u)?,
            mig_req: bool::arbitrary(u)?,
            pad_cnt: bits(u, 3)? as u8,
            pkey: u16::arbitrary(u)?,
            fecn: bool::arbitrary(u)?,
            becn: bool::arbitrary(u)?,
            dest_qp: u24(u)?,
            ack_req: bool::arbitrary(u)?,
            psn: Psn::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for RethRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(RethRepr {
            va: u64::arbitrary(u)?,
            rkey: u32::arbitrary(u)?,
            dma_len: u32::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for AethRepr {
    /// An in-range syndrome and a 24-bit MSN.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(AethRepr {
            syndrome: Syndrome::arbitrary(u)?,
            msn: u24(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for AtomicEthRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(AtomicEthRepr {
            va: u64::arbitrary(u)?,
            rkey: u32::arbitrary(u)?,
            swap_add: u64::arbitrary(u)?,
            compare: u64::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for AtomicAckEthRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(AtomicAckEthRepr {
            orig_data: u64::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for DethRepr {
    /// Any Q_Key and a 24-bit source QP.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(DethRepr {
            qkey: u32::arbitrary(u)?,
            src_qp: u24(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for ImmDtRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(ImmDtRepr {
            imm: u32::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for IethRepr {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(IethRepr {
            rkey: u32::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for CnpRepr {
    /// A 24-bit DestQP and any P_Key.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(CnpRepr {
            dest_qp: u24(u)?,
            pkey: u16::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for VlanTag {
    /// PCP 0..=7, a 12-bit VID.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(VlanTag {
            pcp: bits(u, 7)? as u8,
            dei: bool::arbitrary(u)?,
            vid: bits(u, 0x0fff)? as u16,
        })
    }
}

impl<'a> Arbitrary<'a> for EthernetRepr {
    /// IPv4 or IPv6 EtherType (one time in 16 any other that is not 802.1Q), tagged one time in 4.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let ethertype = match u.int_in_range(0u8..=15)? {
            0..=9 => ETHERTYPE_IPV4,
            10..=14 => ETHERTYPE_IPV6,
            _ => match u16::arbitrary(u)? {
                super::ethernet::ETHERTYPE_VLAN => ETHERTYPE_IPV4,
                t => t,
            },
        };
        Ok(EthernetRepr {
            dst: <[u8; 6]>::arbitrary(u)?,
            src: <[u8; 6]>::arbitrary(u)?,
            vlan: if u.ratio(1u8, 4)? {
                Some(VlanTag::arbitrary(u)?)
            } else {
                None
            },
            ethertype,
        })
    }
}

impl<'a> Arbitrary<'a> for Ipv4Repr {
    /// 6-bit DSCP, 2-bit ECN; protocol UDP except one time in 32; `payload_len` ≤ 65515.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(Ipv4Repr {
            src: Ipv4Addr::from(u32::arbitrary(u)?),
            dst: Ipv4Addr::from(u32::arbitrary(u)?),
            dscp: bits(u, 63)? as u8,
            ecn: bits(u, 3)? as u8,
            ident: u16::arbitrary(u)?,
            dont_frag: bool::arbitrary(u)?,
            ttl: u8::arbitrary(u)?,
            protocol: if u.ratio(1u8, 32)? {
                u8::arbitrary(u)?
            } else {
                PROTOCOL_UDP
            },
            payload_len: u.int_in_range(0..=(u16::MAX - 20))?,
        })
    }
}

impl<'a> Arbitrary<'a> for Ipv6Repr {
    /// A 20-bit flow label; next header UDP except one time in 32.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(Ipv6Repr {
            src: Ipv6Addr::from(u128::arbitrary(u)?),
            dst: Ipv6Addr::from(u128::arbitrary(u)?),
            traffic_class: u8::arbitrary(u)?,
            flow_label: bits(u, 0x000f_ffff)?,
            hop_limit: u8::arbitrary(u)?,
            next_header: if u.ratio(1u8, 32)? {
                u8::arbitrary(u)?
            } else {
                NEXT_HEADER_UDP
            },
            payload_len: u16::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for IpRepr {
    /// IPv4 three times in four.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(if u.ratio(1u8, 4)? {
            IpRepr::V6(Ipv6Repr::arbitrary(u)?)
        } else {
            IpRepr::V4(Ipv4Repr::arbitrary(u)?)
        })
    }
}

impl<'a> Arbitrary<'a> for UdpRepr {
    /// Destination port 4791 except one time in 64; `payload_len` ≤ 65527.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(UdpRepr {
            src_port: u16::arbitrary(u)?,
            dst_port: if u.ratio(1u8, 64)? {
                u16::arbitrary(u)?
            } else {
                ROCE_V2_PORT
            },
            payload_len: u.int_in_range(0..=(u16::MAX - 8))?,
            checksum: u16::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for UdpChecksum {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(match u.int_in_range(0u8..=2)? {
            0 => UdpChecksum::Zero,
            1 => UdpChecksum::Compute,
            _ => UdpChecksum::AsGiven,
        })
    }
}

impl<'a> Arbitrary<'a> for TransportRepr {
    /// A known opcode (RC, UC, UD or CNP) with exactly the extended headers it names, so that
    /// [`TransportRepr::emit`] accepts it.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let opcode = Opcode::from(*u.choose(&super::gen::KNOWN_OPCODES)?);
        let mut bth = BthRepr::arbitrary(u)?;
        bth.opcode = opcode;
        let mut t = TransportRepr::new(bth);
        let hs = opcode.header_set().unwrap_or_default();
        if hs.deth {
            t.deth = Some(DethRepr::arbitrary(u)?);
        }
        if hs.reth {
            t.reth = Some(RethRepr::arbitrary(u)?);
        }
        if hs.atomic_eth {
            t.atomic_eth = Some(AtomicEthRepr::arbitrary(u)?);
        }
        if hs.immdt {
            t.imm = Some(u32::arbitrary(u)?);
        }
        if hs.ieth {
            t.ieth = Some(u32::arbitrary(u)?);
        }
        if hs.aeth {
            t.aeth = Some(AethRepr::arbitrary(u)?);
        }
        if hs.atomic_ack_eth {
            t.atomic_ack = Some(u64::arbitrary(u)?);
        }
        Ok(t)
    }
}

impl<'a> Arbitrary<'a> for RoceRepr {
    /// Headers that [`RoceRepr::emit`] accepts: the EtherType matches the IP version, the IP
    /// protocol is UDP, the transport headers match the opcode.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut eth = EthernetRepr::arbitrary(u)?;
        let mut ip = IpRepr::arbitrary(u)?;
        match &mut ip {
            IpRepr::V4(r) => {
                eth.ethertype = ETHERTYPE_IPV4;
                r.protocol = PROTOCOL_UDP;
            }
            IpRepr::V6(r) => {
                eth.ethertype = ETHERTYPE_IPV6;
                r.next_header = NEXT_HEADER_UDP;
            }
        }
        Ok(RoceRepr {
            eth,
            ip,
            udp: UdpRepr::arbitrary(u)?,
            transport: TransportRepr::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for Violation {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(*u.choose(&Violation::ALL)?)
    }
}

impl<'a> Arbitrary<'a> for MrTarget {
    /// At least 8 bytes, not wrapping past 2^64.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let len = u.int_in_range(8u64..=1 << 32)?;
        Ok(MrTarget {
            va: u.int_in_range(0..=u64::MAX - len)?,
            len,
            rkey: u32::arbitrary(u)?,
            remote_read: bool::arbitrary(u)?,
            remote_write: bool::arbitrary(u)?,
            remote_atomic: bool::arbitrary(u)?,
        })
    }
}

impl<'a> Arbitrary<'a> for QpTarget {
    /// An RC, UC or UD QP with 24-bit numbers and a path MTU of 256..=4096.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(QpTarget {
            qpn: u24(u)?,
            service: *u.choose(&[Transport::Rc, Transport::Uc, Transport::Ud])?,
            epsn: Psn::arbitrary(u)?,
            msn: u24(u)?,
            pkey: u16::arbitrary(u)?,
            qkey: u32::arbitrary(u)?,
            src_qpn: u24(u)?,
            pmtu: 256 << u.int_in_range(0u32..=4)?,
        })
    }
}

impl<'a> Arbitrary<'a> for Target {
    /// Headers [`generate`](super::gen::generate) accepts (EtherType matching the IP version,
    /// UDP) around an arbitrary QP and MR.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let r = RoceRepr::arbitrary(u)?;
        Ok(Target {
            eth: r.eth,
            ip: r.ip,
            src_port: r.udp.src_port,
            dst_port: r.udp.dst_port,
            udp_checksum: UdpChecksum::arbitrary(u)?,
            qp: QpTarget::arbitrary(u)?,
            mr: if u.ratio(7u8, 8)? {
                Some(MrTarget::arbitrary(u)?)
            } else {
                None
            },
            whole_frame: bool::arbitrary(u)?,
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// Whatever bytes come in, the reprs check and emit.
    #[test]
    fn arbitrary_reprs_emit() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut data = [0u8; 512];
        let mut buf = [0u8; 9000];
        for _ in 0..2000 {
            for b in data.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            let mut u = Unstructured::new(&data);
            let r = RoceRepr::arbitrary(&mut u).unwrap();
            let payload: &[u8] = if r.transport.bth.opcode.header_set().unwrap().payload {
                &data[..100]
            } else {
                &[]
            };
            let n = r.emit(payload, UdpChecksum::Compute, &mut buf).unwrap();
            let p = super::super::RocePacket::parse(&buf[..n]);
            if r.udp.dst_port == ROCE_V2_PORT {
                let p = p.unwrap();
                assert!(p.icrc_valid);
                assert_eq!(p.transport.bth.opcode, r.transport.bth.opcode);
            }
            assert_eq!(CnpRepr::arbitrary(&mut u).unwrap().bth().check(), Ok(()));
            assert_eq!(AethRepr::arbitrary(&mut u).unwrap().check(), Ok(()));
            assert_eq!(DethRepr::arbitrary(&mut u).unwrap().check(), Ok(()));
            let t = Target::arbitrary(&mut u).unwrap();
            let mut e = super::super::gen::Entropy::new(&data[300..]);
            super::super::gen::generate(&mut e, &t, &mut buf).unwrap();
        }
    }
}
