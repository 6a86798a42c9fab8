# Checkpoints and resume (docs/checkpoints.md): 20 steps straight vs 10 steps +
# --resume auto + 10 steps on the same 4-rank ZeRO-1 layout gives identical per-step losses
# and gradient norms and bit-identical final weights and checkpoints; the step-10 checkpoint
# written by 4 ranks resumes on 2 ranks (ZeRO 0, on emulated nodes of one rank: the
# replicas pass their shares of the file by broadcasts) and on 8 ranks (ZeRO 3, parameters sharded
# within emulated nodes of 4), and the 8-rank ZeRO-3 checkpoint resumes on 2 ranks (ZeRO 2):
# losses, gradient norms and final weights within 1e-5 of the straight run. Checkpoints
# written in the background while training went on (checkpoint.async) resume bit for bit
# on their layout (4 ranks ZeRO 1, 8 ranks ZeRO 3). The LR is
# constant after warm-up (min_lr = lr), so a run told --train.steps=10 trains its first
# 10 steps exactly like one told 20.
source "$(dirname "$0")/lib.sh"
pack_varied_corpus "$work/data.h5"
compare="/usr/bin/python3 $FLEXSP_SOURCE_DIR/tests/reference/compare.py"

common=(--data.path="$work/data.h5" --model.preset=tiny --model.heads=8 --model.kv_heads=2
        --data.max_seq_len=256 --train.global_batch_tokens=1200 --optim.lr=1e-3
        --optim.min_lr=1e-3 --optim.warmup_steps=2 --train.backend=cpu)

run() {  # name np args...: train, keep the log and the progress ("step loss grad_norm")
  local name=$1 np=$2; shift 2
  "$FLEXSP_MPIRUN" -np "$np" --oversubscribe "$FLEXSP" train "${common[@]}" "$@" \
    >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name failed"; }
  progress "$work/$name.log" >"$work/$name.steps"
}

close_steps() {  # ref name: same steps, losses and gradient norms within 1e-5 relative
  local loss_max
  losses_close "$1" "$2" 1e-5
  loss_max=$close_max
  grad_norms_close "$1" "$2" 1e-5
  echo "ok: $2 steps like $1 (largest relative difference: loss $loss_max, grad norm $close_max)"
}

# Bit-for-bit comparisons use static plans: the planner's time limit could pick another
# (equally valid) plan under load, which changes the summation order.
same=(--parallel.zero=1 --parallel.sp_mode=static --parallel.sp_size=2)
run straight 4 "${same[@]}" --train.steps=20 --checkpoint.dir="$work/a" --checkpoint.every=10 \
  --dump-weights="$work/straight.h5" --report.dir="$work/report"
[[ $(cat "$work/a/latest") == step_00000020.h5 ]] || fail "latest does not name step 20"
# written_after name step: the log says step's checkpoint was published after a later
# step trained (it was written in the background: checkpoint.async, the default).
written_after() {
  grep -E "^(step [0-9]+/|checkpoint written: )" "$work/$1.log" |
    grep -A1000 "^step $(($2 + 1))/" | grep -q "^checkpoint written: .*/step_000000$2.h5 (" ||
    fail "$1: step $2's checkpoint was not written while training went on"
}
written_after straight 10
/usr/bin/python3 - "$work/report/summary.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["checkpoints"]
assert [x["step"] for x in c] == [10, 20], c
assert all(x["write_ms"] > 0 and x["stall_ms"] >= x["snapshot_ms"] >= 0 and x["bytes"] > 0 for x in c), c
print("ok: summary.json records each checkpoint's stall and write time")
PY

# 10 + resume + 10, same layout: bit for bit.
run first10 4 "${same[@]}" --train.steps=10 --checkpoint.dir="$work/b"
grep -q "^checkpoint written: $work/b/step_00000010.h5" "$work/first10.log" || fail "no checkpoint line"
run resumed 4 "${same[@]}" --train.steps=20 --checkpoint.dir="$work/b" --resume auto \
  --dump-weights="$work/resumed.h5"
grep -q "^resumed from $work/b/step_00000010.h5: step 10" "$work/resumed.log" || fail "not resumed"
head -1 "$work/resumed.steps" | grep -q '^11 ' || fail "the resumed run did not start at step 11"
cat "$work/first10.steps" "$work/resumed.steps" | diff - "$work/straight.steps" ||
  fail "10 + 10 losses or gradient norms differ"
h5diff "$work/straight.h5" "$work/resumed.h5" || fail "10 + 10: final weights differ"
for s in 10 20; do
  f=step_000000$s.h5
  h5diff "$work/a/$f" "$work/b/$f" /model /model || fail "$f: /model differs"
  h5diff "$work/a/$f" "$work/b/$f" /optimizer /optimizer || fail "$f: /optimizer differs"
done
echo "ok: 20 steps = 10 + resume + 10 (same layout): identical losses and gradient norms, bit-identical weights"

# From the checkpoint the straight run wrote in the background at step 10: bit for bit too.
run fromasync 4 "${same[@]}" --train.steps=20 --checkpoint.dir="$work/d" --resume "$work/a/step_00000010.h5" \
  --dump-weights="$work/fromasync.h5"
