//! Datagram segment: the 48-byte address vector after the control segment of UD (and DC)
//! sends (mlx5dv.h `struct mlx5_wqe_av` / `mlx5_wqe_datagram_seg`, `mlx5dv_set_dgram_seg`;
//! Linux qp.h `struct mlx5_av`; rdma-core qp.c `_set_datagram_seg`).
//!
//! ```text
//! bytes 0-7: key: Q_Key (BE32) + reserved, or DC access key (BE64)
//! bytes 8-11: dqp_dct (BE32; bit 31 = MLX5_EXTENDED_UD_AV, bits 23..0 destination QPN/DCT)
//! byte 12: stat_rate_sl | 13: fl_mlid | bytes 14-15: rlid (BE16; RoCE: UDP source port)
//! bytes 16-19: reserved | 20-25: rmac | 26: tclass | 27: hop_limit
//! bytes 28-31: grh_gid_fl (BE32) | bytes 32-47: rgid
//! ```

use super::Result;
use crate::wire::{read_u16, read_u32, read_u64, write_u16, write_u32, write_u64};

mod field {
    use crate::wire::Field;

    pub const KEY: Field = 0..8;
    pub const QKEY: Field = 0..4;
    pub const DQP_DCT: Field = 8..12;
    pub const STAT_RATE_SL: usize = 12;
    pub const FL_MLID: usize = 13;
    pub const RLID: Field = 14..16;
    pub const RESERVED0: Field = 16..20;
    pub const RMAC: Field = 20..26;
    pub const TCLASS: usize = 26;
    pub const HOP_LIMIT: usize = 27;
    pub const GRH_GID_FL: Field = 28..32;
    pub const RGID: Field = 32..48;
}

/// Length of a datagram segment in bytes.
pub const LEN: usize = field::RGID.end;

/// Bit 31 of `dqp_dct`: the address vector is the extended (48-byte) form
/// (`MLX5_EXTENDED_UD_AV`).
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;

mlx5_view!(DatagramSeg, "a datagram (address vector) segment");

impl<T: AsRef<[u8]>> DatagramSeg<T> {
    /// The 64-bit key field (bytes 0–7): DC access key, or Q_Key in the upper half.
    #[inline]
    pub fn key(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::KEY)
    }

    /// The Q_Key (bytes 0–3, UD).
    #[inline]
    pub fn qkey(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::QKEY)
    }

    /// The raw `dqp_dct` word (bytes 8–11).
    #[inline]
    pub fn dqp_dct(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::DQP_DCT)
    }

    /// Static rate and SL / Ethernet priority (byte 12).
    #[inline]
    pub fn stat_rate_sl(&self) -> u8 {
        self.buffer.as_ref()[field::STAT_RATE_SL]
    }

    /// Force-loopback and source LID bits (byte 13).
    #[inline]
    pub fn fl_mlid(&self) -> u8 {
        self.buffer.as_ref()[field::FL_MLID]
    }

    /// Remote LID, or the UDP source port on RoCE (bytes 14–15).
    #[inline]
    pub fn rlid(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::RLID)
    }

    /// Remote MAC address (bytes 20–25).
    #[inline]
    pub fn rmac(&self) -> [u8; 6] {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::RMAC]);
        m
    }

    /// Traffic class / IPv4 ToS (byte 26).
    #[inline]
    pub fn tclass(&self) -> u8 {
        self.buffer.as_ref()[field::TCLASS]
    }

    /// Hop limit / TTL (byte 27).
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// GRH flag, source GID index and flow label (bytes 28–31).
    #[inline]
    pub fn grh_gid_fl(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::GRH_GID_FL)
    }

    /// Remote GID / IP address (bytes 32–47).
    #[inline]
    pub fn rgid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.buffer.as_ref()[field::RGID]);
        g
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DatagramSeg<T> {
    /// Sets the 64-bit key.
    #[inline]
    pub fn set_key(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::KEY, v)
    }

    /// Sets the raw `dqp_dct` word.
    #[inline]
    pub fn set_dqp_dct(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::DQP_DCT, v)
    }

    /// Sets static rate / SL.
    #[inline]
    pub fn set_stat_rate_sl(&mut self, v: u8) {
        self.buffer.as_mut()[field::STAT_RATE_SL] = v;
    }

    /// Sets force-loopback / MLID.
    #[inline]
    pub fn set_fl_mlid(&mut self, v: u8) {
        self.buffer.as_mut()[field::FL_MLID] = v;
    }

    /// Sets the remote LID / UDP source port.
    #[inline]
    pub fn set_rlid(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::RLID, v)
    }

    /// Sets the reserved word (bytes 16–19).
    #[inline]
    pub fn set_reserved0(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::RESERVED0, v)
    }

    /// Sets the remote MAC.
    #[inline]
    pub fn set_rmac(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::RMAC].copy_from_slice(&v);
    }

    /// Sets the traffic class.
    #[inline]
    pub fn set_tclass(&mut self, v: u8) {
        self.buffer.as_mut()[field::TCLASS] = v;
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Sets GRH / GID index / flow label.
    #[inline]
    pub fn set_grh_gid_fl(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::GRH_GID_FL, v)
    }

    /// Sets the remote GID.
    #[inline]
    pub fn set_rgid(&mut self, v: [u8; 16]) {
        self.buffer.as_mut()[field::RGID].copy_from_slice(&v);
    }
}

