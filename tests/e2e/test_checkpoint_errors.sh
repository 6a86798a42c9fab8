# Bad checkpoints (docs/errors.md): a truncated file, a bit-flipped one (the checksum
# mismatch names the tensor), one of another model shape (names the field), `latest` naming
# a missing file, and a fresh run into a directory that holds checkpoints: each ends a
# 2-rank run with one error line and a non-zero exit, and leaves every file as it was.
source "$(dirname "$0")/lib.sh"
pack_varied_corpus "$work/data.h5"

common=(--data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=256
        --train.global_batch_tokens=1200 --train.backend=cpu)
train() { "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${common[@]}" --train.steps="${steps:-6}" "$@"; }

train --checkpoint.dir="$work/good" --checkpoint.every=3 >"$work/good.log" 2>&1 ||
  { cat "$work/good.log"; fail "training failed"; }
good=$work/good/step_00000003.h5

# bad name: a directory whose `latest` names a copy of the good checkpoint, made bad by cmd.
bad_dir() {
  mkdir -p "$work/$1"
  cp "$good" "$work/$1/step_00000003.h5"
  echo step_00000003.h5 >"$work/$1/latest"
}
snapshot() { (cd "$work/$1" && md5sum * | sort); }
# expect_untouched dir want args...: the run fails naming `want`; no file in dir changed.
expect_untouched() {
  local dir=$1 want=$2; shift 2
  local before
  before=$(snapshot "$dir")
  expect_error "$want" train --checkpoint.dir="$work/$dir" --resume auto "$@"
  [[ $(snapshot "$dir") == "$before" ]] || fail "$dir: files were modified"
}

bad_dir truncated
truncate -s 700000 "$work/truncated/step_00000003.h5"
expect_untouched truncated "truncated/step_00000003.h5"

bad_dir flipped
/usr/bin/python3 - "$work/flipped/step_00000003.h5" <<'PY'
import sys, h5py
path = sys.argv[1]
with h5py.File(path, "r") as f:
    at = f["model/model.layers.1.mlp.up_proj.weight"].id.get_offset() + 1001
with open(path, "r+b") as f:
    f.seek(at)
    b = f.read(1)[0]
    f.seek(at)
    f.write(bytes([b ^ 0x04]))
PY
expect_untouched flipped "checksum mismatch in /model/model.layers.1.mlp.up_proj.weight"
expect_error "checksum mismatch in /model/model.layers.1.mlp.up_proj.weight" \
  "$FLEXSP" inspect "$work/flipped/step_00000003.h5"
grep -q 'CHECKSUM MISMATCH' "$work/out" || fail "inspect does not mark the bad tensor"

bad_dir shape
expect_untouched shape "model.hidden is 64 in the file but 128 in this run" --model.hidden=128

bad_dir missing
echo step_00000099.h5 >"$work/missing/latest"
expect_untouched missing "latest: names $work/missing/step_00000099.h5, which does not exist"

# A fresh run (no --resume) would overwrite and rotate away another run's checkpoints.
before=$(snapshot good)
expect_error "already holds step_00000006.h5" train --checkpoint.dir="$work/good"
[[ $(snapshot good) == "$before" ]] || fail "good: files were modified"

# A checkpoint of a later step than train.steps: nothing to train, nothing written.
steps=4 train --checkpoint.dir="$work/good" --resume auto >"$work/late.log" 2>&1 ||
  { cat "$work/late.log"; fail "resuming past train.steps failed"; }
grep -q 'nothing to train' "$work/late.log" || fail "no 'nothing to train' line"
[[ $(snapshot good) == "$before" ]] || fail "good: files were modified by a run with nothing to train"
echo "ok: bad checkpoints end the run with one line and nothing is modified"
