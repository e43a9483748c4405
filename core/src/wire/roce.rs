//! A whole RoCEv2 frame: `Ethernet [802.1Q] | IPv4 or IPv6 | UDP (dst 4791) | BTH | ext headers |
//! payload | pad | ICRC` (RoCEv2 Annex A17.4; rxe_net.c / rxe_recv.c).
//!
//! [`RocePacket::parse`] walks every layer and checks the ICRC; [`RoceRepr::emit`] writes a
//! frame with every length, the IPv4 checksum, the pad, the ICRC and (by choice) the UDP checksum
//! computed. Neither adds the Ethernet FCS nor pads the frame to the 60-byte minimum (the NIC
//! does both).

use super::ethernet::{self, EthernetRepr, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use super::ib_packet::{IbPacket, ICRC_LEN};
use super::icrc;
use super::ip::IpRepr;
use super::ipv4::{self, Ipv4Repr, PROTOCOL_UDP};
use super::ipv6::{self, Ipv6Repr, NEXT_HEADER_UDP};
use super::transport::TransportRepr;
use super::udp::{self, UdpRepr, ROCE_V2_PORT};
use super::{Error, Result};

/// How [`RoceRepr::emit`] fills the UDP checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum UdpChecksum {
    /// Write 0 ("no checksum"), what Linux rxe sends for IPv4 and IPv6 (rxe_net.c).
    #[default]
    Zero,
    /// Compute the real checksum over the pseudo-header and the whole datagram, ICRC included.
    Compute,
    /// Write `udp.checksum` as given (for reproducing captured frames byte for byte).
    AsGiven,
}

/// The header reprs of a RoCEv2 frame; with a payload, everything [`RoceRepr::emit`] needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RoceRepr {
    /// Ethernet header; its EtherType must match the IP version.
    pub eth: EthernetRepr,
    /// IP header. Its length field is computed on emit; protocol / next header must be 17.
    pub ip: IpRepr,
    /// UDP header. Its length is computed on emit; the checksum follows [`UdpChecksum`].
    pub udp: UdpRepr,
    /// BTH and extended headers. `bth.pad_cnt` is computed on emit.
    pub transport: TransportRepr,
}

/// Length in bytes of a RoCEv2 frame (no FCS) with these headers and `payload_len` bytes of IB
/// payload: Ethernet (14/18) + IP (20/40) + UDP 8 + BTH/ext + payload + pad + ICRC 4.
pub fn frame_len(
    eth: &EthernetRepr,
    ip: &IpRepr,
    transport: &TransportRepr,
    payload_len: usize,
) -> usize {
    eth.buffer_len()
        + ip.header_len()
        + udp::HEADER_LEN
        + IbPacket::buffer_len(transport, payload_len)
}

impl RoceRepr {
    /// Frame length for `payload_len` payload bytes; see [`frame_len`].
    pub fn frame_len(&self, payload_len: usize) -> usize {
        frame_len(&self.eth, &self.ip, &self.transport, payload_len)
    }

