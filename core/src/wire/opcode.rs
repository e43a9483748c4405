//! BTH opcodes for RC, UC and UD, and the extended headers each one carries.
//!
//! Values: Linux `include/rdma/ib_pack.h`; header sets and payload rules: Linux
//! `drivers/infiniband/sw/rxe/rxe_opcode.c`; IBTA vol. 1 §9.2, Table 38. The CNP opcode 0x81 is
//! RoCEv2 Annex A17 (as built by scapy `contrib/roce.py` and ConnectX hardware).

enum_with_unknown! {
    /// The 8-bit BTH OpCode: bits 7:5 name the transport, bits 4:0 the operation.
    pub enum Opcode(u8) {
        /// RC SEND First.
        RcSendFirst = 0x00,
        /// RC SEND Middle.
        RcSendMiddle = 0x01,
        /// RC SEND Last.
        RcSendLast = 0x02,
        /// RC SEND Last with Immediate.
        RcSendLastWithImmediate = 0x03,
        /// RC SEND Only.
        RcSendOnly = 0x04,
        /// RC SEND Only with Immediate.
        RcSendOnlyWithImmediate = 0x05,
        /// RC RDMA WRITE First.
        RcRdmaWriteFirst = 0x06,
        /// RC RDMA WRITE Middle.
        RcRdmaWriteMiddle = 0x07,
        /// RC RDMA WRITE Last.
        RcRdmaWriteLast = 0x08,
        /// RC RDMA WRITE Last with Immediate.
        RcRdmaWriteLastWithImmediate = 0x09,
        /// RC RDMA WRITE Only.
        RcRdmaWriteOnly = 0x0a,
        /// RC RDMA WRITE Only with Immediate.
        RcRdmaWriteOnlyWithImmediate = 0x0b,
        /// RC RDMA READ Request.
        RcRdmaReadRequest = 0x0c,
        /// RC RDMA READ Response First.
        RcRdmaReadResponseFirst = 0x0d,
        /// RC RDMA READ Response Middle.
        RcRdmaReadResponseMiddle = 0x0e,
        /// RC RDMA READ Response Last.
        RcRdmaReadResponseLast = 0x0f,
        /// RC RDMA READ Response Only.
        RcRdmaReadResponseOnly = 0x10,
        /// RC Acknowledge.
        RcAcknowledge = 0x11,
        /// RC ATOMIC Acknowledge.
        RcAtomicAcknowledge = 0x12,
        /// RC CmpSwap.
        RcCompareSwap = 0x13,
        /// RC FetchAdd.
        RcFetchAdd = 0x14,
        /// RC SEND Last with Invalidate.
        RcSendLastWithInvalidate = 0x16,
        /// RC SEND Only with Invalidate.
        RcSendOnlyWithInvalidate = 0x17,
        /// UC SEND First.
        UcSendFirst = 0x20,
        /// UC SEND Middle.
        UcSendMiddle = 0x21,
        /// UC SEND Last.
        UcSendLast = 0x22,
        /// UC SEND Last with Immediate.
        UcSendLastWithImmediate = 0x23,
        /// UC SEND Only.
        UcSendOnly = 0x24,
        /// UC SEND Only with Immediate.
        UcSendOnlyWithImmediate = 0x25,
        /// UC RDMA WRITE First.
        UcRdmaWriteFirst = 0x26,
        /// UC RDMA WRITE Middle.
        UcRdmaWriteMiddle = 0x27,
        /// UC RDMA WRITE Last.
        UcRdmaWriteLast = 0x28,
        /// UC RDMA WRITE Last with Immediate.
        UcRdmaWriteLastWithImmediate = 0x29,
        /// UC RDMA WRITE Only.
        UcRdmaWriteOnly = 0x2a,
        /// UC RDMA WRITE Only with Immediate.
        UcRdmaWriteOnlyWithImmediate = 0x2b,
        /// UD SEND Only.
        UdSendOnly = 0x64,
        /// UD SEND Only with Immediate.
        UdSendOnlyWithImmediate = 0x65,
        /// RoCEv2 Congestion Notification Packet (BECN set, 16 reserved bytes, no payload).
        Cnp = 0x81,
    }
}

/// The transport service named by bits 7:5 of the opcode (IBTA vol. 1 §9.2, Table 38).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Transport {
    /// Reliable Connected (000).
    Rc,
    /// Unreliable Connected (001).
    Uc,
    /// Reliable Datagram (010).
    Rd,
    /// Unreliable Datagram (011).
    Ud,
    /// Congestion notification (100), RoCEv2 CNP.
    Cnp,
    /// Reserved (101, 110).
    Reserved,
    /// Manufacturer specific (111).
    Vendor,
}

