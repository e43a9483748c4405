#!/usr/bin/env python3
"""Where one message of the plugin's ping-pong spends its time (docs/benchmarks.md, issue 12).

Lines up the harness's own timestamps (tests/nccl/harness.c, latency scenario, HX_TRACE) with
every syscall exit and context switch of both ranks (`perf record -k CLOCK_MONOTONIC -e
raw_syscalls:sys_exit -e sched:sched_switch`, `perf script --ns -F pid,tid,time,event,trace`)
and prints, per direction, the legs of a message from the sender's `isend` to the receiver's
completed `test`:

  isend              the sender's isend call, call to return
  isend -> wire      isend called -> the first send syscall of >= SIZE bytes in the sender's
                     process returned (posting, ICRC, sendmsg; with progress shards also the
                     hand-off to the shard's thread)
  wire               that send returned -> the first receive syscall of >= SIZE bytes in the
                     receiver's process returned
  wire -> test       that receive returned -> the receiver's test saw the receive complete
  irecv              the receiver's next irecv (receive done -> irecv returned)
  total              isend called -> the receiver's test saw it complete

Usage: plugin-legs.py TURNS_PREFIX EVENTS_TXT SIZE   (scripts/bench/plugin-legs.sh runs it all)
Times in µs: p10 / median / p90 over the turns after the first 10 %.
"""
import bisect
import re
import sys

SEND_NRS = {44, 46, 307}  # sendto, sendmsg, sendmmsg (x86-64)
RECV_NR = 47  # recvmsg
EVENT = re.compile(r"^\s*(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)$")


def read_turns(prefix, rank):
    with open(f"{prefix}.{rank}") as f:
        pid = int(f.readline().split()[1])
        rows = [[float(x) for x in line.split()] for line in f if line.strip()]
    return pid, {int(r[0]): [v * 1e6 for v in r[1:]] for r in rows}


def read_events(path, size):
    sends, recvs, switches = {}, {}, {}
    for line in open(path):
        m = EVENT.match(line)
        if not m:
            continue
        pid, _tid, t, event, rest = int(m[1]), int(m[2]), float(m[3]) * 1e6, m[4], m[5]
        if event == "raw_syscalls:sys_exit":
            s = re.match(r"NR (\d+) = (-?\d+)", rest)
            if not s or int(s[2]) < size:
                continue
            nr = int(s[1])
            if nr in SEND_NRS:
                sends.setdefault(pid, []).append(t)
            elif nr == RECV_NR:
                recvs.setdefault(pid, []).append(t)
        elif event == "sched:sched_switch":
            switches.setdefault(pid, []).append(t)
    for d in (sends, recvs, switches):
        for v in d.values():
            v.sort()
    return sends, recvs, switches


def after(times, t, limit=1000.0):
    i = bisect.bisect_left(times, t)
    if i < len(times) and times[i] - t <= limit:
        return times[i]
    return None


def between(times, a, b):
    return bisect.bisect_left(times, b) - bisect.bisect_left(times, a)


def q(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return "-"
    pick = lambda f: xs[min(len(xs) - 1, int(f * len(xs)))]
    return f"{pick(0.1):6.1f} / {pick(0.5):6.1f} / {pick(0.9):6.1f}"


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    prefix, events, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ranks = [read_turns(prefix, r) for r in (0, 1)]
    sends, recvs, switches = read_events(events, size)
    for r in (0, 1):
        (pid, mine), (peer_pid, theirs) = ranks[r], ranks[1 - r]
        legs = {k: [] for k in ("isend", "isend -> wire", "wire", "wire -> test", "irecv", "total")}
        sw = []
        turns = sorted(mine)
        for i in turns[len(turns) // 10:]:
            # Rank r's send of iteration i is the receive of iteration i at the peer.
            _, _, call, ret = mine[i]
            if i not in theirs:
                continue
            done, irecv_ret, _, _ = theirs[i]
            legs["isend"].append(ret - call)
            legs["total"].append(done - call)
            legs["irecv"].append(irecv_ret - done)
            left = after(sends.get(pid, []), call)
            if left is None or left > done:
                continue
            arrived = after(recvs.get(peer_pid, []), left)
            if arrived is None or arrived > done:
                continue
            legs["isend -> wire"].append(left - call)
            legs["wire"].append(arrived - left)
            legs["wire -> test"].append(done - arrived)
            sw.append(between(switches.get(pid, []), call, done)
                      + between(switches.get(peer_pid, []), call, done))
        n = len(legs["wire"])
        print(f"rank {r} -> rank {1 - r}: {n} messages of {size} bytes traced "
              f"(µs, p10 / median / p90)")
        for name, xs in legs.items():
            print(f"  {name:<14} {q(xs)}")
        if sw:
            print(f"  context switches in both processes per message: mean {sum(sw) / len(sw):.2f}")


if __name__ == "__main__":
    main()
