//! Property tests: every header's `Repr` survives emit → parse unchanged; whole RoCEv2 frames
//! (IPv4/IPv6, with/without VLAN) round-trip through `RoceRepr::emit` / `RocePacket::parse`;
//! and the ICRC covers exactly the fields RoCEv2 says it covers.

use core::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use rdmesh_core::wire::{
    aeth, atomic_ack_eth, atomic_eth, bth, cnp, deth, ethernet, icrc, ieth, immdt, ipv4, ipv6,
    reth, udp, AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, CnpRepr, DethRepr, EthernetRepr,
    IbPacket, IcrcContext, IethRepr, ImmDtRepr, IpRepr, Ipv4Repr, Ipv6Repr, Opcode, Psn, RethRepr,
    RocePacket, RoceRepr, Syndrome, TransportRepr, UdpChecksum, UdpRepr, VlanTag,
};

fn opcode_with_headers() -> impl Strategy<Value = Opcode> {
    any::<u8>()
        .prop_map(Opcode::from)
        .prop_filter("opcode with a header set", |o| o.header_set().is_some())
}

prop_compose! {
    fn bth_repr()(opcode in opcode_with_headers(), solicited: bool, mig_req: bool,
                  pad_cnt in 0u8..4, pkey: u16, fecn: bool, becn: bool,
                  dest_qp in 0u32..=0xff_ffff, ack_req: bool, psn in 0u32..=0xff_ffff)
        -> BthRepr {
        BthRepr { opcode, solicited, mig_req, pad_cnt, pkey, fecn, becn, dest_qp, ack_req,
                  psn: Psn::new(psn) }
    }
}

prop_compose! {
    fn reth_repr()(va: u64, rkey: u32, dma_len: u32) -> RethRepr {
        RethRepr { va, rkey, dma_len }
    }
}

prop_compose! {
    fn aeth_repr()(syndrome: u8, msn in 0u32..=0xff_ffff) -> AethRepr {
        AethRepr { syndrome: Syndrome::from(syndrome), msn }
    }
}

prop_compose! {
    fn atomic_eth_repr()(va: u64, rkey: u32, swap_add: u64, compare: u64) -> AtomicEthRepr {
        AtomicEthRepr { va, rkey, swap_add, compare }
    }
}

prop_compose! {
    fn deth_repr()(qkey: u32, src_qp in 0u32..=0xff_ffff) -> DethRepr {
        DethRepr { qkey, src_qp }
    }
}

prop_compose! {
    fn transport_repr()(bth in bth_repr(), deth in deth_repr(), reth in reth_repr(),
                        atomic in atomic_eth_repr(), imm: u32, ieth: u32, aeth in aeth_repr(),
                        atomic_ack: u64) -> TransportRepr {
        let hs = bth.opcode.header_set().unwrap();
        let mut t = TransportRepr::new(bth);
        t.deth = hs.deth.then_some(deth);
        t.reth = hs.reth.then_some(reth);
        t.atomic_eth = hs.atomic_eth.then_some(atomic);
        t.imm = hs.immdt.then_some(imm);
        t.ieth = hs.ieth.then_some(ieth);
        t.aeth = hs.aeth.then_some(aeth);
        t.atomic_ack = hs.atomic_ack_eth.then_some(atomic_ack);
        t
    }
}

prop_compose! {
    fn vlan()(pcp in 0u8..8, dei: bool, vid in 0u16..4096) -> VlanTag {
        VlanTag { pcp, dei, vid }
    }
}

prop_compose! {
    fn eth_repr()(dst: [u8; 6], src: [u8; 6], vlan in proptest::option::of(vlan()),
                  ethertype in any::<u16>().prop_filter("not a tag", |e| *e != 0x8100))
        -> EthernetRepr {
        EthernetRepr { dst, src, vlan, ethertype }
    }
}

prop_compose! {
    fn ipv4_repr()(src: [u8; 4], dst: [u8; 4], dscp in 0u8..64, ecn in 0u8..4, ident: u16,
                   dont_frag: bool, ttl: u8, protocol: u8, payload_len in 0u16..=65515)
        -> Ipv4Repr {
        Ipv4Repr { src: Ipv4Addr::from(src), dst: Ipv4Addr::from(dst), dscp, ecn, ident,
                   dont_frag, ttl, protocol, payload_len }
    }
}

