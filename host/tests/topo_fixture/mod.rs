//! Builds sysfs trees in a temporary directory, laid out and formatted as Linux writes them
//! (drivers/infiniband/core/sysfs.c, drivers/pci/pci-sysfs.c, net/core/net-sysfs.c), plus
//! `ip -json address show` files. Nothing here is copied from a machine: every tree is made by
//! the functions below.
//!
//! Layout made (relative to the sysfs root):
//! - `devices/<bridge>/<pci>/` with `current_link_speed` ("32.0 GT/s PCIe"), `current_link_width`,
//!   `max_link_speed`, `max_link_width`, `vendor`, `device`;
//! - `devices/<bridge>/<pci>/infiniband/<dev>/` with `node_guid`, `sys_image_guid`, `device`
//!   → `../../../<pci>`, `ports/<p>/{state,phys_state,link_layer,rate}`,
//!   `ports/<p>/gids/<i>`, `ports/<p>/gid_attrs/{types,ndevs}/<i>`;
//!   `class/infiniband/<dev>` → `../../devices/<bridge>/<pci>/infiniband/<dev>`;
//! - `devices/<bridge>/<pci>/net/<n>/` with `mtu`, `speed`, `carrier`, `operstate`, `dev_port`,
//!   `type`, `device` → `../../../<pci>`; `class/net/<n>` → `../../devices/<bridge>/<pci>/net/<n>`;
//!   virtual netdevs live in `devices/virtual/net/<n>` without `device`.
//!
//! An attribute the kernel would fail to read (EINVAL: the type of an empty GID entry, the
//! speed of a down link) is made a directory, so reading it fails as it does on a real system.

#![allow(dead_code)]

use std::fs;
use std::path::PathBuf;

use serde_json::json;

/// The kernel's `%pI6` text of the zero GID (an empty GID table entry).
pub const ZERO_GID: &str = "0000:0000:0000:0000:0000:0000:0000:0000";

/// A fixture tree: `<tmp>/sys` is the sysfs root; other files go next to it.
pub struct Tree {
    dir: tempfile::TempDir,
}

/// A netdev's attributes. `None` fields are made unreadable (as the kernel answers EINVAL).
#[derive(Clone)]
pub struct NetdevSpec {
    pub mtu: u32,
    pub speed: Option<i64>,
    pub carrier: Option<bool>,
    pub operstate: &'static str,
    pub dev_port: u32,
    pub arp_type: u32,
}

impl NetdevSpec {
    pub fn up(mtu: u32, speed_mbps: i64) -> NetdevSpec {
        NetdevSpec {
            mtu,
            speed: Some(speed_mbps),
            carrier: Some(true),
            operstate: "up",
            dev_port: 0,
            arp_type: 1,
        }
    }

    /// Admin up, no carrier: speed reads "-1", carrier "0".
    pub fn no_carrier(mtu: u32) -> NetdevSpec {
        NetdevSpec {
            mtu,
            speed: Some(-1),
            carrier: Some(false),
            operstate: "down",
            dev_port: 0,
            arp_type: 1,
        }
    }

    /// Admin down: speed and carrier fail with EINVAL.
    pub fn admin_down(mtu: u32) -> NetdevSpec {
        NetdevSpec {
            mtu,
            speed: None,
            carrier: None,
            operstate: "down",
            dev_port: 0,
            arp_type: 1,
        }
    }
}

/// An RDMA port's attributes.
pub struct PortSpec {
    pub state: &'static str,
    pub phys_state: &'static str,
    pub rate: &'static str,
}

pub const ACTIVE: PortSpec = PortSpec {
    state: "4: ACTIVE",
    phys_state: "5: LinkUp",
    rate: "200 Gb/sec (4X HDR)",
};
pub const DOWN: PortSpec = PortSpec {
    state: "1: DOWN",
    phys_state: "3: Disabled",
    rate: "40 Gb/sec (4X QDR)",
};

impl Tree {
    pub fn new() -> Tree {
        let dir = tempfile::Builder::new()
            .prefix("rdmesh-topo-")
            .tempdir()
            .expect("temp dir");
        fs::create_dir_all(dir.path().join("sys/class/net")).unwrap();
        Tree { dir }
    }

    /// The sysfs root.
    pub fn sys(&self) -> PathBuf {
        self.dir.path().join("sys")
    }

