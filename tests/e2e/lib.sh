# Shared helpers for the end-to-end tests (sourced). Each test runs in its own temp dir.
set -euo pipefail
: "${FLEXSP:?FLEXSP must name the flexsp binary}"
: "${FLEXSP_MPIRUN:=mpirun}"
work=$(mktemp -d "${PWD}/e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_error "what it must name" cmd...: non-zero exit below 128 (not a signal), exactly
# one "flexsp: error:" line naming the expected text, no crash.
expect_error() {
  local want=$1; shift
  local rc=0
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  [[ $rc -ne 0 ]] || fail "expected failure: $*"
  [[ $rc -lt 128 ]] || { cat "$work/err" >&2; fail "exit code $rc (killed by a signal): $*"; }
  local n
  n=$(grep -c '^flexsp: error:' "$work/err" || true)
  [[ $n -eq 1 ]] || { cat "$work/err" >&2; fail "expected exactly one error line, got $n: $*"; }
  grep '^flexsp: error:' "$work/err" | grep -qF -- "$want" ||
    { cat "$work/err" >&2; fail "error line does not name '$want': $*"; }
  if grep -qiE 'core dumped|segmentation|terminate called|backtrace' "$work/err"; then
    cat "$work/err" >&2; fail "crash: $*"
  fi
  echo "ok: $(grep '^flexsp: error:' "$work/err")"
}

# A small real corpus packed with the bytes tokenizer: the Linux UAPI headers.
pack_small_corpus() {
  local out=$1
  "$FLEXSP" pack --glob '*.h' --out "$out" /usr/include/linux >/dev/null
}

# A real corpus of documents of very different lengths (tens to thousands of tokens): the
# netfilter UAPI headers.
pack_varied_corpus() {
  local out=$1
  "$FLEXSP" pack --glob '*.h' --out "$out" /usr/include/linux/netfilter >/dev/null
}

# progress LOG: rank 0's progress lines ("step N/M | loss L | lr R | grad norm G | ...")
# as "N L G" lines.
progress() {
  sed -nE 's#^step ([0-9]+)/[0-9]+ \| loss ([^ ]+) \| lr [^ ]+ \| grad norm ([^ ]+) \|.*#\1 \2 \3#p' "$1"
}

# train_run NAME NP STEPS ARGS...: `flexsp train ARGS` on NP ranks, the final weights in
# $work/NAME.h5, the output in $work/NAME.log, its progress lines ("step loss grad_norm")
# in $work/NAME.steps, which must hold STEPS of them, and the losses alone in NAME.loss.
train_run() {
  local name=$1 np=$2 steps=$3; shift 3
  "$FLEXSP_MPIRUN" -np "$np" --oversubscribe "$FLEXSP" train --dump-weights="$work/$name.h5" "$@" \
    >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name failed"; }
  progress "$work/$name.log" >"$work/$name.steps"
  cut -d' ' -f2 "$work/$name.steps" >"$work/$name.loss"
  [[ $(wc -l <"$work/$name.steps") -eq $steps ]] || { cat "$work/$name.log"; fail "$name: expected $steps steps"; }
}

# steps_close REF NAME COLUMN RTOL: NAME.steps and REF.steps list the same steps, and each
# step's value in COLUMN (2: loss, 3: gradient norm) of NAME is within RTOL (relative) of
# REF's. Sets close_max to the largest relative difference.
steps_close() {
  local what=([2]=loss [3]="gradient norm") out
  out=$(paste -d' ' "$work/$1.steps" "$work/$2.steps" | awk -v n="$2" -v c="$3" -v t="$4" -v w="${what[$3]}" '
    $1 != $4 { printf "%s: step %s where %s expected\n", n, $4, $1; bad = 1; next }
    { a = $c; b = $(c + 3); d = b - a; if (d < 0) d = -d; if (a < 0) a = -a
      if (d > t * a) { printf "%s: step %d %s %s vs %s\n", n, $1, w, b, $c; bad = 1 }
      if (a > 0 && d / a > m) m = d / a }
    END { if (!bad) printf "%.1e", m; exit bad }') || { echo "$out" >&2; fail "$2: ${what[$3]} per step differs from $1 beyond $4"; }
  close_max=$out
}
losses_close() { steps_close "$1" "$2" 2 "$3"; }
grad_norms_close() { steps_close "$1" "$2" 3 "$3"; }

# trains_like REF NAME LOSS_RTOL WEIGHT_RTOL: NAME's per-step losses and gradient norms
# (both to LOSS_RTOL) and final weights (train_run's outputs) agree with REF's. The norm
# catches what the other two cannot: a uniform scale on every gradient changes neither
# the losses nor the weights under clipping and AdamW.
trains_like() {
  local ref=$1 name=$2 loss_max
  losses_close "$ref" "$name" "$3"
  loss_max=$close_max
  grad_norms_close "$ref" "$name" "$3"
  /usr/bin/python3 "$FLEXSP_SOURCE_DIR/tests/reference/compare.py" "$work/$name.h5" "$work/$ref.h5" \
    --keys model --rtol "$4" >"$work/$name.cmp" ||
    { cat "$work/$name.cmp"; fail "$name: weights differ from $ref"; }
  echo "ok: $name trains like $ref (largest relative difference per step: loss $loss_max," \
    "grad norm $close_max; weights: $(tail -1 "$work/$name.cmp"), worst tensor" \
    "$(awk '$1 == "ok" && $NF > m { m = $NF } END { printf "%.1e", m }' "$work/$name.cmp"))"
}
