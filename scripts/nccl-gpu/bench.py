#!/usr/bin/env python3
"""NCCL collectives through torch.distributed, results checked, bus bandwidth as JSON lines.

Run under torchrun, one process per GPU (scripts/nccl-gpu/run.sh does it twice: once with
NCCL_NET=rdmesh, once with NCCL_NET=Socket):

    torchrun --standalone --nproc_per_node=2 scripts/nccl-gpu/bench.py --label rdmesh --out r.jsonl

For every op (all_reduce, all_gather, reduce_scatter, sendrecv) and size (8 B to 256 MiB by
default, powers of 4 plus the largest size), each rank:
  1. fills its input with rank- and index-dependent int32 values and runs the op once; the
     output is compared exactly (torch.equal) with the values computed locally;
  2. times `iters` back-to-back ops between CUDA events (iters chosen so that one size takes
     about --target-s seconds, at most --max-iters (--max-iters-small, default 1000, up
     to 1 MiB), at least 5 up to 1 MiB and 3 above; the warm-up of step 1 sets it); with
     --iter-stats also every op on its own (rank 0's fastest, median and slowest op);
  3. refills and checks once more.
A mismatch stops the run with the first wrong index (exit status 1).

Sizes and bandwidths follow nccl-tests (NVIDIA/nccl-tests doc/PERFORMANCE.md):
  size: all_reduce = the buffer; all_gather = the gathered output (all ranks' parts);
        reduce_scatter = the input (all ranks' parts); sendrecv = what one rank sends.
  algbw = size / time (GB/s, 1 GB = 1e9 bytes); busbw = algbw x factor with n ranks:
        all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, sendrecv 1.
  time = the slowest rank's average per op (max over ranks).

Rank 0 writes one JSON object per line to --out: first {"type": "meta", ...} (GPU, NCCL and
torch versions, NCCL_* environment), then {"type": "result", "op", "bytes", "count", "dtype",
"iters", "time_us", "algbw_GBps", "busbw_GBps", "nranks", "checked"} per op and size (and
"iter_min_us", "iter_p50_us", "iter_max_us" with --iter-stats).

--dry-run needs no torch and no GPU: it prints the plan (ops, sizes, element counts, busbw
factors), self-checks the expected-value formulas against a simulated 2-rank collective in plain
Python, and, with --out, writes result lines from a stated bandwidth model (--dry-run-gbps) so
that table.py can be exercised; those lines carry "dry_run": true.

--rank-env NAME=VALUE (default $RDMESH_RANK_ENV) sets a variable per rank before NCCL starts,
"%r" replaced by the local rank + 1: two ranks of one host need distinct rdmesh addresses, e.g.
RDMESH_NICS=lo=127.0.93.%r/24 (run.sh's default).

--share-gpu runs more ranks than the host has GPUs: rank r uses GPU r mod the GPU count and
gets NCCL_HOSTID=rdmesh-bench-rank<r> (unless NCCL_HOSTID is set). NCCL refuses two ranks on
one GPU only when their host hashes match too (init.cc: "Duplicate GPU detected" compares
hostHash and busId), so with distinct host IDs the ranks see each other as two hosts and talk
through the NET transport — the path under test — while their kernels share the GPU's SMs
(with the CUDA MPS daemon running, concurrently; without it, by time slicing). A one-GPU
machine then compares NCCL over rdmesh with NCCL over Socket in the same conditions; it is not
the two-GPU measurement.
"""

import argparse
import datetime
import json
import os
import socket
import sys
import time

OPS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")
DTYPE_BYTES = 4  # int32
MIB = 1 << 20


def sizes(min_bytes, max_bytes, factor):
    """min_bytes * factor^k up to max_bytes, plus max_bytes itself."""
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    if out[-1] != max_bytes:
        out.append(max_bytes)
    return out


