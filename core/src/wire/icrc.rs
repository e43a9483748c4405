//! RoCEv2 Invariant CRC (ICRC): the 4-byte trailer that protects the fields of a RoCEv2 packet
//! that no router may change (IBTA vol. 1 §7.8.1; RoCEv2 Annex A17.8; Linux rxe_icrc.c).
//!
//! # Algorithm
//! CRC-32/ISO-HDLC (the zlib/Ethernet CRC: reflected polynomial 0xEDB88320, init and xorout
//! 0xFFFFFFFF) over
//!
//! ```text
//! 8 × 0xFF  ‖  IP header  ‖  UDP header  ‖  BTH  ‖  ext headers  ‖  payload  ‖  pad
//! ```
//! where, in the copy fed to the CRC only, these fields are replaced by all-ones bits:
//!
//! | header | bytes | field |
//! |---|---|---|
//! | IPv4 | 1, 8, 10–11 | TOS (DSCP+ECN), TTL, header checksum |
//! | IPv6 | low nibble of 0, 1–3, 7 | traffic class, flow label, hop limit |
//! | UDP | 6–7 | checksum |
//! | BTH | 4 | FECN, BECN, resv6 |
//!
//! The eight 0xFF bytes stand in for the InfiniBand LRH, whose fields are all variant. The
//! result is transmitted least significant byte first (like the Ethernet FCS): a CRC of
//! 0x2A00FD82 goes on the wire as `82 FD 00 2A`. Everything here works without a heap: a
//! masked copy of the headers, with as much of the rest of the packet as fits a small stack
//! buffer, is fed to [`crc32fast::Hasher`], followed by what did not fit, unmodified.
//!
//! Three ways in:
//! - [`compute_frame`] / [`verify_frame`]: a whole Ethernet frame;
//! - [`compute`] / [`verify`]: IP header bytes, UDP header bytes and the IB bytes;
//! - [`IcrcContext`]: a UDP payload plus what a UDP socket user knows about the headers (the soft
//!   provider's path; the kernel writes the real IP/UDP headers).
//!
//! # Fuzzing
//! Built with `cfg(fuzzing)` (as `cargo fuzz` does), every `verify*` function returns success
//! without computing anything, so fuzzers reach the code behind the ICRC check. Computation
//! functions are unaffected.

use core::net::{Ipv4Addr, Ipv6Addr};

use crc32fast::Hasher;