    /// Writes the whole frame into the start of `buf` and returns its length
    /// ([`frame_len`](Self::frame_len)).
    ///
    /// Computed: IPv4 total length and header checksum / IPv6 payload length, UDP length, BTH
    /// PadCnt and zero pad bytes, the ICRC, and the UDP checksum per `udp_checksum`. Everything
    /// else is written as given (IPv4 ID, DF, TOS, TTL, ports, ...).
    ///
    /// # Errors
    /// Nothing is written on error.
    /// - [`Error::BadField`]: EtherType does not match the IP version; IP protocol is not UDP; a
    ///   field does not fit (VLAN, DSCP/ECN, flow label, pad, 24-bit QPN/MSN); the extended
    ///   headers disagree with the opcode.
    /// - [`Error::UnknownOpcode`]: the opcode has no header set.
    /// - [`Error::BadLength`]: the datagram would not fit the IP length field, or a no-payload
    ///   opcode is given a payload.
    /// - [`Error::Truncated`]: `buf` is shorter than the frame.
    pub fn emit(&self, payload: &[u8], udp_checksum: UdpChecksum, buf: &mut [u8]) -> Result<usize> {
        self.eth.check()?;
        self.ip.check()?;
        let ethertype_ok = match self.ip {
            IpRepr::V4(_) => self.eth.ethertype == ETHERTYPE_IPV4,
            IpRepr::V6(_) => self.eth.ethertype == ETHERTYPE_IPV6,
        };
        if !ethertype_ok || self.ip.protocol() != PROTOCOL_UDP {
            return Err(Error::BadField);
        }
        let mut t = self.transport;
        t.bth.pad_cnt = super::ib_packet::pad_len(payload.len()) as u8;
        t.check()?;
        if !super::ib_packet::payload_allowed(t.bth.opcode, payload.len()) {
            return Err(Error::BadLength);
        }
        let ib_len = IbPacket::buffer_len(&t, payload.len());
        let udp_len = udp::HEADER_LEN + ib_len;
        if udp_len > self.ip.max_payload_len() {
            return Err(Error::BadLength);
        }
        let eth_len = self.eth.buffer_len();
        let ip_len = self.ip.header_len();
        let total = eth_len + ip_len + udp_len;
        if buf.len() < total {
            return Err(Error::Truncated);
        }
        let buf = &mut buf[..total];

        self.eth
            .emit(&mut ethernet::Packet::new_unchecked(&mut buf[..eth_len]));
        let mut ip = self.ip;
        ip.set_payload_len(udp_len as u16);
        ip.emit(&mut buf[eth_len..])?;
        let udp_at = eth_len + ip_len;
        let ib_at = udp_at + udp::HEADER_LEN;
        let udp_repr = UdpRepr {
            payload_len: ib_len as u16,
            checksum: match udp_checksum {
                UdpChecksum::AsGiven => self.udp.checksum,
                _ => 0,
            },
            ..self.udp
        };
        udp_repr.emit(&mut udp::Packet::new_unchecked(&mut buf[udp_at..ib_at]));
        let n = IbPacket::emit(&t, payload, &mut buf[ib_at..])?;
        debug_assert_eq!(n + ICRC_LEN, ib_len);
        let crc = icrc::compute(
            &buf[eth_len..udp_at],
            &buf[udp_at..ib_at],
            &buf[ib_at..ib_at + n],
        )?;
        buf[ib_at + n..].copy_from_slice(&icrc::to_wire(crc));
        if udp_checksum == UdpChecksum::Compute {
            udp::Packet::new_unchecked(&mut buf[udp_at..]).fill_checksum(&ip);
        }
        Ok(total)
    }
}

/// A parsed RoCEv2 frame. `payload` borrows from the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RocePacket<'a> {
    /// Ethernet header (with VLAN tag if present).
    pub eth: EthernetRepr,
    /// IPv4 or IPv6 header.
    pub ip: IpRepr,
    /// UDP header (`dst_port` is 4791).
    pub udp: UdpRepr,
    /// BTH and extended headers.
    pub transport: TransportRepr,
    /// IB payload without pad.
    pub payload: &'a [u8],
    /// Pad bytes between payload and ICRC (BTH PadCnt), 0..=3.
    pub pad_cnt: u8,
    /// The transmitted ICRC as a CRC value (wire bytes read least-significant first), e.g.
    /// wire `82 FD 00 2A` → `0x2A00FD82`.
    pub icrc: u32,
    /// Whether `icrc` matches the ICRC computed over the frame (always `true` under
    /// `cfg(fuzzing)`; see [`icrc`](super::icrc#fuzzing)).
    pub icrc_valid: bool,
}

/// Which UDP datagrams [`RocePacket::parse_with`] treats as RoCEv2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PortMatch {
    /// Destination port equals this (RoCEv2: 4791).
    Destination(u16),
    /// Source or destination port equals this.
    Either(u16),
}

