# jobscripts/scaling.sh on 1, 2 and 4 real nodes of the test cluster (tests/cluster/cluster.sh;
# docs/cluster.md): a cost model profiled on 2 nodes x 2 ranks, then weak scaling with 2
# ranks per node, flexsp and static, one run at a time (--serial: the nodes share this
# machine's cores), and the dependent job's `flexsp report`: the table has a row per run
# with its real node count (1, 2, 4; no emulated nodes), the measured and the predicted
# step time, efficiency 1 at one node and flexsp/static on every node count; the CSV plots
# as a scaling plot (log-log tokens/s against GPUs with ideal and predicted lines,
# efficiency, flexsp over static). The runs' grids name the allocated nodes.
# FLEXSP_CLUSTER_KINDS (weak) and FLEXSP_CLUSTER_STEPS (4) size the study.
# Skipped (exit 77) where the cluster cannot be built. The checks run under `timeout`
# (FLEXSP_CLUSTER_TEST_BOUND, default 600 s: it takes about 1.5 minutes on 2 idle cores,
# several under a load of 25).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../e2e/lib.sh"
source "$here/jobs_lib.sh"
slurm_test_frame "$here/cluster.sh" "${FLEXSP_CLUSTER_TEST_BOUND:-600}" --nodes 4 -- "$@"

# ---- the checks (in $work; the cluster is up) ----------------------------------------------
cluster_job_env
steps=${FLEXSP_CLUSTER_STEPS:-4} kinds=${FLEXSP_CLUSTER_KINDS:-weak}
t0=$SECONDS
pack_varied_corpus "$work/data.h5"
srun --nodes=2 --ntasks-per-node=2 --mpi=pmix "$FLEXSP" profile --model tiny --seq-lens 128,512,1024 \
  --repeats 1 --out "$work/cm.ini" >"$work/profile.txt" 2>&1 ||
  { cat "$work/profile.txt"; fail "flexsp profile"; }
study=$work/study
bash "$FLEXSP_SOURCE_DIR/jobscripts/scaling.sh" --cpu --ranks-per-node 2 --nodes 1,2,4 --kinds "$kinds" \
  --steps "$steps" --batch-tokens 4096 --serial --out "$study" -- \
  --data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=1024 --train.micro_batch_tokens=768 \
  --train.backend=cpu --planner.cost_model="$work/cm.ini" >"$work/scaling.txt"
report_job=$(sed -nE 's/^scaling: job ([0-9]+) aggregates them.*/\1/p' "$work/scaling.txt")
[[ -n $report_job ]] || { cat "$work/scaling.txt"; fail "scaling: no report job"; }
ended "$report_job" COMPLETED 300
for kind in ${kinds//,/ }; do
  table=$study/report/$kind/table.txt
  cat "$table"
  for n in 1 2 4; do
    for mode in flexsp static; do
      row=$(grep -E "^ +$((2 * n)) +$n +$mode " "$table") || fail "$kind: no $mode row on $n node(s)"
      # ms/step and predicted (a number: the cost model priced every step)
      [[ $row =~ ^\ +[0-9]+\ +[0-9]+\ +[a-z]+\ +0\ +$steps\ +[0-9.]+\ +[0-9.]+\  ]] ||
        fail "$kind: no measured and predicted step time in: $row"
      [[ $mode == static || $row =~ \ [0-9]+\.[0-9]{3}\ \ /.*/$kind-flexsp-n$n/report$ ]] ||
        fail "$kind: no flexsp/static on $n node(s): $row"
      log=$(ls "$study/$kind-$mode-n$n"/logs/*.log)
      has_line "^process grid: $((2 * n)) ranks = $n node\(s\) x 2 ranks per node; " "$log" || fail "$log: grid"
      ! has_line emulated "$log" || fail "$log: emulated nodes"
      [[ $(sed -nE 's/.* host (node[0-9]+) .*/\1/p' "$log" | sort -u | wc -l) -eq $n ]] ||
        fail "$log: ranks not on $n distinct nodes"
    done
  done
  grep -qE '^ +2 +1 +flexsp .* 1\.000 +1\.000 ' "$table" || fail "$kind: the 1-node flexsp run is not the baseline"
  [[ -s $study/report/$kind/scaling.png ]] || fail "$kind: no scaling.png"
  plot_reads_as_scaling "$study/report/$kind/scaling.csv"
done
# FLEXSP_CLUSTER_KEEP=DIR keeps the study's report (tables, CSVs, PNGs) for bench/results.
[[ -z ${FLEXSP_CLUSTER_KEEP:-} ]] || cp -r "$study/report" "$FLEXSP_CLUSTER_KEEP"
echo "cluster scaling: all checks passed in $((SECONDS - t0)) s"
