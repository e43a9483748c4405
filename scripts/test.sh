#!/usr/bin/env bash
# rdmesh's whole test suite: formatting, lints, unit/integration/conformance tests (tshark,
# scapy, live capture, mlx5dv.h, mlx5_ifc.h, netns + nftables, QEMU rxe and VFIO guests, the
# NCCL plugin harness, the mlx5 device model), the no_std build, and every fuzz target.
# Usage: bash scripts/test.sh        (FUZZ_SECONDS=30 per target by default)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RDMESH_REQUIRE_TOOLS=1
# Keep the build small on CI's disk: the debug and test builds carry line tables only (backtraces
# keep file:line) and no incremental cache. A clean run then writes ~3 GB under target/ instead of ~6 (measured 2026-11-27).
export CARGO_INCREMENTAL=0
export CARGO_PROFILE_DEV_DEBUG=line-tables-only
export CARGO_PROFILE_TEST_DEBUG=line-tables-only
echo "== disk: $(df -h --output=avail . | tail -n 1 | tr -d ' ') free where the build goes"
FUZZ_SECONDS=${FUZZ_SECONDS:-30}

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -q -- -D warnings
echo "== no_std: rdmesh-core for x86_64-unknown-none"
cargo build -q -p rdmesh-core --target x86_64-unknown-none
cargo build -q -p rdmesh-core --features defmt
echo "== build the rdmesh binary (release)"
cargo build -q --release -p rdmesh-host --bin rdmesh
export RDMESH_BIN="$PWD/target/release/rdmesh"
echo "== build the NCCL net plugin (libnccl-net-rdmesh.so)"
RDMESH_NCCL_PLUGIN="$(bash scripts/build-plugin.sh -q | tail -n 1)"
export RDMESH_NCCL_PLUGIN
echo "== tests"
cargo test --workspace -q -- --test-threads=2
echo "== benches build"
cargo bench --workspace --no-run -q
echo "== fuzz (${FUZZ_SECONDS}s per target)"
(
  cd fuzz
  for t in $(cargo fuzz list); do
    mkdir -p "corpus/$t"
    seeds=()
    [ -d "seeds/$t" ] && seeds=("seeds/$t")
    echo "-- fuzz $t"
    cargo fuzz run --sanitizer none "$t" "corpus/$t" "${seeds[@]}" -- -max_total_time="$FUZZ_SECONDS" -max_len=4200 2>&1 | tail -n 3
  done
)
echo "== all tests passed"
