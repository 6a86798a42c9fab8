#!/usr/bin/env bash
# The device-pool high-water mark of one long sequence with and without activation offload
# against the memory model's prediction, on the CPU backend (tests/unit/test_offload_memory.cpp,
# which CI runs at 4096 tokens). Defaults: one 64K-token sequence, 8 layers, hidden 16,
# no checkpointing, offload_ahead 1. Extra VAR=value arguments are passed to the test's
# environment (FLEXSP_OFFLOAD_TOKENS, _LAYERS, _HIDDEN, _AHEAD, _CKPT).
#   bench/offload_memory.sh [BUILD_DIR] [VAR=value ...]
set -euo pipefail
build=${1:-build}
shift || true
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=1
env FLEXSP_OFFLOAD_TOKENS=65536 FLEXSP_OFFLOAD_LAYERS=8 FLEXSP_OFFLOAD_HIDDEN=16 FLEXSP_OFFLOAD_CKPT=0 FLEXSP_OFFLOAD_AHEAD=1 "$@" \
  "$build/tests/flexsp_unit_tests" --gtest_filter='OffloadMemory.*'
