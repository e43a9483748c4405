//! The `rdmesh` command-line tool.

use clap::Parser;

fn main() {
    let cli = rdmesh_host::cli::Cli::parse();
    let filter = cli
        .log
        .clone()
        .or_else(|| std::env::var("RDMESH_LOG").ok())
        .unwrap_or_else(|| "warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&filter)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = rdmesh_host::cli::run(cli) {
        eprintln!("rdmesh: error: {e}");
        std::process::exit(1);
    }
}