prop_compose! {
    fn ipv6_repr()(src: [u8; 16], dst: [u8; 16], traffic_class: u8,
                   flow_label in 0u32..=0xf_ffff, hop_limit: u8, next_header: u8,
                   payload_len: u16) -> Ipv6Repr {
        Ipv6Repr { src: Ipv6Addr::from(src), dst: Ipv6Addr::from(dst), traffic_class,
                   flow_label, hop_limit, next_header, payload_len }
    }
}

prop_compose! {
    fn udp_repr()(src_port: u16, dst_port: u16, payload_len in 0u16..=65527, checksum: u16)
        -> UdpRepr {
        UdpRepr { src_port, dst_port, payload_len, checksum }
    }
}

/// A RoCEv2 frame description: IPv4 or IPv6, optional VLAN, any transport, payload fitting
/// the opcode.
fn roce_case() -> impl Strategy<Value = (RoceRepr, Vec<u8>)> {
    (
        eth_repr(),
        prop_oneof![
            ipv4_repr().prop_map(IpRepr::V4),
            ipv6_repr().prop_map(IpRepr::V6)
        ],
        udp_repr(),
        transport_repr(),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(mut eth, mut ip, mut udp, transport, mut payload)| {
            match &mut ip {
                IpRepr::V4(r) => {
                    r.protocol = 17;
                    eth.ethertype = ethernet::ETHERTYPE_IPV4;
                }
                IpRepr::V6(r) => {
                    r.next_header = 17;
                    eth.ethertype = ethernet::ETHERTYPE_IPV6;
                }
            }
            udp.dst_port = udp::ROCE_V2_PORT;
            if !transport.bth.opcode.header_set().unwrap().payload {
                payload.clear();
            }
            (
                RoceRepr {
                    eth,
                    ip,
                    udp,
                    transport,
                },
                payload,
            )
        })
}

fn emit_frame(r: &RoceRepr, payload: &[u8], csum: UdpChecksum) -> Vec<u8> {
    let mut buf = vec![0u8; r.frame_len(payload.len())];
    let n = r.emit(payload, csum, &mut buf).unwrap();
    assert_eq!(n, buf.len());
    buf
}

/// Offsets of the IP header, UDP header and BTH in an emitted frame.
fn offsets(r: &RoceRepr) -> (usize, usize, usize) {
    let ip = r.eth.buffer_len();
    let udp = ip + r.ip.header_len();
    (ip, udp, udp + 8)
}

