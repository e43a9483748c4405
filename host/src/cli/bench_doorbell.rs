//! `rdmesh bench doorbell`: doorbell policies side by side — an 8-byte doorbell per WQE, a
//! BlueFlame copy per WQE, batches of N WQEs per doorbell, and an adaptive policy — for a set
//! of message and batch sizes: WQEs per second, post-to-CQE latency, MMIO writes per WQE and
//! PCIe bytes per WQE (see `docs/doorbell.md`).
//!
//! `--provider model` runs two linked mlx5 device models and reports **virtual time** from the
//! model's PCIe / NIC cost model (`rdmesh_vfio::model::pcie`), next to the back-of-the-envelope
//! prediction from the same parameters. `--provider vfio:BDF` opens a ConnectX function bound
//! to vfio-pci and reports **wall time** (a QP connected to itself).
//!
//! Policies (RDMA WRITE of `size` bytes, one SGE, posted through core's `Batcher`):
//! - `doorbell`: one WQE per doorbell, every WQE signaled, no BlueFlame (rdma-core with
//!   `MLX5_SHUT_UP_BF=1`, one signaled `ibv_post_send` per WR);
//! - `blueflame`: the same with the WQE copied through the BlueFlame register (rdma-core's
//!   default for a single small WQE);
//! - `batch`: N WQEs per 8-byte doorbell, the last of each batch signaled;
//! - `adaptive`: ring at once (BlueFlame for a lone WQE) when the NIC has nothing in flight,
//!   otherwise gather up to N WQEs per doorbell; the last WQE of each doorbell is signaled.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rdmesh_core::mlx5::doorbell::BfMode;
use rdmesh_core::mlx5::{BatchPolicy, Batcher, Post, WrOp};
use rdmesh_vfio::model::harness::{Endpoint, EndpointConfig, Harness};
use rdmesh_vfio::model::pcie::{Pattern, Prediction};
use rdmesh_vfio::model::{ModelConfig, ModelDevice, ModelLink, PcieParams, Ps};
use serde::Serialize;

use crate::error::{Error, Result};

/// `rdmesh bench doorbell` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct DoorbellBenchArgs {
    /// `model` (two linked mlx5 device models, virtual time) or `vfio:BDF` (a ConnectX
    /// function bound to vfio-pci, wall time).
    #[arg(long, default_value = "model")]
    pub provider: String,
    /// Policies to run, comma-separated: doorbell, blueflame, batch, adaptive.
    #[arg(
        long,
        default_value = "doorbell,blueflame,batch,adaptive",
        value_delimiter = ','
    )]
    pub policies: Vec<String>,
    /// Message sizes in bytes, comma-separated (suffixes K, M accepted).
    #[arg(short = 's', long, default_value = "64,1K,4K", value_delimiter = ',', value_parser = super::parse_size)]
    pub sizes: Vec<u64>,
    /// Batch sizes N (WQEs per doorbell) for the batch and adaptive policies, comma-separated.
    #[arg(
        short = 'b',
        long,
        default_value = "1,2,4,8,16,32,64",
        value_delimiter = ','
    )]
    pub batches: Vec<u16>,
    /// WQEs per point (rounded up to a multiple of every batch size).
    #[arg(short = 'n', long, default_value_t = 4096)]
    pub wqes: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also draw the WQE/s and latency curves into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// The policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// An 8-byte doorbell per WQE.
    Doorbell,
    /// A BlueFlame copy per WQE.
    Blueflame,
    /// N WQEs per doorbell.
    Batch,
    /// Ring at once when the NIC is idle, else up to N per doorbell.
    Adaptive,
}

