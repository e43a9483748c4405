//! The `rdmesh topo` report: `ibdev2netdev`-compatible lines, a table per device port with
//! warnings, or JSON for scripts.
//!
//! JSON: an array with one object per device port, keys exactly `name`, `port`, `netdev`,
//! `state` ("up"/"down"), `addresses` (CIDR strings), `gid_index` (the chosen GID index or
//! null), `mtu` (bytes), `speed_mbps` (Mb/s), `pci` ("0000:01:00.0"), `pcie`
//! (`{speed_gts, width, ceiling_gbps}` or null; ceiling per direction in Gb/s, 2 decimals) and
//! `siblings` (PCI addresses). Unknown values are null.

use std::io::Write;

use serde::Serialize;

use super::gid::{self, GidMiss, GID_INDEX_ENV};
use super::{DeviceKind, DiscoverOptions, Port, Topology};

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Something limits or breaks RDMA on the port.
    Warning,
    /// Worth knowing; works as is.
    Note,
}

/// A finding about one port, with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Warning or note.
    pub severity: Severity,
    /// The message, naming the port, values and what to check.
    pub message: String,
}

impl Diagnostic {
    fn warn(message: String) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            message,
        }
    }

    fn note(message: String) -> Diagnostic {
        Diagnostic {
            severity: Severity::Note,
            message,
        }
    }
}

fn join<T: ToString>(v: &[T]) -> String {
    v.iter().map(T::to_string).collect::<Vec<_>>().join(", ")
}

fn gbps(mbps: u64) -> String {
    let g = mbps as f64 / 1000.0;
    if g.fract() == 0.0 {
        format!("{g:.0} Gb/s")
    } else {
        format!("{g} Gb/s")
    }
}

/// The findings about `port` (within `topo`, for its siblings' ceilings):
/// - warning: the PCIe link caps the port below its Ethernet speed (with the combined ceiling
///   of the port and its siblings, when it has any);
/// - warning: the PCIe link trained below the function's maximum speed or width;
/// - warning (up ports): no address, no RoCE v2 GID for the address, or a pinned GID index
///   that is empty or not the address's RoCE v2 GID;
/// - note (up ports): an MTU that limits the RoCE path MTU below 4096 bytes.
pub fn diagnostics(topo: &Topology, port: &Port) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let name = format!("{} port {}", port.device, port.port);
    let nd = port.netdev.as_deref().unwrap_or("its netdev");
    if let (true, Some(link), Some(speed)) = (port.pcie_caps_link(), port.pcie, port.speed_mbps) {
        let ceiling = link.ceiling_gbps();
        let what = format!(
            "{name}: PCIe {:.1} GT/s x{} caps it at {ceiling:.1} Gb/s per direction, below its {} Ethernet link",
            link.speed_gts,
            link.width,
            gbps(speed)
        );
        if port.siblings.is_empty() {
            out.push(Diagnostic::warn(format!(
                "{what}; check that the adapter sits in a slot with enough lanes (lspci -vv: LnkCap/LnkSta)"
            )));
        } else {
            let combined: f64 = ceiling
                + port
                    .siblings
                    .iter()
                    .filter_map(|s| topo.ports.iter().find(|q| q.pci == Some(*s)))
                    .filter_map(|q| q.pcie_ceiling_gbps())
                    .sum::<f64>();
            out.push(Diagnostic::warn(format!(
                "{what}; the same physical port is also driven by {} over another PCIe link: give each its own address and use both as rails ({combined:.1} Gb/s together)",
                join(&port.siblings)
            )));
        }
    }
    if let Some(link) = port.pcie.filter(|l| l.is_downtrained()) {
        out.push(Diagnostic::warn(format!(
            "{name}: PCIe link trained to {:.1} GT/s x{}, below the function's maximum {} x{}; reseat the adapter or check the slot and BIOS lane settings",
            link.speed_gts,
            link.width,
            link.max_speed_gts.map_or("?".into(), |s| format!("{s:.1} GT/s")),
            link.max_width.map_or("?".into(), |w| w.to_string()),
        )));
    }
    if port.up && port.kind == DeviceKind::Rdma {
        match (&port.gid, &port.gid_miss) {
            (_, Some(GidMiss::NoAddress)) => out.push(Diagnostic::warn(format!(
                "{name}: {nd} has no IP address, so it has no RoCE v2 GID and peers cannot reach it; add one (ip addr add ADDR/PREFIX dev {nd})"
            ))),
            (_, Some(GidMiss::NoRoceV2 { addrs })) => out.push(Diagnostic::warn(format!(
                "{name}: no RoCE v2 GID equals {} ({}); check that the address is on {nd} itself, not only on a bridge or bond above it",
                join(addrs),
                gid::table_summary(&port.gids)
            ))),
            (_, Some(GidMiss::PinnedEmpty { index })) => out.push(Diagnostic::warn(format!(
                "{name}: {GID_INDEX_ENV}={index} pins GID {index}, which is empty ({}); unset {GID_INDEX_ENV} to select the GID by address",
                gid::table_summary(&port.gids)
            ))),
            (Some(c), None) if c.pinned && c.addr.is_none() => {
                let by_addr = gid::select(&port.gids, port.netdev.as_deref(), &port.ips(), None).ok();
                out.push(Diagnostic::warn(format!(
                    "{name}: {GID_INDEX_ENV}={} pins GID {} ({} {}), which is not the RoCE v2 GID of {}{}; unset {GID_INDEX_ENV} to select the GID by address",
                    c.index,
                    c.index,
                    c.gid_type.as_ref().map_or("type unknown", |t| t.as_str()),
                    gid::gid_addr(&c.gid),
                    if port.addresses.is_empty() { "any address".to_string() } else { join(&port.ips()) },
                    by_addr.map_or(String::new(), |b| format!(" (that is GID {})", b.index)),
                )));
            }
            _ => {}
        }
    }
    if port.up {
        if let (Some(mtu), Some(roce)) = (port.mtu, port.roce_mtu()) {
            if roce < 4096 {
                out.push(Diagnostic::note(format!(
                    "{name}: MTU {mtu} allows a RoCE path MTU of {roce} bytes; with MTU 9000 on {nd} and on its peer it would be 4096 (ip link set {nd} mtu 9000)"
                )));
            }
        }
    }
    out
}

