//! Protection domains (ALLOC_PD / DEALLOC_PD).

use std::sync::Arc;

use rdmesh_core::mlx5::cmd::{AllocPdIn, AllocPdOut, DeallocPdIn, Opcode};

use super::cmdif::parse_err;
use super::hca::{Hca, HcaInner};
use super::Result;

/// The PD itself; DEALLOC_PD runs when the last [`Pd`] handle and every MR/QP in it are
/// gone.
#[derive(Debug)]
pub struct PdInner {
    pub(crate) hca: Arc<HcaInner>,
    pub(crate) pdn: u32,
}

/// A protection domain. Clones share it; memory regions and QPs keep it alive.
#[derive(Debug, Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Pd {
    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.inner.pdn
    }
}

impl Hca {
    /// ALLOC_PD.
    ///
    /// # Errors
    /// Command errors ([`super::DriverError`]).
    pub fn alloc_pd(&self) -> Result<Pd> {
        let mut hw = self.inner.hw();
        let out = hw.exec(&AllocPdIn {}, 0, "protection domain")?;
        let pdn = AllocPdOut::parse(&out)
            .map_err(|e| parse_err(self.name(), Opcode::AllocPd, e, "protection domain"))?
            .pd;
        Ok(Pd {
            inner: Arc::new(PdInner {
                hca: self.inner.clone(),
                pdn,
            }),
        })
    }
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let what = format!("PD {:#x}", self.pdn);
        if let Err(e) = self.hca.hw().exec(&DeallocPdIn { pd: self.pdn }, 0, &what) {
            tracing::warn!(device = %self.hca.cfg.name, "DEALLOC_PD {what}: {e}");
        }
    }
}
