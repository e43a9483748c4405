//! A whole RoCEv2 UDP payload: `BTH | ext headers | payload | pad (PadCnt bytes) | ICRC (4 B)`
//! (IBTA vol. 1 §9.2, RoCEv2 Annex A17.4; rxe_recv.c / rxe_req.c).
//!
//! [`IbPacket::parse`] splits it; [`IbPacket::emit`] writes one, choosing the pad so that
//! payload + pad is a multiple of 4 bytes (rxe_req.c `init_req_packet`: `(-paylen) & 3`).
//! The ICRC itself needs the IP and UDP headers: see [`icrc`](super::icrc).

use super::opcode::Opcode;
use super::transport::TransportRepr;
use super::{Error, Result};

/// Length of the ICRC trailer in bytes.
pub const ICRC_LEN: usize = 4;

/// Number of pad bytes after a payload of `payload_len` bytes: `(-payload_len) mod 4`, 0..=3.
#[inline]
pub const fn pad_len(payload_len: usize) -> usize {
    payload_len.wrapping_neg() & 3
}

/// A RoCEv2 UDP payload split into its parts; slices borrow from the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IbPacket<'a> {
    /// BTH and extended headers.
    pub transport: TransportRepr,
    /// Bytes of BTH + extended headers.
    pub header_len: usize,
    /// The IB payload, without pad.
    pub payload: &'a [u8],
    /// The pad bytes (BTH.PadCnt of them, normally zero).
    pub pad: &'a [u8],
    /// The ICRC as a CRC-32 value: the 4 trailing bytes read least-significant byte first,
    /// directly comparable to [`icrc::compute`](super::icrc) results.
    pub icrc: u32,
    /// The bytes the ICRC covers after the IP/UDP headers: BTH through pad.
    pub icrc_covered: &'a [u8],
}

/// `true` when an `opcode` packet may carry `len` payload bytes: any length for the opcodes with
/// a payload (IBTA Table 38), none for the others — except an ACKNOWLEDGE carrying exactly the
/// 36 bytes of an rdmesh SACK block ([`super::sack`]; selective repeat between two rdmesh QPs
/// that negotiated it).
pub(crate) fn payload_allowed(opcode: Opcode, len: usize) -> bool {
    len == 0
        || opcode.header_set().is_some_and(|h| h.payload)
        || (opcode == Opcode::RcAcknowledge && len == super::sack::HEADER_LEN)
}

