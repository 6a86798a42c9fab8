#!/usr/bin/env bash
# One command for the bare GPU machine of the `device` tool (CUDA driver + toolkit, CMake,
# a C++ compiler, PyTorch; no MPI/HDF5/Boost/fmt, no package registry). It unpacks the
# Debian dependencies that travelled as .deps/root.tar.xz (fetch_debs.sh), takes the CUDA
# build that travelled as .deps/build-gpu.tar.xz (pack_build.sh, --prebuilt) or builds one
# for sm_90, then runs its phases, most wanted first, each under a timeout inside the
# call's deadline (FLEXSP_GPU_SUITE_LIMIT_S, default 570 s from the start):
#   gtest      the one-process GPU tests (every op and the tiny model in fp32 against the
#              CPU kernels, in bf16 against the CPU backend's bf16 emulation)
#   mpi        ctest -L gpu_mpi but e2e_gpu_train: staged/NCCL communicators, ring attention
#   e2e        e2e_gpu_train: training on 1/2/4 ranks (SP, ZeRO, pipelines) against one
#              process, fp32 and bf16, and the small model's bf16 loss curve against fp32
#   model      a 1.3b LLaMA on one GPU, ~16K tokens per step, bf16: tokens/s and MFU
#   sanitize   compute-sanitizer memcheck and racecheck on the attention tests
#   demo       configs/demo.ini on 4 ranks sharing the GPU (bf16) against the CPU (fp32)
#   bench      bench_gpu (GEMM, attention, model step; fp32 and bf16)
#   nccl       NCCL's start-up on one rank, logged (NCCL_DEBUG=INFO)
#   torch      the PyTorch baselines (bench/gpu/run_torch_baseline.sh) with what is left
#              (FLEXSP_TORCH_MODES picks its modes: attention, train, longest)
#   ratios     bench_gpu --vs-torch: flexsp's attention on the baselines' batches, and the
#              ratios (needs torch in the same call; 150 s of it are kept for this)
# Output ($OUT, the device tool's folder, else ./out/gpu): summary.txt (one line per phase
# and the figures), logs.tar.gz (every phase's log, refreshed after each phase),
# torch_baseline.jsonl.
#   device run, carry [".deps/root.tar.xz", ".deps/build-gpu.tar.xz", ".deps/wikipedia_lengths.txt"]:
#     bash scripts/gpu/run_gpu_suite.sh --prebuilt [--only PHASE,PHASE...] [--quick]
#   --all   also build and run the whole CPU suite (ctest -LE gpu); not with --prebuilt
# Environment: FLEXSP_GPU_SUITE_LIMIT_S (the deadline), FLEXSP_TORCH_S (the most the
# baselines get), FLEXSP_RATIOS_S (kept for the ratios, 150), FLEXSP_TORCH_MODES and
# FLEXSP_TORCH_ATTENTION_ARGS (bench/gpu/run_torch_baseline.sh), FLEXSP_MODEL_CKPT (default "false true": the 1.3b
# runs without and with activation checkpointing).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$repo/out/gpu}
mkdir -p "$out"
limit=${FLEXSP_GPU_SUITE_LIMIT_S:-570}
all=0 quick= prebuilt=0 only=gtest,mpi,e2e,model,sanitize,demo,bench,nccl,torch,ratios
while [ $# -gt 0 ]; do
  case $1 in
    --all) all=1 ;; --quick) quick=--quick ;; --prebuilt) prebuilt=1 ;;
    --only) only=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
logs=$(mktemp -d)
summary=$out/summary.txt
: >"$summary"
log() { echo "== $*" | tee -a "$summary"; }
save_logs() { tar -C "$logs" -czf "$out/logs.tar.gz.tmp" . && mv "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"; }
left() { echo $((limit - SECONDS)); }
wanted() { [[ ,$only, == *,$1,* ]]; }
rc=0
# phase NAME MAX_S CMD...: runs CMD with its output in NAME.log, for at most MAX_S seconds
# and never past the deadline (minus 15 s to pack the logs); one summary line.
phase() {
  local name=$1 max=$2 t r t0=$SECONDS
  shift 2
  t=$(( $(left) - 15 )); [ "$t" -gt "$max" ] && t=$max
  if [ "$t" -lt 20 ]; then log "$name: SKIPPED (${t} s left)"; return 0; fi
  if [ "$(type -t "$1")" = function ]; then
    export -f "$1"
    set -- bash -c "$1"
  fi
  timeout --signal=TERM --kill-after=5 "$t" "$@" >"$logs/$name.log" 2>&1
  r=$?
  if [ $r = 0 ]; then log "$name: PASSED ($((SECONDS - t0)) s)"
  else rc=1; log "$name: FAILED (exit $r$([ $r = 124 ] && echo ", over ${t} s"), $((SECONDS - t0)) s)"; tail -25 "$logs/$name.log"; fi
  save_logs
  return $r
}

