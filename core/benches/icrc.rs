//! Cost of receiving a 4 KiB RDMA WRITE: full-stack parse + ICRC verification of one frame
//! (`RocePacket::parse`), and the soft provider's path (`IcrcContext::verify` over the UDP
//! payload), against the reference: a plain `crc32fast::hash` over the same frame bytes in the
//! same run. The ratio shows what masking, header walking and incremental feeding cost on top of
//! the CRC itself.
//!
//! Run: `cargo bench -p rdmesh-core --features std --bench icrc` (with `std`, crc32fast uses its
//! PCLMULQDQ path; without it, the table-driven fallback). After criterion's report, a final
//! line prints ns/packet for each and the ratios, measured with `std::time::Instant` over the
//! same inputs.

use std::hint::black_box;
use std::time::Instant;

use core::net::Ipv4Addr;
use criterion::{criterion_group, Criterion, Throughput};
use rdmesh_core::wire::{
    BthRepr, EthernetRepr, IcrcContext, IpRepr, Ipv4Repr, Opcode, Psn, RethRepr, RocePacket,
    RoceRepr, TransportRepr, UdpChecksum, UdpRepr,
};

const PAYLOAD_LEN: usize = 4096;

/// A full Ethernet frame: RC RDMA WRITE ONLY (BTH + RETH) with 4096 payload bytes, IPv4,
/// ICRC valid; plus the offset of its UDP payload.
fn write_frame() -> (Vec<u8>, usize) {
    let mut t = TransportRepr::new(BthRepr {
        opcode: Opcode::RcRdmaWriteOnly,
        solicited: false,
        mig_req: false,
        pad_cnt: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 0x1234,
        ack_req: true,
        psn: Psn::new(1000),
    });
    t.reth = Some(RethRepr {
        va: 0x7f00_0000_0000,
        rkey: 0x55aa,
        dma_len: PAYLOAD_LEN as u32,
    });
    let r = RoceRepr {
        eth: EthernetRepr {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            vlan: None,
            ethertype: 0x0800,
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
            dst_port: 4791,
            payload_len: 0,
            checksum: 0,
        },
        transport: t,
    };
    let payload: Vec<u8> = (0..PAYLOAD_LEN).map(|i| (i * 31 + 7) as u8).collect();
    let mut frame = vec![0u8; r.frame_len(PAYLOAD_LEN)];
    r.emit(&payload, UdpChecksum::Zero, &mut frame).unwrap();
    (frame, 14 + 20 + 8)
}

fn ctx() -> IcrcContext {
    IcrcContext::for_udp_socket_v4(
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        0xc001,
        4791,
    )
}

fn parse_verify(frame: &[u8]) -> usize {
    let p = RocePacket::parse(frame).unwrap();
    assert!(p.icrc_valid);
    p.payload.len()
}

fn bench(c: &mut Criterion) {
    let (frame, udp_at) = write_frame();
    let ctx = ctx();
    assert!(ctx.verify(&frame[udp_at..]));
    let mut g = c.benchmark_group("rdma_write_4k");
    g.throughput(Throughput::Bytes(frame.len() as u64));
    g.bench_function("roce_packet_parse_and_icrc_verify", |b| {
        b.iter(|| parse_verify(black_box(&frame)))
    });
    g.bench_function("icrc_context_verify_udp_payload", |b| {
        b.iter(|| ctx.verify(black_box(&frame[udp_at..])))
    });
    g.bench_function("reference_crc32fast_hash_same_bytes", |b| {
        b.iter(|| crc32fast::hash(black_box(&frame)))
    });
    g.finish();
}

criterion_group!(benches, bench);

/// Best-of-7 mean ns per call of `f` over `iters` calls.
fn ns_per_call(iters: u32, mut f: impl FnMut() -> usize) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..7 {
        let t = Instant::now();
        let mut acc = 0usize;
        for _ in 0..iters {
            acc = acc.wrapping_add(f());
        }
        black_box(acc);
        best = best.min(t.elapsed().as_nanos() as f64 / f64::from(iters));
    }
    best
}

fn ratio_report() {
    let (frame, udp_at) = write_frame();
    let ctx = ctx();
    let iters = 20_000;
    let parse = ns_per_call(iters, || parse_verify(black_box(&frame)));
    let sock = ns_per_call(iters, || ctx.verify(black_box(&frame[udp_at..])) as usize);
    let reference = ns_per_call(iters, || crc32fast::hash(black_box(&frame)) as usize);
    println!(
        "rdma_write_4k ({} B frame, crc32fast {}): RocePacket::parse+ICRC {:.1} ns/packet, \
         IcrcContext::verify {:.1} ns/packet, reference crc32fast::hash {:.1} ns/packet; \
         ratio parse/reference {:.2}x, context/reference {:.2}x",
        frame.len(),
        if cfg!(feature = "std") {
            "std (runtime SIMD detection)"
        } else {
            "no_std fallback"
        },
        parse,
        sock,
        reference,
        parse / reference,
        sock / reference
    );
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // Only when really benchmarking (cargo bench passes --bench), not in `cargo test` runs.
    if std::env::args().any(|a| a == "--bench") {
        ratio_report();
    }
}
