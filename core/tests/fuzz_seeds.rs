//! The fuzz seed corpus under `fuzz/seeds/` is derived from the fixture capture and the
//! rocev2.md §2.2 test vectors. This test rebuilds it and checks the checked-in files match;
//! run with `RDMESH_WRITE_SEEDS=1` to (re)write them.
//!
//! - `fuzz/seeds/roce_frame/`: every frame of tests/fixtures/roce-rc-send.pcap (RoCE and not)
//!   and the three test vectors, as whole Ethernet frames.
//! - `fuzz/seeds/header_roundtrip/`: for the test vectors and the first frame of each opcode in
//!   the capture, the bytes from each header boundary on (Ethernet, IP, UDP, BTH, first extended
//!   header), so each header parser sees a real header at offset 0.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::{hex, read_pcap, FIXTURE_PCAP, TV1, TV2, TV3};
use rdmesh_core::wire::{bth, RocePacket};

fn seeds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds")
}

fn expected() -> BTreeMap<String, Vec<u8>> {
    let frames = read_pcap(&std::fs::read(FIXTURE_PCAP).unwrap());
    let tvs = [
        ("tv1-uc-send-only", hex(TV1)),
        ("tv2-cnp", hex(TV2)),
        ("tv3-rdma-read-request", hex(TV3)),
    ];
    let mut out = BTreeMap::new();
    for (i, f) in frames.iter().enumerate() {
        out.insert(format!("roce_frame/pcap-frame-{:03}.bin", i + 1), f.clone());
    }
    for (name, f) in &tvs {
        out.insert(format!("roce_frame/{name}.bin"), f.clone());
    }
    // Header-boundary slices of one frame per distinct opcode.
    let mut picked: Vec<(String, Vec<u8>)> = tvs
        .iter()
        .map(|(n, f)| (n.to_string(), f.clone()))
        .collect();
    let mut seen = BTreeSet::new();
    for (i, f) in frames.iter().enumerate() {
        if let Ok(p) = RocePacket::parse(f) {
            if seen.insert(u8::from(p.transport.bth.opcode)) {
                picked.push((format!("pcap-frame-{:03}", i + 1), f.clone()));
            }
        }
    }
    for (name, f) in picked {
        let p = RocePacket::parse(&f).unwrap();
        let ip_at = p.eth.buffer_len();
        let udp_at = ip_at + p.ip.header_len();
        let bth_at = udp_at + 8;
        let ext_at = bth_at + bth::HEADER_LEN;
        let end = bth_at + usize::from(p.udp.payload_len);
        let mut cuts = vec![("eth", 0), ("ip", ip_at), ("udp", udp_at), ("bth", bth_at)];
        if p.transport.header_len() > bth::HEADER_LEN {
            cuts.push(("ext", ext_at));
        }
        for (what, at) in cuts {
            out.insert(
                format!("header_roundtrip/{name}-{what}.bin"),
                f[at..end].to_vec(),
            );
        }
    }
    out
}

#[test]
fn seed_corpus_is_current() {
    let dir = seeds_dir();
    let want = expected();
    if std::env::var_os("RDMESH_WRITE_SEEDS").is_some() {
        for target in ["roce_frame", "header_roundtrip"] {
            let d = dir.join(target);
            if d.exists() {
                std::fs::remove_dir_all(&d).unwrap();
            }
            std::fs::create_dir_all(&d).unwrap();
        }
        for (name, bytes) in &want {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let mut have = BTreeMap::new();
    for target in ["roce_frame", "header_roundtrip"] {
        let d = dir.join(target);
        let entries = std::fs::read_dir(&d)
            .unwrap_or_else(|e| panic!("{}: {e}; run with RDMESH_WRITE_SEEDS=1", d.display()));
        for e in entries {
            let e = e.unwrap();
            let name = format!("{target}/{}", e.file_name().to_string_lossy());
            have.insert(name, std::fs::read(e.path()).unwrap());
        }
    }
    assert_eq!(
        have.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "seed file names differ; rerun with RDMESH_WRITE_SEEDS=1"
    );
    for (name, bytes) in &want {
        assert_eq!(
            &have[name], bytes,
            "{name} is stale; rerun with RDMESH_WRITE_SEEDS=1"
        );
    }
}
