#!/usr/bin/env bash
# check_train.sh REF_FLEXSP NEW_FLEXSP [WORK_DIR]: does NEW train exactly as REF does?
#
# A refactoring must not change a single bit of training. Both binaries train a few
# steps of a tiny model on the same packed corpus under each layout below (ranks, nodes,
# SP mode and groups, ZeRO 0-3 and its groups, tensor and pipeline parallelism, context
# parallelism, precision, activation checkpointing); for each layout the per-step loss,
# learning rate and gradient norm printed by rank 0 must be equal as text, the weights
# written by --dump-weights equal to the last bit (h5diff with no tolerance), and where a
# layout writes a checkpoint, every key of the run configuration REF records must be
# recorded by NEW with the same text (keys NEW adds are listed, not failed).
#
# REF's outputs are kept in WORK_DIR/ref (keyed by the layout's arguments), so rerunning
# against a changed NEW only trains NEW. Exit status: 0 when every layout matches.
# Usage: bench/check_train.sh /path/to/ref/flexsp build/flexsp [/tmp/check_train]
#        LAYOUTS=regex limits the layouts run (by name).
set -euo pipefail
ref=$(realpath "${1:?usage: check_train.sh REF_FLEXSP NEW_FLEXSP [WORK_DIR]}")
new=$(realpath "${2:?usage: check_train.sh REF_FLEXSP NEW_FLEXSP [WORK_DIR]}")
work=${3:-/tmp/check_train}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/env.sh"
mpirun=${FLEXSP_MPIRUN:-mpirun}
mkdir -p "$work/ref" "$work/new"

data=$work/data.h5
[[ -s $data ]] || "$ref" pack --glob '*.h' --out "$data" /usr/include/linux/netfilter >/dev/null

# A tiny model (heads 8, kv heads 2: groups of 2 split the kv heads, wider ones replicate
# them) on sequences of very different lengths, a few micro-batches per step.
base=(--data.path="$data" --model.preset=tiny --model.heads=8 --model.kv_heads=2
      --data.max_seq_len=512 --train.global_batch_tokens=3000 --train.steps=3
      --optim.lr=1e-3 --optim.warmup_steps=2 --train.backend=cpu)
mb=(--train.micro_batch_tokens=300)

# name np args... (the demo's layout reads configs/demo.ini; the others add to `base`)
layouts=(
  "demo 4 --config=$root/configs/demo.ini --data.path=$data --ranks-per-node=2 --train.steps=3 --train.backend=cpu --checkpoint.dir=CKPT --report.dir=REPORT"
  "single 1"
  "flexsp_np2 2 ${mb[*]}"
  "flexsp_np4_rpn2 4 ${mb[*]} --ranks-per-node=2"
  "flexsp_np8_rpn4 8 ${mb[*]} --ranks-per-node=4"
  "static_np4_d2 4 --parallel.sp_mode=static --parallel.sp_size=2 ${mb[*]}"
  "batch_adaptive_np4 4 --parallel.sp_mode=batch_adaptive ${mb[*]}"
  "zero0_np4 4 --parallel.zero=0 ${mb[*]} --parallel.reduce_overlap=on"
  "zero0_np4_nooverlap 4 --parallel.zero=0 ${mb[*]} --parallel.reduce_overlap=off"
  "zero1_np4_node 4 --parallel.zero=1 --parallel.zero_optim_group=node --ranks-per-node=2 ${mb[*]}"
  "zero2_np4 4 --parallel.zero=2 ${mb[*]}"
  "zero3_np4 4 --parallel.zero=3 ${mb[*]} --checkpoint.dir=CKPT"
  "zero3_np4_node 4 --parallel.zero=3 --parallel.zero_param_group=node --ranks-per-node=2 ${mb[*]}"
  "ckpt_act_np2 2 --model.checkpoint_activations=true ${mb[*]} --checkpoint.dir=CKPT"
  "tp2_np2 2 --parallel.tp_size=2"
  "tp2_np4_zero1 4 --parallel.tp_size=2 --parallel.zero=1 ${mb[*]}"
  "tp2_np4_zero3 4 --parallel.tp_size=2 --parallel.zero=3 ${mb[*]}"
  "pp2_np2_1f1b 2 --parallel.pp_size=2"
  "pp2_np4_seq1f1b 4 --parallel.pp_size=2 --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=2 ${mb[*]}"
  "pp2_np4_zero3_tied 4 --parallel.pp_size=2 --parallel.zero=3 --model.tie_embeddings=true ${mb[*]} --checkpoint.dir=CKPT"
  "pp2_np4_tp2 4 --parallel.pp_size=2 --parallel.tp_size=2 ${mb[*]}"
  "ring_np4 4 --parallel.sp_mode=static --parallel.sp_size=4 --parallel.cp_mode=ring"
  "usp_np8 8 --parallel.sp_mode=static --parallel.sp_size=8 --parallel.cp_mode=usp --ranks-per-node=4"
  "pp2_np4_ring_seq1f1b 4 --parallel.pp_size=2 --parallel.sp_mode=static --parallel.sp_size=2 --parallel.cp_mode=ring --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=2"
  "bf16_np2 2 --train.precision=bf16 ${mb[*]}"
  "comm_staged_np2 2 --parallel.comm=mpi-staged ${mb[*]}"
)

