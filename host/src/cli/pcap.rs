//! `rdmesh pcap decode`: one line (or one JSON object) per frame of a capture.

use std::io::Write;
use std::path::Path;

use pcap_file::pcap::PcapReader;
use pcap_file::DataLink;
use rdmesh_core::wire::ip::IpRepr;
use rdmesh_core::wire::udp::ROCE_V2_PORT;
use rdmesh_core::wire::{AethRepr, PortMatch, RocePacket, Syndrome};
use serde_json::{json, Value};

use crate::error::{Error, Result};

/// Decodes every frame of the pcap at `path` into `out`: text lines, or JSON Lines with the
/// keys documented in the README (`frame`, `roce`, `error`, `ip`, `udp`, `opcode`, ...).
///
/// Errors: [`Error::Pcap`] when the file cannot be read or is not Ethernet.
pub fn decode(path: &Path, json: bool, out: &mut impl Write) -> Result<()> {
    let shown = path.display().to_string();
    let err = |reason: String| Error::Pcap {
        path: shown.clone(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut reader = PcapReader::new(file).map_err(|e| err(format!("not a pcap file: {e}")))?;
    let link = reader.header().datalink;
    if link != DataLink::ETHERNET {
        return Err(err(format!("link type {link:?} is not Ethernet")));
    }
    let mut n = 0u64;
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.map_err(|e| err(format!("frame {}: {e}", n + 1)))?;
        n += 1;
        let line = if json {
            frame_json(n, &pkt.data).to_string()
        } else {
            frame_text(n, &pkt.data)
        };
        writeln!(out, "{line}").map_err(|e| Error::io("writing the decode", e))?;
    }
    Ok(())
}

/// RoCEv2 frames are UDP datagrams to *or from* port 4791 (as Wireshark decides), so the
/// ACKs and responses that rdmesh endpoints on ephemeral ports receive decode too.
fn parse(data: &[u8]) -> rdmesh_core::wire::Result<RocePacket<'_>> {
    RocePacket::parse_with(data, PortMatch::Either(ROCE_V2_PORT))
}

fn ip_json(ip: &IpRepr) -> Value {
    match ip {
        IpRepr::V4(r) => {
            json!({"version": 4, "src": r.src.to_string(), "dst": r.dst.to_string(), "dscp": r.dscp, "ecn": r.ecn})
        }
        IpRepr::V6(r) => {
            json!({"version": 6, "src": r.src.to_string(), "dst": r.dst.to_string(), "dscp": r.traffic_class >> 2, "ecn": r.traffic_class & 3})
        }
    }
}

fn syndrome_byte(a: &AethRepr) -> u8 {
    u8::from(a.syndrome)
}

/// The JSON object of one frame.
pub fn frame_json(frame: u64, data: &[u8]) -> Value {
    match parse(data) {
        Ok(p) => {
            let t = &p.transport;
            let b = &t.bth;
            json!({
                "frame": frame,
                "roce": true,
                "error": if p.icrc_valid { Value::Null } else { Value::from("ICRC mismatch") },
                "ip": ip_json(&p.ip),
                "udp": {"src_port": p.udp.src_port, "dst_port": p.udp.dst_port},
                "opcode": u8::from(b.opcode),
                "se": b.solicited,
                "pad_cnt": b.pad_cnt,
                "pkey": b.pkey,
                "fecn": b.fecn,
                "becn": b.becn,
                "dest_qp": b.dest_qp,
                "ack_req": b.ack_req,
                "psn": b.psn.value(),
                "reth": t.reth.map(|r| json!({"va": r.va, "rkey": r.rkey, "dma_len": r.dma_len})),
                "aeth": t.aeth.map(|a| json!({"syndrome": syndrome_byte(&a), "msn": a.msn})),
                "imm": t.imm,
                "ieth": t.ieth,
                "atomic_eth": t.atomic_eth.map(|a| json!({"va": a.va, "rkey": a.rkey, "swap_add": a.swap_add, "compare": a.compare})),
                "atomic_ack": t.atomic_ack,
                "deth": t.deth.map(|d| json!({"qkey": d.qkey, "src_qp": d.src_qp})),
                "payload_len": p.payload.len(),
                "icrc_valid": p.icrc_valid,
            })
        }
        Err(e) => json!({
            "frame": frame, "roce": false, "error": e.to_string(), "ip": null, "udp": null,
            "opcode": null, "se": null, "pad_cnt": null, "pkey": null, "fecn": null, "becn": null,
            "dest_qp": null, "ack_req": null, "psn": null, "reth": null, "aeth": null, "imm": null,
            "ieth": null, "atomic_eth": null, "atomic_ack": null, "deth": null, "payload_len": null,
            "icrc_valid": false,
        }),
    }
}

/// The text line of one frame.
pub fn frame_text(frame: u64, data: &[u8]) -> String {
    match parse(data) {
        Ok(p) => {
            let (src, dst) = match &p.ip {
                IpRepr::V4(r) => (r.src.to_string(), r.dst.to_string()),
                IpRepr::V6(r) => (format!("[{}]", r.src), format!("[{}]", r.dst)),
            };
            let t = &p.transport;
            let b = &t.bth;
            let mut s = format!(
                "{frame:>6} {src}:{} > {dst}:{} {:?} QP={:#08x} PSN={}{}{}",
                p.udp.src_port,
                p.udp.dst_port,
                b.opcode,
                b.dest_qp,
                b.psn,
                if b.ack_req { " A" } else { "" },
                if b.becn { " BECN" } else { "" },
            );
            if let Some(r) = t.reth {
                s += &format!(" RETH va={:#x} rkey={:#x} len={}", r.va, r.rkey, r.dma_len);
            }
            if let Some(a) = t.aeth {
                let what = match a.syndrome {
                    Syndrome::Ack { .. } => "ACK".to_string(),
                    Syndrome::RnrNak { timer } => format!("RNR-NAK timer={timer}"),
                    Syndrome::Nak(code) => format!("NAK {code:?}"),
                    Syndrome::Reserved(v) => format!("reserved {v:#x}"),
                };
                s += &format!(
                    " AETH {what} syndrome={:#04x} MSN={}",
                    syndrome_byte(&a),
                    a.msn
                );
            }
            if let Some(i) = t.imm {
                s += &format!(" imm={i:#x}");
            }
            s += &format!(
                " payload={} ICRC {}",
                p.payload.len(),
                if p.icrc_valid { "ok" } else { "BAD" }
            );
            s
        }
        Err(e) => format!("{frame:>6} not RoCEv2: {e}"),
    }
}
