//! The initialization segment at offset 0 of BAR0 (Linux `include/linux/mlx5/device.h`
//! `struct mlx5_init_seg` and `struct health_buffer`; rdma-core
//! `providers/mlx5/mlx5_vfio.h`): firmware revision, command-interface revision, command
//! queue address / size / stride, the command doorbell, the `initializing` bit, the health
//! buffer and counter. All registers are big-endian 32-bit.
//!
//! A driver accesses these registers through MMIO: the byte offsets are the public constants
//! below ([`FW_REV`], [`CMDQ_ADDR_L_SZ`], ...) and the register values decode with the
//! functions here. A device model keeps the segment in memory and uses the [`InitSeg`] view.

use super::CmdError;
use crate::wire::{read_u16, read_u32, read_u64, write_u32};

/// `fw_rev`: bits 15..0 major, 31..16 minor.
pub const FW_REV: usize = 0x000;
/// `cmdif_rev_fw_sub`: bits 31..16 command-interface revision, 15..0 firmware subminor.
pub const CMDIF_REV_FW_SUB: usize = 0x004;
/// `cmdq_addr_h`: high 32 bits of the command queue's DMA address.
pub const CMDQ_ADDR_H: usize = 0x010;
/// `cmdq_addr_l_sz`: write: low 32 bits of the (4 KiB aligned) command queue address; read:
/// bits 10..8 NIC interface state, 7..4 `log_cmdq_size`, 3..0 `log_cmdq_stride`.
pub const CMDQ_ADDR_L_SZ: usize = 0x014;
/// `cmd_dbell`: write `1 << slot` to hand command queue entry `slot` to the device.
pub const CMD_DBELL: usize = 0x018;
/// `initializing`: bit 31 set while the firmware initializes; bit 30 firmware reset supported.
pub const INITIALIZING: usize = 0x1fc;
/// Start of the 64-byte health buffer (`struct health_buffer health`).
pub const HEALTH: usize = 0x200;
/// `health.assert_var[6]` (BE32 each).
pub const HEALTH_ASSERT_VAR: usize = 0x200;
/// `health.assert_exit_ptr`.
pub const HEALTH_ASSERT_EXIT_PTR: usize = 0x220;
/// `health.assert_callra`.
pub const HEALTH_ASSERT_CALLRA: usize = 0x224;
/// `health.time`.
pub const HEALTH_TIME: usize = 0x22c;
/// `health.fw_ver` (0xffffffff when the PCI function is dead).
pub const HEALTH_FW_VER: usize = 0x230;
/// `health.hw_id`.
pub const HEALTH_HW_ID: usize = 0x234;
/// `health.rfr_severity`: bit 7 recovery-flow required (`MLX5_RFR_BIT_OFFSET`), low bits
/// severity.
pub const HEALTH_RFR_SEVERITY: usize = 0x238;
/// `health.irisc_index`.
pub const HEALTH_IRISC_INDEX: usize = 0x23c;
/// `health.synd`: health syndrome, 0 = healthy.
pub const HEALTH_SYND: usize = 0x23d;
/// `health.ext_synd` (BE16).
pub const HEALTH_EXT_SYND: usize = 0x23e;
/// `cmd_exec_to`: command execution timeout (newer firmware).
pub const CMD_EXEC_TO: usize = 0xff8;
/// `cmd_q_init_to`: command queue init timeout (newer firmware).
pub const CMD_Q_INIT_TO: usize = 0xffc;
/// `internal_timer_h`.
pub const INTERNAL_TIMER_H: usize = 0x1000;
/// `internal_timer_l`.
pub const INTERNAL_TIMER_L: usize = 0x1004;
/// `health_counter`: low 24 bits advance while the firmware is alive.
pub const HEALTH_COUNTER: usize = 0x1010;
/// `real_time_h`.
pub const REAL_TIME_H: usize = 0x1040;
/// `real_time_l`.
pub const REAL_TIME_L: usize = 0x1044;
/// `ieee1588_clk` (BE64).
pub const IEEE1588_CLK: usize = 0x2000;
/// `ieee1588_clk_type`.
pub const IEEE1588_CLK_TYPE: usize = 0x2008;
/// `clr_intx`.
pub const CLR_INTX: usize = 0x200c;
/// Length of the init segment structure in bytes.
pub const LEN: usize = 0x2010;
/// Length of the health buffer in bytes.
pub const HEALTH_LEN: usize = 0x40;