use super::ethernet::{self, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use super::ib_packet::ICRC_LEN;
use super::ip::IpRepr;
use super::ipv4::{self, Ipv4Repr, PROTOCOL_UDP};
use super::ipv6::{self, Ipv6Repr, NEXT_HEADER_UDP};
use super::udp::{self, UdpRepr};
use super::{bth, Error, Result};

/// CRC-32 of the eight 0xFF bytes that stand in for the LRH; the hasher starts from here.
/// (rxe starts its raw register at 0xDEBB20E3, the same state before the final inversion.)
const LRH_STANDIN_CRC: u32 = 0x2144_df1c;

/// Returns `crc` as the 4 wire bytes of the ICRC trailer (least significant byte first).
#[inline]
pub const fn to_wire(crc: u32) -> [u8; ICRC_LEN] {
    crc.to_le_bytes()
}

/// Reads an ICRC trailer's 4 wire bytes as a CRC value.
#[inline]
pub const fn from_wire(bytes: [u8; ICRC_LEN]) -> u32 {
    u32::from_le_bytes(bytes)
}

/// Bytes of CRC input gathered on the stack: the headers (masked) and as much of the rest as
/// fits go to the CRC in one `update`. Small packets (ACKs, short messages) are one call: a
/// CRC call's fixed cost was most of the ICRC of a 60-byte packet when headers, extended
/// headers and payload went in separately. At least an IPv6 header + UDP header + BTH.
const GATHER: usize = 128;

/// Copies `ip_header` (20 or 40 bytes, version already checked) and `udp_header` (8 bytes) into
/// a gathering buffer and computes [`crc_gathered`] over them, `ib` and the bytes of `rest`.
#[inline]
fn crc_masked_parts(ip_header: &[u8], udp_header: &[u8], ib: &[u8], rest: &[&[u8]]) -> u32 {
    let mut m = [0u8; GATHER];
    let ipl = ip_header.len();
    m[..ipl].copy_from_slice(ip_header);
    m[ipl..ipl + udp::HEADER_LEN].copy_from_slice(&udp_header[..udp::HEADER_LEN]);
    crc_gathered(&mut m, ipl, ib, rest)
}

/// The ICRC over the IP header (`ipl` = 20 or 40 bytes) and UDP header that `m` starts with,
/// `ib` (at least a BTH) and the bytes of `rest`. Sets the variant fields of the headers to ones
/// in `m` (only `ib`'s BTH is masked), appends `ib` and the parts of `rest` while they fit,
/// and feeds a hasher that already holds the LRH stand-in with `m`, then whatever did not fit.
#[inline]
fn crc_gathered(m: &mut [u8; GATHER], ipl: usize, ib: &[u8], rest: &[&[u8]]) -> u32 {
    mask_headers(m, ipl);
    crc_tail(
        Hasher::new_with_initial(LRH_STANDIN_CRC),
        m,
        ipl + udp::HEADER_LEN,
        ib,
        rest,
    )
}

/// Sets the fields the ICRC masks to ones in the IP header (`ipl` = 20 or 40 bytes) and the UDP
/// header that `m` starts with.
#[inline]
fn mask_headers(m: &mut [u8; GATHER], ipl: usize) {
    if ipl == ipv4::HEADER_LEN {
        for i in ipv4::ICRC_MASKED_BYTES {
            m[i] = 0xff;
        }
    } else {
        m[0] |= 0x0f;
        m[1] = 0xff;
        m[2] = 0xff;
        m[3] = 0xff;
        m[ipv6::ICRC_HOP_LIMIT_BYTE] = 0xff;
    }
    m[ipl + udp::CHECKSUM_OFFSET] = 0xff;
    m[ipl + udp::CHECKSUM_OFFSET + 1] = 0xff;
}

/// Continues `h` — which holds the input before `m`: the LRH stand-in, or a cached prefix —
/// with `m[..b]` (headers already masked), `ib` (at least a BTH; its masked byte set to ones in
/// `m`) and the bytes of `rest`: `ib` and the parts of `rest` are appended to `m` while they fit
/// and fed in one `update`, then whatever did not fit.
#[inline]
fn crc_tail(mut h: Hasher, m: &mut [u8; GATHER], b: usize, ib: &[u8], rest: &[&[u8]]) -> u32 {
    let n = ib.len().min(GATHER - b);
    m[b..b + n].copy_from_slice(&ib[..n]);
    if n > bth::ICRC_MASKED_BYTE {
        m[b + bth::ICRC_MASKED_BYTE] = 0xff;
    }
    let mut len = b + n;
    let mut parts = rest.iter();
    if n == ib.len() {
        // Gather the parts that fit; the first that does not goes after `m`, with the rest.
        for part in parts.by_ref() {
            if part.len() > GATHER - len {
                h.update(&m[..len]);
                h.update(part);
                len = 0;
                break;
            }
            m[len..len + part.len()].copy_from_slice(part);
            len += part.len();
        }
        h.update(&m[..len]);
    } else {
        h.update(&m[..len]);
        h.update(&ib[n..]);
    }
    for part in parts {
        h.update(part);
    }
    h.finalize()
}

/// The UDP length in bytes (header, `head`, the bytes of `rest`, ICRC) of a packet whose IB
/// bytes before the ICRC are `head` (at least the BTH) followed by `rest`.
///
/// Errors: [`Error::Truncated`] when `head` is shorter than a BTH; [`Error::BadLength`] when
/// the length exceeds `max`, the largest UDP length the IP header's length field describes.
fn udp_len_of(head: &[u8], rest: &[&[u8]], max: usize) -> Result<usize> {
    if head.len() < bth::HEADER_LEN {
        return Err(Error::Truncated);
    }
    let ib_len = head.len() + rest.iter().map(|p| p.len()).sum::<usize>();
    let udp_len = udp::HEADER_LEN + ib_len + ICRC_LEN;
    if udp_len > max {
        return Err(Error::BadLength);
    }
    Ok(udp_len)
}

/// Writes `crc` of all but the last 4 bytes of `udp_payload` (BTH .. pad) into those 4 bytes,
/// least significant byte first.
///
/// Errors: [`Error::Truncated`] when `udp_payload` cannot hold a BTH and an ICRC; those of
/// `crc`.
fn seal_with(udp_payload: &mut [u8], crc: impl FnOnce(&[u8]) -> Result<u32>) -> Result<()> {
    if udp_payload.len() < bth::HEADER_LEN + ICRC_LEN {
        return Err(Error::Truncated);
    }
    let at = udp_payload.len() - ICRC_LEN;
    let c = crc(&udp_payload[..at])?;
    udp_payload[at..].copy_from_slice(&to_wire(c));
    Ok(())
}

/// Computes the ICRC from the raw headers.
///
/// - `ip_header`: exactly the IPv4 header (20 bytes, version 4) or IPv6 header (40 bytes,
///   version 6) as on the wire;
/// - `udp_header`: the 8 UDP header bytes;
/// - `ib`: BTH through pad — the UDP payload without its last 4 (ICRC) bytes.
///
/// The length fields are taken as they are in the headers (they count the ICRC).
///
/// # Errors
/// [`Error::BadVersion`] when `ip_header`'s length does not match its version nibble (including
/// IPv4 with options); [`Error::Truncated`] when `udp_header` is not 8 bytes or `ib` is shorter
/// than a BTH.
pub fn compute(ip_header: &[u8], udp_header: &[u8], ib: &[u8]) -> Result<u32> {
    if udp_header.len() != udp::HEADER_LEN || ib.len() < bth::HEADER_LEN {
        return Err(Error::Truncated);
    }
    match (ip_header.first().map(|b| b >> 4), ip_header.len()) {
        (Some(4), ipv4::HEADER_LEN) | (Some(6), ipv6::HEADER_LEN) => {}
        _ => return Err(Error::BadVersion),
    }
    Ok(crc_masked_parts(ip_header, udp_header, ib, &[]))
}

/// Checks the ICRC of a UDP payload (`BTH .. pad ‖ ICRC`) against the raw IP/UDP headers.
///
/// # Errors
/// As [`compute`]; [`Error::Truncated`] when `udp_payload` cannot hold a BTH and an ICRC.
///
/// # Fuzzing
/// Returns `Ok(true)` without computing under `cfg(fuzzing)`.
pub fn verify(ip_header: &[u8], udp_header: &[u8], udp_payload: &[u8]) -> Result<bool> {
    if udp_payload.len() < bth::HEADER_LEN + ICRC_LEN {
        return Err(Error::Truncated);
    }
    if cfg!(fuzzing) {
        return Ok(true);
    }
    let (ib, t) = udp_payload.split_at(udp_payload.len() - ICRC_LEN);
    let crc = compute(ip_header, udp_header, ib)?;
    Ok(crc == from_wire([t[0], t[1], t[2], t[3]]))
}

/// The IP header, UDP header and UDP payload slices of a UDP-in-IP Ethernet frame, bounded by the
/// IP and UDP length fields (Ethernet padding excluded).
fn locate(frame: &[u8]) -> Result<(&[u8], &[u8], &[u8])> {
    let eth = ethernet::Packet::new_checked(frame)?;
    let l3 = eth.payload();
    let (ip_header, ip_payload) = match eth.ethertype() {
        ETHERTYPE_IPV4 => {
            let p = ipv4::Packet::new_checked(l3)?;
            if p.version() != 4 {
                return Err(Error::BadVersion);
            }
            if p.protocol() != PROTOCOL_UDP {
                return Err(Error::NotRoce);
            }
            if p.header_len() != ipv4::HEADER_LEN {
                return Err(Error::Ipv4Options);
            }
            (p.header(), p.payload())
        }
        ETHERTYPE_IPV6 => {
            let p = ipv6::Packet::new_checked(l3)?;
            if p.version() != 6 {
                return Err(Error::BadVersion);
            }
            if p.next_header() != NEXT_HEADER_UDP {
                return Err(Error::NotRoce);
            }
            (p.header(), p.payload())
        }
        _ => return Err(Error::NotRoce),
    };
    let u = udp::Packet::new_checked(ip_payload)?;
    Ok((ip_header, u.header(), u.payload()))
}

/// Computes the ICRC of a whole Ethernet frame (optionally VLAN-tagged, no FCS) carrying
/// IPv4/IPv6 + UDP + BTH...: over the IP header to the pad, excluding the frame's last 4 UDP
/// payload bytes (its ICRC) and any Ethernet padding.
///
/// # Errors
/// [`Error::NotRoce`] for a non-IP or non-UDP frame; [`Error::Truncated`] / [`Error::BadLength`]
/// when lengths disagree with the buffer; [`Error::BadVersion`] for a version nibble that does not
/// match the EtherType; [`Error::Ipv4Options`] for an IPv4 header with options.
pub fn compute_frame(frame: &[u8]) -> Result<u32> {
    let (ip_header, udp_header, payload) = locate(frame)?;
    if payload.len() < bth::HEADER_LEN + ICRC_LEN {
        return Err(Error::Truncated);
    }
    compute(ip_header, udp_header, &payload[..payload.len() - ICRC_LEN])
}

/// Checks the ICRC of a whole Ethernet frame (see [`compute_frame`]).
///
/// # Errors
/// As [`compute_frame`].
///
/// # Fuzzing
/// Returns `Ok(true)` after locating the headers, without computing, under `cfg(fuzzing)`.
pub fn verify_frame(frame: &[u8]) -> Result<bool> {
    let (ip_header, udp_header, payload) = locate(frame)?;
    verify(ip_header, udp_header, payload)
}

/// What a UDP socket user knows about the headers around a RoCEv2 UDP payload, enough to
/// rebuild them for the ICRC: addresses, ports, protocol, and — for IPv4 — the identification
/// and DF flag.
///
/// Fields the ICRC masks (TOS/traffic class, TTL/hop limit, flow label, both checksums) do not
/// matter. The IP and UDP length fields are derived from the UDP payload length in
/// [`compute`](Self::compute), so the reprs' `payload_len` values are ignored.
///
/// **IPv4 identification.** A receiver on a UDP socket never sees the sender's IPv4 ID, yet the
/// ICRC covers it. The soft provider therefore sends from *unconnected* UDP sockets with
/// path-MTU discovery on (`IP_PMTUDISC_DO`): Linux then sets DF and writes ID 0
/// (`ip_select_ident_segs`: DF set and no connected destination ⇒ `iph->id = 0`), fragment
/// offset 0. [`for_udp_socket_v4`](Self::for_udp_socket_v4) encodes exactly that assumption.
/// Packets from hardware RoCE NICs carry other IDs and must be checked with [`verify_frame`] or
/// [`verify`] on captured headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IcrcContext {
    /// The IP header (lengths ignored).
    pub ip: IpRepr,
    /// The UDP header (length and checksum ignored).
    pub udp: UdpRepr,
}