# ---- dependencies -----------------------------------------------------------------------
root=$repo/.deps/root
if [ ! -d "$root/usr" ]; then
  mkdir -p "$root"
  tar -C "$root" -xJf "$repo/.deps/root.tar.xz" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$repo/.deps/root.tar.xz" "$root" || { log "cannot unpack .deps/root.tar.xz"; exit 1; }
fi
# The machine's PyTorch keeps its own PATH and libraries (bench/gpu strips ours again).
py_site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
# shellcheck source=deps_env.sh
source "$repo/scripts/gpu/deps_env.sh" "$root"
build=$repo/build-gpu
if [ $prebuilt = 1 ]; then
  rm -rf "$build" && mkdir -p "$build" && tar -C "$build" -xJf "$repo/.deps/build-gpu.tar.xz" ||
    { log "cannot unpack .deps/build-gpu.tar.xz"; exit 1; }
  # CMake wrote absolute paths of the checkout it was built in: point that path here.
  src=$(cat "$build/.source_path")
  if [ "$src" != "$repo" ] && ! { [ ! -e "$src" ] && mkdir -p "$(dirname "$src")" && ln -s "$repo" "$src"; }; then
    # No link there: rewrite the CTest files (the binaries embed no source path).
    grep -rlIF "$src" "$build" | xargs -r sed -i "s#$src#$repo#g"
  fi
