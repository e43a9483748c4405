//! Doorbell batching and CQE signaling against the mlx5 device model: WQEs per second and
//! MMIO writes (doorbells) per WQE for doorbell batches of N = 1, 8, 32, 64 WQEs and a CQE
//! every K = 1, 16, 64 WQEs, posting RDMA WRITEs (64 bytes, one SGE) with core's `SqWriter` +
//! `Batcher` and executing its doorbell effects in rdma-core `post_send_db` order (WQEs,
//! barrier, dbrec, barrier, one 64-bit store of the last control segment to UAR + 0x800).
//! The model runs each doorbell synchronously: WQE fetch over its IOMMU, the RC engine,
//! RoCEv2 framing with ICRC, the peer's responder writing memory, the ACK, the CQEs.
//!
//! References in the same run: N = 1, K = 1 (one `ibv_post_send` per signaled WR, rdma-core's
//! default) is the baseline every ratio is taken against; "post only" is the host side alone
//! (the same posts into a staging ring, effects discarded, no device), the ceiling the device
//! model's cost sits on top of.
//!
//! Run: `cargo bench -p rdmesh-vfio --bench model_doorbell`. Criterion reports each case's
//! time per 1024 WQEs; then a table (median of 7 blocks of 16 runs each) prints WQEs/s, MMIO writes per WQE, WQEBBs fetched and
//! CQEs per WQE, and the ratio to the baseline.

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use rdmesh_core::mlx5::doorbell::BfMode;
use rdmesh_core::mlx5::{
    BatchPolicy, Batcher, Bfreg, BfregConfig, Effects, Post, QpType, SqWriter, WrOp,
};
use rdmesh_vfio::model::harness::{Endpoint, EndpointConfig, Harness};
use rdmesh_vfio::model::{ModelConfig, ModelCounters, ModelDevice, ModelLink};

/// WQEs per measured iteration.
const WQES: usize = 1024;
/// WQEs posted between CQ polls (a multiple of every N and K; half the 256-WQEBB ring).
const CHUNK: usize = 128;

struct Setup {
    a: Endpoint,
    /// Kept alive: dropping it would unmap its memory (the model's IOMMU then faults).
    _b: Endpoint,
    b_va: u64,
    b_key: u32,
    dev: ModelDevice,
    _hb: Harness,
    _ha: Harness,
    link: ModelLink,
}

fn setup() -> Setup {
    let mk = |n: u8| {
        let dev = ModelDevice::new(ModelConfig {
            mac: [2, 0, 0, 0, 0, n],
            ..ModelConfig::default()
        });
        let mut h = Harness::new(dev).expect("harness");
        h.bring_up().expect("bring-up");
        h
    };
    let (mut ha, mut hb) = (mk(1), mk(2));
    let link = ModelLink::connect(&ha.dev, &hb.dev, None).expect("link");
    let mut a = Endpoint::create(
        &mut ha,
        EndpointConfig {
            ip: [10, 0, 0, 1],
            ..Default::default()
        },
    )
    .expect("a");
    let mut b = Endpoint::create(
        &mut hb,
        EndpointConfig {
            ip: [10, 0, 0, 2],
            ..Default::default()
        },
    )
    .expect("b");
    a.connect(&mut ha, &b).expect("connect a");
    b.connect(&mut hb, &a).expect("connect b");
    Setup {
        b_va: b.va,
        b_key: b.key,
        dev: ha.dev.clone(),
        a,
        _b: b,
        _hb: hb,
        _ha: ha,
        link,
    }
}

fn policy(n: u16, k: u16) -> BatchPolicy {
    BatchPolicy {
        max_batch: n,
        signal_every: k,
        inline_threshold: 0,
        bf: BfMode::Off,
    }
}

/// Posts `WQES` RDMA WRITEs through the model with policy (n, k); returns the CQEs polled.
fn run(s: &mut Setup, bat: &mut Batcher) -> usize {
    let sge = [s.a.sge(0, 64)];
    let post = Post::new(
        WrOp::RdmaWrite {
            raddr: s.b_va,
            rkey: s.b_key,
        },
        &sge,
    );
    let posts = [post; CHUNK];
    let mut cqes = 0;
    for _ in 0..WQES / CHUNK {
        s.a.post(bat, &posts, false).expect("post");
        let c = s.a.poll().expect("poll");
        if let Some(e) = c.iter().find(|c| c.error.is_some()) {
            panic!("error CQE during the run (the measurement would be of flushes): {e:?}; counters {:?}", s.dev.counters());
        }
        cqes += c.len();
    }
    cqes
}

/// The host side alone: the same posts and effect lists into a staging ring, no device.
fn post_only(ring: &mut [u8], bat: &mut Batcher) -> usize {
    let sge = [rdmesh_core::mlx5::Sge {
        addr: 0x5555_0000_0000,
        lkey: 0x1142,
        len: 64,
    }];
    let post = Post::new(
        WrOp::RdmaWrite {
            raddr: 0x7777_0000_0000,
            rkey: 0x2242,
        },
        &sge,
    );
    let mut sq = SqWriter::new(ring, 0x11, QpType::Rc).expect("ring");
    let mut eff = Effects::new();
    let mut effects = 0;
    for _ in 0..WQES {
        let p = bat.post(&mut sq, &post, &mut eff).expect("post");
        effects += eff.len();
        // Everything is retired at once: the host-side cost only.
        let _ = sq.retire(p.wqe_index);
    }
    std::hint::black_box(effects)
}

