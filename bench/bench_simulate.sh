#!/usr/bin/env bash
# flexsp simulate against measured CPU runs. On this machine: pack a real corpus
# (the Linux UAPI headers, bytes tokenizer), fit a cost model with `flexsp profile` (2
# ranks, 1 per emulated node), train the same model for STEPS steps in flexsp mode on 1, 2
# and 4 emulated nodes of 1 rank each -- strong scaling (BATCH tokens per step) and weak
# scaling (BATCH x nodes) -- with report.dir, then run `flexsp simulate` with the same
# model, cost model, batches, seed, micro-batch cap and node counts, and print predicted
# against measured step time and tokens/s per node count with the relative error.
#
#   bench/bench_simulate.sh BUILD_DIR [WORK_DIR]
#   env: MODEL=small NODES="1 2 4" STEPS=8 BATCH=8192 MBT=2048 MAX_SEQ=1024 PEAK=0.2
#
# Both sides cover the same steps 1..STEPS (the same batches: the sampler depends on the
# data, the seed and the step only). One thread per rank; ranks beyond the cores are
# oversubscribed (Open MPI, scripts/env.sh), which the model does not know about.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: bench_simulate.sh BUILD_DIR [WORK_DIR]}" && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work"
source "$here/../scripts/env.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
F="$build/flexsp"
MODEL=${MODEL:-small} NODES=${NODES:-"1 2 4"} STEPS=${STEPS:-8} BATCH=${BATCH:-8192}
MBT=${MBT:-2048} MAX_SEQ=${MAX_SEQ:-1024} PEAK=${PEAK:-0.2}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc --all) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
[[ -f "$work/corpus.h5" ]] || "$F" pack --glob '*.h' --out "$work/corpus.h5" /usr/include/linux >/dev/null
mpirun -np 2 "$F" profile --model "$MODEL" --ranks-per-node 1 --seq-lens 128,256,512,$MAX_SEQ \
  --repeats 3 --out "$work/cm.ini" | tee "$work/profile.txt" | grep -E "bandwidth|compute fit"

train() {  # nodes batch_tokens dir
  rm -rf "$3"
  mpirun -np "$1" "$F" train --data.path="$work/corpus.h5" --model.preset="$MODEL" \
    --data.max_seq_len="$MAX_SEQ" --train.global_batch_tokens="$2" --train.steps="$STEPS" \
    --train.backend=cpu --train.micro_batch_tokens="$MBT" --parallel.sp_mode=flexsp \
    --planner.cost_model="$work/cm.ini" --ranks-per-node 1 --report.dir="$3" \
    --report.peak_tflops="$PEAK" >"$3.log"
}
first=${NODES%% *}
for n in $NODES; do
  train "$n" "$BATCH" "$work/strong_$n"
  if [[ $n == "$first" ]]; then
    cp -r "$work/strong_$n" "$work/weak_$n"
  else
    train "$n" $((BATCH * n / first)) "$work/weak_$n"
  fi
  echo "trained on $n node(s)"
done

sim_cmd=("$F" simulate --data "$work/corpus.h5" --model "$MODEL" --cost-model "$work/cm.ini"
  --gpus-per-node 1 --nodes "$(echo $NODES | tr ' ' ',')" --zero 0 --max-seq-len "$MAX_SEQ"
  --global-batch-tokens "$BATCH" --steps "$STEPS" --micro-batch-tokens "$MBT" --time-limit-ms 1000
  --peak-tflops "$PEAK" --plot "$work/simulate.png")
echo "simulate: ${sim_cmd[*]#$build/}"
"${sim_cmd[@]}" >"$work/simulate.txt"
"${sim_cmd[@]}" --json >"$work/simulate.json" 2>/dev/null

python3 - "$work" $NODES <<'PY'
import csv, json, sys
work, nodes = sys.argv[1], [int(x) for x in sys.argv[2:]]
rows = {r["nodes"]: r for r in json.load(open(f"{work}/simulate.json"))}
def measured(d):
    st = list(csv.DictReader(open(f"{work}/{d}/steps.csv")))
    wall = sum(float(s["wall_ms"]) for s in st)
    tok = sum(float(s["tokens"]) for s in st)
    pred = sum(float(s["predicted_ms"]) for s in st)
    return wall / len(st), tok / (wall / 1e3), pred / len(st)
print("| scaling | nodes (ranks) | tokens/step | measured ms/step | simulated ms/step | error | "
      "planner in training, ms | measured tok/s | simulated tok/s | measured eff | simulated eff |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for scaling in ("strong", "weak"):
    base = None
    for n in nodes:
        r = rows[n] if scaling == "weak" else dict(rows[n], **rows[n].get("strong", {}))
        ms, tps, pred = measured(f"{scaling}_{n}")
        base = base or (tps, n)
        eff = (tps / n) / (base[0] / base[1])
        sim_eff = r["weak_scaling_efficiency"] if scaling == "weak" else r["strong_scaling_efficiency"]
        print(f"| {scaling} | {n} | {r['global_batch_tokens']:.0f} | {ms:.0f} | {r['flexsp_step_ms']:.0f} | "
              f"{100 * (r['flexsp_step_ms'] / ms - 1):+.1f}% | {pred:.0f} | {tps:.0f} | {r['tokens_per_s']:.0f} | "
              f"{eff:.3f} | {sim_eff:.3f} |")
PY
echo "work dir: $work (simulate.txt, simulate.png, profile.txt, cm.ini, run reports)"
