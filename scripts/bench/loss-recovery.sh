#!/usr/bin/env bash
# Loss recovery of the soft provider (docs/reliability.md, issue 13): 64 KiB WRITE, SEND and
# READ over loopback, loss-free and at 0.1 %, 1 % and 5 % random loss (the impairment layer),
# go-back-N against selective repeat, three runs each; prints MB/s per run. "loss=0" runs
# without the impairment layer (GSO batches); "loss=0%" runs through it with nothing dropped,
# which sends one datagram per packet like every lossy run: the loss-free reference on the same
# path. LOSSES="0% 1%" picks the rates.
#
# Usage: scripts/bench/loss-recovery.sh [RDMESH_BINARY] [OUT_DIR]
set -u
BIN=${1:-target/release/rdmesh}
OUT=${2:-/tmp/rdmesh-loss}
RUNS=${RUNS:-3}
export RDMESH_STATS=0
mkdir -p "$OUT"
echo "== $(date -u) $(nproc) CPUs, $BIN" | tee -a "$OUT/loss.txt"
for op in write send read; do
  for loss in ${LOSSES:-0 0% 0.1% 1% 5%}; do
    for rec in go-back-n selective; do
      line="$op loss=$loss $rec:"
      for run in $(seq "$RUNS"); do
        if [ "$loss" = 0 ]; then
          imp=()
        else
          imp=(--impair "loss=$loss,seed=$run")
        fi
        bw=$("$BIN" bench "$op" --loopback -s 64K -D 4 "${imp[@]}" --recovery "$rec" 2>&1 \
          | awk '$1 == 65536 { print $4 }' | tail -n 1)
        line="$line ${bw:-fail}"
      done
      echo "$line" | tee -a "$OUT/loss.txt"
    done
  done
done
