# A full disk while writing: pack, export, import and a checkpoint on 2 ranks
# each end with one error line and an exit code below 128 (no crash), leave no partial or
# temporary file, and leave what was there before as it was: the files an export --force
# would replace, `latest` and the earlier checkpoint. The disk is a small tmpfs this test
# mounts; without the right to mount (not root) it is skipped, visibly (exit 77), after
# the first cases, which need no mount: a checkpoint's writes failing (the disk filling
# up after every free-space check passed, or an I/O error: an LD_PRELOAD shim on the write
# calls, tests/support/enospc_write.c) in the middle of the tensors' bytes, inside HDF5's
# own writes of the file's structure and from its first byte, in the background and
# synchronously; then the same for pack and a weights file. None may leave HDF5's error
# stack or its complaint (or crash) at exit.
source "$(dirname "$0")/lib.sh"
: "${FLEXSP_ENOSPC_LIB:?FLEXSP_ENOSPC_LIB must name the write-failure shim (ctest sets it)}"
pack_small_corpus "$work/data.h5"
tiny=(--data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=128 --train.global_batch_tokens=2048
      --train.backend=cpu)

# clean_failure ERR WHAT: the stderr in ERR holds exactly one error line, the one
# starting with WHAT, and nothing of HDF5 (its error stack, its complaint at exit about a
# file it could not close) and no crash.
clean_failure() {
  local err=$1 what=$2
  [[ $(grep -c '^flexsp: error:' "$err") -eq 1 ]] || { cat "$err"; fail "not one error line"; }
  grep -q "^flexsp: error: $what" "$err" || { cat "$err"; fail "the error is not '$what'"; }
  ! sed "s#$work##g" "$err" | grep -qE 'HDF5|H5' || { cat "$err"; fail "HDF5 complained"; }
  ! grep -qiE 'segmentation|core dumped|signal|terminate called|backtrace' "$err" || { cat "$err"; fail "crash"; }
}

# disk_fails NAME AFTER ASYNC [EIO]: step 4's checkpoint on 2 ranks, each rank's writes to
# it failing (ENOSPC, or EIO) after AFTER bytes. The run ends with one line naming the
# checkpoint and the reason, with an exit code below 128, within the time limit (a hang
# is a failure, not a stuck CI job); no partial file is left, and step 2's checkpoint
# stays the latest and loads.
disk_fails() {
  local name=$1 after=$2 async=$3 errno=${4:-ENOSPC} ck=$work/$1 rc=0
  local reason="No space left on device"
  [[ $errno != EIO ]] || reason="Input/output error"
  timeout -k 10 120 "$FLEXSP_MPIRUN" -np 2 --oversubscribe -x LD_PRELOAD="$FLEXSP_ENOSPC_LIB" \
    -x FLEXSP_ENOSPC_MATCH=step_00000004.h5.partial -x FLEXSP_ENOSPC_AFTER="$after" -x FLEXSP_ENOSPC_ERRNO="$errno" \
    "$FLEXSP" train "${tiny[@]}" --train.steps=6 --checkpoint.dir="$ck" --checkpoint.every=2 \
    --checkpoint.async="$async" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
  [[ $rc -ne 124 && $rc -ne 137 ]] || { cat "$work/$name.err"; fail "$name: the run hung"; }
  [[ $rc -ne 0 && $rc -lt 128 ]] || { cat "$work/$name.err"; fail "$name: exit code $rc"; }
  clean_failure "$work/$name.err" "$ck/step_00000004.h5: cannot write: $reason\$"
  [[ $(cd "$ck" && ls -A) == $'latest\nstep_00000002.h5' ]] || fail "$name: checkpoint dir: $(ls -A "$ck")"
  [[ $(cat "$ck/latest") == step_00000002.h5 ]] || fail "$name: latest changed"
  "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${tiny[@]}" --train.steps=2 --checkpoint.dir="$ck" \
    --resume auto >"$work/$name.resume" 2>&1 || { cat "$work/$name.resume"; fail "$name: step 2 does not load"; }
  grep -q "^resumed from $ck/step_00000002.h5: step 2" "$work/$name.resume" || fail "$name: not resumed"
  echo "ok: $name (checkpoint.async=$async): one line, exit $rc, no partial file, step 2 intact and loads"
}

# The checkpoint's file takes 1.6 MB; HDF5 writes its structure (superblock, global heap,
# object headers: ~40 kB) first, then the tensors' bytes go in.
for async in true false; do
  disk_fails "tensors_$async" 200000 $async        # in the middle of the tensors' bytes
  disk_fails "structure_$async" 5000 $async        # inside HDF5's writes, the file created
  disk_fails "first_byte_$async" 0 $async          # HDF5's very first write
done
disk_fails structure_eio 5000 true EIO             # an I/O error rather than a full disk

