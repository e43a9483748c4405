#!/usr/bin/env bash
# Per-message system calls, context switches and clock reads of the pinned 8-byte latency
# ping-pong (docs/benchmarks.md, issue 12), counted with perf: `perf stat` on the syscall
# tracepoints, and a uprobe on libc's clock_gettime (the uprobe slows every clock read down,
# so the run takes longer; the count per message is what it reports), and the rounds of the
# devices' progress threads (`--counters`; a spinning progress thread shows as several per
# message, ~0.03 since f58fe1a). Needs perf and root (or
# perf_event_paranoid -1). A message is one WRITE or SEND in one direction: -n 20000 runs 40000.
#
# Usage: scripts/bench/lat-profile.sh [RDMESH_BINARY]...
set -u
[ $# -eq 0 ] && set -- target/release/rdmesh
export RDMESH_STATS=0
N=20000
LIBC=$(ldd "$1" | awk '/libc.so.6/ {print $3}')
EVENTS='syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg,syscalls:sys_enter_sendmmsg,syscalls:sys_enter_recvmsg,syscalls:sys_enter_ppoll,syscalls:sys_enter_futex,syscalls:sys_enter_clock_nanosleep,context-switches'
perf probe -q -x "$LIBC" clock_gettime 2>/dev/null
trap 'perf probe -q -d probe_libc:clock_gettime 2>/dev/null' EXIT
for bin in "$@"; do
  for op in write send; do
    printf '%s %s:' "$bin" "$op"
    perf stat -x, -e "$EVENTS" -- "$bin" bench "$op" --loopback --lat -s 8 -n $N --cpus 0 2>&1 >/dev/null |
      awk -F, -v m=$((2 * N)) '$3 ~ /sys_enter|context/ {sub("syscalls:sys_enter_", "", $3); printf " %s %.3f", $3, $1 / m}'
    perf stat -x, -e probe_libc:clock_gettime -- "$bin" bench "$op" --loopback --lat -s 8 -n $N --cpus 0 2>&1 >/dev/null |
      awk -F, -v m=$((2 * N)) '$3 ~ /clock_gettime/ {printf " clock_gettime %.2f", $1 / m}'
    # Rounds of both devices' progress threads (binaries with the `progress_rounds` counter).
    "$bin" bench "$op" --loopback --lat -s 8 -n $N --cpus 0 --counters 2>&1 |
      grep -oE 'progress_rounds=[0-9]+' |
      awk -F= -v m=$((2 * N)) '{r += $2} END {if (NR) printf " progress_rounds %.3f", r / m}'
    echo
  done
done
