//! First contact with a device (`rdmesh doctor --probe`): the bring-up up to INIT_HCA
//! ([`super::bringup`] steps 1–10), the read-only port queries (QUERY_NIC_VPORT_CONTEXT,
//! ACCESS_REG PAOS and PMTU reads), and back down (TEARDOWN_HCA, every page reclaimed,
//! DISABLE_HCA), every command recorded with its status and time. Commands complete by
//! polling (no EQ, no interrupt), so nothing but BAR0 and DMA memory is needed, and the
//! function is left as it was found: disabled, every page back.

use std::time::{Duration, Instant};

use rdmesh_core::mlx5::cmd::{
    Opcode, QueryNicVportContextIn, QueryNicVportContextOut, PORT_TYPE_ETH,
};

use super::bringup::{open_function, query_port, PortInfo, Progress};
use super::cmdif::{parse_err, CmdIf, CmdRecord};
use super::hw::Hw;
use super::{init_seg, DriverConfig};
use crate::seam::{DmaAllocator, Mmio};
use std::sync::Arc;

/// One step of the probe and how it went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeStep {
    /// What was done.
    pub name: String,
    /// `Ok(detail)` or `Err(error)`.
    pub result: Result<String, String>,
    /// How long it took.
    pub elapsed: Duration,
}

/// What a probe found.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeReport {
    /// The device name (BDF).
    pub device: String,
    /// The steps, in order.
    pub steps: Vec<ProbeStep>,
    /// Every command posted, with its status and time.
    pub commands: Vec<CmdRecord>,
    /// Firmware version.
    pub fw: Option<(u16, u16, u16)>,
    /// The port MAC (QUERY_NIC_VPORT_CONTEXT).
    pub mac: Option<[u8; 6]>,
    /// The port's status and MTU.
    pub port: Option<PortInfo>,
    /// Pages the firmware asked for at boot and init.
    pub startup_pages: Option<usize>,
    /// Pages still lent after the way down (0 when the firmware gave every one back).
    pub pages_left: usize,
}

impl ProbeReport {
    /// Whether every step succeeded.
    pub fn ok(&self) -> bool {
        self.steps.iter().all(|s| s.result.is_ok())
    }
}

/// Probes the device behind `mmio` and `dma` (see the module docs). `cfg.record_transcript`
/// is turned on.
pub fn probe(mmio: Arc<dyn Mmio>, dma: Arc<dyn DmaAllocator>, cfg: DriverConfig) -> ProbeReport {
    let cfg = DriverConfig {
        record_transcript: true,
        ..cfg
    };
    let mut r = ProbeReport {
        device: cfg.name.clone(),
        steps: Vec::new(),
        commands: Vec::new(),
        fw: None,
        mac: None,
        port: None,
        startup_pages: None,
        pages_left: 0,
    };
    let step = |r: &mut ProbeReport, name: &str, t: Instant, res: Result<String, String>| {
        r.steps.push(ProbeStep {
            name: name.into(),
            result: res,
            elapsed: t.elapsed(),
        })
    };
    let t = Instant::now();
    if let Err(e) = init_seg::wait_fw_init(&*mmio, &cfg) {
        step(
            &mut r,
            "firmware initialization (init segment 0x1fc)",
            t,
            Err(e.to_string()),
        );
        return r;
    }
    let fw = init_seg::fw_version(&*mmio);
    r.fw = Some(fw);
    step(
        &mut r,
        "firmware initialization (init segment 0x1fc)",
        t,
        Ok(format!("firmware {}.{}.{}", fw.0, fw.1, fw.2)),
    );
    let t = Instant::now();
    let cmd = match CmdIf::new(cfg.clone(), mmio.clone(), dma.clone()) {
        Ok(c) => c,
        Err(e) => {
            step(
                &mut r,
                "command interface (revision, queue geometry)",
                t,
                Err(e.to_string()),
            );
            return r;
        }
    };
    let slots = cmd.slots();
    let second = init_seg::wait_fw_init(&*mmio, &cfg);
    step(
        &mut r,
        "command interface (revision, queue geometry)",
        t,
        second
            .map(|()| format!("revision 5, {slots} slots"))
            .map_err(|e| e.to_string()),
    );
    if r.steps.last().is_some_and(|s| s.result.is_err()) {
        return r;
    }
    let mut hw = Hw::new(cmd, mmio, dma);
    let mut progress = Progress::default();
    let t = Instant::now();
    let opened = open_function(&mut hw, &cfg, &mut progress);
    let caps = match opened {
        Ok(o) => {
            r.startup_pages = Some(o.startup_pages);
            step(
                &mut r,
                "ENABLE_HCA .. INIT_HCA",
                t,
                Ok(format!(
                    "{} boot+init pages, port type {}, RoCE {}",
                    o.startup_pages,
                    if o.caps.port_type == PORT_TYPE_ETH {
                        "Ethernet"
                    } else {
                        "InfiniBand"
                    },
                    if o.caps.roce { "supported" } else { "absent" }
                )),
            );
            Some(o.caps)
        }
        Err(e) => {
            step(&mut r, "ENABLE_HCA .. INIT_HCA", t, Err(e.to_string()));
            None
        }
    };
    if caps.is_some_and(|c| c.port_type == PORT_TYPE_ETH) {
        let t = Instant::now();
        let name = cfg.name.clone();
        let res = hw
            .exec(&QueryNicVportContextIn::default(), 0, "port MAC")
            .and_then(|out| {
                QueryNicVportContextOut::parse(&out)
                    .map_err(|e| parse_err(&name, Opcode::QueryNicVportContext, e, "port MAC"))
            });
        match res {
            Ok(o) => {
                let m = o.nic_vport_context.permanent_address.octets();
                r.mac = Some(m);
                step(
                    &mut r,
                    "QUERY_NIC_VPORT_CONTEXT (port MAC)",
                    t,
                    Ok(format!(
                        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}, roce_en {}",
                        m[0], m[1], m[2], m[3], m[4], m[5], o.nic_vport_context.roce_en
                    )),
                );
            }
            Err(e) => step(
                &mut r,
                "QUERY_NIC_VPORT_CONTEXT (port MAC)",
                t,
                Err(e.to_string()),
            ),
        }
        let t = Instant::now();
        match query_port(&mut hw, &name, false) {
            Ok(p) => {
                r.port = Some(p);
                step(
                    &mut r,
                    "ACCESS_REG PAOS, PMTU (port status and MTU)",
                    t,
                    Ok(format!(
                        "admin {}, oper {}, MTU {} (max {})",
                        if p.admin_status == 1 { "up" } else { "down" },
                        if p.oper_status == 1 { "up" } else { "down" },
                        p.oper_mtu,
                        p.max_mtu
                    )),
                );
            }
            Err(e) => step(
                &mut r,
                "ACCESS_REG PAOS, PMTU (port status and MTU)",
                t,
                Err(e.to_string()),
            ),
        }
    }
    // Back down: what bring-up did is undone, pages first reclaimed.
    let t = Instant::now();
    hw.eq = None;
    let res = if progress.enabled {
        super::teardown::close_hca(&mut hw, progress.initialized)
    } else {
        Ok(())
    };
    r.pages_left = hw.pages.lent();
    let left = r.pages_left;
    step(
        &mut r,
        "TEARDOWN_HCA, MANAGE_PAGES(take), DISABLE_HCA",
        t,
        res.map(|()| format!("{left} pages still lent"))
            .map_err(|e| e.to_string()),
    );
    hw.pages.release_all();
    r.commands = hw.cmd.transcript().to_vec();
    hw.cmd.close();
    r
}
