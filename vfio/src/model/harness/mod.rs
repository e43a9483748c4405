//! A minimal synchronous command client and RC endpoint for the model's own tests and
//! benchmarks. It is not the driver ([`crate::mlx5`] is): no timeouts, no event handling
//! beyond what a test needs, slot 0 only, commands polled. It builds every command with
//! core's typed layouts ([`rdmesh_core::mlx5::cmd`]); [`Endpoint`] posts with core's
//! `SqWriter`, `Batcher` and doorbell `Effect`s (rdma-core `post_send_db` order) and polls
//! CQEs with core's `CqReader`.

use std::sync::Arc;

use rdmesh_core::mlx5::cmd::entry::{self, CmdEntry, CmdEntryRepr};
use rdmesh_core::mlx5::cmd::eqe::{self, Eqe};
use rdmesh_core::mlx5::cmd::init_seg as reg;
use rdmesh_core::mlx5::cmd::mailbox::{self, Mailbox, MailboxRepr};
use rdmesh_core::mlx5::cmd::*;

mod endpoint;

pub use endpoint::{Endpoint, EndpointConfig};

use super::ModelDevice;
use crate::seam::{DmaAllocator, DmaBuffer, Mmio};

/// Harness failures, in words.
pub type HarnessResult<T> = std::result::Result<T, String>;

/// Mailbox block stride (1 KiB aligned, as Linux allocates them).
const MBOX_STRIDE: usize = 1024;

/// A brought-up model device, driven by raw commands.
pub struct Harness {
    /// The device.
    pub dev: ModelDevice,
    /// Its BAR0.
    pub bar: Arc<dyn Mmio>,
    /// Its DMA allocator.
    pub dma: Arc<dyn DmaAllocator>,
    cmdq: Box<dyn DmaBuffer>,
    pages: Vec<Box<dyn DmaBuffer>>,
    token: u8,
    /// UAR index after [`bring_up`](Self::bring_up).
    pub uar: u32,
    /// Async EQ number after [`bring_up`](Self::bring_up).
    pub eqn: u8,
    eq_buf: Option<Box<dyn DmaBuffer>>,
    eq_ci_store: u32,
}

impl Harness {
    /// Waits for `initializing` to clear (bounded polls) and programs the command queue.
    ///
    /// Errors: firmware still initializing after 1000 polls; wrong cmdif revision.
    pub fn new(dev: ModelDevice) -> HarnessResult<Harness> {
        let bar = dev.mmio();
        let dma = dev.dma();
        let rev = reg::cmdif_rev(bar.read32_be(reg::CMDIF_REV_FW_SUB));
        if rev != reg::CMD_IF_REV {
            return Err(format!("cmdif revision {rev}"));
        }
        let mut polls = 0;
        while reg::is_initializing(bar.read32_be(reg::INITIALIZING)) {
            polls += 1;
            if polls > 1000 {
                return Err("firmware still initializing after 1000 polls".into());
            }
        }
        let cmdq = dma.alloc(4096, 4096).map_err(|e| e.to_string())?;
        bar.write32_be(reg::CMDQ_ADDR_H, (cmdq.iova() >> 32) as u32);
        bar.write32_be(reg::CMDQ_ADDR_L_SZ, reg::cmdq_addr_low(cmdq.iova()));
        Ok(Harness {
            dev,
            bar,
            dma,
            cmdq,
            pages: Vec::new(),
            token: 0,
            uar: 0,
            eqn: 0,
            eq_buf: None,
            eq_ci_store: 0,
        })
    }

