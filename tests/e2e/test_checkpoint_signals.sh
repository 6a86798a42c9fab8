# Preemption (docs/checkpoints.md): SIGTERM to the ranks, SIGUSR1 to mpirun (which forwards it) and
# train.max_minutes each stop the run at a step boundary with a checkpoint, a line naming
# it and exit 0; SIGTERM to mpirun kills the ranks (Open MPI) and loses nothing (a signal during start-up too, after the first step); resuming continues exactly (the same losses and gradient
# norms as an uninterrupted run).
# A run killed with SIGKILL while it writes a checkpoint leaves the previous checkpoint
# loadable and `latest` naming it: held before its rename, and held in its background
# write while training goes on. LD_PRELOAD shims hold them (tests/support/slow_rename.c,
# FLEXSP_SLOW_RENAME_MS; slow_write.c, FLEXSP_SLOW_WRITE_MS), not hooks in flexsp.
source "$(dirname "$0")/lib.sh"
: "${FLEXSP_SLOW_RENAME_LIB:?FLEXSP_SLOW_RENAME_LIB must name the slow-rename shim (ctest sets it)}"
: "${FLEXSP_SLOW_WRITE_LIB:?FLEXSP_SLOW_WRITE_LIB must name the slow-write shim (ctest sets it)}"
# slow MS: the environment that holds each checkpoint MS milliseconds before its rename
# (used through env, so that $! stays mpirun's pid).
slow() { echo "LD_PRELOAD=$FLEXSP_SLOW_RENAME_LIB" "FLEXSP_SLOW_RENAME_MS=$1"; }
pack_varied_corpus "$work/data.h5"

common=(--data.path="$work/data.h5" --model.preset=tiny --model.heads=8 --model.kv_heads=2
        --data.max_seq_len=256 --train.global_batch_tokens=1200 --optim.lr=1e-3
        --optim.warmup_steps=2 --train.backend=cpu --train.steps=20
        --parallel.sp_mode=static --parallel.sp_size=2)  # static plans: bit-for-bit repeatable

# wait_for cond-command...: polls for up to 60 s.
wait_for() {
  local i
  for ((i = 0; i < 600; ++i)); do "$@" && return 0; sleep 0.1; done
  fail "timed out waiting for: $*"
}

"$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${common[@]}" >"$work/straight.log" 2>&1 ||
  { cat "$work/straight.log"; fail "straight run failed"; }
progress "$work/straight.log" >"$work/straight.steps"

# start name args...: starts a 2-rank run in the background (checkpoint every 2 steps, each
# held 300 ms so that a signal lands mid-run); sets $pid to mpirun's.
start() {
  local name=$1; shift
  env $(slow 300) "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${common[@]}" \
    --checkpoint.dir="$work/$name" --checkpoint.every=2 "$@" >"$work/$name.log" 2>&1 &
  pid=$!
}

# stopped name: the run exited 0 with a checkpoint named on its stop line; resuming it
# reproduces the straight run's remaining losses and gradient norms exactly.
stopped() {
  local name=$1 rc=0
  wait "$pid" || rc=$?
  [[ $rc -eq 0 ]] || { cat "$work/$name.log"; fail "$name: exit $rc after the stop request"; }
  local line ckpt step
  line=$(grep '^stopping after step' "$work/$name.log") || { cat "$work/$name.log"; fail "$name: no stop line"; }
  ckpt=${line##*checkpoint written to }
  step=$(sed -E 's/^stopping after step ([0-9]+).*/\1/' <<<"$line")
  [[ -f $ckpt && $(cat "$work/$name/latest") == "$(basename "$ckpt")" ]] || fail "$name: $ckpt is not latest"
  (( step < 20 )) || fail "$name: ran to the end"
  "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${common[@]}" --checkpoint.dir="$work/$name" \
    --resume auto >"$work/$name.resume.log" 2>&1 || { cat "$work/$name.resume.log"; fail "$name: resume failed"; }
  cat <(progress "$work/$name.log") <(progress "$work/$name.resume.log") | diff - "$work/straight.steps" ||
    fail "$name: stopped + resumed losses or gradient norms differ from the straight run"
  echo "ok: $name: '$line'; resumed at step $((step + 1)) with identical losses and gradient norms"
}

has_step() { grep -qE "^step $1/" "$2"; }
children() { pgrep -P "$1"; }

start sigterm
wait_for has_step 3 "$work/sigterm.log"
kill -TERM $(children "$pid")
stopped sigterm
grep -q '(SIGTERM)' "$work/sigterm.log" || fail "sigterm: the stop line does not name SIGTERM"

start sigusr1
wait_for has_step 3 "$work/sigusr1.log"
kill -USR1 "$pid"  # to mpirun, which forwards SIGUSR1 to the ranks
stopped sigusr1
grep -q '(SIGUSR1)' "$work/sigusr1.log" || fail "sigusr1: the stop line does not name SIGUSR1"

# SIGTERM to mpirun itself is not a stop request flexsp can honour: Open MPI's mpirun stops
# forwarding the ranks' output, sends them SIGTERM and SIGKILLs them
# odls_base_sigkill_timeout seconds later (default 1), then exits 1. Whether the ranks'
# stop checkpoint lands depends on that race; what must hold is that nothing is lost:
# `latest` names a complete checkpoint that verifies, and resuming from it continues the
# straight run exactly (docs/checkpoints.md lists the exit codes of each way to stop).
start sigterm_mpirun
wait_for has_step 3 "$work/sigterm_mpirun.log"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc -ne 0 ]] || fail "sigterm_mpirun: mpirun exited 0"
[[ -f $work/sigterm_mpirun/latest ]] || fail "sigterm_mpirun: no latest"
step=$(sed -E 's/^step_0*([0-9]+)\.h5$/\1/' "$work/sigterm_mpirun/latest")
"$FLEXSP" inspect "$work/sigterm_mpirun/$(cat "$work/sigterm_mpirun/latest")" | grep -q 'checksums:  all 63 verified' ||
  fail "sigterm_mpirun: latest does not verify"
