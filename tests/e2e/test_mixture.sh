# Weighted mixtures (docs/batches.md): data.path = web:0.6, code:0.3, books:0.1 over three
# real corpora (netfilter headers, USB headers, the licenses). inspect shows each source's
# share; the batches are the same on 1 and 4 ranks (SPEC section 7) and not web's alone;
# the start-up line shows shares and epochs; a run resumed from its step-3 checkpoint
# trains steps 4-6 exactly as the straight run (1 rank, and 4 ranks; a 1-rank checkpoint
# resumed on 4 ranks within 1e-5), the checkpoint's cursor is the dry run's after 3 steps,
# and the report records the tokens drawn per source, in proportion.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
"$FLEXSP" pack --glob '*.h' --out "$work/web.h5" /usr/include/linux/netfilter >/dev/null
"$FLEXSP" pack --glob '*.h' --out "$work/code.h5" /usr/include/linux/usb >/dev/null
"$FLEXSP" pack --out "$work/books.h5" /usr/share/common-licenses >/dev/null
mix="$work/web.h5:0.6, $work/code.h5:0.3, $work/books.h5:0.1"

"$FLEXSP" inspect "$mix" >"$work/inspect.out" || { cat "$work/inspect.out"; fail "inspect of the mixture"; }
for want in "^sources: +3 \(a mixture\)" "^  $work/web.h5 +0.600 +1 " "^  $work/books.h5 +0.100 +1 " "^valid: +yes"; do
  grep -qE "$want" "$work/inspect.out" || { cat "$work/inspect.out"; fail "inspect lacks $want"; }
done
"$FLEXSP" inspect --json "$mix" | $PY -c '
import json, sys
j = json.load(sys.stdin)
assert [round(s["share"], 3) for s in j["sources"]] == [0.6, 0.3, 0.1] and j["valid"], j
assert sum(s["documents"] for s in j["sources"]) == j["documents"], j'
echo "ok: inspect shows each source's share, documents, tokens and epoch length"

common=(--model.preset=tiny --model.heads=8 --model.kv_heads=2 --data.max_seq_len=128
        --train.global_batch_tokens=1024 --optim.lr=1e-3 --optim.min_lr=1e-3 --optim.warmup_steps=2
        --train.backend=cpu --train.seed=3)
batches() {  # np data.path extra...: the dry run's batches and cursor (STEPS steps, default 12)
  local np=$1 path=$2; shift 2
  "$FLEXSP_MPIRUN" -np "$np" --oversubscribe "$FLEXSP" train "${common[@]}" --data.path="$path" \
    --train.steps="${STEPS:-12}" --dry-run "$@" >"$work/dry.out" || { cat "$work/dry.out"; fail "dry run on $np ranks"; }
  grep -E '^(step|data cursor)' "$work/dry.out"
}
batches 1 "$mix" >"$work/b1"
grep -qE "^  $work/code.h5: share 0.300, [0-9]+ tokens per epoch; epoch 0.00 now, ~[0-9.]+ after 12 steps$" \
  "$work/dry.out" || { cat "$work/dry.out"; fail "no start-up line with the sources' shares and epochs"; }
batches 4 "$mix" --parallel.ranks_per_node=2 >"$work/b4"
diff "$work/b1" "$work/b4" || fail "the mixture's batches differ between 1 and 4 ranks"
batches 1 "$work/web.h5" >"$work/bweb"
if diff -q <(grep ^step "$work/b1") <(grep ^step "$work/bweb") >/dev/null; then fail "the mixture draws web.h5's batches"; fi
echo "ok: 1 and 4 ranks draw the same 12 mixture batches (not web.h5's)"

run() {  # name np args...
  local name=$1 np=$2; shift 2
  "$FLEXSP_MPIRUN" -np "$np" --oversubscribe "$FLEXSP" train "${common[@]}" --data.path="$mix" "$@" \
    >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name failed"; }
  progress "$work/$name.log" >"$work/$name.steps"
}
one=(--parallel.sp_mode=static --parallel.sp_size=1)
four=(--parallel.sp_mode=static --parallel.sp_size=2 --parallel.zero=1)
run straight1 1 "${one[@]}" --train.steps=6 --checkpoint.dir="$work/c1" --checkpoint.every=3 --report.dir="$work/r1"
run resumed1 1 "${one[@]}" --train.steps=6 --resume "$work/c1/step_00000003.h5"
grep -qE "^  $work/web.h5: share 0.600, [0-9]+ tokens per epoch; epoch 0.[0-9]+ now" "$work/resumed1.log" ||
  { cat "$work/resumed1.log"; fail "the resumed start-up line does not show the epochs at the checkpoint"; }
diff <(sed -n '4,6p' "$work/straight1.steps") "$work/resumed1.steps" || fail "1 rank: steps 4-6 after the resume differ"
echo "ok: 1 rank: resumed at step 3, steps 4-6 are the straight run's (bit for bit)"
run straight4 4 "${four[@]}" --train.steps=6 --checkpoint.dir="$work/c4" --checkpoint.every=3
run resumed4 4 "${four[@]}" --train.steps=6 --resume "$work/c4/step_00000003.h5"
diff <(sed -n '4,6p' "$work/straight4.steps") "$work/resumed4.steps" || fail "4 ranks: steps 4-6 after the resume differ"
echo "ok: 4 ranks: resumed at step 3, steps 4-6 are the straight run's (bit for bit)"
losses_close straight1 straight4 1e-5
run cross 4 "${four[@]}" --train.steps=6 --resume "$work/c1/step_00000003.h5"
sed -n '4,6p' "$work/straight1.steps" >"$work/tail1.steps"
losses_close tail1 cross 1e-5
echo "ok: 4 ranks train the 1-rank batches; a 1-rank checkpoint resumes on 4 (loss within $close_max)"

# The checkpoint's cursor is the dry run's after 3 steps; the report's tokens per source.
STEPS=3 batches 1 "$mix" >/dev/null
grep '^data cursor after 3 steps' "$work/dry.out" >"$work/cursor3"
$PY - "$work/c1/step_00000003.h5" "$work/cursor3" "$work/r1" <<'EOF'
import h5py, json, re, sys
ck, cursor, rep = sys.argv[1:]
got = json.loads(h5py.File(ck, "r").attrs["data_sources"])
want = [[int(x) for x in m] for m in re.findall(r"epoch (\d+), position (\d+), piece (\d+)", open(cursor).read())]
assert [[c["epoch"], c["position"], c["piece"]] for c in got] == want, (got, want)
s = json.load(open(f"{rep}/summary.json"))
src = s["data_sources"]
assert [x["weight"] for x in src] == [0.6, 0.3, 0.1], src
assert sum(x["tokens"] for x in src) == s["tokens"], (src, s["tokens"])
for x in src:  # within one sequence (129 tokens) of its weight
    assert abs(x["tokens"] - x["weight"] * s["tokens"]) <= 129, (x, s["tokens"])
with h5py.File(f"{rep}/report.h5", "r") as f:
    t = f["steps/source_tokens"][:]
    assert t.shape == (6, 3) and (t.sum(axis=1) == f["steps/tokens"][:]).all(), t
    assert json.loads(f.attrs["data_sources"])[2]["weight"] == 0.1
print("ok: checkpoint cursor per source; report tokens per source", [x["tokens"] for x in src], "of", s["tokens"])
EOF
grep -qE "^  tokens by source: $work/web.h5 [0-9.]+% $work/code.h5 [0-9.]+% $work/books.h5 [0-9.]+%" "$work/straight1.log" ||
  fail "the run summary does not show the tokens by source"
echo "PASS"
