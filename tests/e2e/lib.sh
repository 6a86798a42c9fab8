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

# plot_reads_as_scaling CSV: tools/plot_report.py draws CSV (flexsp report's or simulate's)
# as a scaling plot: tokens/s against GPUs on log-log axes with each series' ideal line,
# and a second panel of scaling efficiency (1 at each series' smallest run) and flexsp's
# speedup over static SP where both ran (what its --describe JSON says it drew).
plot_reads_as_scaling() {
  /usr/bin/python3 "$FLEXSP_SOURCE_DIR/tools/plot_report.py" --describe "$work/plot.json" "$1" "$work/plot.png" ||
    fail "tools/plot_report.py $1 failed"
  /usr/bin/python3 - "$1" "$work/plot.json" <<'PYEOF' || fail "$1: the plot does not read as a scaling plot"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
tp, eff = json.load(open(sys.argv[2]))["panels"]
gpus = sorted({int(r["ranks"]) for r in rows})
assert tp["xscale"] == "log" and tp["yscale"] == "log" and tp["xlabel"].startswith("GPUs"), tp
assert eff["xscale"] == "log" and eff["xlabel"].startswith("GPUs"), eff
lines = {l["label"]: l for l in tp["lines"]}
names = [n for n in lines if not n.endswith((": ideal", ": predicted"))]
assert names and sorted({x for n in names for x in lines[n]["x"]}) == gpus, (names, gpus)
for n in names:
    x, y = lines[n]["x"], lines[n]["y"]
    if len(x) > 1:
        ideal = lines[n + ": ideal"]["y"]
        assert all(abs(i - y[0] * xi / x[0]) <= 1e-9 * i for i, xi in zip(ideal, x)), n
e = {l["label"]: l for l in eff["lines"]}
for n in names:
    assert abs(e[n + ": efficiency"]["y"][0] - 1) < 1e-12, n
for n in names:
    twin = "static" + n[len("flexsp"):]
    if n.startswith("flexsp") and twin in lines:
        common = [x for x in lines[n]["x"] if x in lines[twin]["x"]]
        s = e[n + " / static: speedup"]
        assert s["x"] == common, (s, common)
        for x, v in zip(s["x"], s["y"]):
            want = lines[n]["y"][lines[n]["x"].index(x)] / lines[twin]["y"][lines[twin]["x"].index(x)]
            assert abs(v - want) <= 1e-9 * want, (n, x, v, want)
print(f"ok: {sys.argv[1]} plots as scaling: log-log tokens/s against GPUs {gpus}, ideal lines, "
      f"efficiency and {sum(l.endswith('speedup') for l in e)} speedup series")
PYEOF
}