struct Row {
    name: String,
    ns_per_wqe: f64,
    c: ModelCounters,
    /// Frames on the link per run (both directions: requests and ACKs).
    frames: u64,
}

/// Runs per timed block and blocks per case: the table reports the median block.
const RUNS_PER_BLOCK: usize = 16;
const BLOCKS: usize = 7;

fn measure(s: &mut Setup, n: u16, k: u16) -> Row {
    let mut bat = s.a.batcher(policy(n, k)).expect("batcher");
    run(s, &mut bat); // warm-up
    s.dev.reset_counters();
    let frames0 = s.link.frames();
    let mut blocks = Vec::with_capacity(BLOCKS);
    for _ in 0..BLOCKS {
        let t = Instant::now();
        for _ in 0..RUNS_PER_BLOCK {
            run(s, &mut bat);
        }
        blocks.push(t.elapsed().as_nanos() as f64 / (RUNS_PER_BLOCK * WQES) as f64);
    }
    blocks.sort_by(f64::total_cmp);
    let runs = (BLOCKS * RUNS_PER_BLOCK) as u64;
    let mut c = s.dev.counters();
    // Per run of WQES.
    for v in [
        &mut c.mmio_writes,
        &mut c.send_doorbells,
        &mut c.wqebbs_fetched,
        &mut c.cqes_written,
        &mut c.wqes_executed,
        &mut c.cq_doorbells,
        &mut c.error_cqes,
        &mut c.frames_sent,
    ] {
        *v /= runs;
    }
    assert_eq!(
        c.error_cqes,
        0,
        "N={n} K={k}: error CQEs; the run is not measuring data transfer ({:?})",
        s.dev.last_command_error()
    );
    let frames = (s.link.frames() - frames0) / runs;
    Row {
        name: format!("N={n:<2} K={k:<2}"),
        ns_per_wqe: blocks[BLOCKS / 2],
        c,
        frames,
    }
}

fn main() {
    let mut s = setup();
    let mut criterion = Criterion::default()
        .configure_from_args()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    let cases: Vec<(u16, u16)> = [1u16, 8, 32, 64]
        .iter()
        .flat_map(|&n| [1u16, 16, 64].iter().map(move |&k| (n, k)))
        .collect();
    {
        let mut g = criterion.benchmark_group("model_doorbell");
        g.throughput(Throughput::Elements(WQES as u64));
        let mut ring = vec![0u8; 256 * 64];
        let mut bat =
            Batcher::new(policy(1, 1), Bfreg::new(BfregConfig::doorbell_only(0x800))).unwrap();
        g.bench_function("post_only_N1_K1", |b| {
            b.iter(|| post_only(&mut ring, &mut bat))
        });
        for &(n, k) in &cases {
            let mut bat = s.a.batcher(policy(n, k)).unwrap();
            g.bench_with_input(
                BenchmarkId::new("model", format!("N{n}_K{k}")),
                &(n, k),
                |b, _| b.iter(|| run(&mut s, &mut bat)),
            );
        }
        g.finish();
    }

    // The table (own timing: best of 5 runs of 1024 WQEs, counters per run).
    let mut ring = vec![0u8; 256 * 64];
    let mut bat =
        Batcher::new(policy(1, 1), Bfreg::new(BfregConfig::doorbell_only(0x800))).unwrap();
    post_only(&mut ring, &mut bat);
    let t = Instant::now();
    for _ in 0..20 {
        post_only(&mut ring, &mut bat);
    }
    let post_ns = t.elapsed().as_nanos() as f64 / (20 * WQES) as f64;
    let rows: Vec<Row> = cases.iter().map(|&(n, k)| measure(&mut s, n, k)).collect();
    let base = rows[0].ns_per_wqe;
    let w = WQES as f64;
    println!();
    println!("model_doorbell: {WQES} RDMA WRITEs of 64 B per run, RC over two linked model devices (median of 7 blocks of 16 runs)");
    println!("| policy | WQEs/s | ns/WQE | MMIO writes/WQE | doorbells/WQE | WQEBBs fetched/WQE | CQEs/WQE | link frames/WQE | speed vs N=1 K=1 |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| post only (host side, no device) | {:.0} | {:.1} | 0 | 0 | 0 | 0 | 0 | {:.1}x |",
        1e9 / post_ns,
        post_ns,
        base / post_ns
    );
    for r in &rows {
        println!(
            "| {} | {:.0} | {:.0} | {:.4} | {:.4} | {:.2} | {:.4} | {:.2} | {:.2}x |",
            r.name,
            1e9 / r.ns_per_wqe,
            r.ns_per_wqe,
            r.c.mmio_writes as f64 / w,
            r.c.send_doorbells as f64 / w,
            r.c.wqebbs_fetched as f64 / w,
            r.c.cqes_written as f64 / w,
            r.frames as f64 / w,
            base / r.ns_per_wqe,
        );
    }
}
