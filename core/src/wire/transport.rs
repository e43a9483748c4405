//! The InfiniBand transport headers of one RoCEv2 packet: BTH plus the extended headers its
//! opcode names, in wire order (rxe_opcode.c). This is the UDP payload up to the IB payload.
//!
//! Wire order after the BTH: DETH, RETH, AtomicETH, ImmDt, IETH, AETH, AtomicAckETH, and for a
//! CNP the 16 reserved bytes (IBTA vol. 1 §9.2–9.3; the header set per opcode is
//! [`Opcode::header_set`](super::Opcode::header_set)).

use super::aeth::{self, AethRepr};
use super::atomic_ack_eth::{self, AtomicAckEthRepr};
use super::atomic_eth::{self, AtomicEthRepr};
use super::bth::{self, BthRepr};
use super::deth::{self, DethRepr};
use super::ieth::{self, IethRepr};
use super::immdt::{self, ImmDtRepr};
use super::reth::{self, RethRepr};
use super::{cnp, Error, HeaderSet, Result};

/// BTH and extended headers of one packet. Exactly the headers `bth.opcode.header_set()` names
/// are `Some`; `parse` guarantees it and `emit` requires it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TransportRepr {
    /// Base Transport Header.
    pub bth: BthRepr,
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// RETH (WRITE First/Only, READ request).
    pub reth: Option<RethRepr>,
    /// AtomicETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// ImmDt: the 32-bit immediate as a big-endian number read from the wire.
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
    /// AETH (ACK, READ responses, atomic ACK).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH: the original remote data.
    pub atomic_ack: Option<u64>,
}

impl TransportRepr {
    /// A BTH with no extended headers; set the `Option` fields the opcode needs afterwards.
    pub const fn new(bth: BthRepr) -> TransportRepr {
        TransportRepr {
            bth,
            deth: None,
            reth: None,
            atomic_eth: None,
            imm: None,
            ieth: None,
            aeth: None,
            atomic_ack: None,
        }
    }

    /// Parses the BTH and exactly the extended headers its opcode names from the start of `buf`
    /// (a UDP payload). Returns the repr and the number of header bytes consumed (BTH through the
    /// last extended header; the payload starts there).
    ///
    /// # Errors
    /// - [`Error::Truncated`]: `buf` is shorter than the BTH or than the headers the opcode names.
    /// - [`Error::BadTver`]: BTH TVer ≠ 0.
    /// - [`Error::UnknownOpcode`]: a reserved, RD, vendor or otherwise unknown opcode.
    pub fn parse(buf: &[u8]) -> Result<(TransportRepr, usize)> {
        let bth = BthRepr::parse(&bth::Packet::new_checked(buf)?)?;
        let hs = bth.opcode.header_set().ok_or(Error::UnknownOpcode)?;
        let total = bth::HEADER_LEN + hs.ext_len();
        if buf.len() < total {
            return Err(Error::Truncated);
        }
        let mut r = TransportRepr::new(bth);
        let mut off = bth::HEADER_LEN;
        if hs.deth {
            r.deth = Some(DethRepr::parse(&deth::Packet::new_checked(&buf[off..])?)?);
            off += deth::HEADER_LEN;
        }
        if hs.reth {
            r.reth = Some(RethRepr::parse(&reth::Packet::new_checked(&buf[off..])?)?);
            off += reth::HEADER_LEN;
        }
        if hs.atomic_eth {
            let p = atomic_eth::Packet::new_checked(&buf[off..])?;
            r.atomic_eth = Some(AtomicEthRepr::parse(&p)?);
            off += atomic_eth::HEADER_LEN;
        }
        if hs.immdt {
            r.imm = Some(ImmDtRepr::parse(&immdt::Packet::new_checked(&buf[off..])?)?.imm);
            off += immdt::HEADER_LEN;
        }
        if hs.ieth {
            r.ieth = Some(IethRepr::parse(&ieth::Packet::new_checked(&buf[off..])?)?.rkey);
            off += ieth::HEADER_LEN;
        }
        if hs.aeth {
            r.aeth = Some(AethRepr::parse(&aeth::Packet::new_checked(&buf[off..])?)?);
            off += aeth::HEADER_LEN;
        }
        if hs.atomic_ack_eth {
            let p = atomic_ack_eth::Packet::new_checked(&buf[off..])?;
            r.atomic_ack = Some(AtomicAckEthRepr::parse(&p)?.orig_data);
            off += atomic_ack_eth::HEADER_LEN;
        }
        if hs.cnp_reserved {
            off += cnp::RESERVED_LEN;
        }
        debug_assert_eq!(off, total);
        Ok((r, total))
    }