impl Policy {
    fn parse(s: &str) -> Result<Policy> {
        Ok(match s.trim() {
            "doorbell" => Policy::Doorbell,
            "blueflame" | "bf" => Policy::Blueflame,
            "batch" => Policy::Batch,
            "adaptive" => Policy::Adaptive,
            o => {
                return Err(Error::Config(format!(
                    "--policies: '{o}' is none of doorbell, blueflame, batch, adaptive"
                )))
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Policy::Doorbell => "doorbell",
            Policy::Blueflame => "blueflame",
            Policy::Batch => "batch",
            Policy::Adaptive => "adaptive",
        }
    }

    /// Batch sizes this policy runs at.
    fn batches(self, list: &[u16]) -> Vec<u16> {
        match self {
            Policy::Doorbell | Policy::Blueflame => vec![1],
            Policy::Batch | Policy::Adaptive => list.to_vec(),
        }
    }
}

/// Post-to-CQE latency statistics, ns.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// One measured point.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Policy.
    pub policy: Policy,
    /// Batch size N (1 for the per-WQE policies).
    pub batch: u16,
    /// Message size, bytes.
    pub size: u64,
    /// WQEs posted.
    pub wqes: u64,
    /// Steady-state WQEs per second.
    pub wqe_per_s: f64,
    /// Post-to-CQE latency, ns (a WQE completes with the next signaled WQE's CQE).
    pub latency_ns: Latency,
    /// MMIO writes (PCIe TLPs from the CPU: doorbells and BlueFlame bursts).
    pub mmio_writes: u64,
    /// MMIO writes per WQE.
    pub mmio_writes_per_wqe: f64,
    /// 8-byte doorbells per WQE.
    pub doorbells_per_wqe: f64,
    /// BlueFlame bursts per WQE.
    pub blueflame_per_wqe: f64,
    /// CQEs per WQE.
    pub cqes_per_wqe: f64,
    /// PCIe bytes per WQE, both directions, TLP overheads included (model only).
    pub pcie_bytes_per_wqe: Option<f64>,
    /// Downstream (host → NIC) bytes per WQE (model only).
    pub pcie_down_bytes_per_wqe: Option<f64>,
    /// Upstream (NIC → host) bytes per WQE (model only).
    pub pcie_up_bytes_per_wqe: Option<f64>,
    /// DMA read requests for WQEs, per WQE (model only).
    pub wqe_reads_per_wqe: Option<f64>,
    /// DMA read requests for payload, per WQE (model only).
    pub data_reads_per_wqe: Option<f64>,
    /// The back-of-the-envelope WQE/s from the cost model (model only; not for adaptive).
    pub predicted_wqe_per_s: Option<f64>,
    /// The resource the prediction says limits the rate.
    pub bottleneck: Option<&'static str>,
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `model` or `vfio:BDF`.
    pub provider: String,
    /// `virtual` (model) or `wall`.
    pub time: &'static str,
    /// The model's cost parameters (model only).
    pub params: Option<ParamsJson>,
    /// The points.
    pub points: Vec<Point>,
}

/// [`PcieParams`] for the JSON output.
#[derive(Debug, Clone, Serialize)]
pub struct ParamsJson {
    cpu_post_ns: f64,
    cpu_doorbell_ns: f64,
    cpu_blueflame_ns: f64,
    cpu_poll_ns: f64,
    pcie_gts: f64,
    pcie_lanes: u32,
    pcie_tlp_gbps: f64,
    mps: u32,
    mrrs: u32,
    rcb: u32,
    dma_read_latency_ns: f64,
    posted_write_latency_ns: f64,
    doorbell_proc_ns: f64,
    wqe_proc_ns: f64,
    max_wqebbs_per_read: u32,
    link_gbps: f64,
    propagation_ns: f64,
    remote_turnaround_ns: f64,
}

impl From<&PcieParams> for ParamsJson {
    fn from(p: &PcieParams) -> Self {
        ParamsJson {
            cpu_post_ns: p.cpu_post_ns,
            cpu_doorbell_ns: p.cpu_doorbell_ns,
            cpu_blueflame_ns: p.cpu_blueflame_ns,
            cpu_poll_ns: p.cpu_poll_ns,
            pcie_gts: p.gts,
            pcie_lanes: p.lanes,
            pcie_tlp_gbps: p.tlp_bytes_per_ns() * 8.0,
            mps: p.mps,
            mrrs: p.mrrs,
            rcb: p.rcb,
            dma_read_latency_ns: p.dma_read_latency_ns,
            posted_write_latency_ns: p.posted_write_latency_ns,
            doorbell_proc_ns: p.doorbell_proc_ns,
            wqe_proc_ns: p.wqe_proc_ns,
            max_wqebbs_per_read: p.max_wqebbs_per_read,
            link_gbps: p.link_gbps,
            propagation_ns: p.propagation_ns,
            remote_turnaround_ns: p.remote_turnaround_ns,
        }
    }
}

/// What to run, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Policies.
    pub policies: Vec<Policy>,
    /// Message sizes.
    pub sizes: Vec<u64>,
    /// Batch sizes.
    pub batches: Vec<u16>,
    /// WQEs per point.
    pub wqes: usize,
}