proptest! {
    #[test]
    fn bth_roundtrip(r in bth_repr()) {
        let mut b = [0u8; bth::HEADER_LEN];
        r.emit(&mut bth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(BthRepr::parse(&bth::Packet::new_checked(&b[..]).unwrap()), Ok(r));
    }

    #[test]
    fn reth_roundtrip(r in reth_repr()) {
        let mut b = [0u8; reth::HEADER_LEN];
        r.emit(&mut reth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(RethRepr::parse(&reth::Packet::new_checked(&b[..]).unwrap()), Ok(r));
    }

    #[test]
    fn aeth_roundtrip(r in aeth_repr()) {
        let mut b = [0u8; aeth::HEADER_LEN];
        r.emit(&mut aeth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(AethRepr::parse(&aeth::Packet::new_checked(&b[..]).unwrap()), Ok(r));
    }

    #[test]
    fn small_headers_roundtrip(imm: u32, rkey: u32, orig: u64, a in atomic_eth_repr(),
                               d in deth_repr(), qp in 0u32..=0xff_ffff, pkey: u16) {
        let mut b = [0u8; 28];
        let i = ImmDtRepr { imm };
        i.emit(&mut immdt::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(ImmDtRepr::parse(&immdt::Packet::new_checked(&b[..]).unwrap()), Ok(i));
        let e = IethRepr { rkey };
        e.emit(&mut ieth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(IethRepr::parse(&ieth::Packet::new_checked(&b[..]).unwrap()), Ok(e));
        let o = AtomicAckEthRepr { orig_data: orig };
        o.emit(&mut atomic_ack_eth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(
            AtomicAckEthRepr::parse(&atomic_ack_eth::Packet::new_checked(&b[..]).unwrap()),
            Ok(o)
        );
        a.emit(&mut atomic_eth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(
            AtomicEthRepr::parse(&atomic_eth::Packet::new_checked(&b[..]).unwrap()),
            Ok(a)
        );
        d.emit(&mut deth::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(DethRepr::parse(&deth::Packet::new_checked(&b[..]).unwrap()), Ok(d));
        let c = CnpRepr { dest_qp: qp, pkey };
        c.emit(&mut cnp::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(CnpRepr::parse(&cnp::Packet::new_checked(&b[..]).unwrap()), Ok(c));
    }

    #[test]
    fn ethernet_roundtrip(r in eth_repr()) {
        let mut b = [0u8; ethernet::TAGGED_HEADER_LEN];
        r.emit(&mut ethernet::Packet::new_unchecked(&mut b[..]));
        let p = ethernet::Packet::new_checked(&b[..r.buffer_len()]).unwrap();
        prop_assert_eq!(EthernetRepr::parse(&p), Ok(r));
    }

    #[test]
    fn ipv4_roundtrip(r in ipv4_repr()) {
        let mut b = vec![0u8; ipv4::HEADER_LEN + usize::from(r.payload_len)];
        r.emit(&mut ipv4::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(Ipv4Repr::parse(&ipv4::Packet::new_checked(&b[..]).unwrap()), Ok(r));
    }

    #[test]
    fn ipv6_roundtrip(r in ipv6_repr()) {
        let mut b = vec![0u8; ipv6::HEADER_LEN + usize::from(r.payload_len)];
        r.emit(&mut ipv6::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(Ipv6Repr::parse(&ipv6::Packet::new_checked(&b[..]).unwrap()), Ok(r));
    }

    #[test]
    fn udp_roundtrip(r in udp_repr()) {
        let mut b = vec![0u8; udp::HEADER_LEN + usize::from(r.payload_len)];
        r.emit(&mut udp::Packet::new_unchecked(&mut b[..]));
        prop_assert_eq!(UdpRepr::parse(&udp::Packet::new_checked(&b[..]).unwrap()), Ok(r));
    }

    #[test]
    fn transport_roundtrip(t in transport_repr(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut b = [0u8; 64];
        let n = t.emit(&mut b).unwrap();
        prop_assert_eq!(n, t.header_len());
        prop_assert_eq!(TransportRepr::parse(&b[..n]), Ok((t, n)));
        // And inside a UDP payload, with pad and an ICRC trailer.
        let payload = if t.bth.opcode.header_set().unwrap().payload { payload } else { vec![] };
        let mut u = vec![0u8; IbPacket::buffer_len(&t, payload.len())];
        let m = IbPacket::emit(&t, &payload, &mut u).unwrap();
        prop_assert_eq!(m + 4, u.len());
        let p = IbPacket::parse(&u).unwrap();
        prop_assert_eq!(p.payload, &payload[..]);
        prop_assert_eq!(usize::from(p.transport.bth.pad_cnt), p.pad.len());
        prop_assert_eq!((payload.len() + p.pad.len()) % 4, 0);
        let mut expect = t;
        expect.bth.pad_cnt = p.pad.len() as u8;
        prop_assert_eq!(p.transport, expect);
    }

    #[test]
    fn roce_frame_roundtrip((r, payload) in roce_case(),
                            csum in prop_oneof![Just(UdpChecksum::Zero), Just(UdpChecksum::Compute)]) {
        let f = emit_frame(&r, &payload, csum);
        let p = RocePacket::parse(&f).unwrap();
        prop_assert!(p.icrc_valid);
        prop_assert_eq!(p.eth, r.eth);
        prop_assert_eq!(p.payload, &payload[..]);
        let mut t = r.transport;
        t.bth.pad_cnt = p.pad_cnt;
        prop_assert_eq!(p.transport, t);
        prop_assert_eq!(p.udp.src_port, r.udp.src_port);
        let mut ip = r.ip;
        ip.set_payload_len(p.ip.payload_len());
        prop_assert_eq!(p.ip, ip);
        let (_, udp_at, _) = offsets(&r);
        let up = udp::Packet::new_checked(&f[udp_at..]).unwrap();
        match csum {
            UdpChecksum::Zero => prop_assert_eq!(p.udp.checksum, 0),
            _ => prop_assert!(p.udp.checksum != 0 && up.verify_checksum(&p.ip)),
        }
        // Re-emitting the parse result gives the same bytes.
        prop_assert_eq!(emit_frame(&p.repr(), p.payload, UdpChecksum::AsGiven), f.clone());
        // A UDP-socket receiver computes the same ICRC from addresses and ports, provided the
        // sender used what Linux uses for unconnected DF sockets (IPv4 ID 0, DF).
        let ctx = match p.ip {
            IpRepr::V4(v4) => IcrcContext::for_udp_socket_v4(v4.src, v4.dst, p.udp.src_port, p.udp.dst_port),
            IpRepr::V6(v6) => IcrcContext::for_udp_socket_v6(v6.src, v6.dst, p.udp.src_port, p.udp.dst_port),
        };
        let udp_payload = up.payload();
        let socket_like = match p.ip {
            IpRepr::V4(v4) => v4.ident == 0 && v4.dont_frag,
            IpRepr::V6(_) => true,
        };
        prop_assert_eq!(ctx.verify(udp_payload), socket_like);
    }

    #[test]
    fn icrc_detects_unmasked_flips((r, payload) in roce_case(), pick: prop::sample::Index, bit in 0u8..8) {
        let f = emit_frame(&r, &payload, UdpChecksum::Zero);
        let (ip_at, udp_at, bth_at) = offsets(&r);
        // Positions the ICRC covers without masking.
        let masked: Vec<usize> = match r.ip {
            IpRepr::V4(_) => vec![ip_at + 1, ip_at + 8, ip_at + 10, ip_at + 11],
            IpRepr::V6(_) => vec![ip_at + 1, ip_at + 2, ip_at + 3, ip_at + 7],
        };
        let covered: Vec<usize> = (ip_at..f.len() - 4)
            .filter(|i| !masked.contains(i) && *i != udp_at + 6 && *i != udp_at + 7 && *i != bth_at + 4)
            .collect();
        let at = covered[pick.index(covered.len())];
        let mask = if r.ip.header_len() == 40 && at == ip_at {
            // Byte 0 of IPv6: only the version nibble is covered.
            0x10 << (bit % 4)
        } else {
            1 << bit
        };
        let mut g = f.clone();
        g[at] ^= mask;
        // Either the headers no longer locate (a length/version/protocol bit) or the ICRC fails.
        prop_assert_ne!(icrc::verify_frame(&g), Ok(true), "flip at {} mask {:#x}", at, mask);
        // The raw-slices API, which does not walk length fields, must fail too.
        let raw = icrc::verify(&g[ip_at..udp_at], &g[udp_at..bth_at], &g[bth_at..]);
        prop_assert_ne!(raw, Ok(true));
    }

    #[test]
    fn icrc_ignores_masked_fields((r, payload) in roce_case(), x: u8, y: u8) {
        let f = emit_frame(&r, &payload, UdpChecksum::Zero);
        let (ip_at, udp_at, bth_at) = offsets(&r);
        let mut g = f.clone();
        match r.ip {
            IpRepr::V4(_) => {
                g[ip_at + 1] ^= x; // TOS
                g[ip_at + 8] ^= y; // TTL
                g[ip_at + 10] ^= x; // header checksum
                g[ip_at + 11] ^= y;
            }
            IpRepr::V6(_) => {
                g[ip_at] ^= x & 0x0f; // traffic class high nibble
                g[ip_at + 1] ^= x; // traffic class low nibble + flow label
                g[ip_at + 2] ^= y;
                g[ip_at + 3] ^= x;
                g[ip_at + 7] ^= y; // hop limit
            }
        }
        g[udp_at + 6] ^= x; // UDP checksum
        g[udp_at + 7] ^= y;
        g[bth_at + 4] ^= x; // FECN, BECN, resv6
        prop_assert_eq!(icrc::verify_frame(&g), Ok(true));
        // ECN/CE marking by a switch keeps the packet parseable and valid over IPv6 (no header
        // checksum there); over IPv4 only the IP checksum would need fixing.
        if let IpRepr::V6(_) = r.ip {
            let p = RocePacket::parse(&g).unwrap();
            prop_assert!(p.icrc_valid);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = RocePacket::parse(&bytes);
        let _ = icrc::verify_frame(&bytes);
        let _ = IbPacket::parse(&bytes);
        let _ = TransportRepr::parse(&bytes);
    }
}
