//! `rdmesh bench doorbell --provider model`: the doorbell policies on the device model in
//! virtual time (docs/doorbell.md).
//!
//! - `--json`: MMIO writes per WQE are exactly 1/N for a batch of N (and 1 for a doorbell or
//!   a BlueFlame copy per WQE), and so are CQEs per WQE.
//! - The WQE/s the model simulates over batch 1..64 agrees within 10 % with the
//!   back-of-the-envelope prediction from the same cited parameters (`PcieParams::predict`,
//!   written out in docs/doorbell.md), for every message size and policy that has one.
//! - `--plot FILE.svg` writes an SVG that parses as XML, with a curve per policy.
//! - `--provider vfio:BDF` fails with a message naming the BDF and what to check on a
//!   machine without that function.

use std::process::Command;
use std::time::Duration;

use rdmesh_tests::{assert_ok, rdmesh_bin, run_bounded, scratch};
use serde_json::Value;

fn bench(args: &[&str]) -> std::process::Output {
    let mut c = Command::new(rdmesh_bin());
    c.args(["bench", "doorbell"]).args(args);
    run_bounded(c, Duration::from_secs(120))
}

fn points(v: &Value) -> &Vec<Value> {
    v["points"].as_array().expect("points")
}

#[test]
fn json_mmio_writes_per_wqe_are_one_over_n() {
    let out = assert_ok(
        &bench(&[
            "--provider",
            "model",
            "--json",
            "--sizes",
            "64,4K",
            "--batches",
            "1,2,4,8,16,32,64",
        ]),
        "rdmesh bench doorbell --json",
    );
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["time"], "virtual");
    let mut batch_points = 0;
    for p in points(&v) {
        let wqes = p["wqes"].as_u64().unwrap();
        let n = p["batch"].as_u64().unwrap();
        match p["policy"].as_str().unwrap() {
            "batch" => {
                batch_points += 1;
                assert_eq!(p["mmio_writes"].as_u64().unwrap() * n, wqes, "{p}");
                assert_eq!(
                    p["mmio_writes_per_wqe"].as_f64().unwrap(),
                    1.0 / n as f64,
                    "{p}"
                );
                assert_eq!(p["doorbells_per_wqe"].as_f64().unwrap(), 1.0 / n as f64);
                assert_eq!(p["cqes_per_wqe"].as_f64().unwrap(), 1.0 / n as f64);
                assert_eq!(p["blueflame_per_wqe"].as_f64().unwrap(), 0.0);
            }
            "doorbell" => {
                assert_eq!(p["mmio_writes_per_wqe"].as_f64().unwrap(), 1.0);
                assert_eq!(p["doorbells_per_wqe"].as_f64().unwrap(), 1.0);
            }
            "blueflame" => {
                assert_eq!(p["mmio_writes_per_wqe"].as_f64().unwrap(), 1.0);
                // A 64-byte WRITE fits one BlueFlame burst; the NIC reads no WQE.
                if p["size"] == 64 {
                    assert_eq!(p["blueflame_per_wqe"].as_f64().unwrap(), 1.0);
                    assert_eq!(p["wqe_reads_per_wqe"].as_f64().unwrap(), 0.0);
                }
            }
            "adaptive" => {
                let m = p["mmio_writes_per_wqe"].as_f64().unwrap();
                assert!(m >= 1.0 / n as f64 && m <= 1.0, "{p}");
            }
            o => panic!("unknown policy {o}"),
        }
        assert!(p["wqe_per_s"].as_f64().unwrap() > 0.0);
        assert!(p["pcie_bytes_per_wqe"].as_f64().unwrap() > 0.0);
        assert!(p["latency_ns"]["p50"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(batch_points, 14);
}

#[test]
fn model_agrees_with_the_envelope_within_ten_percent() {
    let plan = rdmesh_host::cli::bench_doorbell::Plan {
        policies: vec![
            rdmesh_host::cli::bench_doorbell::Policy::Doorbell,
            rdmesh_host::cli::bench_doorbell::Policy::Blueflame,
            rdmesh_host::cli::bench_doorbell::Policy::Batch,
        ],
        sizes: vec![64, 1024, 4096],
        batches: vec![1, 2, 4, 8, 16, 32, 64],
        wqes: 4096,
    };
    let r = rdmesh_host::cli::bench_doorbell::run_model(
        &plan,
        rdmesh_vfio::model::PcieParams::default(),
    )
    .expect("model run");
    let mut checked = 0;
    let mut worst = 0.0f64;
    for p in &r.points {
        let predicted = p.predicted_wqe_per_s.expect("a prediction");
        let err = (p.wqe_per_s - predicted).abs() / predicted;
        worst = worst.max(err);
        assert!(
            err <= 0.10,
            "{:?} N={} {} B: model {:.1} M WQE/s, envelope {:.1} M WQE/s ({:?}), {:.1} % apart",
            p.policy,
            p.batch,
            p.size,
            p.wqe_per_s / 1e6,
            predicted / 1e6,
            p.bottleneck,
            err * 100.0
        );
        checked += 1;
    }
    assert_eq!(checked, 3 * (2 + 7));
    eprintln!("worst disagreement {:.1} %", worst * 100.0);
    // The curve's shape: batching helps small messages (CPU-bound at N=1) several-fold.
    let at = |n: u16| {
        r.points
            .iter()
            .find(|p| {
                p.size == 64
                    && p.batch == n
                    && p.policy == rdmesh_host::cli::bench_doorbell::Policy::Batch
            })
            .unwrap()
            .wqe_per_s
    };
    assert!(at(64) > 10.0 * at(1));
}

#[test]
fn plot_is_an_svg_that_parses() {
    let dir = scratch("bench-doorbell-plot");
    let svg = dir.join("doorbell.svg");
    assert_ok(
        &bench(&[
            "--sizes",
            "64",
            "--batches",
            "1,8,64",
            "-n",
            "512",
            "--plot",
            svg.to_str().unwrap(),
        ]),
        "rdmesh bench doorbell --plot",
    );
    let text = std::fs::read_to_string(&svg).expect("the SVG file");
    let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let texts: Vec<String> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text().map(|t| t.trim().to_owned()))
        .collect();
    for label in [
        "doorbell 64 B",
        "blueflame 64 B",
        "batch 64 B",
        "adaptive 64 B",
    ] {
        assert!(
            texts.iter().any(|t| t == label),
            "legend entry {label:?} missing; texts: {texts:?}"
        );
    }
    let lines = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline") || n.has_tag_name("path"))
        .count();
    assert!(lines >= 8, "two panels of four curves, found {lines} lines");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn vfio_provider_without_the_function_says_what_to_check() {
    let out = bench(&["--provider", "vfio:0000:ee:1f.7", "-n", "64"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("vfio:0000:ee:1f.7") && err.contains("rdmesh doctor"),
        "{err}"
    );
}
