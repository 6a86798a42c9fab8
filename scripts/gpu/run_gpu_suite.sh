#!/usr/bin/env bash
# One command for the bare GPU machine of the `device` tool (CUDA driver + toolkit, CMake,
# a C++ compiler; no MPI/HDF5/Boost/fmt, no package registry): unpacks the Debian
# dependencies that travelled as .deps/root.tar.xz (made here by fetch_debs.sh), builds
# flexsp with CUDA for sm_90, runs `ctest -L gpu` and the GPU benchmark, and leaves logs in
# $OUT (the device tool's folder) or ./out/gpu (git-ignored).
#   device run, carry [".deps/root.tar.xz"]:  bash scripts/gpu/run_gpu_suite.sh [--all] [--quick]
#   --all   also build and run the whole CPU suite (ctest -LE gpu) against the unpacked deps
#   --quick shorter benchmark
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$repo/out/gpu}
mkdir -p "$out"
all=0 quick=
for a in "$@"; do
  case $a in --all) all=1 ;; --quick) quick=--quick ;; *) echo "unknown option $a" >&2; exit 2 ;; esac
done
log() { echo "== $*" | tee -a "$out/summary.txt"; }

# ---- dependencies -----------------------------------------------------------------------
root=$repo/.deps/root
if [ ! -d "$root/usr" ]; then
  mkdir -p "$root"
  tar -C "$root" -xJf "$repo/.deps/root.tar.xz" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$repo/.deps/root.tar.xz" "$root" || { log "cannot unpack .deps/root.tar.xz"; exit 1; }
fi
# shellcheck source=deps_env.sh
source "$repo/scripts/gpu/deps_env.sh" "$root"

# ---- what machine is this ---------------------------------------------------------------
{
  echo "commit: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown) $(git -C "$repo" status --short 2>/dev/null | wc -l) changed files"
  grep PRETTY_NAME /etc/os-release; ldd --version | head -1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1; c++ --version | head -1; cmake --version | head -1
  nproc
} 2>&1 | tee "$out/machine.txt"

# ---- build --------------------------------------------------------------------------------
build=$repo/build-gpu
jobs=$(nproc)
cmake -S "$repo" -B "$build" -DFLEXSP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  "${FLEXSP_DEPS_CMAKE_ARGS[@]}" >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; log "configure FAILED"; exit 1; }
targets=(--target flexsp_gpu_tests bench_gpu flexsp)
[ $all = 1 ] && targets=()
cmake --build "$build" -j"$jobs" "${targets[@]}" >"$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -30; log "build FAILED"; exit 1; }
log "build ok"

# ---- tests and benchmarks -----------------------------------------------------------------------
rc=0
(cd "$build" && ctest -L gpu --output-on-failure --timeout 600) >"$out/ctest-gpu.log" 2>&1 || rc=1
grep -E "tests passed|Failed|Not Run|\*\*\*" "$out/ctest-gpu.log" | tail -20
"$build/tests/flexsp_gpu_tests" --gtest_brief=1 >"$out/gtest-gpu.log" 2>&1 || rc=1
log "ctest -L gpu: $([ $rc = 0 ] && echo PASSED || echo FAILED) (ctest-gpu.log, gtest-gpu.log)"
if [ $all = 1 ]; then
  (cd "$build" && ctest -LE gpu -j"$jobs" --output-on-failure) >"$out/ctest-cpu.log" 2>&1 || rc=1
  log "ctest -LE gpu: $(grep 'tests passed' "$out/ctest-cpu.log")"
fi
"$build/tests/bench_gpu" $quick 2>&1 | tee "$out/bench_gpu.txt" || rc=1
log "done, rc=$rc; logs in $out"
exit $rc