impl DoorbellBenchArgs {
    /// Checks the arguments.
    ///
    /// Errors: [`Error::Config`] naming the bad flag.
    pub fn plan(&self) -> Result<Plan> {
        let policies = self
            .policies
            .iter()
            .map(|s| Policy::parse(s))
            .collect::<Result<Vec<_>>>()?;
        if policies.is_empty() {
            return Err(Error::Config("--policies: name at least one".into()));
        }
        if let Some(&b) = self.batches.iter().find(|&&b| b == 0 || b > 256) {
            return Err(Error::Config(format!(
                "--batches {b}: 1 to 256 WQEs per doorbell"
            )));
        }
        if let Some(&s) = self.sizes.iter().find(|&&s| s == 0 || s > 1 << 20) {
            return Err(Error::Config(format!(
                "--sizes {s}: 1 byte to 1 MiB per message"
            )));
        }
        if self.wqes == 0 || self.wqes > 1 << 22 {
            return Err(Error::Config(format!(
                "-n {}: 1 to 4194304 WQEs per point",
                self.wqes
            )));
        }
        let lcm = self
            .batches
            .iter()
            .fold(1usize, |a, &b| a * usize::from(b) / gcd(a, usize::from(b)));
        Ok(Plan {
            policies,
            sizes: self.sizes.clone(),
            batches: self.batches.clone(),
            wqes: self.wqes.div_ceil(lcm) * lcm,
        })
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Runs `rdmesh bench doorbell`.
///
/// Errors: bad arguments; `vfio:BDF` when the function cannot be opened (no IOMMU group,
/// not bound to vfio-pci, ...); model failures.
pub fn run(args: &DoorbellBenchArgs) -> Result<()> {
    let plan = args.plan()?;
    let report = match args.provider.as_str() {
        "model" => run_model(&plan, PcieParams::default())?,
        p => match p.strip_prefix("vfio:") {
            Some(bdf) if !bdf.is_empty() => run_vfio(bdf, &plan)?,
            _ => {
                return Err(Error::Config(format!(
                "--provider {p}: use 'model' (virtual time) or 'vfio:BDF' (e.g. vfio:0000:01:00.0)"
            )))
            }
        },
    };
    if let Some(path) = &args.plot {
        plot(&report, path)?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| Error::Bench(e.to_string()))?
        );
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// The text table.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "doorbell policies, RDMA WRITE, provider {} ({} time)",
        r.provider, r.time
    );
    let _ = writeln!(
        s,
        "| policy | N | size | M WQE/s | predicted | bottleneck | lat p50 ns | lat p99 ns | MMIO/WQE | CQE/WQE | PCIe B/WQE (down+up) |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|");
    for p in &r.points {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {} | {} | {:.0} | {:.0} | {:.4} | {:.4} | {} |",
            p.policy.name(),
            p.batch,
            p.size,
            p.wqe_per_s / 1e6,
            p.predicted_wqe_per_s
                .map_or("-".into(), |v| format!("{:.1}", v / 1e6)),
            p.bottleneck.unwrap_or("-"),
            p.latency_ns.p50,
            p.latency_ns.p99,
            p.mmio_writes_per_wqe,
            p.cqes_per_wqe,
            match (p.pcie_down_bytes_per_wqe, p.pcie_up_bytes_per_wqe) {
                (Some(d), Some(u)) => format!("{:.1} ({d:.1}+{u:.1})", d + u),
                _ => "-".into(),
            },
        );
    }
    s
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn latency(mut v: Vec<f64>) -> Latency {
    v.sort_by(f64::total_cmp);
    let mean = if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    };
    Latency {
        mean,
        p50: percentile(&v, 0.5),
        p99: percentile(&v, 0.99),
    }
}