    /// A path next to the sysfs root (for ip-json files).
    pub fn side(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `<root>/<rel>` with `value` and a newline, as sysfs attributes read.
    pub fn attr(&self, rel: &str, value: &str) {
        let p = self.sys().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        if p.is_dir() {
            fs::remove_dir(&p).unwrap();
        }
        fs::write(&p, format!("{value}\n")).unwrap();
    }

    /// Makes `<root>/<rel>` unreadable as a file (a directory), like an attribute that fails
    /// with EINVAL.
    pub fn unreadable(&self, rel: &str) {
        let p = self.sys().join(rel);
        if p.is_file() {
            fs::remove_file(&p).unwrap();
        }
        fs::create_dir_all(&p).unwrap();
    }

    pub fn symlink(&self, rel: &str, target: &str) {
        let p = self.sys().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, &p).unwrap();
    }

    /// A PCI function `devices/<bridge>/<addr>` with its PCIe link; returns its path relative
    /// to the root. `link`/`max`: ("32.0 GT/s PCIe", "4").
    pub fn pci_function(
        &self,
        bridge: &str,
        addr: &str,
        link: (&str, &str),
        max: (&str, &str),
    ) -> String {
        let rel = format!("devices/{bridge}/{addr}");
        self.attr(&format!("{rel}/vendor"), "0x15b3");
        self.attr(&format!("{rel}/device"), "0x1021");
        self.attr(&format!("{rel}/current_link_speed"), link.0);
        self.attr(&format!("{rel}/current_link_width"), link.1);
        self.attr(&format!("{rel}/max_link_speed"), max.0);
        self.attr(&format!("{rel}/max_link_width"), max.1);
        rel
    }

    /// A netdev; `pci` is the relative path of its PCI function, or `None` for a virtual one.
    pub fn netdev(&self, pci: Option<&str>, name: &str, s: &NetdevSpec) {
        let rel = match pci {
            Some(p) => {
                let rel = format!("{p}/net/{name}");
                let func = p.rsplit('/').next().unwrap();
                self.symlink(&format!("{rel}/device"), &format!("../../../{func}"));
                rel
            }
            None => format!("devices/virtual/net/{name}"),
        };
        self.attr(&format!("{rel}/mtu"), &s.mtu.to_string());
        match s.speed {
            Some(v) => self.attr(&format!("{rel}/speed"), &v.to_string()),
            None => self.unreadable(&format!("{rel}/speed")),
        }
        match s.carrier {
            Some(c) => self.attr(&format!("{rel}/carrier"), if c { "1" } else { "0" }),
            None => self.unreadable(&format!("{rel}/carrier")),
        }
        self.attr(&format!("{rel}/operstate"), s.operstate);
        self.attr(&format!("{rel}/dev_port"), &s.dev_port.to_string());
        self.attr(&format!("{rel}/type"), &s.arp_type.to_string());
        self.symlink(&format!("class/net/{name}"), &format!("../../{rel}"));
    }

    /// An RDMA device on PCI function `pci` (relative path).
    pub fn rdma_device(&self, pci: &str, name: &str, node_guid: &str, sys_image_guid: &str) {
        let rel = format!("{pci}/infiniband/{name}");
        let func = pci.rsplit('/').next().unwrap();
        self.attr(&format!("{rel}/node_guid"), node_guid);
        self.attr(&format!("{rel}/sys_image_guid"), sys_image_guid);
        self.attr(&format!("{rel}/node_type"), "1: CA");
        self.symlink(&format!("{rel}/device"), &format!("../../../{func}"));
        self.symlink(&format!("class/infiniband/{name}"), &format!("../../{rel}"));
    }

    /// Port `port` of RDMA device `dev` with an Ethernet link layer and a GID table of
    /// `table_len` empty entries (zero GID; type and ndev unreadable), as the kernel shows it.
    pub fn rdma_port(&self, dev: &str, port: u32, s: &PortSpec, table_len: u32) {
        let p = format!("class/infiniband/{dev}/ports/{port}");
        self.attr(&format!("{p}/state"), s.state);
        self.attr(&format!("{p}/phys_state"), s.phys_state);
        self.attr(&format!("{p}/link_layer"), "Ethernet");
        self.attr(&format!("{p}/rate"), s.rate);
        self.attr(&format!("{p}/lid"), "0x0");
        for i in 0..table_len {
            self.clear_gid(dev, port, i);
        }
    }

