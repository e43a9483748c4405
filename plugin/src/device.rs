//! The NCCL devices of the plugin: one per device port among the mesh node's NICs (a port with
//! several addresses is one device), with what `getProperties` reports.
//!
//! Every connection uses the mesh's routing, whatever `dev` NCCL names: the rails are the local
//! NICs whose subnets contain the peer's addresses (all of them on a DGX Spark pair), so `dev`
//! decides only which device NCCL's topology and logs attribute the connection to.

use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::net::IpAddr;
use std::sync::Mutex;

use rdmesh_host::mesh::NicSpec;
use rdmesh_host::verbs::active_mtu_for;

use crate::abi::types::{NCCL_MAX_NET_SIZE_BYTES, NCCL_PTR_HOST};

/// Largest grouped receive (`maxRecvs`): NCCL IB's `NCCL_NET_IB_MAX_RECVS`, the mesh's
/// `frame::MAX_RECVS`.
pub const MAX_RECVS: usize = 8;
/// `maxComms` reported: comms per device.
pub const MAX_COMMS: i32 = 65536;
/// `maxP2pBytes` / `maxCollBytes`: 1 GiB (NCCL's `MAX_NET_SIZE`); NCCL cuts larger transfers.
pub const MAX_TRANSFER_BYTES: usize = 1 << 30;
const _: () = assert!(MAX_TRANSFER_BYTES <= NCCL_MAX_NET_SIZE_BYTES);

/// One NCCL device.
#[derive(Debug, Clone)]
pub struct NetDevice {
    /// NCCL device index.
    pub index: usize,
    /// RDMA or soft device name (`rocep1s0f0`, `soft_eth0`).
    pub name: &'static CStr,
    /// Port number, 1-based.
    pub port: u32,
    /// The port's netdev.
    pub netdev: String,
    /// Its link addresses with prefix lengths (`a/p`).
    pub addrs: Vec<String>,
    /// Its link addresses.
    pub ips: Vec<IpAddr>,
    /// `/sys` device directory (realpath of `/sys/class/net/<netdev>/device`), `None` for a
    /// virtual netdev.
    pub pci_path: Option<&'static CStr>,
    /// Distinct per port: FNV-1a 64 of `device:port`.
    pub guid: u64,
    /// Speed, Mb/s: the NIC's ceiling (link speed capped by its PCIe link, or
    /// `RDMESH_RAIL_GBPS`).
    pub speed_mbps: i32,
    /// RoCE path MTU the netdev MTU allows, bytes (0 when unreadable).
    pub mtu: u32,
}

/// Interns `s` as a 'static C string: the pointers NCCL keeps from `getProperties` stay valid
/// for the life of the process (the library is never unloaded, see `state`).
pub fn intern(s: &str) -> &'static CStr {
    static TABLE: Mutex<Option<HashMap<String, &'static CStr>>> = Mutex::new(None);
    let mut t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let t = t.get_or_insert_with(HashMap::new);
    if let Some(c) = t.get(s) {
        return c;
    }
    let c: &'static CStr = Box::leak(
        CString::new(s.replace('\0', ""))
            .unwrap_or_default()
            .into_boxed_c_str(),
    );
    t.insert(s.to_string(), c);
    c
}

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn netdev_mtu(netdev: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{netdev}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .map(|m| active_mtu_for(m).bytes())
        .unwrap_or(0)
}

fn pci_path(netdev: &str) -> Option<&'static CStr> {
    let p = std::fs::canonicalize(format!("/sys/class/net/{netdev}/device")).ok()?;
    Some(intern(&p.to_string_lossy()))
}

