#!/usr/bin/env bash
# rustc wrapper (.cargo/config.toml `build.rustc-wrapper`): optimized builds of this workspace
# for x86_64 Linux use the profile-guided optimization profile pgo/rdmesh.profdata
# (docs/building.md). Adds `-Cprofile-use=<the profile's absolute path>` (rustc would resolve a
# relative path against each dependency's own directory) and `-Cllvm-args=-no-pgo-warn-mismatch`
# (functions changed since the profile was taken are compiled as without one, silently) to the
# rustc invocations that
#   - optimize (`-C opt-level=3`: the release and bench profiles),
#   - build for the host (no `--target` other than x86_64-unknown-linux-gnu),
#   - do not instrument or fuzz already (`-Cprofile-generate`, `-Cprofile-use`, `--cfg fuzzing`),
#   - run a compiler whose LLVM reads the profile: its major version at least the one in
#     pgo/rdmesh.llvm (the LLVM that wrote it; an older one rejects the file),
# unless RDMESH_PGO=0 or the profile is missing. Every other invocation runs unchanged.
# Cargo does not see the flag: after switching RDMESH_PGO, build in another target directory
# (or `cargo clean`). A new profile is picked up by itself (rustc lists it in its dep-info).
# Usage (by cargo): rustc-pgo.sh RUSTC ARGS...
set -u
dir="$(cd "$(dirname "$0")/.." && pwd)/pgo"
profile="$dir/rdmesh.profdata"
use=0
if [ "${RDMESH_PGO:-1}" != 0 ] && [ -f "$profile" ]; then
  prev=
  for a in "$@"; do
    if [ "$prev" = --target ]; then
      [ "$a" = x86_64-unknown-linux-gnu ] || { use=0; break; }
    else
      case "$prev$a" in
        -Copt-level=3) use=1 ;;
        --target=*) [ "$a" = --target=x86_64-unknown-linux-gnu ] || { use=0; break; } ;;
        -Cprofile-generate* | -Cprofile-use* | --cfgfuzzing) use=0; break ;;
      esac
    fi
    prev=
    case "$a" in --target | --cfg | -C) prev=$a ;; esac
  done
  if [ "$use" = 1 ]; then
    want=$(cat "$dir/rdmesh.llvm" 2>/dev/null)
    have=$("$1" -vV 2>/dev/null | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
    [ -n "$want" ] && [ -n "$have" ] && [ "$have" -ge "$want" ] || use=0
  fi
fi
if [ "$use" = 1 ]; then
  exec "$@" "-Cprofile-use=$profile" -Cllvm-args=-no-pgo-warn-mismatch
fi
exec "$@"
