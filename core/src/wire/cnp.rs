//! RoCEv2 Congestion Notification Packet (CNP): a BTH with opcode 0x81 and BECN set, followed by
//! 16 reserved bytes and the ICRC; no payload (RoCEv2 Annex A17.9.3; ib_pack.h `IB_OPCODE_CNP`;
//! scapy `contrib/roce.py` `cnp()`; ConnectX-4 Lx capture in scapy `test/contrib/roce.uts`).
//!
//! ```text
//! BTH: 81 00 ff ff | 40 <DestQP:3> | 00 00 00 00   then 16 × 00
//! ```
//! Standard form (what [`CnpRepr::emit`] writes): SE = M = PadCnt = TVer = 0, FECN 0, BECN 1,
//! AckReq 0, PSN 0, reserved bytes 0. On receive only the opcode is required; the other fields are
//! ignored as hardware varies.

use super::bth::{self, BthRepr};
use super::transport::TransportRepr;
use super::{Error, Opcode, Psn, Result};

mod field {
    use crate::wire::Field;

    pub const BTH: Field = 0..12;
    pub const RESERVED: Field = 12..28;
}

/// Length of a CNP's transport headers in bytes (BTH + 16 reserved), excluding the ICRC.
pub const HEADER_LEN: usize = field::RESERVED.end;

/// Number of reserved bytes after the BTH.
pub const RESERVED_LEN: usize = field::RESERVED.end - field::RESERVED.start;

fixed_header_view!("CNP (BTH and 16 reserved bytes)");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The BTH of the CNP as a view.
    #[inline]
    pub fn bth(&self) -> bth::Packet<&[u8]> {
        bth::Packet::new_unchecked(&self.buffer.as_ref()[field::BTH])
    }

    /// The 16 reserved bytes after the BTH (transmitted 0).
    #[inline]
    pub fn reserved(&self) -> &[u8] {
        &self.buffer.as_ref()[field::RESERVED]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The BTH of the CNP as a writable view.
    #[inline]
    pub fn bth_mut(&mut self) -> bth::Packet<&mut [u8]> {
        bth::Packet::new_unchecked(&mut self.buffer.as_mut()[field::BTH])
    }

    /// The reserved bytes, writable.
    #[inline]
    pub fn reserved_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::RESERVED]
    }
}

/// The parsed form of a CNP: which QP to throttle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CnpRepr {
    /// DestQP: the QP (at the CNP's receiver, the reaction point) whose flow saw CE marks.
    pub dest_qp: u32,
    /// P_Key; 0xFFFF in the standard form.
    pub pkey: u16,
}

impl CnpRepr {
    /// A CNP for `dest_qp` with the default P_Key 0xFFFF.
    pub const fn new(dest_qp: u32) -> CnpRepr {
        CnpRepr {
            dest_qp,
            pkey: bth::DEFAULT_PKEY,
        }
    }

    /// Parses a CNP.
    ///
    /// # Errors
    /// [`Error::Truncated`] when fewer than 28 bytes are present, [`Error::BadTver`] when TVer ≠ 0,
    /// [`Error::BadField`] when the opcode is not 0x81.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<CnpRepr> {
        packet.check_len()?;
        let b = BthRepr::parse(&packet.bth())?;
        CnpRepr::from_bth(&b)
    }

    /// Extracts a CNP from a parsed BTH.
    ///
    /// # Errors
    /// [`Error::BadField`] when the opcode is not 0x81.
    pub fn from_bth(b: &BthRepr) -> Result<CnpRepr> {
        if b.opcode != Opcode::Cnp {
            return Err(Error::BadField);
        }
        Ok(CnpRepr {
            dest_qp: b.dest_qp,
            pkey: b.pkey,
        })
    }

    /// The standard-form BTH of this CNP.
    pub const fn bth(&self) -> BthRepr {
        BthRepr {
            opcode: Opcode::Cnp,
            solicited: false,
            mig_req: false,
            pad_cnt: 0,
            pkey: self.pkey,
            fecn: false,
            becn: true,
            dest_qp: self.dest_qp,
            ack_req: false,
            psn: Psn::new(0),
        }
    }

    /// The CNP as transport headers (for [`TransportRepr::emit`] and the full-frame emitters).
    pub const fn to_transport(&self) -> TransportRepr {
        TransportRepr::new(self.bth())
    }

    /// Length of the emitted headers: 28 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the standard-form CNP (BTH + 16 zero bytes) into the first 28 bytes of `packet`
    /// (panics if shorter). `dest_qp` is truncated to 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        self.bth().emit(&mut packet.bth_mut());
        packet.reserved_mut().fill(0);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // TV2 (ConnectX-4 Lx CNP, scapy test/contrib/roce.uts): BTH + 16 reserved bytes.
    static CNP_BYTES: [u8; 28] = [
        0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn test_parse_emit() {
        let p = Packet::new_checked(&CNP_BYTES[..]).unwrap();
        assert!(p.bth().becn());
        assert_eq!(p.reserved(), &[0u8; 16]);
        let r = CnpRepr::parse(&p).unwrap();
        assert_eq!(r, CnpRepr::new(0x118));
        let mut buf = [0xaau8; 28];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, CNP_BYTES);
    }

    #[test]
    fn test_errors() {
        assert_eq!(
            Packet::new_checked(&CNP_BYTES[..27]).unwrap_err(),
            Error::Truncated
        );
        let mut b = CNP_BYTES;
        b[0] = 0x11;
        assert_eq!(
            CnpRepr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::BadField)
        );
    }
}
