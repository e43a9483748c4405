//! `rdmesh fuzz`: aim the structure-aware RoCEv2 generator ([`rdmesh_core::wire::gen`]) at
//! parsers that are not rdmesh's.
//!
//! - [`exec`]: write generated frames as a pcap, run a program on it, keep and minimize the
//!   inputs that crash it (killed by a signal) or hang it;
//! - [`peer`]: connect to a live RoCEv2 peer (perftest's out-of-band exchange), then send
//!   frames built around its live QPN, PSN window, R_Key and buffer, interleaved with valid
//!   traffic, checking after every batch that it still answers.
//!
//! Everything is reproducible from a seed: the decisions of frame `j` of iteration `i` are the
//! bytes of a SplitMix64 stream keyed by (seed, i, j) ([`entropy_for`]).

pub mod coverage;
pub mod exec;
pub mod pcapio;
pub mod peer;

use rdmesh_core::wire::ethernet::ETHERTYPE_IPV4;
use rdmesh_core::wire::gen::{self, Entropy, Generated, Target, MAX_FRAME_LEN};
use rdmesh_core::wire::ip::IpRepr;
use rdmesh_core::wire::{icrc, ipv4, udp, Psn, Transport};

/// Bytes of decisions per generated frame (the generator reads fewer for most frames).
pub const ENTROPY_LEN: usize = 192;

/// SplitMix64: the seeded stream behind every decision (fast, and stable across versions).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Fills `out` with the stream.
    pub fn fill(&mut self, out: &mut [u8]) {
        for c in out.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// The decision bytes of frame `frame` of iteration `iter` under `seed`.
pub fn entropy_for(seed: u64, iter: u64, frame: u64) -> [u8; ENTROPY_LEN] {
    let mut r = SplitMix64::new(
        seed ^ iter.wrapping_mul(0xd6e8_feb8_6659_fd93) ^ frame.wrapping_mul(0xa076_1d64_78bd_642f),
    );
    r.next_u64();
    let mut b = [0u8; ENTROPY_LEN];
    r.fill(&mut b);
    b
}

/// One generated frame and what the generator says about it.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Ethernet frame bytes (no FCS).
    pub bytes: Vec<u8>,
    /// The generator's description.
    pub info: Generated,
}

/// Generates one frame for `target` from `entropy`.
///
/// Errors: the generator's (a target whose EtherType and IP version disagree).
pub fn generate(target: &Target, entropy: &[u8]) -> crate::Result<Frame> {
    let mut buf = vec![0u8; MAX_FRAME_LEN];
    let info = gen::generate(&mut Entropy::new(entropy), target, &mut buf)
        .map_err(|e| crate::Error::Config(format!("frame generator: {e} (check the target)")))?;
    buf.truncate(info.len);
    Ok(Frame { bytes: buf, info })
}

/// The pcap target of iteration `iter`: the example IPv4 or IPv6 RC target (one in four
/// IPv6), one in eight UC and one in eight UD, one MR in four read-only, with the QPN,
/// expected PSN, MSN and MTU drawn from the seed so that the whole PSN space is covered.
pub fn pcap_target(seed: u64, iter: u64) -> Target {
    let mut r = SplitMix64::new(seed ^ 0x7e57 ^ iter.rotate_left(17));
    let a = r.next_u64();
    let mut t = if a & 3 == 0 {
        Target::example_v6()
    } else {
        Target::example_v4()
    };
    t.qp.service = match (a >> 8) & 7 {
        0 => Transport::Uc,
        1 => Transport::Ud,
        _ => Transport::Rc,
    };
    let b = r.next_u64();
    t.qp.qpn = (b as u32) & 0xff_ffff | 2;
    t.qp.epsn = Psn::new((b >> 24) as u32);
    t.qp.msn = ((b >> 48) as u32) & 0xffff;
    t.qp.pmtu = 256 << ((a >> 16) % 5);
    // One MR in four read-only, so that `access-not-granted` frames come too.
    if (a >> 24) & 3 == 0 {
        if let Some(m) = t.mr.as_mut() {
            m.remote_write = false;
            m.remote_atomic = false;
        }
    }
    t
}