"$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${common[@]}" --checkpoint.dir="$work/sigterm_mpirun" \
  --resume auto >"$work/sigterm_mpirun.resume.log" 2>&1 || fail "sigterm_mpirun: resume failed"
progress "$work/sigterm_mpirun.resume.log" | diff - <(tail -n +$((step + 1)) "$work/straight.steps") ||
  fail "sigterm_mpirun: resumed losses or gradient norms differ from the straight run"
echo "ok: SIGTERM to mpirun: exit $rc, latest step $step verifies and resumes exactly"

# A signal during start-up (here: as soon as a rank catches SIGTERM, i.e. first thing in
# main, before MPI_Init) is noted, not fatal: the run stops after its first step.
catches_term() {  # pid: SIGTERM's bit (15 - 1) in the caught-signals mask
  local mask
  mask=$(awk '/^SigCgt:/ { print $2 }' "/proc/$1/status" 2>/dev/null) || return 1
  [[ -n $mask ]] && (( 0x$mask & 0x4000 ))
}
ranks_catch_term() {
  local r ranks
  ranks=$(children "$pid") || return 1
  for r in $ranks; do catches_term "$r" || return 1; done
}
start early
wait_for ranks_catch_term
has_step 1 "$work/early.log" && fail "early: training had already started; the case is not tested"
kill -TERM $(children "$pid")
stopped early
grep -q '^stopping after step 1 (SIGTERM)' "$work/early.log" || fail "early: did not stop after step 1"

start minutes --train.max_minutes=0.01  # 0.6 s of rank 0's clock
stopped minutes
grep -q 'train.max_minutes = 0.01 reached' "$work/minutes.log" || fail "minutes: no max_minutes stop line"

# kill_rank0 name: SIGKILL to rank 0 of the run in the background (it publishes
# checkpoints: it holds step 4's); the run fails.
kill_rank0() {
  local rank0="" c rc=0
  for c in $(children "$pid"); do
    tr '\0' '\n' <"/proc/$c/environ" | grep -qx 'OMPI_COMM_WORLD_RANK=0' && rank0=$c
  done
  [[ -n $rank0 ]] || fail "$1: rank 0 not found"
  kill -KILL "$rank0"
  wait "$pid" || rc=$?
  [[ $rc -ne 0 ]] || fail "$1: mpirun exited 0"
}
latest_is() { [[ -f $work/$1/latest && $(cat "$work/$1/latest") == "$2" ]]; }
# killed name: step 2's checkpoint is still the latest, step 4's was not published, step
# 2's verifies and resuming from it reproduces the straight run.
killed() {
  local name=$1
  latest_is "$name" step_00000002.h5 || fail "$name: latest moved"
  [[ ! -e $work/$name/step_00000004.h5 ]] || fail "$name: the interrupted checkpoint was published"
  "$FLEXSP" inspect "$work/$name/step_00000002.h5" | grep -q 'checksums:  all 63 verified' ||
    fail "$name: the previous checkpoint does not verify"
  "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${common[@]}" --checkpoint.dir="$work/$name" \
    --checkpoint.every=2 --resume auto >"$work/$name.resume.log" 2>&1 ||
    { cat "$work/$name.resume.log"; fail "$name: resume failed"; }
  cat <(progress "$work/$name.log" | head -2) <(progress "$work/$name.resume.log") | diff - "$work/straight.steps" ||
    fail "$name: resumed losses or gradient norms differ from the straight run"
  [[ ! -e $work/$name/step_00000004.h5.partial ]] || fail "$name: the partial file was not replaced"
}

# SIGKILL while step 4's checkpoint is held before its rename: step 2's stays the latest.
env $(slow 3000) "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${common[@]}" \
  --checkpoint.dir="$work/killed" --checkpoint.every=2 >"$work/killed.log" 2>&1 &
pid=$!
wait_for latest_is killed step_00000002.h5
wait_for test -f "$work/killed/step_00000004.h5.partial"
sleep 0.5
kill_rank0 killed
killed killed
echo "ok: SIGKILL during a checkpoint's rename: the previous one stays latest and resumes exactly"

# SIGKILL while step 4's checkpoint is being written in the background (each write of its
# tensor bytes held 300 ms) and training has gone on past step 5: the same.
env LD_PRELOAD="$FLEXSP_SLOW_WRITE_LIB" FLEXSP_SLOW_WRITE_MS=300 "$FLEXSP_MPIRUN" -np 2 --oversubscribe \
  "$FLEXSP" train "${common[@]}" --checkpoint.dir="$work/bgkill" --checkpoint.every=2 >"$work/bgkill.log" 2>&1 &
pid=$!
writing_4_past_5() {
  latest_is bgkill step_00000002.h5 && has_step 5 "$work/bgkill.log" &&
    [[ -f $work/bgkill/step_00000004.h5.partial && ! -e $work/bgkill/step_00000004.h5 ]]
}
wait_for writing_4_past_5
kill_rank0 bgkill
killed bgkill
echo "ok: SIGKILL during a background checkpoint write: the previous one stays latest and resumes exactly"
