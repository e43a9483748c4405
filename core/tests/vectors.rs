//! The three full-frame test vectors of rocev2.md §2.2 (ICRCs recomputed there with Python
//! zlib.crc32): every field parsed, the ICRC recomputed and matched to the wire bytes, and the
//! frame re-emitted byte for byte.

mod common;

use common::{hex, TV1, TV2, TV3};
use core::net::Ipv4Addr;
use rdmesh_core::wire::{
    icrc, BthRepr, CnpRepr, EthernetRepr, IpRepr, Ipv4Repr, Opcode, Psn, RethRepr, RocePacket,
    TransportRepr, UdpChecksum, UdpRepr,
};

fn reemit(p: &RocePacket, csum: UdpChecksum) -> Vec<u8> {
    let mut buf = vec![0u8; p.frame_len()];
    let n = p.emit(csum, &mut buf).unwrap();
    assert_eq!(n, buf.len());
    buf
}

#[test]
fn tv1_uc_send_only() {
    let f = hex(TV1);
    let p = RocePacket::parse(&f).unwrap();
    assert_eq!(
        p.eth,
        EthernetRepr {
            dst: [0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22],
            src: [0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22],
            vlan: None,
            ethertype: 0x0800,
        }
    );
    assert_eq!(
        p.ip,
        IpRepr::V4(Ipv4Repr {
            src: Ipv4Addr::new(192, 168, 0, 7),
            dst: Ipv4Addr::new(192, 168, 0, 7),
            dscp: 0,
            ecn: 1,
            ident: 0x0478,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 44,
        })
    );
    assert_eq!(
        p.udp,
        UdpRepr {
            src_port: 0xc000,
            dst_port: 4791,
            payload_len: 36,
            checksum: 0xaca2,
        }
    );
    assert_eq!(
        p.transport,
        TransportRepr::new(BthRepr {
            opcode: Opcode::UcSendOnly,
            solicited: false,
            mig_req: true,
            pad_cnt: 2,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 211,
            ack_req: false,
            psn: Psn::new(13_571_856),
        })
    );
    assert_eq!(p.payload, &f[54..72]);
    assert_eq!(p.payload.len(), 18);
    assert_eq!(p.pad_cnt, 2);
    assert_eq!(icrc::to_wire(p.icrc), [0x78, 0xf3, 0x53, 0xf3]);
    assert!(p.icrc_valid);
    assert_eq!(icrc::compute_frame(&f), Ok(p.icrc));
    // The UDP checksum is a real one: both keeping and recomputing it reproduce the frame.
    assert_eq!(reemit(&p, UdpChecksum::AsGiven), f);
    assert_eq!(reemit(&p, UdpChecksum::Compute), f);
    // With a zero UDP checksum only bytes 40-41 change and the ICRC (which masks it) stays.
    let z = reemit(&p, UdpChecksum::Zero);
    assert_eq!(&z[40..42], &[0, 0]);
    assert_eq!(&z[..40], &f[..40]);
    assert_eq!(&z[42..], &f[42..]);
}

#[test]
fn tv2_cnp() {
    let f = hex(TV2);
    let p = RocePacket::parse(&f).unwrap();
    assert_eq!(p.eth.dst, [0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2]);
    assert_eq!(p.eth.src, [0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32]);
    assert_eq!(p.eth.vlan, None);
    let IpRepr::V4(ip) = p.ip else {
        panic!("IPv4 expected")
    };
    assert_eq!(ip.src, Ipv4Addr::new(10, 0, 17, 1));
    assert_eq!(ip.dst, Ipv4Addr::new(10, 0, 18, 1));
    assert_eq!((ip.dscp, ip.ecn), (48, 2));
    assert_eq!(ip.ident, 0x718c);
    assert!(ip.dont_frag);
    assert_eq!(ip.ttl, 64);
    assert_eq!(ip.payload_len, 40);
    assert_eq!(
        p.udp,
        UdpRepr {
            src_port: 0,
            dst_port: 4791,
            payload_len: 32,
            checksum: 0
        }
    );
    let b = p.transport.bth;
    assert_eq!(b.opcode, Opcode::Cnp);
    assert!(b.becn && !b.fecn && !b.ack_req && !b.solicited && !b.mig_req);
    assert_eq!(
        (b.pkey, b.dest_qp, b.psn, b.pad_cnt),
        (0xffff, 0x118, Psn::new(0), 0)
    );
    assert_eq!(CnpRepr::from_bth(&b), Ok(CnpRepr::new(0x118)));
    assert_eq!(p.transport, CnpRepr::new(0x118).to_transport());
    assert!(p.payload.is_empty());
    assert_eq!(icrc::to_wire(p.icrc), [0x82, 0xfd, 0x00, 0x2a]);
    assert!(p.icrc_valid);
    assert_eq!(reemit(&p, UdpChecksum::Zero), f);
    assert_eq!(reemit(&p, UdpChecksum::AsGiven), f);
}

#[test]
fn tv3_read_request() {
    let f = hex(TV3);
    let p = RocePacket::parse(&f).unwrap();
    assert_eq!(p.eth.dst, [0x00, 0x0c, 0x29, 0xae, 0x1c, 0xa4]);
    assert_eq!(p.eth.src, [0x00, 0x0c, 0x29, 0x89, 0xa2, 0xe5]);
    assert_eq!(
        p.ip,
        IpRepr::V4(Ipv4Repr {
            src: Ipv4Addr::new(192, 168, 56, 129),
            dst: Ipv4Addr::new(192, 168, 56, 131),
            dscp: 0,
            ecn: 0,
            ident: 0xbe10,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 40,
        })
    );
    assert_eq!(
        p.udp,
        UdpRepr {
            src_port: 57236,
            dst_port: 4791,
            payload_len: 32,
            checksum: 0
        }
    );
    let mut t = TransportRepr::new(BthRepr {
        opcode: Opcode::RcRdmaReadRequest,
        solicited: false,
        mig_req: false,
        pad_cnt: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 0x11,
        ack_req: true,
        psn: Psn::new(5_557_091),
    });
    t.reth = Some(RethRepr {
        va: 0x7fee_260f_b000,
        rkey: 0x2b8,
        dma_len: 65536,
    });
    assert_eq!(p.transport, t);
    assert!(p.payload.is_empty());
    assert_eq!(icrc::to_wire(p.icrc), [0x08, 0xc6, 0x15, 0x4a]);
    assert!(p.icrc_valid);
    assert_eq!(reemit(&p, UdpChecksum::Zero), f);
}

#[test]
fn vectors_with_a_flipped_icrc_bit_are_invalid() {
    for tv in [TV1, TV2, TV3] {
        let mut f = hex(tv);
        let n = f.len();
        f[n - 2] ^= 0x04;
        let p = RocePacket::parse(&f).unwrap();
        assert!(!p.icrc_valid);
        assert_eq!(icrc::verify_frame(&f), Ok(false));
    }
}
