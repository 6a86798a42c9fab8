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

# train_run NAME NP STEPS ARGS...: `flexsp train ARGS` on NP ranks, the final weights in
# $work/NAME.h5, the output in $work/NAME.log and the per-step losses in $work/NAME.loss,
# which must hold STEPS of them.
train_run() {
  local name=$1 np=$2 steps=$3; shift 3
  "$FLEXSP_MPIRUN" -np "$np" --oversubscribe "$FLEXSP" train --dump-weights="$work/$name.h5" "$@" \
    >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name failed"; }
  grep -E '^step [0-9]+/' "$work/$name.log" | sed -E 's/.*loss ([0-9.]+).*/\1/' >"$work/$name.loss"
  [[ $(wc -l <"$work/$name.loss") -eq $steps ]] || { cat "$work/$name.log"; fail "$name: expected $steps steps"; }
}

# losses_close REF NAME RTOL: every step's loss of NAME within RTOL (relative) of REF's.
losses_close() {
  paste "$work/$1.loss" "$work/$2.loss" | awk -v n="$2" -v t="$3" '
    { d = $1 - $2; if (d < 0) d = -d; if (d > t * $1) { printf "%s: step %d loss %s vs %s\n", n, NR, $2, $1; bad = 1 } }
    END { exit bad }' || fail "$2: losses differ from $1 beyond $3"
}

# trains_like REF NAME LOSS_RTOL WEIGHT_RTOL: NAME's per-step losses and final weights
# (train_run's outputs) agree with REF's.
trains_like() {
  local ref=$1 name=$2
  losses_close "$ref" "$name" "$3"
  /usr/bin/python3 "$FLEXSP_SOURCE_DIR/tests/reference/compare.py" "$work/$name.h5" "$work/$ref.h5" \
    --keys model --rtol "$4" >"$work/$name.cmp" ||
    { cat "$work/$name.cmp"; fail "$name: weights differ from $ref"; }
  echo "ok: $name trains like $ref ($(tail -1 "$work/$name.cmp"))"
}
