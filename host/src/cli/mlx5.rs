//! `rdmesh mlx5`: encode work requests into mlx5 send WQEs and decode WQEs and CQEs, for users
//! debugging a queue and for conformance checks against rdma-core.
//!
//! - `rdmesh mlx5 encode`: JSON Lines on stdin, one work request per line; prints each WQE as
//!   lowercase hex (no spaces), exactly DS × 16 bytes, one per line — the bytes rdma-core's
//!   mlx5 provider writes for the same work request on an RC QP.
//!   Keys: `opcode` ("nop", "send", "send_imm", "send_inval", "rdma_write", "rdma_write_imm",
//!   "rdma_read", "atomic_cs", "atomic_fa"), `wqe_index` (default: the previous WQE's index
//!   plus its WQEBBs, starting at 0), `qpn` (default 0), `signaled`, `solicited`, `fence`
//!   (default false), `imm` (the *_imm opcodes: the u32 as it appears big-endian in the
//!   control segment), `invalidate_rkey` (send_inval), `raddr` and `rkey` (RDMA and atomics),
//!   `compare` (atomic_cs) and `swap_add` (atomics), and either `sge`: a list of
//!   `{"addr", "lkey", "len"}` or `inline`: a hex string.
//! - `rdmesh mlx5 decode-wqe HEX [--qp-type rc|uc|ud|raw] [--json]`.
//! - `rdmesh mlx5 decode-cqe HEX [--json]`: JSON keys `opcode`, `owner` (0/1), `se`, `format`,
//!   `byte_cnt`, `qpn`, `wqe_counter`, `imm_inval_pkey`, `syndrome` and `vendor_err_synd`
//!   (null unless an error CQE); integers as JSON numbers.

use std::io::{BufRead, Write};

use rdmesh_core::mlx5::cqe::Cqe64;
use rdmesh_core::mlx5::{
    decode_wqe, CqeRepr, Payload, QpType, Segment, SendFlags, SendWr, Sge, SplitBytes,
    TransportSeg, WqeRepr, WrOp,
};
use serde::Deserialize;
use serde_json::{json, Value};

/// `rdmesh mlx5` arguments.
#[derive(Debug, clap::Args)]
pub struct Mlx5Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Mlx5Command,
}

