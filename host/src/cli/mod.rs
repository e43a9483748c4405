//! The `rdmesh` command line (clap).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::bench::{BenchOptions, Mode};
use crate::error::{Error, Result};

pub mod bench_doorbell;
pub mod bench_mesh;
pub mod doctor;
pub mod fuzz;
pub mod mlx5;
pub mod pcap;
pub mod pingpong;
pub mod probe;
pub mod stats;
pub mod topo;

/// rdmesh: userspace RDMA (RoCEv2) driver and transport.
#[derive(Debug, Parser)]
#[command(name = "rdmesh", version, about)]
pub struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `rdmesh_host=debug`. Also RDMESH_LOG.
    #[arg(long, global = true)]
    pub log: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Bandwidth and latency tests shaped like perftest (ib_write_bw, ib_send_bw, ib_read_bw, ib_write_lat).
    Bench(Box<BenchArgs>),
    /// Capture files.
    Pcap {
        /// What to do with the capture.
        #[command(subcommand)]
        command: PcapCommand,
    },
    /// List the devices of this machine (soft devices: one per interface address).
    Devices,
    /// RDMA device ports: netdev, addresses, GID index, MTU, speed, PCIe link and ceiling.
    Topo(topo::TopoArgs),
    /// RC SEND ping-pong compatible with rdma-core's ibv_rc_pingpong (client or server).
    Pingpong(pingpong::PingpongArgs),
    /// Encode and decode mlx5 WQEs and CQEs (debugging queues, conformance with rdma-core).
    Mlx5(mlx5::Mlx5Args),
    /// Check this machine for the VFIO path (IOMMU, vfio-pci, ConnectX functions, hugepages, memlock) and say what to fix.
    Doctor(doctor::DoctorArgs),
    /// Device and QP counters of running rdmesh processes (like `rdma statistic show`).
    Stats(stats::StatsArgs),
    /// The peer process of a benchmark reference (`rdmesh bench --compare-tcp/--compare-udp`
    /// runs it); prints its port, serves one run, exits.
    #[command(hide = true)]
    ReferencePeer {
        /// What to serve.
        #[arg(value_enum)]
        kind: crate::bench::reference::PeerKind,
        /// UDP sink: datagrams per message (an acknowledgement at each message end).
        #[arg(long, default_value_t = 1)]
        per_msg: u64,
    },
    /// Fuzz other RoCEv2 parsers: pcap files into a program, or frames to a live peer.
    Fuzz(fuzz::FuzzArgs),
}

#[cfg(test)]
mod cpu_list_test {
    use super::parse_cpu_list;

    #[test]
    fn taskset_syntax() {
        assert_eq!(parse_cpu_list("0").unwrap(), [0]);
        assert_eq!(parse_cpu_list("3,1").unwrap(), [1, 3]);
        assert_eq!(parse_cpu_list("0-3,2,8").unwrap(), [0, 1, 2, 3, 8]);
        for bad in ["", "a", "3-1", "1-", "-2", "1,,x"] {
            let e = parse_cpu_list(bad).unwrap_err().to_string();
            assert!(e.contains("--cpus"), "{bad}: {e}");
        }
    }
}

