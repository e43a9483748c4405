//! A link taken down mid-transfer (root; CI runs as root): two network namespaces, one link
//! (10.77.0.0/24), a long transfer from a to b; once it is under way, `ip link set la down`
//! inside a's namespace. Both ends surface an error that names the link (netdev and
//! addresses) instead of hanging: the sender through its QP's retries (here 4 × 67 ms,
//! `RDMESH_IB_TIMEOUT=14`, `RDMESH_IB_RETRY_CNT=3`), the receiver through its keepalive.

mod netns_common;

use std::time::Duration;

use netns_common::{child_main, is_child, Endpoint};
use rdmesh_tests::NetnsFabric;

const T: Duration = Duration::from_secs(30);

#[test]
fn netns_link_down() {
    link_down("netns_link_down", "linkdown", &[]);
}

/// The same with every node's NICs on the mlx5 device model (`RDMESH_PROVIDER=model`: the vfio
/// provider's driver, the model's port on a UDP socket in the namespace).
#[test]
fn netns_link_down_model() {
    link_down(
        "netns_link_down_model",
        "linkdownm",
        &[("RDMESH_PROVIDER", "model")],
    );
}

fn link_down(test: &str, fabric: &str, extra: &[(&'static str, &'static str)]) {
    if is_child() {
        child_main();
        return;
    }
    if !NetnsFabric::available() {
        return;
    }
    let f = NetnsFabric::new(fabric, 2);
    f.link(0, "la", "10.77.0.1/24", 1, "lb", "10.77.0.2/24", 9000);
    let mut env = vec![
        ("RDMESH_IB_TIMEOUT", "14"),
        ("RDMESH_IB_RETRY_CNT", "3"),
        ("RDMESH_MESH_TIMEOUT_MS", "20000"),
    ];
    env.extend_from_slice(extra);
    let mut a = Endpoint::spawn(&f, 0, test, "a", &env);
    let mut b = Endpoint::spawn(&f, 1, test, "b", &env);
    let h = b.listen("l");
    a.cmd(&format!("connect c {h}"));
    b.cmd("accept c l");
    a.expect("@@CONNECTED c ", T);
    b.expect("@@ACCEPTED c ", T);
    // Far more than fits in the time the test gives it: the link goes down in the middle.
    a.cmd("send c 100000 262144 1");
    b.cmd("recv c 100000 262144 1");
    a.expect("@@PROGRESS c", T);
    f.set_link(0, "la", false);
    let e = a.expect("@@ERROR c ", T);
    println!("sender: {e}");
    assert!(
        e.contains("link la 10.77.0.1 -> lb 10.77.0.2") && e.contains("IBV_WC_RETRY_EXC_ERR"),
        "the sender's error names the link: {e}"
    );
    let e = b.expect("@@ERROR c ", T);
    println!("receiver: {e}");
    assert!(
        e.contains("lb 10.77.0.2") && e.contains("10.77.0.1"),
        "the receiver's error names the link: {e}"
    );
    let c = a.counters();
    let la = c
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["netdev"] == "la")
        .unwrap();
    assert_eq!(la["counters"]["rail_failures"], 1, "{c}");
}