/// `rdmesh mlx5` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Mlx5Command {
    /// Read work requests as JSON Lines on stdin; print each WQE as hex (DS × 16 bytes).
    Encode,
    /// Decode a send WQE given as hex (a multiple of 16 bytes; extra bytes after DS × 16 are
    /// ignored).
    DecodeWqe {
        /// The WQE bytes as hex (whitespace ignored).
        hex: String,
        /// QP type, which decides the segment after the control segment.
        #[arg(long, value_enum, default_value_t = QpTypeArg::Rc)]
        qp_type: QpTypeArg,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Decode a 64-byte CQE given as hex (128 bytes: the CQE is the second half).
    DecodeCqe {
        /// The CQE bytes as hex (whitespace ignored).
        hex: String,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// QP type for `decode-wqe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QpTypeArg {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram (a datagram segment follows the control segment).
    Ud,
    /// Raw packet (an Ethernet segment follows the control segment).
    Raw,
}

impl From<QpTypeArg> for QpType {
    fn from(q: QpTypeArg) -> QpType {
        match q {
            QpTypeArg::Rc => QpType::Rc,
            QpTypeArg::Uc => QpType::Uc,
            QpTypeArg::Ud => QpType::Ud,
            QpTypeArg::Raw => QpType::RawPacket,
        }
    }
}

/// Errors of `rdmesh mlx5`.
#[derive(Debug, thiserror::Error)]
pub enum Mlx5Error {
    /// A work request line of `encode` is not valid.
    #[error("mlx5 encode: line {line}: {reason}")]
    Request {
        /// 1-based input line number.
        line: usize,
        /// What is wrong and what to change.
        reason: String,
    },
    /// A hex argument is not valid.
    #[error("{what}: {reason}")]
    Hex {
        /// Which argument.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The bytes do not decode.
    #[error("{what}: {source}")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// The format error.
        #[source]
        source: rdmesh_core::mlx5::Error,
    },
    /// Reading stdin or writing stdout failed.
    #[error("mlx5: {context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Runs `rdmesh mlx5` with stdin / stdout.
///
/// # Errors
/// [`Mlx5Error`] naming the input line or argument that is wrong.
pub fn run(args: Mlx5Args) -> Result<(), Mlx5Error> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.command {
        Mlx5Command::Encode => encode(std::io::stdin().lock(), &mut out),
        Mlx5Command::DecodeWqe { hex, qp_type, json } => {
            decode_wqe_cmd(&hex, qp_type.into(), json, &mut out)
        }
        Mlx5Command::DecodeCqe { hex, json } => decode_cqe_cmd(&hex, json, &mut out),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SgeJson {
    addr: u64,
    lkey: u32,
    len: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WrJson {
    opcode: String,
    wqe_index: Option<u16>,
    qpn: Option<u32>,
    #[serde(default)]
    signaled: bool,
    #[serde(default)]
    solicited: bool,
    #[serde(default)]
    fence: bool,
    imm: Option<u32>,
    invalidate_rkey: Option<u32>,
    raddr: Option<u64>,
    rkey: Option<u32>,
    compare: Option<u64>,
    swap_add: Option<u64>,
    sge: Option<Vec<SgeJson>>,
    inline: Option<String>,
}

fn need<T: Copy>(v: Option<T>, key: &str, op: &str) -> Result<T, String> {
    v.ok_or_else(|| format!("\"{op}\" needs \"{key}\""))
}

fn refuse<T>(v: &Option<T>, key: &str, op: &str) -> Result<(), String> {
    match v {
        Some(_) => Err(format!("\"{key}\" does not apply to \"{op}\"; remove it")),
        None => Ok(()),
    }
}

impl WrJson {
    fn op(&self) -> Result<WrOp, String> {
        let o = self.opcode.as_str();
        let remote = |r: &WrJson| -> Result<(u64, u32), String> {
            Ok((need(r.raddr, "raddr", o)?, need(r.rkey, "rkey", o)?))
        };
        let op = match o {
            "nop" => WrOp::Nop,
            "send" => WrOp::Send,
            "send_imm" => WrOp::SendImm {
                imm: self.imm.unwrap_or(0),
            },
            "send_inval" => WrOp::SendInval {
                invalidate_rkey: need(self.invalidate_rkey, "invalidate_rkey", o)?,
            },
            "rdma_write" => {
                let (raddr, rkey) = remote(self)?;
                WrOp::RdmaWrite { raddr, rkey }
            }
            "rdma_write_imm" => {
                let (raddr, rkey) = remote(self)?;
                WrOp::RdmaWriteImm {
                    raddr,
                    rkey,
                    imm: self.imm.unwrap_or(0),
                }
            }
            "rdma_read" => {
                let (raddr, rkey) = remote(self)?;
                WrOp::RdmaRead { raddr, rkey }
            }
            "atomic_cs" => {
                let (raddr, rkey) = remote(self)?;
                WrOp::AtomicCs {
                    raddr,
                    rkey,
                    compare: need(self.compare, "compare", o)?,
                    swap: need(self.swap_add, "swap_add", o)?,
                }
            }
            "atomic_fa" => {
                let (raddr, rkey) = remote(self)?;
                refuse(&self.compare, "compare", o)?;
                WrOp::AtomicFa {
                    raddr,
                    rkey,
                    add: need(self.swap_add, "swap_add", o)?,
                }
            }
            other => {
                return Err(format!(
                    "unknown opcode \"{other}\" (use nop, send, send_imm, send_inval, rdma_write, \
                     rdma_write_imm, rdma_read, atomic_cs, atomic_fa)"
                ))
            }
        };
        if !matches!(op, WrOp::SendImm { .. } | WrOp::RdmaWriteImm { .. }) {
            refuse(&self.imm, "imm", o)?;
        }
        if !matches!(op, WrOp::SendInval { .. }) {
            refuse(&self.invalidate_rkey, "invalidate_rkey", o)?;
        }
        if op.raddr().is_none() {
            refuse(&self.raddr, "raddr", o)?;
            refuse(&self.rkey, "rkey", o)?;
        }
        if op.atomic().is_none() {
            refuse(&self.compare, "compare", o)?;
            refuse(&self.swap_add, "swap_add", o)?;
        }
        Ok(op)
    }
}

/// Parses a hex string (whitespace ignored, optional `0x`).
///
/// # Errors
/// A message naming the offending character or the odd length.
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    let s = s.strip_prefix("0x").unwrap_or(&s);
    if s.len() % 2 != 0 {
        return Err(format!("odd number of hex digits ({})", s.len()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16)
                .map_err(|_| format!("\"{}\" at position {i} is not hex", &s[i..i + 2]))
        })
        .collect()
}

/// Lowercase hex of `b`.
pub fn to_hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

fn split_hex(b: &SplitBytes<'_>) -> String {
    to_hex(&b.iter().collect::<Vec<u8>>())
}

/// `rdmesh mlx5 encode`: one WQE (hex) per non-empty input line.
///
/// # Errors
/// [`Mlx5Error::Request`] for the first invalid line (nothing after it is printed),
/// [`Mlx5Error::Io`] when reading or writing fails.
pub fn encode(input: impl BufRead, out: &mut impl Write) -> Result<(), Mlx5Error> {
    let mut next_index: u16 = 0;
    let mut buf = [0u8; rdmesh_core::mlx5::MAX_DS * 16];
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|source| Mlx5Error::Io {
            context: "reading stdin",
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |reason: String| Mlx5Error::Request {
            line: n + 1,
            reason,
        };
        let wr: WrJson = serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?;
        let op = wr.op().map_err(bad)?;
        let sges: Vec<Sge> = wr
            .sge
            .iter()
            .flatten()
            .map(|s| Sge {
                addr: s.addr,
                lkey: s.lkey,
                len: s.len,
            })
            .collect();
        let inline = match &wr.inline {
            Some(h) => Some(parse_hex(h).map_err(|e| bad(format!("\"inline\": {e}")))?),
            None => None,
        };
        let payload = match (&inline, &wr.sge) {
            (Some(_), Some(_)) => {
                return Err(bad("give either \"sge\" or \"inline\", not both".into()))
            }
            (Some(b), None) => Payload::Inline(b),
            _ => Payload::Gather(&sges),
        };
        let send = SendWr {
            op,
            flags: SendFlags {
                signaled: wr.signaled,
                solicited: wr.solicited,
                fence: wr.fence,
            },
            transport: TransportSeg::None,
            payload,
        };
        let index = wr.wqe_index.unwrap_or(next_index);
        let qpn = wr.qpn.unwrap_or(0);
        let len = send.emit(QpType::Rc, index, qpn, &mut buf).map_err(|e| {
            bad(match e {
                rdmesh_core::mlx5::Error::BadField => {
                    format!("qpn {qpn:#x} does not fit in 24 bits")
                }
                other => other.to_string(),
            })
        })?;
        next_index = index.wrapping_add(len.div_ceil(64) as u16);
        writeln!(out, "{}", to_hex(&buf[..len])).map_err(|source| Mlx5Error::Io {
            context: "writing stdout",
            source,
        })?;
    }
    Ok(())
}

fn segment_json(s: &Segment<'_>) -> Value {
    match s {
        Segment::Raddr(r) => json!({"type": "raddr", "raddr": r.raddr, "rkey": r.rkey}),
        Segment::Atomic(a) => {
            json!({"type": "atomic", "swap_add": a.swap_add, "compare": a.compare})
        }
        Segment::Data(d) => json!({
            "type": "data", "byte_count": d.byte_count, "lkey": d.lkey, "addr": d.addr
        }),
        Segment::Inline(b) => json!({"type": "inline", "len": b.len(), "data": split_hex(b)}),
        Segment::Eth(e) => json!({
            "type": "eth",
            "swp_offsets": e.swp_offsets,
            "cs_flags": e.cs_flags,
            "swp_flags": e.swp_flags,
            "mss": e.mss,
            "flow_table_metadata": e.flow_table_metadata,
            "inline_hdr_sz": e.inline_hdr.len(),
            "inline_hdr": split_hex(&e.inline_hdr),
        }),
        Segment::Datagram(d) => json!({
            "type": "datagram",
            "key": d.key,
            "dqp_dct": d.dqp_dct,
            "ext": d.ext,
            "stat_rate_sl": d.stat_rate_sl,
            "fl_mlid": d.fl_mlid,
            "rlid": d.rlid,
            "rmac": to_hex(&d.rmac),
            "tclass": d.tclass,
            "hop_limit": d.hop_limit,
            "grh_gid_fl": d.grh_gid_fl,
            "rgid": to_hex(&d.rgid),
        }),
        Segment::Opaque(b) => json!({"type": "opaque", "data": to_hex(b)}),
    }
}

/// The JSON object of a decoded WQE: control fields (`opcode` as a number and `opcode_name`,
/// `opmod`, `wqe_index`, `qpn`, `ds`, `wqebbs`, `signature`, `fm_ce_se`, `signaled`,
/// `solicited`, `fence`, `imm`) and `segments`, each with a `type`.
pub fn wqe_json(w: &WqeRepr<'_>) -> Value {
    let c = &w.ctrl;
    json!({
        "opcode": u8::from(c.opcode),
        "opcode_name": c.opcode.name(),
        "opmod": c.opmod,
        "wqe_index": c.wqe_index,
        "qpn": c.qpn,
        "ds": c.ds,
        "wqebbs": c.wqebbs(),
        "signature": c.signature,
        "fm_ce_se": c.fm_ce_se.0,
        "signaled": c.fm_ce_se.signaled(),
        "solicited": c.fm_ce_se.solicited(),
        "fence": c.fm_ce_se.fenced(),
        "imm": c.imm,
        "segments": w.segments.iter().map(segment_json).collect::<Vec<_>>(),
    })
}

fn segment_text(s: &Segment<'_>) -> String {
    match s {
        Segment::Raddr(r) => format!("raddr     raddr {:#x} rkey {:#x}", r.raddr, r.rkey),
        Segment::Atomic(a) => {
            format!(
                "atomic    swap_add {:#x} compare {:#x}",
                a.swap_add, a.compare
            )
        }
        Segment::Data(d) => format!(
            "data      byte_count {} lkey {:#x} addr {:#x}",
            d.byte_count, d.lkey, d.addr
        ),
        Segment::Inline(b) => format!("inline    len {} data {}", b.len(), split_hex(b)),
        Segment::Eth(e) => format!(
            "eth       cs_flags {:#04x} mss {} swp_offsets {:?} swp_flags {:#04x} \
             flow_table_metadata {:#x} inline_hdr_sz {} inline_hdr {}",
            e.cs_flags,
            e.mss,
            e.swp_offsets,
            e.swp_flags,
            e.flow_table_metadata,
            e.inline_hdr.len(),
            split_hex(&e.inline_hdr)
        ),
        Segment::Datagram(d) => format!(
            "datagram  key {:#018x} dqp_dct {:#x} ext {} stat_rate_sl {} fl_mlid {} rlid {:#x} \
             rmac {} tclass {} hop_limit {} grh_gid_fl {:#x} rgid {}",
            d.key,
            d.dqp_dct,
            d.ext,
            d.stat_rate_sl,
            d.fl_mlid,
            d.rlid,
            to_hex(&d.rmac),
            d.tclass,
            d.hop_limit,
            d.grh_gid_fl,
            to_hex(&d.rgid)
        ),
        Segment::Opaque(b) => format!("opaque    {}", to_hex(b)),
    }
}

/// The text form of a decoded WQE: one line for the control segment, one per segment.
pub fn wqe_text(w: &WqeRepr<'_>) -> String {
    let c = &w.ctrl;
    let f = c.fm_ce_se;
    let mut flags = Vec::new();
    if f.signaled() {
        flags.push("signaled");
    }
    if f.solicited() {
        flags.push("solicited");
    }
    if f.fenced() {
        flags.push("fence");
    }
    let mut s = format!(
        "ctrl      opcode {} ({:#04x}) opmod {} wqe_index {} qpn {:#x} ds {} ({} WQEBB) \
         signature {:#04x} fm_ce_se {:#04x} [{}] imm {:#010x}\n",
        c.opcode.name().unwrap_or("unknown"),
        u8::from(c.opcode),
        c.opmod,
        c.wqe_index,
        c.qpn,
        c.ds,
        c.wqebbs(),
        c.signature,
        f.0,
        flags.join(","),
        c.imm
    );
    for seg in &w.segments {
        s.push_str(&segment_text(seg));
        s.push('\n');
    }
    s
}

fn decode_wqe_cmd(
    hex: &str,
    qp_type: QpType,
    json: bool,
    out: &mut impl Write,
) -> Result<(), Mlx5Error> {
    let what = "mlx5 decode-wqe";
    let bytes = parse_hex(hex).map_err(|reason| Mlx5Error::Hex { what, reason })?;
    if bytes.is_empty() || bytes.len() % 16 != 0 {
        return Err(Mlx5Error::Hex {
            what,
            reason: format!(
                "a WQE is a whole number of 16-byte DS units; got {} bytes",
                bytes.len()
            ),
        });
    }
    let w = decode_wqe(&bytes, 0, qp_type).map_err(|source| Mlx5Error::Decode { what, source })?;
    let text = if json {
        format!("{}\n", wqe_json(&w))
    } else {
        wqe_text(&w)
    };
    out.write_all(text.as_bytes())
        .map_err(|source| Mlx5Error::Io {
            context: "writing stdout",
            source,
        })
}

/// The JSON object of a CQE with the keys `opcode`, `owner` (0/1), `se`, `format`,
/// `byte_cnt`, `qpn`, `wqe_counter`, `imm_inval_pkey`, `syndrome`, `vendor_err_synd` (the
/// last two null unless the opcode is REQ_ERR or RESP_ERR).
pub fn cqe_json(c: &CqeRepr) -> Value {
    json!({
        "opcode": u8::from(c.opcode),
        "owner": c.owner as u8,
        "se": c.se,
        "format": u8::from(c.format),
        "byte_cnt": c.byte_cnt,
        "qpn": c.qpn,
        "wqe_counter": c.wqe_counter,
        "imm_inval_pkey": c.imm_inval_pkey,
        "syndrome": c.error.map(|e| u8::from(e.syndrome)),
        "vendor_err_synd": c.error.map(|e| e.vendor_err_synd),
    })
}

/// The text form of a CQE.
pub fn cqe_text(c: &CqeRepr) -> String {
    let mut s = format!(
        "opcode {:?} ({}) owner {} se {} format {:?} byte_cnt {} qpn {:#x} s_wqe_opcode {:#04x} \
         wqe_counter {} imm_inval_pkey {:#010x} srqn_uidx {:#x} flags_rqpn {:#x} slid {:#x} \
         vlan_info {:#x} timestamp {:#x} signature {:#04x} wqe_id {}",
        c.opcode,
        u8::from(c.opcode),
        c.owner as u8,
        c.se,
        c.format,
        c.byte_cnt,
        c.qpn,
        c.s_wqe_opcode,
        c.wqe_counter,
        c.imm_inval_pkey,
        c.srqn_uidx,
        c.flags_rqpn,
        c.slid,
        c.vlan_info,
        c.timestamp,
        c.signature,
        c.wqe_id
    );
    if let Some(e) = c.error {
        s.push_str(&format!(
            "\nerror syndrome {:?} ({:#04x}, {}) vendor_err_synd {:#04x}",
            e.syndrome,
            u8::from(e.syndrome),
            e.syndrome.ibv_wc_status(),
            e.vendor_err_synd
        ));
    }
    s.push('\n');
    s
}

fn decode_cqe_cmd(hex: &str, json: bool, out: &mut impl Write) -> Result<(), Mlx5Error> {
    let what = "mlx5 decode-cqe";
    let bytes = parse_hex(hex).map_err(|reason| Mlx5Error::Hex { what, reason })?;
    let cqe = match bytes.len() {
        64 => &bytes[..],
        128 => &bytes[64..],
        n => {
            return Err(Mlx5Error::Hex {
                what,
                reason: format!(
                    "a CQE is 64 bytes (or 128 with the CQE in the second half); got {n}"
                ),
            })
        }
    };
    let c = CqeRepr::parse(&Cqe64::new_unchecked(cqe))
        .map_err(|source| Mlx5Error::Decode { what, source })?;
    let text = if json {
        format!("{}\n", cqe_json(&c))
    } else {
        cqe_text(&c)
    };
    out.write_all(text.as_bytes())
        .map_err(|source| Mlx5Error::Io {
            context: "writing stdout",
            source,
        })
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn encode_rdma_write_line() {
        let input = br#"{"opcode":"rdma_write","wqe_index":5,"qpn":291,"signaled":true,"raddr":4096,"rkey":34,"sge":[{"addr":32512,"lkey":17,"len":64}]}"#;
        let mut out = Vec::new();
        encode(&input[..], &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "00000508000123030000000800000000\
             00000000000010000000002200000000\
             00000040000000110000000000007f00\n"
        );
    }

    #[test]
    fn encode_auto_index_and_errors() {
        let input = b"{\"opcode\":\"nop\"}\n\n{\"opcode\":\"send\",\"inline\":\"0102\"}\n";
        let mut out = Vec::new();
        encode(&input[..], &mut out).unwrap();
        let lines: Vec<&str> = std::str::from_utf8(&out).unwrap().lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].starts_with("0000010a"), "{}", lines[1]);
        for (bad, needle) in [
            (r#"{"opcode":"rdma_write","rkey":1}"#, "needs \"raddr\""),
            (r#"{"opcode":"send","imm":1}"#, "\"imm\" does not apply"),
            (r#"{"opcode":"jump"}"#, "unknown opcode"),
            (r#"{"opcode":"send","bogus":1}"#, "unknown field"),
            (
                r#"{"opcode":"atomic_fa","raddr":0,"rkey":0,"swap_add":1,"compare":2}"#,
                "\"compare\"",
            ),
            (
                r#"{"opcode":"rdma_read","raddr":0,"rkey":0,"inline":"00"}"#,
                "inline",
            ),
            (r#"{"opcode":"send","qpn":16777216}"#, "24 bits"),
        ] {
            let e = encode(bad.as_bytes(), &mut Vec::new())
                .unwrap_err()
                .to_string();
            assert!(e.contains("line 1") && e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn decode_json_keys() {
        let mut cqe = [0u8; 64];
        cqe[0x37] = 0x05;
        cqe[0x36] = 0x93;
        cqe[0x3f] = 0xd1;
        let mut out = Vec::new();
        decode_cqe_cmd(&to_hex(&cqe), true, &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["opcode"], 13);
        assert_eq!(v["owner"], 1);
        assert_eq!(v["syndrome"], 5);
        assert_eq!(v["vendor_err_synd"], 0x93);
        cqe[0x3f] = 0x00;
        let mut out = Vec::new();
        decode_cqe_cmd(&to_hex(&cqe), true, &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert!(v["syndrome"].is_null() && v["vendor_err_synd"].is_null());
        assert!(decode_cqe_cmd("00", true, &mut Vec::new()).is_err());
        let wqe = "00000508000123030000000800000000000000000000100000000022000000000000004000000011000000000000\
                   7f00";
        let mut out = Vec::new();
        decode_wqe_cmd(wqe, QpType::Rc, true, &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["opcode_name"], "rdma_write");
        assert_eq!(v["segments"][1]["byte_count"], 64);
        assert!(decode_wqe_cmd("0000", QpType::Rc, true, &mut Vec::new()).is_err());
    }
}
