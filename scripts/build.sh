#!/usr/bin/env bash
# Configures and builds flexsp into build/ (or $FLEXSP_BUILD_DIR). CUDA is auto-detected;
# pass -DFLEXSP_CUDA=OFF (or any CMake option) as arguments.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FLEXSP_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
