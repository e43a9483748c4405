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
//! | 11 | MODIFY_NIC_VPORT_CONTEXT `roce_en = 1` (Ethernet port); QUERY_NIC_VPORT_CONTEXT (MAC); ACCESS_REG PAOS (port status; admin up when down) and PMTU (port MTU) |
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
pub(crate) struct Progress {
    pub(crate) enabled: bool,
    pub(crate) initialized: bool,
    pub(crate) uar: Option<u32>,
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

/// What steps 3–10 (ENABLE_HCA .. INIT_HCA) learnt.
pub(crate) struct Opened {
    pub(crate) caps: HcaCap,
    pub(crate) roce: Option<RoceCap>,
    pub(crate) startup_pages: usize,
}

fn steps(
    hw: &mut Hw,
    cfg: &DriverConfig,
    irq: &Arc<dyn Interrupt>,
    fw: (u16, u16, u16),
    progress: &mut Progress,
) -> Result<HcaInfo> {
    let name = cfg.name.clone();
    let Opened {
        caps,
        roce,
        startup_pages,
    } = open_function(hw, cfg, progress)?;
    let (mac, port) = enable_roce(hw, &name, &caps)?;
    finish(
        hw,
        cfg,
        irq,
        fw,
        progress,
        caps,
        roce,
        startup_pages,
        mac,
        port,
    )
}

/// Steps 3–10: ENABLE_HCA .. INIT_HCA.
pub(crate) fn open_function(
    hw: &mut Hw,
    cfg: &DriverConfig,
    progress: &mut Progress,
) -> Result<Opened> {
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
    Ok(Opened {
        caps,
        roce,
        startup_pages,
    })
}

/// The port as the PAOS and PMTU registers show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortInfo {
    /// PAOS `admin_status` (1 up, 2 down), after bring-up's own change.
    pub admin_status: u8,
    /// PAOS `oper_status` (1 up, 2 down).
    pub oper_status: u8,
    /// PMTU `oper_mtu`: the port's hardware MTU in bytes (Ethernet payload + 22), 0 when
    /// unknown.
    pub oper_mtu: u16,
    /// PMTU `max_mtu`.
    pub max_mtu: u16,
}

impl PortInfo {
    /// The Ethernet payload MTU (`oper_mtu` − 22, Linux `MLX5E_HW2SW_MTU`), the "netdev MTU"
    /// a RoCE path MTU must fit.
    pub fn eth_mtu(&self) -> Option<u32> {
        u32::from(self.oper_mtu).checked_sub(22).filter(|m| *m > 0)
    }
}

fn access_reg(hw: &mut Hw, id: u16, write: bool, data: &[u8], what: &str) -> Result<Vec<u8>> {
    let out = hw.exec(
        &AccessRegisterIn {
            op_mod: if write {
                ACCESS_REG_WRITE
            } else {
                rdmesh_core::mlx5::cmd::ACCESS_REG_READ
            },
            register_id: id,
            argument: 0,
            data,
        },
        data.len(),
        what,
    )?;
    let o = rdmesh_core::mlx5::cmd::AccessRegisterOut::parse(&out)
        .map_err(|e| parse_err(hw.name(), Opcode::AccessReg, e, what))?;
    Ok(o.data.to_vec())
}

/// Reads PAOS and PMTU of port 1 (Linux `mlx5_query_port_admin_status`,
/// `mlx5_query_port_oper_mtu`); when the port is administratively down, sets it up (PAOS
/// `admin_status` 1 with `ase`, as Linux mlx5e does when its netdev opens: under VFIO no
/// netdev ever opens).
pub(crate) fn query_port(hw: &mut Hw, name: &str, set_up: bool) -> Result<PortInfo> {
    use rdmesh_core::mlx5::cmd::{
        paos_reg, pmtu_reg, Paos, Pmtu, PORT_STATUS_UP, REG_PAOS, REG_PMTU,
    };
    let cap_err = |e| cap_err(name, e);
    let mut reg = [0u8; paos_reg::SIZE_BYTES];
    Paos {
        local_port: 1,
        ..Default::default()
    }
    .emit_at(&mut reg, 0)
    .map_err(cap_err)?;
    let out = access_reg(hw, REG_PAOS, false, &reg, "PAOS (port status)")?;
    let mut paos = Paos::parse_at(&out, 0).map_err(cap_err)?;
    if set_up && paos.admin_status != PORT_STATUS_UP {
        let mut w = [0u8; paos_reg::SIZE_BYTES];
        Paos {
            local_port: 1,
            admin_status: PORT_STATUS_UP,
            ase: true,
            ..Default::default()
        }
        .emit_at(&mut w, 0)
        .map_err(cap_err)?;
        access_reg(hw, REG_PAOS, true, &w, "PAOS admin up")?;
        paos.admin_status = PORT_STATUS_UP;
    }
    let mut reg = [0u8; pmtu_reg::SIZE_BYTES];
    Pmtu {
        local_port: 1,
        ..Default::default()
    }
    .emit_at(&mut reg, 0)
    .map_err(cap_err)?;
    let out = access_reg(hw, REG_PMTU, false, &reg, "PMTU (port MTU)")?;
    let pmtu = Pmtu::parse_at(&out, 0).map_err(cap_err)?;
    Ok(PortInfo {
        admin_status: paos.admin_status,
        oper_status: paos.oper_status,
        oper_mtu: pmtu.oper_mtu,
        max_mtu: pmtu.max_mtu,
    })
}

/// Step 11: RoCE on the vport, the port MAC, the port's status and MTU.
fn enable_roce(hw: &mut Hw, name: &str, caps: &HcaCap) -> Result<([u8; 6], Option<PortInfo>)> {
    let name = name.to_string();
    let mut mac = [0u8; 6];
    let mut port = None;
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
        // The port registers are a PF's: a VF may be refused them, which is not fatal.
        port = match query_port(hw, &name, true) {
            Ok(p) => Some(p),
            Err(DriverError::Cmd { ref source, .. })
                if matches!(source, rdmesh_core::mlx5::cmd::CmdError::Status { .. }) =>
            {
                tracing::info!(device = %name, "port registers (PAOS/PMTU) not accessible; port state and MTU unknown");
                None
            }
            Err(e) => return Err(e),
        };
    }
    Ok((mac, port))
}

/// Steps 12–13: the UAR and the async EQ.
#[allow(clippy::too_many_arguments)]
fn finish(
    hw: &mut Hw,
    cfg: &DriverConfig,
    irq: &Arc<dyn Interrupt>,
    fw: (u16, u16, u16),
    progress: &mut Progress,
    caps: HcaCap,
    roce: Option<RoceCap>,
    startup_pages: usize,
    mac: [u8; 6],
    port: Option<PortInfo>,
) -> Result<HcaInfo> {
    let name = cfg.name.clone();

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
        port,
    })
}
