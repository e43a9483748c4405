#!/usr/bin/env bash
# User-space instructions per message of the pinned 8-byte ping-pong, and per 4 KiB packet of a
# 1 MiB WRITE stream, counted with valgrind's callgrind (docs/benchmarks.md, issue 12). On one
# CPU a ping-pong's half round trip is the CPU work of one message (kernel and user space), and
# the development VM times the same program in one of two modes; an instruction count does not
# depend on the mode. Each case runs twice with
# different lengths and reports the difference divided by the messages (or packets) between
# them, so start-up and teardown cancel out, then the functions with the most instructions of
# their own per message.
#
# Caveats: callgrind runs the program ~50x slower, so what depends on time runs more often
# than in a real run (a WRITE's held ACK reaches its coalescing bound every message, timers
# fall due more often): compare binaries with this script, not with a real run's profile. It
# also lacks AVX-512, so crc32fast takes its 128-bit path (more instructions per byte of the
# 4 KiB stream's ICRC than a real run on this CPU). Repeated runs of one binary differ by
# ~1-2 % (the same timing effects).
#
# Usage: scripts/bench/lat-instructions.sh [RDMESH_BINARY] [OUT_DIR]
#   TOP=15   functions listed per case
set -euo pipefail
BIN=${1:-target/release/rdmesh}
OUT=${2:-/tmp/rdmesh-instructions}
TOP=${TOP:-15}
export RDMESH_STATS=0
mkdir -p "$OUT"
command -v valgrind > /dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }

# count FILE ARGS...: runs ARGS under callgrind into FILE, prints the instructions counted.
count() {
  local file=$1
  shift
  valgrind --tool=callgrind --callgrind-out-file="$file" "$@" 2>&1 >/dev/null |
    awk '/I +refs:/ {gsub(",", "", $NF); print $NF}'
}

# per NAME UNITS SHORT LONG ARGS...: runs ARGS with "-n SHORT" and "-n LONG" and reports the
# instructions per unit (UNITS units between the two runs) and the top functions.
per() {
  local name=$1 units=$2 short=$3 long=$4
  shift 4
  local a b
  a=$(count "$OUT/$name-short.out" "$BIN" "$@" -n "$short")
  b=$(count "$OUT/$name-long.out" "$BIN" "$@" -n "$long")
  echo "== $name: $(((b - a) / units)) instructions per unit ($units units between -n $short and -n $long)"
  python3 - "$OUT/$name-short.out" "$OUT/$name-long.out" "$units" "$TOP" <<'PY'
import collections, re, subprocess, sys
def self_counts(path):
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", path],
                          capture_output=True, text=True, check=True).stdout
    counts = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S+?:(.*?)(\s*\[.*\])?$", line)
        if m and "PROGRAM TOTALS" not in line and not re.search(r"\(\d[\d,]*x\)", m.group(2)):
            counts[m.group(2)] += int(m.group(1).replace(",", ""))
    return counts
short, long_, units, top = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
a, b = self_counts(short), self_counts(long_)
diff = collections.Counter({k: b[k] - a[k] for k in set(a) | set(b)})
for name, n in diff.most_common(top):
    print(f"  {n / units:7.0f}  {name[:120]}")
PY
}

per write-lat 8000 2000 6000 bench write --loopback --lat -s 8 --cpus 0
per send-lat 8000 2000 6000 bench send --loopback --lat -s 8 --cpus 0
# 200 messages of 1 MiB between the runs, 256 packets each at loopback's path MTU of 4096.
per write-1M-per-packet 51200 100 300 bench write --loopback -s 1M