fi
# cuBLAS/NCCL/cudart by soname: the toolkit's where it has them, else PyTorch's wheels'.
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib "$py_site"/nvidia/*/lib "$py_site"/nvidia/cu13/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
export LD_LIBRARY_PATH
export PATH=$PATH:/usr/local/cuda/bin  # compute-sanitizer

# ---- what machine is this ---------------------------------------------------------------
# The commit: the checkout's, else the one the prebuilt build was packed at (pack_build.sh).
commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || cat "$build/.commit" 2>/dev/null || echo unknown)
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
{
  echo "commit: $commit"
  grep PRETTY_NAME /etc/os-release; ldd --version | head -1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nvcc --version | tail -1; cmake --version | head -1; nproc
  python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version())' 2>/dev/null
} 2>&1 | tee -a "$summary"

# ---- build --------------------------------------------------------------------------------
if [ $prebuilt = 0 ]; then
  nccl=()
  nccl_root=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null) &&
    [ -e "$nccl_root/include/nccl.h" ] && nccl=(-DNCCL_ROOT="$nccl_root")
  cmake -S "$repo" -B "$build" -DFLEXSP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    "${FLEXSP_DEPS_CMAKE_ARGS[@]}" "${nccl[@]}" >"$logs/configure.log" 2>&1 ||
    { tail -30 "$logs/configure.log"; save_logs; log "configure FAILED"; exit 1; }
  targets=(--target flexsp flexsp_gpu_tests bench_gpu test_gpu_mpi_staged test_gpu_mpi_ring test_gpu_mpi_ring_chunks)
  grep -q 'flexsp: NCCL communicator ON' "$logs/configure.log" && targets+=(test_gpu_mpi_nccl)
  [ $all = 1 ] && targets=()
  cmake --build "$build" -j"$(nproc)" "${targets[@]}" >"$logs/build.log" 2>&1 ||
    { grep -E "error|Error" "$logs/build.log" | head -30; save_logs; log "build FAILED"; exit 1; }
  log "build ok ($SECONDS s)"
fi
# Any library still not found: look for it in the usual places once.
for l in $(ldd "$build/flexsp" "$build/tests/flexsp_gpu_tests" | awk '/not found/ {print $1}' | sort -u); do
  f=$(find /usr/local /opt /usr/lib "$py_site" -name "$l" 2>/dev/null | head -1)
  [ -n "$f" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$f") && echo "$l: $f" | tee -a "$summary"
done
export LD_LIBRARY_PATH
missing=$(ldd "$build/flexsp" "$build/tests/flexsp_gpu_tests" | grep 'not found' | sort -u)
[ -n "$missing" ] && log "libraries not found: $missing"
ldd "$build/flexsp" | grep -E 'cublas|nccl|cudart|cudnn' | tee -a "$summary"
"$build/flexsp" train --help >/dev/null 2>&1 || log "flexsp does not start"

# ---- phases -------------------------------------------------------------------------------
# A phase that is a function runs under `timeout bash -c NAME`: the functions and the
# variables they read are exported.
work=$(mktemp -d)
lengths=$repo/.deps/wikipedia_lengths.txt
[ -f "$lengths" ] || lengths=$repo/../shared/data/wikipedia_lengths.txt
export repo build work lengths quick

# 150 s: cuDNN's attention tests build a graph per new shape on first use.
wanted gtest && phase gtest 150 "$build/tests/flexsp_gpu_tests"
wanted gtest && grep -hE '^\[attention_cudnn\]|cuDNN refused|Cudnn.*FAILED' "$logs/gtest.log" >>"$summary"
# The demo's configuration on 4 ranks sharing the GPU (bf16, staged MPI) against the CPU
# backend (fp32): the loss curves, and the largest relative difference.
demo_run() {
  # The corpus: flexsp's own sources (the machine's /usr/include may be far larger).
  "$build/flexsp" pack --force --out "$work/demo.h5" "$repo/lib" "$repo/kernels" >/dev/null || return 1
  local d=(--config "$repo/configs/demo.ini" --data.path="$work/demo.h5" --ranks-per-node 2)
  local t=$(( $(nproc) / 4 ))
  export OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t  # 4 ranks share the cores
  mpirun -np 4 --oversubscribe "$build/flexsp" train "${d[@]}" --train.backend=cuda >"$work/demo_gpu.log" 2>&1 || { cat "$work/demo_gpu.log"; return 1; }
  mpirun -np 4 --oversubscribe "$build/flexsp" train "${d[@]}" --train.backend=cpu --train.precision=fp32 >"$work/demo_cpu.log" 2>&1 || { cat "$work/demo_cpu.log"; return 1; }
  grep -E '^(model|backend)|activations' "$work/demo_gpu.log" | head -3
  for f in gpu cpu; do sed -nE 's#^step ([0-9]+)/[0-9]+ \| loss ([^ ]+) .*#\2#p' "$work/demo_$f.log" >"$work/demo_$f.loss"; done
  paste "$work/demo_cpu.loss" "$work/demo_gpu.loss" | awk '
    { d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > m) m = d; n++; print "step " n ": cpu fp32 " $1 "  gpu bf16 " $2 }
    END { printf "demo: %d steps, GPU bf16 against CPU fp32: largest relative loss difference %.2e\n", n, m; exit (n == 20 && m < 3e-2) ? 0 : 1 }'
}
wanted mpi && phase mpi 90 bash -c "cd '$build' && ctest -L gpu_mpi -E e2e_gpu_train -j3 --output-on-failure --timeout 80"
# e2e_gpu_train verbose: its log shows how far it got if it runs out of time.
wanted e2e && phase e2e 320 bash -c "cd '$build' && ctest -R e2e_gpu_train -V --timeout 310"
wanted e2e && grep -hE '(ok|note|FAIL|SKIPPED|2 ranks see|[a-z0-9_]+: backend)' "$logs/e2e.log" | sed 's/^[0-9]*: //' >>"$summary"

# A 1.3b LLaMA, one GPU, bf16, packed documents of Wikipedia lengths (random text, bytes
# tokenizer, vocab 32000 as the preset), ~16K tokens per step; the timing report's MFU.
model_run() {
  python3 - "$lengths" "$work/model.jsonl" <<'EOF' || return 1
import json, random, sys
random.seed(7)
try:
    lengths = [int(x) for x in open(sys.argv[1])]
except OSError:
    lengths = [600, 1200, 2500, 5000, 9000]
letters = "abcdefghijklmnopqrstuvwxyz     ,.ABCDEFGHIJ0123456789\n"
total = 0
with open(sys.argv[2], "w") as f:
    while total < 300000:
        n = max(2, min(random.choice(lengths), 16383))
        total += n
        f.write(json.dumps({"text": "".join(random.choices(letters, k=n))}) + "\n")
EOF
  "$build/flexsp" pack --jsonl --force --out "$work/model.h5" "$work/model.jsonl" >/dev/null || return 1
  local a=(--data.path="$work/model.h5" --model.preset=1.3b --model.vocab=32000
           --data.max_seq_len=16383 --train.global_batch_tokens=16384 --train.steps=8
           --train.backend=cuda --report.every=1 --planner.time_limit_ms=0)
  local r=1 ckpt
  for ckpt in ${FLEXSP_MODEL_CKPT:-false true}; do
    echo "--- checkpoint_activations=$ckpt"
    rm -rf "$work/model_report"
    "$build/flexsp" train "${a[@]}" --model.checkpoint_activations=$ckpt \
      --report.dir="$work/model_report" && r=0 && cat "$work/model_report/steps.csv" &&
      cp "$work/model_report/summary.json" "$out/model_summary_ckpt_$ckpt.json" &&
      cp "$work/model_report/steps.csv" "$out/model_steps_ckpt_$ckpt.csv"
  done
  return $r
}
wanted model && phase model 110 model_run
wanted model && grep -E '^(step 8/|--- |model:|run summary)|cuDNN refused|^attention: ' "$logs/model.log" >>"$summary"

# Each tool gets its own share, so that a slow racecheck still leaves memcheck's verdict;
# racecheck leaves out the one 4096-token sequence (its kernels are those of the others).
sanitize_run() {
  local r=0
  echo "--- compute-sanitizer --tool memcheck"
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 "$build/tests/flexsp_gpu_tests" \
    --gtest_brief=1 --gtest_filter='*GpuAttention*' || r=1
  # racecheck: the kernels with shared-memory tiles (tensor-core and simple attention), one
  # short case each: on an H100 it had not finished 7 such cases in 60 s.
  echo "--- compute-sanitizer --tool racecheck"
  timeout 80 compute-sanitizer --tool racecheck --error-exitcode 3 "$build/tests/flexsp_gpu_tests" \
    --gtest_brief=1 --gtest_filter='*GpuAttentionTc*/mix_d64_gqa2to1:GpuAttention.ManyShortSequences' || r=1
  return $r
}
wanted sanitize && phase sanitize 150 sanitize_run
wanted sanitize && grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^--- ' "$logs/sanitize.log" >>"$summary"

