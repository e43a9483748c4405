#!/usr/bin/env bash
# NCCL over rdmesh vs NCCL's own Socket transport, two GPUs of one host (not part of CI).
#
# Usage: scripts/nccl-gpu/run.sh PLUGIN_SO OUTDIR [extra bench.py arguments]
#   PLUGIN_SO  libnccl-net-rdmesh.so (built on the development machine with
#              scripts/build-plugin.sh; any path, it is made absolute for NCCL_NET_PLUGIN)
#   OUTDIR     created if needed; receives rdmesh.log, socket.log (every rank's output with
#              NCCL_DEBUG=INFO), rdmesh.jsonl, socket.jsonl (bench.py results), table.md,
#              harness.log (the preflight below)
#
# Runs `torchrun --standalone --nproc_per_node=2 bench.py` twice, with the NET path forced
# between the two GPUs (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0):
#   1. NCCL_NET=rdmesh NCCL_NET_PLUGIN=<absolute PLUGIN_SO>
#   2. NCCL_NET=Socket (NCCL's built-in socket transport)
# NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET in both. Fails when the rdmesh log lacks
# "via NET/rdmesh" (NCCL did not use the plugin) or when either run fails (bench.py checks every
# result). Prints the GPU, the NCCL version (torch.cuda.nccl.version()) and the commit, then the
# markdown table for docs/benchmarks.md (scripts/nccl-gpu/table.py).
#
# Environment: RDMESH_* variables pass through to the plugin (see docs/nccl.md);
# RDMESH_RANK_ENV (default RDMESH_NICS=lo=127.0.93.%r/24; empty: the plugin discovers NICs) is
# set per rank by bench.py with %r -> local rank + 1, so the two ranks of this one host have
# distinct rdmesh addresses (two processes that discover the same NIC address cannot reach each
# other);
# NPROC (default 2) ranks; RUN_TIMEOUT_S (default 900) per torchrun; TORCHRUN (default torchrun);
# fewer GPUs than ranks (a one-GPU machine): the ranks share the GPUs (bench.py --share-gpu: one
# NCCL_HOSTID per rank, so NCCL takes them for two hosts and connects them over the NET
# transport), with the CUDA MPS daemon started for the run where nvidia-cuda-mps-control exists
# (MPS=0: time slicing instead) and stopped at the end; the table says so;
# RDMESH_COMMIT overrides the commit (default: git rev-parse of this checkout, else "unknown").
set -euo pipefail

if [ $# -lt 2 ]; then
    sed -n '2,12p' "$0" >&2
    exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
so="$(realpath "$1")"
out="$2"
shift 2
[ -f "$so" ] || { echo "run.sh: plugin $so does not exist" >&2; exit 2; }
mkdir -p "$out"
out="$(realpath "$out")"
nproc="${NPROC:-2}"
limit="${RUN_TIMEOUT_S:-900}"
torchrun="${TORCHRUN:-torchrun}"
python="${PYTHON:-python3}"

commit="${RDMESH_COMMIT:-$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}"
if [ -z "${RDMESH_COMMIT:-}" ] && [ "$commit" != unknown ] &&
    [ -n "$(git -C "$repo" status --porcelain 2>/dev/null | head -1)" ]; then
    commit="$commit-dirty"
fi
export RDMESH_COMMIT="$commit"
export RDMESH_RANK_ENV="${RDMESH_RANK_ENV-RDMESH_NICS=lo=127.0.93.%r/24}"

info="$("$python" - <<'PY'
import torch
v = torch.cuda.nccl.version()
v = ".".join(map(str, v)) if isinstance(v, tuple) else f"{v // 10000}.{v // 100 % 100}.{v % 100}"
n = torch.cuda.device_count()
names = sorted({torch.cuda.get_device_name(i) for i in range(n)})
print(f"GPU: {n} x {', '.join(names)}; NCCL {v}; torch {torch.__version__} (CUDA {torch.version.cuda})")
PY
)"
echo "run.sh: $info"
echo "run.sh: commit $commit; plugin $so ($(sha256sum "$so" | cut -c1-16))"
# the GPU count, from the query above ("GPU: N x ...")
ngpu="${info#GPU: }"
ngpu="${ngpu%% x *}"
share=()
if [ "$ngpu" -lt "$nproc" ]; then
    share=(--share-gpu)
    if [ "${MPS:-1}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
        # the daemon's control sockets stay out of OUTDIR; its log goes there
        export CUDA_MPS_PIPE_DIRECTORY="$(mktemp -d)" CUDA_MPS_LOG_DIRECTORY="$out/mps-log"
        mkdir -p "$CUDA_MPS_LOG_DIRECTORY"
        if nvidia-cuda-mps-control -d; then
            trap 'echo quit | nvidia-cuda-mps-control; rm -rf "$CUDA_MPS_PIPE_DIRECTORY"' EXIT
            mps="the CUDA MPS daemon running"
        else
            mps="time slicing (the MPS daemon did not start)"
        fi
    else
        mps="time slicing (no MPS)"
    fi
    echo "run.sh: $nproc ranks on $ngpu GPU(s): the ranks share them (--share-gpu), $mps"
fi

# Preflight, before any GPU time: the plugin loads here with dlopen(RTLD_NOW | RTLD_LOCAL)
# (NCCL's flags: a missing symbol or a too-old glibc shows now, not as an NCCL error), and, when
# a C compiler is present, the NCCL-free harness (tests/nccl/harness.c) runs two ranks of
# transfers over it with the same per-rank environment (SKIP_HARNESS=1 skips that part).
"$python" - "$so" <<'PY' || { echo "run.sh: FAIL: $so does not load (see above)" >&2; exit 1; }
import ctypes, os, sys
try:
    lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_LOCAL)
    getattr(lib, "ncclNetPlugin_v11")
