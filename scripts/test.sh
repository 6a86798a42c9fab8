#!/usr/bin/env bash
# The tests: installs what is missing, builds, runs the whole suite with ctest.
# Extra arguments go to ctest (e.g. -R Sampler, -L mpi).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh" --tests
bash "$root/scripts/build.sh"
source "$root/scripts/env.sh"
build=${FLEXSP_BUILD_DIR:-$root/build}
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