# After the model and the sanitizer: beside e2e_gpu_train, both outran their budgets.
wanted demo && phase demo 90 demo_run
wanted demo && grep -E '^demo:' "$logs/demo.log" >>"$summary"

wanted bench && phase bench 90 env FLEXSP_LENGTHS="$lengths" "$build/tests/bench_gpu" $quick
wanted bench && sed -n '/^fp32 vs bf16/,$p' "$logs/bench.log" >>"$summary"
wanted bench && grep -E 'cuDNN refused' "$logs/bench.log" | sort -u >>"$summary"

# NCCL's start-up on one rank, with its own log (one rank's init took ~30 s on an H100 VM).
nccl_run() {
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET,GRAPH "$build/tests/test_gpu_mpi_nccl" 2>&1 |
    while IFS= read -r l; do echo "$SECONDS $l"; done
}
wanted nccl && phase nccl 45 nccl_run

if wanted torch; then
  torch_s=$(( $(left) - 20 ))
  ratios_s=${FLEXSP_RATIOS_S:-150}
  wanted ratios && torch_s=$((torch_s - ratios_s))
  [ $torch_s -gt 390 ] && torch_s=390
  [ -n "${FLEXSP_TORCH_S:-}" ] && [ $torch_s -gt "$FLEXSP_TORCH_S" ] && torch_s=$FLEXSP_TORCH_S
  if [ $torch_s -ge 120 ]; then
    phase torch $((torch_s + 10)) env OUT="$out" bash "$repo/bench/gpu/run_torch_baseline.sh" "$torch_s"
    grep -vE '^\s*$' "$logs/torch.log" | tail -40 >>"$summary"
    # flexsp's attention on PyTorch's very batches: the ratios to PyTorch's SDPA.
    wanted ratios && [ -s "$out/torch_baseline.jsonl" ] &&
      phase ratios "$ratios_s" "$build/tests/bench_gpu" --quick --vs-torch "$out/torch_baseline.jsonl" &&
      sed -n '/^attention, bf16, flexsp against/,$p' "$logs/ratios.log" >>"$summary"
  else
    log "torch: SKIPPED (${torch_s} s left; bench/gpu/run_torch_baseline.sh runs alone)"
  fi
fi
if [ $all = 1 ] && [ $prebuilt = 0 ]; then
  phase cpu 1800 bash -c "cd '$build' && ctest -LE gpu -j$(nproc) --output-on-failure"
fi
# One line per measured configuration for bench/results/gpu-speed.jsonl (beside PyTorch's
# figures of the same preset and checkpointing, when its baseline ran).
for f in "$out"/model_summary_ckpt_*.json; do
  [ -e "$f" ] || continue
  c=${f##*_ckpt_}; c=${c%.json}
  t=(); [ -s "$out/torch_baseline.jsonl" ] && t=(--torch "$out/torch_baseline.jsonl")
  python3 "$repo/bench/gpu/speed_line.py" "$f" --device "$device" --preset 1.3b --ckpt "$c" \
    --commit "$commit" "${t[@]}" --out "$out/gpu-speed.jsonl" | tee -a "$summary"
done
save_logs
log "done in $SECONDS s, rc=$rc; logs in $out/logs.tar.gz"
exit $rc
