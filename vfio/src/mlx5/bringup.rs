//! Bring-up in the order of rdma-core `providers/mlx5/mlx5_vfio.c` (`mlx5_vfio_setup_function`,
//! `create_async_eqs`), with Linux's second `initializing` wait and page reclaim
//! (`mlx5_function_enable`):
//!
//! | # | step |
//! | --- | --- |
//! | 1 | wait until `initializing` (0x1fc bit 31) clears, bounded |
//! | 2 | check cmdif revision 5, read the queue geometry, program the cmdq address; wait again |
//! | 3 | ENABLE_HCA |
//! | 4 | QUERY_ISSI → SET_ISSI(1) |
//! | 5 | QUERY_PAGES(boot) → MANAGE_PAGES(give) |
//! | 6 | ACCESS_REG HOST_ENDIANNESS (little-endian host) |
//! | 7 | QUERY_HCA_CAP(general, max and cur) → SET_HCA_CAP (checksums off, 4 KiB UAR pages) |
//! | 8 | QUERY_HCA_CAP(RoCE) → SET_HCA_CAP(RoCE) `sw_r_roce_src_udp_port` when supported |
//! | 9 | QUERY_PAGES(init) → MANAGE_PAGES(give) |
//! | 10 | INIT_HCA |
//! | 11 | MODIFY_NIC_VPORT_CONTEXT `roce_en = 1` (Ethernet port); QUERY_NIC_VPORT_CONTEXT (MAC) |
//! | 12 | ALLOC_UAR |
//! | 13 | CREATE_EQ (async: command completions, page requests, port/CQ/QP errors), arm it; from here commands complete through the EQ and MSI-X vector 0 |
//!
//! The PCI side (memory enable + bus master in the command register, MSI-X vector 0 to an
//! eventfd) is the system layer's job before this runs ([`crate::sys`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rdmesh_core::mlx5::cmd::{
    hca_cap_op_mod, AccessRegisterIn, AllocUarIn, AllocUarOut, CreateEqIn, CreateEqOut,
    EnableHcaIn, EqContext, EventBitmask, HcaCap, HostEndianness, InitHcaIn,
    ModifyNicVportContextIn, NicVportContext, NicVportFieldSelect, Opcode, Pas, QueryHcaCapIn,
    QueryHcaCapOut, QueryIssiIn, QueryIssiOut, QueryNicVportContextIn, QueryNicVportContextOut,
    RoceCap, SetHcaCapIn, SetIssiIn, ACCESS_REG_WRITE, CAPABILITY_LEN, CAP_GENERAL, CAP_MODE_CUR,
    CAP_MODE_MAX, CAP_ROCE, PAGES_BOOT, PAGES_INIT, PORT_TYPE_ETH, REG_HOST_ENDIANNESS,
};

use super::cmdif::{parse_err, CmdIf};
use super::eq::EventQueue;
use super::hca::{Hca, HcaInfo, HcaInner};
use super::hw::Hw;
use super::{init_seg, DriverConfig, DriverError, Result};
use crate::seam::{DmaAllocator, Interrupt, Mmio};

/// Event types the async EQ subscribes to: CQ error 0x04, WQ catastrophic 0x05, internal
/// error 0x08, port change 0x09, command 0x0a, page request 0x0b, WQ invalid request 0x10,
/// WQ access error 0x11 (Linux `eq.c` async mask; rdma-core uses 0x0a and 0x0b only).
pub const ASYNC_EVENTS: &[u8] = &[0x04, 0x05, 0x08, 0x09, 0x0a, 0x0b, 0x10, 0x11];

fn query_cap(hw: &mut Hw, cap_type: u16, mode: u16) -> Result<Vec<u8>> {
    let what = format!(
        "{} capabilities ({})",
        if cap_type == CAP_ROCE {
            "RoCE"
        } else {
            "general"
        },
        if mode == CAP_MODE_MAX {
            "max"
        } else {
            "current"
        }
    );
    let out = hw.exec(
        &QueryHcaCapIn {
            op_mod: hca_cap_op_mod(cap_type, mode),
            ..Default::default()
        },
        0,
        &what,
    )?;
    let q = QueryHcaCapOut::parse(&out)
        .map_err(|e| parse_err(hw.name(), Opcode::QueryHcaCap, e, &what))?;
    Ok(q.capability.to_vec())
}

fn set_cap(hw: &mut Hw, cap_type: u16, cap: &[u8], what: &str) -> Result<()> {
    hw.exec(
        &SetHcaCapIn {
            op_mod: hca_cap_op_mod(cap_type, 0),
            capability: cap,
        },
        0,
        what,
    )?;
    Ok(())
}

