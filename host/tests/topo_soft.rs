//! Soft device ports (no RDMA device: one port per netdev with an address) from a fixture tree,
//! and, on the machine running the test, the address sources checked against iproute2:
//! netlink (getifaddrs) must give the same addresses and prefixes as `ip -json address show`,
//! and the soft ports and MTUs read from /sys must match what `ip` reports.

mod topo_fixture;

use std::collections::BTreeMap;

use rdmesh_host::topo::addrs::{from_netlink, parse_ip_json, NetdevAddrs};
use rdmesh_host::topo::{report, AddressSource, DeviceKind, DiscoverOptions, Topology};
use topo_fixture::*;

#[test]
fn no_rdma_device_gives_one_soft_port_per_addressed_netdev() {
    let (t, ipj) = no_rdma();
    let topo = Topology::discover(&DiscoverOptions {
        sysfs_root: t.sys(),
        addresses: AddressSource::IpJsonFile(ipj),
        gid_index: None,
    })
    .unwrap();
    assert!(topo.soft);
    // lo (loopback), dummy0 (no address) and veth-cd (IPv6 link-local only) are not devices.
    let names: Vec<_> = topo.ports.iter().map(|p| p.device.as_str()).collect();
    assert_eq!(names, ["soft_eth0", "soft_veth-ab"]);
    let eth0 = &topo.ports[0];
    assert_eq!(eth0.kind, DeviceKind::Soft);
    assert_eq!(
        (eth0.port, eth0.up, eth0.netdev.as_deref()),
        (1, true, Some("eth0"))
    );
    assert_eq!(
        eth0.addresses
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>(),
        ["192.0.2.2/24", "fd00::2/64", "fe80::fc:ff:fe00:1/64"]
    );
    // virtio-net: the PCI function is the parent of the virtio device; no PCIe link attributes.
    assert_eq!(
        eth0.pci.map(|a| a.to_string()).as_deref(),
        Some("0000:00:03.0")
    );
    assert!(eth0.pcie.is_none());
    // speed "-1" is unknown.
    assert_eq!((eth0.mtu, eth0.speed_mbps), (Some(1500), None));
    let veth = &topo.ports[1];
    assert_eq!(
        (veth.mtu, veth.speed_mbps, veth.pci),
        (Some(9000), Some(10_000), None)
    );
    let lines = report::ibdev2netdev_lines(&topo);
    assert_eq!(
        lines,
        [
            "soft_eth0 port 1 ==> eth0 (Up)",
            "soft_veth-ab port 1 ==> veth-ab (Up)"
        ]
    );
    let j = report::to_json(&topo);
    assert_eq!(j[0]["gid_index"], serde_json::Value::Null);
    assert_eq!(j[1]["addresses"], serde_json::json!(["192.168.100.1/24"]));
}

#[test]
fn an_empty_class_infiniband_is_no_rdma_device() {
    let (t, ipj) = no_rdma();
    std::fs::create_dir_all(t.sys().join("class/infiniband")).unwrap();
    let topo = Topology::discover(&DiscoverOptions {
        sysfs_root: t.sys(),
        addresses: AddressSource::IpJsonFile(ipj),
        gid_index: None,
    })
    .unwrap();
    assert!(topo.soft && topo.ports.len() == 2);
}

fn ip_json_now() -> Vec<NetdevAddrs> {
    let out = std::process::Command::new("ip")
        .args(["-json", "address", "show"])
        .output()
        .expect("running `ip -json address show` (install iproute2)");
    assert!(
        out.status.success(),
        "ip -json address show: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_ip_json(
        &String::from_utf8(out.stdout).unwrap(),
        "ip -json address show",
    )
    .unwrap()
}

fn by_name(v: &[NetdevAddrs]) -> BTreeMap<String, Vec<String>> {
    v.iter()
        .filter(|n| !n.addrs.is_empty())
        .map(|n| {
            let mut a: Vec<_> = n.addrs.iter().map(|a| a.to_string()).collect();
            a.sort();
            (n.name.clone(), a)
        })
        .collect()
}

#[test]
fn netlink_addresses_match_iproute2_on_this_machine() {
    let ip = ip_json_now();
    let nl = from_netlink().unwrap();
    let ip_map = by_name(&ip);
    assert!(
        !ip_map.is_empty(),
        "no interface has an address: nothing to compare"
    );
    assert_eq!(by_name(&nl), ip_map);
    for n in &nl {
        if let Some(i) = ip.iter().find(|i| i.name == n.name) {
            assert_eq!((n.up, n.loopback), (i.up, i.loopback), "{}", n.name);
        }
    }
}

#[test]
fn live_soft_ports_match_iproute2_when_there_is_no_rdma_device() {
    let has_rdma = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| d.count() > 0)
        .unwrap_or(false);
    let topo = Topology::discover(&DiscoverOptions::default()).unwrap();
    assert_eq!(topo.soft, !has_rdma);
    let ip = ip_json_now();
    if has_rdma {
        // Every RDMA port's addresses are its netdev's, as iproute2 reports them.
        for p in &topo.ports {
            let want = p
                .netdev
                .as_ref()
                .and_then(|n| by_name(&ip).get(n).cloned())
                .unwrap_or_default();
            let mut got: Vec<_> = p.addresses.iter().map(|a| a.to_string()).collect();
            got.sort();
            assert_eq!(got, want, "{} port {}", p.device, p.port);
        }
        return;
    }
    let want: BTreeMap<String, (Vec<String>, Option<u32>)> = ip
        .iter()
        .filter(|n| {
            !n.loopback
                && n.addrs
                    .iter()
                    .any(|a| !rdmesh_host::topo::soft::is_ipv6_link_local(a.ip))
        })
        .map(|n| {
            let mut a: Vec<_> = n.addrs.iter().map(|a| a.to_string()).collect();
            a.sort();
            (format!("soft_{}", n.name), (a, n.mtu))
        })
        .collect();
    let got: BTreeMap<String, (Vec<String>, Option<u32>)> = topo
        .ports
        .iter()
        .map(|p| {
            let mut a: Vec<_> = p.addresses.iter().map(|a| a.to_string()).collect();
            a.sort();
            (p.device.clone(), (a, p.mtu))
        })
        .collect();
    // MTUs come from /sys here and from netlink in `ip`: two sources that must agree.
    assert_eq!(got, want);
}