def bus_factor(op, n):
    """nccl-tests doc/PERFORMANCE.md correction factor from algbw to busbw."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    if op == "sendrecv":
        return 1.0
    raise ValueError(op)


def counts(op, nbytes, n):
    """(elements per rank's input, elements per rank's output) for a size in nccl-tests terms."""
    total = nbytes // DTYPE_BYTES
    if op == "all_reduce":
        return total, total
    if op == "all_gather":
        return total // n, total
    if op == "reduce_scatter":
        return total, total // n
    return total, total  # sendrecv


def check_size(op, nbytes, n):
    total = nbytes // DTYPE_BYTES
    if nbytes % DTYPE_BYTES:
        raise SystemExit(f"{op}: {nbytes} bytes is not a whole number of int32 elements")
    if op in ("all_gather", "reduce_scatter") and (total % n or total == 0):
        raise SystemExit(f"{op}: {nbytes} bytes do not split into {n} equal int32 parts")


# The values: v(rank, index) = (index * 7919) % 1000003 + rank * 1000000 + 1. Works on Python
# ints and on int64 torch tensors alike; sums over up to 8 ranks stay within int32.
def val(rank, idx):
    return (idx * 7919) % 1000003 + rank * 1000000 + 1


def sum_over_ranks(idx, n):
    return n * ((idx * 7919) % 1000003 + 1) + 1000000 * (n * (n - 1) // 2)


def simulate_self_check(n=2, total=24):
    """Plain-Python check that the expected-value formulas match a simulated collective."""
    ins = [[val(r, i) for i in range(total)] for r in range(n)]
    # all_reduce
    red = [sum(ins[r][i] for r in range(n)) for i in range(total)]
    assert red == [sum_over_ranks(i, n) for i in range(total)], "all_reduce formula"
    # all_gather: rank r contributes val(r, 0..part)
    part = total // n
    gathered = [x for r in range(n) for x in ins[r][:part]]
    assert gathered == [val(j // part, j % part) for j in range(total)], "all_gather formula"
    # reduce_scatter: rank r gets the sum of part r of every rank's input
    for r in range(n):
        got = [sum(ins[q][r * part + i] for q in range(n)) for i in range(part)]
        assert got == [sum_over_ranks(r * part + i, n) for i in range(part)], "reduce_scatter"
    # sendrecv in a ring: rank r receives rank (r-1)'s input
    for r in range(n):
        assert ins[(r - 1) % n] == [val((r - 1) % n, i) for i in range(total)], "sendrecv"
    assert max(sum_over_ranks(i, 8) for i in range(2000)) < 2**31, "int32 range"


def fmt_bytes(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1024)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


# ---------------------------------------------------------------------------------------------
# torch part


class Runner:
    def __init__(self, torch, dist, rank, n, device):
        self.torch, self.dist, self.rank, self.n, self.dev = torch, dist, rank, n, device

    def idx(self, count, start=0):
        return self.torch.arange(start, start + count, dtype=self.torch.int64, device=self.dev)

    def vals(self, rank, count, start=0):
        return val(rank, self.idx(count, start)).to(self.torch.int32)

    def setup(self, op, nbytes):
        """Buffers for one op and size: (run: callable, refill: callable, expected, output)."""
        t, d, r, n = self.torch, self.dist, self.rank, self.n
        cin, cout = counts(op, nbytes, n)
        if op == "all_reduce":
            buf = t.empty(cin, dtype=t.int32, device=self.dev)
            expected = sum_over_ranks(self.idx(cin), n).to(t.int32)

            def refill():
                buf.copy_(self.vals(r, cin))

            return (lambda: d.all_reduce(buf)), refill, expected, buf
        if op == "all_gather":
            inp = self.vals(r, cin)
            out = t.empty(cout, dtype=t.int32, device=self.dev)
            j = self.idx(cout)
            expected = val(j // cin, j % cin).to(t.int32)

            def refill():
                out.fill_(-1)

            return (lambda: d.all_gather_into_tensor(out, inp)), refill, expected, out
        if op == "reduce_scatter":
            inp = self.vals(r, cin)
            out = t.empty(cout, dtype=t.int32, device=self.dev)
            expected = sum_over_ranks(self.idx(cout, r * cout), n).to(t.int32)

            def refill():
                out.fill_(-1)

            return (lambda: d.reduce_scatter_tensor(out, inp)), refill, expected, out
        # sendrecv: ring, send to rank+1, receive from rank-1 (with 2 ranks: a swap)
        inp = self.vals(r, cin)
        out = t.empty(cout, dtype=t.int32, device=self.dev)
        prev, nxt = (r - 1) % n, (r + 1) % n
        expected = self.vals(prev, cout)

        def run():
            ops = [d.P2POp(d.isend, inp, nxt), d.P2POp(d.irecv, out, prev)]
            for w in d.batch_isend_irecv(ops):
                w.wait()

        def refill():
            out.fill_(-1)

        return run, refill, expected, out

    def check(self, op, nbytes, out, expected, when):
        t = self.torch
        t.cuda.synchronize()
        if not t.equal(out, expected):
            bad = (out != expected).nonzero()
            i = int(bad[0].item())
            raise SystemExit(
                f"rank {self.rank}: {op} {nbytes} bytes ({when}): {bad.numel()} wrong int32 "
                f"elements, first at index {i}: got {int(out[i].item())}, "
                f"expected {int(expected[i].item())}"
            )

    def measure(self, op, nbytes, target_s, max_iters, iter_stats=False):
        t, d = self.torch, self.dist
        run, refill, expected, out = self.setup(op, nbytes)
        # warm-up that is also the first check; its duration picks the iteration count
        refill()
        d.barrier()
        t0 = time.perf_counter()
        run()
        t.cuda.synchronize()
        warm = time.perf_counter() - t0
        self.check(op, nbytes, out, expected, "first run")
        # at least 5 timed runs up to 1 MiB (the first run of an op also sets up connections),
        # 3 above
        least = 5 if nbytes <= MIB else 3
        iters = int(max(least, min(max_iters, target_s / max(warm, 1e-6))))
        # every rank must run the same number of iterations: take rank 0's choice
        it = t.tensor([iters], dtype=t.int64, device=self.dev)
        d.broadcast(it, 0)
        iters = int(it.item())
        d.barrier()
        start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        # with --iter-stats, an event after every op as well: the spread of single ops (a
        # stall shows as one slow op, which the average hides)
        marks = [t.cuda.Event(enable_timing=True) for _ in range(iters)] if iter_stats else []
        start.record()
        for i in range(iters):
            run()
            if marks:
                marks[i].record()
        end.record()
        t.cuda.synchronize()
        per_op = start.elapsed_time(end) / 1e3 / iters
        spread = {}
        if marks:
            each = sorted(
                a_prev.elapsed_time(a) * 1e3
                for a_prev, a in zip([start] + marks[:-1], marks)
            )
            spread = {
                "iter_min_us": each[0],
                "iter_p50_us": each[len(each) // 2],
                "iter_max_us": each[-1],
            }
        slowest = t.tensor([per_op], dtype=t.float64, device=self.dev)
        d.all_reduce(slowest, op=d.ReduceOp.MAX)
        per_op = float(slowest.item())
        # the timed runs of all_reduce accumulated in place: refill and check once more
        refill()
        d.barrier()
        run()
        self.check(op, nbytes, out, expected, "after the timed runs")
        algbw = nbytes / per_op / 1e9
        return {
            "type": "result",
            "op": op,
            "bytes": nbytes,
            "count": counts(op, nbytes, self.n)[0],
            "dtype": "int32",
            "iters": iters,
            "time_us": per_op * 1e6,
            "algbw_GBps": algbw,
            "busbw_GBps": algbw * bus_factor(op, self.n),
            "nranks": self.n,
            "checked": True,
            **spread,
        }


def rank_env(spec, local_rank):
    """NAME=VALUE set in this rank's environment before NCCL loads the plugin; "%r" in VALUE
    becomes local rank + 1 (RDMESH_NICS=lo=127.0.93.%r/24 gives each rank its own loopback
    address)."""
    if not spec:
        return None
    name, eq, value = spec.partition("=")
    if not eq or not name:
        raise SystemExit(f"--rank-env {spec!r}: expected NAME=VALUE")
    os.environ[name] = value.replace("%r", str(local_rank + 1))
    return name, os.environ[name]


def nccl_version(torch):
    v = torch.cuda.nccl.version()
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v)
    # older torch: an int such as 22809 (major*10000 + minor*100 + patch)
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def meta(label, torch=None, n=None, share_gpu=False):
    m = {
        "type": "meta",
        "label": label,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": socket.gethostname(),
        # NCCL_VERSION is set by NVIDIA's container images, not a setting: left out
        "env": {
            k: v
            for k, v in sorted(os.environ.items())
            if k.startswith(("NCCL_", "RDMESH_")) and k != "NCCL_VERSION"
        },
        "commit": os.environ.get("RDMESH_COMMIT", "unknown"),
        "share_gpu": share_gpu,
    }
    if torch is not None:
        m.update(
            gpu=torch.cuda.get_device_name(0),
            gpus=min(n, torch.cuda.device_count()) if share_gpu else n,
            nccl=nccl_version(torch),
            torch=torch.__version__,
            cuda=torch.version.cuda,
        )
    return m


def run_torch(args):
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    rank_env(args.rank_env, local)
    gpu = local
    if args.share_gpu:
        gpu = local % torch.cuda.device_count()
        os.environ.setdefault("NCCL_HOSTID", f"rdmesh-bench-rank{local}")
    torch.cuda.set_device(gpu)
    dev = torch.device("cuda", gpu)
    dist.init_process_group("nccl", device_id=dev)
    n = dist.get_world_size()
    if rank == 0:
        print(
            f"bench: {args.label}: {n} ranks, {torch.cuda.get_device_name(0)}, NCCL "
            f"{nccl_version(torch)}, torch {torch.__version__}",
            flush=True,
        )
    r = Runner(torch, dist, rank, n, dev)
    plan = sizes(args.min_bytes, args.max_bytes, args.factor)
    out = open(args.out, "w") if rank == 0 else None
    if out:
        out.write(json.dumps(meta(args.label, torch, n, args.share_gpu)) + "\n")
        out.flush()
    t_all = time.perf_counter()
    for op in args.ops:
        for nbytes in plan:
            check_size(op, nbytes, n)
            res = r.measure(
                op,
                nbytes,
                args.target_s,
                args.max_iters if nbytes > MIB else args.max_iters_small,
                args.iter_stats,
            )
            res["label"] = args.label
            if out:
                out.write(json.dumps(res) + "\n")
                out.flush()
                print(
                    f"{args.label:>8} {op:<15} {fmt_bytes(nbytes):>10}  iters {res['iters']:>3}"
                    f"  {res['time_us']:12.1f} us  algbw {res['algbw_GBps']:8.3f} GB/s"
                    f"  busbw {res['busbw_GBps']:8.3f} GB/s  checked"
                    + (
                        f"  one op: p50 {res['iter_p50_us']:.1f} max {res['iter_max_us']:.1f} us"
                        if "iter_max_us" in res
                        else ""
                    ),
                    flush=True,
                )
    if out:
        out.close()
        print(f"bench: {args.label}: done in {time.perf_counter() - t_all:.0f} s", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def run_dry(args):
    if args.rank_env:
        saved = dict(os.environ)
        print("dry run: rank environment:", rank_env(args.rank_env, 0), rank_env(args.rank_env, 1))
        os.environ.clear()
        os.environ.update(saved)
    simulate_self_check(2)
    simulate_self_check(3, total=36)
    n = args.dry_run_ranks
    plan = sizes(args.min_bytes, args.max_bytes, args.factor)
    print(f"dry run: {n} ranks, ops {','.join(args.ops)}, {len(plan)} sizes:")
    for op in args.ops:
        for nbytes in plan:
            check_size(op, nbytes, n)
            cin, cout = counts(op, nbytes, n)
            print(
                f"  {op:<15} {fmt_bytes(nbytes):>10}  in {cin} out {cout} int32  "
                f"busbw factor {bus_factor(op, n):.3f}"
            )
    if args.out:
        with open(args.out, "w") as f:
            m = meta(args.label, share_gpu=args.share_gpu)
            m.update(gpu="(dry run)", gpus=n, nccl="(dry run)", torch=None, dry_run=True)
            f.write(json.dumps(m) + "\n")
            for op in args.ops:
                for nbytes in plan:
                    # model: 20 us latency + size at dry_run_gbps of algbw
                    per_op = 20e-6 + nbytes / (args.dry_run_gbps * 1e9)
                    algbw = nbytes / per_op / 1e9
                    rec = {
                        "type": "result",
                        "label": args.label,
                        "op": op,
                        "bytes": nbytes,
                        "count": counts(op, nbytes, n)[0],
                        "dtype": "int32",
                        "iters": 1,
                        "time_us": per_op * 1e6,
                        "algbw_GBps": algbw,
                        "busbw_GBps": algbw * bus_factor(op, n),
                        "nranks": n,
                        "checked": False,
                        "dry_run": True,
                    }
                    if args.iter_stats:
                        # the model has no spread: every op takes the modelled time
                        t_us = per_op * 1e6
                        rec.update(iter_min_us=t_us, iter_p50_us=t_us, iter_max_us=t_us)
                    f.write(json.dumps(rec) + "\n")
        print(f"dry run: modelled results written to {args.out}")


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--label", default=os.environ.get("NCCL_NET", "default"))
    p.add_argument("--out", help="JSON lines file (rank 0)")
    p.add_argument("--ops", default=",".join(OPS), type=lambda s: s.split(","))
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=256 * MIB)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--target-s", type=float, default=1.0, help="timed seconds per op and size")
    p.add_argument("--max-iters", type=int, default=20, help="most timed iterations above 1 MiB")
    p.add_argument(
        "--max-iters-small",
        type=int,
        default=1000,
        help="most timed iterations up to 1 MiB (default 1000: 50 ops of 8 KiB last ~3 ms, "
        "shorter than a single scheduling stall of a busy host)",
    )
    p.add_argument(
        "--iter-stats",
        action="store_true",
        help="time every op on its own as well: iter_min_us, iter_p50_us, iter_max_us "
        "(rank 0's) in each result",
    )
    p.add_argument(
        "--rank-env",
        default=os.environ.get("RDMESH_RANK_ENV", ""),
        help='NAME=VALUE per rank, "%%r" -> local rank + 1 (default: $RDMESH_RANK_ENV)',
    )
    p.add_argument(
        "--share-gpu",
        action="store_true",
        help="ranks share the GPUs (rank r on GPU r mod count), each with its own NCCL_HOSTID",
    )
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--dry-run-ranks", type=int, default=2)
    p.add_argument("--dry-run-gbps", type=float, default=1.0)
    a = p.parse_args(argv)
    for op in a.ops:
        if op not in OPS:
            p.error(f"unknown op {op}; choose from {','.join(OPS)}")
    if a.min_bytes < DTYPE_BYTES or a.factor < 2 or a.max_bytes < a.min_bytes:
        p.error("need --min-bytes >= 4, --factor >= 2, --max-bytes >= --min-bytes")
    if not a.dry_run and not a.out:
        p.error("--out is required")
    return a


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.dry_run:
        run_dry(args)
    else:
        run_torch(args)


if __name__ == "__main__":
    main()