impl<'a> RocePacket<'a> {
    /// Parses an Ethernet frame (no FCS; trailing Ethernet padding beyond the IP length is
    /// ignored) down to the IB payload and verifies the ICRC. A bad ICRC is *not* an error: it is
    /// reported in `icrc_valid` so callers can count and drop.
    ///
    /// # Errors
    /// - [`Error::NotRoce`]: EtherType not IPv4/IPv6 (ARP, LLDP, ...), IP protocol / next header
    ///   not UDP (TCP, ICMP, ICMPv6, IPv6 extension headers), or UDP destination port ≠ 4791.
    /// - [`Error::Truncated`], [`Error::BadLength`]: a header or length field does not fit the
    ///   buffer; UDP length ≠ IP payload length; PadCnt/alignment/ICRC rules of [`IbPacket::parse`].
    /// - [`Error::BadVersion`], [`Error::Ipv4Options`], [`Error::Fragmented`],
    ///   [`Error::BadChecksum`]: IP header problems.
    /// - [`Error::BadTver`], [`Error::UnknownOpcode`]: BTH problems.
    pub fn parse(frame: &'a [u8]) -> Result<RocePacket<'a>> {
        Self::parse_with(frame, PortMatch::Destination(ROCE_V2_PORT))
    }

    /// As [`parse`](Self::parse), with the rule that decides which UDP datagrams are RoCEv2:
    /// [`PortMatch::Either`] also accepts packets *from* the port, as Wireshark's
    /// `udp.port == 4791` does — what a capture of endpoints on ephemeral UDP ports needs
    /// (their ACKs and READ responses go to the peer's ephemeral port).
    ///
    /// # Errors
    /// As [`parse`](Self::parse), with [`Error::NotRoce`] for datagrams `port_match` rejects.
    pub fn parse_with(frame: &'a [u8], port_match: PortMatch) -> Result<RocePacket<'a>> {
        let ep = ethernet::Packet::new_checked(frame)?;
        let eth = EthernetRepr::parse(&ep)?;
        let l3 = ep.payload();
        let (ip, ip_header, ip_payload) = match eth.ethertype {
            ETHERTYPE_IPV4 => {
                let p = ipv4::Packet::new_unchecked(l3);
                if l3.len() < ipv4::HEADER_LEN {
                    return Err(Error::Truncated);
                }
                if p.version() != 4 {
                    return Err(Error::BadVersion);
                }
                if p.protocol() != PROTOCOL_UDP {
                    return Err(Error::NotRoce);
                }
                let r = Ipv4Repr::parse(&p)?;
                (IpRepr::V4(r), p.header(), p.payload())
            }
            ETHERTYPE_IPV6 => {
                let p = ipv6::Packet::new_unchecked(l3);
                if l3.len() < ipv6::HEADER_LEN {
                    return Err(Error::Truncated);
                }
                if p.version() != 6 {
                    return Err(Error::BadVersion);
                }
                if p.next_header() != NEXT_HEADER_UDP {
                    return Err(Error::NotRoce);
                }
                let r = Ipv6Repr::parse(&p)?;
                (IpRepr::V6(r), p.header(), p.payload())
            }
            _ => return Err(Error::NotRoce),
        };
        let up = udp::Packet::new_checked(ip_payload)?;
        let udp_repr = UdpRepr::parse(&up)?;
        let is_roce = match port_match {
            PortMatch::Destination(p) => udp_repr.dst_port == p,
            PortMatch::Either(p) => udp_repr.dst_port == p || udp_repr.src_port == p,
        };
        if !is_roce {
            return Err(Error::NotRoce);
        }
        if usize::from(up.len()) != ip_payload.len() {
            return Err(Error::BadLength);
        }
        let ib = IbPacket::parse(up.payload())?;
        let icrc_valid = icrc::verify(ip_header, up.header(), up.payload())?;
        Ok(RocePacket {
            eth,
            ip,
            udp: udp_repr,
            transport: ib.transport,
            payload: ib.payload,
            pad_cnt: ib.pad.len() as u8,
            icrc: ib.icrc,
            icrc_valid,
        })
    }

    /// The header reprs, for re-emitting with [`RoceRepr::emit`].
    pub fn repr(&self) -> RoceRepr {
        RoceRepr {
            eth: self.eth,
            ip: self.ip,
            udp: self.udp,
            transport: self.transport,
        }
    }

    /// Length of this frame as [`RoceRepr::emit`] writes it.
    pub fn frame_len(&self) -> usize {
        self.repr().frame_len(self.payload.len())
    }

    /// Writes this packet again (lengths, pad, IPv4 checksum and ICRC recomputed) and returns the
    /// frame length. See [`RoceRepr::emit`].
    ///
    /// # Errors
    /// As [`RoceRepr::emit`].
    pub fn emit(&self, udp_checksum: UdpChecksum, buf: &mut [u8]) -> Result<usize> {
        self.repr().emit(self.payload, udp_checksum, buf)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::wire::{BthRepr, IcrcContext, Opcode, Psn, RethRepr};
    use core::net::Ipv4Addr;

    fn write_only_repr() -> RoceRepr {
        let mut t = TransportRepr::new(BthRepr {
            opcode: Opcode::RcRdmaWriteOnly,
            solicited: false,
            mig_req: false,
            pad_cnt: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x12,
            ack_req: true,
            psn: Psn::new(100),
        });
        t.reth = Some(RethRepr {
            va: 0x1000,
            rkey: 0x55,
            dma_len: 5,
        });
        RoceRepr {
            eth: EthernetRepr {
                dst: [2, 0, 0, 0, 0, 2],
                src: [2, 0, 0, 0, 0, 1],
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
                protocol: 17,
                payload_len: 0,
            }),
            udp: UdpRepr {
                src_port: 0xc001,
                dst_port: ROCE_V2_PORT,
                payload_len: 0,
                checksum: 0,
            },
            transport: t,
        }
    }

    #[test]
    fn emit_parse() {
        let r = write_only_repr();
        let payload = [1u8, 2, 3, 4, 5];
        let mut buf = [0u8; 128];
        let n = r.emit(&payload, UdpChecksum::Compute, &mut buf).unwrap();
        assert_eq!(n, 14 + 20 + 8 + 12 + 16 + 5 + 3 + 4);
        assert_eq!(n, r.frame_len(5));
        let p = RocePacket::parse(&buf[..n]).unwrap();
        assert!(p.icrc_valid);
        assert_eq!(p.payload, &payload);
        assert_eq!(p.pad_cnt, 3);
        assert_eq!(p.transport.bth.pad_cnt, 3);
        assert_eq!(p.transport.reth, r.transport.reth);
        assert_ne!(p.udp.checksum, 0);
        // Ethernet padding after the IP packet is ignored.
        let q = RocePacket::parse(&buf[..n + 10]).unwrap();
        assert_eq!(q, p);
        // The ICRC as seen by a UDP-socket receiver (ID 0, DF).
        let ctx = IcrcContext::for_udp_socket_v4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            0xc001,
            ROCE_V2_PORT,
        );
        assert!(ctx.verify(&buf[42..n]));
        assert_eq!(ctx.compute(&buf[42..n - 4]), Ok(p.icrc));
    }

    #[test]
    fn emit_errors() {
        let r = write_only_repr();
        let mut buf = [0u8; 128];
        let n = r.frame_len(5);
        assert_eq!(
            r.emit(&[0; 5], UdpChecksum::Zero, &mut buf[..n - 1]),
            Err(Error::Truncated)
        );
        let mut bad = r;
        bad.eth.ethertype = ETHERTYPE_IPV6;
        assert_eq!(
            bad.emit(&[], UdpChecksum::Zero, &mut buf),
            Err(Error::BadField)
        );
        let mut no_reth = r;
        no_reth.transport.reth = None;
        assert_eq!(
            no_reth.emit(&[], UdpChecksum::Zero, &mut buf),
            Err(Error::BadField)
        );
        let big = [0u8; 70_000];
        let mut out = [0u8; 70_100];
        assert_eq!(
            r.emit(&big, UdpChecksum::Zero, &mut out),
            Err(Error::BadLength)
        );
        assert_eq!(buf, [0u8; 128]);
    }

    #[test]
    fn not_roce() {
        let r = write_only_repr();
        let mut buf = [0u8; 128];
        let n = r.emit(&[], UdpChecksum::Zero, &mut buf).unwrap();
        // Other UDP port.
        let mut other = buf;
        other[36] = 0x00;
        other[37] = 0x35;
        assert_eq!(RocePacket::parse(&other[..n]), Err(Error::NotRoce));
        // TCP.
        let mut tcp = buf;
        tcp[23] = 6;
        assert_eq!(RocePacket::parse(&tcp[..n]), Err(Error::NotRoce));
        // ARP.
        let mut arp = buf;
        arp[13] = 0x06;
        assert_eq!(RocePacket::parse(&arp[..n]), Err(Error::NotRoce));
        // Every truncation is a clean error.
        for cut in 0..n {
            assert!(RocePacket::parse(&buf[..cut]).is_err());
        }
    }
}