impl IcrcContext {
    /// A context from explicit header reprs.
    pub const fn new(ip: IpRepr, udp: UdpRepr) -> IcrcContext {
        IcrcContext { ip, udp }
    }

    /// The context for an IPv4 datagram sent by Linux from an unconnected UDP socket with DF set:
    /// ID 0, DF, fragment offset 0, protocol UDP. TOS and TTL are masked and left 0.
    pub const fn for_udp_socket_v4(
        src: Ipv4Addr,
        dst: Ipv4Addr,
        src_port: u16,
        dst_port: u16,
    ) -> IcrcContext {
        IcrcContext {
            ip: IpRepr::V4(Ipv4Repr {
                src,
                dst,
                dscp: 0,
                ecn: 0,
                ident: 0,
                dont_frag: true,
                ttl: 0,
                protocol: PROTOCOL_UDP,
                payload_len: 0,
            }),
            udp: UdpRepr {
                src_port,
                dst_port,
                payload_len: 0,
                checksum: 0,
            },
        }
    }

    /// The context for an IPv6 datagram with UDP as next header (no extension headers).
    /// Traffic class, flow label and hop limit are masked and left 0.
    pub const fn for_udp_socket_v6(
        src: Ipv6Addr,
        dst: Ipv6Addr,
        src_port: u16,
        dst_port: u16,
    ) -> IcrcContext {
        IcrcContext {
            ip: IpRepr::V6(Ipv6Repr {
                src,
                dst,
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 0,
                next_header: NEXT_HEADER_UDP,
                payload_len: 0,
            }),
            udp: UdpRepr {
                src_port,
                dst_port,
                payload_len: 0,
                checksum: 0,
            },
        }
    }