    /// The header set the `Option` fields describe (`cnp_reserved` follows the opcode,
    /// `payload` is always `false`).
    pub fn present(&self) -> HeaderSet {
        HeaderSet {
            deth: self.deth.is_some(),
            reth: self.reth.is_some(),
            atomic_eth: self.atomic_eth.is_some(),
            immdt: self.imm.is_some(),
            ieth: self.ieth.is_some(),
            aeth: self.aeth.is_some(),
            atomic_ack_eth: self.atomic_ack.is_some(),
            cnp_reserved: self.bth.opcode == super::Opcode::Cnp,
            payload: false,
        }
    }

    /// Bytes [`emit`](Self::emit) writes: 12 (BTH) + the extended headers present
    /// (+ 16 for a CNP).
    pub fn header_len(&self) -> usize {
        bth::HEADER_LEN + self.present().ext_len()
    }

    /// Checks that the `Option` fields match the opcode's header set and every value fits its
    /// field.
    ///
    /// # Errors
    /// [`Error::UnknownOpcode`] for an opcode without a header set; [`Error::BadField`] when the
    /// extended headers disagree with the opcode, `pad_cnt > 3`, or a 24-bit field overflows.
    pub fn check(&self) -> Result<()> {
        let hs = self.bth.opcode.header_set().ok_or(Error::UnknownOpcode)?;
        let present = HeaderSet {
            payload: hs.payload,
            ..self.present()
        };
        if present != hs {
            return Err(Error::BadField);
        }
        self.bth.check()?;
        if let Some(d) = self.deth {
            d.check()?;
        }
        if let Some(a) = self.aeth {
            a.check()?;
        }
        Ok(())
    }

    /// Writes the BTH and the extended headers into the start of `buf` (CNP reserved bytes as
    /// zeros) and returns the number of bytes written ([`header_len`](Self::header_len)).
    /// `bth.pad_cnt` is written as given.
    ///
    /// # Errors
    /// The errors of [`check`](Self::check), and [`Error::Truncated`] when `buf` is shorter than
    /// `header_len()`. Nothing is written on error.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        self.check()?;
        let total = self.header_len();
        if buf.len() < total {
            return Err(Error::Truncated);
        }
        self.bth.emit(&mut bth::Packet::new_unchecked(&mut buf[..]));
        let mut off = bth::HEADER_LEN;
        if let Some(d) = &self.deth {
            d.emit(&mut deth::Packet::new_unchecked(&mut buf[off..]));
            off += deth::HEADER_LEN;
        }
        if let Some(r) = &self.reth {
            r.emit(&mut reth::Packet::new_unchecked(&mut buf[off..]));
            off += reth::HEADER_LEN;
        }
        if let Some(a) = &self.atomic_eth {
            a.emit(&mut atomic_eth::Packet::new_unchecked(&mut buf[off..]));
            off += atomic_eth::HEADER_LEN;
        }
        if let Some(imm) = self.imm {
            ImmDtRepr { imm }.emit(&mut immdt::Packet::new_unchecked(&mut buf[off..]));
            off += immdt::HEADER_LEN;
        }
        if let Some(rkey) = self.ieth {
            IethRepr { rkey }.emit(&mut ieth::Packet::new_unchecked(&mut buf[off..]));
            off += ieth::HEADER_LEN;
        }
        if let Some(a) = &self.aeth {
            a.emit(&mut aeth::Packet::new_unchecked(&mut buf[off..]));
            off += aeth::HEADER_LEN;
        }
        if let Some(orig_data) = self.atomic_ack {
            AtomicAckEthRepr { orig_data }
                .emit(&mut atomic_ack_eth::Packet::new_unchecked(&mut buf[off..]));
            off += atomic_ack_eth::HEADER_LEN;
        }
        if self.bth.opcode == super::Opcode::Cnp {
            buf[off..off + cnp::RESERVED_LEN].fill(0);
            off += cnp::RESERVED_LEN;
        }
        debug_assert_eq!(off, total);
        Ok(total)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::wire::{Opcode, Psn, Syndrome};