    /// Sets GID entry `index`: `gid` as `%pI6` prints it, `gid_type` ("RoCE v2" or
    /// "IB/RoCE v1"), netdev `ndev`.
    pub fn gid(&self, dev: &str, port: u32, index: u32, gid: &str, gid_type: &str, ndev: &str) {
        let p = format!("class/infiniband/{dev}/ports/{port}");
        self.attr(&format!("{p}/gids/{index}"), gid);
        self.attr(&format!("{p}/gid_attrs/types/{index}"), gid_type);
        self.attr(&format!("{p}/gid_attrs/ndevs/{index}"), ndev);
    }

    /// Empties GID entry `index`: zero GID, type and ndev unreadable.
    pub fn clear_gid(&self, dev: &str, port: u32, index: u32) {
        let p = format!("class/infiniband/{dev}/ports/{port}");
        self.attr(&format!("{p}/gids/{index}"), ZERO_GID);
        self.unreadable(&format!("{p}/gid_attrs/types/{index}"));
        self.unreadable(&format!("{p}/gid_attrs/ndevs/{index}"));
    }

    /// The default RoCE GIDs of a port: the link-local GID from the MAC (EUI-64) as v1 and v2 at
    /// indexes 0 and 1, and for each IPv4 address its IPv4-mapped GID as v1 then v2.
    pub fn roce_gids(&self, dev: &str, port: u32, ndev: &str, mac: [u8; 6], v4: &[[u8; 4]]) -> u32 {
        let ll = format!(
            "fe80:0000:0000:0000:{:02x}{:02x}:{:02x}ff:fe{:02x}:{:02x}{:02x}",
            mac[0] ^ 2,
            mac[1],
            mac[2],
            mac[3],
            mac[4],
            mac[5]
        );
        self.gid(dev, port, 0, &ll, "IB/RoCE v1", ndev);
        self.gid(dev, port, 1, &ll, "RoCE v2", ndev);
        let mut i = 2;
        for a in v4 {
            let g = mapped(*a);
            self.gid(dev, port, i, &g, "IB/RoCE v1", ndev);
            self.gid(dev, port, i + 1, &g, "RoCE v2", ndev);
            i += 2;
        }
        i
    }

    /// Writes `ip -json address show` output for `ifaces` to `<tmp>/<name>` and returns its path.
    pub fn ip_json(&self, name: &str, ifaces: &[Iface]) -> PathBuf {
        let v: Vec<_> = ifaces
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let addr_info: Vec<_> = f
                    .addrs
                    .iter()
                    .map(|a| {
                        let (ip, len) = a.split_once('/').unwrap();
                        let v6 = ip.contains(':');
                        let scope = if ip.starts_with("fe80") {
                            "link"
                        } else if ip.starts_with("127.") || ip == "::1" {
                            "host"
                        } else {
                            "global"
                        };
                        json!({
                            "family": if v6 { "inet6" } else { "inet" },
                            "local": ip,
                            "prefixlen": len.parse::<u8>().unwrap(),
                            "scope": scope,
                            "valid_life_time": 4294967295u32,
                            "preferred_life_time": 4294967295u32
                        })
                    })
                    .collect();
                let mut flags = vec![];
                if f.loopback {
                    flags.push("LOOPBACK");
                } else {
                    flags.extend(["BROADCAST", "MULTICAST"]);
                }
                if f.up {
                    flags.extend(["UP", "LOWER_UP"]);
                }
                json!({
                    "ifindex": i + 1,
                    "ifname": f.name,
                    "flags": flags,
                    "mtu": f.mtu,
                    "qdisc": "mq",
                    "operstate": if f.loopback { "UNKNOWN" } else if f.up { "UP" } else { "DOWN" },
                    "group": "default",
                    "txqlen": 1000,
                    "link_type": if f.loopback { "loopback" } else { "ether" },
                    "address": "00:00:00:00:00:00",
                    "broadcast": "ff:ff:ff:ff:ff:ff",
                    "addr_info": addr_info
                })
            })
            .collect();
        let p = self.side(name);
        fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
        p
    }
}

/// One interface of an `ip -json` file.
pub struct Iface {
    pub name: &'static str,
    pub up: bool,
    pub loopback: bool,
    pub mtu: u32,
    pub addrs: Vec<&'static str>,
}

