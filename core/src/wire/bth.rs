//! Base Transport Header: 12 bytes, big-endian (IBTA vol. 1 §9.2; rxe_hdr.h `struct rxe_bth`).
//!
//! ```text
//!  byte 0     byte 1            bytes 2-3   byte 4            bytes 5-7   byte 8       bytes 9-11
//! +--------+-----------------+-----------+-----------------+-----------+------------+----------+
//! | OpCode | SE|M|PadCnt|TVer|   P_Key   | F|B|resv6       |  DestQP   | A|resv7     |   PSN    |
//! +--------+-----------------+-----------+-----------------+-----------+------------+----------+
//! ```

use super::{read_u16, read_u24, write_u16, write_u24, Error, Opcode, Psn, Result};

mod field {
    use crate::wire::Field;

    pub const OPCODE: usize = 0;
    /// SE (0x80), M (0x40), PadCnt (0x30), TVer (0x0F).
    pub const FLAGS: usize = 1;
    pub const PKEY: Field = 2..4;
    /// FECN (0x80), BECN (0x40), resv6 (0x3F). Masked to 0xFF in the ICRC.
    pub const FECN_BECN: usize = 4;
    pub const DEST_QP: Field = 5..8;
    /// AckReq (0x80), resv7 (0x7F).
    pub const ACK_REQ: usize = 8;
    pub const PSN: Field = 9..12;

    pub const SE: u8 = 0x80;
    pub const MIG_REQ: u8 = 0x40;
    pub const PAD_CNT_MASK: u8 = 0x30;
    pub const PAD_CNT_SHIFT: u32 = 4;
    pub const TVER_MASK: u8 = 0x0f;
    pub const FECN: u8 = 0x80;
    pub const BECN: u8 = 0x40;
    pub const RESV6_MASK: u8 = 0x3f;
    pub const ACK_REQ_BIT: u8 = 0x80;
    pub const RESV7_MASK: u8 = 0x7f;
}

/// Length of a BTH in bytes.
pub const HEADER_LEN: usize = field::PSN.end;

/// Offset of the byte (FECN, BECN, resv6) that the ICRC computation replaces with 0xFF.
pub const ICRC_MASKED_BYTE: usize = field::FECN_BECN;

/// Default P_Key (full member of the default partition), `IB_DEFAULT_PKEY_FULL`.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// Largest QP number a 24-bit DestQP can hold.
pub const MAX_QPN: u32 = 0x00ff_ffff;