    /// Posts `input` in slot 0 with room for `out_len` output bytes, rings the doorbell and
    /// returns the output (status not checked) once the entry is back in software hands.
    ///
    /// Errors: the entry is still hardware-owned, a delivery error, a bad signature, a bad
    /// output mailbox.
    pub fn exec_raw(&mut self, input: &[u8], out_len: usize) -> HarnessResult<Vec<u8>> {
        self.token = self.token.wrapping_add(1).max(1);
        let token = self.token;
        let in_blocks = mailbox::blocks_for(input.len());
        let out_blocks = mailbox::blocks_for(out_len);
        let mb = self
            .dma
            .alloc(((in_blocks + out_blocks) * MBOX_STRIDE).max(4096), 4096)
            .map_err(|e| e.to_string())?;
        let addr = |i: usize| mb.iova() + (i * MBOX_STRIDE) as u64;
        for (chain, first, blocks, data) in [
            (0, 0, in_blocks, Some(input)),
            (1, in_blocks, out_blocks, None),
        ] {
            let _ = chain;
            for i in 0..blocks {
                let next = if i + 1 < blocks {
                    addr(first + i + 1)
                } else {
                    0
                };
                let mut raw = [0u8; mailbox::LEN];
                let bytes = match (data, mailbox::block_range(input.len(), i)) {
                    (Some(d), Some(r)) => &d[r],
                    _ => &[][..],
                };
                MailboxRepr {
                    next,
                    block_num: i as u32,
                    token,
                }
                .emit(&mut Mailbox::new_unchecked(&mut raw[..]), bytes)
                .map_err(|e| e.to_string())?;
                mb.write((first + i) * MBOX_STRIDE, &raw)
                    .map_err(|e| e.to_string())?;
            }
        }
        let in_ptr = if in_blocks > 0 { addr(0) } else { 0 };
        let out_ptr = if out_blocks > 0 { addr(in_blocks) } else { 0 };
        let repr = CmdEntryRepr::for_message(input, in_ptr, out_len as u32, out_ptr, token)
            .map_err(|e| e.to_string())?;
        let mut e = [0u8; entry::LEN];
        repr.emit(&mut CmdEntry::new_unchecked(&mut e[..]))
            .map_err(|e| e.to_string())?;
        self.cmdq.write(0, &e).map_err(|e| e.to_string())?;
        self.bar.write32_be(reg::CMD_DBELL, 1);
        self.cmdq.read(0, &mut e).map_err(|e| e.to_string())?;
        let ce = CmdEntry::new_unchecked(&e[..]);
        if ce.hw_owned() {
            return Err("command entry still owned by hardware".into());
        }
        if !ce.signature_ok() {
            return Err("command entry signature is wrong".into());
        }
        ce.check_delivery().map_err(|e| e.to_string())?;
        let mut out = vec![0u8; out_len];
        let n = out_len.min(entry::INLINE_LEN);
        out[..n].copy_from_slice(&ce.out_inline()[..n]);
        for i in 0..out_blocks {
            let mut raw = [0u8; mailbox::LEN];
            mb.read((in_blocks + i) * MBOX_STRIDE, &mut raw)
                .map_err(|e| e.to_string())?;
            let m = Mailbox::new_unchecked(&raw[..]);
            m.check_signatures().map_err(|e| e.to_string())?;
            m.check_position(i as u32, token)
                .map_err(|e| e.to_string())?;
            if let Some(r) = mailbox::block_range(out_len, i) {
                let k = r.len();
                out[r].copy_from_slice(&m.data()[..k]);
            }
        }
        Ok(out)
    }

    /// Executes a typed command; the output has `extra_out` bytes beyond the fixed part.
    /// Errors: those of [`exec_raw`](Self::exec_raw) and a status other than OK (with the
    /// model's explanation).
    pub fn exec<I: CmdIn>(&mut self, i: &I, extra_out: usize) -> HarnessResult<Vec<u8>> {
        let mut input = vec![0u8; i.buffer_len()];
        i.emit(&mut input).map_err(|e| e.to_string())?;
        let out = self.exec_raw(&input, I::OUT_LEN + extra_out)?;
        check_status(&out, I::OPCODE).map_err(|e| {
            format!(
                "{e} ({})",
                self.dev.last_command_error().unwrap_or_default()
            )
        })?;
        Ok(out)
    }

    /// Gives the pages QUERY_PAGES(`op_mod`) asks for.
    pub fn give_pages(&mut self, op_mod: u16) -> HarnessResult<u32> {
        let out = self.exec(
            &QueryPagesIn {
                op_mod,
                ..Default::default()
            },
            0,
        )?;
        let n = QueryPagesOut::parse(&out)
            .map_err(|e| e.to_string())?
            .num_pages
            .max(0) as usize;
        self.give(n)?;
        Ok(n as u32)
    }

    fn give(&mut self, n: usize) -> HarnessResult<()> {
        if n == 0 {
            return Ok(());
        }
        let buf = self.dma.alloc(n * 4096, 4096).map_err(|e| e.to_string())?;
        let addrs: Vec<u64> = (0..n).map(|i| buf.iova() + (i * 4096) as u64).collect();
        self.pages.push(buf);
        self.exec(
            &ManagePagesIn {
                op_mod: MANAGE_PAGES_GIVE,
                input_num_entries: n as u32,
                pas: Pas::Addrs(&addrs),
                ..Default::default()
            },
            0,
        )?;
        Ok(())
    }