/// The parsed form of a datagram segment (the arguments of `mlx5dv_set_dgram_seg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DatagramRepr {
    /// Bytes 0–7 as a big-endian u64: DC key, or `(qkey as u64) << 32` for UD.
    pub key: u64,
    /// Destination QPN or DCT number (bits 30..0 of `dqp_dct`; 24 bits in practice).
    pub dqp_dct: u32,
    /// Extended address vector flag (bit 31 of `dqp_dct`; rdma-core always sets it for UD).
    pub ext: bool,
    /// Static rate / SL.
    pub stat_rate_sl: u8,
    /// Force loopback / MLID.
    pub fl_mlid: u8,
    /// Remote LID (InfiniBand) or UDP source port (RoCE).
    pub rlid: u16,
    /// Remote MAC (RoCE).
    pub rmac: [u8; 6],
    /// Traffic class.
    pub tclass: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// GRH flag, GID index, flow label.
    pub grh_gid_fl: u32,
    /// Remote GID.
    pub rgid: [u8; 16],
}

impl DatagramRepr {
    /// Parses a datagram segment; the reserved word at bytes 16–19 is ignored.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) below 48 bytes.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(seg: &DatagramSeg<&T>) -> Result<DatagramRepr> {
        seg.check_len()?;
        let d = seg.dqp_dct();
        Ok(DatagramRepr {
            key: seg.key(),
            dqp_dct: d & !EXTENDED_UD_AV,
            ext: d & EXTENDED_UD_AV != 0,
            stat_rate_sl: seg.stat_rate_sl(),
            fl_mlid: seg.fl_mlid(),
            rlid: seg.rlid(),
            rmac: seg.rmac(),
            tclass: seg.tclass(),
            hop_limit: seg.hop_limit(),
            grh_gid_fl: seg.grh_gid_fl(),
            rgid: seg.rgid(),
        })
    }

    /// Length of the emitted segment: 48 bytes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes all 48 bytes (reserved = 0); panics below 48 bytes. Same bytes as
    /// `mlx5dv_set_dgram_seg` with the same arguments on a zeroed segment.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, seg: &mut DatagramSeg<&mut T>) {
        seg.set_key(self.key);
        seg.set_dqp_dct(((self.ext as u32) << 31) | (self.dqp_dct & !EXTENDED_UD_AV));
        seg.set_stat_rate_sl(self.stat_rate_sl);
        seg.set_fl_mlid(self.fl_mlid);
        seg.set_rlid(self.rlid);
        seg.set_reserved0(0);
        seg.set_rmac(self.rmac);
        seg.set_tclass(self.tclass);
        seg.set_hop_limit(self.hop_limit);
        seg.set_grh_gid_fl(self.grh_gid_fl);
        seg.set_rgid(self.rgid);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn test_emit_parse() {
        let r = DatagramRepr {
            key: 0x1111_1111_0000_0000,
            dqp_dct: 0x12_3456,
            ext: true,
            stat_rate_sl: 3,
            fl_mlid: 0,
            rlid: 0xc000,
            rmac: [2, 0, 0, 0, 0, 9],
            tclass: 0x68,
            hop_limit: 64,
            grh_gid_fl: 0x4000_0000,
            rgid: [0xfe; 16],
        };
        let mut b = [0xeeu8; 48];
        r.emit(&mut DatagramSeg::new_unchecked(&mut b[..]));
        assert_eq!(b[8..12], [0x80, 0x12, 0x34, 0x56]);
        assert_eq!(b[16..20], [0; 4]);
        let s = DatagramSeg::new_checked(&b[..]).unwrap();
        assert_eq!(s.qkey(), 0x1111_1111);
        assert_eq!(DatagramRepr::parse(&s).unwrap(), r);
    }
}