diff "$work/resumed.steps" "$work/fromasync.steps" || fail "resumed from a background write: steps differ"
h5diff "$work/straight.h5" "$work/fromasync.h5" || fail "resumed from a background write: final weights differ"
echo "ok: resumed from a checkpoint written in the background: identical losses, gradient norms and weights"

# The data cursor saved is the one of the next batch to train.
"$FLEXSP" train "${common[@]}" --train.steps=10 --dry-run | grep '^data cursor after 10 steps' >"$work/cursor.txt"
/usr/bin/python3 - "$work/b/step_00000010.h5" "$work/cursor.txt" <<'PY'
import re, sys, h5py
f = h5py.File(sys.argv[1], "r")
a = f.attrs
want = [int(x) for x in re.findall(r"(?:epoch|position|piece) (\d+)", open(sys.argv[2]).read())]
got = [int(a["data_epoch"]), int(a["data_position"]), int(a["data_piece"])]
assert got == want, (got, want)
assert a["schema"] == "flexsp.checkpoint" and a["step"] == 10 and a["world_size"] == 4
assert a["adam_steps"] == 10 and a["consumed_tokens"] > 0 and "[train]" in a["config"]
assert f["model"].attrs["hidden"] == 64 and f["model/lm_head.weight"].shape == (257, 64)
assert f["optimizer/exp_avg_sq/model.norm.weight"].shape == (64,)
print("ok: checkpoint attributes, cursor", got)
PY

# Another rank count and ZeRO layout: 4 -> 2 ranks (ZeRO 1 -> 0), 4 -> 8 (ZeRO 1 -> 3, node
# parameter groups), then 8 (ZeRO 3) -> 2 (ZeRO 2).
tail -10 "$work/straight.steps" >"$work/straight_last10.steps"
tail -5 "$work/straight.steps" >"$work/straight_last5.steps"
run np2 2 --parallel.zero=0 --ranks-per-node 1 --train.steps=20 --checkpoint.dir="$work/c2" \
  --resume "$work/b/step_00000010.h5" --dump-weights="$work/np2.h5"
run np8 8 --parallel.zero=3 --parallel.zero_param_group=node --ranks-per-node 4 --train.steps=20 \
  --checkpoint.dir="$work/c8" --checkpoint.every=5 --resume "$work/b/step_00000010.h5" \
  --dump-weights="$work/np8.h5"
run np8to2 2 --parallel.zero=2 --train.steps=20 --checkpoint.dir="$work/c82" \
  --resume "$work/c8/step_00000015.h5" --dump-weights="$work/np8to2.h5"
close_steps straight_last10 np2
close_steps straight_last10 np8
close_steps straight_last5 np8to2
# The 8-rank ZeRO-3 step-15 checkpoint was written in the background, each rank its
# shards: on the same layout it resumes bit for bit.
written_after np8 15
tail -5 "$work/np8.steps" >"$work/np8_last5.steps"
run np8again 8 --parallel.zero=3 --parallel.zero_param_group=node --ranks-per-node 4 --train.steps=20 \
  --checkpoint.dir="$work/c8b" --resume "$work/c8/step_00000015.h5" --dump-weights="$work/np8again.h5"
diff "$work/np8_last5.steps" "$work/np8again.steps" || fail "np8 resumed on its layout: steps differ"
h5diff "$work/np8.h5" "$work/np8again.h5" || fail "np8 resumed on its layout: final weights differ"
echo "ok: an 8-rank ZeRO-3 checkpoint written in the background resumes bit for bit on its layout"
for name in np2 np8 np8to2; do
  $compare "$work/$name.h5" "$work/straight.h5" --keys model --rtol 1e-5 >"$work/$name.cmp" ||
    { cat "$work/$name.cmp"; fail "$name: weights differ from the straight run"; }
  echo "ok: $name resumed = straight run ($(tail -1 "$work/$name.cmp"))"
done
$compare "$work/c8/step_00000020.h5" "$work/a/step_00000020.h5" --keys model,optimizer --rtol 1e-4 \
  >"$work/np8.ckpt.cmp" || { cat "$work/np8.ckpt.cmp"; fail "np8: checkpoint differs"; }

# inspect verifies the checksums of a checkpoint written by 8 ranks.
"$FLEXSP" inspect "$work/c8/step_00000020.h5" >"$work/inspect.txt" || { cat "$work/inspect.txt"; fail "inspect"; }
grep -q 'step:       20,' "$work/inspect.txt" || fail "inspect: step"
grep -q 'saved by:   8 ranks, ZeRO 3' "$work/inspect.txt" || fail "inspect: world size"
grep -q 'checksums:  all 63 verified' "$work/inspect.txt" || fail "inspect: checksums"
"$FLEXSP" inspect --json "$work/c8/step_00000020.h5" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["checksums"] == "ok" and j["world_size"] == 8 and j["tensors"]["model/lm_head.weight"] == [257, 64]'
echo "ok: inspect of a checkpoint"
