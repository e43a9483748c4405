//! DGX Spark pair (root; CI runs as root): two network namespaces joined by two links on two
//! subnets, as the two halves of one Spark QSFP port show up (10.10.1.0/24 and 10.10.2.0/24).
//! The NICs' ceilings are configured 30 and 10 Gb/s (`RDMESH_RAIL_GBPS`). A large transfer
//! uses both rails and the bytes split within 10 % of 3:1; then the second link is taken down
//! in the middle of a transfer, which finishes byte-exact on the first, and later transfers use
//! only the first.

mod netns_common;

use std::time::Duration;

use netns_common::{child_main, is_child, nic_counter, route_of, Endpoint};
use rdmesh_tests::NetnsFabric;

const T: Duration = Duration::from_secs(60);
const MIB: u64 = 1 << 20;

#[test]
fn netns_spark_pair() {
    spark_pair("netns_spark_pair", "spark", &[]);
}

/// The same with every node's NICs on the mlx5 device model (`RDMESH_PROVIDER=model`: the vfio
/// provider's driver, the model's port on a UDP socket in the namespace).
#[test]
fn netns_spark_pair_model() {
    spark_pair(
        "netns_spark_pair_model",
        "sparkm",
        &[("RDMESH_PROVIDER", "model")],
    );
}

fn spark_pair(test: &str, fabric: &str, extra: &[(&'static str, &'static str)]) {
    if is_child() {
        child_main();
        return;
    }
    if !NetnsFabric::available() {
        return;
    }
    let f = NetnsFabric::new(fabric, 2);
    f.link(0, "sa0", "10.10.1.11/24", 1, "sb0", "10.10.1.12/24", 9000);
    f.link(0, "sa1", "10.10.2.11/24", 1, "sb1", "10.10.2.12/24", 9000);
    let mut env = vec![
        ("RDMESH_RAIL_GBPS", "sa0=30,sb0=30,sa1=10,sb1=10"),
        ("RDMESH_MESH_TIMEOUT_MS", "30000"),
    ];
    env.extend_from_slice(extra);
    let mut a = Endpoint::spawn(&f, 0, test, "a", &env);
    let mut b = Endpoint::spawn(&f, 1, test, "b", &env);
    let h = b.listen("l");
    a.cmd(&format!("connect c {h}"));
    b.cmd("accept c l");
    let route = route_of(&a.expect("@@CONNECTED c ", T));
    let links = route["links"].as_array().unwrap();
    assert_eq!(links.len(), 2, "both halves are rails: {route}");
    assert_eq!(links[0]["netdev"], "sa0", "the faster rail first: {route}");
    assert_eq!(links[1]["netdev"], "sa1", "{route}");
    b.expect("@@ACCEPTED c ", T);

    // 1. 24 MiB in 1 MiB messages: striped 3:1.
    a.cmd(&format!("send c 24 {MIB} 1"));
    b.cmd(&format!("recv c 24 {MIB} 1"));
    a.expect("@@SENT c ", T);
    b.expect("@@RECEIVED c ", T);
    let c1 = a.counters();
    let r0 = nic_counter(&c1, "sa0", "tx_data_bytes") as f64;
    let r1 = nic_counter(&c1, "sa1", "tx_data_bytes") as f64;
    assert_eq!(r0 + r1, (24 * MIB) as f64, "{c1}");
    let (s0, s1) = (r0 / (r0 + r1), r1 / (r0 + r1));
    assert!(
        (s0 / 0.75 - 1.0).abs() <= 0.10 && (s1 / 0.25 - 1.0).abs() <= 0.10,
        "rail shares {s0:.3}/{s1:.3}, configured 0.75/0.25: {c1}"
    );
    let cb = b.counters();
    assert_eq!(nic_counter(&cb, "sb0", "rx_data_bytes") as f64, r0, "{cb}");
    assert_eq!(nic_counter(&cb, "sb1", "rx_data_bytes") as f64, r1, "{cb}");

    // 2. The second link goes down in the middle of 64 MiB: the transfer completes on the
    //    first, every byte checked by the receiver.
    a.cmd(&format!("send c 64 {MIB} 1000"));
    b.cmd(&format!("recv c 64 {MIB} 1000"));
    a.expect("@@PROGRESS c", T);
    f.set_link(0, "sa1", false);
    a.expect("@@SENT c ", T);
    b.expect("@@RECEIVED c ", T);
    let c2 = a.counters();
    assert_eq!(nic_counter(&c2, "sa1", "rail_failures"), 1, "{c2}");
    assert_eq!(nic_counter(&c2, "sa0", "rail_failures"), 0, "{c2}");
    let d0 = nic_counter(&c2, "sa0", "tx_data_bytes") as f64 - r0;
    let d1 = nic_counter(&c2, "sa1", "tx_data_bytes") as f64 - r1;
    assert!(
        d1 > 0.0,
        "the second link carried part of the transfer before it went down"
    );
    assert!(
        d0 + d1 >= (64 * MIB) as f64,
        "resent chunks count twice, nothing is lost: {d0} + {d1}"
    );

    // 3. Afterwards everything goes on the first link.
    a.cmd(&format!("send c 8 {MIB} 5000"));
    b.cmd(&format!("recv c 8 {MIB} 5000"));
    a.expect("@@SENT c ", T);
    b.expect("@@RECEIVED c ", T);
    let c3 = a.counters();
    assert_eq!(
        nic_counter(&c3, "sa0", "tx_data_bytes") - nic_counter(&c2, "sa0", "tx_data_bytes"),
        8 * MIB,
        "{c3}"
    );
    assert_eq!(
        nic_counter(&c3, "sa1", "tx_data_bytes"),
        nic_counter(&c2, "sa1", "tx_data_bytes"),
        "{c3}"
    );
}