/// Parses a CPU list in taskset's syntax (`0`, `0,2`, `0-3`, `0-1,4`).
///
/// Errors: [`Error::Config`] naming the part that is not a CPU number or range.
pub fn parse_cpu_list(list: &str) -> Result<Vec<usize>> {
    let bad = |p: &str| {
        Error::Config(format!(
            "--cpus {list}: {p:?} is not a CPU number or range (taskset syntax: 0,2-3)"
        ))
    };
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (
                    a.trim().parse().map_err(|_| bad(part))?,
                    b.trim().parse().map_err(|_| bad(part))?,
                );
                if a > b {
                    return Err(bad(part));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad(part))?),
        }
    }
    if cpus.is_empty() {
        return Err(bad(list));
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// `rdmesh pcap` subcommands.
#[derive(Debug, Subcommand)]
pub enum PcapCommand {
    /// Decode every frame: one line per frame, or JSON Lines with --json.
    Decode {
        /// pcap file (Ethernet link type).
        file: PathBuf,
        /// JSON Lines output.
        #[arg(long)]
        json: bool,
    },
}

/// `rdmesh bench` arguments (perftest's flags where they exist).
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    /// `mesh`: the all-pairs bandwidth matrix of mesh endpoints (see docs/mesh.md).
    #[command(subcommand)]
    pub suite: Option<BenchSuite>,
    /// Operation to test.
    #[arg(value_enum, required = true)]
    pub mode: Option<Mode>,
    /// Server to connect to; without it this process is the server.
    pub server: Option<String>,
    /// Out-of-band TCP port (perftest's -p).
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// Message size in bytes (suffixes K, M accepted). Default 65536, or 2 with --lat.
    #[arg(short = 's', long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Messages per size. Default 5000, or 1000 with --lat.
    #[arg(short = 'n', long)]
    pub iters: Option<u64>,
    /// All sizes from 2 bytes to 8 MiB (powers of two).
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Run each size for this many seconds instead of -n messages.
    #[arg(short = 'D', long)]
    pub duration: Option<f64>,
    /// Report bandwidth in Gb/s instead of MB/s.
    #[arg(long)]
    pub report_gbits: bool,
    /// Latency test (ping-pong): t_min, t_max, median, average, stdev, 99% and 99.9% in µs.
    #[arg(long)]
    pub lat: bool,
    /// Check every transferred byte against a pattern; a mismatch is an error exit.
    #[arg(long)]
    pub verify: bool,
    /// Bandwidth tests without --verify: bytes of buffer the messages cycle through on each end
    /// (perftest's --cycle_buffer); a longer message reuses one buffer of its own size. With
    /// --verify every message in flight has its own slot.
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    pub cycle_buffer: u64,
    /// Write every packet this process sends and receives to a pcap file.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Run server and client in this process on 127.0.0.1.
    #[arg(long)]
    pub loopback: bool,
    /// Local UDP port for RoCEv2 (default 4791, or an ephemeral one when 4791 is taken; 0 = ephemeral).
    #[arg(long)]
    pub udp_port: Option<u16>,
    /// Local address to use as the GID (default: the source address of the route to the peer).
    #[arg(long)]
    pub bind: Option<std::net::IpAddr>,
    /// Largest path MTU in bytes (256, 512, 1024, 2048, 4096; perftest's -m).
    #[arg(short = 'm', long)]
    pub mtu: Option<u32>,
    /// Seconds to wait for the peer or for a completion before giving up.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// With --loopback: also measure plain UDP between two processes in the same run and print
    /// the ratio (a ping-pong with --lat; datagrams with the RC window otherwise).
    #[arg(long)]
    pub compare_udp: bool,
    /// With --loopback, bandwidth tests: also measure one TCP stream between two processes
    /// (iperf3's shape, same message size and count or duration) and print the ratio.
    #[arg(long, conflicts_with = "lat")]
    pub compare_tcp: bool,
    /// With --loopback and --impair, bandwidth tests: switch the impairment on and off every
    /// 250 ms on the one connection (first off) and print the goodput of the impaired periods
    /// against the loss-free ones, and their ratio (the loss-free reference in the same run).
    #[arg(long, conflicts_with = "lat")]
    pub compare_loss_free: bool,
    /// Pin every thread of the run, the reference's processes included, to these CPUs
    /// (taskset's list syntax: `0`, `0,1`, `0-3`).
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Queue pairs side by side (perftest's -q), each on its own soft device, socket and
    /// thread; prints each QP and the aggregate. With --loopback, bandwidth tests.
    #[arg(short = 'q', long = "qps", default_value_t = 1)]
    pub qps: u32,
    /// Talk to perftest (ib_write_bw, ib_send_bw, ib_read_bw, ib_write_lat with --lat) with
    /// its own out-of-band exchange, as client or server. Implies --raw-rx.
    #[arg(long)]
    pub perftest_compat: bool,
    /// Receive through a raw socket and verify each ICRC over the real IPv4 header (peers such
    /// as rxe put a non-zero IP ID on their packets). Needs root or CAP_NET_RAW.
    #[arg(long)]
    pub raw_rx: bool,
    /// With --perftest-compat: receive through the UDP socket instead (rdmesh-style peers only).
    #[arg(long, conflicts_with = "raw_rx")]
    pub no_raw_rx: bool,
    /// Test fault: send the N-th packet (1-based) with a corrupted ICRC.
    #[arg(long, hide = true)]
    pub corrupt_icrc_packet: Option<u64>,
    /// Impair this end's packets with a seeded impairment layer (with --loopback: both ends):
    /// comma-separated loss=P, dup=P, reorder=P, corrupt=P, delay=DURATION, delayp=P, ce=P,
    /// seed=N, with P such as 1% or 0.01 (example: loss=1%,dup=1%,reorder=1%,corrupt=1%,delay=100us).
    /// (Kept as text, checked by the parser, so the command enum stays small.)
    #[arg(long, value_parser = check_impair)]
    pub impair: Option<String>,
    /// Loss recovery of the QPs: go-back-n (IBTA, interoperable) or selective (IRN-style
    /// selective repeat; both ends must be rdmesh). The client's choice is sent to the server
    /// out of band; given on neither end, two rdmesh ends negotiate selective repeat
    /// (go-back-n with perftest peers, --perftest-compat, or a go-back-N-only device).
    #[arg(long, value_enum)]
    pub recovery: Option<RecoveryArg>,
    /// Print each end's QP and device counters at the end (key=value lines).
    #[arg(long)]
    pub counters: bool,
    /// DCQCN congestion control on this end's QP (with --loopback: both ends): CNPs cut the
    /// send rate, timers and the byte counter raise it (NVIDIA defaults; see docs/reliability.md).
    #[arg(long)]
    pub dcqcn: bool,
    /// With --dcqcn: line rate in Mb/s, the rate before any CNP (default 100000).
    #[arg(long, requires = "dcqcn", value_name = "MBPS")]
    pub dcqcn_line_rate: Option<u64>,
    /// With --dcqcn: rate floor in Mb/s (default 1).
    #[arg(long, requires = "dcqcn", value_name = "MBPS")]
    pub dcqcn_min_rate: Option<u64>,
    /// Bandwidth tests: print a `trace` line (goodput and DCQCN rate) every MS milliseconds
    /// while the client sends.
    #[arg(long, value_name = "MS")]
    pub report_interval: Option<u64>,
    /// Device provider: soft (RoCEv2 over a UDP socket), model (the mlx5 device model driven
    /// by the vfio provider, its port on a UDP socket), or vfio:BDF (a ConnectX function bound
    /// to vfio-pci). With --loopback: both ends.
    #[arg(long, value_parser = parse_provider, default_value = "soft")]
    pub provider: crate::verbs::ProviderKind,
}

/// Parses `--provider`.
pub fn parse_provider(s: &str) -> std::result::Result<crate::verbs::ProviderKind, String> {
    s.parse()
}

/// `--recovery` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RecoveryArg {
    /// IBTA go-back-N.
    GoBackN,
    /// IRN-style selective repeat.
    Selective,
}

