//! Unreachable peers (root; CI runs as root): three network namespaces, a–b linked
//! (10.78.0.0/24) and b–c linked (10.79.0.0/24), so a and c share no subnet. With relaying
//! off on a (`RDMESH_RELAY=0`), connecting a to c fails at once, long before the handshake
//! timeout, with an error naming c's addresses and a's NICs. Connecting a to b after b's
//! endpoint is gone times out after the handshake timeout with the addresses tried.

mod netns_common;

use std::time::Duration;

use netns_common::{child_main, is_child, Endpoint};
use rdmesh_tests::NetnsFabric;

const T: Duration = Duration::from_secs(30);

/// The milliseconds field of an `@@ERROR name ms message` line.
fn elapsed_ms(line: &str) -> u64 {
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[test]
fn netns_unreachable() {
    if is_child() {
        child_main();
        return;
    }
    if !NetnsFabric::available() {
        return;
    }
    let f = NetnsFabric::new("unreach", 3);
    f.link(0, "ua", "10.78.0.1/24", 1, "ub", "10.78.0.2/24", 1500);
    f.link(1, "ubc", "10.79.0.2/24", 2, "uc", "10.79.0.3/24", 1500);
    let mut a = Endpoint::spawn(
        &f,
        0,
        "netns_unreachable",
        "a",
        &[("RDMESH_RELAY", "0"), ("RDMESH_MESH_TIMEOUT_MS", "3000")],
    );
    let mut b = Endpoint::spawn(&f, 1, "netns_unreachable", "b", &[]);
    let mut c = Endpoint::spawn(&f, 2, "netns_unreachable", "c", &[]);
    let hc = c.listen("l");
    a.cmd(&format!("connect x {hc}"));
    let e = a.expect("@@ERROR x ", T);
    println!("{e}");
    assert!(
        e.contains("unreachable")
            && e.contains("10.79.0.3/24")
            && e.contains("ua 10.78.0.1/24")
            && e.contains("RDMESH_RELAY=0"),
        "{e}"
    );
    assert!(
        elapsed_ms(&e) < 1000,
        "no waiting for the 3 s handshake timeout: {e}"
    );

    // b goes away: the handshake times out naming the address and port it tried.
    let hb = b.listen("l");
    let port = u16::from_str_radix(&hb[32..36], 16).unwrap();
    drop(b);
    a.cmd(&format!("connect y {hb}"));
    let e = a.expect("@@ERROR y ", T);
    println!("{e}");
    assert!(
        e.contains(&format!("10.78.0.2:{port}")) && e.contains("addresses tried"),
        "{e}"
    );
    assert!(
        elapsed_ms(&e) >= 2500,
        "it waited for the handshake timeout: {e}"
    );
}
