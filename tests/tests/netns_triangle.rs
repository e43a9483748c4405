//! Triangle (root; CI runs as root): three network namespaces, three veth links, each on its
//! own subnet as in the nccl-mesh-plugin docs: A–B 192.168.100.0/24, B–C 192.168.101.0/24,
//! A–C 192.168.102.0/24. Every node discovers its NICs, listens, and connects to the other
//! two; all six directed pairs exchange tagged messages at once (every byte checked), and each
//! node's per-NIC counters show exactly the bytes of the pair whose link that NIC is (so each
//! pair used its direct link). Then `rdmesh bench mesh`'s engine prints the all-pairs matrix.

mod netns_common;

use std::time::Duration;

use netns_common::{child_main, is_child, nic_counter, route_of, Endpoint};
use rdmesh_tests::NetnsFabric;

const T: Duration = Duration::from_secs(60);
const NAMES: [&str; 3] = ["a", "b", "c"];

/// The interface of node `x` toward node `y`, and its address.
fn iface(x: usize, y: usize) -> (String, String) {
    let subnet = match (x.min(y), x.max(y)) {
        (0, 1) => 100,
        (1, 2) => 101,
        _ => 102,
    };
    (
        format!("t{}{}", NAMES[x], NAMES[y]),
        format!("192.168.{subnet}.{}", x + 1),
    )
}

#[test]
fn netns_triangle() {
    triangle("netns_triangle", "tri", &[]);
}

/// The same with every node's NICs on the mlx5 device model (`RDMESH_PROVIDER=model`: the vfio
/// provider's driver, the model's port on a UDP socket in the namespace).
#[test]
fn netns_triangle_model() {
    triangle(
        "netns_triangle_model",
        "trim",
        &[("RDMESH_PROVIDER", "model")],
    );
}

fn triangle(test: &str, fabric: &str, extra: &[(&'static str, &'static str)]) {
    if is_child() {
        child_main();
        return;
    }
    if !NetnsFabric::available() {
        return;
    }
    let f = NetnsFabric::new(fabric, 3);
    for (x, y) in [(0, 1), (1, 2), (0, 2)] {
        let (ix, ax) = iface(x, y);
        let (iy, ay) = iface(y, x);
        f.link(
            x,
            &ix,
            &format!("{ax}/24"),
            y,
            &iy,
            &format!("{ay}/24"),
            9000,
        );
    }
    let mut env = vec![("RDMESH_MESH_TIMEOUT_MS", "30000")];
    env.extend_from_slice(extra);
    let mut ep: Vec<Endpoint> = (0..3)
        .map(|i| Endpoint::spawn(&f, i, test, NAMES[i], &env))
        .collect();
    // handle[x][y]: x's listener for connections from y.
    let mut handle = vec![vec![String::new(); 3]; 3];
    for x in 0..3 {
        for y in 0..3 {
            if x != y {
                handle[x][y] = ep[x].listen(&format!("from_{}", NAMES[y]));
            }
        }
    }
    for x in 0..3 {
        for y in 0..3 {
            if x != y {
                let h = handle[y][x].clone();
                ep[x].cmd(&format!("connect to_{} {h}", NAMES[y]));
                ep[y].cmd(&format!("accept from_{0} from_{0}", NAMES[x]));
            }
        }
    }
    for x in 0..3 {
        for y in 0..3 {
            if x == y {
                continue;
            }
            let line = ep[x].expect(&format!("@@CONNECTED to_{} ", NAMES[y]), T);
            let route = route_of(&line);
            let (ifx, ax) = iface(x, y);
            let (_, ay) = iface(y, x);
            assert_eq!(route["via"].as_array().unwrap().len(), 0, "{line}");
            let links = route["links"].as_array().unwrap();
            assert_eq!(links.len(), 1, "{line}");
            assert_eq!(links[0]["netdev"], ifx.as_str(), "{line}");
            assert_eq!(links[0]["local"], ax.as_str(), "{line}");
            assert_eq!(links[0]["remote"], ay.as_str(), "{line}");
            ep[y].expect(&format!("@@ACCEPTED from_{} ", NAMES[x]), T);
        }
    }
    // Pair-specific counts and sizes, so every NIC's byte count is distinct.
    let mut sent = [[0u64; 3]; 3];
    for x in 0..3 {
        for y in 0..3 {
            if x == y {
                continue;
            }
            let p = (x * 3 + y) as u64;
            let (count, size, seed) = (3 + p, 40_013 + 9_001 * p, 100 * p as u32);
            sent[x][y] = count * size;
            ep[x].cmd(&format!("send to_{} {count} {size} {seed}", NAMES[y]));
            ep[y].cmd(&format!("recv from_{} {count} {size} {seed}", NAMES[x]));
        }
    }
    for x in 0..3 {
        for y in 0..3 {
            if x == y {
                continue;
            }
            let l = ep[x].expect(&format!("@@SENT to_{} ", NAMES[y]), T);
            assert!(l.ends_with(&format!(" {}", sent[x][y])), "{l}");
            let l = ep[y].expect(&format!("@@RECEIVED from_{} ", NAMES[x]), T);
            assert!(l.ends_with(&format!(" {}", sent[x][y])), "{l}");
        }
    }
    for x in 0..3 {
        let c = ep[x].counters();
        for y in 0..3 {
            if x == y {
                continue;
            }
            let (ifx, _) = iface(x, y);
            assert_eq!(
                nic_counter(&c, &ifx, "tx_data_bytes"),
                sent[x][y],
                "node {} NIC {ifx} carried exactly its bytes to {}: {c}",
                NAMES[x],
                NAMES[y]
            );
            assert_eq!(
                nic_counter(&c, &ifx, "rx_data_bytes"),
                sent[y][x],
                "node {} NIC {ifx} carried exactly the bytes from {}: {c}",
                NAMES[x],
                NAMES[y]
            );
            assert_eq!(nic_counter(&c, &ifx, "relayed_bytes"), 0);
        }
    }
    // The all-pairs matrix: rank 0 (a) listens on its rendezvous port; b and c reach it on
    // their link to a.
    ep[0].cmd("bench 3 0 0.0.0.0:18777 262144 8");
    ep[1].cmd(&format!("bench 3 1 {}:18777 262144 8", iface(0, 1).1));
    ep[2].cmd(&format!("bench 3 2 {}:18777 262144 8", iface(0, 2).1));
    let line = ep[0].expect("@@MATRIX ", T);
    let m: serde_json::Value = serde_json::from_str(&line["@@MATRIX ".len()..]).unwrap();
    let pairs = m["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 6, "{line}");
    for p in pairs {
        assert!(p["error"].is_null(), "{p}");
        assert!(p["gbps"].as_f64().is_some_and(|g| g > 0.0), "{p}");
        assert!(
            p["route"]
                .as_str()
                .unwrap()
                .starts_with("direct over 1 rail"),
            "{p}"
        );
    }
    ep[1].expect("@@BENCHDONE", T);
    ep[2].expect("@@BENCHDONE", T);
}
