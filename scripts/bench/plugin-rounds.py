#!/usr/bin/env python3
"""The plugin's threads around one message (docs/benchmarks.md, issue 12).

Reads `perf script --ns -F pid,tid,time,event,trace` of the harness's ping-pong recorded with
the uprobes of scripts/bench/plugin-rounds.sh (group probe_rounds: pump/pumpx = a mesh shard's
round `ConnShared::pump`, cp/cpx = its bookkeeping `Conn::progress` under the connection's lock,
post_send/post_recv = the harness's isend/irecv) and every syscall, and prints:

  rounds   per thread, the commonest rounds that received or sent something: their syscalls in
           order, recvmsg with its result (`-` = nothing queued), `[cp ... cp]` marking the
           part under the lock, and the median round in µs
  calls    per harness thread, isend/irecv with the syscalls made inside them
  legs     per direction, a message across threads: isend called -> the sender's process
           returned from a send of SIZE+ bytes -> the receiver's process returned from a
           receive of SIZE+ bytes -> the end of the next Conn::progress on that thread -> the
           receiver's next irecv called (its test saw the receive) -> its isend called

Usage: plugin-rounds.py EVENTS_TXT SIZE. Times: µs, p10 / median / p90, traced (slower).
"""
import bisect
import collections
import re
import statistics
import sys

NAMES = {"44": "sendto", "46": "sendmsg", "47": "recvmsg", "202": "futex", "24": "yield",
         "307": "sendmmsg", "7": "poll", "271": "ppoll", "1": "write"}
UPROBE_RETURN_SYSCALL = "335"  # uretprobe (Linux 6.11+): the return probes' own trap
EVENT = re.compile(r"^\s*(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)$")


def read(path):
    ev = collections.defaultdict(list)  # tid -> [(t, kind, value)]
    pid_of = {}
    for line in open(path):
        m = EVENT.match(line)
        if not m:
            continue
        pid, tid, t, event, trace = m.groups()
        t = float(t) * 1e6
        pid_of[tid] = pid
        if event.endswith("sys_enter"):
            nr = trace.split()[1].rstrip(",")
            if nr != UPROBE_RETURN_SYSCALL:
                ev[tid].append((t, "enter", NAMES.get(nr, nr)))
        elif event.endswith("sys_exit"):
            parts = trace.split()
            if parts[1] != UPROBE_RETURN_SYSCALL:
                ev[tid].append((t, "exit", (NAMES.get(parts[1], parts[1]), int(parts[-1]))))
        else:
            name = event.split(":")[1].replace("__return", "")
            ev[tid].append((t, "probe", name))
    return ev, pid_of


def pct(v):
    v = sorted(v)
    return v[len(v) // 10], statistics.median(v), v[9 * len(v) // 10]


def rounds(ev):
    for tid, evs in ev.items():
        seqs, took, cur, t0 = collections.Counter(), collections.defaultdict(list), None, 0.0
        for t, kind, v in evs:
            if kind == "probe" and v == "pump":
                cur, t0 = [], t
            elif kind == "probe" and v == "pumpx" and cur is not None:
                s = tuple(cur)
                if any(x.startswith("send") or (x.startswith("recvmsg(") and x != "recvmsg(-)") for x in s):
                    seqs[s] += 1
                    took[s].append(t - t0)
                cur = None
            elif cur is None:
                continue
            elif kind == "probe" and v in ("cp", "cpx"):
                cur.append("[cp" if v == "cp" else "cp]")
            elif kind == "enter":
                cur.append(v)
            elif kind == "exit" and v[0] == "recvmsg" and cur and cur[-1] == "recvmsg":
                cur[-1] = "recvmsg(%s)" % ("-" if v[1] < 0 else v[1])
        if seqs:
            print(f"rounds, thread {tid} ({sum(seqs.values())} that moved something)")
            for s, n in seqs.most_common(10):
                print(f"  {n:6d} x {statistics.median(took[s]):6.1f} µs: {' '.join(s)}")


def calls(ev):
    for tid, evs in ev.items():
        seqs, took, cur = collections.Counter(), collections.defaultdict(list), None
        for t, kind, v in evs:
            if kind == "probe" and v in ("post_send", "post_recv"):
                cur = (v, t, [])
            elif kind == "probe" and v in ("post_sendx", "post_recvx") and cur:
                s = (cur[0],) + tuple(cur[2])
                seqs[s] += 1
                took[s].append(t - cur[1])
                cur = None
            elif cur and kind == "enter":
                cur[2].append(v)
        if seqs:
            print(f"calls, thread {tid}")
            for s, n in seqs.most_common(6):
                print(f"  {n:6d} x {statistics.median(took[s]):6.1f} µs: {' '.join(s)}")


def legs(ev, pid_of, size):
    by_pid = collections.defaultdict(list)
    for tid, evs in ev.items():
        for t, kind, v in evs:
            by_pid[pid_of[tid]].append((t, tid, kind, v))
    for p in by_pid.values():
        p.sort()
    ranks = sorted(p for p, e in by_pid.items() if any(k == "probe" and v == "post_send" for _, _, k, v in e))
    if len(ranks) != 2:
        print("legs: need two ranks with post_send probes")
        return
    for a, b in ((ranks[0], ranks[1]), (ranks[1], ranks[0])):
        ea, eb = by_pid[a], by_pid[b]
        isend = [t for t, _, k, v in ea if k == "probe" and v == "post_send"]
        sent = [t for t, _, k, v in ea if k == "exit" and v[0] in ("sendmsg", "sendto") and v[1] >= size]
        got = [(t, tid) for t, tid, k, v in eb if k == "exit" and v[0] == "recvmsg" and v[1] >= size]
        got_t = [t for t, _ in got]
        cp_end = collections.defaultdict(list)
        for t, tid, k, v in eb:
            if k == "probe" and v == "cpx":
                cp_end[tid].append(t)
        irecv = [t for t, _, k, v in eb if k == "probe" and v == "post_recv"]
        isend_b = [t for t, _, k, v in eb if k == "probe" and v == "post_send"]

        def after(xs, t):
            i = bisect.bisect_left(xs, t)
            return xs[i] if i < len(xs) else None

        rows = collections.defaultdict(list)
        for t1 in isend[len(isend) // 10:]:
            t2 = after(sent, t1)
            i3 = bisect.bisect_left(got_t, t2) if t2 is not None else len(got)
            if i3 >= len(got):
                continue
            t3, tid3 = got[i3]
            t4, t5 = after(cp_end[tid3], t3), after(irecv, t3)
            t6 = after(isend_b, t5) if t5 is not None else None
            if None in (t4, t5, t6):
                continue
            for name, x, y in (("isend -> send returned", t1, t2), ("send -> receive returned", t2, t3),
                               ("receive -> its Conn::progress ended", t3, t4),
                               ("receive -> next irecv called", t3, t5), ("irecv -> isend called", t5, t6),
                               ("isend -> the reply's isend called", t1, t6)):
                rows[name].append(y - x)
        print(f"legs, rank {a} -> rank {b} (µs p10 / median / p90, traced)")
        for name, v in rows.items():
            print("  %-36s %6.1f / %6.1f / %6.1f  (n=%d)" % ((name,) + pct(v) + (len(v),)))


def main():
    ev, pid_of = read(sys.argv[1])
    size = int(sys.argv[2])
    rounds(ev)
    calls(ev)
    legs(ev, pid_of, size)


if __name__ == "__main__":
    main()
