//! Independent oracles for the ICRC: frames emitted by rdmesh are handed to Python, which
//! recomputes the ICRC (a) with its own masking code and `zlib.crc32`, and (b) with scapy's
//! `contrib.roce` layer when scapy is installed. Skips with a printed message when python3 (or
//! scapy for (b)) is absent.

use std::io::Write;
use std::process::{Command, Stdio};

use core::net::{Ipv4Addr, Ipv6Addr};
use rdmesh_core::wire::{
    AethRepr, BthRepr, CnpRepr, DethRepr, EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, Opcode, Psn,
    RethRepr, RoceRepr, Syndrome, TransportRepr, UdpChecksum, UdpRepr, VlanTag,
};

/// Reads frames as hex lines on stdin; prints each frame's ICRC wire bytes as hex, computed from
/// scratch: 8×0xFF, masked IPv4/IPv6 header, masked UDP header, BTH with byte 4 = 0xFF, rest.
const ZLIB_ORACLE: &str = r#"
import sys, zlib
for line in sys.stdin:
    f = bytearray.fromhex(line.strip())
    off = 14
    if f[12:14] == b'\x81\x00':
        off = 18
    et = f[off-2:off]
    if et == b'\x08\x00':
        ihl = (f[off] & 15) * 4
        tot = int.from_bytes(f[off+2:off+4], 'big')
        ip = bytearray(f[off:off+ihl]); ip[1] = 0xff; ip[8] = 0xff; ip[10] = 0xff; ip[11] = 0xff
        end = off + tot
    elif et == b'\x86\xdd':
        ihl = 40
        ip = bytearray(f[off:off+40]); ip[0] |= 0x0f; ip[1] = ip[2] = ip[3] = 0xff; ip[7] = 0xff
        end = off + 40 + int.from_bytes(f[off+4:off+6], 'big')
    else:
        raise SystemExit('not IP')
    u = off + ihl
    udp = bytearray(f[u:u+8]); udp[6] = 0xff; udp[7] = 0xff
    ib = bytearray(f[u+8:end-4]); ib[4] = 0xff
    crc = zlib.crc32(b'\xff' * 8 + bytes(ip) + bytes(udp) + bytes(ib)) & 0xffffffff
    print(crc.to_bytes(4, 'little').hex())
"#;

/// Same contract using scapy: parse the frame, drop the ICRC field, rebuild, print the new ICRC.
const SCAPY_ORACLE: &str = r#"
import sys
from scapy.all import Ether, raw
from scapy.contrib.roce import BTH
for line in sys.stdin:
    p = Ether(bytes.fromhex(line.strip()))
    del p[BTH].icrc
    print(raw(p)[-4:].hex())
"#;

fn bth(opcode: Opcode, dest_qp: u32, psn: u32) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_cnt: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp,
        ack_req: true,
        psn: Psn::new(psn),
    }
}

fn eth(vlan: Option<VlanTag>, ethertype: u16) -> EthernetRepr {
    EthernetRepr {
        dst: [0x02, 0, 0, 0, 0, 0x02],
        src: [0x02, 0, 0, 0, 0, 0x01],
        vlan,
        ethertype,
    }
}

fn v4(ident: u16, ecn: u8) -> IpRepr {
    IpRepr::V4(Ipv4Repr {
        src: Ipv4Addr::new(192, 168, 10, 1),
        dst: Ipv4Addr::new(192, 168, 10, 2),
        dscp: 26,
        ecn,
        ident,
        dont_frag: true,
        ttl: 64,
        protocol: 17,
        payload_len: 0,
    })
}

fn v6(tc: u8, flow_label: u32) -> IpRepr {
    IpRepr::V6(Ipv6Repr {
        src: "fe80::2:1".parse::<Ipv6Addr>().unwrap(),
        dst: "2001:db8::7".parse::<Ipv6Addr>().unwrap(),
        traffic_class: tc,
        flow_label,
        hop_limit: 1,
        next_header: 17,
        payload_len: 0,
    })
}

fn udp(src_port: u16) -> UdpRepr {
    UdpRepr {
        src_port,
        dst_port: 4791,
        payload_len: 0,
        checksum: 0,
    }
}

