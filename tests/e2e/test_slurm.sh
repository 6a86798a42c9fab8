# The Slurm jobscripts (jobscripts/) on a real one-node Slurm that this test starts and
# stops itself (tests/e2e/slurm_cluster.sh: munged, slurmctld, slurmd under a temp dir):
#  a. train_cpu.sbatch, 4 ranks in 2 emulated nodes: the job completes, its checkpoint and
#     timing report are where the script says and `flexsp inspect` validates them;
#  b. the time limit: --time=1 with --signal=B:USR1@50 reaches only the job shell, which
#     forwards SIGUSR1 to srun and the ranks; they checkpoint, the job requeues itself
#     (same id) and the requeued attempt resumes from that checkpoint (not from scratch);
#     scancel then stops it with a checkpoint on SIGTERM and no further requeue;
#     chain.sh (with mpirun): 3 jobs to step 200; the first is sent SIGUSR1 through its
#     shell (scancel --batch) while its ranks start (held back until the first step),
#     checkpoints and ends; the second resumes and reaches step 200; the third finds step
#     200 done and exits at once;
#  c. scaling.sh --cpu --emulate on 1 and 2 nodes, flexsp and static, weak and strong: the
#     final dependent job's `flexsp report` tables, CSVs and the weak runs' batch sizes.
# Without slurm-wlm it prints SKIP and exits 77 (ctest: skipped). The checks run under
# `timeout` (FLEXSP_SLURM_TEST_BOUND seconds, default 420) in a second process; this one
# stops the cluster on every exit, and the daemons end by themselves shortly after the
# bound even if this process is killed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
source "$here/../cluster/jobs_lib.sh"
slurm_test_frame "$here/slurm_cluster.sh" "${FLEXSP_SLURM_TEST_BOUND:-420}" -- "$@"

# ---- the checks (in $work of the first process; the cluster is up) ----------------------
export FLEXSP_HOME=$FLEXSP_SOURCE_DIR FLEXSP_BIN=$FLEXSP
jobscripts=$FLEXSP_SOURCE_DIR/jobscripts
pack_small_corpus "$work/data.h5"
base=(--data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=128 --train.backend=cpu)
common=("${base[@]}" --train.global_batch_tokens=1024 --ranks-per-node 2)
t0=$SECONDS

# ---- a. one training job ----------------------------------------------------------------
jid=$(sbatch --parsable --job-name=basic --overcommit --ntasks=4 "$jobscripts/train_cpu.sbatch" \
        "${common[@]}" --train.steps=6 --checkpoint.every=3)
ended "$jid" COMPLETED
out=$work/basic-$jid.out
has_line '^process grid: 4 ranks = 2 node\(s\) x 2 ranks per node' "$out" || fail "basic: no 4-rank grid in $out"
has_line '^flexsp job: finished at step 6$' "$out" || fail "basic: did not finish at step 6"
cmp -s <(grep -v '^flexsp job:' "$out") "$work/runs/basic/logs/$jid.log" || fail "basic: the log differs from the job output"
ckpt=$work/runs/basic/checkpoints
[[ $(cat "$ckpt/latest") == step_00000006.h5 && -f $ckpt/step_00000003.h5 ]] || fail "basic: checkpoints: $(ls "$ckpt")"
inspect_ok "$ckpt/step_00000006.h5" 6
report=$work/runs/basic/reports/$jid
"$FLEXSP" inspect "$report/report.h5" >"$work/inspect.txt" || fail "basic: flexsp inspect of the report failed"
grep -qE '^  run: +4 ranks \(2 nodes\), sp_mode flexsp' "$work/inspect.txt" || fail "basic: report run line"
grep -qE '^  steps: +6, ' "$work/inspect.txt" || fail "basic: the report does not hold 6 steps"
[[ $(wc -l <"$report/steps.csv") -eq 7 ]] || fail "basic: steps.csv: expected a header and 6 rows"
grep -q '"world_size": 4' "$report/summary.json" || fail "basic: summary.json"
echo "ok: a. train_cpu.sbatch: 4 ranks, checkpoint step 6 and report valid ($((SECONDS - t0)) s)"

# ---- b1. the time limit: forwarded SIGUSR1, checkpoint, requeue, resume; then scancel ---
t1=$SECONDS
jid=$(sbatch --parsable --job-name=limit --overcommit --ntasks=4 --time=1 --signal=B:USR1@50 \
        "$jobscripts/train_cpu.sbatch" "${common[@]}" --train.steps=100000 --checkpoint.every=100000)
