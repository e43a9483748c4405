#!/usr/bin/env bash
# Regenerates pgo/rdmesh.profdata, the profile-guided optimization (PGO) profile that every
# release build of this workspace uses (.cargo/config.toml passes it to rustc with
# `-Cprofile-use`; docs/building.md says why and what it buys).
#
# Builds an instrumented `rdmesh` binary (`-Cprofile-generate`, in
# target/pgo-generate: the RUSTFLAGS variable replaces the config's flags, so the old profile
# plays no part), runs the workloads below, and merges what they counted into a sparse profile
# (functions that never ran are left out: they are compiled as without PGO, not as cold code).
# Run it after changes to the data path; a stale profile is safe (LLVM ignores the records of
# functions whose control flow changed, `-no-pgo-warn-mismatch`), it only helps less.
#
# Needs the toolchain's llvm-profdata (`rustup component add llvm-tools`). Takes ~3 minutes on
# 2 CPUs (most of it the instrumented build).
#
# Usage: bash scripts/pgo-train.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
sysroot=$(rustc --print sysroot)
profdata=$(ls "$sysroot"/lib/rustlib/*/bin/llvm-profdata 2>/dev/null | head -n 1 || true)
[ -x "$profdata" ] || {
  echo "pgo-train: no llvm-profdata in $sysroot; run: rustup component add llvm-tools" >&2
  exit 1
}
out=$root/target/pgo-generate
raw=$out/raw
rm -rf "$raw"
mkdir -p "$raw"
export CARGO_TARGET_DIR=$out
export RUSTFLAGS="-Cprofile-generate=$raw"
# Build scripts and proc macros are instrumented too and run during the build: their counts go
# elsewhere, not into the profile.
LLVM_PROFILE_FILE="$out/build-scripts/%m.profraw" cargo build -q --release -p rdmesh-host --bin rdmesh
bin=$out/release/rdmesh
export RDMESH_STATS=0

# run GROUP COMMAND...: runs COMMAND, its profile counts merged into GROUP-<n>.profraw (`%m`:
# merge mode, one file per group).
runs=0
run() {
  local group=$1
  shift
  runs=$((runs + 1))
  echo "pgo-train: [$group] $*" >&2
  LLVM_PROFILE_FILE="$raw/$group-%m.profraw" "$@" > /dev/null
}
# The pinned and unpinned 8-byte ping-pongs (issue 12's latency rows), and READ.
for op in write send; do
  run small "$bin" bench "$op" --loopback --lat -s 8 -n 20000 --cpus 0
  run small "$bin" bench "$op" --loopback --lat -s 8 -n 10000
  run small "$bin" bench "$op" --loopback --lat -s 4096 -n 5000
done
run small "$bin" bench read --loopback --lat -s 8 -n 5000
# Streams: both recovery modes, WRITE/SEND/READ, several QPs, and loss (the recovery paths).
for size in 64K 1M; do
  run stream "$bin" bench write --loopback -s "$size" -D 2
  run stream "$bin" bench write --loopback -s "$size" -D 2 --recovery go-back-n
done
run stream "$bin" bench send --loopback -s 64K -D 2
run stream "$bin" bench read --loopback -s 64K -D 2
run stream "$bin" bench write --loopback -s 64K -D 2 -q 2
for recovery in selective go-back-n; do
  run stream "$bin" bench write --loopback -s 64K -D 2 --recovery "$recovery" --impair loss=1%,seed=1
done
# The mesh transport that the NCCL plugin runs on (the plugin's own entry points are not in the
# profile: the NCCL harness's ranks end with _exit, before an instrumented plugin would write
# its counts), small messages and large.
run small "$bin" bench mesh --loopback 2 -s 8K -n 50000
run stream "$bin" bench mesh --loopback 2 -s 1M -n 2000

mkdir -p pgo
rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p' > pgo/rdmesh.llvm
# The streams run millions of packets through the bulk path; the small-message runs (the
# latency path) weigh SMALL_WEIGHT times as much, so that LLVM counts their code as hot too.
inputs=()
for f in "$raw"/small-*.profraw; do
  inputs+=("--weighted-input=${SMALL_WEIGHT:-10},$f")
done
for f in "$raw"/stream-*.profraw; do
  inputs+=("--weighted-input=1,$f")
done
"$profdata" merge --sparse -o pgo/rdmesh.profdata "${inputs[@]}"
echo "pgo-train: wrote pgo/rdmesh.profdata ($(du -k pgo/rdmesh.profdata | cut -f1) KiB) from $runs runs" >&2
