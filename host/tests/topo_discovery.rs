//! Topology discovery over sysfs fixture trees made at run time (tests/topo_fixture): a DGX
//! Spark with one cable, a triangle-mesh node, a container with a sparse GID table, and a node
//! whose RoCE v2 GID moves from index 3 to 4. Checks the ports found, the GID choice (also at
//! connect time), PCIe ceilings and siblings, and the `rdmesh topo` text and JSON.

mod topo_fixture;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rdmesh_host::topo::report::{self, Severity};
use rdmesh_host::topo::{
    select_for_connect, AddressSource, DiscoverOptions, GidMiss, PciAddr, TopoError, Topology,
};
use topo_fixture::*;

fn opts(root: &Path, ip_json: &Path) -> DiscoverOptions {
    DiscoverOptions {
        sysfs_root: root.to_path_buf(),
        addresses: AddressSource::IpJsonFile(ip_json.to_path_buf()),
        gid_index: None,
    }
}

fn pci(s: &str) -> PciAddr {
    s.parse().unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn text(topo: &Topology) -> String {
    let mut out = Vec::new();
    report::write_text(topo, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// Runs `f` with a tracing subscriber that records everything at info and above.
fn with_logs<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf(Arc::new(Mutex::new(Vec::new())));
    let w = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || w.clone())
        .finish();
    let r = tracing::subscriber::with_default(sub, f);
    let logs = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (r, logs)
}

#[test]
fn dgx_spark_one_cable_ports_gids_pcie_and_siblings() {
    let (t, ipj) = dgx_spark_one_cable();
    let (topo, logs) = with_logs(|| Topology::discover(&opts(&t.sys(), &ipj)).unwrap());
    assert!(!topo.soft);
    let names: Vec<_> = topo
        .ports
        .iter()
        .map(|p| (p.device.as_str(), p.port))
        .collect();
    assert_eq!(
        names,
        [
            ("roceP2p1s0f0", 1),
            ("roceP2p1s0f1", 1),
            ("rocep1s0f0", 1),
            ("rocep1s0f1", 1)
        ]
    );

    let a = topo.port("rocep1s0f0", 1).unwrap();
    assert!(a.up && a.link_up);
    assert_eq!(a.netdev.as_deref(), Some("enp1s0f0np0"));
    assert_eq!(
        a.addresses
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>(),
        ["10.10.1.11/24", "fe80::4ebb:47ff:fea1:b200/64"]
    );
    let g = a.gid.as_ref().unwrap();
    assert_eq!(
        (g.index, g.addr, g.pinned),
        (3, Some(ip("10.10.1.11")), false)
    );
    assert_eq!(
        (a.mtu, a.speed_mbps, a.roce_mtu()),
        (Some(9000), Some(200_000), Some(4096))
    );
    assert_eq!(a.pci, Some(pci("0000:01:00.0")));
    let l = a.pcie.unwrap();
    assert_eq!((l.speed_gts, l.width), (32.0, 4));
    assert!((a.pcie_ceiling_gbps().unwrap() - 126.03).abs() < 0.01);
    assert!(a.pcie_caps_link());
    assert_eq!(a.siblings, [pci("0002:01:00.0")]);

    let b = topo.port("roceP2p1s0f0", 1).unwrap();
    assert_eq!(b.gid.as_ref().map(|g| g.index), Some(3));
    assert_eq!(b.addresses[0].to_string(), "10.10.2.11/24");
    assert_eq!(b.siblings, [pci("0000:01:00.0")]);

    // Port 2 of the QSFP cage: both functions down, no address, no GID, no speed.
    for (dev, sib) in [
        ("rocep1s0f1", "0002:01:00.1"),
        ("roceP2p1s0f1", "0000:01:00.1"),
    ] {
        let p = topo.port(dev, 1).unwrap();
        assert!(!p.up && !p.link_up, "{dev}");
        assert!(
            p.addresses.is_empty() && p.gid.is_none() && p.speed_mbps.is_none(),
            "{dev}"
        );
        assert_eq!(p.gid_miss, Some(GidMiss::NoAddress));
        assert_eq!(p.siblings, [pci(sib)], "{dev}");
    }

    // ibdev2netdev lines (carrier decides Up/Down), then one table per port.
    let out = text(&topo);
    let head: Vec<_> = out.lines().take(4).collect();
    assert_eq!(
        head,
        [
            "roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Up)",
            "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Down)",
            "rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)",
            "rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)",
        ]
    );
    assert!(
        out.contains("  GID index   3 (RoCE v2 10.10.1.11)"),
        "{out}"
    );
    assert!(
        out.contains("  PCIe link   Gen5 32.0 GT/s x4, ceiling 126.0 Gb/s per direction"),
        "{out}"
    );
    assert!(
        out.contains("  siblings    0002:01:00.0 (same physical port, another PCIe link)"),
        "{out}"
    );

    // The PCIe warning on each up half names the sibling and the combined ceiling.
    let d = report::diagnostics(&topo, a);
    let w: Vec<_> = d
        .iter()
        .filter(|d| d.severity == Severity::Warning)
        .collect();
    assert_eq!(w.len(), 1, "{d:?}");
    for s in [
        "rocep1s0f0 port 1",
        "126.0 Gb/s",
        "200 Gb/s",
        "0002:01:00.0",
        "252.1 Gb/s together",
    ] {
        assert!(w[0].message.contains(s), "{s} not in {}", w[0].message);
    }
    // Down ports: no speed, so no PCIe warning, and no address warning.
    assert!(report::diagnostics(&topo, topo.port("rocep1s0f1", 1).unwrap()).is_empty());
    // The chosen GIDs were logged.
    assert!(
        logs.contains("GID 3 (RoCE v2) selected for 10.10.1.11") && logs.contains("rocep1s0f0"),
        "{logs}"
    );
    assert!(logs.contains("selected for 10.10.2.11"), "{logs}");
}

#[test]
fn json_report_has_exactly_the_documented_keys() {
    let (t, ipj) = dgx_spark_one_cable();
    let topo = Topology::discover(&opts(&t.sys(), &ipj)).unwrap();
    let mut out = Vec::new();
    report::run_report(&opts(&t.sys(), &ipj), true, &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v, report::to_json(&topo));
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 4);
    let keys: BTreeSet<&str> = [
        "name",
        "port",
        "netdev",
        "state",
        "addresses",
        "gid_index",
        "mtu",
        "speed_mbps",
        "pci",
        "pcie",
        "siblings",
    ]
    .into();
    for o in list {
        assert_eq!(
            o.as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect::<BTreeSet<_>>(),
            keys
        );
    }
    let a = list.iter().find(|o| o["name"] == "rocep1s0f0").unwrap();
    assert_eq!(
        *a,
        serde_json::json!({
            "name": "rocep1s0f0", "port": 1, "netdev": "enp1s0f0np0", "state": "up",
            "addresses": ["10.10.1.11/24", "fe80::4ebb:47ff:fea1:b200/64"], "gid_index": 3,
            "mtu": 9000, "speed_mbps": 200000, "pci": "0000:01:00.0",
            "pcie": {"speed_gts": 32.0, "width": 4, "ceiling_gbps": 126.03},
            "siblings": ["0002:01:00.0"]
        })
    );
    let d = list.iter().find(|o| o["name"] == "roceP2p1s0f1").unwrap();
    assert_eq!(d["state"], "down");
    assert_eq!(d["gid_index"], serde_json::Value::Null);
    assert_eq!(d["speed_mbps"], serde_json::Value::Null);
    assert_eq!(d["addresses"], serde_json::json!([]));
}