    /// The same context for the reverse direction (addresses and ports swapped): what a
    /// receiver uses to check packets from the peer it sends to.
    pub fn reversed(&self) -> IcrcContext {
        let mut c = *self;
        match &mut c.ip {
            IpRepr::V4(r) => core::mem::swap(&mut r.src, &mut r.dst),
            IpRepr::V6(r) => core::mem::swap(&mut r.src, &mut r.dst),
        }
        core::mem::swap(&mut c.udp.src_port, &mut c.udp.dst_port);
        c
    }

    /// Computes the ICRC for `ib` = BTH through pad (the UDP payload without ICRC), with the IP
    /// and UDP length fields set for a UDP payload of `ib.len() + 4` bytes.
    ///
    /// # Errors
    /// [`Error::BadLength`] when that datagram would not fit the IP length field;
    /// [`Error::Truncated`] when `ib` is shorter than a BTH.
    pub fn compute(&self, ib: &[u8]) -> Result<u32> {
        self.compute_parts(ib, &[])
    }

    /// [`compute`](Self::compute) for an `ib` given in pieces: `head` (BTH and the extended
    /// headers, at least the 12-byte BTH) followed by the bytes of `rest` (payload and pad), as
    /// a gathering send puts them on the wire. The result equals `compute` of the concatenation.
    ///
    /// # Errors
    /// As [`compute`](Self::compute); [`Error::Truncated`] when `head` is shorter than a BTH.
    pub fn compute_parts(&self, head: &[u8], rest: &[&[u8]]) -> Result<u32> {
        let udp_len = udp_len_of(head, rest, self.ip.max_payload_len())?;
        // The headers are written straight into the gathering buffer.
        let mut m = [0u8; GATHER];
        let ipl = self.emit_headers(udp_len, &mut m);
        Ok(crc_gathered(&mut m, ipl, head, rest))
    }

    /// Writes the IP and UDP headers of a datagram with `udp_len` bytes of UDP (unmasked) at the
    /// start of `m`; returns the IP header's length (20 or 40 bytes).
    fn emit_headers(&self, udp_len: usize, m: &mut [u8; GATHER]) -> usize {
        let ipl = self.emit_ip(udp_len, m);
        UdpRepr {
            payload_len: (udp_len - udp::HEADER_LEN) as u16,
            ..self.udp
        }
        .emit(&mut udp::Packet::new_unchecked(
            &mut m[ipl..ipl + udp::HEADER_LEN],
        ));
        ipl
    }

    /// Writes the IP header of a datagram with `udp_len` bytes of UDP at the start of `ip`;
    /// returns its length (20 or 40 bytes).
    fn emit_ip(&self, udp_len: usize, ip: &mut [u8; GATHER]) -> usize {
        match self.ip {
            IpRepr::V4(r) => {
                let r = Ipv4Repr {
                    payload_len: udp_len as u16,
                    ..r
                };
                r.emit_unsummed(&mut ipv4::Packet::new_unchecked(&mut ip[..]));
                ipv4::HEADER_LEN
            }
            IpRepr::V6(r) => {
                let r = Ipv6Repr {
                    payload_len: udp_len as u16,
                    ..r
                };
                r.emit(&mut ipv6::Packet::new_unchecked(&mut ip[..]));
                ipv6::HEADER_LEN
            }
        }
    }

