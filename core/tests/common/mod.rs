//! Helpers shared by the integration tests: the rocev2.md §2.2 test vectors and a tiny pcap
//! reader.
#![allow(dead_code)]

/// Decodes a hex string (no separators).
pub fn hex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// TV1 — scapy `test/contrib/roce.uts` "RoCE layer": UC SEND_ONLY 0x24, M=1, PadCnt=2, QPN 211,
/// PSN 13571856, 18-byte payload + 2 pad, non-zero UDP checksum 0xACA2, ICRC wire `78 f3 53 f3`.
pub const TV1: &str = concat!(
    "248a07a8fa22248a07a8fa22080045010040047840004011b4d5c0a80007c0a80007c00012b7002caca2",
    "2460ffff000000d300cf17104630818be28935d90e9a95505401be885e50000078f353f3"
);

/// TV2 — ConnectX-4 Lx CNP (scapy `roce.uts`), ICRC wire `82 fd 00 2a`.
pub const TV2: &str = concat!(
    "e41d2dab2bc27cfe90643b32080045c2003c718c4000401191610a0011010a001201000012b700280000",
    "8100ffff40000118000000000000000000000000000000000000000082fd002a"
);

/// TV3 — Soft-RoCE RC RDMA_READ_REQUEST (PcapPlusPlus `InfiniBandTests.cpp` buffer1),
/// ICRC wire `08 c6 15 4a`.
pub const TV3: &str = concat!(
    "000c29ae1ca4000c2989a2e508004500003cbe10400040118a4bc0a83881c0a83883df9412b700280000",
    "0c00ffff000000118054cb6300007fee260fb000000002b80001000008c6154a"
);

/// Path of the capture copied from the project's shared fixtures (see tests/fixtures/README.md).
pub const FIXTURE_PCAP: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/roce-rc-send.pcap"
);

/// Reads a classic pcap file (24-byte global header, 16-byte record headers; either byte order,
/// microsecond or nanosecond magic) and returns each record's captured bytes.
pub fn read_pcap(bytes: &[u8]) -> Vec<Vec<u8>> {
    assert!(bytes.len() >= 24, "pcap shorter than its global header");
    let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        m => panic!("not a pcap file (magic {m:#x})"),
    };
    let rd = |b: &[u8]| {
        let a: [u8; 4] = b.try_into().unwrap();
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let linktype = rd(&bytes[20..24]);
    assert_eq!(linktype, 1, "expected LINKTYPE_ETHERNET");
    let mut out = Vec::new();
    let mut off = 24;
    while off < bytes.len() {
        assert!(off + 16 <= bytes.len(), "truncated record header");
        let incl = rd(&bytes[off + 8..off + 12]) as usize;
        off += 16;
        assert!(off + incl <= bytes.len(), "truncated record");
        out.push(bytes[off..off + incl].to_vec());
        off += incl;
    }
    out
}
