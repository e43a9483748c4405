//! Reading a completion queue: the ownership rule, the consumer index, the CQ doorbell record
//! and arming (rdma-core cq.c `get_sw_cqe`, `update_cons_index`, `mlx5_arm_cq`,
//! `mlx5_cq_event`; Linux cq.h `mlx5_cq_set_ci`, `mlx5_cq_arm`).
//!
//! The CQ is a ring of `2^log_size` 64-byte CQEs, initialised with `op_own = 0xf0`
//! (`MLX5_CQE_INVALID << 4`). The CQE at slot `ci & (n - 1)` belongs to software when its
//! opcode is not INVALID and its owner bit equals `(ci >> log_size) & 1` — the device flips
//! the owner bit it writes on every pass over the ring. After seeing a valid owner bit, read
//! the rest only after `udma_from_device_barrier` (a backend reading DMA memory does this;
//! [`CqReader::poll`] over a plain slice needs none). After a batch of CQEs, store
//! [`CqReader::dbrec`] into dword 0 of the CQ's doorbell record.
//!
//! Arming asks for one completion event: dword 1 of the record and the UAR's CQ doorbell
//! (offset 0x20) receive `sn << 28 | cmd | ci` with `sn = arm_sn & 3`, `cmd` 0 for the next
//! completion or `1 << 24` for the next solicited one; the MMIO value is that word followed by
//! the CQN, big-endian. `arm_sn` advances with every event ([`CqReader::event`]).

use super::cqe::{self, Cqe64, CqeOpcode};
use super::doorbell::{Barrier, DbRecord, Effect, Effects, UAR_CQ_DOORBELL_OFFSET};
use super::{Error, Result};

/// The largest `log_size` accepted (CQC `log_cq_size` is 5 bits; devices allow up to 2^22).
pub const MAX_LOG_SIZE: u8 = 24;

/// `op_own` of a CQE slot nobody has written yet (`MLX5_CQE_INVALID << 4`).
pub const INVALID_OP_OWN: u8 = 0xf0;

/// What an armed CQ waits for (the `cmd` of the arm doorbell).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ArmCmd {
    /// The next completion (`MLX5_CQ_DB_REQ_NOT` = 0).
    Next,
    /// The next solicited completion (`MLX5_CQ_DB_REQ_NOT_SOL` = 1 << 24).
    Solicited,
}

impl ArmCmd {
    /// The command bits.
    pub const fn bits(self) -> u32 {
        match self {
            ArmCmd::Next => 0,
            ArmCmd::Solicited => 1 << 24,
        }
    }
}

/// Consumer state of one completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CqReader {
    log_size: u8,
    cqn: u32,
    ci: u32,
    arm_sn: u8,
}

impl CqReader {
    /// A reader for CQ `cqn` of `2^log_size` entries, consumer index 0, `arm_sn` 0.
    ///
    /// # Errors
    /// [`Error::BadRing`] when `log_size > 24`; [`Error::BadField`] when `cqn ≥ 2^24`.
    pub fn new(log_size: u8, cqn: u32) -> Result<CqReader> {
        if log_size > MAX_LOG_SIZE {
            return Err(Error::BadRing);
        }
        if cqn >= 1 << 24 {
            return Err(Error::BadField);
        }
        Ok(CqReader {
            log_size,
            cqn,
            ci: 0,
            arm_sn: 0,
        })
    }

    /// Sets every CQE of `ring` to `op_own = 0xf0`, as rdma-core and Linux do before creating
    /// the CQ.
    pub fn init_ring(ring: &mut [u8]) {
        for c in ring.chunks_exact_mut(cqe::LEN) {
            c[cqe::LEN - 1] = INVALID_OP_OWN;
        }
    }

    /// Number of entries.
    pub const fn entries(&self) -> usize {
        1 << self.log_size
    }

    /// Ring length in bytes (`entries * 64`).
    pub const fn ring_len(&self) -> usize {
        self.entries() * cqe::LEN
    }

    /// The consumer index (free-running; the record keeps 24 bits).
    pub const fn ci(&self) -> u32 {
        self.ci
    }

    /// Slot of the next CQE to look at.
    pub const fn slot(&self) -> usize {
        (self.ci as usize) & (self.entries() - 1)
    }

    /// Byte offset of the next CQE in the ring.
    pub const fn offset(&self) -> usize {
        self.slot() * cqe::LEN
    }

    /// The ownership rule: `true` when a CQE whose last byte is `op_own` at the current slot
    /// belongs to software (opcode not INVALID and owner bit = `(ci >> log_size) & 1`).
    pub fn owned_by_sw(&self, op_own: u8) -> bool {
        let opcode = CqeOpcode::from(op_own >> 4);
        let pass = ((self.ci >> self.log_size) & 1) as u8;
        opcode != CqeOpcode::Invalid && (op_own & cqe::OWNER_MASK) == pass
    }