/// The two linked model devices with one RC endpoint each.
struct ModelRig {
    a: Endpoint,
    _b: Endpoint,
    b_va: u64,
    b_key: u32,
    dev: ModelDevice,
    _ha: Harness,
    _hb: Harness,
    _link: ModelLink,
}

fn model_rig(max_size: u64, params: PcieParams) -> Result<ModelRig> {
    let e = |what: &str, m: String| Error::Bench(format!("device model: {what}: {m}"));
    let mk = |n: u8| -> Result<Harness> {
        let dev = ModelDevice::new(ModelConfig {
            mac: [2, 0, 0, 0, 0, n],
            ..ModelConfig::default()
        });
        dev.set_pcie_params(params);
        let mut h = Harness::new(dev).map_err(|m| e("harness", m))?;
        h.bring_up().map_err(|m| e("bring-up", m))?;
        Ok(h)
    };
    let (mut ha, mut hb) = (mk(1)?, mk(2)?);
    let link = ModelLink::connect(&ha.dev, &hb.dev, None).map_err(|x| e("link", x.to_string()))?;
    let data_len = (max_size as usize).next_multiple_of(4096).max(64 << 10);
    let cfg = |ip| EndpointConfig {
        ip,
        log_sq: 12,
        log_cq: 12,
        data_len,
        mtu: 5,
        ..Default::default()
    };
    let mut a = Endpoint::create(&mut ha, cfg([10, 0, 0, 1])).map_err(|m| e("endpoint a", m))?;
    let mut b = Endpoint::create(&mut hb, cfg([10, 0, 0, 2])).map_err(|m| e("endpoint b", m))?;
    a.connect(&mut ha, &b).map_err(|m| e("connect a", m))?;
    b.connect(&mut hb, &a).map_err(|m| e("connect b", m))?;
    Ok(ModelRig {
        b_va: b.va,
        b_key: b.key,
        dev: ha.dev.clone(),
        a,
        _b: b,
        _ha: ha,
        _hb: hb,
        _link: link,
    })
}

/// Runs every point on the device model in virtual time.
///
/// Errors: a model failure ([`Error::Bench`]).
pub fn run_model(plan: &Plan, params: PcieParams) -> Result<Report> {
    let max = plan.sizes.iter().copied().max().unwrap_or(64);
    let mut rig = model_rig(max, params)?;
    let mut points = Vec::new();
    for &policy in &plan.policies {
        for &size in &plan.sizes {
            for n in policy.batches(&plan.batches) {
                points.push(model_point(&mut rig, &params, policy, n, size, plan.wqes)?);
            }
        }
    }
    Ok(Report {
        provider: "model".into(),
        time: "virtual",
        params: Some(ParamsJson::from(&params)),
        points,
    })
}