#[test]
fn triangle_node_two_subnets_no_siblings() {
    let (t, ipj) = triangle_node();
    let topo = Topology::discover(&opts(&t.sys(), &ipj)).unwrap();
    assert_eq!(topo.ports.len(), 2);
    let a = topo.port("mlx5_0", 1).unwrap();
    let b = topo.port("mlx5_1", 1).unwrap();
    assert_eq!(
        (a.gid.as_ref().unwrap().index, b.gid.as_ref().unwrap().index),
        (3, 3)
    );
    // Two functions of one adapter on one PCIe link drive two physical ports: not siblings.
    assert!(a.siblings.is_empty() && b.siblings.is_empty());
    assert_eq!(a.sys_image_guid, b.sys_image_guid);
    // Gen4 x16 (252 Gb/s) does not cap a 100 Gb/s port.
    assert!(!a.pcie_caps_link());
    assert!((a.pcie_ceiling_gbps().unwrap() - 252.06).abs() < 0.01);
    // Peer routing by subnet.
    assert_eq!(
        a.route_to(ip("192.168.100.2")).map(|x| x.ip),
        Some(ip("192.168.100.1"))
    );
    assert!(a.route_to(ip("192.168.102.3")).is_none());
    assert_eq!(
        b.route_to(ip("192.168.102.3")).map(|x| x.ip),
        Some(ip("192.168.102.1"))
    );
    // MTU 1500 gives RoCE path MTU 1024: a note, not a warning; MTU 9000: nothing.
    assert!(report::diagnostics(&topo, a).is_empty());
    let d = report::diagnostics(&topo, b);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].severity, Severity::Note);
    assert!(
        d[0].message.contains("MTU 1500")
            && d[0].message.contains("1024")
            && d[0].message.contains("enp65s0f1np1"),
        "{d:?}"
    );
    assert_eq!(b.roce_mtu(), Some(1024));
    // The management port (no RDMA device) is not listed.
    assert!(topo.by_netdev("eno1").is_none());
}