fn cap_err(name: &str, e: rdmesh_core::mlx5::cmd::CmdError) -> DriverError {
    DriverError::cmd(name, e, " (capability page)")
}

/// Which steps completed, for the unwinding of a failed bring-up.
#[derive(Default)]
struct Progress {
    enabled: bool,
    initialized: bool,
    uar: Option<u32>,
}

impl Hca {
    /// Brings the function up (table in the module docs) and returns the device.
    ///
    /// `mmio` is BAR0, `dma` hands out IOMMU-mapped memory, `irq` is MSI-X vector 0.
    ///
    /// # Errors
    /// [`DriverError::InitTimeout`] (stuck `initializing`), [`DriverError::CmdifRev`],
    /// [`DriverError::CmdqGeometry`], [`DriverError::CmdTimeout`] / [`DriverError::CmdQueueFull`]
    /// / [`DriverError::DeviceDead`] (a hung or dead device), [`DriverError::Cmd`] (a command
    /// failed or answered malformed output), [`DriverError::Config`] (ISSI 1 unsupported),
    /// [`DriverError::Dma`]. On error the steps done are undone (TEARDOWN_HCA, DISABLE_HCA)
    /// when the device still answers.
    pub fn bring_up(
        mmio: Arc<dyn Mmio>,
        dma: Arc<dyn DmaAllocator>,
        irq: Arc<dyn Interrupt>,
        cfg: DriverConfig,
    ) -> Result<Hca> {
        init_seg::wait_fw_init(&*mmio, &cfg)?;
        let fw = init_seg::fw_version(&*mmio);
        let cmd = CmdIf::new(cfg.clone(), mmio.clone(), dma.clone())?;
        init_seg::wait_fw_init(&*mmio, &cfg)?;
        let mut hw = Hw::new(cmd, mmio.clone(), dma.clone());
        let mut progress = Progress::default();
        match steps(&mut hw, &cfg, &irq, fw, &mut progress) {
            Ok(info) => {
                let health = cfg.health_interval;
                let inner = Arc::new(HcaInner {
                    core: Arc::new(super::hca::Core::new(cfg.name.clone(), hw)),
                    cfg,
                    mmio,
                    dma,
                    _irq: irq.clone(),
                    info,
                    qps: Mutex::new(HashMap::new()),
                    thread: Mutex::new(None),
                });
                // From here events are serviced at any time, not only while a command runs.
                match super::events::EventThread::start(&inner.core, irq, health) {
                    Ok(t) => {
                        *inner.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
                    }
                    Err(e) => {
                        return Err(DriverError::config(
                            &inner.cfg.name,
                            format!("starting the event thread: {e}"),
                        ))
                    }
                }
                Ok(Hca { inner })
            }
            Err(e) => {
                super::teardown::unwind(
                    &mut hw,
                    progress.enabled,
                    progress.initialized,
                    progress.uar,
                    &e,
                );
                Err(e)
            }
        }
    }
}