/// Rewrites the IP and UDP lengths, the IPv4 header checksum and the ICRC of an Ethernet
/// frame (untagged IPv4 or IPv6, UDP) after bytes were cut from between its headers and its
/// ICRC; the UDP checksum becomes 0. Returns `None` for frames it cannot refit (too short,
/// not IP/UDP).
pub fn refit(frame: &[u8]) -> Option<Vec<u8>> {
    let mut f = frame.to_vec();
    if f.len() < 14 {
        return None;
    }
    let ethertype = u16::from_be_bytes([f[12], f[13]]);
    let ip_at = 14;
    let ip_len = if ethertype == ETHERTYPE_IPV4 { 20 } else { 40 };
    let udp_at = ip_at + ip_len;
    let ib_at = udp_at + udp::HEADER_LEN;
    if f.len() < ib_at + 16 {
        return None;
    }
    let n = f.len();
    let udp_len = (n - udp_at) as u16;
    f[udp_at + 4..udp_at + 6].copy_from_slice(&udp_len.to_be_bytes());
    f[udp_at + 6..udp_at + 8].copy_from_slice(&[0, 0]);
    if ethertype == ETHERTYPE_IPV4 {
        if f[ip_at] != 0x45 {
            return None;
        }
        f[ip_at + 2..ip_at + 4].copy_from_slice(&((n - ip_at) as u16).to_be_bytes());
        ipv4::Packet::new_unchecked(&mut f[ip_at..udp_at]).fill_checksum();
    } else {
        f[ip_at + 4..ip_at + 6].copy_from_slice(&udp_len.to_be_bytes());
    }
    let crc = icrc::compute(&f[ip_at..udp_at], &f[udp_at..ib_at], &f[ib_at..n - 4]).ok()?;
    f[n - 4..].copy_from_slice(&icrc::to_wire(crc));
    Some(f)
}

/// The UDP payload (BTH .. ICRC) of a frame built for `target`.
pub fn udp_payload<'a>(target: &Target, frame: &'a [u8]) -> &'a [u8] {
    let at = target.eth.buffer_len() + target.ip.header_len() + udp::HEADER_LEN;
    &frame[at.min(frame.len())..]
}

/// `true` when `ip` is IPv4.
pub fn is_v4(ip: &IpRepr) -> bool {
    matches!(ip, IpRepr::V4(_))
}

#[cfg(test)]
mod test {
    use super::*;
    use rdmesh_core::wire::RocePacket;

    #[test]
    fn entropy_is_reproducible_and_distinct() {
        assert_eq!(entropy_for(1, 2, 3), entropy_for(1, 2, 3));
        assert_ne!(entropy_for(1, 2, 3), entropy_for(1, 2, 4));
        assert_ne!(entropy_for(1, 2, 3), entropy_for(2, 2, 3));
    }

    #[test]
    fn refit_keeps_a_cut_frame_icrc_valid() {
        let t = Target::example_v4();
        let mut data = [7u8; 64];
        data[0] = 0; // Violation::None
        let f = generate(&t, &data).unwrap();
        let p = RocePacket::parse(&f.bytes).unwrap();
        assert!(p.icrc_valid);
        // Cut 4 payload bytes (when there are any) and refit: still a valid frame.
        if p.payload.len() >= 4 {
            let mut cut = f.bytes.clone();
            let at = cut.len() - 4 - usize::from(p.pad_cnt) - 4;
            cut.drain(at..at + 4);
            let r = refit(&cut).unwrap();
            assert_eq!(icrc::verify_frame(&r), Ok(true));
        }
        assert_eq!(refit(&f.bytes).unwrap().len(), f.bytes.len());
    }
}
