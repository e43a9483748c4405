#!/usr/bin/env bash
# The soft provider against what a user would compare it with, each reference in a separate
# process in the same run (docs/benchmarks.md, issue 12): loopback WRITE bandwidth against one
# TCP stream, 8-byte WRITE/SEND latency against a UDP ping-pong (pinned to one CPU, to two, and
# unpinned), and `-q N` scaling. Three runs of each; the median is what docs/benchmarks.md reports.
#
# Usage: scripts/bench/soft-vs-kernel.sh [RDMESH_BINARY] [OUT_DIR]
#   OLD=path/to/old/rdmesh   also runs an older binary's bandwidth and latency (no references)
#   OLD_REFS=1               ... with the same references and pinning as BIN (an OLD binary that
#                            has --compare-tcp/--compare-udp/--cpus, 84da7aa or later)
#   QMAX=8                   largest -q (needs 2*QMAX cores to scale)
set -u
BIN=${1:-target/release/rdmesh}
OUT=${2:-/tmp/rdmesh-bench}
QMAX=${QMAX:-8}
export RDMESH_STATS=0
mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
last() { tail -n "$1" | tee -a "$OUT/summary.txt"; }
# The CPU belongs in every table: the same binary and references measure differently on another
# host (docs/benchmarks.md, 2026-11-28 15:45 UTC: the VM came back on an Intel host).
# cpuinfo FIELD: the first value of FIELD in /proc/cpuinfo ("?" when absent).
cpuinfo() {
  local v
  v=$(grep -m1 "^$1[[:space:]]*:" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  echo "${v:-?}"
}
log "$(date -u) $(nproc) CPUs ($(cpuinfo 'model name'), family $(cpuinfo 'cpu family') model $(cpuinfo model), $(cpuinfo 'cpu MHz') MHz), $(uname -r), $BIN"
# refs BIN TAG PIN...: bandwidth against TCP (1 MiB, 64 KiB), then 8-byte WRITE and SEND latency
# against the UDP ping-pong for each PIN (a --cpus list, or "none" for unpinned).
refs() {
  local bin=$1 tag=$2 s op pin
  shift 2
  for s in 1M 64K; do
    log "run $run: ${tag}write -s $s -D 4 --compare-tcp"
    "$bin" bench write --loopback -s "$s" -D 4 --compare-tcp 2>&1 | last 1
  done
  for op in write send; do
    for pin in "$@"; do
      if [ "$pin" = none ]; then
        log "run $run: ${tag}$op --lat -s 8 --compare-udp (unpinned)"
        "$bin" bench "$op" --loopback --lat -s 8 -n 20000 --compare-udp 2>&1 | last 1
      else
        log "run $run: ${tag}$op --lat -s 8 --cpus $pin --compare-udp"
        "$bin" bench "$op" --loopback --lat -s 8 -n 20000 --cpus "$pin" --compare-udp 2>&1 | last 1
      fi
    done
  done
}
for run in 1 2 3; do
  refs "$BIN" "" 0 0,1 none
  if [ -n "${OLD:-}" ] && [ -n "${OLD_REFS:-}" ]; then
    refs "$OLD" "OLD " 0
  elif [ -n "${OLD:-}" ]; then
    for s in 1M 64K; do
      log "run $run: OLD write -s $s -D 4"
      "$OLD" bench write --loopback -s "$s" -D 4 2>&1 | tail -n 2 | head -n 1 | last 1
    done
    for op in write send; do
      log "run $run: OLD $op --lat -s 8 (taskset -c 0)"
      taskset -c 0 "$OLD" bench "$op" --loopback --lat -s 8 -n 20000 2>&1 | tail -n 2 | head -n 1 | last 1
    done
  fi
done
q=1
while [ "$q" -le "$QMAX" ]; do
  log "write -s 64K -D 4 -q $q"
  "$BIN" bench write --loopback -s 64K -D 4 -q "$q" 2>&1 | grep aggregate | last 1
  if [ "$q" -eq 1 ]; then
    "$BIN" bench write --loopback -s 64K -D 4 2>&1 | tail -n 2 | head -n 1 | last 1
  fi
  q=$((q * 2))
done