    /// Checks the trailing ICRC of a UDP payload (`BTH .. pad ‖ ICRC`). Returns `false` when the
    /// payload is too short or too long to carry one.
    ///
    /// # Fuzzing
    /// Returns `true` under `cfg(fuzzing)` for any payload long enough to hold a BTH and ICRC.
    pub fn verify(&self, udp_payload: &[u8]) -> bool {
        if udp_payload.len() < bth::HEADER_LEN + ICRC_LEN {
            return false;
        }
        if cfg!(fuzzing) {
            return true;
        }
        let (ib, t) = udp_payload.split_at(udp_payload.len() - ICRC_LEN);
        self.compute(ib) == Ok(from_wire([t[0], t[1], t[2], t[3]]))
    }

    /// Computes the ICRC over all but the last 4 bytes of `udp_payload` and writes it into them.
    ///
    /// # Errors
    /// As [`compute`](Self::compute); [`Error::Truncated`] when `udp_payload` cannot hold a BTH
    /// and an ICRC.
    pub fn seal(&self, udp_payload: &mut [u8]) -> Result<()> {
        seal_with(udp_payload, |ib| self.compute(ib))
    }
}

/// The ICRC of one flow — one source and destination address and UDP port — with the CRC of
/// everything before the BTH (the LRH stand-in and the masked IP and UDP headers) computed
/// once, so that a packet's ICRC costs the CRC of its BTH onwards only.
///
/// What differs between the packets of a flow before the BTH are the length fields (IPv4 total
/// length or IPv6 payload length, and the UDP length) and the IPv4 Identification. The CRC is
/// affine in its input, so the prefix CRC with other values in those fields is the one kept
/// XOR a difference that depends on each field's value alone: the CRC (zero start, no final
/// XOR) of the field's change followed by the zero bytes up to the BTH, a fixed distance for
/// each field ([`field_delta`], over per-byte tables computed at compile time). The ICRC masks
/// the IPv4 header checksum, which the lengths and the ID would otherwise change.
///
/// The flow replaces the [`IcrcContext`] on the per-packet paths: building and comparing
/// contexts cost more than the CRC of a short packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IcrcFlow {
    /// The prefix CRC (finalized, as [`Hasher::finalize`] gives it) with UDP length
    /// [`BASE_UDP_LEN`] and IPv4 ID 0.
    base: u32,
    /// An IPv4 flow (else IPv6, which has no ID and counts its payload length from the UDP
    /// header).
    ipv4: bool,
    /// The largest UDP length the IP header's length field can describe (bytes).
    max_udp_len: usize,
}

/// The UDP length the base prefix of an [`IcrcFlow`] is computed with: the header alone.
const BASE_UDP_LEN: u16 = udp::HEADER_LEN as u16;

/// Bytes between the end of a 2-byte field and the BTH, for each field an [`IcrcFlow`] varies.
const V4_LENGTH_AFTER: usize = ipv4::HEADER_LEN + udp::HEADER_LEN - ipv4::field::LENGTH.end;
const V4_IDENT_AFTER: usize = ipv4::HEADER_LEN + udp::HEADER_LEN - ipv4::field::IDENT.end;
const V6_LENGTH_AFTER: usize = ipv6::HEADER_LEN + udp::HEADER_LEN - ipv6::field::LENGTH.end;
const UDP_LENGTH_AFTER: usize = udp::HEADER_LEN - udp::field::LENGTH.end;

/// Per-byte tables of [`field_delta`].
const V4_LENGTH_TABLE: FieldTable = FieldTable::new(V4_LENGTH_AFTER);
const V4_IDENT_TABLE: FieldTable = FieldTable::new(V4_IDENT_AFTER);
const V6_LENGTH_TABLE: FieldTable = FieldTable::new(V6_LENGTH_AFTER);
const UDP_LENGTH_TABLE: FieldTable = FieldTable::new(UDP_LENGTH_AFTER);

/// The CRC register (reflected, initial value 0, no final XOR: a linear function of the input)
/// of the first `len` bytes of `data`, bit by bit; compile-time only.
const fn raw_crc(data: &[u8], len: usize) -> u32 {
    let mut c = 0u32;
    let mut i = 0;
    while i < len {
        c ^= data[i] as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
            k += 1;
        }
        i += 1;
    }
    c
}

/// For each bit `b` of a big-endian 2-byte field followed by `after` bytes up to the BTH: the
/// [`raw_crc`] of the field holding `1 << b` and those bytes zero.
const fn field_basis(after: usize) -> [u32; 16] {
    let mut t = [0u32; 16];
    let mut b = 0;
    while b < 16 {
        let mut e = [0u8; 2 + V6_LENGTH_AFTER];
        let v = (1u16 << b).to_be_bytes();
        e[0] = v[0];
        e[1] = v[1];
        t[b] = raw_crc(&e, 2 + after);
        b += 1;
    }
    t
}