fn model_point(
    rig: &mut ModelRig,
    params: &PcieParams,
    policy: Policy,
    n: u16,
    size: u64,
    wqes: usize,
) -> Result<Point> {
    let err = |m: String| Error::Bench(format!("device model, {} N={n}: {m}", policy.name()));
    let bf = match policy {
        Policy::Blueflame | Policy::Adaptive => BfMode::Prefer,
        Policy::Doorbell | Policy::Batch => BfMode::Off,
    };
    // Signaling is decided here (the last WQE of every doorbell), so K is out of the way.
    let max_batch = n.max(1);
    let mut batcher = Batcher::new(
        BatchPolicy {
            max_batch,
            signal_every: u16::MAX,
            inline_threshold: 0,
            bf,
        },
        rdmesh_core::mlx5::Bfreg::new(rdmesh_core::mlx5::BfregConfig::blueflame(
            rdmesh_core::mlx5::doorbell::UAR_BF_OFFSET,
            rdmesh_core::mlx5::doorbell::BLUEFLAME_BUFFER_SIZE,
        )),
    )
    .map_err(|e| err(format!("{e:?}")))?;
    let dev = rig.dev.clone();
    // Drain anything left, then start the clock and the counters at zero.
    rig.a.poll_timed().map_err(err)?;
    dev.reset_clock();
    dev.reset_counters();
    let ring = usize::from(rig.a.sq_wqebbs());
    let sge = [rig.a.sge(0, size as u32)];
    let mut post_t: Vec<Ps> = Vec::with_capacity(wqes);
    // (CQE visible at, WQEs up to and including this sequence number are complete).
    let mut cqes: VecDeque<(Ps, usize)> = VecDeque::new();
    let mut done_t: Vec<Ps> = vec![0; wqes];
    let mut seq_of_slot: Vec<usize> = vec![0; ring];
    let mut completed = 0usize; // WQEs whose CQE the CPU has seen
    let mut rung = 0usize; // WQEs announced by a doorbell
    let mut covered = 0usize; // WQEs whose completion time is known
    let mut pending = 0usize;
    let mut ncqe = 0u64;
    let collect = |a: &mut Endpoint,
                   cqes: &mut VecDeque<(Ps, usize)>,
                   seq_of_slot: &[usize],
                   covered: &mut usize,
                   done_t: &mut [Ps]|
     -> Result<u64> {
        let c = a.poll_timed().map_err(err)?;
        let k = c.len() as u64;
        for (cqe, t) in c {
            if let Some(e) = cqe.error {
                return Err(err(format!("error CQE {e:?}")));
            }
            let seq = seq_of_slot[usize::from(cqe.wqe_counter) & (ring - 1)];
            for d in done_t.iter_mut().take(seq + 1).skip(*covered) {
                *d = t;
            }
            *covered = seq + 1;
            cqes.push_back((t, seq + 1));
        }
        Ok(k)
    };
    for j in 0..wqes {
        // The CPU consumes the CQEs that are visible by now; with no room, it waits.
        loop {
            let cpu = dev.cpu_time();
            while let Some(&(t, upto)) = cqes.front() {
                if t > cpu && j - completed < ring {
                    break;
                }
                dev.cpu_wait_until(t);
                dev.cpu_work(params.cpu_poll_ns);
                completed = upto;
                cqes.pop_front();
            }
            if j - completed < ring {
                break;
            }
            if cqes.is_empty() {
                return Err(err("send queue full with no completion to wait for".into()));
            }
        }
        let idle = completed == rung;
        let flush_now = policy == Policy::Adaptive && idle;
        let last_of_batch = pending + 1 == usize::from(max_batch) || flush_now || j + 1 == wqes;
        post_t.push(dev.cpu_time());
        dev.cpu_work(params.cpu_post_ns);
        let mut p = Post::new(
            WrOp::RdmaWrite {
                raddr: rig.b_va,
                rkey: rig.b_key,
            },
            &sge,
        );
        p.force_signal = last_of_batch;
        let (posted, mut rang) = rig.a.post_one(&mut batcher, &p).map_err(err)?;
        seq_of_slot[usize::from(posted.wqe_index) & (ring - 1)] = j;
        pending += 1;
        if !rang && (flush_now || j + 1 == wqes) {
            rang = rig.a.flush(&mut batcher).map_err(err)?;
        }
        if rang {
            rung = j + 1;
            pending = 0;
            ncqe += collect(
                &mut rig.a,
                &mut cqes,
                &seq_of_slot,
                &mut covered,
                &mut done_t,
            )?;
        }
    }
    ncqe += collect(
        &mut rig.a,
        &mut cqes,
        &seq_of_slot,
        &mut covered,
        &mut done_t,
    )?;
    if covered != wqes {
        return Err(err(format!("{covered} of {wqes} WQEs completed")));
    }
    // Steady state: from the completion of the first quarter to the last completion.
    let j0 = wqes / 4;
    let (t0, t1) = (done_t[j0.saturating_sub(1)], done_t[wqes - 1]);
    let wqe_per_s = if t1 > t0 {
        (wqes - j0) as f64 / ((t1 - t0) as f64 * 1e-12)
    } else {
        0.0
    };
    let lat: Vec<f64> = (0..wqes)
        .map(|j| (done_t[j].saturating_sub(post_t[j])) as f64 / 1000.0)
        .collect();
    let pc = dev.pcie_counters();
    let w = wqes as f64;
    let predicted = (policy != Policy::Adaptive).then(|| {
        params.predict(Pattern {
            size,
            batch: f64::from(n),
            signal_every: f64::from(n),
            blueflame: policy == Policy::Blueflame,
            mtu: 4096,
        })
    });
    Ok(Point {
        policy,
        batch: n,
        size,
        wqes: wqes as u64,
        wqe_per_s,
        latency_ns: latency(lat),
        mmio_writes: pc.mmio_writes(),
        mmio_writes_per_wqe: pc.mmio_writes() as f64 / w,
        doorbells_per_wqe: pc.mmio_doorbells as f64 / w,
        blueflame_per_wqe: pc.mmio_blueflame as f64 / w,
        cqes_per_wqe: ncqe as f64 / w,
        pcie_bytes_per_wqe: Some(pc.total_bytes() as f64 / w),
        pcie_down_bytes_per_wqe: Some(pc.down_bytes as f64 / w),
        pcie_up_bytes_per_wqe: Some(pc.up_bytes as f64 / w),
        wqe_reads_per_wqe: Some(pc.wqe_read_requests as f64 / w),
        data_reads_per_wqe: Some(pc.data_read_requests as f64 / w),
        predicted_wqe_per_s: predicted.map(|p: Prediction| p.wqe_per_s()),
        bottleneck: predicted.map(|p| p.bottleneck().1),
    })
}

