#!/usr/bin/env bash
# What the plugin's threads do around one message (docs/benchmarks.md, issue 12): the NCCL
# harness's 8 KiB ping-pong (tests/nccl/harness.c, latency scenario) with uprobes on the mesh's
# shard round (`ConnShared::pump`), its bookkeeping (`Conn::progress`) and the harness's
# post_send/post_recv, and every syscall of both ranks; then scripts/bench/plugin-rounds.py:
# the syscalls of each round and of each isend/irecv, and the legs of a message across threads.
# Needs root (uprobes) and the plugin's symbol table (`strip --strip-debug` keeps it).
#
# Usage: scripts/bench/plugin-rounds.sh PLUGIN_SO [OUT_DIR]
#   HX_SIZE (8192), HX_ITERS (3000), HX_RANK_ENV (one loopback address per rank), PERF (perf);
#   the plugin's settings come from the environment (e.g. RDMESH_PROGRESS_THREADS=8).
# Each probe and traced syscall costs a microsecond or more: compare legs within one trace and
# take untraced times from the harness's "latency" line (printed first).
set -euo pipefail
cd "$(dirname "$0")/../.."
PLUGIN=$(realpath "${1:?usage: plugin-rounds.sh PLUGIN_SO [OUT_DIR]}")
OUT=${2:-/tmp/rdmesh-rounds}
PERF=${PERF:-perf}
mkdir -p "$OUT"
export HX_SIZE=${HX_SIZE:-8192} HX_LOG_LEVEL=2
export HX_RANK_ENV="${HX_RANK_ENV:-RDMESH_NICS=lo=127.0.93.%r/24}"
# -fno-inline: post_send/post_recv stay functions the probes can find.
cc -O2 -g -fno-inline -Wall -Wextra -Werror -pthread -o "$OUT/harness" tests/nccl/harness.c -ldl -lm
HX_ITERS=5000 "$OUT/harness" "$PLUGIN" latency 12 | grep -E "r1.*ping-pong|FAIL" || true
sym() { nm "$PLUGIN" | awk -v p="$1" '$3 ~ p && !f {print $3; f = 1}'; }
CP=$(sym '^_ZN11rdmesh_host4mesh4comm4Conn8progress17h')
PUMP=$(sym 'ConnShared.*Pump.*4pump17h')
[ -n "$CP" ] && [ -n "$PUMP" ] || { echo "no Conn::progress / ConnShared::pump symbol in $PLUGIN"; exit 1; }
$PERF probe -q -d 'probe_rounds:*' 2>/dev/null || true
$PERF probe -q -x "$PLUGIN" --no-demangle -a "probe_rounds:cp=$CP" -a "probe_rounds:cpx=$CP%return" \
  -a "probe_rounds:pump=$PUMP" -a "probe_rounds:pumpx=$PUMP%return"
$PERF probe -q -x "$OUT/harness" -a probe_rounds:post_send=post_send -a probe_rounds:post_sendx=post_send%return \
  -a probe_rounds:post_recv=post_recv -a probe_rounds:post_recvx=post_recv%return
trap '$PERF probe -q -d "probe_rounds:*" 2>/dev/null || true' EXIT
HX_NO_TCP=1 HX_ITERS=${HX_ITERS:-3000} $PERF record -q -o "$OUT/perf.data" -e 'probe_rounds:*' \
  -e raw_syscalls:sys_enter -e raw_syscalls:sys_exit "$OUT/harness" "$PLUGIN" latency 12 \
  | grep -E "ping-pong|FAIL" || true
$PERF script -i "$OUT/perf.data" --ns -F pid,tid,time,event,trace 2>/dev/null > "$OUT/events.txt"
python3 scripts/bench/plugin-rounds.py "$OUT/events.txt" "$HX_SIZE"
