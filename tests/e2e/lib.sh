# Shared helpers for the end-to-end tests (sourced). Each test runs in its own temp dir.
set -euo pipefail
: "${FLEXSP:?FLEXSP must name the flexsp binary}"
: "${FLEXSP_MPIRUN:=mpirun}"
work=$(mktemp -d "${PWD}/e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_error "what it must name" cmd...: non-zero exit, exactly one "flexsp: error:" line
# naming the expected text, no crash.
expect_error() {
  local want=$1; shift
  local rc=0
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  [[ $rc -ne 0 ]] || fail "expected failure: $*"
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
