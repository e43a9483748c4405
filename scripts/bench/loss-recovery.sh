#!/usr/bin/env bash
# Loss recovery of the soft provider (docs/reliability.md, issue 13): 64 KiB WRITE, SEND and
# READ over loopback, loss-free and at 0.1 %, 1 % and 5 % random loss (the impairment layer),
# go-back-N against selective repeat, three runs each; prints MB/s per run. "loss=0" runs
# without the impairment layer; "loss=0%" runs through it with nothing dropped. Both take the
# same path (GSO batches gathered from the region): the layer sends each run of packets that
# pass it as one GSO send, so a lossy run is compared with the real loss-free path.
# LOSSES="0% 1%" picks the rates, OPS="send" the operations.
#
# INTERLEAVE=1: repetitions outermost — each repetition (seed = its number) runs every op ×
# loss × mode once — so that a machine whose load drifts (a shared VM) affects every cell
# alike; one line per run with the requester's retransmissions and timeouts and the packets
# the impairment layer dropped (client, server). docs/reliability.md's table was made so.
#
# SPLIT=1: each lossy cell once per repetition with `--compare-loss-free` (selective repeat):
# the impairment is switched on and off every 250 ms on one connection, and the line gives the
# impaired periods' goodput ÷ the loss-free periods' — the reference in the same run, which a
# drifting machine cannot separate from the result.
#
# Usage: scripts/bench/loss-recovery.sh [RDMESH_BINARY] [OUT_DIR]
set -u
BIN=${1:-target/release/rdmesh}
OUT=${2:-/tmp/rdmesh-loss}
RUNS=${RUNS:-3}
export RDMESH_STATS=0
mkdir -p "$OUT"
echo "== $(date -u) $(nproc) CPUs, $BIN" | tee -a "$OUT/loss.txt"

# The client QP's resends and retransmit timeouts in `--counters` output $1, on one line.
client_retx() {
  echo "$1" | grep "counters client qp" \
    | grep -oE " (retransmitted_packets|timeouts)=[0-9]+" | tr -d '\n'
}

impair() {
  if [ "$1" = 0 ]; then
    imp=()
  else
    imp=(--impair "loss=$1,seed=$2")
  fi
}

if [ "${SPLIT:-0}" = 1 ]; then
  for run in $(seq "$RUNS"); do
    for op in ${OPS:-write send read}; do
      for loss in ${LOSSES:-0.1% 1% 5%}; do
        out=$("$BIN" bench "$op" --loopback -s 64K -D 4 --impair "loss=$loss,seed=$run" \
          --recovery selective --compare-loss-free --counters 2>&1)
        split=$(echo "$out" | grep "impaired / loss-free periods" | sed 's/^ *//')
        qp=$(client_retx "$out")
        echo "run=$run $op loss=$loss selective: ${split:-fail}$qp load=$(cut -d' ' -f1 /proc/loadavg)" \
          | tee -a "$OUT/loss.txt"
      done
    done
  done
  exit 0
fi

if [ "${INTERLEAVE:-0}" = 1 ]; then
  for run in $(seq "$RUNS"); do
    for op in ${OPS:-write send read}; do
      for loss in ${LOSSES:-0 0% 0.1% 1% 5%}; do
        for rec in go-back-n selective; do
          impair "$loss" "$run"
          out=$("$BIN" bench "$op" --loopback -s 64K -D 4 "${imp[@]}" --recovery "$rec" \
            --counters 2>&1)
          bw=$(echo "$out" | awk '$1 == 65536 { print $4 }' | tail -n 1)
          qp=$(client_retx "$out")
          dropped=$(echo "$out" | grep -E "counters (client|server) device" \
            | grep -oE " impair.dropped=[0-9]+" | tr -d '\n')
          echo "run=$run $op loss=$loss $rec: ${bw:-fail}$qp$dropped load=$(cut -d' ' -f1 /proc/loadavg)" \
            | tee -a "$OUT/loss.txt"
        done
      done
    done
  done
  exit 0
fi

for op in ${OPS:-write send read}; do
  for loss in ${LOSSES:-0 0% 0.1% 1% 5%}; do
    for rec in go-back-n selective; do
      line="$op loss=$loss $rec:"
      for run in $(seq "$RUNS"); do
        impair "$loss" "$run"
        bw=$("$BIN" bench "$op" --loopback -s 64K -D 4 "${imp[@]}" --recovery "$rec" 2>&1 \
          | awk '$1 == 65536 { print $4 }' | tail -n 1)
        line="$line ${bw:-fail}"
      done
      echo "$line" | tee -a "$OUT/loss.txt"
    done
  done
done
