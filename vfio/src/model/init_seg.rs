//! The initialization segment at BAR0 offset 0 (Linux device.h `mlx5_init_seg`; rdma-core
//! mlx5_vfio.h): firmware revision, command interface revision and queue address, the command
//! doorbell, `initializing`, the health buffer and the health counter.

use rdmesh_core::mlx5::cmd::init_seg::{self as reg, CmdqAddrLSz, NicIfcState};

use super::device::DeviceState;
use super::ModelConfig;

/// log2 of the command queue entries the model offers (32, `MLX5_MAX_COMMANDS`).
pub const LOG_CMDQ_SIZE: u8 = 5;
/// log2 of the command entry stride (64 bytes).
pub const LOG_CMDQ_STRIDE: u8 = 6;

/// Init-segment registers the driver can change, and the firmware's start-up progress.
#[derive(Debug, Clone)]
pub struct InitSegState {
    pub cmdq_addr_h: u32,
    pub cmdq_addr_l: u32,
    pub nic_ifc: NicIfcState,
    /// Reads of `initializing` left before it clears.
    pub init_reads_left: u32,
    pub health_counter: u32,
}

impl InitSegState {
    pub fn new(cfg: &ModelConfig) -> Self {
        InitSegState {
            cmdq_addr_h: 0,
            cmdq_addr_l: 0,
            nic_ifc: NicIfcState::Disabled,
            init_reads_left: cfg.init_reads,
            health_counter: 0,
        }
    }

    /// The command queue's DMA address.
    pub fn cmdq_addr(&self) -> u64 {
        u64::from(self.cmdq_addr_h) << 32 | u64::from(self.cmdq_addr_l & !0xfff)
    }
}

/// What a store to the init segment asks the device to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitWrite {
    /// Nothing more.
    None,
    /// Execute the commands whose slot bits are set.
    CmdDoorbell(u32),
}

impl DeviceState {
    /// A 32-bit register read (host value, before the BAR's byte order).
    pub fn init_read(&mut self, off: usize) -> u32 {
        let (maj, min, sub) = self.cfg.fw_version;
        let alive = !self.faults.health_counter_frozen && self.faults.health_syndrome.is_none();
        match off {
            reg::FW_REV | reg::HEALTH_FW_VER => u32::from(min) << 16 | u32::from(maj),
            reg::CMDIF_REV_FW_SUB => u32::from(reg::CMD_IF_REV) << 16 | u32::from(sub),
            reg::CMDQ_ADDR_H => self.init.cmdq_addr_h,
            reg::CMDQ_ADDR_L_SZ => {
                (self.init.cmdq_addr_l & !0xfff)
                    | CmdqAddrLSz {
                        log_cmdq_size: LOG_CMDQ_SIZE,
                        log_cmdq_stride: LOG_CMDQ_STRIDE,
                        nic_ifc: self.init.nic_ifc,
                    }
                    .encode()
            }
            reg::INITIALIZING => {
                if self.faults.initializing_stuck {
                    return reg::INITIALIZING_BIT;
                }
                if self.init.init_reads_left > 0 {
                    self.init.init_reads_left -= 1;
                    reg::INITIALIZING_BIT
                } else {
                    0
                }
            }
            reg::HEALTH_HW_ID => 0x0000_0218,
            0x23c => u32::from(self.faults.health_syndrome.unwrap_or(0)) << 16,
            reg::HEALTH_COUNTER => {
                if alive {
                    self.init.health_counter = self.init.health_counter.wrapping_add(1);
                }
                self.init.health_counter & reg::HEALTH_COUNTER_MASK
            }
            reg::INTERNAL_TIMER_H => (self.start.elapsed().as_nanos() >> 32) as u32,
            reg::INTERNAL_TIMER_L => self.start.elapsed().as_nanos() as u32,
            _ => 0,
        }
    }

    /// A 32-bit register store (host value).
    pub fn init_write(&mut self, off: usize, value: u32) -> InitWrite {
        self.counters.init_seg_writes += 1;
        match off {
            reg::CMDQ_ADDR_H => self.init.cmdq_addr_h = value,
            reg::CMDQ_ADDR_L_SZ => {
                self.init.cmdq_addr_l = value & !0xfff;
                self.init.nic_ifc = NicIfcState::from(((value >> reg::NIC_IFC_OFFSET) & 7) as u8);
            }
            reg::CMD_DBELL => {
                self.counters.cmd_doorbells += 1;
                return InitWrite::CmdDoorbell(value);
            }
            _ => {
                tracing::debug!(
                    offset = off,
                    value,
                    "model: store to a read-only init-segment register ignored"
                );
            }
        }
        InitWrite::None
    }
}