pub fn iface(name: &'static str, up: bool, mtu: u32, addrs: &[&'static str]) -> Iface {
    Iface {
        name,
        up,
        loopback: name == "lo",
        mtu,
        addrs: addrs.to_vec(),
    }
}

/// The `%pI6` text of the IPv4-mapped GID of `a`.
pub fn mapped(a: [u8; 4]) -> String {
    format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        a[0], a[1], a[2], a[3]
    )
}

const GEN5: &str = "32.0 GT/s PCIe";
const GEN4: &str = "16.0 GT/s PCIe";

/// A DGX Spark with one QSFP cable: the ConnectX-7 shows four PCI functions on two PCIe Gen5
/// x4 links (`0000:01:00.x` and `0002:01:00.x`); function 0 of each drives physical port 1
/// (cabled, up: 10.10.1.11/24 and 10.10.2.11/24), function 1 drives port 2 (no cable).
/// Also a 10GbE management port `enP7s7` (no RDMA) and `lo`.
pub fn dgx_spark_one_cable() -> (Tree, PathBuf) {
    let t = Tree::new();
    let guid = "4cbb:4703:00a1:b2c0";
    let halves = [
        ("pci0000:00/0000:00:00.0", "0000", "rocep1s0f", "enp1s0f"),
        (
            "pci0002:00/0002:00:00.0",
            "0002",
            "roceP2p1s0f",
            "enP2p1s0f",
        ),
    ];
    for (h, (bridge, domain, ibpfx, ndpfx)) in halves.iter().enumerate() {
        for f in 0..2u8 {
            let pci = t.pci_function(
                bridge,
                &format!("{domain}:01:00.{f}"),
                (GEN5, "4"),
                (GEN5, "4"),
            );
            let ib = format!("{ibpfx}{f}");
            let nd = format!("{ndpfx}{f}np{f}");
            t.rdma_device(&pci, &ib, &format!("4cbb:4703:00a1:b2{h}{f}"), guid);
            let up = f == 0;
            t.rdma_port(&ib, 1, if up { &ACTIVE } else { &DOWN }, 255);
            let mac = [0x4c, 0xbb, 0x47, 0xa1, 0xb2, (h as u8) << 4 | f];
            let v4: &[[u8; 4]] = if up {
                &[[10, 10, 1 + h as u8, 11]]
            } else {
                &[]
            };
            t.roce_gids(&ib, 1, &nd, mac, v4);
            let spec = if !up {
                if h == 0 {
                    NetdevSpec::no_carrier(1500)
                } else {
                    NetdevSpec::admin_down(1500)
                }
            } else {
                NetdevSpec::up(9000, 200_000)
            };
            t.netdev(Some(&pci), &nd, &spec);
        }
    }
    let mgmt = t.pci_function(
        "pci0007:00/0007:00:00.0",
        "0007:01:00.0",
        ("8.0 GT/s PCIe", "1"),
        ("8.0 GT/s PCIe", "1"),
    );
    t.netdev(Some(&mgmt), "enP7s7", &NetdevSpec::up(1500, 10_000));
    t.netdev(
        None,
        "lo",
        &NetdevSpec {
            arp_type: 772,
            operstate: "unknown",
            ..NetdevSpec::up(65536, 0)
        },
    );
    let ip = t.ip_json(
        "spark-ip.json",
        &[
            iface("lo", true, 65536, &["127.0.0.1/8", "::1/128"]),
            iface(
                "enP7s7",
                true,
                1500,
                &["192.168.1.50/24", "fe80::5a47:caff:fe10:2030/64"],
            ),
            iface(
                "enp1s0f0np0",
                true,
                9000,
                &["10.10.1.11/24", "fe80::4ebb:47ff:fea1:b200/64"],
            ),
            iface("enp1s0f1np1", true, 1500, &[]),
            iface(
                "enP2p1s0f0np0",
                true,
                9000,
                &["10.10.2.11/24", "fe80::4ebb:47ff:fea1:b210/64"],
            ),
            iface("enP2p1s0f1np1", false, 1500, &[]),
        ],
    );
    (t, ip)
}

