# Bad configuration ends every rank with one clear line on rank 0 and a non-zero exit,
# as one process and under mpirun (docs/errors.md); nothing hangs (ctest timeout).
source "$(dirname "$0")/lib.sh"
pack_small_corpus "$work/data.h5"
sum_before=$(md5sum "$work/data.h5")
printf '[model]\nhiden = 64\n' >"$work/typo.ini"
printf '[train]\nsteps = ten\n' >"$work/badvalue.ini"

for launch in "" "$FLEXSP_MPIRUN -np 4 --oversubscribe"; do
  echo "-- launch: ${launch:-one process}"
  expect_error "unknown verb 'frobnicate'" $launch "$FLEXSP" frobnicate
  expect_error "model.hiden" $launch "$FLEXSP" train --config "$work/typo.ini" --dry-run
  expect_error "$work/typo.ini" $launch "$FLEXSP" train --config "$work/typo.ini" --dry-run
  expect_error "train.steps" $launch "$FLEXSP" train --config "$work/badvalue.ini" --dry-run
  expect_error "unknown key 'trian.steps'" $launch "$FLEXSP" train --trian.steps=3 --data.path="$work/data.h5" --dry-run
  expect_error "parallel.sp_mode" $launch "$FLEXSP" train --parallel.sp_mode=ring --data.path="$work/data.h5" --dry-run
  expect_error "data.path" $launch "$FLEXSP" train --dry-run
  expect_error "$work/missing.ini" $launch "$FLEXSP" train --config "$work/missing.ini"
  expect_error "$work/nothere.h5" $launch "$FLEXSP" train --data.path="$work/nothere.h5" --dry-run
  expect_error "report.dir" $launch "$FLEXSP" train --data.path="$work/data.h5" \
    --report.dir="$work/data.h5/report" --train.steps=1
  expect_error "train.global_batch_tokens" $launch "$FLEXSP" train --data.path="$work/data.h5" \
    --data.max_seq_len=4096 --train.global_batch_tokens=1000 --dry-run
done
expect_error "parallel.ranks_per_node" "$FLEXSP_MPIRUN" -np 4 --oversubscribe "$FLEXSP" train \
  --data.path="$work/data.h5" --ranks-per-node 3 --dry-run
[[ "$(md5sum "$work/data.h5")" == "$sum_before" ]] || fail "the dataset changed"
echo "ok: dataset untouched"
