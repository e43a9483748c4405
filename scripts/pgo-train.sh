#!/usr/bin/env bash
# Regenerates pgo/rdmesh.profdata, the profile-guided optimization (PGO) profile that every
# release build of this workspace uses (.cargo/config.toml passes it to rustc with
# `-Cprofile-use`; docs/building.md says why and what it buys).
#
# Builds an instrumented `rdmesh` binary and NCCL plugin (`-Cprofile-generate`, in
# target/pgo-generate: the RUSTFLAGS variable replaces the config's flags, so the old profile
# plays no part), runs the workloads below, and merges what they counted into a sparse profile
# (functions that never ran are left out: they are compiled as without PGO, not as cold code).
# Run it after changes to the data path; a stale profile is safe (LLVM ignores the records of
# functions whose control flow changed, `-no-pgo-warn-mismatch`), it only helps less.
#
# Needs the toolchain's llvm-profdata (`rustup component add llvm-tools`) and a C compiler for
# the NCCL harness. Takes ~5 minutes on 2 CPUs.
#
# Usage: bash scripts/pgo-train.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
sysroot=$(rustc --print sysroot)
profdata=$(ls "$sysroot"/lib/rustlib/*/bin/llvm-profdata 2>/dev/null | head -n 1)
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
cargo build -q --release -p rdmesh-host --bin rdmesh
plugin=$(bash scripts/build-plugin.sh -q | tail -n 1)
harness=$out/harness
cc -O2 -pthread -o "$harness" tests/nccl/harness.c -ldl -lm
bin=$out/release/rdmesh
export RDMESH_STATS=0

run() {
  echo "pgo-train: $*" >&2
  "$@" > /dev/null
}
# The pinned and unpinned 8-byte ping-pongs (issue 12's latency rows), and READ.
for op in write send; do
  run "$bin" bench "$op" --loopback --lat -s 8 -n 20000 --cpus 0
  run "$bin" bench "$op" --loopback --lat -s 8 -n 10000
  run "$bin" bench "$op" --loopback --lat -s 4096 -n 5000
done
run "$bin" bench read --loopback --lat -s 8 -n 5000
# Streams: both recovery modes, WRITE/SEND/READ, several QPs, and loss (the recovery paths).
for size in 64K 1M; do
  run "$bin" bench write --loopback -s "$size" -D 2
  run "$bin" bench write --loopback -s "$size" -D 2 --recovery go-back-n
done
run "$bin" bench send --loopback -s 64K -D 2
run "$bin" bench read --loopback -s 64K -D 2
run "$bin" bench write --loopback -s 64K -D 2 -q 2
for recovery in selective go-back-n; do
  run "$bin" bench write --loopback -s 64K -D 2 --recovery "$recovery" --impair loss=1%,seed=1
done
# The NCCL plugin, as NCCL drives it: small-message ping-pong, a stream, every size checked.
export HX_LOG_LEVEL=2
export HX_RANK_ENV='RDMESH_NICS=lo=127.0.93.%r/24'
HX_SIZE=8192 HX_ITERS=5000 run "$harness" "$plugin" latency 12
HX_SECONDS=2 run "$harness" "$plugin" bandwidth 12
run "$harness" "$plugin" sizes 12

mkdir -p pgo
rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p' > pgo/rdmesh.llvm
"$profdata" merge --sparse -o pgo/rdmesh.profdata "$raw"
echo "pgo-train: wrote pgo/rdmesh.profdata ($(du -k pgo/rdmesh.profdata | cut -f1) KiB) from $(ls "$raw" | wc -l) runs" >&2
