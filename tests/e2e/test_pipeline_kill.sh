# A rank of a pipeline killed with SIGKILL mid-run (a middle stage, while its neighbours
# wait on it for activations and gradients): every rank exits, mpirun returns non-zero,
# nothing hangs and no rank is left behind.
source "$(dirname "$0")/lib.sh"
pack_varied_corpus "$work/data.h5"

"$FLEXSP_MPIRUN" -np 4 --oversubscribe "$FLEXSP" train --data.path="$work/data.h5" \
  --model.preset=tiny --model.layers=4 --data.max_seq_len=256 --train.global_batch_tokens=1200 \
  --train.backend=cpu --train.steps=100000 --parallel.pp_size=4 --train.micro_batch_tokens=300 \
  >"$work/run.log" 2>&1 &
pid=$!
for ((i = 0; i < 600; ++i)); do grep -q '^step 3/' "$work/run.log" && break; sleep 0.1; done
grep -q '^step 3/' "$work/run.log" || { cat "$work/run.log"; fail "the run did not reach step 3"; }
ranks=$(pgrep -P "$pid")
victim=""
for c in $ranks; do
  tr '\0' '\n' <"/proc/$c/environ" | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$c
done
[[ -n $victim ]] || fail "rank 1 not found"
kill -KILL "$victim"
for ((i = 0; i < 300; ++i)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
  kill -KILL $ranks "$pid" 2>/dev/null || true
  fail "mpirun still runs 30 s after a rank was killed: a hang"
fi
rc=0
wait "$pid" || rc=$?
[[ $rc -ne 0 ]] || fail "mpirun exited 0 after a rank was killed"
alive() {  # a process that still runs (not gone, not a zombie waiting to be reaped)
  [[ -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]
}
for c in $ranks; do
  for ((i = 0; i < 50; ++i)); do alive "$c" || break; sleep 0.1; done
  if alive "$c"; then kill -KILL "$c"; fail "rank process $c outlived the run"; fi
done
echo "ok: SIGKILL of a pipeline stage's rank: every rank exited (mpirun rc $rc), no hang"