#[test]
fn container_sparse_gid_table_and_vf_pcie_from_pf() {
    let (t, ipj) = container_sparse();
    let topo = Topology::discover(&opts(&t.sys(), &ipj)).unwrap();
    assert_eq!(topo.ports.len(), 1);
    let p = &topo.ports[0];
    assert_eq!(
        (p.device.as_str(), p.netdev.as_deref()),
        ("mlx5_3", Some("net1"))
    );
    assert_eq!(
        p.gids.iter().map(|g| g.index).collect::<Vec<_>>(),
        [8, 9, 10, 11]
    );
    assert_eq!(p.gid.as_ref().unwrap().index, 11);
    assert_eq!(p.pci, Some(pci("0000:3b:00.2")));
    let l = p.pcie.unwrap();
    assert_eq!((l.speed_gts, l.width), (16.0, 16));
    assert!(report::diagnostics(&topo, p).is_empty());
    // Connect time: the same answer from a fresh read.
    let c = select_for_connect(&t.sys(), "mlx5_3", 1, ip("192.168.50.7"), None, None).unwrap();
    assert_eq!(c.index, 11);
}

#[test]
fn gid_moves_from_3_to_4_and_connect_time_follows() {
    let (t, ipj) = drift_node();
    let topo = Topology::discover(&opts(&t.sys(), &ipj)).unwrap();
    let before = topo.port("mlx5_0", 1).unwrap().gid.clone().unwrap();
    assert_eq!(before.index, 3);

    drift_gid_3_to_4(&t);
    let (c, logs) = with_logs(|| {
        select_for_connect(
            &t.sys(),
            "mlx5_0",
            1,
            ip("10.10.1.11"),
            Some(before.index),
            None,
        )
        .unwrap()
    });
    assert_eq!(
        (c.index, c.pinned, c.addr),
        (4, false, Some(ip("10.10.1.11")))
    );
    assert!(
        logs.contains("WARN") && logs.contains("moved from 3 to 4"),
        "{logs}"
    );
    assert!(
        logs.contains("GID 4 (RoCE v2) selected for 10.10.1.11"),
        "{logs}"
    );
    // A fresh discovery agrees.
    let topo = Topology::discover(&opts(&t.sys(), &ipj)).unwrap();
    assert_eq!(topo.ports[0].gid.as_ref().unwrap().index, 4);

    // Pinned by RDMESH_GID_INDEX=3: used as asked, with a warning that names the right index.
    let pinned = DiscoverOptions {
        gid_index: Some(3),
        ..opts(&t.sys(), &ipj)
    };
    let topo = Topology::discover(&pinned).unwrap();
    let p = &topo.ports[0];
    let g = p.gid.as_ref().unwrap();
    assert_eq!((g.index, g.pinned, g.addr), (3, true, None));
    let d = report::diagnostics(&topo, p);
    assert_eq!(d.len(), 1, "{d:?}");
    for s in [
        "RDMESH_GID_INDEX=3",
        "IB/RoCE v1",
        "10.10.1.11",
        "that is GID 4",
    ] {
        assert!(d[0].message.contains(s), "{s} not in {}", d[0].message);
    }
    let c = select_for_connect(&t.sys(), "mlx5_0", 1, ip("10.10.1.11"), None, Some(3)).unwrap();
    assert_eq!((c.index, c.pinned, c.addr), (3, true, None));

    // A pinned empty entry and an unknown address are errors naming device, port and what to do.
    let e = select_for_connect(&t.sys(), "mlx5_0", 1, ip("10.10.1.11"), None, Some(7)).unwrap_err();
    assert!(matches!(e, TopoError::PinnedGidEmpty { index: 7, .. }));
    let m = e.to_string();
    assert!(
        m.contains("mlx5_0 port 1") && m.contains("unset RDMESH_GID_INDEX"),
        "{m}"
    );
    let e = select_for_connect(&t.sys(), "mlx5_0", 1, ip("10.10.9.9"), None, None)
        .unwrap_err()
        .to_string();
    for s in [
        "mlx5_0 port 1",
        "10.10.9.9",
        "ports/1/gids",
        "4 RoCE v2 10.10.1.11 (ens1f0np0)",
    ] {
        assert!(e.contains(s), "{s} not in {e}");
    }
    let e = select_for_connect(&t.sys(), "mlx5_9", 2, ip("10.10.1.11"), None, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("mlx5_9 port 2: not found"), "{e}");
}

