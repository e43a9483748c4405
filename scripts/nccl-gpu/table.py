#!/usr/bin/env python3
"""Merges bench.py's two JSON-lines outputs (rdmesh, Socket) into the markdown table of
docs/benchmarks.md.

Usage: table.py RDMESH.jsonl SOCKET.jsonl [--commit C] [--date D] [--out FILE]

Output: a header (date, GPU, NCCL version, torch, commit, environment) and one table row per
(op, size) in either file: op, size, busbw rdmesh (GB/s), busbw Socket (GB/s), and the ratio
rdmesh / Socket; when either file was written with bench.py --iter-stats, two more columns:
the median single op (µs) and the slowest single op (ms), rdmesh / Socket — a stall shows
there as a slowest op far above the median. A size or figure missing from one file shows "–". busbw is nccl-tests' bus bandwidth
(doc/PERFORMANCE.md), 1 GB = 1e9 bytes. Exits with status 1 and a message on unreadable input,
on files that disagree on the number of ranks, or on a result line that bench.py did not mark
as checked (bench.py --dry-run lines are accepted, and the header then says they are modelled).
"""

import argparse
import json
import sys

OP_ORDER = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")


def load(path):
    meta, rows = {}, {}
    with open(path) as f:
        for no, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"table.py: {path}:{no}: not JSON ({e})")
            kind = rec.get("type")
            if kind == "meta":
                meta = rec
            elif kind == "result":
                for k in ("op", "bytes", "busbw_GBps", "nranks"):
                    if k not in rec:
                        raise SystemExit(f"table.py: {path}:{no}: result without {k!r}")
                if not rec.get("checked") and not rec.get("dry_run"):
                    raise SystemExit(f"table.py: {path}:{no}: result not checked by bench.py")
                rows[(rec["op"], int(rec["bytes"]))] = rec
            else:
                raise SystemExit(f"table.py: {path}:{no}: unknown line type {kind!r}")
    if not rows:
        raise SystemExit(f"table.py: {path}: no result lines")
    return meta, rows


def fmt_size(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def fmt_bw(x):
    if x is None:
        return "–"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    if x >= 0.01:
        return f"{x:.3f}"
    return f"{x:.5f}"


def table(rd_meta, rd, so_meta, so, commit=None, date=None):
    n = {r["nranks"] for r in list(rd.values()) + list(so.values())}
    if len(n) != 1:
        raise SystemExit(f"table.py: the files disagree on the number of ranks: {sorted(n)}")
    nranks = n.pop()
    m = rd_meta or so_meta
    dry = any(x.get("dry_run") for x in (rd_meta, so_meta)) or any(
        r.get("dry_run") for r in list(rd.values()) + list(so.values())
    )
    date = date or m.get("date", "unknown")
    commit = commit or m.get("commit", "unknown")
    gpu = m.get("gpu", "unknown")
    gpus = m.get("gpus", nranks)
    lines = []
    if dry:
        lines.append("> **Dry run: modelled numbers, not measurements.**")
        lines.append("")
    lines.append(f"- Date: {date}")
    shared = (
        ", the ranks sharing the GPU (bench.py --share-gpu: one NCCL_HOSTID per rank)"
        if m.get("share_gpu")
        else ""
    )
    lines.append(f"- GPU: {gpus} × {gpu}, {nranks} ranks on one host (torchrun){shared}")
    lines.append(
        f"- NCCL {m.get('nccl') or 'unknown'} (PyTorch {m.get('torch') or 'unknown'}, "
        f"CUDA {m.get('cuda') or 'unknown'})"
    )
    lines.append(f"- rdmesh commit: {commit}")
    env = {
        k: v
        for k, v in (rd_meta.get("env") or {}).items()
        if k not in ("NCCL_NET", "NCCL_NET_PLUGIN", "RDMESH_COMMIT")
    }
    if env:
        lines.append("- Environment of the rdmesh run: " + " ".join(f"`{k}={v}`" for k, v in sorted(env.items())))
    lines.append(
        "- rdmesh: `NCCL_NET=rdmesh NCCL_NET_PLUGIN=/abs/path/libnccl-net-rdmesh.so`; "
        "Socket: `NCCL_NET=Socket`"
    )
    lines.append(
        "- busbw as in nccl-tests doc/PERFORMANCE.md (GB/s, 1e9 bytes): all_reduce algbw × "
        "2(n-1)/n, all_gather and reduce_scatter × (n-1)/n, sendrecv × 1; size = buffer "
        "(all_reduce), all ranks' parts (all_gather, reduce_scatter), bytes sent per rank "
        "(sendrecv); time = slowest rank's average; int32 data"
        + ("" if dry else ", every result checked against the expected values")
    )
    spread = any("iter_p50_us" in r for r in list(rd.values()) + list(so.values()))
    lines.append("")
    head = "| op | size | busbw rdmesh (GB/s) | busbw Socket (GB/s) | ratio |"
    rule = "|---|---:|---:|---:|---:|"
    if spread:
        head += " median op, µs (rdmesh / Socket) | slowest op, ms (rdmesh / Socket) |"
        rule += "---:|---:|"
    lines.append(head)
    lines.append(rule)
    keys = sorted(
        set(rd) | set(so),
        key=lambda k: (OP_ORDER.index(k[0]) if k[0] in OP_ORDER else len(OP_ORDER), k[0], k[1]),
    )
    for op, size in keys:
        x, y = rd.get((op, size), {}), so.get((op, size), {})
        a, b = x.get("busbw_GBps"), y.get("busbw_GBps")
        ratio = f"{a / b:.2f}" if a is not None and b else "–"
        row = f"| {op} | {fmt_size(size)} | {fmt_bw(a)} | {fmt_bw(b)} | {ratio} |"
        if spread:
            row += (
                f" {fmt_op(x.get('iter_p50_us'))} / {fmt_op(y.get('iter_p50_us'))} |"
                f" {fmt_op(x.get('iter_max_us'), 1e3)} / {fmt_op(y.get('iter_max_us'), 1e3)} |"
            )
        lines.append(row)
    return "\n".join(lines) + "\n"


def fmt_op(us, div=1.0):
    """A single op's time in µs (or ms with div=1e3), "–" when the file has none."""
    if us is None:
        return "–"
    v = us / div
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("rdmesh")
    p.add_argument("socket")
    p.add_argument("--commit")
    p.add_argument("--date")
    p.add_argument("--out")
    a = p.parse_args(argv)
    rd_meta, rd = load(a.rdmesh)
    so_meta, so = load(a.socket)
    text = table(rd_meta, rd, so_meta, so, a.commit, a.date)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
