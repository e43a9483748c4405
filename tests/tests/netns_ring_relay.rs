//! Ring of four (root; CI runs as root): four network namespaces, each node linked only to its
//! two neighbours (n0–n1 192.168.110.0/24, n1–n2 .111, n2–n3 .112, n3–n0 .113), as four DGX
//! Sparks with two ports each must be cabled. Neighbours connect first (as a ring collective
//! does); then the two non-adjacent pairs connect in both directions, through a relay found
//! by shortest path over the topology the nodes exchanged. Every byte is checked at the
//! receivers, and the relays' counters show they forwarded exactly the non-adjacent traffic.

mod netns_common;

use std::time::Duration;

use netns_common::{child_main, is_child, route_of, Endpoint};
use rdmesh_tests::NetnsFabric;

const T: Duration = Duration::from_secs(60);

#[test]
fn netns_ring_relay() {
    ring_relay("netns_ring_relay", "ring", &[]);
}

/// The same with every node's NICs on the mlx5 device model (`RDMESH_PROVIDER=model`: the vfio
/// provider's driver, the model's port on a UDP socket in the namespace).
#[test]
fn netns_ring_relay_model() {
    ring_relay(
        "netns_ring_relay_model",
        "ringm",
        &[("RDMESH_PROVIDER", "model")],
    );
}

fn ring_relay(test: &str, fabric: &str, extra: &[(&'static str, &'static str)]) {
    if is_child() {
        child_main();
        return;
    }
    if !NetnsFabric::available() {
        return;
    }
    let f = NetnsFabric::new(fabric, 4);
    for i in 0..4 {
        let j = (i + 1) % 4;
        let net = 110 + i;
        f.link(
            i,
            &format!("r{i}n"),
            &format!("192.168.{net}.{}/24", i + 1),
            j,
            &format!("r{j}p"),
            &format!("192.168.{net}.{}/24", j + 1),
            9000,
        );
    }
    let mut env = vec![("RDMESH_MESH_TIMEOUT_MS", "30000")];
    env.extend_from_slice(extra);
    let mut ep: Vec<Endpoint> = (0..4)
        .map(|i| Endpoint::spawn(&f, i, test, &format!("n{i}"), &env))
        .collect();
    // handle[x][y]: x's listener for connections from y.
    let handle: Vec<Vec<String>> = (0..4)
        .map(|x| {
            (0..4)
                .map(|y| {
                    if x == y {
                        String::new()
                    } else {
                        ep[x].listen(&format!("from{y}"))
                    }
                })
                .collect()
        })
        .collect();
    let connect = |ep: &mut Vec<Endpoint>, x: usize, y: usize| -> serde_json::Value {
        let h = handle[y][x].clone();
        ep[x].cmd(&format!("connect to{y} {h}"));
        ep[y].cmd(&format!("accept from{x} from{x}"));
        let route = route_of(&ep[x].expect(&format!("@@CONNECTED to{y} "), T));
        ep[y].expect(&format!("@@ACCEPTED from{x} "), T);
        route
    };
    for x in 0..4 {
        for y in [(x + 1) % 4, (x + 3) % 4] {
            let r = connect(&mut ep, x, y);
            assert!(
                r["via"].as_array().unwrap().is_empty(),
                "neighbours are direct: {r}"
            );
        }
    }
    let far = [(0, 2), (2, 0), (1, 3), (3, 1)];
    for &(x, y) in &far {
        let r = connect(&mut ep, x, y);
        let via = r["via"].as_array().unwrap();
        assert_eq!(via.len(), 1, "one relay between {x} and {y}: {r}");
        let relay = via[0].as_str().unwrap();
        assert!(
            relay == ep[(x + 1) % 4].node_id || relay == ep[(x + 3) % 4].node_id,
            "the relay is a neighbour of both: {r}"
        );
    }
    // Every directed pair sends; distinct sizes, every byte checked by the receiver.
    let mut far_bytes = 0;
    let mut pairs = Vec::new();
    for x in 0..4 {
        for y in 0..4 {
            if x == y {
                continue;
            }
            let p = (x * 4 + y) as u64;
            let (count, size) = (2 + p % 3, 70_001 + 33_331 * p);
            if far.contains(&(x, y)) {
                far_bytes += count * size;
            }
            ep[x].cmd(&format!("send to{y} {count} {size} {}", 1000 * p));
            ep[y].cmd(&format!("recv from{x} {count} {size} {}", 1000 * p));
            pairs.push((x, y, count * size));
        }
    }
    for (x, y, bytes) in pairs {
        let l = ep[x].expect(&format!("@@SENT to{y} "), T);
        assert!(l.ends_with(&format!(" {bytes}")), "{l}");
        let l = ep[y].expect(&format!("@@RECEIVED from{x} "), T);
        assert!(l.ends_with(&format!(" {bytes}")), "{l}");
    }
    let mut relayed = 0;
    for e in ep.iter_mut() {
        let c = e.counters();
        for nic in c.as_array().unwrap() {
            relayed += nic["counters"]["relayed_bytes"].as_u64().unwrap();
        }
    }
    assert_eq!(
        relayed, far_bytes,
        "relays forwarded exactly the non-adjacent data"
    );
}
