//! `rdmesh topo` through the binary, on the DGX Spark fixture: the JSON equals the library's
//! report, the text starts with the ibdev2netdev lines, and a bad `RDMESH_GID_INDEX` is an error
//! exit naming the variable.

mod topo_fixture;

use std::process::Command;

use rdmesh_host::topo::{report, AddressSource, DiscoverOptions, Topology};

fn rdmesh() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rdmesh"));
    c.env_remove("RDMESH_GID_INDEX");
    c
}

#[test]
fn rdmesh_topo_json_and_text() {
    let (t, ipj) = topo_fixture::dgx_spark_one_cable();
    let out = rdmesh()
        .args(["topo", "--json", "--sysfs-root"])
        .arg(t.sys())
        .arg("--ip-json")
        .arg(&ipj)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let topo = Topology::discover(&DiscoverOptions {
        sysfs_root: t.sys(),
        addresses: AddressSource::IpJsonFile(ipj.clone()),
        gid_index: None,
    })
    .unwrap();
    assert_eq!(v, report::to_json(&topo));

    let out = rdmesh()
        .arg("topo")
        .arg("--sysfs-root")
        .arg(t.sys())
        .arg("--ip-json")
        .arg(&ipj)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.lines().take(4).collect::<Vec<_>>(),
        report::ibdev2netdev_lines(&topo)
    );
    assert!(
        text.contains("warning: rocep1s0f0 port 1: PCIe 32.0 GT/s x4 caps it at 126.0 Gb/s"),
        "{text}"
    );

    // RDMESH_GID_INDEX pins; a bad value is an error exit that names it.
    let out = rdmesh()
        .args(["topo", "--json", "--sysfs-root"])
        .arg(t.sys())
        .arg("--ip-json")
        .arg(&ipj)
        .env("RDMESH_GID_INDEX", "1")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.as_array().unwrap().iter().all(|p| p["gid_index"] == 1));
    let out = rdmesh()
        .args(["topo", "--sysfs-root"])
        .arg(t.sys())
        .env("RDMESH_GID_INDEX", "three")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("RDMESH_GID_INDEX=\"three\""), "{err}");
    let out = rdmesh()
        .args(["topo", "--sysfs-root", "/nonexistent-sysfs"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent-sysfs: does not exist"));
}
