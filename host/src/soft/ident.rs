//! The IPv4 Identification of a datagram read from a UDP socket, recovered from its ICRC.
//!
//! The ICRC covers the IPv4 Identification (IBTA vol. 1 Annex A17.3.3 masks TTL, TOS and the
//! checksums, not the ID), but a UDP socket does not show the IP header. The soft provider's
//! sender makes the ID predictable: 0 for a lone datagram, `i` for segment `i` of a UDP GSO send
//! (`crate::soft::udp_io`). A receiver that gets a GRO batch knows each segment's index; one that
//! gets the segments one by one (a route that segmented them, a capture point in between) does
//! not. So the receiver accepts a packet whose ICRC verifies with an ID in
//! `0..MAX_GSO_SEGMENTS`, trying the hint (the GRO index) first.
//!
//! The search costs one CRC pass: the ICRC is affine in its input, so for a fixed length the
//! difference between the CRC with ID `x` and with ID 0 is a linear function `L(x)` of the ID
//! bits alone, the same for every packet of that length. The basis `L(1 << b)` is computed once
//! per length (over zero bytes) and cached; a packet is then checked by one CRC with ID 0 and
//! comparisons against `L(x)` for each candidate `x`. That CRC starts from the
//! [`IcrcFlow`] of the packet's source and destination, kept for the last few sources.
//!
//! Accepting 64 ID values costs 6 of the ICRC's 32 bits of error detection for packets that do
//! not verify with ID 0; packets from peers that choose other IDs (rxe, hardware) are checked
//! on the real header by the raw receive path instead.

use std::net::SocketAddr;

use rdmesh_core::wire::ib_packet::ICRC_LEN;
use rdmesh_core::wire::icrc::{from_wire, IcrcContext, IcrcFlow};
use rdmesh_core::wire::IpRepr;

use crate::soft::headers;
use crate::soft::udp_io::MAX_GSO_SEGMENTS;

/// ID bits searched: IDs `0..2^BITS` (= [`MAX_GSO_SEGMENTS`]).
const BITS: usize = MAX_GSO_SEGMENTS.trailing_zeros() as usize;
/// Longest IB payload (BTH .. pad) the search covers.
const MAX_LEN: usize = 8192;
/// Zero bytes the basis is computed over.
static ZEROS: [u8; MAX_LEN] = [0; MAX_LEN];
/// Lengths whose basis is kept.
const CACHE: usize = 8;
/// (source, destination) pairs whose [`IcrcFlow`] is kept.
const FLOWS: usize = 4;

/// Verifies ICRCs of IPv4 datagrams whose Identification is one of `0..MAX_GSO_SEGMENTS`.
#[derive(Debug, Default)]
pub(crate) struct IdentSolver {
    /// `(IB length, L(1 << b) for each bit b)`, filled round-robin.
    cache: [(usize, [u32; BITS]); CACHE],
    next: usize,
    /// `(source, destination, flow)` of the pairs seen last, filled round-robin.
    flows: [Option<(SocketAddr, SocketAddr, IcrcFlow)>; FLOWS],
    next_flow: usize,
    /// The entry of `flows` that matched last.
    last_flow: usize,
}

impl IdentSolver {
    /// Checks the trailing ICRC of `udp_payload` (BTH .. pad ‖ ICRC) as sent from `src` to
    /// `dst` the soft provider's way ([`headers::context`]). Returns the ID it verified with —
    /// `hint` is tried first — or `None` when no ID in `0..MAX_GSO_SEGMENTS` makes it verify.
    /// IPv6 has no ID: `Some(0)` when it verifies.
    pub(crate) fn verify(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        udp_payload: &[u8],
        hint: u16,
    ) -> Option<u16> {
        if udp_payload.len() < rdmesh_core::wire::bth::HEADER_LEN + ICRC_LEN {
            return None;
        }
        let (ib, t) = udp_payload.split_at(udp_payload.len() - ICRC_LEN);
        let n = ib.len().min(rdmesh_core::wire::bth::HEADER_LEN);
        let (head, rest) = ib.split_at(n);
        self.verify_parts(src, dst, head, &[rest], [t[0], t[1], t[2], t[3]], hint)
    }

