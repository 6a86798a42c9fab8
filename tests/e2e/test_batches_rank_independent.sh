# The batch of step k depends only on the dataset, the seed and k (docs/batches.md): the
# global batches flexsp draws are identical for 1, 2, 4 and 8 ranks, with and without
# emulated nodes, and change with the seed.
source "$(dirname "$0")/lib.sh"
pack_small_corpus "$work/data.h5"

batches() {  # np, extra args...
  local np=$1; shift
  "$FLEXSP_MPIRUN" -np "$np" --oversubscribe "$FLEXSP" train --data.path="$work/data.h5" \
    --data.max_seq_len=512 --train.global_batch_tokens=8192 --train.steps=12 --dry-run "$@" |
    grep -E '^(step|data cursor)'
}

batches 1 >"$work/b1"
[[ $(grep -c '^step' "$work/b1") -eq 12 ]] || fail "expected 12 steps"
for np in 2 4 8; do
  batches "$np" >"$work/b$np"
  diff "$work/b1" "$work/b$np" || fail "batches differ between 1 and $np ranks"
  echo "ok: $np ranks draw the same 12 batches as 1 rank"
done
batches 4 --ranks-per-node 2 >"$work/b4n"
diff "$work/b1" "$work/b4n" || fail "batches differ with emulated nodes"
batches 8 --ranks-per-node 4 --parallel.sp_mode=static --parallel.sp_size=2 >"$work/b8n"
diff "$work/b1" "$work/b8n" || fail "batches differ with another layout"
echo "ok: emulated nodes and layouts draw the same batches"
batches 1 --train.seed=99 >"$work/bs"
if diff -q "$work/b1" "$work/bs" >/dev/null; then fail "the seed does not change the batches"; fi
echo "ok: another seed draws other batches"