except (OSError, AttributeError) as e:
    sys.exit(f"run.sh: dlopen/dlsym: {e}")
print("run.sh: preflight: the plugin loads (RTLD_NOW | RTLD_LOCAL) and exports ncclNetPlugin_v11")
PY
if [ "${SKIP_HARNESS:-0}" != 1 ] && [ -f "$repo/tests/nccl/harness.c" ] && command -v cc >/dev/null; then
    cc -O2 -Wall -pthread -o "$out/nccl_harness" "$repo/tests/nccl/harness.c" -ldl -lm
    if HX_RANK_ENV="${RDMESH_RANK_ENV:-}" HX_LOG_LEVEL=2 HX_SCENARIO_S=300 \
        "$out/nccl_harness" "$so" sizes 11 >"$out/harness.log" 2>&1; then
        echo "run.sh: preflight: $(grep -m1 'sizes 0' "$out/harness.log" | sed 's/^\[[^]]*\] //')"
    else
        echo "run.sh: FAIL: the NCCL-free harness failed on this host; see $out/harness.log:" >&2
        grep -E 'FAIL|WARN' "$out/harness.log" | head -n 20 >&2
        exit 1
    fi
fi

common=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO
    NCCL_DEBUG_SUBSYS=INIT,NET)

# run LABEL LOG JSONL ENV... : one torchrun with the given environment, bounded in time
run() {
    local label="$1" log="$2" jsonl="$3"
    shift 3
    echo "run.sh: $label: $* torchrun --nproc_per_node=$nproc bench.py (log $log)"
    local t0=$SECONDS rc=0
    env "$@" timeout --signal=TERM --kill-after=30 "$limit" \
        "$torchrun" --standalone --nproc_per_node="$nproc" "$here/bench.py" \
        --label "$label" --out "$jsonl" "${extra[@]}" >"$log" 2>&1 || rc=$?
    echo "run.sh: $label: exit status $rc after $((SECONDS - t0)) s"
    grep -E '^ *[A-Za-z]+ +(all_reduce|all_gather|reduce_scatter|sendrecv) ' "$log" | tail -n 4 || true
    if [ "$rc" -ne 0 ]; then
        echo "run.sh: $label failed (exit $rc$([ "$rc" -eq 124 ] && echo ", timed out after $limit s")); last lines of $log:" >&2
        tail -n 40 "$log" >&2
        return 1
    fi
}

extra=("$@" "${share[@]}")
status=0
run rdmesh "$out/rdmesh.log" "$out/rdmesh.jsonl" "${common[@]}" \
    NCCL_NET=rdmesh NCCL_NET_PLUGIN="$so" RDMESH_RANK_ENV="$RDMESH_RANK_ENV" || status=1
if grep -q 'via NET/rdmesh' "$out/rdmesh.log"; then
    echo "run.sh: rdmesh: NCCL used the plugin: $(grep -c 'via NET/rdmesh' "$out/rdmesh.log") channel lines 'via NET/rdmesh', e.g."
    grep -m 2 'via NET/rdmesh' "$out/rdmesh.log" | sed 's/^/    /'
    grep -m 1 -E 'Loaded net plugin|NET/Plugin' "$out/rdmesh.log" | sed 's/^/    /' || true
else
    echo "run.sh: FAIL: 'via NET/rdmesh' is not in $out/rdmesh.log: NCCL did not run over the plugin" >&2
    grep -E 'NET/Plugin|plugin|NCCL WARN' "$out/rdmesh.log" | head -n 20 >&2 || true
    status=1
fi

run Socket "$out/socket.log" "$out/socket.jsonl" "${common[@]}" NCCL_NET=Socket \
    RDMESH_RANK_ENV= || status=1
if ! grep -q 'via NET/Socket' "$out/socket.log"; then
    echo "run.sh: FAIL: 'via NET/Socket' is not in $out/socket.log" >&2
    status=1
fi

if [ -s "$out/rdmesh.jsonl" ] && [ -s "$out/socket.jsonl" ]; then
    "$python" "$here/table.py" "$out/rdmesh.jsonl" "$out/socket.jsonl" --commit "$commit" \
        >"$out/table.md"
    echo
    cat "$out/table.md"
fi
echo
echo "run.sh: $info; commit $commit; $([ $status -eq 0 ] && echo PASSED || echo FAILED) (outputs in $out)"
exit $status
