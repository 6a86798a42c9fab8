#!/usr/bin/env bash
# One command for the bare GPU machine of the `device` tool (CUDA driver + toolkit, CMake,
# a C++ compiler; no MPI/HDF5/Boost/fmt, no package registry): unpacks the Debian
# dependencies that travelled as .deps/root.tar.xz (made here by fetch_debs.sh), builds
# flexsp with CUDA for sm_90 (and NCCL: the toolkit's, or the nvidia-nccl wheel's that the
# machine's python3 has), runs `ctest -L gpu` -- the one-process GPU tests (every op and
# the tiny model in fp32 against the CPU kernels, and in bf16 mixed precision against the
# CPU backend's bf16 emulation), the multi-rank ones under the carried mpirun (staged and
# NCCL communicators, training on 1/2/4 ranks against one process, in fp32 and in bf16)
# -- and the GPU benchmark (fp32 and bf16), and leaves logs in $OUT (the device tool's
# folder) or ./out/gpu (git-ignored).
#   device run, carry [".deps/root.tar.xz", ".deps/wikipedia_lengths.txt"]:
#     bash scripts/gpu/run_gpu_suite.sh [--all] [--quick]
#   --all   also build and run the whole CPU suite (ctest -LE gpu) against the unpacked deps
#   --quick shorter benchmark
#   --mpi-only  only the multi-rank GPU tests (ctest -L gpu_mpi), no benchmarks: a second
#               call on a still-warm machine reuses build-gpu
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$repo/out/gpu}
mkdir -p "$out"
all=0 quick= mpi_only=0
for a in "$@"; do
  case $a in
    --all) all=1 ;; --quick) quick=--quick ;; --mpi-only) mpi_only=1 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
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
nccl=()
nccl_root=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null) &&
  [ -e "$nccl_root/include/nccl.h" ] && nccl=(-DNCCL_ROOT="$nccl_root")
cmake -S "$repo" -B "$build" -DFLEXSP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  "${FLEXSP_DEPS_CMAKE_ARGS[@]}" "${nccl[@]}" >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; log "configure FAILED"; exit 1; }
log "$(grep -E 'flexsp: (CUDA|NCCL)' "$out/configure.log" | sed 's/^-- //' | tr '\n' ';')"
targets=(--target flexsp test_gpu_mpi_staged)
grep -q 'flexsp: NCCL communicator ON' "$out/configure.log" && targets+=(test_gpu_mpi_nccl)
[ $mpi_only = 0 ] && targets+=(flexsp_gpu_tests bench_gpu)
[ $all = 1 ] && targets=()
cmake --build "$build" -j"$jobs" "${targets[@]}" >"$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -30; log "build FAILED"; exit 1; }
log "build ok"

# ---- tests and benchmarks -----------------------------------------------------------------------
rc=0
label=gpu
[ $mpi_only = 1 ] && label=gpu_mpi
(cd "$build" && ctest -L $label --output-on-failure --timeout 900) >"$out/ctest-gpu.log" 2>&1 || rc=1
grep -E "tests passed|Failed|Not Run|\*\*\*" "$out/ctest-gpu.log" | tail -30
# What the multi-rank training test compared (ctest keeps passing tests' output here only).
grep -hE "^(ok|note|FAIL|SKIPPED|2 ranks see|gpu[a-z0-9_]*:|cpu[a-z0-9_]*:|NCCL version)" \
  "$build/Testing/Temporary/LastTest.log" 2>/dev/null | tee -a "$out/summary.txt"
if [ $mpi_only = 1 ]; then
  log "ctest -L gpu_mpi: $([ $rc = 0 ] && echo PASSED || echo FAILED) (ctest-gpu.log); done"
  exit $rc
fi
"$build/tests/flexsp_gpu_tests" --gtest_brief=1 >"$out/gtest-gpu.log" 2>&1 || rc=1
log "ctest -L gpu: $([ $rc = 0 ] && echo PASSED || echo FAILED) (ctest-gpu.log, gtest-gpu.log)"
if [ $all = 1 ]; then
  (cd "$build" && ctest -LE gpu -j"$jobs" --output-on-failure) >"$out/ctest-cpu.log" 2>&1 || rc=1
  log "ctest -LE gpu: $(grep 'tests passed' "$out/ctest-cpu.log")"
fi
"$build/tests/bench_gpu" $quick 2>&1 | tee "$out/bench_gpu.txt" || rc=1
sed -n '/^fp32 vs bf16/,$p' "$out/bench_gpu.txt" >>"$out/summary.txt"  # the speedup table

# ---- PyTorch baselines (issue 9): bench/gpu/run_torch_baseline.sh ---------------------------
# SDPA/varlen attention and a PyTorch LLaMA training step on this GPU, for the ratios in
# bench/gpu/NOTES.md. They get what is left of the device tool's 10-minute call
# (FLEXSP_GPU_SUITE_LIMIT_S, default 570 s, counted from this script's start), at most
# 390 s (200 s with --quick); JSON lines in $out/torch_baseline.jsonl, tables in summary.txt.
if [ "${FLEXSP_TORCH_BASELINE:-1}" != 0 ]; then
  torch_s=$(( ${FLEXSP_GPU_SUITE_LIMIT_S:-570} - SECONDS - 10 ))
  [ -n "$quick" ] && [ $torch_s -gt 200 ] && torch_s=200
  [ $torch_s -gt 390 ] && torch_s=390
  if [ $torch_s -ge 120 ]; then
    OUT=$out bash "$repo/bench/gpu/run_torch_baseline.sh" "$torch_s" 2>&1 | tee -a "$out/summary.txt" || rc=1
  else
    log "torch baselines skipped: ${torch_s} s left of the call (run bench/gpu/run_torch_baseline.sh alone)"
  fi
fi
log "done, rc=$rc; logs in $out"
exit $rc