    fn bth(opcode: Opcode) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_cnt: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x11,
            ack_req: true,
            psn: Psn::new(5_557_091),
        }
    }

    // TV3 (Soft-RoCE RDMA READ request) BTH + RETH.
    static READ_REQ: [u8; 28] = [
        0x0c, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x54, 0xcb, 0x63, 0x00, 0x00, 0x7f,
        0xee, 0x26, 0x0f, 0xb0, 0x00, 0x00, 0x00, 0x02, 0xb8, 0x00, 0x01, 0x00, 0x00,
    ];

    #[test]
    fn read_request() {
        let (r, n) = TransportRepr::parse(&READ_REQ).unwrap();
        assert_eq!(n, 28);
        assert_eq!(r.bth, bth(Opcode::RcRdmaReadRequest));
        assert_eq!(
            r.reth,
            Some(RethRepr {
                va: 0x7fee_260f_b000,
                rkey: 0x2b8,
                dma_len: 65536
            })
        );
        assert_eq!(r.header_len(), 28);
        let mut out = [0u8; 28];
        assert_eq!(r.emit(&mut out), Ok(28));
        assert_eq!(out, READ_REQ);
        assert_eq!(r.emit(&mut out[..27]), Err(Error::Truncated));
        for cut in 0..28 {
            assert_eq!(
                TransportRepr::parse(&READ_REQ[..cut]).unwrap_err(),
                Error::Truncated
            );
        }
    }

    #[test]
    fn every_header_set_round_trips() {
        for v in 0..=255u8 {
            let op = Opcode::from(v);
            let Some(hs) = op.header_set() else {
                let mut b = READ_REQ;
                b[0] = v;
                assert_eq!(TransportRepr::parse(&b), Err(Error::UnknownOpcode));
                continue;
            };
            let mut r = TransportRepr::new(bth(op));
            if hs.deth {
                r.deth = Some(DethRepr {
                    qkey: 0x8001_0000,
                    src_qp: 7,
                });
            }
            if hs.reth {
                r.reth = Some(RethRepr {
                    va: 1,
                    rkey: 2,
                    dma_len: 3,
                });
            }
            if hs.atomic_eth {
                r.atomic_eth = Some(AtomicEthRepr {
                    va: 8,
                    rkey: 9,
                    swap_add: 10,
                    compare: 11,
                });
            }
            if hs.immdt {
                r.imm = Some(0xabcd);
            }
            if hs.ieth {
                r.ieth = Some(0x1234);
            }
            if hs.aeth {
                r.aeth = Some(AethRepr {
                    syndrome: Syndrome::ACK_UNLIMITED,
                    msn: 42,
                });
            }
            if hs.atomic_ack_eth {
                r.atomic_ack = Some(99);
            }
            let mut buf = [0x5au8; 64];
            let n = r.emit(&mut buf).unwrap();
            assert_eq!(n, 12 + hs.ext_len());
            assert_eq!(TransportRepr::parse(&buf[..n]), Ok((r, n)));
            assert_eq!(
                TransportRepr::parse(&buf[..n - 1]),
                Err(Error::Truncated),
                "{op:?}"
            );
        }
    }

    #[test]
    fn emit_rejects_mismatched_headers() {
        let mut buf = [0u8; 64];
        // READ request without RETH.
        let r = TransportRepr::new(bth(Opcode::RcRdmaReadRequest));
        assert_eq!(r.emit(&mut buf), Err(Error::BadField));
        // SEND with a stray AETH.
        let mut s = TransportRepr::new(bth(Opcode::RcSendOnly));
        s.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK_UNLIMITED,
            msn: 0,
        });
        assert_eq!(s.emit(&mut buf), Err(Error::BadField));
        // Unknown opcode.
        let u = TransportRepr::new(bth(Opcode::Unknown(0x15)));
        assert_eq!(u.emit(&mut buf), Err(Error::UnknownOpcode));
        // Pad count out of range.
        let mut p = TransportRepr::new(bth(Opcode::RcSendOnly));
        p.bth.pad_cnt = 4;
        assert_eq!(p.emit(&mut buf), Err(Error::BadField));
        // MSN over 24 bits.
        let mut a = TransportRepr::new(bth(Opcode::RcAcknowledge));
        a.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK_UNLIMITED,
            msn: 1 << 24,
        });
        assert_eq!(a.emit(&mut buf), Err(Error::BadField));
        assert_eq!(buf, [0u8; 64], "nothing written on error");
    }

    #[test]
    fn bad_tver() {
        let mut b = READ_REQ;
        b[1] = 0x01;
        assert_eq!(TransportRepr::parse(&b), Err(Error::BadTver));
    }
}
