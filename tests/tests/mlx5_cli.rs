//! `rdmesh mlx5 encode | decode-wqe | decode-cqe` against the C harness built on rdma-core's
//! `<infiniband/mlx5dv.h>`: the encoder's hex lines equal the WQEs the harness writes for the
//! same work requests, and the decoders' JSON equals the harness's field reads.

mod mlx5_common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use mlx5_common::{harness, hex, run_harness, GenWr, Rng};
use rdmesh_core::mlx5::QpType;
use rdmesh_tests::{assert_ok, rdmesh_bin, run_bounded, wait_bounded};

fn rdmesh(args: &[&str]) -> serde_json::Value {
    let mut cmd = Command::new(rdmesh_bin());
    cmd.args(args);
    let out = assert_ok(
        &run_bounded(cmd, Duration::from_secs(30)),
        &format!("rdmesh {args:?}"),
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn encode_matches_mlx5dv() {
    let Some(exe) = harness() else { return };
    let mut rng = Rng::new(0x656e_636f_6465);
    let (mut c_in, mut json_in) = (String::new(), String::new());
    let mut n = 0;
    while n < 1200 {
        let g = GenWr::random(&mut rng);
        if g.wr().check(QpType::Rc).is_err() {
            continue; // oversize: the encoder reports an error for it (tested below)
        }
        let idx = rng.u64() as u16;
        let qpn = rng.u32() & 0x00ff_ffff;
        c_in += &format!("ring 4 {idx} {qpn}\n");
        c_in += &g.c_post();
        json_in += &g.json(idx, qpn);
        json_in.push('\n');
        n += 1;
    }
    let theirs: Vec<String> = run_harness(&exe, &c_in)
        .into_iter()
        .filter_map(|l| {
            l.strip_prefix("W ")
                .map(|w| w.split(' ').nth(2).unwrap().to_string())
        })
        .collect();
    let mut child = Command::new(rdmesh_bin())
        .args(["mlx5", "encode"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running rdmesh mlx5 encode");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(json_in.as_bytes()));
    let out = wait_bounded(child, Duration::from_secs(60));
    writer.join().unwrap().unwrap();
    let ours = assert_ok(&out, "rdmesh mlx5 encode");
    let ours: Vec<&str> = ours.lines().collect();
    assert_eq!(ours.len(), theirs.len());
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "work request {i}");
        assert!(
            a.len() % 32 == 0
                && a.chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        );
    }

    // A few of them back through decode-wqe.
    for w in theirs.iter().step_by(97) {
        let v = rdmesh(&["mlx5", "decode-wqe", "--json", w]);
        let ds = v["ds"].as_u64().unwrap() as usize;
        assert_eq!(ds * 32, w.len());
        assert_eq!(
            v["opcode"].as_u64().unwrap(),
            u64::from_str_radix(&w[6..8], 16).unwrap()
        );
        assert_eq!(
            v["wqe_index"].as_u64().unwrap(),
            u64::from_str_radix(&w[2..6], 16).unwrap()
        );
        assert_eq!(
            v["qpn"].as_u64().unwrap(),
            u64::from_str_radix(&w[8..14], 16).unwrap()
        );
    }
}

#[test]
fn encode_rejects_with_line_numbers() {
    let mut child = Command::new(rdmesh_bin())
        .args(["mlx5", "encode"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running rdmesh mlx5 encode");
    let many: Vec<String> = (0..63)
        .map(|i| format!("{{\"addr\":{i},\"lkey\":1,\"len\":8}}"))
        .collect();
    let input = format!(
        "{{\"opcode\":\"nop\"}}\n{{\"opcode\":\"send\",\"sge\":[{}]}}\n",
        many.join(",")
    );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = wait_bounded(child, Duration::from_secs(30));
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().count(),
        1,
        "the valid first line is printed: {stdout}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2") && err.contains("64 DS"), "{err}");
}

#[test]
fn decode_cqe_matches_mlx5dv() {
    let Some(exe) = harness() else { return };
    let mut rng = Rng::new(0x0063_7165_2d63_6c69);
    let mut cqes = Vec::new();
    let mut input = String::new();
    for i in 0..40 {
        let mut b = rng.bytes(64);
        let opcode = [0u8, 2, 13, 14][i % 4];
        b[63] = (opcode << 4) | (b[63] & 0xf);
        input += &format!("cqe {}\n", hex(&b));
        cqes.push(b);
    }
    for (line, b) in run_harness(&exe, &input).iter().zip(&cqes) {
        let f: Vec<u64> = line[2..].split(' ').map(|x| x.parse().unwrap()).collect();
        let v = rdmesh(&["mlx5", "decode-cqe", "--json", &hex(b)]);
        let keys = [
            "opcode",
            "owner",
            "se",
            "format",
            "byte_cnt",
            "qpn",
            "wqe_counter",
            "imm_inval_pkey",
        ];
        for (k, theirs) in keys.iter().zip(&f) {
            let mine = match &v[k] {
                serde_json::Value::Bool(x) => *x as u64,
                x => x.as_u64().unwrap_or_else(|| panic!("{k}: {x}")),
            };
            assert_eq!(mine, *theirs, "{k} of {}", hex(b));
        }
        assert!(v["owner"].is_u64() && v["se"].is_boolean());
        if f[0] == 13 || f[0] == 14 {
            assert_eq!(v["syndrome"].as_u64().unwrap(), f[16]);
            assert_eq!(v["vendor_err_synd"].as_u64().unwrap(), f[17]);
        } else {
            assert!(v["syndrome"].is_null() && v["vendor_err_synd"].is_null());
        }
        assert_eq!(v.as_object().unwrap().len(), 10);
    }
}