run=$work/runs/limit
# Slurm sends the warning within 10-40 s of the start; the job stops, checkpoints, requeues.
wait_for 90 "the time-limit stop" has_line '^flexsp job: requeueing job' "$work/limit-$jid.out"
has_line '^flexsp job: SIGUSR1 received' "$work/limit-$jid.out" || fail "limit: the shell did not get SIGUSR1"
stop=$(grep '^stopping after step' "$run/logs/$jid.log") || fail "limit: the ranks did not stop"
[[ $stop == *"(SIGUSR1): checkpoint written to $run/checkpoints/step_"* ]] || fail "limit: stop line: $stop"
step=$(latest_step "$run/checkpoints")
inspect_ok "$run/checkpoints/$(cat "$run/checkpoints/latest")" "$step"
# A requeued job waits for a begin time about 2 minutes on; the test lets it go sooner.
# Not in the second of the requeue: slurmd refuses a credential made in the same second
# as the old one's revocation ("Job credential revoked"), which is what that wait avoids.
wait_for 30 "the requeued job to be pending" job_is "$jid" PENDING
sleep 2
[[ $(job_field "$jid" Restarts) == 1 ]] || fail "limit: Restarts=$(job_field "$jid" Restarts), expected 1"
scontrol update JobId="$jid" StartTime=now
wait_for 60 "the requeued attempt to train" has_line '^step [0-9]+/' "$run/logs/$jid.r1.log"
grep -qF "resumed from $run/checkpoints/step_$(printf %08d "$step").h5: step $step," "$run/logs/$jid.r1.log" ||
  fail "limit: the requeued attempt did not resume from step $step"
grep -E '^step [0-9]+/' "$run/logs/$jid.r1.log" | head -1 | grep -qE "^step $((step + 1))/" ||
  fail "limit: the requeued attempt did not continue at step $((step + 1))"
wait_for 30 "a step more" has_line "^step $((step + 2))/" "$run/logs/$jid.r1.log"
scancel "$jid"  # SIGTERM to the job: the ranks checkpoint; no requeue
ended "$jid" CANCELLED
stop=$(grep '^stopping after step' "$run/logs/$jid.r1.log") || fail "limit: no stop on scancel"
# The ranks get SIGTERM from Slurm and SIGUSR1 from the job shell: either may be named.
[[ $stop =~ \((SIGTERM|SIGUSR1)\):\ checkpoint\ written\ to ]] || fail "limit: stop line after scancel: $stop"
has_line '^flexsp job: SIGTERM received' "$work/limit-$jid.out" || fail "limit: the shell did not get SIGTERM"
step2=$(latest_step "$run/checkpoints")
((step2 > step)) || fail "limit: no later checkpoint after scancel"
inspect_ok "$run/checkpoints/step_$(printf %08d "$step2").h5" "$step2"
[[ $(job_field "$jid" Restarts) == 1 ]] || fail "limit: requeued again after scancel"
echo "ok: b. --time=1 --signal=B:USR1@50: stopped at step $step, requeued, resumed; scancel stopped it at step $step2 ($((SECONDS - t1)) s)"

# ---- b2. chain.sh -------------------------------------------------------------------------
t1=$SECONDS
# Enough steps that the deferred signal lands before the end (a step takes ~15 ms here).
n=200
# mpirun this time, and a flexsp that starts slowly: the signal comes while the ranks
# start, before flexsp handles it, so the job shell must hold it back until the first step.
printf '#!/bin/sh\nsleep 4\nexec "%s" "$@"\n' "$FLEXSP" >"$work/slow_flexsp"
chmod +x "$work/slow_flexsp"
FLEXSP_LAUNCHER=mpirun FLEXSP_BIN=$work/slow_flexsp \
  bash "$jobscripts/chain.sh" --cpu --steps $n -n 3 --name chain --sbatch --overcommit --sbatch --ntasks=4 \
  -- "${common[@]}" --checkpoint.every=1000 >"$work/chain.txt"