/// A handful of emitted frames covering IPv4/IPv6, VLAN, pad 0..3, several header sets and both
/// UDP checksum modes.
fn frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut push = |r: RoceRepr, payload: &[u8], c: UdpChecksum| {
        let mut buf = vec![0u8; r.frame_len(payload.len())];
        r.emit(payload, c, &mut buf).unwrap();
        out.push(buf);
    };
    let mut w = TransportRepr::new(bth(Opcode::RcRdmaWriteOnly, 0x12, 7));
    w.reth = Some(RethRepr {
        va: 0x7f00_dead_b000,
        rkey: 0x1234,
        dma_len: 5,
    });
    push(
        RoceRepr {
            eth: eth(None, 0x0800),
            ip: v4(0, 2),
            udp: udp(0xc123),
            transport: w,
        },
        b"hello",
        UdpChecksum::Zero,
    );
    let payload: Vec<u8> = (0..1001u32).map(|i| (i * 7) as u8).collect();
    push(
        RoceRepr {
            eth: eth(
                Some(VlanTag {
                    pcp: 3,
                    dei: false,
                    vid: 42,
                }),
                0x86dd,
            ),
            ip: v6(0x6a, 0x12345),
            udp: udp(0xd000),
            transport: TransportRepr::new(bth(Opcode::RcSendOnly, 0x345, 0xff_fffe)),
        },
        &payload,
        UdpChecksum::Compute,
    );
    push(
        RoceRepr {
            eth: eth(
                Some(VlanTag {
                    pcp: 6,
                    dei: false,
                    vid: 7,
                }),
                0x0800,
            ),
            ip: v4(0x4321, 2),
            udp: udp(0),
            transport: CnpRepr::new(0x118).to_transport(),
        },
        &[],
        UdpChecksum::Zero,
    );
    let mut ack = TransportRepr::new(bth(Opcode::RcAtomicAcknowledge, 0x99, 3));
    ack.aeth = Some(AethRepr {
        syndrome: Syndrome::ACK_UNLIMITED,
        msn: 17,
    });
    ack.atomic_ack = Some(0x0102_0304_0506_0708);
    push(
        RoceRepr {
            eth: eth(None, 0x86dd),
            ip: v6(0x03, 0),
            udp: udp(0xc000),
            transport: ack,
        },
        &[],
        UdpChecksum::Compute,
    );
    let mut ud = TransportRepr::new(bth(Opcode::UdSendOnlyWithImmediate, 1, 0));
    ud.deth = Some(DethRepr {
        qkey: 0x8001_0000,
        src_qp: 1,
    });
    ud.imm = Some(0xcafe_f00d);
    push(
        RoceRepr {
            eth: eth(None, 0x0800),
            ip: v4(0, 3),
            udp: udp(0xc001),
            transport: ud,
        },
        &[9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4],
        UdpChecksum::Zero,
    );
    out
}

/// Runs `python3 -c script`, feeding one hex frame per line; `None` when python3 is absent.
fn run_python(script: &str, frames: &[Vec<u8>]) -> Option<Result<Vec<String>, String>> {
    let mut child = match Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            println!("SKIPPED: python3 not available ({e})");
            return None;
        }
    };
    {
        let stdin = child.stdin.as_mut().unwrap();
        for f in frames {
            let line: String = f.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(stdin, "{line}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        return Some(Err(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    Some(Ok(String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()))
}

fn tail_hex(f: &[u8]) -> String {
    f[f.len() - 4..]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn icrc_matches_python_zlib() {
    let frames = frames();
    let Some(res) = run_python(ZLIB_ORACLE, &frames) else {
        return;
    };
    let lines = res.expect("python oracle failed");
    assert_eq!(lines.len(), frames.len());
    for (f, l) in frames.iter().zip(&lines) {
        assert_eq!(&tail_hex(f), l);
    }
}

#[test]
fn icrc_matches_scapy() {
    let frames = frames();
    let probe = Command::new("python3")
        .args(["-c", "import scapy.contrib.roce"])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        _ => {
            println!("SKIPPED: python3 with scapy not available");
            return;
        }
    }
    let lines = run_python(SCAPY_ORACLE, &frames)
        .unwrap()
        .expect("scapy oracle failed");
    assert_eq!(lines.len(), frames.len());
    for (f, l) in frames.iter().zip(&lines) {
        assert_eq!(&tail_hex(f), l);
    }
}