/// Which extended headers follow the BTH, in wire order
/// RETH/AtomicETH/DETH → ImmDt/IETH → AETH → AtomicAckETH (rxe_opcode.c), and what the packet carries after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HeaderSet {
    /// DETH (8 bytes): UD only.
    pub deth: bool,
    /// RETH (16 bytes).
    pub reth: bool,
    /// AtomicETH (28 bytes).
    pub atomic_eth: bool,
    /// ImmDt (4 bytes).
    pub immdt: bool,
    /// IETH (4 bytes).
    pub ieth: bool,
    /// AETH (4 bytes).
    pub aeth: bool,
    /// AtomicAckETH (8 bytes).
    pub atomic_ack_eth: bool,
    /// 16 reserved bytes of a CNP.
    pub cnp_reserved: bool,
    /// The opcode may carry payload.
    pub payload: bool,
}

impl HeaderSet {
    /// Total bytes of extended headers (everything between the BTH and the payload).
    pub const fn ext_len(&self) -> usize {
        (self.deth as usize) * 8
            + (self.reth as usize) * 16
            + (self.atomic_eth as usize) * 28
            + (self.immdt as usize) * 4
            + (self.ieth as usize) * 4
            + (self.aeth as usize) * 4
            + (self.atomic_ack_eth as usize) * 8
            + (self.cnp_reserved as usize) * 16
    }
}

const fn hs() -> HeaderSet {
    HeaderSet {
        deth: false,
        reth: false,
        atomic_eth: false,
        immdt: false,
        ieth: false,
        aeth: false,
        atomic_ack_eth: false,
        cnp_reserved: false,
        payload: false,
    }
}