/// One node of a direct-cabled triangle (the nccl-mesh-plugin layout): a dual-port ConnectX-6
/// Dx (one adapter, functions 0000:41:00.0 and .1 on one Gen4 x16 link) with one link to each
/// peer, each its own subnet: 192.168.100.1/24 (MTU 9000) and 192.168.102.1/24 (MTU 1500).
pub fn triangle_node() -> (Tree, PathBuf) {
    let t = Tree::new();
    let guid = "b8ce:f603:0012:3450";
    let links = [
        ("mlx5_0", "enp65s0f0np0", [192, 168, 100, 1], 9000),
        ("mlx5_1", "enp65s0f1np1", [192, 168, 102, 1], 1500),
    ];
    for (f, (ib, nd, v4, mtu)) in links.iter().enumerate() {
        let pci = t.pci_function(
            "pci0000:40/0000:40:01.1",
            &format!("0000:41:00.{f}"),
            (GEN4, "16"),
            (GEN4, "16"),
        );
        t.rdma_device(&pci, ib, &format!("b8ce:f603:0012:345{f}"), guid);
        t.rdma_port(
            ib,
            1,
            &PortSpec {
                rate: "100 Gb/sec (2X HDR)",
                ..ACTIVE
            },
            255,
        );
        t.roce_gids(
            ib,
            1,
            nd,
            [0xb8, 0xce, 0xf6, 0x12, 0x34, 0x50 + f as u8],
            &[*v4],
        );
        t.netdev(
            Some(&pci),
            nd,
            &NetdevSpec {
                dev_port: 0,
                ..NetdevSpec::up(*mtu, 100_000)
            },
        );
    }
    let ip = t.ip_json(
        "triangle-ip.json",
        &[
            iface("lo", true, 65536, &["127.0.0.1/8"]),
            iface("eno1", true, 1500, &["10.0.0.21/16"]),
            iface("enp65s0f0np0", true, 9000, &["192.168.100.1/24"]),
            iface("enp65s0f1np1", true, 1500, &["192.168.102.1/24"]),
        ],
    );
    (t, ip)
}

/// A Kubernetes pod with an SR-IOV VF (`mlx5_3` on 0000:3b:00.2, netdev `net1`,
/// 192.168.50.7/24): the GID table starts at index 8 (entries 0–7 are empty), and the VF's own
/// PCIe link reads "Unknown" width 0, so the PF's (0000:3b:00.0, Gen4 x16) applies.
pub fn container_sparse() -> (Tree, PathBuf) {
    let t = Tree::new();
    let pf = t.pci_function(
        "pci0000:3a/0000:3a:00.0",
        "0000:3b:00.0",
        (GEN4, "16"),
        (GEN4, "16"),
    );
    let vf = t.pci_function(
        "pci0000:3a/0000:3a:00.0",
        "0000:3b:00.2",
        ("Unknown", "0"),
        ("Unknown", "0"),
    );
    let _ = pf;
    t.symlink(&format!("{vf}/physfn"), "../0000:3b:00.0");
    t.rdma_device(&vf, "mlx5_3", "1070:fd03:00c4:5e02", "1070:fd03:00c4:5e00");
    t.rdma_port(
        "mlx5_3",
        1,
        &PortSpec {
            rate: "100 Gb/sec (2X HDR)",
            ..ACTIVE
        },
        16,
    );
    let ll = "fe80:0000:0000:0000:1270:fdff:fec4:5e02";
    t.gid("mlx5_3", 1, 8, ll, "IB/RoCE v1", "net1");
    t.gid("mlx5_3", 1, 9, ll, "RoCE v2", "net1");
    t.gid(
        "mlx5_3",
        1,
        10,
        &mapped([192, 168, 50, 7]),
        "IB/RoCE v1",
        "net1",
    );
    t.gid(
        "mlx5_3",
        1,
        11,
        &mapped([192, 168, 50, 7]),
        "RoCE v2",
        "net1",
    );
    t.netdev(Some(&vf), "net1", &NetdevSpec::up(9000, 100_000));
    t.netdev(None, "eth0", &NetdevSpec::up(1450, 10_000));
    t.netdev(
        None,
        "lo",
        &NetdevSpec {
            arp_type: 772,
            operstate: "unknown",
            ..NetdevSpec::up(65536, 0)
        },
    );
    let ip = t.ip_json(
        "pod-ip.json",
        &[
            iface("lo", true, 65536, &["127.0.0.1/8"]),
            iface("eth0", true, 1450, &["10.244.1.5/24"]),
            iface(
                "net1",
                true,
                9000,
                &["192.168.50.7/24", "fe80::1270:fdff:fec4:5e02/64"],
            ),
        ],
    );
    (t, ip)
}