/// The command-interface revision this layout describes (`CMD_IF_REV` = 5, Linux cmd.c,
/// rdma-core mlx5_vfio.c).
pub const CMD_IF_REV: u16 = 5;
/// Bit of `initializing` set while the firmware initializes.
pub const INITIALIZING_BIT: u32 = 1 << 31;
/// Bit of `initializing` telling that firmware reset is supported
/// (`MLX5_FW_RESET_SUPPORTED_OFFSET` = 30).
pub const FW_RESET_SUPPORTED_BIT: u32 = 1 << 30;
/// Shift of the NIC interface state in `cmdq_addr_l_sz` (`MLX5_NIC_IFC_OFFSET`).
pub const NIC_IFC_OFFSET: u32 = 8;
/// Mask of the 24 live bits of `health_counter`.
pub const HEALTH_COUNTER_MASK: u32 = 0x00ff_ffff;
/// Bit of `rfr_severity` saying a recovery flow is required (`MLX5_RFR_BIT_OFFSET` = 7).
pub const RFR_BIT_OFFSET: u32 = 7;

/// Byte offsets of the segment's fields with device.h names (nested health fields as
/// `health.<name>`), for the conformance test.
pub const OFFSETS: &[(&str, usize)] = &[
    ("fw_rev", FW_REV),
    ("cmdif_rev_fw_sub", CMDIF_REV_FW_SUB),
    ("cmdq_addr_h", CMDQ_ADDR_H),
    ("cmdq_addr_l_sz", CMDQ_ADDR_L_SZ),
    ("cmd_dbell", CMD_DBELL),
    ("initializing", INITIALIZING),
    ("health", HEALTH),
    ("health.assert_var", HEALTH_ASSERT_VAR),
    ("health.assert_exit_ptr", HEALTH_ASSERT_EXIT_PTR),
    ("health.assert_callra", HEALTH_ASSERT_CALLRA),
    ("health.time", HEALTH_TIME),
    ("health.fw_ver", HEALTH_FW_VER),
    ("health.hw_id", HEALTH_HW_ID),
    ("health.rfr_severity", HEALTH_RFR_SEVERITY),
    ("health.irisc_index", HEALTH_IRISC_INDEX),
    ("health.synd", HEALTH_SYND),
    ("health.ext_synd", HEALTH_EXT_SYND),
    ("cmd_exec_to", CMD_EXEC_TO),
    ("cmd_q_init_to", CMD_Q_INIT_TO),
    ("internal_timer_h", INTERNAL_TIMER_H),
    ("internal_timer_l", INTERNAL_TIMER_L),
    ("health_counter", HEALTH_COUNTER),
    ("real_time_h", REAL_TIME_H),
    ("real_time_l", REAL_TIME_L),
    ("ieee1588_clk", IEEE1588_CLK),
    ("ieee1588_clk_type", IEEE1588_CLK_TYPE),
    ("clr_intx", CLR_INTX),
];

enum_with_unknown! {
    /// NIC interface state: bits 10..8 of `cmdq_addr_l_sz` (Linux mlx5_core.h
    /// `MLX5_NIC_IFC_*`; rdma-core mlx5_vfio.c `mlx5_vfio_get_nic_state`).
    pub enum NicIfcState(u8) {
        /// `MLX5_NIC_IFC_FULL`: driver owns the function.
        Full = 0,
        /// `MLX5_NIC_IFC_DISABLED`: after fast teardown.
        Disabled = 1,
        /// `MLX5_NIC_IFC_NO_DRAM_NIC`.
        NoDramNic = 2,
        /// `MLX5_NIC_IFC_SW_RESET`.
        SwReset = 7,
    }
}

/// Firmware version `(major, minor, subminor)` from `fw_rev` and `cmdif_rev_fw_sub`.
pub const fn fw_version(fw_rev: u32, cmdif_rev_fw_sub: u32) -> (u16, u16, u16) {
    (
        (fw_rev & 0xffff) as u16,
        (fw_rev >> 16) as u16,
        (cmdif_rev_fw_sub & 0xffff) as u16,
    )
}

/// The command-interface revision from `cmdif_rev_fw_sub` (must be [`CMD_IF_REV`]).
pub const fn cmdif_rev(cmdif_rev_fw_sub: u32) -> u16 {
    (cmdif_rev_fw_sub >> 16) as u16
}

