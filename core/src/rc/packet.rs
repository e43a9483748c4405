//! Assembling outgoing RC packets (BTH + extended headers + payload + pad) into the caller's
//! buffer, and the receive-side header checks shared by requester and responder.
//!
//! Layout: IBTA vol. 1 §9.2 (BTH), §9.3 (extended headers), §9.2.1.1 (PadCnt: payload padded
//! with zeros to a multiple of 4 bytes). The ICRC is not written here: it covers the IP/UDP
//! headers, so the host appends it (IBTA vol. 1 Annex A17.3.3).

use heapless::Deque;

use super::mtu::Mtu;
use crate::wire::{bth, BthRepr, Opcode, Psn, TransportRepr};

/// Largest extended-header total an RC packet built here carries: RETH (16) + ImmDt (4).
const MAX_EXT_LEN: usize = 20;

/// Size in bytes of the buffer `RcQp::poll_transmit` needs for any packet at path MTU `mtu`:
/// BTH (12) + RETH (16) + ImmDt (4) + `mtu` payload bytes + 3 pad bytes. The host adds 4 bytes
/// of ICRC and its IP/UDP headers on top.
pub const fn max_packet_len(mtu: Mtu) -> usize {
    bth::HEADER_LEN + MAX_EXT_LEN + mtu.bytes() as usize + 3
}

/// Addressing shared by every packet of one QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Path {
    /// This QP's number.
    pub(crate) local_qpn: u32,
    /// The peer's QP number (BTH DestQP of every packet sent).
    pub(crate) remote_qpn: u32,
    /// Path MTU.
    pub(crate) mtu: Mtu,
    /// P_Key of every BTH sent.
    pub(crate) pkey: u16,
}

impl Path {
    /// A BTH to the peer with no pad; `emit_packet` fills in PadCnt.
    pub(crate) fn bth(&self, opcode: Opcode, psn: Psn, ack_req: bool, solicited: bool) -> BthRepr {
        BthRepr {
            opcode,
            solicited,
            mig_req: false,
            pad_cnt: 0,
            pkey: self.pkey,
            fecn: false,
            becn: false,
            dest_qp: self.remote_qpn,
            ack_req,
            psn,
        }
    }

    /// `true` when a received BTH is addressed to this QP: DestQP equal and P_Key matching
    /// (rxe_verbs.h `pkey_match`: low 15 bits equal and non-zero, at least one full member).
    pub(crate) fn accepts(&self, hdr: &TransportRepr) -> bool {
        hdr.bth.dest_qp == self.local_qpn && pkey_match(hdr.bth.pkey, self.pkey)
    }
}

/// P_Key match rule of IBTA vol. 1 §10.9.3 as rxe implements it (`pkey_match`): the 15-bit
/// partition numbers are equal and non-zero and at least one of the two is a full member
/// (bit 15 set).
pub(crate) fn pkey_match(a: u16, b: u16) -> bool {
    let (pa, pb) = (a & 0x7fff, b & 0x7fff);
    pa == pb && pa != 0 && (a | b) & 0x8000 != 0
}

/// Writes `hdr` (with PadCnt set for `payload_len`), then lets `fill` write the payload into the
/// `payload_len` bytes after the headers, then zero pad bytes to a multiple of 4.
///
/// Returns `Ok(None)` without side effects when `buf` is too small, `Err(e)` when `fill`
/// fails, and otherwise `Ok(Some(total_len))`.
pub(crate) fn emit_packet<E>(
    hdr: &mut TransportRepr,
    payload_len: usize,
    buf: &mut [u8],
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<Option<usize>, E> {
    let pad = (4 - payload_len % 4) % 4;
    hdr.bth.pad_cnt = pad as u8;
    let hl = hdr.header_len();
    let total = hl + payload_len + pad;
    if buf.len() < total {
        return Ok(None);
    }
    fill(&mut buf[hl..hl + payload_len])?;
    buf[hl + payload_len..total].fill(0);
    match hdr.emit(&mut buf[..hl]) {
        Ok(n) => {
            debug_assert_eq!(n, hl);
            Ok(Some(total))
        }
        // Only reachable with a repr that disagrees with its opcode: a bug in this module.
        Err(_) => Ok(None),
    }
}

/// Element `i` (0 = front) of a deque. The front, the element asked for most (the WQE at the
/// head of a queue), without splitting the ring into its two slices.
#[inline]
pub(crate) fn deque_get<T, const N: usize>(q: &Deque<T, N>, i: usize) -> Option<&T> {
    if i == 0 {
        return q.front();
    }
    let (a, b) = q.as_slices();
    if i < a.len() {
        a.get(i)
    } else {
        b.get(i - a.len())
    }
}

/// Element `i` (0 = front) of a deque, mutable (the front without splitting the ring).
#[inline]
pub(crate) fn deque_get_mut<T, const N: usize>(q: &mut Deque<T, N>, i: usize) -> Option<&mut T> {
    if i == 0 {
        return q.front_mut();
    }
    let (a, b) = q.as_mut_slices();
    let al = a.len();
    if i < al {
        a.get_mut(i)
    } else {
        b.get_mut(i - al)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn pkey_rule() {
        assert!(pkey_match(0xffff, 0xffff));
        assert!(pkey_match(0xffff, 0x7fff));
        assert!(!pkey_match(0x7fff, 0x7fff), "two limited members");
        assert!(!pkey_match(0x8000, 0x8000), "partition 0 is invalid");
        assert!(!pkey_match(0x8001, 0x8002));
    }

    #[test]
    fn deque_index() {
        let mut q: Deque<u8, 4> = Deque::new();
        for v in 0..4 {
            q.push_back(v).unwrap();
        }
        q.pop_front();
        q.pop_front();
        q.push_back(4).unwrap();
        q.push_back(5).unwrap(); // wraps
        let got: std::vec::Vec<u8> = (0..4).map(|i| *deque_get(&q, i).unwrap()).collect();
        assert_eq!(got, [2, 3, 4, 5]);
        assert!(deque_get(&q, 4).is_none());
        *deque_get_mut(&mut q, 3).unwrap() = 9;
        assert_eq!(q.back(), Some(&9));
        *deque_get_mut(&mut q, 0).unwrap() = 7;
        assert_eq!(q.front(), Some(&7));
        let empty: Deque<u8, 4> = Deque::new();
        assert!(deque_get(&empty, 0).is_none());
    }

    #[test]
    fn pads_and_sizes() {
        let path = Path {
            local_qpn: 1,
            remote_qpn: 0x12,
            mtu: Mtu::Mtu256,
            pkey: 0xffff,
        };
        let mut hdr = TransportRepr::new(path.bth(Opcode::RcSendOnly, Psn::new(7), true, false));
        let mut buf = [0xaau8; 64];
        let n = emit_packet::<()>(&mut hdr, 5, &mut buf, |p| {
            p.copy_from_slice(b"hello");
            Ok(())
        })
        .unwrap()
        .unwrap();
        assert_eq!(n, 12 + 5 + 3);
        assert_eq!(&buf[12..20], b"hello\0\0\0");
        let (r, hl) = TransportRepr::parse(&buf[..n]).unwrap();
        assert_eq!(hl, 12);
        assert_eq!(r.bth.pad_cnt, 3);
        assert_eq!(r.bth.dest_qp, 0x12);
        assert!(r.bth.ack_req);
        // Too small: nothing happens.
        assert_eq!(
            emit_packet::<()>(&mut hdr, 5, &mut buf[..19], |_| Ok(())),
            Ok(None)
        );
        assert_eq!(max_packet_len(Mtu::Mtu4096), 4096 + 35);
    }
}
