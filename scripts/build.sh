#!/usr/bin/env bash
# Configures and builds flexsp into build/ (or $FLEXSP_BUILD_DIR). CUDA is auto-detected.
#   scripts/build.sh [TARGET] [CMAKE_OPTION...]
# TARGET (a first argument not starting with '-'): build only that target, e.g. `flexsp`
# for the executable alone (the demo); without it, everything: tests and benchmarks too.
# The other arguments go to CMake's configure step (e.g. -DFLEXSP_CUDA=OFF).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FLEXSP_BUILD_DIR:-$root/build}
target=()
if [[ $# -gt 0 && $1 != -* ]]; then
  target=(--target "$1")
  shift
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)" "${target[@]}"