    /// [`verify`](Self::verify) for a packet received in pieces: `head` (at least the BTH),
    /// then `rest` (the remaining bytes up to the ICRC, in order), and the 4 `icrc` bytes as
    /// on the wire.
    pub(crate) fn verify_parts(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        head: &[u8],
        rest: &[&[u8]],
        icrc: [u8; ICRC_LEN],
        hint: u16,
    ) -> Option<u16> {
        if head.len() < rdmesh_core::wire::bth::HEADER_LEN {
            return None;
        }
        if cfg!(fuzzing) {
            return Some(0);
        }
        let ib_len = head.len() + rest.iter().map(|p| p.len()).sum::<usize>();
        let got = from_wire(icrc);
        let delta = self.flow(src, dst).compute_parts(0, head, rest).ok()? ^ got;
        if delta == 0 {
            return Some(0);
        }
        if !src.is_ipv4() || !dst.is_ipv4() || ib_len > MAX_LEN {
            return None;
        }
        let basis = self.basis(src, dst, ib_len)?;
        let l = |x: u16| {
            (0..BITS)
                .filter(|b| x >> b & 1 == 1)
                .fold(0u32, |a, b| a ^ basis[b])
        };
        if usize::from(hint) < MAX_GSO_SEGMENTS && hint != 0 && l(hint) == delta {
            return Some(hint);
        }
        (1..MAX_GSO_SEGMENTS as u16).find(|&x| l(x) == delta)
    }

    /// The flow of datagrams from `src` to `dst`: the pair that matched last is compared first
    /// (a QP's packets come from one peer), then the others.
    fn flow(&mut self, src: SocketAddr, dst: SocketAddr) -> IcrcFlow {
        let hit = |e: &Option<(SocketAddr, SocketAddr, IcrcFlow)>| {
            e.as_ref()
                .filter(|(s, d, _)| *s == src && *d == dst)
                .map(|e| e.2)
        };
        if let Some(f) = hit(&self.flows[self.last_flow]) {
            return f;
        }
        for (i, e) in self.flows.iter().enumerate() {
            if let Some(f) = hit(e) {
                self.last_flow = i;
                return f;
            }
        }
        let f = IcrcFlow::new(&headers::context(src, dst));
        self.flows[self.next_flow] = Some((src, dst, f));
        self.last_flow = self.next_flow;
        self.next_flow = (self.next_flow + 1) % FLOWS;
        f
    }

    /// `L(1 << b)` for each ID bit of IPv4 packets `len` bytes long (BTH .. pad), computed in
    /// the context from `src` to `dst` (any IPv4 context gives the same basis).
    fn basis(&mut self, src: SocketAddr, dst: SocketAddr, len: usize) -> Option<[u32; BITS]> {
        if let Some((_, b)) = self.cache.iter().find(|(l, _)| *l == len) {
            return Some(*b);
        }
        let ctx0 = &headers::context(src, dst);
        let zeros = &ZEROS[..len];
        let c0 = ctx0.compute(zeros).ok()?;
        let mut b = [0u32; BITS];
        for (bit, slot) in b.iter_mut().enumerate() {
            *slot = with_ident(ctx0, 1 << bit).compute(zeros).ok()? ^ c0;
        }
        self.cache[self.next] = (len, b);
        self.next = (self.next + 1) % CACHE;
        Some(b)
    }
}

/// `ctx` with IPv4 Identification `ident` (IPv6 unchanged).
fn with_ident(ctx: &IcrcContext, ident: u16) -> IcrcContext {
    let mut c = *ctx;
    if let IpRepr::V4(r) = &mut c.ip {
        r.ident = ident;
    }
    c
}

#[cfg(test)]
mod test {
    use super::*;
    use std::net::Ipv4Addr;

    fn packet(ctx: &IcrcContext, ident: u16, len: usize, seed: u8) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len + ICRC_LEN)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect();
        with_ident(ctx, ident).seal(&mut p).unwrap();
        p
    }

    #[test]
    fn recovers_every_gso_ident_and_rejects_corruption() {
        let src = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 50_000));
        let dst = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), 4791));
        let ctx = headers::context(src, dst);
        let mut s = IdentSolver::default();
        for len in [12, 28, 1052, 4124] {
            for ident in 0..MAX_GSO_SEGMENTS as u16 {
                let p = packet(&ctx, ident, len, ident as u8);
                assert_eq!(
                    s.verify(src, dst, &p, 0),
                    Some(ident),
                    "len {len} id {ident}"
                );
                assert_eq!(s.verify(src, dst, &p, ident), Some(ident));
                let mut bad = p.clone();
                bad[len / 2] ^= 0x10;
                assert_eq!(
                    s.verify(src, dst, &bad, ident),
                    None,
                    "corrupt len {len} id {ident}"
                );
            }
            // An ID outside the GSO range is not accepted.
            let p = packet(&ctx, 4000, len, 7);
            assert_eq!(s.verify(src, dst, &p, 0), None);
        }
        // The flows kept are keyed by source and destination: a packet checks out only as sent
        // by its own source, with more sources in turn than the solver keeps flows.
        let p = packet(&ctx, 0, 60, 1);
        for round in 0..3 {
            for port in 50_001..50_001 + FLOWS as u16 + 1 {
                let other = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), port));
                assert_eq!(
                    s.verify(other, dst, &p, 0),
                    None,
                    "round {round} port {port}"
                );
                assert_eq!(s.verify(src, dst, &p, 0), Some(0));
                assert_eq!(s.verify(src, other, &p, 0), None);
            }
        }
    }
}
