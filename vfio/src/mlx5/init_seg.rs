//! Reading the init segment (BAR0 offset 0): waiting for firmware initialization, the
//! command-interface revision and the command-queue geometry (rdma-core `mlx5_vfio.c`
//! `wait_fw_init`, `mlx5_vfio_init_cmd_interface`; Linux `device.h` `mlx5_init_seg`).

use std::time::Instant;

use rdmesh_core::mlx5::cmd::init_seg::{self as seg, CmdqAddrLSz};

use super::{DriverConfig, DriverError, Result};
use crate::seam::Mmio;

/// Polls the `initializing` bit (0x1fc bit 31) every `cfg.init_poll` until it clears.
///
/// # Errors
/// [`DriverError::InitTimeout`] after `cfg.init_timeout`.
pub fn wait_fw_init(mmio: &dyn Mmio, cfg: &DriverConfig) -> Result<()> {
    let start = Instant::now();
    loop {
        if !seg::is_initializing(mmio.read32_be(seg::INITIALIZING)) {
            return Ok(());
        }
        if start.elapsed() >= cfg.init_timeout {
            return Err(DriverError::InitTimeout {
                device: cfg.name.clone(),
                waited: start.elapsed(),
                health_synd: (mmio.read32_be(seg::HEALTH_SYND & !3) >> 16) as u8,
            });
        }
        std::thread::sleep(cfg.init_poll);
    }
}

/// Firmware version `(major, minor, subminor)` from 0x000 / 0x004.
pub fn fw_version(mmio: &dyn Mmio) -> (u16, u16, u16) {
    seg::fw_version(
        mmio.read32_be(seg::FW_REV),
        mmio.read32_be(seg::CMDIF_REV_FW_SUB),
    )
}

/// Checks the command-interface revision (must be 5) and returns the command-queue geometry.
///
/// # Errors
/// [`DriverError::CmdifRev`], [`DriverError::CmdqGeometry`].
pub fn cmdq_geometry(mmio: &dyn Mmio, cfg: &DriverConfig) -> Result<CmdqAddrLSz> {
    let rev = seg::cmdif_rev(mmio.read32_be(seg::CMDIF_REV_FW_SUB));
    if rev != seg::CMD_IF_REV {
        let (a, b, c) = fw_version(mmio);
        return Err(DriverError::CmdifRev {
            device: cfg.name.clone(),
            found: rev,
            fw: format!("{a}.{b}.{c}"),
        });
    }
    let g = CmdqAddrLSz::decode(mmio.read32_be(seg::CMDQ_ADDR_L_SZ));
    g.check_geometry().map_err(|_| DriverError::CmdqGeometry {
        device: cfg.name.clone(),
        log_size: g.log_cmdq_size,
        log_stride: g.log_cmdq_stride,
    })?;
    Ok(g)
}

/// Programs the command-queue address: high half first, then the low half (the geometry
/// bits are read-only), then a write barrier (rdma-core order).
pub fn set_cmdq_addr(mmio: &dyn Mmio, iova: u64) {
    mmio.write32_be(seg::CMDQ_ADDR_H, (iova >> 32) as u32);
    mmio.write32_be(seg::CMDQ_ADDR_L_SZ, seg::cmdq_addr_low(iova));
    super::barrier::flush_writes();
}
