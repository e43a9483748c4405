#!/usr/bin/env python3
"""Per-thread scheduler view of a NCCL run (docs/benchmarks.md, 2026-12-04 00:35 UTC).

  sched.py sample OUT STOPFILE [PATTERN]
      Every 20 ms reads /proc/PID/task/TID/schedstat (ns on the CPU, ns waiting in a run
      queue, timeslices) and the CPU last run on (/proc/.../stat field 39) of every thread of
      the processes whose command line matches PATTERN (a regular expression, default
      'bench\\.py|mps-server|torchrun'; the thread list is read again every 0.25 s). Writes to
      OUT a line "NEW t pid tid comm allowed=CPUS" per thread seen, and every 0.5 s a line
      "W t pid tid comm run=MS wait=MS maxwait=MS sw=N cpus=LIST" per thread that ran or
      waited in that window (maxwait: the largest run-queue wait of one 20 ms sample). Stops
      when STOPFILE exists. Start it before scripts/nccl-gpu/run.sh, touch STOPFILE after.

  sched.py summary OUT[.gz]
      For the processes that had rdmesh threads (the rdmesh torchrun) and the MPS server: per
      thread class (mesh shards, soft-device progress threads, python, ...) the run time, the
      run-queue wait, the switches, the wait per switch (us) and the largest maxwait (ms).
"""
import collections
import gzip
import os
import re
import sys
import time

PERIOD, WINDOW, RESCAN = 0.02, 0.5, 0.25


def sample(out, stopfile, pattern=r"bench\.py|mps-server|torchrun"):
    pat = re.compile(pattern)
    me = str(os.getpid())

    def procs():
        for p in os.listdir("/proc"):
            if not p.isdigit() or p == me:
                continue
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    cl = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if pat.search(cl):
                yield p

    t0 = time.time()
    prev, acc, seen = {}, {}, set()
    threads, last_scan, last_win = [], 0.0, t0
    with open(out, "w") as f:
        while not os.path.exists(stopfile):
            now = time.time()
            if now - last_scan >= RESCAN:
                last_scan, threads = now, []
                for p in list(procs()):
                    try:
                        threads += [(p, t) for t in os.listdir(f"/proc/{p}/task")]
                    except OSError:
                        continue
            for p, t in threads:
                d = f"/proc/{p}/task/{t}"
                try:
                    with open(d + "/comm") as x:
                        comm = x.read().strip().replace(" ", "_")
                    with open(d + "/schedstat") as x:
                        run, wait, n = map(int, x.read().split())
                    with open(d + "/stat") as x:
                        st = x.read()
                    cpu = int(st[st.rindex(")") + 2:].split()[36])
                except (OSError, ValueError, IndexError):
                    continue
                if (p, t) not in seen:
                    seen.add((p, t))
                    allowed = "?"
                    try:
                        with open(d + "/status") as x:
                            for line in x:
                                if line.startswith("Cpus_allowed_list"):
                                    allowed = line.split()[1]
                    except OSError:
                        pass
                    f.write(f"NEW {now - t0:.3f} {p} {t} {comm} allowed={allowed}\n")
                if (p, t) in prev:
                    pr, pw, pn = prev[(p, t)]
                    a = acc.setdefault((p, t), [0, 0, 0, 0, set(), comm])
                    a[0] += run - pr
                    a[1] += wait - pw
                    a[2] = max(a[2], wait - pw)
                    a[3] += n - pn
                    a[4].add(cpu)
                prev[(p, t)] = (run, wait, n)
            if now - last_win >= WINDOW:
                for (p, t), a in acc.items():
                    if a[0] or a[1]:
                        f.write(
                            f"W {now - t0:.3f} {p} {t} {a[5]} run={a[0] / 1e6:.2f} "
                            f"wait={a[1] / 1e6:.2f} maxwait={a[2] / 1e6:.2f} sw={a[3]} "
                            f"cpus={','.join(map(str, sorted(a[4])))}\n"
                        )
                acc.clear()
                last_win = now
                f.flush()
            time.sleep(PERIOD)


def summary(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().split("\n")
    rdmesh = {l.split()[2] for l in lines if l.startswith("NEW") and "rdmesh" in l}

    def cls(c):
        if c.startswith("rdmesh-mesh") and "hs" not in c:
            return "mesh"
        if c.startswith("rdmesh-soft"):
            return "soft"
        return "mps" if c.startswith("nvidia") else c[:8]

    agg = collections.defaultdict(lambda: [0.0, 0.0, 0, 0.0, set()])
    for l in lines:
        if not l.startswith("W"):
            continue
        w = l.split()
        if w[2] not in rdmesh and not w[4].startswith("nvidia"):
            continue
        kv = dict(x.split("=", 1) for x in w[5:])
        a = agg[cls(w[4])]
        a[0] += float(kv["run"])
        a[1] += float(kv["wait"])
        a[2] += int(kv["sw"])
        a[3] = max(a[3], float(kv["maxwait"]))
        a[4].add(w[3])
    for k, (r, w, n, m, tids) in sorted(agg.items(), key=lambda x: -x[1][0]):
        if r >= 20:
            print(
                f"  {k:10s} threads={len(tids):2d} run={r:8.1f}ms wait={w:7.2f}ms sw={n:7d} "
                f"wait/sw={1000 * w / max(n, 1):6.2f}us maxwait={m:5.2f}ms"
            )


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "sample":
        sample(*sys.argv[2:5])
    elif len(sys.argv) == 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
    else:
        sys.exit(__doc__)
