//! Soft topology discovery inside a network namespace (root; CI runs as root): real veth
//! interfaces, the kernel's own sysfs and netlink, no fixture. The test re-runs itself inside
//! the namespace with `ip netns exec` (which also mounts the namespace's /sys) and checks the
//! JSON and ibdev2netdev lines it prints.

use std::process::Command;

const CHILD_ENV: &str = "RDMESH_TOPO_NETNS_CHILD";

struct Netns(String);

impl Netns {
    fn exec(&self, args: &[&str]) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(args)
            .output()
            .expect("running ip (install iproute2)");
        assert!(
            out.status.success(),
            "ip netns exec {} {args:?}: {}",
            self.0,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn soft_topology_in_a_network_namespace() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // Inside the namespace: print what `rdmesh topo` and `rdmesh topo --json` print.
        let mut text = Vec::new();
        let mut json = Vec::new();
        let opts = rdmesh_host::topo::DiscoverOptions::default();
        rdmesh_host::topo::report::run_report(&opts, false, &mut text).unwrap();
        rdmesh_host::topo::report::run_report(&opts, true, &mut json).unwrap();
        println!(
            "@@TEXT\n{}@@JSON\n{}@@END",
            String::from_utf8(text).unwrap(),
            String::from_utf8(json).unwrap()
        );
        return;
    }
    let name = format!("rdmesh-topo-{}", std::process::id());
    let st = Command::new("ip")
        .args(["netns", "add", &name])
        .output()
        .expect("running ip (install iproute2)");
    assert!(
        st.status.success(),
        "ip netns add {name} (this test needs root): {}",
        String::from_utf8_lossy(&st.stderr)
    );
    let ns = Netns(name);
    // va/vb: both up, va has 192.168.77.1/24 and MTU 9000; vb has only its IPv6 link-local.
    // vc/vd: vd stays down, so vc (192.168.78.1/24) has no carrier.
    ns.exec(&[
        "ip", "link", "add", "va", "type", "veth", "peer", "name", "vb",
    ]);
    ns.exec(&[
        "ip", "link", "add", "vc", "type", "veth", "peer", "name", "vd",
    ]);
    ns.exec(&["ip", "link", "set", "va", "mtu", "9000"]);
    ns.exec(&["ip", "addr", "add", "192.168.77.1/24", "dev", "va"]);
    ns.exec(&["ip", "addr", "add", "192.168.78.1/24", "dev", "vc"]);
    for d in ["lo", "va", "vb", "vc"] {
        ns.exec(&["ip", "link", "set", d, "up"]);
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0])
        .arg(&exe)
        .args([
            "--exact",
            "soft_topology_in_a_network_namespace",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout
        .split("@@TEXT\n")
        .nth(1)
        .and_then(|s| s.split("@@JSON\n").next())
        .expect(&stdout);
    let json = stdout
        .split("@@JSON\n")
        .nth(1)
        .and_then(|s| s.split("@@END").next())
        .expect(&stdout);

    let lines: Vec<_> = text.lines().filter(|l| l.contains(" ==> ")).collect();
    assert_eq!(
        lines,
        ["soft_va port 1 ==> va (Up)", "soft_vc port 1 ==> vc (Down)"],
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 2, "{json}");
    let (va, vc) = (&list[0], &list[1]);
    assert_eq!(
        (
            va["name"].as_str(),
            va["state"].as_str(),
            va["mtu"].as_u64()
        ),
        (Some("soft_va"), Some("up"), Some(9000))
    );
    assert!(
        va["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "192.168.77.1/24"),
        "{json}"
    );
    assert_eq!(
        (
            va["pci"].is_null(),
            va["pcie"].is_null(),
            va["gid_index"].is_null()
        ),
        (true, true, true)
    );
    assert_eq!(
        (vc["name"].as_str(), vc["state"].as_str()),
        (Some("soft_vc"), Some("down"))
    );
    assert_eq!(vc["addresses"], serde_json::json!(["192.168.78.1/24"]));
}