/// The devices of a node's NICs, in NIC order, one per `(device, port)`.
pub fn devices_of(nics: &[NicSpec]) -> Vec<NetDevice> {
    let mut out: Vec<NetDevice> = Vec::new();
    for n in nics {
        let speed = (n.gbps * 1000.0).round().clamp(1.0, i32::MAX as f64) as i32;
        if let Some(d) = out
            .iter_mut()
            .find(|d| d.name.to_bytes() == n.device.as_bytes() && d.port == n.port)
        {
            d.addrs.push(n.addr.to_string());
            d.ips.push(n.addr.ip);
            d.speed_mbps = d.speed_mbps.max(speed);
            continue;
        }
        let mut guid = fnv1a64(format!("{}:{}", n.device, n.port).as_bytes());
        while out.iter().any(|d| d.guid == guid) {
            guid = guid.wrapping_add(1);
        }
        out.push(NetDevice {
            index: out.len(),
            name: intern(&n.device),
            port: n.port,
            netdev: n.netdev.clone(),
            addrs: vec![n.addr.to_string()],
            ips: vec![n.addr.ip],
            pci_path: match &n.provider {
                // A function on vfio-pci has no netdev: its PCI device is the path NCCL
                // places it by.
                rdmesh_host::verbs::ProviderKind::Vfio(bdf) => {
                    std::fs::canonicalize(format!("/sys/bus/pci/devices/{bdf}"))
                        .ok()
                        .map(|p| intern(&p.to_string_lossy()))
                }
                _ => pci_path(&n.netdev),
            },
            guid,
            speed_mbps: speed,
            mtu: match &n.provider {
                // The port MTU is known once the function is open (PMTU); 4096 until then.
                rdmesh_host::verbs::ProviderKind::Vfio(_) => 4096,
                _ => netdev_mtu(&n.netdev),
            },
        });
    }
    out
}

/// What `getProperties` reports, independent of the ABI version.
#[derive(Debug, Clone)]
pub struct Properties {
    /// `name`.
    pub name: *const c_char,
    /// `pciPath` (NULL: virtual).
    pub pci_path: *const c_char,
    /// `guid`.
    pub guid: u64,
    /// `ptrSupport`: HOST only (no GPUDirect).
    pub ptr_support: i32,
    /// `regIsGlobal`: 0 (no registration cache is promised; registration is free anyway).
    pub reg_is_global: i32,
    /// `speed`, Mb/s.
    pub speed: i32,
    /// `port`.
    pub port: i32,
    /// `maxComms`.
    pub max_comms: i32,
    /// `maxRecvs`.
    pub max_recvs: i32,
    /// `maxP2pBytes` = `maxCollBytes`.
    pub max_bytes: usize,
    /// The device index (for `vProps`).
    pub dev: i32,
}

impl NetDevice {
    /// The properties NCCL sees: `maxRecvs` is 1 where the node's receives take a single
    /// buffer (several lanes, or eager sends taken: `Node::single_buffer_receives`, see
    /// `RecvComm::irecv`), else [`MAX_RECVS`].
    pub fn properties_for(&self, single_buffer_receives: bool) -> Properties {
        let mut p = self.properties();
        if single_buffer_receives {
            p.max_recvs = 1;
        }
        p
    }

    /// The properties NCCL sees (single-lane connections).
    pub fn properties(&self) -> Properties {
        Properties {
            name: self.name.as_ptr(),
            pci_path: self.pci_path.map_or(std::ptr::null(), |p| p.as_ptr()),
            guid: self.guid,
            ptr_support: NCCL_PTR_HOST,
            reg_is_global: 0,
            speed: self.speed_mbps,
            port: self.port as i32,
            max_comms: MAX_COMMS,
            max_recvs: MAX_RECVS as i32,
            max_bytes: MAX_TRANSFER_BYTES,
            dev: self.index as i32,
        }
    }

    /// `soft_eth0:1 (eth0 10.0.0.1/24, 10000 Mb/s, MTU 4096)`.
    pub fn describe(&self) -> String {
        format!(
            "{}:{} ({} {}, {} Mb/s, MTU {}, pci {})",
            self.name.to_string_lossy(),
            self.port,
            self.netdev,
            self.addrs.join(" "),
            self.speed_mbps,
            self.mtu,
            self.pci_path
                .map_or("virtual".into(), |p| p.to_string_lossy().into_owned())
        )
    }
}