/// The `ibdev2netdev` lines: `rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)`, one per port that has a
/// netdev; "Up" when the netdev has carrier, as `ibdev2netdev` reads it.
pub fn ibdev2netdev_lines(topo: &Topology) -> Vec<String> {
    topo.ports
        .iter()
        .filter_map(|p| {
            let nd = p.netdev.as_deref()?;
            Some(format!(
                "{} port {} ==> {} ({})",
                p.device,
                p.port,
                nd,
                if p.link_up { "Up" } else { "Down" }
            ))
        })
        .collect()
}

/// Writes the text report: the `ibdev2netdev` lines, then per port a table (netdev,
/// addresses, GID, MTU, link speed, PCI, PCIe link and ceiling, siblings) and its
/// diagnostics.
///
/// Errors: the writer's.
pub fn write_text(topo: &Topology, out: &mut dyn Write) -> std::io::Result<()> {
    if topo.soft {
        writeln!(
            out,
            "# no RDMA device under {}: soft devices, one per netdev with an address",
            topo.sysfs_root.join("class/infiniband").display()
        )?;
    }
    for l in ibdev2netdev_lines(topo) {
        writeln!(out, "{l}")?;
    }
    for p in &topo.ports {
        writeln!(out)?;
        let mut head = format!(
            "{} port {}: {}",
            p.device,
            p.port,
            if p.up { "up" } else { "down" }
        );
        if let Some(s) = &p.port_state {
            head.push_str(&format!(" ({}: {})", s.code, s.name));
        }
        match p.kind {
            DeviceKind::Soft => head.push_str(", soft RoCEv2"),
            DeviceKind::Vfio => head.push_str(
                ", on vfio-pci for rdmesh's vfio provider (state unknown until opened; give its address with RDMESH_NICS=vfio:BDF=addr/prefix)",
            ),
            DeviceKind::Rdma => {
                if let Some(l) = &p.link_layer {
                    head.push_str(&format!(", {}", l.as_str()));
                }
                if let Some(r) = &p.rate {
                    head.push_str(&format!(", rate {r}"));
                }
            }
        }
        writeln!(out, "{head}")?;
        let row = |out: &mut dyn Write, k: &str, v: String| writeln!(out, "  {k:<11} {v}");
        row(
            out,
            "netdev",
            p.netdev.clone().unwrap_or_else(|| "-".into()),
        )?;
        row(
            out,
            "address",
            if p.addresses.is_empty() {
                "-".into()
            } else {
                join(&p.addresses)
            },
        )?;
        let gid = match (&p.gid, p.kind) {
            (Some(c), _) => format!(
                "{} ({} {}{})",
                c.index,
                c.gid_type.as_ref().map_or("type unknown", |t| t.as_str()),
                gid::gid_addr(&c.gid),
                if c.pinned {
                    format!(", pinned by {GID_INDEX_ENV}")
                } else {
                    String::new()
                }
            ),
            (None, DeviceKind::Soft) => "- (soft device: the GID is the address)".into(),
            (None, DeviceKind::Rdma) => "-".into(),
            (None, DeviceKind::Vfio) => {
                "- (vfio: GID index 0 = the address rdmesh gives it)".into()
            }
        };
        row(out, "GID index", gid)?;
        row(
            out,
            "MTU",
            match (p.mtu, p.roce_mtu()) {
                (Some(m), Some(r)) => format!("{m} (RoCE path MTU {r})"),
                (Some(m), None) => m.to_string(),
                _ => "-".into(),
            },
        )?;
        row(out, "link speed", p.speed_mbps.map_or("-".into(), gbps))?;
        row(out, "PCI", p.pci.map_or("-".into(), |a| a.to_string()))?;
        row(
            out,
            "PCIe link",
            match p.pcie {
                Some(l) => format!(
                    "{}{:.1} GT/s x{}, ceiling {:.1} Gb/s per direction",
                    match l.generation() {
                        0 => String::new(),
                        g => format!("Gen{g} "),
                    },
                    l.speed_gts,
                    l.width,
                    l.ceiling_gbps()
                ),
                None => "-".into(),
            },
        )?;
        row(
            out,
            "siblings",
            if p.siblings.is_empty() {
                "-".into()
            } else {
                format!(
                    "{} (same physical port, another PCIe link)",
                    join(&p.siblings)
                )
            },
        )?;
        for d in diagnostics(topo, p) {
            let tag = match d.severity {
                Severity::Warning => "warning",
                Severity::Note => "note",
            };
            writeln!(out, "  {tag}: {}", d.message)?;
        }
    }
    Ok(())
}

