#!/usr/bin/env bash
# The legs of one plugin message (docs/benchmarks.md, issue 12): the NCCL harness's ping-pong
# (tests/nccl/harness.c, latency scenario) with its per-turn timestamps (HX_TRACE), recorded
# with every syscall exit and context switch of both ranks in the same clock, then
# scripts/bench/plugin-legs.py: isend, isend -> wire, wire, wire -> test, irecv, total.
#
# Usage: scripts/bench/plugin-legs.sh PLUGIN_SO [OUT_DIR]
#   HX_SIZE (default 8192), HX_ITERS (3000), HX_RANK_ENV (one loopback address per rank),
#   PERF (the perf binary, default perf); the plugin's own settings come from the environment
#   (e.g. RDMESH_PROGRESS_THREADS=1).
# perf's tracing slows every syscall by a few µs: compare legs within one trace, and take
# the untraced half round trip from the harness's "latency" line.
set -euo pipefail
cd "$(dirname "$0")/../.."
PLUGIN=$(realpath "${1:?usage: plugin-legs.sh PLUGIN_SO [OUT_DIR]}")
OUT=${2:-/tmp/rdmesh-legs}
PERF=${PERF:-perf}
SIZE=${HX_SIZE:-8192}
mkdir -p "$OUT"
cc -O2 -Wall -Wextra -Werror -pthread -o "$OUT/harness" tests/nccl/harness.c -ldl -lm
HX_TRACE="$OUT/turns" HX_NO_TCP=1 HX_SIZE="$SIZE" HX_ITERS="${HX_ITERS:-3000}" HX_LOG_LEVEL=2 \
  HX_RANK_ENV="${HX_RANK_ENV:-RDMESH_NICS=lo=127.0.93.%r/24}" \
  $PERF record -k CLOCK_MONOTONIC -q -o "$OUT/perf.data" \
  -e raw_syscalls:sys_exit -e sched:sched_switch "$OUT/harness" "$PLUGIN" latency 12 \
  | grep -E "ping-pong|FAIL" || true
$PERF script -i "$OUT/perf.data" --ns -F pid,tid,time,event,trace 2>/dev/null \
  | grep -v " = -11$" > "$OUT/events.txt"
python3 scripts/bench/plugin-legs.py "$OUT/turns" "$OUT/events.txt" "$SIZE"