/// A read/write view of a BTH at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer and checks that it holds at least [`HEADER_LEN`] bytes.
    ///
    /// # Errors
    /// [`Error::Truncated`] when the buffer is shorter than 12 bytes.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds a whole BTH; afterwards no accessor panics.
    ///
    /// # Errors
    /// [`Error::Truncated`] when the buffer is shorter than 12 bytes.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// OpCode (byte 0).
    #[inline]
    pub fn opcode(&self) -> Opcode {
        Opcode::from(self.buffer.as_ref()[field::OPCODE])
    }

    /// SE, solicited event (byte 1 bit 7).
    #[inline]
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::SE != 0
    }

    /// M, migration request (byte 1 bit 6).
    #[inline]
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::MIG_REQ != 0
    }

    /// PadCnt: number of pad bytes (0..=3) between payload and ICRC (byte 1 bits 5:4).
    #[inline]
    pub fn pad_cnt(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] & field::PAD_CNT_MASK) >> field::PAD_CNT_SHIFT
    }

    /// TVer, transport header version (byte 1 bits 3:0); must be 0.
    #[inline]
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & field::TVER_MASK
    }

    /// P_Key (bytes 2–3).
    #[inline]
    pub fn pkey(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::PKEY)
    }

    /// FECN (byte 4 bit 7).
    #[inline]
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & field::FECN != 0
    }

    /// BECN (byte 4 bit 6); set in CNPs.
    #[inline]
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & field::BECN != 0
    }

    /// The six reserved bits of byte 4 (transmitted 0, ignored on receive).
    #[inline]
    pub fn resv6(&self) -> u8 {
        self.buffer.as_ref()[field::FECN_BECN] & field::RESV6_MASK
    }

    /// Destination QP number, 24 bits (bytes 5–7).
    #[inline]
    pub fn dest_qp(&self) -> u32 {
        read_u24(self.buffer.as_ref(), field::DEST_QP)
    }

    /// AckReq (byte 8 bit 7).
    #[inline]
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & field::ACK_REQ_BIT != 0
    }

    /// The seven reserved bits of byte 8 (transmitted 0, ignored on receive; covered by the ICRC).
    #[inline]
    pub fn resv7(&self) -> u8 {
        self.buffer.as_ref()[field::ACK_REQ] & field::RESV7_MASK
    }

    /// PSN, 24 bits (bytes 9–11).
    #[inline]
    pub fn psn(&self) -> Psn {
        Psn::new(read_u24(self.buffer.as_ref(), field::PSN))
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The bytes after the BTH (extended headers, payload, pad, ICRC), outliving the view.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    fn set_flag(&mut self, idx: usize, bit: u8, on: bool) {
        let b = &mut self.buffer.as_mut()[idx];
        *b = if on { *b | bit } else { *b & !bit };
    }

    /// Sets the OpCode.
    #[inline]
    pub fn set_opcode(&mut self, v: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = v.into();
    }

    /// Sets SE.
    #[inline]
    pub fn set_solicited(&mut self, v: bool) {
        self.set_flag(field::FLAGS, field::SE, v)
    }

    /// Sets M (MigReq).
    #[inline]
    pub fn set_mig_req(&mut self, v: bool) {
        self.set_flag(field::FLAGS, field::MIG_REQ, v)
    }

    /// Sets PadCnt from the low 2 bits of `v`.
    #[inline]
    pub fn set_pad_cnt(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !field::PAD_CNT_MASK) | ((v << field::PAD_CNT_SHIFT) & field::PAD_CNT_MASK);
    }

    /// Sets TVer from the low 4 bits of `v`.
    #[inline]
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !field::TVER_MASK) | (v & field::TVER_MASK);
    }

    /// Sets the P_Key.
    #[inline]
    pub fn set_pkey(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::PKEY, v)
    }

    /// Sets FECN.
    #[inline]
    pub fn set_fecn(&mut self, v: bool) {
        self.set_flag(field::FECN_BECN, field::FECN, v)
    }

    /// Sets BECN.
    #[inline]
    pub fn set_becn(&mut self, v: bool) {
        self.set_flag(field::FECN_BECN, field::BECN, v)
    }

    /// Sets the reserved bits of byte 4 (low 6 bits of `v`).
    #[inline]
    pub fn set_resv6(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::FECN_BECN];
        *b = (*b & !field::RESV6_MASK) | (v & field::RESV6_MASK);
    }

    /// Sets the DestQP from the low 24 bits of `v`.
    #[inline]
    pub fn set_dest_qp(&mut self, v: u32) {
        write_u24(self.buffer.as_mut(), field::DEST_QP, v)
    }

    /// Sets AckReq.
    #[inline]
    pub fn set_ack_req(&mut self, v: bool) {
        self.set_flag(field::ACK_REQ, field::ACK_REQ_BIT, v)
    }

    /// Sets the reserved bits of byte 8 (low 7 bits of `v`).
    #[inline]
    pub fn set_resv7(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::ACK_REQ];
        *b = (*b & !field::RESV7_MASK) | (v & field::RESV7_MASK);
    }

    /// Sets the PSN.
    #[inline]
    pub fn set_psn(&mut self, v: Psn) {
        write_u24(self.buffer.as_mut(), field::PSN, v.value())
    }

    /// The bytes after the BTH, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

impl BthRepr {
    /// Parses a BTH. Reserved bits are ignored (IBTA: "ignored by the receiver"); any opcode is
    /// accepted here (walking the extended headers is [`TransportRepr`](super::TransportRepr)'s job).
    ///
    /// # Errors
    /// [`Error::Truncated`] for a short buffer, [`Error::BadTver`] when TVer ≠ 0
    /// (rxe_recv.c `hdr_check` drops such packets).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<BthRepr> {
        packet.check_len()?;
        if packet.tver() != 0 {
            return Err(Error::BadTver);
        }
        Ok(BthRepr {
            opcode: packet.opcode(),
            solicited: packet.solicited(),
            mig_req: packet.mig_req(),
            pad_cnt: packet.pad_cnt(),
            pkey: packet.pkey(),
            fecn: packet.fecn(),
            becn: packet.becn(),
            dest_qp: packet.dest_qp(),
            ack_req: packet.ack_req(),
            psn: packet.psn(),
        })
    }

    /// Length of the emitted header: 12 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Checks the values that do not fit their fields.
    ///
    /// # Errors
    /// [`Error::BadField`] when `pad_cnt > 3` or `dest_qp > 0xFF_FFFF`.
    pub fn check(&self) -> Result<()> {
        if self.pad_cnt > 3 || self.dest_qp > MAX_QPN {
            Err(Error::BadField)
        } else {
            Ok(())
        }
    }

    /// Writes the BTH into the first 12 bytes of `packet`: TVer 0, reserved bits 0.
    /// Out-of-range `pad_cnt`/`dest_qp` are truncated to their field width (see [`BthRepr::check`]).
    ///
    /// Panics if the buffer is shorter than 12 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        let flags = if self.solicited { field::SE } else { 0 }
            | if self.mig_req { field::MIG_REQ } else { 0 }
            | ((self.pad_cnt << field::PAD_CNT_SHIFT) & field::PAD_CNT_MASK);
        let fb = if self.fecn { field::FECN } else { 0 } | if self.becn { field::BECN } else { 0 };
        let buf = packet.buffer.as_mut();
        buf[field::OPCODE] = self.opcode.into();
        buf[field::FLAGS] = flags;
        write_u16(buf, field::PKEY, self.pkey);
        buf[field::FECN_BECN] = fb;
        write_u24(buf, field::DEST_QP, self.dest_qp);
        buf[field::ACK_REQ] = if self.ack_req { field::ACK_REQ_BIT } else { 0 };
        write_u24(buf, field::PSN, self.psn.value());
    }
}