/// `vfio:BDF`: the same policies on a real function, wall time, through the vfio provider
/// (a QP connected to itself). BlueFlame is not available there (vfio-pci maps BAR0
/// uncached), so that policy is skipped.
fn run_vfio(bdf: &str, plan: &Plan) -> Result<Report> {
    check_vfio_node(bdf)?;
    let ip: std::net::IpAddr = "10.255.255.1".parse().expect("literal");
    let dev = crate::verbs::Device::open_vfio(bdf, crate::vfio_provider::VfioConfig::new(ip))?;
    run_verbs(&dev, &format!("vfio:{bdf}"), plan)
}

/// The policies through the verbs API on `dev` (a vfio-provider device: a real function, or
/// the device model for tests), wall time: one `post_send` call per doorbell.
///
/// Errors: verbs failures, error completions.
pub fn run_verbs(dev: &crate::verbs::Device, name: &str, plan: &Plan) -> Result<Report> {
    use crate::verbs::{AccessFlags, AhAttr, QpAttr, QpCap, QpState};
    let max = plan.sizes.iter().copied().max().unwrap_or(64) as usize;
    let pd = dev.alloc_pd()?;
    let mr = pd.register(
        max.max(64),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    )?;
    let cq = dev.create_cq(4096)?;
    let qp = pd.create_qp(
        &cq,
        &cq,
        QpCap {
            max_send_wr: 1024,
            max_recv_wr: 16,
            max_sge: 1,
        },
    )?;
    let local = dev.local_addr();
    if let Some(mac) = dev.mac() {
        dev.set_neighbor(local.ip(), mac);
    }
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE),
        ..Default::default()
    })?;
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rtr),
        ah_attr: Some(AhAttr {
            dgid: local.ip(),
            udp_port: local.port(),
        }),
        path_mtu: Some(crate::verbs::Mtu::Mtu1024),
        dest_qp_num: Some(qp.qp_num()),
        rq_psn: Some(0),
        max_dest_rd_atomic: Some(16),
        min_rnr_timer: Some(12),
        ..Default::default()
    })?;
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(0),
        timeout: Some(14),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        max_rd_atomic: Some(16),
        ..Default::default()
    })?;
    let mut points = Vec::new();
    for &policy in &plan.policies {
        if policy == Policy::Blueflame {
            tracing::warn!(
                "bench doorbell: vfio-pci maps BAR0 uncached (no BlueFlame); blueflame skipped"
            );
            continue;
        }
        for &size in &plan.sizes {
            for n in policy.batches(&plan.batches) {
                points.push(verbs_point(&qp, &cq, &mr, policy, n, size, plan.wqes)?);
            }
        }
    }
    Ok(Report {
        provider: name.into(),
        time: "wall",
        params: None,
        points,
    })
}

