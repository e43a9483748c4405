//! `rdmesh fuzz`: structure-aware RoCEv2 fuzzing of other parsers (docs/fuzzing.md).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::error::{Error, Result};
use crate::fuzz::exec::{self, ExecOptions};
use crate::fuzz::peer::{self, Access, PeerOptions, Probe};

/// `rdmesh fuzz` arguments.
#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// What to fuzz.
    #[command(subcommand)]
    pub command: FuzzCommand,
}

/// `rdmesh fuzz` subcommands.
#[derive(Debug, Subcommand)]
pub enum FuzzCommand {
    /// Write generated frames as a pcap (Ethernet/IPv4|IPv6/UDP 4791) and run PROGRAM ARGS…
    /// PCAP; a run killed by a signal or outliving --timeout is a finding, minimized and saved.
    Exec(ExecArgs),
    /// Connect to a perftest server (ib_read_bw / ib_write_bw, or `rdmesh bench
    /// --perftest-compat`) and send generated frames around its live QPN, PSN window, R_Key
    /// and buffer, checking after every batch that it still answers.
    Peer(PeerArgs),
}

/// `rdmesh fuzz exec` arguments.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Iterations (one pcap and one run of the program each).
    #[arg(long, default_value_t = 1000)]
    pub iters: u64,
    /// First iteration (with --iters 1: regenerate one finding's original pcap).
    #[arg(long, default_value_t = 0)]
    pub first_iter: u64,
    /// Seed of every decision (the same seed gives the same frames).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Frames per pcap.
    #[arg(long, default_value_t = 32)]
    pub frames: usize,
    /// Directory for findings (created).
    #[arg(long, default_value = "rdmesh-fuzz-out")]
    pub out: PathBuf,
    /// Seconds after which a run is a hang (then killed with its process group).
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Stop after this many seconds even if iterations remain.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Stop after this many distinct findings (0: never).
    #[arg(long, default_value_t = 0)]
    pub max_findings: usize,
    /// Control run: random bytes, same frame count and lengths, instead of generated frames.
    #[arg(long)]
    pub random_bytes: bool,
    /// Most program runs spent minimizing one finding.
    #[arg(long, default_value_t = 400)]
    pub minimize_runs: u32,
    /// The program and its arguments; the pcap path is appended (e.g. `-- tshark -r`).
    #[arg(last = true, required = true)]
    pub program: Vec<String>,
}

/// `--probe` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProbeArg {
    /// 1-byte RDMA READ (ib_read_bw servers).
    Read,
    /// 1-byte RDMA WRITE with AckReq (ib_write_bw servers).
    Write,
}

/// `rdmesh fuzz peer` arguments.
#[derive(Debug, Args)]
pub struct PeerArgs {
    /// The perftest server's host or address.
    pub addr: String,
    /// Its TCP port (perftest's -p).
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// This end's address, announced as the GID (default: the route's source address).
    #[arg(long)]
    pub bind: Option<std::net::IpAddr>,
    /// Seed of every decision.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Generated frames to send.
    #[arg(long, default_value_t = 2000)]
    pub iters: u64,
    /// Frames between liveness probes.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// The server's message size (its -s): the length of the buffer it advertises.
    #[arg(short = 's', long, default_value_t = 65536)]
    pub size: u64,
    /// The server's iterations (its -n), sent back in the closing report.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub server_iters: u64,
    /// Path MTU this end announces (256..4096; the smaller end wins).
    #[arg(short = 'm', long, default_value_t = 1024)]
    pub mtu: u32,
    /// Milliseconds to wait for the reply to one frame.
    #[arg(long, default_value_t = 20)]
    pub reply_wait_ms: u64,
    /// Seconds to wait for the liveness probe's answer.
    #[arg(long, default_value_t = 2.0)]
    pub probe_timeout: f64,
    /// Seconds for the out-of-band exchange (and for the server to come up).
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// Directory for findings (created when there is one).
    #[arg(long, default_value = "rdmesh-fuzz-out")]
    pub out: PathBuf,
    /// A console log (e.g. a VM's serial output) to scan for kernel warnings after every batch.
    #[arg(long)]
    pub console: Option<PathBuf>,
    /// Connect again this many times after the peer's QP went to the error state (the peer
    /// must be restarted, e.g. by a shell loop).
    #[arg(long, default_value_t = 0)]
    pub reconnect: u32,
    /// The liveness probe.
    #[arg(long, value_enum, default_value_t = ProbeArg::Read)]
    pub probe: ProbeArg,
    /// Remote access rights of the peer's buffer, comma-separated from read, write, atomic
    /// (default: the probe's operation, as ib_read_bw / ib_write_bw register it). Valid
    /// frames use only these; `access-not-granted` frames use the others.
    #[arg(long, value_delimiter = ',')]
    pub mr_access: Vec<String>,
}