# config_ini H5 OUT MARK_DIR: the run configuration an HDF5 file records (its `config`
# attribute) as section.key = value lines, MARK_DIR (the run's folder) named alike in both runs.
config_ini() {
  /usr/bin/python3 -c 'import sys, h5py; c = h5py.File(sys.argv[1], "r").attrs["config"]
sys.stdout.write(c.decode() if isinstance(c, bytes) else c)' "$1" |
    awk -v d="$3" '/^\[/ { sec = substr($0, 2, length($0) - 2); next }
      / = / { sub(d, "DIR"); print sec "." $0 }' >"$2"
}

# run BIN DIR NAME NP ARGS...: trains into DIR/NAME.{log,steps,h5}; an argument CKPT or
# REPORT becomes the run's own directory, DIR/NAME.ckpt or DIR/NAME.report.
run() {
  local bin=$1 dir=$2 name=$3 np=$4; shift 4
  local args=() a ckpt="" report=""
  for a in "$@"; do
    case $a in
      *=CKPT) ckpt=$dir/$name.ckpt; rm -rf "$ckpt"; a=${a%CKPT}$ckpt ;;
      *=REPORT) report=$dir/$name.report; rm -rf "$report"; a=${a%REPORT}$report ;;
    esac
    args+=("$a")
  done
  rm -f "$dir/$name.h5"
  "$mpirun" -np "$np" --oversubscribe "$bin" train --dump-weights="$dir/$name.h5" "${args[@]}" \
    >"$dir/$name.log" 2>&1 || { tail -20 "$dir/$name.log"; echo "FAIL $name: $bin failed"; return 1; }
  sed -nE 's#^(step [0-9]+/[0-9]+ \| loss [^ ]+ \| lr [^ ]+ \| grad norm [^ ]+) \|.*#\1#p' \
    "$dir/$name.log" >"$dir/$name.steps"
  [[ -s $dir/$name.steps ]] || { echo "FAIL $name: no progress lines"; return 1; }
}

# ini_same NAME: every key REF records in NAME's last checkpoint and report, NEW records
# with the same value (and, where NEW adds no key, the text is the same line for line).
ini_same() {
  local side h5 what missing added status=0
  for what in ckpt report; do
    for side in ref new; do
      h5=$work/$side/$1.report/report.h5
      [[ $what == report ]] || h5=$work/$side/$1.ckpt/$(cat "$work/$side/$1.ckpt/latest" 2>/dev/null)
      [[ -f $h5 ]] || continue 2
      config_ini "$h5" "$work/$side/$1.$what.ini" "$work/$side"
    done
    local r=$work/ref/$1.$what.ini n=$work/new/$1.$what.ini
    missing=$(grep -vxFf "$n" "$r" || true)
    added=$(grep -vxFf "$r" "$n" | cut -d' ' -f1 | tr '\n' ' ' || true)
    [[ -z $added ]] || echo "  note $1: keys NEW adds to the $what's config: $added"
    [[ -z $missing ]] || { echo "FAIL $1: the $what's config differs:"; echo "$missing" | sed 's/^/  REF: /'; status=1; }
    # the same keys: the same text, in the same order
    [[ -n $added$missing ]] || cmp -s "$r" "$n" || { echo "FAIL $1: the $what's config is reordered"; status=1; }
  done
  return $status
}

bad=0
for line in "${layouts[@]}"; do
  read -r name np rest <<<"$line"
  [[ -z ${LAYOUTS:-} || $name =~ ${LAYOUTS} ]] || continue
  # shellcheck disable=SC2206
  extra=($rest)
  args=("${base[@]}" "${extra[@]}")
  [[ $name == demo ]] && args=("${extra[@]}")
  key=$(printf '%s\n' "$np" "${args[@]}" | sha1sum | cut -c1-12)
  start=$SECONDS
  if [[ ! -s $work/ref/$name.steps || $(cat "$work/ref/$name.key" 2>/dev/null) != "$key" ]]; then
    run "$ref" "$work/ref" "$name" "$np" "${args[@]}" || { bad=1; continue; }
    echo "$key" >"$work/ref/$name.key"
  fi
  run "$new" "$work/new" "$name" "$np" "${args[@]}" || { bad=1; continue; }
  ok=1
  if ! cmp -s "$work/ref/$name.steps" "$work/new/$name.steps"; then
    echo "FAIL $name: progress lines differ"; diff "$work/ref/$name.steps" "$work/new/$name.steps" | head -8
    ok=0
  fi
  if ! h5diff -q "$work/ref/$name.h5" "$work/new/$name.h5" >/dev/null 2>&1; then
    echo "FAIL $name: dumped weights differ"; h5diff -r "$work/ref/$name.h5" "$work/new/$name.h5" | head -8
    ok=0
  fi
  ini_same "$name" || ok=0
  if [[ $ok == 1 ]]; then
    echo "ok   $name ($np ranks, $(wc -l <"$work/new/$name.steps") steps, $((SECONDS - start)) s): $(tail -1 "$work/new/$name.steps")"
  else
    bad=1
  fi
done
[[ $bad == 0 ]] && echo "check_train: every layout trains bit-identically" || echo "check_train: DIFFERENCES (see FAIL lines)"
exit $bad
