//! [`Hw`]: the mutable state every firmware command goes through — the command interface,
//! the async EQ once it exists, and the pool of pages lent to the firmware — behind one lock
//! in [`super::Hca`]. Typed commands go in with [`Hw::exec`]; page requests that arrive on
//! the EQ while a command waits are serviced right after it.

use std::sync::Arc;

use rdmesh_core::mlx5::cmd::{check_status, CmdIn, Opcode};

use super::cmdif::{CmdIf, SlotClass};
use super::eq::EventQueue;
use super::pages::PagePool;
use super::{DriverError, Result};
use crate::seam::{DmaAllocator, Mmio};

/// Command interface, async EQ and firmware pages of one device.
pub struct Hw {
    /// The command interface.
    pub cmd: CmdIf,
    /// The async EQ (after bring-up step 13).
    pub eq: Option<EventQueue>,
    /// Pages lent to the firmware.
    pub pages: PagePool,
    pub(crate) mmio: Arc<dyn Mmio>,
    pub(crate) dma: Arc<dyn DmaAllocator>,
    servicing_pages: bool,
    /// Page requests (give or take) serviced so far.
    pub(crate) page_requests_serviced: u64,
}

impl core::fmt::Debug for Hw {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Hw")
            .field("cmd", &self.cmd)
            .field("eq", &self.eq)
            .field("pages", &self.pages)
            .finish()
    }
}

impl Hw {
    /// Wraps a command interface.
    pub fn new(cmd: CmdIf, mmio: Arc<dyn Mmio>, dma: Arc<dyn DmaAllocator>) -> Hw {
        Hw {
            cmd,
            eq: None,
            pages: PagePool::default(),
            mmio,
            dma,
            servicing_pages: false,
            page_requests_serviced: 0,
        }
    }

    /// The device name.
    pub fn name(&self) -> &str {
        self.cmd.name()
    }

    /// Runs raw command bytes on slot class `class`; checks the output status.
    ///
    /// # Errors
    /// As [`CmdIf::exec`]; [`DriverError::Cmd`] with `CmdError::Status` and `what` for a bad
    /// status.
    pub fn exec_raw(
        &mut self,
        input: &[u8],
        out_len: usize,
        class: SlotClass,
        what: &str,
    ) -> Result<Vec<u8>> {
        let opcode = rdmesh_core::mlx5::cmd::InHeader::parse(input)
            .map(|h| h.opcode)
            .unwrap_or(Opcode::Unknown(0));
        let out = self.cmd.exec(input, out_len, class, self.eq.as_mut())?;
        let status = check_status(&out, opcode);
        self.cmd.record(status.is_ok());
        status.map_err(|e| super::cmdif::parse_err(self.cmd.name(), opcode, e, what))?;
        if !self.servicing_pages {
            self.service_page_requests()?;
        }
        Ok(out)
    }

    /// Emits `input`, runs it and returns its output (status already checked), sized for the
    /// command's fixed output plus `extra_out` bytes. `what` names the object for errors
    /// ("QPN 0x12", "GID index 0").
    ///
    /// # Errors
    /// As [`Hw::exec_raw`]; [`DriverError::Cmd`] when the input does not encode.
    pub fn exec<I: CmdIn>(&mut self, input: &I, extra_out: usize, what: &str) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; input.buffer_len()];
        input.emit(&mut buf).map_err(|e| {
            DriverError::cmd(
                self.name(),
                e,
                format!(" (building {} for {what})", I::OPCODE),
            )
        })?;
        let class = if I::OPCODE == Opcode::ManagePages {
            SlotClass::Pages
        } else {
            SlotClass::Regular
        };
        self.exec_raw(&buf, I::OUT_LEN + extra_out, class, what)
    }

    /// Services page requests the EQ delivered (MANAGE_PAGES give or take).
    ///
    /// # Errors
    /// As [`Hw::exec`], [`DriverError::Dma`].
    pub fn service_page_requests(&mut self) -> Result<()> {
        self.servicing_pages = true;
        let r = (|| {
            while let Some(n) = self.eq.as_mut().and_then(|eq| eq.page_requests.pop_front()) {
                self.page_requests_serviced += 1;
                if n > 0 {
                    self.give_pages(n as usize)?;
                } else if n < 0 {
                    self.take_pages(n.unsigned_abs() as usize)?;
                }
            }
            Ok(())
        })();
        self.servicing_pages = false;
        r
    }

    /// Polls the async EQ (if any) for events without waiting.
    ///
    /// # Errors
    /// [`DriverError::Dma`]; page-request servicing errors.
    pub fn poll_events(&mut self) -> Result<()> {
        if let Some(eq) = self.eq.as_mut() {
            eq.poll(&*self.mmio, self.cmd.name())?;
        }
        self.service_page_requests()
    }
}
