# Links between nodes slower than inside them (tests/cluster/cluster.sh, 2 nodes x 2 ranks;
# docs/cluster.md): `cluster.sh shape` limits what every node sends to 100 Mbit/s (tc tbf;
# FLEXSP_CLUSTER_DELAY adds a delay with netem where the kernel has it), then:
#  - `flexsp profile` over the 4 ranks measures the all-to-all across nodes (d=4) at less
#    than a quarter of the one inside a node (d=2, shared memory);
#  - a short run with that profile as the cost model: flexsp puts every group of 1 or 2
#    ranks inside a node and most tokens in such groups; static SP (sp_size 4) puts every
#    sequence on a group across both nodes; the planner predicts flexsp's steps faster.
#    Both runs' measured and predicted step times are printed (the figures of
#    bench/results/*-cluster.md); measured times are not asserted (the machine's
#    cores are shared).
# FLEXSP_CLUSTER_RATE (100mbit) and FLEXSP_CLUSTER_STEPS (6) size the run.
# Skipped (exit 77) where the cluster cannot be built. The checks run under `timeout`
# (FLEXSP_CLUSTER_TEST_BOUND, default 600 s: it takes about a minute on 2 idle cores,
# several under a load of 25).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../e2e/lib.sh"
source "$here/jobs_lib.sh"
slurm_test_frame "$here/cluster.sh" "${FLEXSP_CLUSTER_TEST_BOUND:-600}" --nodes 2 -- "$@"

# ---- the checks (in $work; the cluster is up) ----------------------------------------------
cluster_job_env
rate=${FLEXSP_CLUSTER_RATE:-100mbit} steps=${FLEXSP_CLUSTER_STEPS:-6}
t0=$SECONDS
pack_varied_corpus "$work/data.h5"
bash "$here/cluster.sh" shape "$cluster" "$rate" ${FLEXSP_CLUSTER_DELAY:-}
launch() { srun --nodes=2 --ntasks-per-node=2 --mpi=pmix "$FLEXSP" "$@"; }

launch profile --model tiny --seq-lens 256,1024,2048 --repeats 1 \
  --out "$work/cm.ini" >"$work/profile.txt" 2>&1 || { cat "$work/profile.txt"; fail "flexsp profile"; }
grep -E '^(all-to-all|point-to-point|per step)' "$work/profile.txt"
key() { sed -nE "s/^$1 = ([0-9.e+-]+)$/\1/p" "$work/cm.ini"; }
intra=$(key bw_intra_2) inter=$(key bw_inter_4)
[[ -n $intra && -n $inter ]] || { cat "$work/cm.ini"; fail "no bw_intra_2 / bw_inter_4 in the profile"; }
awk -v a="$intra" -v e="$inter" 'BEGIN { exit !(e < a / 4) }' ||
  fail "all-to-all across nodes $inter GB/s is not below a quarter of inside a node, $intra GB/s"
echo "ok: profile: all-to-all $intra GB/s per rank inside a node, $inter across nodes ($rate links)"

# One run per sp_mode; longer sequences need 2 ranks (micro_batch_tokens 1536 < 2049).
run=(train --data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=2048
     --train.global_batch_tokens=8192 --train.micro_batch_tokens=1536 --train.steps="$steps"
     --train.backend=cpu --planner.cost_model="$work/cm.ini" --print-plans)
for mode in flexsp static; do
  launch "${run[@]}" --parallel.sp_mode=$mode --parallel.sp_size=4 --report.dir="$work/report_$mode" \
    >"$work/$mode.log" 2>&1 || { cat "$work/$mode.log"; fail "$mode run"; }
done
# plan_tokens LOG: "inside across" -- tokens in groups inside a node (2 ranks per node:
# [r] or [2k-(2k+1)]) and in groups across nodes; fails on a group of 1-2 ranks across nodes.
plan_tokens() {
  sed -nE 's/^  mb [0-9]+: //p' "$1" | tr '|' '\n' | sed -nE 's/.*\[([0-9]+)(-([0-9]+))?\] d=([0-9]+) [0-9]+ seq ([0-9]+) tok.*/\1 \3 \4 \5/p' |
    awk '{ last = $2 == "" ? $1 : $2
           if (int($1 / 2) == int(last / 2)) inside += $4
           else { across += $4; if ($3 <= 2) { print "group " $1 "-" last " crosses nodes" > "/dev/stderr"; bad = 1 } } }
         END { print inside + 0, across + 0; exit bad }'
}
read -r f_in f_across < <(plan_tokens "$work/flexsp.log") || fail "flexsp put a group of 1-2 ranks across nodes"
read -r s_in s_across < <(plan_tokens "$work/static.log") || fail "static put a small group across nodes"
((f_in > f_across)) || fail "flexsp: $f_in tokens in groups inside nodes, $f_across across"
((s_in == 0 && s_across > 0)) || fail "static: $s_in tokens inside nodes, $s_across across (expected all across)"
echo "ok: flexsp: $f_in tokens in groups inside a node, $f_across across; static: all $s_across across"

# Mean measured and predicted ms per step (first step left out), from steps.csv.
means() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) c[$i] = i; next }
           NR > 2 { w += $(c["wall_ms"]); p += $(c["predicted_ms"]); n++ }
           END { printf "%.1f %.1f\n", w / n, p / n }' "$work/report_$1/steps.csv"
}
read -r f_ms f_pred < <(means flexsp)
read -r s_ms s_pred < <(means static)
awk -v f="$f_pred" -v s="$s_pred" 'BEGIN { exit !(f < s) }' || fail "predicted flexsp $f_pred ms, static $s_pred ms"
printf '%-7s %12s %14s\n' sp_mode "ms/step" "predicted ms"
printf '%-7s %12s %14s\n' flexsp "$f_ms" "$f_pred" static "$s_ms" "$s_pred"
awk -v f="$f_ms" -v s="$s_ms" -v fp="$f_pred" -v sp="$s_pred" \
  'BEGIN { printf "flexsp over static: measured %.2fx, predicted %.2fx\n", s / f, sp / fp }'
"$FLEXSP" report "$work/report_flexsp" "$work/report_static" | sed -n '/predicted against measured/,$p'
echo "cluster links: all checks passed in $((SECONDS - t0)) s"
