//! The pcap written by `rdmesh bench --pcap` is dissected by tshark (an independent RoCEv2
//! dissector) with no malformed frames, and tshark's BTH/RETH/AETH fields equal rdmesh's own
//! `rdmesh pcap decode --json` for every frame.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use rdmesh_tests::{assert_ok, have, need, rdmesh_bin, run_bounded, scratch};

/// RoCEv2 on 4791, and no payload heuristics or low-port services claiming our frames
/// (tshark 4.0 takes one protocol per `--disable-protocol`).
const TSHARK_DECODE: &[&str] = &[
    "-d",
    "udp.port==4791,infiniband",
    "--disable-protocol",
    "tftp",
    "--disable-protocol",
    "rpcordma",
    "--disable-protocol",
    "iser",
    "--disable-protocol",
    "nvme-rdma",
    "--disable-protocol",
    "smb_direct",
];

const FIELDS: &[&str] = &[
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
];

fn tshark_fields(pcap: &std::path::Path) -> Vec<BTreeMap<String, Option<u64>>> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-r"]).arg(pcap).args(TSHARK_DECODE).args([
        "-T",
        "fields",
        "-E",
        "separator=;",
        "-E",
        "occurrence=f",
    ]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = run_bounded(cmd, Duration::from_secs(120));
    let stdout = assert_ok(&out, "tshark");
    stdout
        .lines()
        .map(|l| {
            FIELDS
                .iter()
                .zip(l.split(';'))
                .map(|(k, v)| {
                    let v = v.trim();
                    let n = if v.is_empty() {
                        None
                    } else if let Some(h) = v.strip_prefix("0x") {
                        Some(u64::from_str_radix(h, 16).unwrap())
                    } else {
                        Some(v.parse().unwrap_or_else(|_| panic!("{k}={v}")))
                    };
                    (k.to_string(), n)
                })
                .collect()
        })
        .collect()
}

fn ours(pcap: &std::path::Path) -> Vec<serde_json::Value> {
    let mut cmd = Command::new(rdmesh_bin());
    cmd.args(["pcap", "decode", "--json"]).arg(pcap);
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert_ok(&out, "rdmesh pcap decode")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Compares every RoCE frame of `pcap`: tshark's fields against rdmesh's decode. Returns the
/// opcodes seen.
fn compare(pcap: &std::path::Path, what: &str) -> std::collections::BTreeSet<u64> {
    let theirs = tshark_fields(pcap);
    let mine = ours(pcap);
    assert_eq!(theirs.len(), mine.len(), "{what}: frame counts differ");
    let mut opcodes = std::collections::BTreeSet::new();
    for (t, m) in theirs.iter().zip(&mine) {
        let frame = m["frame"].as_u64().unwrap();
        let get = |k: &str| t[k];
        assert_eq!(get("frame.number"), Some(frame));
        if !m["roce"].as_bool().unwrap() {
            assert_eq!(
                get("infiniband.bth.opcode"),
                None,
                "{what} frame {frame}: tshark sees RoCE, rdmesh does not: {m}"
            );
            continue;
        }
        assert!(
            m["icrc_valid"].as_bool().unwrap(),
            "{what} frame {frame} has a bad ICRC: {m}"
        );
        assert_eq!(
            get("infiniband.bth.opcode"),
            m["opcode"].as_u64(),
            "{what} frame {frame} opcode"
        );
        assert_eq!(
            get("infiniband.bth.destqp"),
            m["dest_qp"].as_u64(),
            "{what} frame {frame} destqp"
        );
        assert_eq!(
            get("infiniband.bth.psn"),
            m["psn"].as_u64(),
            "{what} frame {frame} psn"
        );
        let reth = &m["reth"];
        assert_eq!(
            get("infiniband.reth.va"),
            reth["va"].as_u64(),
            "{what} frame {frame} reth.va"
        );
        assert_eq!(
            get("infiniband.reth.r_key"),
            reth["rkey"].as_u64(),
            "{what} frame {frame} reth.r_key"
        );
        assert_eq!(
            get("infiniband.reth.dmalen"),
            reth["dma_len"].as_u64(),
            "{what} frame {frame} reth.dmalen"
        );
        let aeth = &m["aeth"];
        assert_eq!(
            get("infiniband.aeth.syndrome"),
            aeth["syndrome"].as_u64(),
            "{what} frame {frame} aeth.syndrome"
        );
        assert_eq!(
            get("infiniband.aeth.msn"),
            aeth["msn"].as_u64(),
            "{what} frame {frame} aeth.msn"
        );
        opcodes.insert(m["opcode"].as_u64().unwrap());
    }
    opcodes
}

#[test]
fn tshark_agrees_on_the_connectx_fixture() {
    if !need(have("tshark", &["--version"]), "tshark") {
        return;
    }
    let pcap = rdmesh_tests::workspace_root().join("tests/fixtures/roce-rc-send.pcap");
    let mine = ours(&pcap);
    assert_eq!(mine.len(), 123);
    assert_eq!(
        mine.iter().filter(|m| m["roce"].as_bool().unwrap()).count(),
        105
    );
    let ops = compare(&pcap, "fixture");
    assert_eq!(ops, [0x00, 0x03, 0x05, 0x11].into_iter().collect());
}

#[test]
fn tshark_agrees_with_rdmesh_decode() {
    if !need(have("tshark", &["--version"]), "tshark") {
        return;
    }
    let dir = scratch("tshark");
    for mode in ["write", "send", "read"] {
        let pcap = dir.join(format!("{mode}.pcap"));
        let mut bench = Command::new(rdmesh_bin());
        // 10000-byte messages: FIRST/MIDDLE/LAST packets with a 4096-byte MTU, plus ACKs.
        // Go-back-N: IBTA packets only (selective repeat, the rdmesh default, splits WRITEs
        // into WRITE_ONLY packets and prefixes SEND payloads with its placement header).
        bench
            .args([
                "bench",
                mode,
                "--loopback",
                "-s",
                "10000",
                "-n",
                "50",
                "--verify",
                "--recovery",
                "go-back-n",
                "--pcap",
            ])
            .arg(&pcap);
        assert_ok(
            &run_bounded(bench, Duration::from_secs(120)),
            &format!("rdmesh bench {mode} --loopback --pcap"),
        );

        let mut malformed = Command::new("tshark");
        malformed
            .args(["-r"])
            .arg(&pcap)
            .args(TSHARK_DECODE)
            .args(["-Y", "_ws.malformed || _ws.expert.severity >= error"]);
        let bad = assert_ok(
            &run_bounded(malformed, Duration::from_secs(60)),
            "tshark malformed check",
        );
        assert!(
            bad.trim().is_empty(),
            "tshark finds malformed frames in {mode}:\n{bad}"
        );

        let opcodes = compare(&pcap, mode);
        assert!(ours(&pcap).len() > 100, "{mode}: too few frames captured");
        let expect: &[u64] = match mode {
            "write" => &[0x06, 0x07, 0x08, 0x11],
            "send" => &[0x00, 0x01, 0x02, 0x11],
            _ => &[0x0c, 0x0d, 0x0e, 0x0f],
        };
        for op in expect {
            assert!(
                opcodes.contains(op),
                "{mode}: opcode {op:#x} never seen (saw {opcodes:?})"
            );
        }
    }
}