/// [`field_basis`] folded by byte: for each value `v` of the field's low byte (`lo`) and high
/// byte (`hi`), the XOR of the basis entries of `v`'s bits, so that a field's change costs two
/// table reads instead of a loop over its set bits (the per-bit loop was ~40 instructions per
/// packet of a 4 KiB stream; callgrind, docs/benchmarks.md). 2 KiB per field.
struct FieldTable {
    lo: [u32; 256],
    hi: [u32; 256],
}

impl FieldTable {
    /// The tables of a 2-byte field followed by `after` bytes up to the BTH.
    const fn new(after: usize) -> FieldTable {
        let basis = field_basis(after);
        let mut t = FieldTable {
            lo: [0; 256],
            hi: [0; 256],
        };
        let mut v = 0;
        while v < 256 {
            let mut b = 0;
            while b < 8 {
                if v & (1 << b) != 0 {
                    t.lo[v] ^= basis[b];
                    t.hi[v] ^= basis[8 + b];
                }
                b += 1;
            }
            v += 1;
        }
        t
    }
}

/// The change of the prefix CRC when a field with table `t` changes by `diff` (old value XOR
/// new): the XOR of the basis entries of the bits set in `diff`, a byte at a time.
#[inline]
fn field_delta(t: &FieldTable, diff: u16) -> u32 {
    let [hi, lo] = diff.to_be_bytes();
    t.lo[usize::from(lo)] ^ t.hi[usize::from(hi)]
}

impl IcrcFlow {
    /// The flow of `ctx`'s datagrams (its IPv4 ID and length fields are ignored).
    pub fn new(ctx: &IcrcContext) -> IcrcFlow {
        let mut key = *ctx;
        if let IpRepr::V4(r) = &mut key.ip {
            r.ident = 0;
        }
        let mut m = [0u8; GATHER];
        let ipl = key.emit_headers(usize::from(BASE_UDP_LEN), &mut m);
        mask_headers(&mut m, ipl);
        let mut h = Hasher::new_with_initial(LRH_STANDIN_CRC);
        h.update(&m[..ipl + udp::HEADER_LEN]);
        IcrcFlow {
            base: h.finalize(),
            ipv4: matches!(ctx.ip, IpRepr::V4(_)),
            max_udp_len: ctx.ip.max_payload_len(),
        }
    }

    /// The prefix CRC of a datagram of this flow with `udp_len` bytes of UDP (at most 65535
    /// less the IPv4 header) and IPv4 ID `ident` (ignored for IPv6).
    #[inline]
    fn prefix(&self, udp_len: u16, ident: u16) -> u32 {
        let udp = field_delta(&UDP_LENGTH_TABLE, udp_len ^ BASE_UDP_LEN);
        if self.ipv4 {
            let total = udp_len + ipv4::HEADER_LEN as u16;
            let base_total = BASE_UDP_LEN + ipv4::HEADER_LEN as u16;
            self.base
                ^ udp
                ^ field_delta(&V4_LENGTH_TABLE, total ^ base_total)
                ^ field_delta(&V4_IDENT_TABLE, ident)
        } else {
            self.base ^ udp ^ field_delta(&V6_LENGTH_TABLE, udp_len ^ BASE_UDP_LEN)
        }
    }

    /// [`IcrcContext::compute_parts`] of this flow's context with IPv4 ID `ident` (the same
    /// result): `head` (at least the BTH) followed by the bytes of `rest`.
    ///
    /// # Errors
    /// [`Error::Truncated`] when `head` is shorter than a BTH; [`Error::BadLength`] when the
    /// datagram would not fit the IP length field.
    #[inline]
    pub fn compute_parts(&self, ident: u16, head: &[u8], rest: &[&[u8]]) -> Result<u32> {
        let udp_len = udp_len_of(head, rest, self.max_udp_len)?;
        let mut m = [0u8; GATHER];
        Ok(crc_tail(
            Hasher::new_with_initial(self.prefix(udp_len as u16, ident)),
            &mut m,
            0,
            head,
            rest,
        ))
    }