    /// The rdma-core VFIO bring-up order: ENABLE_HCA, ISSI, boot pages, HOST_ENDIANNESS,
    /// caps (general, RoCE), init pages, INIT_HCA, roce_en, ALLOC_UAR, the async EQ (command
    /// and page-request events), then services the page request it raises.
    pub fn bring_up(&mut self) -> HarnessResult<()> {
        self.exec(&EnableHcaIn::default(), 0)?;
        let out = self.exec(&QueryIssiIn {}, 0)?;
        let issi = QueryIssiOut::parse(&out).map_err(|e| e.to_string())?;
        if issi.supported_issi_dw0 & 2 == 0 {
            return Err("ISSI 1 not supported".into());
        }
        self.exec(&SetIssiIn { current_issi: 1 }, 0)?;
        self.give_pages(PAGES_BOOT)?;
        let mut he = [0u8; 16];
        HostEndianness { he: false }
            .emit_at(&mut he, 0)
            .map_err(|e| e.to_string())?;
        self.exec(
            &AccessRegisterIn {
                op_mod: ACCESS_REG_WRITE,
                register_id: REG_HOST_ENDIANNESS,
                argument: 0,
                data: &he,
            },
            16,
        )?;
        for ty in [CAP_GENERAL, CAP_ROCE] {
            let out = self.exec(
                &QueryHcaCapIn {
                    op_mod: hca_cap_op_mod(ty, CAP_MODE_CUR),
                    ..Default::default()
                },
                0,
            )?;
            let mut cap = QueryHcaCapOut::parse(&out)
                .map_err(|e| e.to_string())?
                .capability
                .to_vec();
            if ty == CAP_ROCE {
                let mut r = RoceCap::parse_at(&cap, 0).map_err(|e| e.to_string())?;
                r.sw_r_roce_src_udp_port = true;
                r.emit_at(&mut cap, 0).map_err(|e| e.to_string())?;
            }
            self.exec(
                &SetHcaCapIn {
                    op_mod: hca_cap_op_mod(ty, 0),
                    capability: &cap,
                },
                0,
            )?;
        }
        self.give_pages(PAGES_INIT)?;
        self.exec(&InitHcaIn::default(), 0)?;
        self.exec(
            &ModifyNicVportContextIn {
                field_select: NicVportFieldSelect {
                    roce_en: true,
                    ..Default::default()
                },
                nic_vport_context: NicVportContext {
                    roce_en: true,
                    ..Default::default()
                },
                ..Default::default()
            },
            0,
        )?;
        let out = self.exec(&AllocUarIn {}, 0)?;
        self.uar = AllocUarOut::parse(&out).map_err(|e| e.to_string())?.uar;
        // Async EQ: 256 entries, owner bits initialised to 1.
        let log_eq = 8u8;
        let eq = self
            .dma
            .alloc(64 << log_eq, 4096)
            .map_err(|e| e.to_string())?;
        let mut init = vec![0u8; 64 << log_eq];
        for c in init.chunks_exact_mut(64) {
            c[63] = eqe::OWNER_INIT_VAL;
        }
        eq.write(0, &init).map_err(|e| e.to_string())?;
        let pas = [eq.iova()];
        let out = self.exec(
            &CreateEqIn {
                eq_context_entry: EqContext {
                    log_eq_size: log_eq,
                    uar_page: self.uar,
                    log_page_size: 2,
                    ..Default::default()
                },
                event_bitmask: EventBitmask::of(&[0x0a, 0x0b]),
                pas: Pas::Addrs(&pas),
            },
            0,
        )?;
        self.eqn = CreateEqOut::parse(&out)
            .map_err(|e| e.to_string())?
            .eq_number;
        self.eq_buf = Some(eq);
        self.bar.write32_be(
            self.uar as usize * 4096 + eqe::EQ_DOORBELL_ARM_OFFSET,
            eqe::eq_doorbell_value(self.eqn, 0),
        );
        // The EQ asked for regular pages: service them.
        for ev in self.eq_events()? {
            if let EqeRepr::PageRequest { num_pages, .. } = ev {
                self.give(num_pages.max(0) as usize)?;
            }
        }
        Ok(())
    }

    /// EQEs software owns on the async EQ since the last call (consumer index updated).
    pub fn eq_events(&mut self) -> HarnessResult<Vec<EqeRepr>> {
        let Some(eq) = &self.eq_buf else {
            return Ok(Vec::new());
        };
        let nent = (eq.len() / 64) as u32;
        let mut out = Vec::new();
        let ci_key = self.eq_ci();
        let mut ci = ci_key;
        loop {
            let mut raw = [0u8; 64];
            eq.read(((ci % nent) * 64) as usize, &mut raw)
                .map_err(|e| e.to_string())?;
            let e = Eqe::new_unchecked(&raw[..]);
            if !e.sw_owned(ci, nent) {
                break;
            }
            out.push(EqeRepr::parse(&e).map_err(|e| e.to_string())?);
            ci += 1;
        }
        self.set_eq_ci(ci);
        Ok(out)
    }

    fn eq_ci(&self) -> u32 {
        self.eq_ci_store
    }
    fn set_eq_ci(&mut self, ci: u32) {
        self.eq_ci_store = ci;
        self.bar.write32_be(
            self.uar as usize * 4096 + eqe::EQ_DOORBELL_UPDATE_OFFSET,
            eqe::eq_doorbell_value(self.eqn, ci),
        );
    }
}
