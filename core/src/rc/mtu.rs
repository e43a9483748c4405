//! Path MTU: the largest payload, in bytes, one RC packet carries.
//!
//! Source: IBTA vol. 1 §9.7.1 / §7.7.8 (PMTU ∈ {256, 512, 1024, 2048, 4096} bytes); libibverbs
//! `enum ibv_mtu` numbers them 1..=5.

/// The IB path MTU of a QP (`ibv_qp_attr.path_mtu`).
///
/// It bounds the payload of every SEND/WRITE packet and READ response; FIRST and MIDDLE packets
/// carry exactly this many bytes (IBTA vol. 1 §9.7.1; rxe_resp.c `check_length`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Mtu {
    /// 256 bytes (`IBV_MTU_256` = 1).
    Mtu256,
    /// 512 bytes (`IBV_MTU_512` = 2).
    Mtu512,
    /// 1024 bytes (`IBV_MTU_1024` = 3).
    Mtu1024,
    /// 2048 bytes (`IBV_MTU_2048` = 4).
    Mtu2048,
    /// 4096 bytes (`IBV_MTU_4096` = 5).
    Mtu4096,
}

impl Mtu {
    /// Every path MTU, smallest first.
    pub const ALL: [Mtu; 5] = [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ];

    /// The MTU in bytes (256..=4096).
    pub const fn bytes(self) -> u32 {
        match self {
            Mtu::Mtu256 => 256,
            Mtu::Mtu512 => 512,
            Mtu::Mtu1024 => 1024,
            Mtu::Mtu2048 => 2048,
            Mtu::Mtu4096 => 4096,
        }
    }

    /// The MTU whose size is exactly `bytes`, or `None` when `bytes` is not one of
    /// 256, 512, 1024, 2048, 4096.
    pub const fn from_bytes(bytes: u32) -> Option<Mtu> {
        match bytes {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }

    /// The libibverbs `enum ibv_mtu` number (1 = 256 … 5 = 4096).
    pub const fn ibv_mtu(self) -> u8 {
        match self {
            Mtu::Mtu256 => 1,
            Mtu::Mtu512 => 2,
            Mtu::Mtu1024 => 3,
            Mtu::Mtu2048 => 4,
            Mtu::Mtu4096 => 5,
        }
    }

    /// The MTU for a libibverbs `enum ibv_mtu` number, `None` outside 1..=5.
    pub const fn from_ibv_mtu(v: u8) -> Option<Mtu> {
        match v {
            1 => Some(Mtu::Mtu256),
            2 => Some(Mtu::Mtu512),
            3 => Some(Mtu::Mtu1024),
            4 => Some(Mtu::Mtu2048),
            5 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }

    /// Number of packets (and PSNs) a message of `len` bytes occupies:
    /// `max(1, ceil(len / PMTU))`. A zero-length message is one packet.
    ///
    /// Source: rxe_req.c `update_wqe_psn` (READ requests reserve this many PSNs),
    /// rxe_resp.c `rxe_prepare_res`.
    pub const fn packets(self, len: u32) -> u32 {
        let m = self.bytes();
        if len == 0 {
            1
        } else {
            len.div_ceil(m)
        }
    }

    /// The payload bytes of packet `index` (0-based) of a `len`-byte message:
    /// `min(PMTU, len - index·PMTU)`, 0 past the end.
    pub const fn segment_len(self, len: u32, index: u32) -> u32 {
        let off = index as u64 * self.bytes() as u64;
        if off >= len as u64 {
            0
        } else {
            let rest = len as u64 - off;
            if rest > self.bytes() as u64 {
                self.bytes()
            } else {
                rest as u32
            }
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn sizes_round_trip() {
        for m in Mtu::ALL {
            assert_eq!(Mtu::from_bytes(m.bytes()), Some(m));
            assert_eq!(Mtu::from_ibv_mtu(m.ibv_mtu()), Some(m));
            assert_eq!(m.bytes(), 128 << m.ibv_mtu());
        }
        assert_eq!(Mtu::from_bytes(1500), None);
        assert_eq!(Mtu::from_ibv_mtu(0), None);
        assert_eq!(Mtu::from_ibv_mtu(6), None);
    }

    #[test]
    fn packet_counts() {
        let m = Mtu::Mtu1024;
        assert_eq!(m.packets(0), 1);
        assert_eq!(m.packets(1), 1);
        assert_eq!(m.packets(1024), 1);
        assert_eq!(m.packets(1025), 2);
        assert_eq!(m.packets(u32::MAX), 4_194_304);
        assert_eq!(m.segment_len(1025, 0), 1024);
        assert_eq!(m.segment_len(1025, 1), 1);
        assert_eq!(m.segment_len(1025, 2), 0);
        assert_eq!(m.segment_len(0, 0), 0);
    }
}