/// The `pcie` object of the JSON report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JsonPcie {
    /// Transfer rate per lane, GT/s.
    pub speed_gts: f64,
    /// Lanes.
    pub width: u32,
    /// Bandwidth ceiling per direction, Gb/s (2 decimals).
    pub ceiling_gbps: f64,
}

/// One element of the JSON report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JsonPort {
    /// Device name.
    pub name: String,
    /// Port number.
    pub port: u32,
    /// Netdev name.
    pub netdev: Option<String>,
    /// "up" or "down".
    pub state: &'static str,
    /// CIDR strings.
    pub addresses: Vec<String>,
    /// The chosen GID index.
    pub gid_index: Option<u32>,
    /// MTU in bytes.
    pub mtu: Option<u32>,
    /// Link speed in Mb/s.
    pub speed_mbps: Option<u64>,
    /// PCI address.
    pub pci: Option<String>,
    /// PCIe link.
    pub pcie: Option<JsonPcie>,
    /// Sibling PCI addresses.
    pub siblings: Vec<String>,
}

impl From<&Port> for JsonPort {
    fn from(p: &Port) -> Self {
        JsonPort {
            name: p.device.clone(),
            port: p.port,
            netdev: p.netdev.clone(),
            state: if p.up { "up" } else { "down" },
            addresses: p.addresses.iter().map(ToString::to_string).collect(),
            gid_index: p.gid.as_ref().map(|g| g.index),
            mtu: p.mtu,
            speed_mbps: p.speed_mbps,
            pci: p.pci.map(|a| a.to_string()),
            pcie: p.pcie.map(|l| JsonPcie {
                speed_gts: l.speed_gts,
                width: l.width,
                ceiling_gbps: (l.ceiling_gbps() * 100.0).round() / 100.0,
            }),
            siblings: p.siblings.iter().map(ToString::to_string).collect(),
        }
    }
}

/// The JSON report as a value.
pub fn to_json(topo: &Topology) -> serde_json::Value {
    let ports: Vec<JsonPort> = topo.ports.iter().map(JsonPort::from).collect();
    serde_json::to_value(ports).unwrap_or(serde_json::Value::Null)
}

/// Writes the JSON report (pretty-printed, newline-terminated).
///
/// Errors: the writer's.
pub fn write_json(topo: &Topology, out: &mut dyn Write) -> std::io::Result<()> {
    let ports: Vec<JsonPort> = topo.ports.iter().map(JsonPort::from).collect();
    serde_json::to_writer_pretty(&mut *out, &ports).map_err(std::io::Error::other)?;
    writeln!(out)
}

/// What `rdmesh topo` does: discovers with `opts` and writes the text or JSON report.
///
/// Errors: discovery errors (naming the path, device, port or variable), and write errors.
pub fn run_report(opts: &DiscoverOptions, json: bool, out: &mut dyn Write) -> crate::Result<()> {
    let topo = super::Topology::discover(opts)?;
    let r = if json {
        write_json(&topo, out)
    } else {
        write_text(&topo, out)
    };
    r.map_err(|e| crate::Error::io("writing the topology report", e))
}