impl Opcode {
    /// The transport named by bits 7:5.
    pub fn transport(self) -> Transport {
        match u8::from(self) >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            7 => Transport::Vendor,
            _ => Transport::Reserved,
        }
    }

    /// The extended headers this opcode carries, or `None` for reserved/unknown opcodes
    /// (RD and vendor opcodes included: rdmesh does not implement them).
    pub fn header_set(self) -> Option<HeaderSet> {
        use Opcode::*;
        let h = hs();
        let data = HeaderSet { payload: true, ..h };
        Some(match self {
            RcSendFirst
            | RcSendMiddle
            | RcSendLast
            | RcSendOnly
            | RcRdmaWriteMiddle
            | RcRdmaWriteLast
            | UcSendFirst
            | UcSendMiddle
            | UcSendLast
            | UcSendOnly
            | UcRdmaWriteMiddle
            | UcRdmaWriteLast
            | RcRdmaReadResponseMiddle => data,
            RcSendLastWithImmediate
            | RcSendOnlyWithImmediate
            | RcRdmaWriteLastWithImmediate
            | UcSendLastWithImmediate
            | UcSendOnlyWithImmediate
            | UcRdmaWriteLastWithImmediate => HeaderSet {
                immdt: true,
                ..data
            },
            RcRdmaWriteFirst | RcRdmaWriteOnly | UcRdmaWriteFirst | UcRdmaWriteOnly => {
                HeaderSet { reth: true, ..data }
            }
            RcRdmaWriteOnlyWithImmediate | UcRdmaWriteOnlyWithImmediate => HeaderSet {
                reth: true,
                immdt: true,
                ..data
            },
            RcRdmaReadRequest => HeaderSet { reth: true, ..h },
            RcRdmaReadResponseFirst | RcRdmaReadResponseLast | RcRdmaReadResponseOnly => {
                HeaderSet { aeth: true, ..data }
            }
            RcAcknowledge => HeaderSet { aeth: true, ..h },
            RcAtomicAcknowledge => HeaderSet {
                aeth: true,
                atomic_ack_eth: true,
                ..h
            },
            RcCompareSwap | RcFetchAdd => HeaderSet {
                atomic_eth: true,
                ..h
            },
            RcSendLastWithInvalidate | RcSendOnlyWithInvalidate => HeaderSet { ieth: true, ..data },
            UdSendOnly => HeaderSet { deth: true, ..data },
            UdSendOnlyWithImmediate => HeaderSet {
                deth: true,
                immdt: true,
                ..data
            },
            Cnp => HeaderSet {
                cnp_reserved: true,
                ..h
            },
            Unknown(_) => return None,
        })
    }

    /// First packet of a multi-packet message (SEND/WRITE First, READ Response First).
    pub fn is_first(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            RcSendFirst
                | RcRdmaWriteFirst
                | RcRdmaReadResponseFirst
                | UcSendFirst
                | UcRdmaWriteFirst
        )
    }

    /// Middle packet of a multi-packet message.
    pub fn is_middle(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            RcSendMiddle
                | RcRdmaWriteMiddle
                | RcRdmaReadResponseMiddle
                | UcSendMiddle
                | UcRdmaWriteMiddle
        )
    }

    /// Last packet of a multi-packet message.
    pub fn is_last(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            RcSendLast
                | RcSendLastWithImmediate
                | RcSendLastWithInvalidate
                | RcRdmaWriteLast
                | RcRdmaWriteLastWithImmediate
                | RcRdmaReadResponseLast
                | UcSendLast
                | UcSendLastWithImmediate
                | UcRdmaWriteLast
                | UcRdmaWriteLastWithImmediate
        )
    }

    /// The only packet of a message (including READ request, atomics and UD sends).
    pub fn is_only(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            RcSendOnly
                | RcSendOnlyWithImmediate
                | RcSendOnlyWithInvalidate
                | RcRdmaWriteOnly
                | RcRdmaWriteOnlyWithImmediate
                | RcRdmaReadRequest
                | RcRdmaReadResponseOnly
                | RcCompareSwap
                | RcFetchAdd
                | UcSendOnly
                | UcSendOnlyWithImmediate
                | UcRdmaWriteOnly
                | UcRdmaWriteOnlyWithImmediate
                | UdSendOnly
                | UdSendOnlyWithImmediate
        )
    }

    /// A SEND of any kind (consumes a receive WQE at the responder).
    pub fn is_send(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            RcSendFirst
                | RcSendMiddle
                | RcSendLast
                | RcSendLastWithImmediate
                | RcSendOnly
                | RcSendOnlyWithImmediate
                | RcSendLastWithInvalidate
                | RcSendOnlyWithInvalidate
                | UcSendFirst
                | UcSendMiddle
                | UcSendLast
                | UcSendLastWithImmediate
                | UcSendOnly
                | UcSendOnlyWithImmediate
                | UdSendOnly
                | UdSendOnlyWithImmediate
        )
    }

    /// An RDMA WRITE of any kind.
    pub fn is_write(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            RcRdmaWriteFirst
                | RcRdmaWriteMiddle
                | RcRdmaWriteLast
                | RcRdmaWriteLastWithImmediate
                | RcRdmaWriteOnly
                | RcRdmaWriteOnlyWithImmediate
                | UcRdmaWriteFirst
                | UcRdmaWriteMiddle
                | UcRdmaWriteLast
                | UcRdmaWriteLastWithImmediate
                | UcRdmaWriteOnly
                | UcRdmaWriteOnlyWithImmediate
        )
    }

    /// An RDMA READ response of any kind.
    pub fn is_read_response(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            RcRdmaReadResponseFirst
                | RcRdmaReadResponseMiddle
                | RcRdmaReadResponseLast
                | RcRdmaReadResponseOnly
        )
    }

    /// A packet the requester sends (as opposed to a response: ACK, READ response, atomic ACK).
    pub fn is_request(self) -> bool {
        !matches!(
            self,
            Opcode::RcAcknowledge | Opcode::RcAtomicAcknowledge | Opcode::Cnp
        ) && !self.is_read_response()
            && self.header_set().is_some()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn roundtrip_every_value() {
        for v in 0..=255u8 {
            assert_eq!(u8::from(Opcode::from(v)), v);
        }
    }

    #[test]
    fn header_lengths() {
        assert_eq!(
            Opcode::RcRdmaWriteOnlyWithImmediate
                .header_set()
                .unwrap()
                .ext_len(),
            20
        );
        assert_eq!(
            Opcode::RcAtomicAcknowledge.header_set().unwrap().ext_len(),
            12
        );
        assert_eq!(Opcode::RcCompareSwap.header_set().unwrap().ext_len(), 28);
        assert_eq!(
            Opcode::UdSendOnlyWithImmediate
                .header_set()
                .unwrap()
                .ext_len(),
            12
        );
        assert_eq!(Opcode::Cnp.header_set().unwrap().ext_len(), 16);
        assert!(Opcode::from(0x15).header_set().is_none());
        assert_eq!(Opcode::from(0x81).transport(), Transport::Cnp);
    }
}
