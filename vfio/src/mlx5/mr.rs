//! Registered memory: a DMA buffer and the memory key (CREATE_MKEY, MTT access mode) that
//! lets the device reach it (rdma-core `mlx5_vfio_reg_mr`; Linux `hw/mlx5/mr.c`).
//!
//! The region's address (what SGEs and remote RDMA addresses use) is its IOVA. The CPU
//! reaches the bytes only through copies ([`Mr::write`], [`Mr::read`]): the device writes
//! them concurrently, so no Rust reference into the memory is ever handed out.

use std::sync::Arc;

use rdmesh_core::mlx5::cmd::{
    mkey, CreateMkeyIn, CreateMkeyOut, DestroyMkeyIn, MkeyContext, Opcode, Pas, MKC_ACCESS_MODE_MTT,
};

use super::cmdif::parse_err;
use super::hca::HcaInner;
use super::pd::{Pd, PdInner};
use super::{DriverError, Result};
use crate::seam::DmaBuffer;

/// MTT entry flags: bit 0 read, bit 1 write (Linux `MLX5_IB_MTT_PRESENT`).
const MTT_READ_WRITE: u64 = 0x3;

/// Access rights of a memory region (verbs `IBV_ACCESS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    /// The device may write locally (receives, READ responses): `lw`.
    pub local_write: bool,
    /// Remote RDMA WRITE: `rw`.
    pub remote_write: bool,
    /// Remote RDMA READ: `rr`.
    pub remote_read: bool,
    /// Remote atomics: `a`.
    pub remote_atomic: bool,
}

impl Access {
    /// Everything allowed.
    pub const ALL: Access = Access {
        local_write: true,
        remote_write: true,
        remote_read: true,
        remote_atomic: true,
    };
}

/// A registered memory region; its MKEY is destroyed on drop, then its memory released.
#[derive(Debug)]
pub struct Mr {
    hca: Arc<HcaInner>,
    _pd: Arc<PdInner>,
    buf: Box<dyn DmaBuffer>,
    len: usize,
    mkey_index: u32,
    key: u32,
}

impl Mr {
    /// Allocates `len` bytes of DMA memory (zeroed) and registers them in `pd`.
    ///
    /// # Errors
    /// [`DriverError::Dma`], [`DriverError::Config`] for a zero length, command errors.
    pub fn register(pd: &Pd, len: usize, access: Access) -> Result<Mr> {
        let hca = pd.inner.hca.clone();
        let name = hca.cfg.name.clone();
        if len == 0 {
            return Err(DriverError::config(&name, "memory region of 0 bytes"));
        }
        let buf = hca
            .dma
            .alloc(len, 4096)
            .map_err(|e| DriverError::dma(&name, e))?;
        let npages = buf.len().div_ceil(4096);
        let mtt: Vec<u64> = (0..npages)
            .map(|i| (buf.iova() + (i * 4096) as u64) | MTT_READ_WRITE)
            .collect();
        let octwords = npages.div_ceil(2) as u32;
        let key8 = 0x5a;
        let mkc = MkeyContext {
            a: access.remote_atomic,
            rw: access.remote_write,
            rr: access.remote_read,
            lw: access.local_write,
            lr: true,
            access_mode_1_0: MKC_ACCESS_MODE_MTT,
            qpn: 0xff_ffff,
            mkey_7_0: key8,
            pd: pd.pdn(),
            start_addr: buf.iova(),
            len: len as u64,
            translations_octword_size: octwords,
            log_page_size: 12,
            ..Default::default()
        };
        let what = format!("memory region of {len} bytes at IOVA {:#x}", buf.iova());
        let out = hca.hw().exec(
            &CreateMkeyIn {
                pg_access: false,
                memory_key_mkey_entry: mkc,
                translations_octword_actual_size: octwords,
                pas: Pas::Addrs(&mtt),
            },
            0,
            &what,
        )?;
        let mkey_index = CreateMkeyOut::parse(&out)
            .map_err(|e| parse_err(&name, Opcode::CreateMkey, e, &what))?
            .mkey_index;
        Ok(Mr {
            hca,
            _pd: pd.inner.clone(),
            buf,
            len,
            mkey_index,
            key: mkey(mkey_index, key8),
        })
    }

    /// The region's first address (its IOVA), for SGEs and remote addresses.
    pub fn addr(&self) -> u64 {
        self.buf.iova()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: registration refuses 0 bytes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// L_Key (`mkey_index << 8 | mkey_7_0`).
    pub fn lkey(&self) -> u32 {
        self.key
    }

    /// R_Key (same value as the L_Key).
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// Copies `data` into the region at byte `offset`.
    ///
    /// # Errors
    /// [`DriverError::Dma`] outside the region.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.bounds(offset, data.len())?;
        self.buf
            .write(offset, data)
            .map_err(|e| DriverError::dma(&self.hca.cfg.name, e))
    }

    /// Copies `out.len()` bytes from byte `offset` of the region.
    ///
    /// # Errors
    /// [`DriverError::Dma`] outside the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.bounds(offset, out.len())?;
        self.buf
            .read(offset, out)
            .map_err(|e| DriverError::dma(&self.hca.cfg.name, e))
    }

    /// Runs `f` on the `len` bytes at `offset` of the region ([`DmaBuffer::with_bytes`]:
    /// a copy with the changed bytes written back, or the bytes themselves where the buffer
    /// can hold the device off, as the device model's can).
    ///
    /// # Errors
    /// [`DriverError::Dma`] outside the region.
    pub fn with_bytes(
        &self,
        offset: usize,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<()> {
        self.bounds(offset, len)?;
        self.buf
            .with_bytes(offset, len, f)
            .map_err(|e| DriverError::dma(&self.hca.cfg.name, e))
    }

    fn bounds(&self, offset: usize, len: usize) -> Result<()> {
        if !offset.checked_add(len).is_some_and(|end| end <= self.len) {
            return Err(DriverError::dma(
                &self.hca.cfg.name,
                crate::seam::DmaError::OutOfBounds {
                    offset,
                    len,
                    size: self.len,
                },
            ));
        }
        Ok(())
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let what = format!("MKEY {:#x}", self.key);
        if let Err(e) = self.hca.hw().exec(
            &DestroyMkeyIn {
                mkey_index: self.mkey_index,
            },
            0,
            &what,
        ) {
            tracing::warn!(device = %self.hca.cfg.name, "DESTROY_MKEY {what}: {e}");
        }
    }
}