    /// [`IcrcContext::seal`] of this flow's context with IPv4 ID `ident`: computes the ICRC
    /// over all but the last 4 bytes of `udp_payload` and writes it into them.
    ///
    /// # Errors
    /// As [`compute_parts`](Self::compute_parts); [`Error::Truncated`] when `udp_payload`
    /// cannot hold a BTH and an ICRC.
    #[inline]
    pub fn seal(&self, ident: u16, udp_payload: &mut [u8]) -> Result<()> {
        seal_with(udp_payload, |ib| self.compute_parts(ident, ib, &[]))
    }
}
#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn compute_parts_equals_compute_of_the_concatenation() {
        let ctx = IcrcContext::for_udp_socket_v4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            49152,
            4791,
        );
        let mut ib = [0u8; 12 + 16 + 300];
        for (i, b) in ib.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let whole = ctx.compute(&ib).unwrap();
        for split in [12, 28, 100, ib.len()] {
            let (head, tail) = ib.split_at(split);
            let (a, b) = tail.split_at(tail.len() / 3);
            assert_eq!(
                ctx.compute_parts(head, &[a, b]).unwrap(),
                whole,
                "split at {split}"
            );
        }
        // The BTH's masked byte must be in the head.
        assert_eq!(
            ctx.compute_parts(&ib[..11], &[&ib[11..]]),
            Err(Error::Truncated)
        );
        let mut other = ib;
        other[200] ^= 1;
        assert_ne!(
            ctx.compute_parts(&other[..28], &[&other[28..]]).unwrap(),
            whole
        );
    }

    #[test]
    fn gathered_parts_at_every_boundary_match_a_plain_crc() {
        // Packets below, at and above what the gathering buffer holds, split every way
        // around its end, against the CRC of the masked input written out in full.
        let ctx = IcrcContext::for_udp_socket_v4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            49152,
            4791,
        );
        for len in (12..GATHER + 40).step_by(3) {
            let ib: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
            let udp_len = (udp::HEADER_LEN + len + ICRC_LEN) as u16;
            let mut input = vec![0xffu8; 8];
            input.extend_from_slice(&[0x45, 0xff]);
            input.extend_from_slice(&(udp_len + 20).to_be_bytes());
            input.extend_from_slice(&[
                0, 0, 0x40, 0, 0xff, 17, 0xff, 0xff, 10, 0, 0, 1, 10, 0, 0, 2,
            ]);
            input.extend_from_slice(&49152u16.to_be_bytes());
            input.extend_from_slice(&4791u16.to_be_bytes());
            input.extend_from_slice(&udp_len.to_be_bytes());
            input.extend_from_slice(&[0xff, 0xff]);
            input.extend_from_slice(&ib);
            input[8 + 28 + bth::ICRC_MASKED_BYTE] = 0xff;
            let plain = crc32fast::hash(&input);
            assert_eq!(ctx.compute(&ib).unwrap(), plain, "len {len}");
            for head in [12, 16, 28, len].into_iter().filter(|&h| h <= len) {
                for cut in (head..=len).step_by(7) {
                    let (h, rest) = ib.split_at(head);
                    let (a, b) = rest.split_at(cut - head);
                    let (b, c) = b.split_at(b.len() / 2);
                    assert_eq!(
                        ctx.compute_parts(h, &[a, b, c]).unwrap(),
                        plain,
                        "len {len} head {head} cut {cut}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_flow_equals_compute_parts_at_every_length_and_ident() {
        // Each flow against the context's own CRC (headers written out in full), over lengths
        // whose UDP length and IP length fields differ from the base in few and in many bits,
        // and IDs with one, several and all bits set. A length or ID delta with a wrong table
        // or distance fails here.
        let v4 = |a: u8, port: u16| {
            IcrcContext::for_udp_socket_v4(
                Ipv4Addr::new(10, 0, 0, a),
                Ipv4Addr::new(10, 0, 0, 2),
                port,
                4791,
            )
        };
        let v6 = IcrcContext::for_udp_socket_v6(
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
            49152,
            4791,
        );
        let mut ib = vec![0u8; 9000 + ICRC_LEN];
        for (i, b) in ib.iter_mut().enumerate() {
            *b = (i * 29 + 11) as u8;
        }
        for (c, ctx) in [v4(1, 49152), v4(3, 49153), v6].iter().enumerate() {
            let flow = IcrcFlow::new(ctx);
            // The flow ignores the context's own ID.
            assert_eq!(IcrcFlow::new(&with_ident(ctx, 0x1234)), flow);
            for len in [12, 16, 28, 60, GATHER, 1052, 2047, 4124, 8191, 9000] {
                for ident in [0u16, 1, 2, 5, 63, 0x718c, 0xffff] {
                    let ctx = with_ident(ctx, ident);
                    let psn = c as u32 * 100 + ident as u32;
                    ib[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
                    let (head, tail) = ib[..len].split_at(12);
                    let (a, b) = tail.split_at(tail.len() / 2);
                    let want = ctx.compute_parts(head, &[a, b]).unwrap();
                    // IPv6 has no ID: the flow's result does not depend on it.
                    let id = if c == 2 { ident ^ 0x5a5a } else { ident };
                    assert_eq!(
                        flow.compute_parts(id, head, &[a, b]),
                        Ok(want),
                        "ctx {c} len {len} id {ident:#x}"
                    );
                    let mut sealed = ib[..len + ICRC_LEN].to_vec();
                    flow.seal(id, &mut sealed).unwrap();
                    assert_eq!(from_wire(sealed[len..].try_into().unwrap()), want);
                }
            }
        }
        let flow = IcrcFlow::new(&v4(1, 49152));
        assert_eq!(flow.compute_parts(0, &ib[..11], &[]), Err(Error::Truncated));
        let big = vec![0u8; u16::MAX as usize];
        assert_eq!(flow.compute_parts(0, &big, &[]), Err(Error::BadLength));
        assert!(IcrcFlow::new(&v6)
            .compute_parts(0, &big[..65000], &[])
            .is_ok());
        assert_eq!(flow.seal(0, &mut [0u8; 15]), Err(Error::Truncated));
    }

    /// `ctx` with IPv4 Identification `ident`.
    fn with_ident(ctx: &IcrcContext, ident: u16) -> IcrcContext {
        let mut c = *ctx;
        if let IpRepr::V4(r) = &mut c.ip {
            r.ident = ident;
        }
        c
    }

    fn hex(s: &str) -> Vec<u8> {
        let mut v = Vec::new();
        let b = s.as_bytes();
        for i in (0..b.len()).step_by(2) {
            let d = |c: u8| (c as char).to_digit(16).unwrap() as u8;
            v.push(d(b[i]) << 4 | d(b[i + 1]));
        }
        v
    }

    // rocev2.md §2.2 TV2: ConnectX-4 Lx CNP, ICRC wire 82 fd 00 2a.
    const TV2: &str = concat!(
        "e41d2dab2bc27cfe90643b32080045c2003c718c4000401191610a0011010a001201000012b700280000",
        "8100ffff40000118000000000000000000000000000000000000000082fd002a"
    );

    #[test]
    fn lrh_standin_constant() {
        let mut h = Hasher::new();
        h.update(&[0xff; 8]);
        assert_eq!(h.finalize(), LRH_STANDIN_CRC);
        // Continuing from the constant equals hashing the prefix in one go.
        let mut a = Hasher::new_with_initial(LRH_STANDIN_CRC);
        a.update(b"123456789");
        let mut b = Hasher::new();
        b.update(&[0xff; 8]);
        b.update(b"123456789");
        assert_eq!(a.finalize(), b.finalize());
        // CRC-32/ISO-HDLC check value.
        assert_eq!(crc32fast::hash(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn tv2_three_ways() {
        let f = hex(TV2);
        assert_eq!(compute_frame(&f), Ok(0x2a00_fd82));
        assert_eq!(verify_frame(&f), Ok(true));
        assert_eq!(to_wire(0x2a00_fd82), [0x82, 0xfd, 0x00, 0x2a]);
        let (ip, udp_h, ib) = (&f[14..34], &f[34..42], &f[42..]);
        assert_eq!(compute(ip, udp_h, &ib[..ib.len() - 4]), Ok(0x2a00_fd82));
        assert_eq!(verify(ip, udp_h, ib), Ok(true));
        // The CNP's IPv4 ID is 0x718c, not 0: a full IcrcContext reproduces it.
        let ctx = IcrcContext::new(
            IpRepr::V4(Ipv4Repr {
                src: Ipv4Addr::new(10, 0, 17, 1),
                dst: Ipv4Addr::new(10, 0, 18, 1),
                dscp: 0,
                ecn: 0,
                ident: 0x718c,
                dont_frag: true,
                ttl: 1,
                protocol: 17,
                payload_len: 999,
            }),
            UdpRepr {
                src_port: 0,
                dst_port: 4791,
                payload_len: 1,
                checksum: 0x1234,
            },
        );
        assert!(ctx.verify(ib));
        let mut sealed = [0u8; 32];
        sealed.copy_from_slice(ib);
        sealed[28..].fill(0);
        ctx.seal(&mut sealed).unwrap();
        assert_eq!(&sealed[..], ib);
        // The socket-default context assumes ID 0 and so rejects this hardware packet.
        let sock = IcrcContext::for_udp_socket_v4(
            Ipv4Addr::new(10, 0, 17, 1),
            Ipv4Addr::new(10, 0, 18, 1),
            0,
            4791,
        );
        assert!(!sock.verify(ib));
        assert_eq!(sock.reversed().reversed(), sock);
        let mut bad = f.clone();
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert_eq!(verify_frame(&bad), Ok(false));
    }

    #[test]
    fn errors() {
        let f = hex(TV2);
        let (ip, udp_h, ib) = (&f[14..34], &f[34..42], &f[42..]);
        assert_eq!(compute(&ip[..19], udp_h, ib), Err(Error::BadVersion));
        assert_eq!(compute(&f[14..54], udp_h, ib), Err(Error::BadVersion));
        assert_eq!(compute(ip, &udp_h[..7], ib), Err(Error::Truncated));
        assert_eq!(compute(ip, udp_h, &ib[..11]), Err(Error::Truncated));
        assert_eq!(verify(ip, udp_h, &ib[..15]), Err(Error::Truncated));
        assert_eq!(compute_frame(&f[..20]), Err(Error::Truncated));
        let mut opts = f.clone();
        opts[14] = 0x46;
        assert_eq!(compute_frame(&opts), Err(Error::Ipv4Options));
        let mut arp = f.clone();
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert_eq!(compute_frame(&arp), Err(Error::NotRoce));
        let ctx = IcrcContext::for_udp_socket_v4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 1, 4791);
        assert!(!ctx.verify(&ib[..15]));
        assert_eq!(ctx.compute(&ib[..11]), Err(Error::Truncated));
        let big = [0u8; 65535 - 20 - 8 - 3];
        assert_eq!(ctx.compute(&big), Err(Error::BadLength));
        assert!(ctx.compute(&big[1..]).is_ok());
    }
}
