//! rdmesh placement header: 8 bytes at the start of the payload of every SEND packet between
//! two rdmesh QPs that negotiated selective repeat, so that the responder can place a SEND
//! packet that arrives out of order (IRN, Mittal et al., SIGCOMM'18, §3.3: "the receive WQE
//! sequence number and the offset in every packet").
//!
//! ```text
//! bytes 0-3: receive sequence number (u32, big-endian): messages that consumed a receive WQE
//!            before this one on the connection (SEND and RDMA WRITE with immediate, from 0)
//! bytes 4-7: byte offset of this packet's data in the message (u32, big-endian)
//! ```
//! The header counts as payload for IBTA (a SEND carries no RETH), so the packet stays a valid
//! IBTA packet; only a negotiated rdmesh peer strips it.

use super::{read_u32, write_u32, Result};

mod field {
    use crate::wire::Field;

    pub const RECV_SEQ: Field = 0..4;
    pub const OFFSET: Field = 4..8;
}

/// Length of the placement header in bytes.
pub const HEADER_LEN: usize = field::OFFSET.end;

fixed_header_view!("placement header");

impl<T: AsRef<[u8]>> Packet<T> {
    /// Receive sequence number (bytes 0–3).
    #[inline]
    pub fn recv_seq(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RECV_SEQ)
    }

    /// Byte offset in the message (bytes 4–7).
    #[inline]
    pub fn offset(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::OFFSET)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the receive sequence number.
    #[inline]
    pub fn set_recv_seq(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::RECV_SEQ, v)
    }

    /// Sets the byte offset.
    #[inline]
    pub fn set_offset(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::OFFSET, v)
    }
}

/// The parsed form of a placement header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PlacementRepr {
    /// Receive sequence number of the message (which receive WQE it lands in).
    pub recv_seq: u32,
    /// Byte offset of the packet's data in the message.
    pub offset: u32,
}

impl PlacementRepr {
    /// Parses a placement header. Every value is representable, so only the length is checked.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) when fewer than 8 bytes are present.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<PlacementRepr> {
        packet.check_len()?;
        Ok(PlacementRepr {
            recv_seq: packet.recv_seq(),
            offset: packet.offset(),
        })
    }

    /// Length of the emitted header: 8 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first 8 bytes of `packet` (panics if shorter).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_recv_seq(self.recv_seq);
        packet.set_offset(self.offset);
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::wire::Error;

    #[test]
    fn parse_emit() {
        let r = PlacementRepr {
            recv_seq: 0x0102_0304,
            offset: 0x1000,
        };
        let mut buf = [0u8; 10];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..8], &[1, 2, 3, 4, 0, 0, 0x10, 0]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(PlacementRepr::parse(&p), Ok(r));
        assert_eq!(p.payload().len(), 2);
        assert_eq!(
            Packet::new_checked(&buf[..7]).unwrap_err(),
            Error::Truncated
        );
    }
}
