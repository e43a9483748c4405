//! The generator's frames checked by decoders that are not rdmesh's: every frame meant to be
//! valid (violation `none`) for IPv4/IPv6, VLAN-tagged, RC/UC/UD targets and all path MTUs
//! dissects in tshark with no malformed or error expert info and the same opcode, DestQP and
//! PSN as rdmesh decodes; its ICRC verifies with an independent zlib check and with scapy
//! (`tests/scripts/icrc_check.py --scapy`). Frames with violations keep a correct ICRC over
//! the bytes they hold, except `bad-icrc` ones, which the checker rejects one by one.

use std::process::Command;
use std::time::Duration;

use rdmesh_core::wire::gen::{generate_violation, Entropy, Target, Violation, MAX_FRAME_LEN};
use rdmesh_core::wire::{RocePacket, Transport, VlanTag};
use rdmesh_host::fuzz::{entropy_for, pcapio};
use rdmesh_tests::{assert_ok, have, need, run_bounded, scratch, workspace_root};

/// As tests/tshark_decode.rs decodes, and with the heuristics for UD payloads (EoIB, IPoIB,
/// FCoIB, SDP) off too.
const TSHARK_DECODE: &[&str] = &[
    "--disable-protocol",
    "infiniband.eoib",
    "--disable-protocol",
    "ipoib",
    "--disable-protocol",
    "fcoib",
    "--disable-protocol",
    "infiniband_sdp",
    "-d",
    "udp.port==4791,infiniband",
    "--disable-protocol",
    "tftp",
    "--disable-protocol",
    "rpcordma",
    "--disable-protocol",
    "iser",
    "--disable-protocol",
    "nvme-rdma",
    "--disable-protocol",
    "smb_direct",
];

fn targets() -> Vec<Target> {
    let mut out = Vec::new();
    for (i, base) in [Target::example_v4(), Target::example_v6()]
        .into_iter()
        .enumerate()
    {
        for svc in [Transport::Rc, Transport::Uc, Transport::Ud] {
            for pmtu in [256, 1024, 4096] {
                let mut t = base;
                t.qp.service = svc;
                t.qp.pmtu = pmtu;
                if i == 0 && pmtu == 1024 {
                    t.eth.vlan = Some(VlanTag {
                        pcp: 3,
                        dei: false,
                        vid: 100,
                    });
                }
                out.push(t);
            }
        }
    }
    out
}

fn frames(violations: &[Violation], per_target: u64) -> Vec<(Violation, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; MAX_FRAME_LEN];
    for (ti, t) in targets().iter().enumerate() {
        for &v in violations {
            if !v.applies_to(t) {
                continue;
            }
            for i in 0..per_target {
                let e = entropy_for(ti as u64, v as u64, i);
                let g = generate_violation(&mut Entropy::new(&e), t, v, &mut buf).unwrap();
                out.push((v, buf[..g.len].to_vec()));
            }
        }
    }
    out
}

fn icrc_check(pcap: &std::path::Path) -> String {
    let mut check = Command::new("python3");
    check
        .arg(workspace_root().join("tests/scripts/icrc_check.py"))
        .arg(pcap)
        .arg("--scapy");
    let out = run_bounded(check, Duration::from_secs(120));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn valid_frames_dissect_cleanly_and_verify_independently() {
    let tshark = need(have("tshark", &["--version"]), "tshark");
    let scapy = need(
        Command::new("python3")
            .args(["-c", "import scapy.contrib.roce"])
            .status()
            .is_ok_and(|s| s.success()),
        "python3 with scapy",
    );
    let dir = scratch("fuzz-gen-valid");
    let fs = frames(&[Violation::None], 12);
    assert!(fs.len() > 150);
    for (_, f) in &fs {
        let p = RocePacket::parse(f).unwrap();
        assert!(p.icrc_valid);
    }
    let pcap = dir.join("valid.pcap");
    pcapio::write(
        &pcap,
        &fs.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>(),
    )
    .unwrap();
    if scapy {
        let out = icrc_check(&pcap);
        assert!(out.contains(&format!("roce={} bad=0", fs.len())), "{out}");
        assert!(!out.contains("scapy_checked=0"), "{out}");
    }
    if !tshark {
        return;
    }
    let mut cmd = Command::new("tshark");
    // The payload is random bytes: keep the upper-layer heuristics (RPC-over-RDMA, iSER,
    // NVMe-oF, SMB Direct) from claiming it, so "malformed" is about the RoCE headers.
    cmd.arg("-r").arg(&pcap).args(TSHARK_DECODE).args([
        "-T",
        "fields",
        "-E",
        "separator=;",
        "-E",
        "occurrence=f",
        "-e",
        "frame.number",
        "-e",
        "infiniband.bth.opcode",
        "-e",
        "infiniband.bth.destqp",
        "-e",
        "infiniband.bth.psn",
        "-e",
        "_ws.malformed",
        "-e",
        "_ws.expert.severity",
    ]);
    let stdout = assert_ok(&run_bounded(cmd, Duration::from_secs(120)), "tshark");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), fs.len());
    for (line, (_, f)) in lines.iter().zip(&fs) {
        let cols: Vec<&str> = line.split(';').collect();
        let p = RocePacket::parse(f).unwrap();
        let num = |s: &str| -> u64 {
            s.strip_prefix("0x")
                .map(|h| u64::from_str_radix(h, 16).unwrap())
                .unwrap_or_else(|| s.parse().unwrap_or_else(|_| panic!("{line}")))
        };
        assert_eq!(
            num(cols[1]),
            u64::from(u8::from(p.transport.bth.opcode)),
            "{line}"
        );
        assert_eq!(num(cols[2]), u64::from(p.transport.bth.dest_qp), "{line}");
        assert_eq!(
            num(cols[3]),
            u64::from(p.transport.bth.psn.value()),
            "{line}"
        );
        assert!(cols[4].is_empty(), "tshark: malformed: {line}");
        // Severity 0x800000 = error (8388608); warnings (e.g. "unknown payload") are allowed.
        assert!(
            cols[5].is_empty() || num(cols[5]) < 0x0080_0000,
            "tshark expert error: {line}"
        );
    }
}

#[test]
fn violations_keep_the_icrc_unless_asked() {
    if !need(
        have("python3", &["--version"]),
        "python3 (tests/scripts/icrc_check.py)",
    ) {
        return;
    }
    let dir = scratch("fuzz-gen-violations");
    // Length-field frames lie about where the ICRC is; everything else verifies over what it
    // holds (checked here by zlib only: scapy's dissector does not follow unknown opcodes).
    let kinds: Vec<Violation> = Violation::ALL
        .into_iter()
        .filter(|v| !matches!(v, Violation::LengthField | Violation::BadIcrc))
        .collect();
    let fs = frames(&kinds, 3);
    let pcap = dir.join("violations.pcap");
    pcapio::write(
        &pcap,
        &fs.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>(),
    )
    .unwrap();
    let mut check = Command::new("python3");
    check
        .arg(workspace_root().join("tests/scripts/icrc_check.py"))
        .arg(&pcap);
    let out = run_bounded(check, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("roce={} bad=0", fs.len())),
        "{stdout}"
    );

    let bad = frames(&[Violation::BadIcrc], 2);
    let pcap = dir.join("bad-icrc.pcap");
    pcapio::write(
        &pcap,
        &bad.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>(),
    )
    .unwrap();
    let mut check = Command::new("python3");
    check
        .arg(workspace_root().join("tests/scripts/icrc_check.py"))
        .arg(&pcap);
    let out = run_bounded(check, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("roce={n} bad={n}", n = bad.len())),
        "{stdout}"
    );
}