/// What a read of `cmdq_addr_l_sz` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CmdqAddrLSz {
    /// log2 of the number of command queue entries (bits 7..4).
    pub log_cmdq_size: u8,
    /// log2 of the distance between entries in bytes (bits 3..0).
    pub log_cmdq_stride: u8,
    /// NIC interface state (bits 10..8).
    pub nic_ifc: NicIfcState,
}

impl CmdqAddrLSz {
    /// Decodes a value read from `cmdq_addr_l_sz`.
    pub fn decode(v: u32) -> CmdqAddrLSz {
        CmdqAddrLSz {
            log_cmdq_size: ((v >> 4) & 0xf) as u8,
            log_cmdq_stride: (v & 0xf) as u8,
            nic_ifc: NicIfcState::from(((v >> NIC_IFC_OFFSET) & 7) as u8),
        }
    }

    /// The register value a device presents (address bits 31..12 are the caller's to merge).
    pub fn encode(&self) -> u32 {
        (u32::from(u8::from(self.nic_ifc)) & 7) << NIC_IFC_OFFSET
            | (u32::from(self.log_cmdq_size) & 0xf) << 4
            | (u32::from(self.log_cmdq_stride) & 0xf)
    }

    /// Checks the command queue geometry the way Linux cmd.c / rdma-core do: at most
    /// [`super::entry::MAX_COMMANDS`] entries, entries at least 64 bytes apart, and the whole
    /// queue within one 4 KiB page.
    ///
    /// # Errors
    /// [`CmdError::BadField`] naming `log_cmdq_size` or `log_cmdq_stride`.
    pub fn check_geometry(&self) -> Result<(), CmdError> {
        if (1usize << self.log_cmdq_size) > super::entry::MAX_COMMANDS {
            return Err(CmdError::BadField {
                field: "log_cmdq_size",
            });
        }
        if self.log_cmdq_stride < 6 || self.log_cmdq_size + self.log_cmdq_stride > 12 {
            return Err(CmdError::BadField {
                field: "log_cmdq_stride",
            });
        }
        Ok(())
    }
}

/// The value software writes to `cmdq_addr_l_sz` to program a command queue at DMA address
/// `addr`: its low 32 bits with bits 11..0 cleared (the queue is 4 KiB aligned). Write
/// `cmdq_addr_h` = `addr >> 32` first (Linux cmd.c `mlx5_cmd_enable`).
pub const fn cmdq_addr_low(addr: u64) -> u32 {
    (addr as u32) & !0xfff
}

/// The value to write to `cmdq_addr_l_sz` to request NIC interface state `state`, keeping
/// bits 31..12 of the `current` register value (rdma-core `mlx5_vfio_set_nic_state`).
pub fn with_nic_state(current: u32, state: NicIfcState) -> u32 {
    (current & 0xffff_f000) | (u32::from(u8::from(state)) & 7) << NIC_IFC_OFFSET
}

/// `true` while `initializing` (its register value) says the firmware is still starting.
pub const fn is_initializing(initializing: u32) -> bool {
    initializing & INITIALIZING_BIT != 0
}

/// The live 24 bits of a `health_counter` read; a driver declares the device dead when it
/// stops changing (rdma-core: three 1 s polls).
pub const fn health_count(health_counter: u32) -> u32 {
    health_counter & HEALTH_COUNTER_MASK
}

mlx5_view!(InitSeg, "the init segment (BAR0 offset 0)", cmd);