mapfile -t ids < <(sed -nE 's/^chain: job ([0-9]+) \([0-9]+\/3\)$/\1/p' "$work/chain.txt")
((${#ids[@]} == 3)) || { cat "$work/chain.txt"; fail "chain: expected 3 job ids"; }
run=$work/runs/chain
wait_for 60 "the first chain job to launch" has_line '^flexsp job: mpirun ' "$run/slurm-${ids[0]}.out"
sleep 1  # the launch follows that line at once; the ranks then sleep 4 s before flexsp runs
scancel --batch --signal=USR1 "${ids[0]}"
for id in "${ids[@]}"; do ended "$id" COMPLETED; done
has_line '^flexsp job: training has not started yet: the signal waits for the first step' \
  "$run/slurm-${ids[0]}.out" || fail "chain: job 1 got the signal after the start, not during it"
stop=$(grep '^stopping after step' "$run/logs/${ids[0]}.log") || fail "chain: job 1 did not stop on SIGUSR1"
[[ $stop == *"(SIGUSR1): checkpoint written to "* ]] || fail "chain: job 1 stop line: $stop"
step=$(sed -E 's/^stopping after step ([0-9]+).*/\1/' <<<"$stop")
((step < n)) || fail "chain: job 1 ran to the end"
grep -q "resumed from $run/checkpoints/step_$(printf %08d "$step").h5: step $step," "$run/logs/${ids[1]}.log" ||
  fail "chain: job 2 did not resume from step $step"
has_line "^step $n/$n " "$run/logs/${ids[1]}.log" || fail "chain: job 2 did not reach step $n"
has_line "^flexsp job: the target step $n is already checkpointed" "$run/slurm-${ids[2]}.out" ||
  fail "chain: job 3 did not skip"
[[ ! -e $run/logs/${ids[2]}.log ]] || fail "chain: job 3 launched flexsp"
[[ $(latest_step "$run/checkpoints") == "$n" ]] || fail "chain: latest is not step $n"
inspect_ok "$run/checkpoints/step_$(printf %08d $n).h5" $n
echo "ok: b. chain.sh: job 1 stopped at step $step, job 2 resumed to step $n, job 3 skipped ($((SECONDS - t1)) s)"

# ---- c. scaling.sh ------------------------------------------------------------------------
t1=$SECONDS
study=$work/runs/study
bash "$jobscripts/scaling.sh" --cpu --emulate --ranks-per-node 2 --nodes 1,2 --steps 3 --batch-tokens 1024 \
  --out "$study" --sbatch --overcommit -- "${base[@]}" >"$work/scaling.txt"
report_job=$(sed -nE 's/^scaling: job ([0-9]+) aggregates them.*/\1/p' "$work/scaling.txt")
[[ -n $report_job && $(grep -c '^scaling: job [0-9]*: ' "$work/scaling.txt") -eq 8 ]] ||
  { cat "$work/scaling.txt"; fail "scaling: expected 8 runs and a report job"; }
ended "$report_job" COMPLETED 240
for kind in weak strong; do
  table=$study/report/$kind/table.txt
  [[ -f $table ]] || fail "scaling: no $table"
  [[ $(grep -cE '^ +[24] +[12] +(flexsp|static) ' "$table") -eq 4 ]] || { cat "$table"; fail "scaling: $kind: expected 4 rows"; }
  grep -qE '^ +2 +1 +flexsp .* 1\.000 +1\.000 ' "$table" || { cat "$table"; fail "scaling: $kind: the 1-node run is not the baseline"; }
  grep -qE "^ +4 +2 +flexsp .* [0-9]+\.[0-9]{3}  .*/$kind-flexsp-n2/report$" "$table" ||
    { cat "$table"; fail "scaling: $kind: no flexsp/static on the 2-node row"; }
  [[ $(wc -l <"$study/report/$kind/scaling.csv") -eq 5 ]] || fail "scaling: $kind: CSV rows"
done
tokens() { sed -nE 's/^  "tokens": ([0-9]+),?$/\1/p' "$study/$1/report/summary.json"; }
w1=$(tokens weak-flexsp-n1) w2=$(tokens weak-flexsp-n2) s1=$(tokens strong-flexsp-n1) s2=$(tokens strong-flexsp-n2)
((w2 > w1 * 3 / 2 && s1 == s2)) || fail "scaling: tokens weak $w1 -> $w2, strong $s1 -> $s2"
cat "$study/report/weak/table.txt"
echo "ok: c. scaling.sh: weak ($w1 -> $w2 tokens) and strong tables from the dependent report job ($((SECONDS - t1)) s)"
echo "slurm: all checks passed in $((SECONDS - t0)) s"