    /// The next CQE when software owns it (without consuming it).
    ///
    /// # Errors
    /// [`Error::BadRing`] when `ring.len()` is not [`ring_len`](Self::ring_len).
    pub fn peek<'r>(&self, ring: &'r [u8]) -> Result<Option<Cqe64<&'r [u8]>>> {
        if ring.len() != self.ring_len() {
            return Err(Error::BadRing);
        }
        let off = self.offset();
        let c = &ring[off..off + cqe::LEN];
        Ok(self
            .owned_by_sw(c[cqe::LEN - 1])
            .then(|| Cqe64::new_unchecked(c)))
    }

    /// The next CQE when software owns it, consuming it (consumer index + 1).
    ///
    /// # Errors
    /// [`Error::BadRing`] when `ring.len()` is not [`ring_len`](Self::ring_len).
    pub fn poll<'r>(&mut self, ring: &'r [u8]) -> Result<Option<Cqe64<&'r [u8]>>> {
        let c = self.peek(ring)?;
        if c.is_some() {
            self.consume();
        }
        Ok(c)
    }

    /// Advances the consumer index past one CQE.
    pub fn consume(&mut self) {
        self.ci = self.ci.wrapping_add(1);
    }

    /// CQ doorbell-record dword 0 (`MLX5_CQ_SET_CI`): `htobe32(ci & 0xffffff)`.
    pub const fn dbrec(&self) -> [u8; 4] {
        (self.ci & 0x00ff_ffff).to_be_bytes()
    }

    /// The effect that publishes the consumer index.
    pub const fn update_ci(&self) -> Effect {
        Effect::DbrecStore {
            record: DbRecord::CqSetCi,
            value: self.dbrec(),
        }
    }

    /// Records a completion event (rdma-core `mlx5_cq_event`: `arm_sn++`).
    pub fn event(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
    }

    /// The arm sequence number (2 bits used).
    pub const fn arm_sn(&self) -> u8 {
        self.arm_sn & 3
    }

    /// The arm word `sn << 28 | cmd | (ci & 0xffffff)`.
    pub const fn arm_value(&self, cmd: ArmCmd) -> u32 {
        ((self.arm_sn as u32 & 3) << 28) | cmd.bits() | (self.ci & 0x00ff_ffff)
    }

    /// The effects that arm the CQ (rdma-core cq.c `mlx5_arm_cq`): dbrec dword 1 = the arm
    /// word; `mmio_wc_start`; 64-bit MMIO at UAR offset 0x20 of `arm word << 32 | cqn`,
    /// big-endian; `mmio_flush_writes`.
    pub fn arm(&self, cmd: ArmCmd) -> Effects {
        let v = self.arm_value(cmd);
        let mut e = Effects::new();
        let _ = e.push(Effect::DbrecStore {
            record: DbRecord::CqArm,
            value: v.to_be_bytes(),
        });
        let _ = e.push(Effect::Barrier(Barrier::WcStart));
        let _ = e.push(Effect::Mmio64 {
            offset: UAR_CQ_DOORBELL_OFFSET,
            value: (((v as u64) << 32) | self.cqn as u64).to_be_bytes(),
        });
        let _ = e.push(Effect::Barrier(Barrier::FlushWrites));
        e
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn put(ring: &mut [u8], slot: usize, op_own: u8, counter: u16) {
        let c = &mut ring[slot * 64..slot * 64 + 64];
        c[0x3c..0x3e].copy_from_slice(&counter.to_be_bytes());
        c[63] = op_own;
    }

    #[test]
    fn test_owner_rule_over_two_passes() {
        let mut ring = [0u8; 4 * 64];
        CqReader::init_ring(&mut ring);
        let mut cq = CqReader::new(2, 7).unwrap();
        assert!(cq.poll(&ring).unwrap().is_none());
        // First pass: device writes owner 0.
        for s in 0..4 {
            put(&mut ring, s, 0x00, s as u16);
        }
        for s in 0..4 {
            assert_eq!(cq.poll(&ring).unwrap().unwrap().wqe_counter(), s);
        }
        // Slot 0 still holds the first-pass CQE (owner 0): not ours on pass 2.
        assert!(cq.poll(&ring).unwrap().is_none());
        put(&mut ring, 0, 0x01, 100);
        assert_eq!(cq.poll(&ring).unwrap().unwrap().wqe_counter(), 100);
        assert_eq!(cq.ci(), 5);
        assert_eq!(cq.dbrec(), [0, 0, 0, 5]);
        assert_eq!(cq.poll(&ring[..64]), Err(Error::BadRing));
        // An INVALID opcode is never ours, whatever the owner bit.
        assert!(!cq.owned_by_sw(0xf1));
        assert!(!cq.owned_by_sw(0xf0));
    }

    #[test]
    fn test_arm() {
        let mut cq = CqReader::new(4, 0x12345).unwrap();
        for _ in 0..3 {
            cq.consume();
        }
        cq.event();
        cq.event();
        cq.event();
        cq.event();
        cq.event(); // arm_sn 5 -> sn 1
        assert_eq!(cq.arm_value(ArmCmd::Next), 0x1000_0003);
        assert_eq!(cq.arm_value(ArmCmd::Solicited), 0x1100_0003);
        let e = cq.arm(ArmCmd::Solicited);
        assert_eq!(
            e[0],
            Effect::DbrecStore {
                record: DbRecord::CqArm,
                value: [0x11, 0, 0, 3]
            }
        );
        assert_eq!(
            e[2],
            Effect::Mmio64 {
                offset: 0x20,
                value: [0x11, 0, 0, 3, 0, 0x01, 0x23, 0x45]
            }
        );
        assert!(CqReader::new(25, 0).is_err());
        assert!(CqReader::new(4, 1 << 24).is_err());
    }
}