# writer_fails NAME FILE AFTER CMD...: CMD, one process, its writes to FILE (and its
# temporary names) failing after AFTER bytes: one line naming FILE, exit code below 128,
# nothing of FILE left.
writer_fails() {
  local name=$1 file=$2 after=$3 rc=0
  shift 3
  LD_PRELOAD="$FLEXSP_ENOSPC_LIB" FLEXSP_ENOSPC_MATCH="$(basename "$file")" FLEXSP_ENOSPC_AFTER="$after" \
    "$@" >/dev/null 2>"$work/$name.err" || rc=$?
  [[ $rc -ne 0 && $rc -lt 128 ]] || { cat "$work/$name.err"; fail "$name: exit code $rc"; }
  clean_failure "$work/$name.err" "$file: cannot write: No space left on device\$"
  [[ -z $(find "$work" -name "$(basename "$file")*") ]] || fail "$name left $(find "$work" -name "$(basename "$file")*")"
  echo "ok: $name's writes failing after $after bytes: one line, exit $rc, nothing left"
}
# The other HDF5 writers: a packed corpus, a weights file, the run's report.
writer_fails pack "$work/p.h5" 20000 "$FLEXSP" pack --glob '*.h' --out "$work/p.h5" /usr/include/linux
for after in 0 5000; do
  writer_fails weights "$work/w.h5" $after "$FLEXSP" train "${tiny[@]}" --train.steps=1 --dump-weights="$work/w.h5"
done
writer_fails report "$work/rep/report.h5" 3000 "$FLEXSP" train "${tiny[@]}" --train.steps=1 --report.dir="$work/rep"
PY=/usr/bin/python3
REF="$FLEXSP_SOURCE_DIR/tests/reference"
disk=$work/disk
mkdir "$disk"
# mount SIZE: a fresh empty tmpfs of SIZE at $disk.
mount_disk() {
  umount "$disk" 2>/dev/null || true
  mount -t tmpfs -o "size=$1" tmpfs "$disk" 2>"$work/mount.err" ||
    { echo "SKIPPED: cannot mount a tmpfs (needs root): $(cat "$work/mount.err")"; exit 77; }
}
trap 'umount "$disk" 2>/dev/null; rm -rf "$work"' EXIT
# nothing_partial: no temporary or partial file anywhere on the disk.
nothing_partial() {
  local left
  left=$(find "$disk" -name '*.tmp*' -o -name '*.partial' | head -5)
  [[ -z $left ]] || fail "left behind: $left"
}

mount_disk 1m
expect_error "$disk/d.h5: not enough space in $disk" "$FLEXSP" pack --glob '*.h' --out "$disk/d.h5" /usr/include/linux
[[ -z $(ls -A "$disk") ]] || fail "pack left files: $(ls -A "$disk")"
echo "ok: pack"

# A model of ~1.3 MB in fp32 (vocab 5000) against a 1 MB disk.
$PY "$REF/make_case.py" --out "$work/big" --vocab 5000 >/dev/null
expect_error "$disk/out/model.safetensors: cannot write: No space left on device" \
  "$FLEXSP" export --checkpoint "$work/big/weights.h5" --out "$disk/out" --dtype fp32
[[ ! -e "$disk/out" ]] || fail "a failed export left the directory it created"
mkdir "$disk/old" && echo '{"old": true}' >"$disk/old/config.json" && echo old >"$disk/old/model.safetensors"
before=$(cd "$disk/old" && md5sum *)
expect_error "$disk/old/model.safetensors: cannot write" \
  "$FLEXSP_MPIRUN" -np 2 "$FLEXSP" export --checkpoint "$work/big/weights.h5" --out "$disk/old" --dtype fp32 --force
[[ $(cd "$disk/old" && md5sum *) == "$before" ]] || fail "a failed export --force changed the old files"
nothing_partial
echo "ok: export"

"$FLEXSP" export --checkpoint "$work/big/weights.h5" --out "$work/hf" --dtype fp32 >/dev/null
expect_error "$disk/w.h5: not enough space in $disk: the weights file needs" \
  "$FLEXSP" import --hf "$work/hf" --out "$disk/w.h5"
[[ ! -e "$disk/w.h5" ]] || fail "a failed import left its output"
nothing_partial
echo "ok: import"

# Checkpoints of the tiny model take ~1.6 MB: the one of step 2 fits, step 4's does not.
mount_disk 2500k
rc=0
"$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${tiny[@]}" --train.steps=6 \
  --checkpoint.dir="$disk/ck" --checkpoint.every=2 >"$work/train.out" 2>"$work/train.err" || rc=$?
[[ $rc -ne 0 && $rc -lt 128 ]] || { cat "$work/train.err"; fail "training on a full disk exited with $rc"; }
[[ $(grep -c '^flexsp: error:' "$work/train.err") -eq 1 ]] || { cat "$work/train.err"; fail "not one error line"; }
grep -q "^flexsp: error: $disk/ck/step_00000004.h5: not enough space in $disk/ck: a checkpoint needs" "$work/train.err" ||
  { cat "$work/train.err"; fail "the error does not name the checkpoint and the lack of space"; }
! grep -qiE 'segmentation|core dumped|signal' "$work/train.err" || { cat "$work/train.err"; fail "crash"; }
[[ $(cat "$disk/ck/latest") == step_00000002.h5 ]] || fail "latest changed: $(cat "$disk/ck/latest")"
[[ $(cd "$disk/ck" && ls) == $'latest\nstep_00000002.h5' ]] || fail "checkpoint dir: $(ls "$disk/ck")"
"$FLEXSP" inspect "$disk/ck/step_00000002.h5" >"$work/inspect.out" || { cat "$work/inspect.out"; fail "step 2 is damaged"; }
nothing_partial
echo "ok: checkpoint: one line, latest and step_00000002.h5 intact, exit code $rc"
echo "disk full: all checks passed"