impl<'a> IbPacket<'a> {
    /// Splits a UDP payload. The ICRC is *not* verified here (it needs the IP/UDP headers).
    ///
    /// # Errors
    /// - The errors of [`TransportRepr::parse`] (`Truncated`, `BadTver`, `UnknownOpcode`).
    /// - [`Error::Truncated`]: no room for the 4-byte ICRC after the headers.
    /// - [`Error::BadLength`]: PadCnt exceeds the bytes between headers and ICRC; payload + pad is
    ///   not a multiple of 4 bytes; or an opcode that carries no payload (ACK, READ request,
    ///   atomics, CNP) has bytes there — except an ACKNOWLEDGE carrying exactly the 36 bytes of
    ///   an rdmesh SACK block ([`super::sack`]), which the QP reads only in selective repeat.
    pub fn parse(udp_payload: &'a [u8]) -> Result<IbPacket<'a>> {
        let (transport, header_len) = TransportRepr::parse(udp_payload)?;
        if udp_payload.len() < header_len + ICRC_LEN {
            return Err(Error::Truncated);
        }
        let icrc_at = udp_payload.len() - ICRC_LEN;
        let body = &udp_payload[header_len..icrc_at];
        let pad_cnt = usize::from(transport.bth.pad_cnt);
        if pad_cnt > body.len() || body.len() % 4 != 0 {
            return Err(Error::BadLength);
        }
        let (payload, pad) = body.split_at(body.len() - pad_cnt);
        if !payload_allowed(transport.bth.opcode, payload.len()) {
            return Err(Error::BadLength);
        }
        let t = &udp_payload[icrc_at..];
        Ok(IbPacket {
            transport,
            header_len,
            payload,
            pad,
            icrc: u32::from_le_bytes([t[0], t[1], t[2], t[3]]),
            icrc_covered: &udp_payload[..icrc_at],
        })
    }

    /// UDP payload length for `transport` carrying `payload_len` bytes:
    /// headers + payload + pad + 4 (ICRC).
    pub fn buffer_len(transport: &TransportRepr, payload_len: usize) -> usize {
        transport.header_len() + payload_len + pad_len(payload_len) + ICRC_LEN
    }

    /// Writes headers, `payload` and zero pad into `buf` and returns the number of bytes written,
    /// *excluding* the ICRC (the caller appends it once the IP/UDP headers are known; see
    /// [`icrc`](super::icrc)). The BTH PadCnt written is `pad_len(payload.len())`, whatever
    /// `transport.bth.pad_cnt` says.
    ///
    /// # Errors
    /// The errors of [`TransportRepr::emit`]; [`Error::BadLength`] when the opcode carries no
    /// payload but `payload` is not empty (an rdmesh SACK block on an ACKNOWLEDGE excepted);
    /// [`Error::Truncated`] when `buf` is shorter than
    /// headers + payload + pad.
    pub fn emit(transport: &TransportRepr, payload: &[u8], buf: &mut [u8]) -> Result<usize> {
        let pad = pad_len(payload.len());
        let mut t = *transport;
        t.bth.pad_cnt = pad as u8;
        t.check()?;
        if !payload_allowed(t.bth.opcode, payload.len()) {
            return Err(Error::BadLength);
        }
        let hl = t.header_len();
        let total = hl + payload.len() + pad;
        if buf.len() < total {
            return Err(Error::Truncated);
        }
        t.emit(buf)?;
        buf[hl..hl + payload.len()].copy_from_slice(payload);
        buf[hl + payload.len()..total].fill(0);
        Ok(total)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::wire::{BthRepr, Opcode, Psn};

    // TV1's UDP payload: UC SEND_ONLY, PadCnt 2, 18-byte payload + 2 pad, ICRC wire 78 f3 53 f3.
    static TV1_IB: [u8; 36] = [
        0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3, 0x00, 0xcf, 0x17, 0x10, 0x46, 0x30, 0x81,
        0x8b, 0xe2, 0x89, 0x35, 0xd9, 0x0e, 0x9a, 0x95, 0x50, 0x54, 0x01, 0xbe, 0x88, 0x5e, 0x50,
        0x00, 0x00, 0x78, 0xf3, 0x53, 0xf3,
    ];

    #[test]
    fn split_tv1() {
        let p = IbPacket::parse(&TV1_IB).unwrap();
        assert_eq!(p.header_len, 12);
        assert_eq!(p.payload.len(), 18);
        assert_eq!(p.pad, &[0, 0]);
        assert_eq!(p.icrc, 0xf353_f378);
        assert_eq!(p.icrc_covered, &TV1_IB[..32]);
        let mut buf = [0u8; 32];
        assert_eq!(
            IbPacket::buffer_len(&p.transport, p.payload.len()),
            TV1_IB.len()
        );
        assert_eq!(IbPacket::emit(&p.transport, p.payload, &mut buf), Ok(32));
        assert_eq!(buf, TV1_IB[..32]);
        assert_eq!(
            IbPacket::emit(&p.transport, p.payload, &mut buf[..31]),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn pad_rules() {
        assert_eq!(pad_len(0), 0);
        assert_eq!(pad_len(1), 3);
        assert_eq!(pad_len(18), 2);
        assert_eq!(pad_len(4096), 0);
        // No ICRC room.
        assert_eq!(IbPacket::parse(&TV1_IB[..15]), Err(Error::Truncated));
        // Payload + pad not a multiple of 4.
        let mut odd = [0u8; 35];
        odd[..31].copy_from_slice(&TV1_IB[..31]);
        assert_eq!(IbPacket::parse(&odd), Err(Error::BadLength));
        // PadCnt 3 with only 0 body bytes.
        let mut short = [0u8; 16];
        short[..12].copy_from_slice(&TV1_IB[..12]);
        short[1] = 0x30;
        assert_eq!(IbPacket::parse(&short), Err(Error::BadLength));
    }

    #[test]
    fn no_payload_opcodes() {
        let b = BthRepr {
            opcode: Opcode::RcAcknowledge,
            solicited: false,
            mig_req: false,
            pad_cnt: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 1,
            ack_req: false,
            psn: Psn::new(1),
        };
        let mut t = TransportRepr::new(b);
        t.aeth = Some(crate::wire::AethRepr {
            syndrome: crate::wire::Syndrome::ACK_UNLIMITED,
            msn: 1,
        });
        let mut buf = [0u8; 32];
        assert_eq!(IbPacket::emit(&t, &[1], &mut buf), Err(Error::BadLength));
        let n = IbPacket::emit(&t, &[], &mut buf).unwrap();
        assert_eq!(n, 16);
        assert!(IbPacket::parse(&buf[..n + 4]).is_ok());
        assert_eq!(IbPacket::parse(&buf[..n + 8]), Err(Error::BadLength));
        // An rdmesh SACK block (36 bytes) after the AETH is accepted, other lengths are not.
        let mut sack = [0u8; 80];
        sack[..n].copy_from_slice(&buf[..n]);
        let p = IbPacket::parse(&sack[..n + 36 + 4]).unwrap();
        assert_eq!(p.payload.len(), 36);
        // ... and emitted again.
        let mut again = [0u8; 80];
        assert_eq!(IbPacket::emit(&t, p.payload, &mut again), Ok(n + 36));
        assert_eq!(IbPacket::parse(&sack[..n + 40 + 4]), Err(Error::BadLength));
        assert_eq!(
            IbPacket::parse(&sack[..n + 20 + 4]),
            Err(Error::BadLength),
            "version 1"
        );
    }
}