fn steps(
    hw: &mut Hw,
    cfg: &DriverConfig,
    irq: &Arc<dyn Interrupt>,
    fw: (u16, u16, u16),
    progress: &mut Progress,
) -> Result<HcaInfo> {
    let name = cfg.name.clone();
    // 3. ENABLE_HCA
    hw.exec(&EnableHcaIn::default(), 0, "function 0")?;
    progress.enabled = true;

    // 4. ISSI
    let out = hw.exec(&QueryIssiIn {}, 0, "interface step sequence id")?;
    let issi =
        QueryIssiOut::parse(&out).map_err(|e| parse_err(&name, Opcode::QueryIssi, e, "ISSI"))?;
    if issi.supported_issi_dw0 & (1 << 1) == 0 {
        return Err(DriverError::config(
            &name,
            format!(
                "firmware does not support ISSI 1 (supported_issi_dw0 {:#x}); update the \
                 firmware",
                issi.supported_issi_dw0
            ),
        ));
    }
    hw.exec(&SetIssiIn { current_issi: 1 }, 0, "ISSI 1")?;

    // 5. boot pages
    let mut startup_pages = hw.satisfy_pages(PAGES_BOOT)?;

    // 6. host endianness (little-endian host: he = 0)
    let mut reg = [0u8; rdmesh_core::mlx5::cmd::register_host_endianness::SIZE_BYTES];
    HostEndianness {
        he: cfg!(target_endian = "big"),
    }
    .emit_at(&mut reg, 0)
    .map_err(|e| cap_err(&name, e))?;
    hw.exec(
        &AccessRegisterIn {
            op_mod: ACCESS_REG_WRITE,
            register_id: REG_HOST_ENDIANNESS,
            argument: 0,
            data: &reg,
        },
        reg.len(),
        "HOST_ENDIANNESS register",
    )?;

    // 7. general capabilities
    let max = query_cap(hw, CAP_GENERAL, CAP_MODE_MAX)?;
    let mut cur = query_cap(hw, CAP_GENERAL, CAP_MODE_CUR)?;
    let max_caps = HcaCap::parse_at(&max, 0).map_err(|e| cap_err(&name, e))?;
    let mut caps = HcaCap::parse_at(&cur, 0).map_err(|e| cap_err(&name, e))?;
    caps.cmdif_checksum = 0;
    caps.log_uar_page_sz = 0; // 4 KiB system pages: log2(4096) - 12
    if max_caps.mkey_by_name {
        caps.mkey_by_name = true;
    }
    caps.emit_at(&mut cur, 0).map_err(|e| cap_err(&name, e))?;
    set_cap(
        hw,
        CAP_GENERAL,
        &cur[..CAPABILITY_LEN.min(cur.len())],
        "general capabilities",
    )?;

    // 8. RoCE capabilities
    let roce = if caps.roce {
        let rmax = RoceCap::parse_at(&query_cap(hw, CAP_ROCE, CAP_MODE_MAX)?, 0)
            .map_err(|e| cap_err(&name, e))?;
        let mut rcur_page = query_cap(hw, CAP_ROCE, CAP_MODE_CUR)?;
        let mut rcur = RoceCap::parse_at(&rcur_page, 0).map_err(|e| cap_err(&name, e))?;
        if rmax.sw_r_roce_src_udp_port && !rcur.sw_r_roce_src_udp_port {
            rcur.sw_r_roce_src_udp_port = true;
            rcur.emit_at(&mut rcur_page, 0)
                .map_err(|e| cap_err(&name, e))?;
            set_cap(hw, CAP_ROCE, &rcur_page, "RoCE capabilities")?;
        }
        Some(rcur)
    } else {
        None
    };

    // 9. init pages, 10. INIT_HCA
    startup_pages += hw.satisfy_pages(PAGES_INIT)?;
    hw.exec(&InitHcaIn::default(), 0, "INIT_HCA")?;
    progress.initialized = true;

    // 11. RoCE enable and the port MAC
    let mut mac = [0u8; 6];
    if caps.port_type == PORT_TYPE_ETH {
        hw.exec(
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
            "roce_en = 1",
        )?;
        let out = hw.exec(&QueryNicVportContextIn::default(), 0, "port MAC")?;
        mac = QueryNicVportContextOut::parse(&out)
            .map_err(|e| parse_err(&name, Opcode::QueryNicVportContext, e, "port MAC"))?
            .nic_vport_context
            .permanent_address
            .octets();
    }

    // 12. UAR
    let out = hw.exec(&AllocUarIn {}, 0, "UAR for the async EQ")?;
    let uar = AllocUarOut::parse(&out)
        .map_err(|e| parse_err(&name, Opcode::AllocUar, e, "UAR"))?
        .uar;
    progress.uar = Some(uar);
    let uar_offset = uar as usize * 4096;
    if uar_offset + 4096 > hw.mmio.len() {
        return Err(DriverError::config(
            &name,
            format!(
                "ALLOC_UAR gave UAR {uar}, at BAR0 offset {uar_offset:#x}, beyond the {}-byte BAR",
                hw.mmio.len()
            ),
        ));
    }

    // 13. async EQ
    let log_nent = cfg.log_async_eq_size;
    let bytes = (1usize << log_nent) * rdmesh_core::mlx5::cmd::eqe::LEN;
    let pages = bytes.div_ceil(4096).next_power_of_two();
    let buf = hw
        .dma
        .alloc(pages * 4096, pages * 4096)
        .map_err(|e| DriverError::dma(&name, e))?;
    EventQueue::init_buffer(&*buf, log_nent, &name)?;
    let out = hw.exec(
        &CreateEqIn {
            eq_context_entry: EqContext {
                log_eq_size: log_nent,
                uar_page: uar,
                intr: 0,
                log_page_size: pages.trailing_zeros() as u8,
                ..Default::default()
            },
            event_bitmask: EventBitmask::of(ASYNC_EVENTS),
            pas: Pas::Addrs(&[buf.iova()]),
        },
        0,
        "async EQ",
    )?;
    let eqn = CreateEqOut::parse(&out)
        .map_err(|e| parse_err(&name, Opcode::CreateEq, e, "async EQ"))?
        .eq_number;
    let eq = EventQueue::new(buf, log_nent, eqn, uar_offset);
    eq.arm(&*hw.mmio);
    hw.eq = Some(eq);
    hw.cmd.use_events(irq.clone());

    Ok(HcaInfo {
        fw,
        caps,
        roce,
        uar,
        eqn,
        mac,
        startup_pages,
    })
}
