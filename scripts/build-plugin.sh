#!/usr/bin/env bash
# Builds the NCCL net plugin and gives it the name NCCL looks for:
#   <target dir>/release/libnccl-net-rdmesh.so
# (cargo names the cdylib libnccl_net_rdmesh.so). Respects CARGO_TARGET_DIR. Prints the
# absolute path of the plugin on its last line: pass it as NCCL_NET_PLUGIN=<path>.
#
# Checks on the way: the five ncclNetPlugin_v8..v12 data symbols are exported, and the library
# loads with dlopen(RTLD_NOW | RTLD_LOCAL) (every symbol resolves; python3 is used for the
# dlopen when present).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rdmesh-nccl "$@" >&2
target="${CARGO_TARGET_DIR:-$PWD/target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
src="$target/release/libnccl_net_rdmesh.so"
dst="$target/release/libnccl-net-rdmesh.so"
cp -f "$src" "$dst"
if command -v nm >/dev/null; then
    for v in 8 9 10 11 12; do
        nm -D --defined-only "$dst" | grep -q " D ncclNetPlugin_v$v\$" || {
            echo "build-plugin: ncclNetPlugin_v$v is not exported by $dst" >&2
            exit 1
        }
    done
fi
if command -v python3 >/dev/null; then
    python3 - "$dst" <<'PY' >&2
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_LOCAL)
for v in range(8, 13):
    getattr(lib, f"ncclNetPlugin_v{v}")
PY
fi
realpath "$dst"
