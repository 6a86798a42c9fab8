# A node dies during a multi-node training job (tests/cluster/cluster.sh, 4 nodes;
# docs/cluster.md). jobscripts/chain.sh submits a job of train.sbatch on 4 nodes (8 ranks,
# 2 per node) that checkpoints every 10 steps, and a next job of the chain with --nodes=2-4
# (afterany on the first); after its step 25 node4 dies (`cluster.sh kill`: its link is
# cut first, so that no connection is closed, then every process on it is killed, slurmd
# included). Then:
#  - the first job ends within a bounded time, 120 s (Slurm notices the node within SlurmdTimeout,
#    10 s here, and kills the job's steps on the other nodes), in state NODE_FAIL, and its
#    output names the node failure;
#  - nothing is half-written: `latest` names a checkpoint that verifies, every checkpoint
#    in the directory verifies, and the attempt's timing report reads back;
#  - the next job of the chain starts on the nodes left (3, or 2: Slurm may start a range
#    below its top; 6 or 4 ranks), resumes from that
#    checkpoint, and its losses and gradient norms per step, and its final weights, equal
#    an uninterrupted one-process run's to 1e-5.
# Skipped (exit 77) where the cluster cannot be built. The checks run under `timeout`
# (FLEXSP_CLUSTER_TEST_BOUND, default 540 s).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../e2e/lib.sh"
source "$here/jobs_lib.sh"
slurm_test_frame "$here/cluster.sh" "${FLEXSP_CLUSTER_TEST_BOUND:-540}" --nodes 4 --slurmd-timeout 10 -- "$@"

# ---- the checks (in $work; the cluster is up) ----------------------------------------------
cluster_job_env
pack_varied_corpus "$work/data.h5"
steps=80 every=10 kill_after=25
common=(--data.path="$work/data.h5" --model.preset=tiny --model.heads=8 --model.kv_heads=2
        --data.max_seq_len=512 --train.global_batch_tokens=3000
        --optim.lr=1e-3 --optim.warmup_steps=2 --train.backend=cpu)
t0=$SECONDS
train_run single 1 $steps "${common[@]}" --train.steps=$steps

# chain NODES [SBATCH OPTION]: one more job of the chain "nf" on NODES (a count or a range);
# prints its id.
chain() {
  bash "$FLEXSP_SOURCE_DIR/jobscripts/chain.sh" --steps $steps -n 1 --name nf --sbatch --nodes="$1" \
    --sbatch --ntasks-per-node=2 --sbatch --gpus-per-node=2 ${2:+--sbatch "$2"} \
    -- "${common[@]}" --checkpoint.every=$every --dump-weights="$work/nf.h5" >"$work/chain.txt"
  sed -nE 's/^chain: job ([0-9]+) \(1\/1\)$/\1/p' "$work/chain.txt" | grep . || { cat "$work/chain.txt"; fail "chain: no job id"; }
}
# The first on all 4 nodes (Slurm may start a range below its top), the next on whatever
# nodes there are when it starts (2-4).
ids=("$(chain 4)")
ids+=("$(chain 2-4 --dependency=afterany:"${ids[0]}")")
run=$work/runs/nf
log=$run/logs/${ids[0]}.log
wait_for 300 "step $kill_after" has_line "^step ($kill_after|2[6-9]|[3-9][0-9])/" "$log"
has_line '^process grid: 8 ranks = 4 node\(s\) x 2 ranks per node' "$log" || fail "not on 4 nodes x 2 ranks"
! has_line "^step $steps/" "$log" || fail "the run ended before the node died: make it longer"
bash "$here/cluster.sh" kill "$cluster" node4
t_kill=$SECONDS

# The first job ends within the bound: NODE_FAIL when Slurm notices the node first, FAILED
# when MPI on the nodes left fails first (Open MPI may crash in a collective with a dead
# peer); either way its output says a node failed.
wait_for 120 "the first job to end" job_gone "${ids[0]}"
ended_s=$((SECONDS - t_kill))
((ended_s <= 120)) || fail "the job took ${ended_s}s to end after the node died"
state=$(job_field "${ids[0]}" JobState)
[[ $state == NODE_FAIL || $state == FAILED ]] || fail "the first job ended $state"
out=$run/slurm-${ids[0]}.out
grep -E "NODE FAILURE|Node failure on node4|^flexsp job: a node of this job failed" "$out" >"$work/failure_lines" ||
  { cat "$out"; fail "the job's output names no node failure"; }
grep -q '^flexsp job: a node of this job failed' "$work/failure_lines" || { cat "$out"; fail "job.sh did not say a node failed"; }
echo "ok: node4 died; the job ended ${ended_s}s later, $state; its output says:"
sed 's/^/    /' "$work/failure_lines"

# Nothing half-written: latest names a verified checkpoint; every checkpoint verifies.
step=$(latest_step "$run/checkpoints")
((step >= kill_after - every && step % every == 0)) || fail "latest is step $step"
for f in "$run"/checkpoints/step_*.h5; do
  s=$(sed -E 's/.*step_0*([0-9]+)\.h5$/\1/' <<<"$f")
  inspect_ok "$f" "$s"
done
"$FLEXSP" inspect "$run/reports/${ids[0]}/report.h5" >/dev/null || fail "the attempt's report.h5 does not read back"
echo "ok: latest is step $step; checkpoints $(cd "$run/checkpoints" && echo step_*.h5) verify;" \
  "leftovers: $(cd "$run/checkpoints" && ls | grep -vE '^(latest|step_[0-9]+\.h5)$' | tr '\n' ' ')"

# The second job: on the nodes left (2 or 3), from the latest checkpoint, like one process.
ended "${ids[1]}" COMPLETED 300
log1=$run/logs/${ids[1]}.log
left=$(sed -nE 's/^process grid: ([0-9]+) ranks = ([23]) node\(s\) x 2 ranks per node; .*/\2/p' "$log1")
[[ -n $left ]] || { cat "$log1"; fail "the second job is not on 2 or 3 nodes x 2 ranks"; }
! has_line 'host node4' "$log1" || fail "the second job ran on node4"
grep -qF "resumed from $run/checkpoints/step_$(printf %08d "$step").h5: step $step," "$log1" ||
  fail "the second job did not resume from step $step"
progress "$log1" >"$work/nf.steps"
[[ $(head -1 "$work/nf.steps" | cut -d' ' -f1) == $((step + 1)) ]] || fail "the second job did not continue at step $((step + 1))"
# The reference's steps from there on, to compare with.
awk -v s="$step" '$1 > s' "$work/single.steps" >"$work/tail.steps"
cp "$work/single.h5" "$work/tail.h5"  # the same final step
trains_like tail nf 1e-5 1e-5
echo "ok: the next job ran on the $left nodes left ($((2 * left)) ranks), from step $step"
echo "cluster node failure: all checks passed in $((SECONDS - t0)) s"
