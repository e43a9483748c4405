//! Pages lent to the firmware: QUERY_PAGES tells how many 4 KiB pages the device wants (boot,
//! init, or at run time through page-request events); MANAGE_PAGES gives them (a list of page
//! IOVAs, split into commands of [`DriverConfig::pages_per_command`](super::DriverConfig)) or
//! takes them back (Linux `pagealloc.c`, rdma-core `mlx5_vfio.c` `mlx5_vfio_give_pages`).
//!
//! Pages come from DMA blocks of one allocation per request; returned pages go to a free list
//! and are lent again first. Every block is released when the pool is dropped (after
//! TEARDOWN_HCA and the final reclaim).

use std::collections::HashSet;

use rdmesh_core::mlx5::cmd::{
    ManagePagesIn, ManagePagesOut, Opcode, Pas, QueryPagesIn, QueryPagesOut, ADAPTER_PAGE_SIZE,
    MANAGE_PAGES_GIVE, MANAGE_PAGES_TAKE,
};

use super::cmdif::parse_err;
use super::hw::Hw;
use super::{DriverError, Result};
use crate::seam::DmaBuffer;

/// DMA pages lent to (or returned by) the firmware.
#[derive(Debug, Default)]
pub struct PagePool {
    blocks: Vec<Box<dyn DmaBuffer>>,
    free: Vec<u64>,
    lent: HashSet<u64>,
}

impl PagePool {
    /// Pages the firmware currently holds.
    pub fn lent(&self) -> usize {
        self.lent.len()
    }

    /// Pages allocated in total (lent + free).
    pub fn allocated(&self) -> usize {
        self.lent.len() + self.free.len()
    }

    /// Forgets every page lent to a firmware that cannot return them (dead, or keeping them
    /// at teardown) and frees the DMA blocks (their IOMMU mappings go with them). Returns how
    /// many were still lent.
    pub(crate) fn release_all(&mut self) -> usize {
        let n = self.lent.len();
        self.lent.clear();
        self.free.clear();
        self.blocks.clear();
        n
    }
}

impl Hw {
    /// QUERY_PAGES(`op_mod`: boot 1 / init 2 / regular 3), then gives what it asks for.
    /// Returns the number of pages given.
    ///
    /// # Errors
    /// As [`Hw::exec`]; [`DriverError::Dma`].
    pub fn satisfy_pages(&mut self, op_mod: u16) -> Result<usize> {
        let what = match op_mod {
            1 => "boot pages",
            2 => "init pages",
            _ => "regular pages",
        };
        let out = self.exec(
            &QueryPagesIn {
                op_mod,
                ..Default::default()
            },
            0,
            what,
        )?;
        let q = QueryPagesOut::parse(&out)
            .map_err(|e| parse_err(self.name(), Opcode::QueryPages, e, what))?;
        match q.num_pages {
            n if n > 0 => {
                self.give_pages(n as usize)?;
                Ok(n as usize)
            }
            n if n < 0 => {
                self.take_pages(n.unsigned_abs() as usize)?;
                Ok(0)
            }
            _ => Ok(0),
        }
    }

    /// Lends `n` pages with MANAGE_PAGES(GIVE).
    ///
    /// # Errors
    /// As [`Hw::exec`]; [`DriverError::Dma`].
    pub fn give_pages(&mut self, n: usize) -> Result<()> {
        let name = self.name().to_string();
        if self.pages.free.len() < n {
            let want = n - self.pages.free.len();
            let block = self
                .dma
                .alloc(want * ADAPTER_PAGE_SIZE, ADAPTER_PAGE_SIZE)
                .map_err(|e| DriverError::dma(&name, e))?;
            let base = block.iova();
            self.pages.free.extend(
                (0..want)
                    .rev()
                    .map(|i| base + (i * ADAPTER_PAGE_SIZE) as u64),
            );
            self.pages.blocks.push(block);
        }
        let per = self.cmd.config().pages_per_command.max(1);
        let mut left = n;
        while left > 0 {
            let k = left.min(per);
            let at = self.pages.free.len() - k;
            let list: Vec<u64> = self.pages.free[at..].to_vec();
            self.exec(
                &ManagePagesIn {
                    op_mod: MANAGE_PAGES_GIVE,
                    embedded_cpu_function: false,
                    function_id: 0,
                    input_num_entries: k as u32,
                    pas: Pas::Addrs(&list),
                },
                0,
                "giving pages",
            )?;
            self.pages.free.truncate(at);
            self.pages.lent.extend(list);
            left -= k;
        }
        Ok(())
    }

    /// Takes up to `n` pages back with MANAGE_PAGES(TAKE); returns how many came back.
    ///
    /// # Errors
    /// As [`Hw::exec`]; [`DriverError::Cmd`] when the device returns a page it never got.
    pub fn take_pages(&mut self, n: usize) -> Result<usize> {
        let per = self.cmd.config().pages_per_command.max(1);
        let mut got = 0;
        while got < n {
            let k = (n - got).min(per);
            let out = self.exec(
                &ManagePagesIn {
                    op_mod: MANAGE_PAGES_TAKE,
                    embedded_cpu_function: false,
                    function_id: 0,
                    input_num_entries: k as u32,
                    pas: Pas::Addrs(&[]),
                },
                8 * k,
                "reclaiming pages",
            )?;
            let o = ManagePagesOut::parse(&out)
                .map_err(|e| parse_err(self.name(), Opcode::ManagePages, e, "reclaim"))?;
            let count = (o.output_num_entries as usize).min(o.pas.len());
            for a in o.pas.iter().take(count) {
                if !self.pages.lent.remove(&a) {
                    return Err(DriverError::config(
                        self.name(),
                        format!(
                            "MANAGE_PAGES(TAKE) returned page {a:#x}, which was never lent; the \
                             firmware's page accounting is corrupt"
                        ),
                    ));
                }
                self.pages.free.push(a);
            }
            got += count;
            if count < k {
                break;
            }
        }
        Ok(got)
    }
}