/// Fails early, in words, when `bdf` is not a function this process can open through VFIO.
fn check_vfio_node(bdf: &str) -> Result<()> {
    let dev = Path::new("/sys/bus/pci/devices").join(bdf);
    if !dev.exists() {
        return Err(Error::Config(format!(
            "--provider vfio:{bdf}: no PCI function {bdf} on this machine ({} does not exist); \
             list ConnectX functions with `lspci -d 15b3:` and run `rdmesh doctor`",
            dev.display()
        )));
    }
    if !Path::new("/dev/vfio/vfio").exists() {
        return Err(Error::Config(format!(
            "--provider vfio:{bdf}: /dev/vfio/vfio does not exist: load vfio-pci (modprobe vfio-pci) \
             with the IOMMU on, bind {bdf} to it, and run `rdmesh doctor`"
        )));
    }
    let driver = std::fs::read_link(dev.join("driver"))
        .ok()
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()));
    if driver.as_deref() != Some("vfio-pci") {
        return Err(Error::Config(format!(
            "--provider vfio:{bdf}: the function is bound to {}, not vfio-pci; run `rdmesh doctor`",
            driver.as_deref().unwrap_or("no driver")
        )));
    }
    Ok(())
}

fn verbs_point(
    qp: &crate::verbs::QueuePair,
    cq: &crate::verbs::CompletionQueue,
    mr: &crate::verbs::MemoryRegion,
    policy: Policy,
    n: u16,
    size: u64,
    wqes: usize,
) -> Result<Point> {
    use crate::verbs::{SendWr, Sge, WcStatus, WrOpcode};
    let n = usize::from(n.max(1));
    let sge = Sge {
        addr: mr.addr(),
        length: size as u32,
        lkey: mr.lkey(),
    };
    let wr = |id: usize, signaled: bool| SendWr {
        wr_id: id as u64,
        opcode: WrOpcode::RdmaWrite {
            remote_addr: mr.addr(),
            rkey: mr.rkey(),
        },
        sg_list: vec![sge],
        signaled,
        solicited: false,
    };
    let mut post_t = vec![Instant::now(); wqes];
    let mut lat = Vec::with_capacity(wqes);
    let (mut completed, mut posted, mut doorbells, mut ncqe) = (0usize, 0usize, 0u64, 0u64);
    let max_in_flight = 512usize;
    let start = Instant::now();
    let mut poll = |completed: &mut usize, lat: &mut Vec<f64>, post_t: &[Instant]| -> Result<()> {
        while let Some(c) = cq.poll_one() {
            if c.status != WcStatus::Success {
                return Err(Error::Bench(format!(
                    "completion of wr_id {} failed: {:?}",
                    c.wr_id, c.status
                )));
            }
            ncqe += 1;
            let upto = c.wr_id as usize + 1;
            let now = Instant::now();
            for t in &post_t[(*completed).min(upto)..upto] {
                lat.push(now.duration_since(*t).as_nanos() as f64);
            }
            *completed = (*completed).max(upto);
        }
        Ok(())
    };
    while posted < wqes {
        poll(&mut completed, &mut lat, &post_t)?;
        if posted - completed + n > max_in_flight {
            if start.elapsed().as_secs() > 30 {
                return Err(Error::Bench("completions stopped arriving (30 s)".into()));
            }
            continue;
        }
        let batch = match policy {
            Policy::Adaptive if completed == posted => 1,
            _ => n,
        }
        .min(wqes - posted);
        let list: Vec<SendWr> = (posted..posted + batch)
            .map(|j| {
                post_t[j] = Instant::now();
                wr(j, j + 1 == posted + batch)
            })
            .collect();
        qp.post_send(&list)?;
        doorbells += 1;
        posted += batch;
    }
    while completed < wqes {
        poll(&mut completed, &mut lat, &post_t)?;
        if start.elapsed().as_secs() > 30 {
            return Err(Error::Bench("completions stopped arriving (30 s)".into()));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let w = wqes as f64;
    Ok(Point {
        policy,
        batch: n as u16,
        size,
        wqes: wqes as u64,
        wqe_per_s: w / secs,
        latency_ns: latency(lat),
        mmio_writes: doorbells,
        mmio_writes_per_wqe: doorbells as f64 / w,
        doorbells_per_wqe: doorbells as f64 / w,
        blueflame_per_wqe: 0.0,
        cqes_per_wqe: ncqe as f64 / w,
        pcie_bytes_per_wqe: None,
        pcie_down_bytes_per_wqe: None,
        pcie_up_bytes_per_wqe: None,
        wqe_reads_per_wqe: None,
        data_reads_per_wqe: None,
        predicted_wqe_per_s: None,
        bottleneck: None,
    })
}

/// Draws WQE/s and latency against the batch size into an SVG file (plotters, SVG backend:
/// no font or system library is needed).
///
/// Errors: [`Error::Bench`] when the file cannot be written.
pub fn plot(r: &Report, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let err = |e: String| Error::Bench(format!("--plot {}: {e}", path.display()));
    let root = SVGBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let (left, right) = root.split_horizontally(600);
    let max_n = r.points.iter().map(|p| p.batch).max().unwrap_or(1).max(2) as f64;
    let max_rate = r
        .points
        .iter()
        .flat_map(|p| [p.wqe_per_s, p.predicted_wqe_per_s.unwrap_or(0.0)])
        .fold(1.0f64, f64::max)
        / 1e6;
    let max_lat = r
        .points
        .iter()
        .map(|p| p.latency_ns.p50)
        .fold(1.0f64, f64::max)
        / 1e3;
    // One series per (policy, size); per-WQE policies are horizontal lines.
    let mut keys: Vec<(Policy, u64)> = r.points.iter().map(|p| (p.policy, p.size)).collect();
    keys.dedup();
    let palette = [&BLUE, &RED, &GREEN, &MAGENTA, &CYAN, &BLACK];
    let series = |k: &(Policy, u64), f: &dyn Fn(&Point) -> f64| -> Vec<(f64, f64)> {
        let pts: Vec<&Point> = r
            .points
            .iter()
            .filter(|p| (p.policy, p.size) == *k)
            .collect();
        if pts.len() == 1
            && pts[0].batch == 1
            && matches!(k.0, Policy::Doorbell | Policy::Blueflame)
        {
            let v = f(pts[0]);
            vec![(1.0, v), (max_n, v)]
        } else {
            pts.iter().map(|p| (f64::from(p.batch), f(p))).collect()
        }
    };
    let time = r.time;
    for (area, title, ymax, f) in [
        (
            &left,
            format!("WQE/s ({time} time)"),
            max_rate * 1.1,
            (&|p: &Point| p.wqe_per_s / 1e6) as &dyn Fn(&Point) -> f64,
        ),
        (
            &right,
            format!("post-to-CQE latency p50 ({time} time)"),
            max_lat * 1.1,
            &|p: &Point| p.latency_ns.p50 / 1e3,
        ),
    ] {
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(52)
            .build_cartesian_2d((1.0f64..max_n).log_scale(), 0.0f64..ymax)
            .map_err(|e| err(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc("WQEs per doorbell (N)")
            .y_desc(if ymax == max_rate * 1.1 {
                "M WQE/s"
            } else {
                "µs"
            })
            .draw()
            .map_err(|e| err(e.to_string()))?;
        for (i, k) in keys.iter().enumerate() {
            let color = palette[i % palette.len()];
            let data = series(k, f);
            chart
                .draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))
                .map_err(|e| err(e.to_string()))?
                .label(format!("{} {} B", k.0.name(), k.1))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
            chart
                .draw_series(
                    data.iter()
                        .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
                )
                .map_err(|e| err(e.to_string()))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(e.to_string()))?;
    }
    root.present().map_err(|e| err(e.to_string()))?;
    Ok(())
}