/// The parsed, validated form of a BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BthRepr {
    /// OpCode (byte 0).
    pub opcode: Opcode,
    /// SE: solicited event (byte 1 bit 7).
    pub solicited: bool,
    /// M: MigReq (byte 1 bit 6); rxe sends 0.
    pub mig_req: bool,
    /// PadCnt: 0..=3 pad bytes after the payload (byte 1 bits 5:4).
    pub pad_cnt: u8,
    /// P_Key (bytes 2–3); default 0xFFFF.
    pub pkey: u16,
    /// FECN (byte 4 bit 7).
    pub fecn: bool,
    /// BECN (byte 4 bit 6); set in CNPs.
    pub becn: bool,
    /// Destination QP number, 24 bits (bytes 5–7).
    pub dest_qp: u32,
    /// AckReq (byte 8 bit 7).
    pub ack_req: bool,
    /// PSN, 24 bits (bytes 9–11).
    pub psn: Psn,
}

#[cfg(test)]
mod test {
    use super::*;

    // TV1 BTH (scapy test/contrib/roce.uts "RoCE layer"): UC SEND_ONLY, M=1, PadCnt=2,
    // P_Key 0xFFFF, DestQP 211, PSN 13571856.
    static BTH_BYTES: [u8; 12] = [
        0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3, 0x00, 0xcf, 0x17, 0x10,
    ];

    fn repr() -> BthRepr {
        BthRepr {
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
        }
    }

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&BTH_BYTES[..]).unwrap();
        assert_eq!(p.opcode(), Opcode::UcSendOnly);
        assert!(!p.solicited());
        assert!(p.mig_req());
        assert_eq!(p.pad_cnt(), 2);
        assert_eq!(p.tver(), 0);
        assert_eq!(p.pkey(), 0xffff);
        assert!(!p.fecn() && !p.becn());
        assert_eq!(p.resv6(), 0);
        assert_eq!(p.dest_qp(), 211);
        assert!(!p.ack_req());
        assert_eq!(p.resv7(), 0);
        assert_eq!(p.psn(), Psn::new(13_571_856));
    }

    #[test]
    fn test_construct() {
        let mut buf = [0xa5u8; 12];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_opcode(Opcode::UcSendOnly);
        p.set_solicited(false);
        p.set_mig_req(true);
        p.set_pad_cnt(2);
        p.set_tver(0);
        p.set_pkey(0xffff);
        p.set_fecn(false);
        p.set_becn(false);
        p.set_resv6(0);
        p.set_dest_qp(211);
        p.set_ack_req(false);
        p.set_resv7(0);
        p.set_psn(Psn::new(13_571_856));
        assert_eq!(buf, BTH_BYTES);
    }

    #[test]
    fn test_parse_emit() {
        let p = Packet::new_checked(&BTH_BYTES[..]).unwrap();
        assert_eq!(BthRepr::parse(&p).unwrap(), repr());
        let mut buf = [0xffu8; 12];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BTH_BYTES);
    }

    #[test]
    fn test_flags_and_reserved() {
        let mut b = BTH_BYTES;
        b[4] = 0xff; // FECN, BECN, resv6 all set
        b[8] = 0xff; // AckReq + resv7
        let p = Packet::new_checked(&b[..]).unwrap();
        let r = BthRepr::parse(&p).unwrap();
        assert!(r.fecn && r.becn && r.ack_req);
        assert_eq!(p.resv6(), 0x3f);
        assert_eq!(p.resv7(), 0x7f);
        let mut out = [0u8; 12];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[4], 0xc0);
        assert_eq!(out[8], 0x80);
    }

    #[test]
    fn test_bad_tver() {
        let mut b = BTH_BYTES;
        b[1] |= 0x01;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(BthRepr::parse(&p), Err(Error::BadTver));
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&BTH_BYTES[..11]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn test_check() {
        assert_eq!(repr().check(), Ok(()));
        assert_eq!(
            BthRepr {
                pad_cnt: 4,
                ..repr()
            }
            .check(),
            Err(Error::BadField)
        );
        assert_eq!(
            BthRepr {
                dest_qp: 1 << 24,
                ..repr()
            }
            .check(),
            Err(Error::BadField)
        );
    }
}