impl From<RecoveryArg> for crate::verbs::Recovery {
    fn from(r: RecoveryArg) -> crate::verbs::Recovery {
        match r {
            RecoveryArg::GoBackN => crate::verbs::Recovery::GoBackN,
            RecoveryArg::Selective => crate::verbs::Recovery::Selective,
        }
    }
}

fn check_impair(s: &str) -> std::result::Result<String, String> {
    s.parse::<crate::soft::Impairment>()?;
    Ok(s.to_string())
}

/// `rdmesh bench` subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchSuite {
    /// All-pairs bandwidth matrix of a set of mesh endpoints (docs/mesh.md).
    Mesh(bench_mesh::MeshBenchArgs),
    /// Doorbell policies side by side: WQE/s, latency, MMIO and PCIe bytes per WQE (docs/doorbell.md).
    Doorbell(bench_doorbell::DoorbellBenchArgs),
}

/// Parses `4096`, `64K`, `1M` (binary multiples).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('k' | 'K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&s[..s.len() - 1], 1 << 20),
        Some('g' | 'G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("'{s}' is not a size (bytes, or a number with K/M/G)"))
}

impl BenchArgs {
    /// Turns the flags into options.
    pub fn options(&self) -> Result<BenchOptions> {
        if self.loopback && self.server.is_some() {
            return Err(Error::Config(
                "--loopback runs both ends; do not give a server address".into(),
            ));
        }
        if self.perftest_compat && self.recovery == Some(RecoveryArg::Selective) {
            return Err(Error::Config(
                "--recovery selective needs an rdmesh peer; perftest peers use go-back-N".into(),
            ));
        }
        if (self.compare_udp || self.compare_tcp) && !self.loopback {
            return Err(Error::Config(
                "--compare-udp and --compare-tcp need --loopback".into(),
            ));
        }
        if self.qps > 1 && (!self.loopback || self.lat) {
            return Err(Error::Config(
                "-q N runs N QP pairs in this process: it needs --loopback and a bandwidth test"
                    .into(),
            ));
        }
        if self.compare_loss_free && (!self.loopback || self.impair.is_none() || self.qps > 1) {
            return Err(Error::Config(
                "--compare-loss-free switches the impairment of one loopback pair: it needs --loopback and --impair, and one QP".into(),
            ));
        }
        if self.compare_udp && self.compare_tcp {
            return Err(Error::Config(
                "choose one reference: --compare-udp or --compare-tcp".into(),
            ));
        }
        if let Some(m) = self.mtu {
            if ![256, 512, 1024, 2048, 4096].contains(&m) {
                return Err(Error::Config(format!(
                    "-m {m}: the IB path MTU is one of 256, 512, 1024, 2048, 4096"
                )));
            }
        }
        let sizes = if self.all {
            (1..=23).map(|p| 1u64 << p).collect()
        } else {
            vec![self.size.unwrap_or(if self.lat { 2 } else { 65536 })]
        };
        let duration = match self.duration {
            Some(d) if d > 0.0 && d.is_finite() => Some(Duration::from_secs_f64(d)),
            Some(d) => {
                return Err(Error::Config(format!(
                    "-D {d}: the duration must be a positive number of seconds"
                )))
            }
            None => None,
        };
        Ok(BenchOptions {
            mode: self
                .mode
                .ok_or_else(|| Error::Config("give the operation: write, send or read".into()))?,
            server: self.server.clone(),
            tcp_port: self.port,
            sizes,
            iters: self
                .iters
                .unwrap_or(if self.lat { 1000 } else { 5000 })
                .max(1),
            duration,
            report_gbits: self.report_gbits,
            lat: self.lat,
            verify: self.verify,
            cycle_buffer: self.cycle_buffer.max(1),
            pcap: self.pcap.clone(),
            loopback: self.loopback,
            udp_port: self.udp_port,
            local_addr: self.bind,
            mtu: self.mtu,
            timeout: Duration::from_secs_f64(self.timeout.max(0.1)),
            compare_udp: self.compare_udp,
            compare_tcp: self.compare_tcp,
            compare_loss_free: self.compare_loss_free,
            qps: self.qps.max(1),
            quiet: false,
            cpus: self.cpus.as_deref().map(parse_cpu_list).transpose()?,
            perftest_compat: self.perftest_compat,
            raw_rx: self.raw_rx || (self.perftest_compat && !self.no_raw_rx),
            corrupt_tx_icrc: self.corrupt_icrc_packet,
            impair: self
                .impair
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e: String| Error::Config(format!("--impair: {e}")))?,
            recovery: self.recovery.map(Into::into),
            counters: self.counters,
            dcqcn: self.dcqcn.then(|| {
                let d = rdmesh_core::cc::DcqcnConfig::default();
                rdmesh_core::cc::DcqcnConfig {
                    line_rate_mbps: self.dcqcn_line_rate.unwrap_or(d.line_rate_mbps).max(1),
                    min_rate_mbps: self.dcqcn_min_rate.unwrap_or(d.min_rate_mbps).max(1),
                    ..d
                }
            }),
            report_interval: self.report_interval.map(Duration::from_millis),
            provider: self.provider.clone(),
        })
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Bench(args) => match &args.suite {
            Some(BenchSuite::Mesh(m)) => bench_mesh::run(m),
            Some(BenchSuite::Doorbell(d)) => bench_doorbell::run(d),
            None => crate::bench::run(&args.options()?),
        },
        Command::Pcap {
            command: PcapCommand::Decode { file, json },
        } => pcap::decode(&file, json, &mut std::io::stdout().lock()),
        Command::Topo(args) => topo::run(&args),
        Command::Pingpong(args) => pingpong::run(&args),
        Command::Mlx5(args) => mlx5::run(args).map_err(|e| Error::Config(e.to_string())),
        Command::Doctor(args) => doctor::run(&args),
        Command::Stats(args) => stats::run(&args),
        Command::ReferencePeer { kind, per_msg } => {
            crate::bench::reference::serve_peer(kind, per_msg)
        }
        Command::Fuzz(args) => fuzz::run(&args),
        Command::Devices => {
            for d in crate::verbs::Device::list()? {
                println!(
                    "{:<20} {:<6} netdev {:<12} GID {:<40} MTU {} (active {})",
                    d.name,
                    d.provider,
                    d.netdev,
                    d.addr,
                    d.netdev_mtu,
                    d.active_mtu().bytes()
                );
            }
            Ok(())
        }
    }
}