impl<T: AsRef<[u8]>> InitSeg<T> {
    fn reg(&self, off: usize) -> u32 {
        read_u32(self.buffer.as_ref(), off..off + 4)
    }
    /// Reads the BE32 register at byte offset `off` (one of the constants of this module);
    /// `None` when it is not inside the segment or not 4-byte aligned.
    pub fn read(&self, off: usize) -> Option<u32> {
        (off % 4 == 0 && off + 4 <= LEN).then(|| self.reg(off))
    }
    /// `fw_rev`.
    pub fn fw_rev(&self) -> u32 {
        self.reg(FW_REV)
    }
    /// `cmdif_rev_fw_sub`.
    pub fn cmdif_rev_fw_sub(&self) -> u32 {
        self.reg(CMDIF_REV_FW_SUB)
    }
    /// `cmdq_addr_h`.
    pub fn cmdq_addr_h(&self) -> u32 {
        self.reg(CMDQ_ADDR_H)
    }
    /// `cmdq_addr_l_sz`.
    pub fn cmdq_addr_l_sz(&self) -> u32 {
        self.reg(CMDQ_ADDR_L_SZ)
    }
    /// `cmd_dbell`.
    pub fn cmd_dbell(&self) -> u32 {
        self.reg(CMD_DBELL)
    }
    /// `initializing`.
    pub fn initializing(&self) -> u32 {
        self.reg(INITIALIZING)
    }
    /// `health.fw_ver`.
    pub fn health_fw_ver(&self) -> u32 {
        self.reg(HEALTH_FW_VER)
    }
    /// `health.synd`.
    pub fn health_synd(&self) -> u8 {
        self.buffer.as_ref()[HEALTH_SYND]
    }
    /// `health.ext_synd`.
    pub fn health_ext_synd(&self) -> u16 {
        read_u16(self.buffer.as_ref(), HEALTH_EXT_SYND..HEALTH_EXT_SYND + 2)
    }
    /// `health.rfr_severity`.
    pub fn health_rfr_severity(&self) -> u8 {
        self.buffer.as_ref()[HEALTH_RFR_SEVERITY]
    }
    /// `health_counter`.
    pub fn health_counter(&self) -> u32 {
        self.reg(HEALTH_COUNTER)
    }
    /// `ieee1588_clk`.
    pub fn ieee1588_clk(&self) -> u64 {
        read_u64(self.buffer.as_ref(), IEEE1588_CLK..IEEE1588_CLK + 8)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> InitSeg<T> {
    /// Writes the BE32 register at byte offset `off`; returns `false` (and writes nothing)
    /// when it is not inside the segment or not 4-byte aligned.
    pub fn write(&mut self, off: usize, v: u32) -> bool {
        if off % 4 != 0 || off + 4 > LEN {
            return false;
        }
        write_u32(self.buffer.as_mut(), off..off + 4, v);
        true
    }
    /// Sets `health.synd`.
    pub fn set_health_synd(&mut self, v: u8) {
        self.buffer.as_mut()[HEALTH_SYND] = v;
    }
    /// Sets `health.rfr_severity`.
    pub fn set_health_rfr_severity(&mut self, v: u8) {
        self.buffer.as_mut()[HEALTH_RFR_SEVERITY] = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_decode() {
        assert_eq!(fw_version(0x0027_001c, 0x0005_0fa0), (0x1c, 0x27, 0xfa0));
        assert_eq!(cmdif_rev(0x0005_0fa0), CMD_IF_REV);
        let d = CmdqAddrLSz::decode(0x1234_5156);
        assert_eq!(d.log_cmdq_size, 5);
        assert_eq!(d.log_cmdq_stride, 6);
        assert_eq!(d.nic_ifc, NicIfcState::Disabled);
        assert_eq!(d.encode(), 0x156);
        assert_eq!(d.check_geometry(), Ok(()));
        let big = CmdqAddrLSz {
            log_cmdq_size: 6,
            ..d
        };
        assert!(big.check_geometry().is_err());
        assert_eq!(
            with_nic_state(0xabcd_e7ff, NicIfcState::Disabled),
            0xabcd_e100
        );
        assert!(is_initializing(0x8000_0000));
        assert!(!is_initializing(0x4000_0000));
        assert_eq!(health_count(0xff12_3456), 0x12_3456);
        assert_eq!(cmdq_addr_low(0x1_2345_6789), 0x2345_6000);
    }

    #[test]
    fn view() {
        let mut b = [0u8; LEN];
        let mut s = InitSeg::new_checked(&mut b[..]).unwrap();
        assert!(s.write(INITIALIZING, INITIALIZING_BIT));
        assert!(!s.write(LEN - 2, 1));
        assert!(!s.write(3, 1));
        assert!(s.write(HEALTH_COUNTER, 7));
        s.set_health_synd(0xb);
        assert_eq!(s.initializing(), 0x8000_0000);
        assert_eq!(s.read(HEALTH_COUNTER), Some(7));
        assert_eq!(s.read(LEN), None);
        assert_eq!(s.health_synd(), 0xb);
        assert_eq!(b[0x1fc], 0x80);
        assert!(InitSeg::new_checked(&[0u8; 16][..]).is_err());
    }
}