fn secs(what: &str, v: f64) -> Result<Duration> {
    if v.is_finite() && v > 0.0 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(Error::Config(format!(
            "{what} {v}: give a positive number of seconds"
        )))
    }
}

fn access(a: &PeerArgs) -> Result<Access> {
    if a.mr_access.is_empty() {
        return Ok(Access {
            read: a.probe == ProbeArg::Read,
            write: a.probe == ProbeArg::Write,
            atomic: false,
        });
    }
    let mut acc = Access::default();
    for w in &a.mr_access {
        match w.trim() {
            "read" => acc.read = true,
            "write" => acc.write = true,
            "atomic" => acc.atomic = true,
            other => {
                return Err(Error::Config(format!(
                    "--mr-access {other}: give read, write and/or atomic"
                )))
            }
        }
    }
    Ok(acc)
}

/// Runs `rdmesh fuzz`. Exit status: error when a finding was made, so scripts notice.
///
/// Errors: bad arguments, the target program or peer, or findings (after printing them).
pub fn run(args: &FuzzArgs) -> Result<()> {
    match &args.command {
        FuzzCommand::Exec(a) => {
            let opts = ExecOptions {
                program: a.program.clone(),
                iters: a.iters,
                first_iter: a.first_iter,
                seed: a.seed,
                frames: a.frames,
                out: a.out.clone(),
                timeout: secs("--timeout", a.timeout)?,
                duration: a.duration.map(|d| secs("--duration", d)).transpose()?,
                max_findings: a.max_findings,
                random_bytes: a.random_bytes,
                minimize_runs: a.minimize_runs,
            };
            let s = exec::run(&opts, &mut std::io::stderr())?;
            print!("{}", exec::summary_text(&opts, &s));
            if s.findings.is_empty() {
                Ok(())
            } else {
                Err(Error::Bench(format!(
                    "{} finding(s) saved in {}",
                    s.findings.len(),
                    opts.out.display()
                )))
            }
        }
        FuzzCommand::Peer(a) => {
            if ![256, 512, 1024, 2048, 4096].contains(&a.mtu) {
                return Err(Error::Config(format!(
                    "-m {}: the IB path MTU is one of 256, 512, 1024, 2048, 4096",
                    a.mtu
                )));
            }
            let opts = PeerOptions {
                addr: a.addr.clone(),
                port: a.port,
                bind: a.bind,
                seed: a.seed,
                frames: a.iters,
                batch: a.batch.max(1),
                size: a.size,
                server_iters: a.server_iters,
                mtu: a.mtu,
                reply_wait: Duration::from_millis(a.reply_wait_ms.max(1)),
                probe_timeout: secs("--probe-timeout", a.probe_timeout)?,
                timeout: secs("--timeout", a.timeout)?,
                out: a.out.clone(),
                console: a.console.clone(),
                reconnect: a.reconnect,
                probe: match a.probe {
                    ProbeArg::Read => Probe::Read,
                    ProbeArg::Write => Probe::Write,
                },
                access: access(a)?,
            };
            let s = peer::run(&opts)?;
            print!("{}", peer::summary_text(&opts, &s));
            if s.findings.is_empty() {
                Ok(())
            } else {
                Err(Error::Bench(format!(
                    "{} finding(s) saved in {}",
                    s.findings.len(),
                    opts.out.display()
                )))
            }
        }
    }
}