#[test]
fn errors_name_the_path_and_what_to_check() {
    let (t, ipj) = drift_node();
    t.attr("class/infiniband/mlx5_0/ports/1/gids/7", "fe80::zz");
    let e = Topology::discover(&opts(&t.sys(), &ipj))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("class/infiniband/mlx5_0/ports/1/gids/7")
            && e.contains("GID")
            && e.contains("fe80::zz"),
        "{e}"
    );

    let (t, ipj) = drift_node();
    t.attr("class/infiniband/mlx5_0/ports/1/state", "ACTIVE");
    let e = Topology::discover(&opts(&t.sys(), &ipj))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ports/1/state") && e.contains("4: ACTIVE"),
        "{e}"
    );

    let e = Topology::discover(&opts(&t.sys().join("nope"), &ipj))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("nope") && e.contains("does not exist") && e.contains("class/infiniband"),
        "{e}"
    );

    let (t, _) = drift_node();
    let e = Topology::discover(&opts(&t.sys(), &t.side("missing.json")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("missing.json") && e.contains("ip -json address show"),
        "{e}"
    );

    // Through the CLI error type.
    let e: rdmesh_host::Error = TopoError::GidIndexEnv {
        value: "x".into(),
        reason: "not a decimal number",
    }
    .into();
    assert!(e.to_string().contains("RDMESH_GID_INDEX=\"x\""));
}

#[test]
fn up_port_without_address_or_roce_v2_gid_is_warned() {
    let (t, _) = drift_node();
    // No address on the netdev.
    let ipj = t.ip_json("none.json", &[iface("ens1f0np0", true, 9000, &[])]);
    let topo = Topology::discover(&opts(&t.sys(), &ipj)).unwrap();
    let d = report::diagnostics(&topo, &topo.ports[0]);
    assert!(
        d.iter().any(|d| d.severity == Severity::Warning
            && d.message.contains("ens1f0np0 has no IP address")),
        "{d:?}"
    );
    // An address with no RoCE v2 GID (e.g. it lives on a bond above the port).
    let ipj = t.ip_json(
        "other.json",
        &[iface("ens1f0np0", true, 9000, &["10.10.7.7/24"])],
    );
    let topo = Topology::discover(&opts(&t.sys(), &ipj)).unwrap();
    let d = report::diagnostics(&topo, &topo.ports[0]);
    assert!(
        d.iter()
            .any(|d| d.message.contains("no RoCE v2 GID equals 10.10.7.7")
                && d.message.contains("3 RoCE v2 10.10.1.11")),
        "{d:?}"
    );
}
