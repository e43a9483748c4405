//! Constants of the topology code checked against the Linux headers installed on the machine
//! (Debian `linux-headers-amd64`, `linux-libc-dev`): the RoCE header bytes `iboe_get_mtu()`
//! subtracts, `IB_PORT_ACTIVE`, and `ARPHRD_LOOPBACK`.

use std::path::PathBuf;

use rdmesh_host::topo::{iboe_mtu, netdev::ARPHRD_LOOPBACK, PortState, IBOE_MTU_OVERHEAD};

fn kernel_header(rel: &str) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/src")
        .expect("/usr/src: install linux-headers-amd64")
        .filter_map(|e| e.ok())
        .map(|e| e.path().join(rel))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found
        .pop()
        .unwrap_or_else(|| panic!("no /usr/src/linux-headers-*/{rel}: install linux-headers-amd64"))
}

/// The value of `NAME = value` (enum) or `#define NAME value` in a header.
fn constant(path: &PathBuf, name: &str) -> u32 {
    let text = std::fs::read_to_string(path).unwrap();
    for line in text.lines() {
        let l = line.trim().trim_start_matches("#define").trim();
        if let Some(rest) = l.strip_prefix(name) {
            let rest = rest.trim_start();
            if !(rest.starts_with('=') || rest.starts_with(|c: char| c.is_ascii_digit())) {
                continue;
            }
            let v: String = rest
                .trim_start_matches('=')
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            return v.parse().unwrap();
        }
    }
    panic!("{name} not found in {}", path.display())
}

#[test]
fn iboe_mtu_overhead_is_the_sum_of_ib_pack_h_sizes() {
    let h = kernel_header("include/rdma/ib_pack.h");
    let sum: u32 = [
        "IB_GRH_BYTES",
        "IB_UDP_BYTES",
        "IB_BTH_BYTES",
        "IB_EXT_XRC_BYTES",
        "IB_EXT_ATOMICETH_BYTES",
        "IB_ICRC_BYTES",
    ]
    .iter()
    .map(|n| constant(&h, n))
    .sum();
    assert_eq!(sum, IBOE_MTU_OVERHEAD);
    // And the rule of ib_addr.h `iboe_get_mtu` uses those names.
    let a = std::fs::read_to_string(kernel_header("include/rdma/ib_addr.h")).unwrap();
    assert!(a.contains("iboe_get_mtu") && a.contains("IB_EXT_ATOMICETH_BYTES"));
    assert_eq!(iboe_mtu(1500), Some(1024));
    assert_eq!(iboe_mtu(sum + 4096), Some(4096));
    assert_eq!(iboe_mtu(sum + 4095), Some(2048));
}

#[test]
fn port_state_and_arp_type_numbers() {
    assert_eq!(
        constant(&kernel_header("include/rdma/ib_verbs.h"), "IB_PORT_ACTIVE"),
        u32::from(PortState::ACTIVE)
    );
    assert_eq!(
        constant(
            &PathBuf::from("/usr/include/linux/if_arp.h"),
            "ARPHRD_LOOPBACK"
        ),
        ARPHRD_LOOPBACK
    );
}
