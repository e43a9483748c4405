//! `rdmesh bench mesh`: the all-pairs bandwidth matrix of a set of mesh endpoints (see
//! [`crate::mesh::bench`]).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::mesh::bench::{self, MeshBenchOptions};
use crate::mesh::MeshConfig;

/// `rdmesh bench mesh` arguments. Run one endpoint per node with the same `--world` and
/// `--rendezvous`; rank 0 prints the matrix. The node's NICs and the mesh settings come from
/// the `RDMESH_*` environment variables (`docs/mesh.md`).
#[derive(Debug, Clone, clap::Args)]
pub struct MeshBenchArgs {
    /// Number of endpoints (one per node).
    #[arg(long, default_value_t = 2)]
    pub world: usize,
    /// This endpoint's rank, 0 to world-1; rank 0 coordinates and prints the matrix.
    #[arg(long, default_value_t = 0)]
    pub rank: usize,
    /// Rank 0's rendezvous address HOST:PORT: rank 0 listens there, every rank connects there
    /// (a management network address, as NCCL's bootstrap uses).
    #[arg(long)]
    pub rendezvous: Option<String>,
    /// Run N endpoints in this process over loopback instead (a self-test of the machinery).
    #[arg(long, value_name = "N")]
    pub loopback: Option<usize>,
    /// Message size in bytes (suffixes K, M, G accepted).
    #[arg(short = 's', long, value_parser = super::parse_size, default_value = "1M")]
    pub size: u64,
    /// Messages timed per pair.
    #[arg(short = 'n', long, default_value_t = 32)]
    pub iters: usize,
    /// Seconds to wait for the other endpoints, and for each pair.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// Print the matrix as JSON.
    #[arg(long)]
    pub json: bool,
    /// Device provider of this node's NICs: soft, model or vfio:BDF (default: RDMESH_PROVIDER,
    /// else soft).
    #[arg(long, value_parser = super::parse_provider)]
    pub provider: Option<crate::verbs::ProviderKind>,
}

/// Runs `rdmesh bench mesh`; rank 0 (or `--loopback`) prints the matrix to stdout.
///
/// Errors: bad arguments ([`Error::Config`]); mesh and rendezvous failures.
pub fn run(args: &MeshBenchArgs) -> Result<()> {
    if !(args.timeout > 0.0 && args.timeout.is_finite()) {
        return Err(Error::Config(format!(
            "--timeout {}: a positive number of seconds",
            args.timeout
        )));
    }
    if args.iters == 0 {
        return Err(Error::Config("-n 0: at least one message per pair".into()));
    }
    let size = usize::try_from(args.size)
        .ok()
        .filter(|&s| s <= 1 << 30)
        .ok_or_else(|| Error::Config(format!("-s {}: at most 1 GiB per message", args.size)))?;
    let timeout = Duration::from_secs_f64(args.timeout);
    let matrix = match (args.loopback, &args.rendezvous) {
        (Some(n), None) => {
            if !(2..=bench::MAX_WORLD).contains(&n) {
                return Err(Error::Config(format!(
                    "--loopback {n}: 2 to {} endpoints",
                    bench::MAX_WORLD
                )));
            }
            let provider = match &args.provider {
                Some(p) => p.clone(),
                None => crate::verbs::ProviderKind::from_env()?.unwrap_or_default(),
            };
            Some(bench::run_loopback_with(
                n,
                size,
                args.iters,
                timeout,
                provider,
            )?)
        }
        (None, Some(rv)) => bench::run(&MeshBenchOptions {
            world: args.world,
            rank: args.rank,
            rendezvous: rv.clone(),
            size,
            iters: args.iters,
            timeout,
            config: {
                let mut c = MeshConfig::from_env()?;
                if args.provider.is_some() {
                    c.provider = args.provider.clone();
                }
                c
            },
        })?,
        (Some(_), Some(_)) => {
            return Err(Error::Config(
                "--loopback runs every endpoint here; do not give --rendezvous".into(),
            ))
        }
        (None, None) => {
            return Err(Error::Config(
                "give --rendezvous HOST:PORT (rank 0's address) with --world and --rank, or --loopback N".into(),
            ))
        }
    };
    if let Some(m) = matrix {
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&m).map_err(|e| Error::Bench(e.to_string()))?
            );
        } else {
            print!("{}", m.render());
        }
    }
    Ok(())
}