/// A node whose RoCE v2 GID for 10.10.1.11 is at index 3 (`mlx5_0`, `ens1f0np0`); call
/// [`drift_gid_3_to_4`] to apply the interface event that moves it to index 4.
pub fn drift_node() -> (Tree, PathBuf) {
    let t = Tree::new();
    let pci = t.pci_function(
        "pci0000:16/0000:16:02.0",
        "0000:17:00.0",
        (GEN5, "16"),
        (GEN5, "16"),
    );
    t.rdma_device(&pci, "mlx5_0", "a088:c203:0031:7c80", "a088:c203:0031:7c80");
    t.rdma_port(
        "mlx5_0",
        1,
        &PortSpec {
            rate: "400 Gb/sec (4X NDR)",
            ..ACTIVE
        },
        255,
    );
    t.roce_gids(
        "mlx5_0",
        1,
        "ens1f0np0",
        [0xa0, 0x88, 0xc2, 0x31, 0x7c, 0x80],
        &[[10, 10, 1, 11]],
    );
    t.netdev(Some(&pci), "ens1f0np0", &NetdevSpec::up(9000, 400_000));
    let ip = t.ip_json(
        "drift-ip.json",
        &[iface("ens1f0np0", true, 9000, &["10.10.1.11/24"])],
    );
    (t, ip)
}

/// The interface event: an IPv6 address fd00::11 was added and the IPv4 GIDs were re-added
/// after it, so index 2 holds fd00::11 (v1), 3 the IPv4-mapped GID as RoCE v1, 4 as RoCE v2,
/// 5 fd00::11 (v2).
pub fn drift_gid_3_to_4(t: &Tree) {
    let v6 = "fd00:0000:0000:0000:0000:0000:0000:0011";
    let g = mapped([10, 10, 1, 11]);
    t.gid("mlx5_0", 1, 2, v6, "IB/RoCE v1", "ens1f0np0");
    t.gid("mlx5_0", 1, 3, &g, "IB/RoCE v1", "ens1f0np0");
    t.gid("mlx5_0", 1, 4, &g, "RoCE v2", "ens1f0np0");
    t.gid("mlx5_0", 1, 5, v6, "RoCE v2", "ens1f0np0");
}

/// A machine without RDMA devices: `eth0` (virtio-net under PCI 0000:00:03.0, two addresses
/// plus link-local), `veth-ab` (virtual, 192.168.100.1/24), `dummy0` (no address), `veth-cd`
/// (only an IPv6 link-local address), `lo`.
pub fn no_rdma() -> (Tree, PathBuf) {
    let t = Tree::new();
    // virtio: devices/pci0000:00/0000:00:03.0/virtio0/net/eth0, device → ../../../virtio0
    t.attr("devices/pci0000:00/0000:00:03.0/vendor", "0x1af4");
    t.netdev(
        Some("devices/pci0000:00/0000:00:03.0/virtio0"),
        "eth0",
        &NetdevSpec::up(1500, -1),
    );
    t.netdev(None, "veth-ab", &NetdevSpec::up(9000, 10_000));
    t.netdev(
        None,
        "dummy0",
        &NetdevSpec {
            operstate: "unknown",
            carrier: Some(true),
            ..NetdevSpec::up(1500, 0)
        },
    );
    t.netdev(None, "veth-cd", &NetdevSpec::up(1500, 10_000));
    t.netdev(
        None,
        "lo",
        &NetdevSpec {
            arp_type: 772,
            operstate: "unknown",
            ..NetdevSpec::up(65536, 0)
        },
    );
    let ip = t.ip_json(
        "ip.json",
        &[
            iface("lo", true, 65536, &["127.0.0.1/8", "::1/128"]),
            iface(
                "eth0",
                true,
                1500,
                &["192.0.2.2/24", "fd00::2/64", "fe80::fc:ff:fe00:1/64"],
            ),
            iface("veth-ab", true, 9000, &["192.168.100.1/24"]),
            iface("dummy0", true, 1500, &[]),
            iface("veth-cd", true, 1500, &["fe80::a8c1:abff:fe00:cd/64"]),
        ],
    );
    (t, ip)
}
