# flexsp eval (docs/commands.md, docs/batches.md): the mean next-token loss of a model file
# over a dataset.
#  - weights from a short `flexsp train --dump-weights` run; eval on 1 and 3 ranks agree to
#    1e-9 relative (the same pieces, sums all-reduced: only the summation order differs);
#  - the loss equals the independent PyTorch reference (tests/reference/llama_ref.py) on a
#    packed batch of the same pieces, cut in Python as docs/batches.md says, to 1e-5
#    relative, with the same number of predictions;
#  - --by-length: per bucket of document length, the loss and predictions equal the
#    reference's per-sequence losses grouped by the length of each piece's document (1e-5),
#    the same on 1 and 3 ranks; the buckets' sums are the overall numbers;
#  - a file carrying the run config (as checkpoints do) gives data.max_seq_len itself;
#  - errors: missing checkpoint, no --max-seq-len for a weights file, vocab mismatch, a
#    missing dataset (on 3 ranks too): one line each.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
REF="$FLEXSP_SOURCE_DIR/tests/reference"
pack_varied_corpus "$work/data.h5"

"$FLEXSP" train --data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=128 \
  --train.global_batch_tokens=2048 --train.steps=4 --train.backend=cpu --optim.lr=3e-3 \
  --optim.warmup_steps=1 --dump-weights="$work/w.h5" >"$work/train.log"

json_field() { $PY -c 'import json,sys; print(repr(json.loads(sys.stdin.read())[sys.argv[1]]))' "$1"; }
rel_close() {  # a b tol: |a - b| <= tol |b|
  $PY -c 'import sys; a, b, t = map(float, sys.argv[1:4]); sys.exit(0 if abs(a - b) <= t * abs(b) else 1)' "$@"
}

# 1 rank vs 3 ranks, the first 30 documents and all of them.
for docs in "--max-docs 30" ""; do
  # shellcheck disable=SC2086
  "$FLEXSP" eval --checkpoint "$work/w.h5" --data "$work/data.h5" --max-seq-len 128 $docs --json >"$work/e1.json"
  # shellcheck disable=SC2086
  "$FLEXSP_MPIRUN" -np 3 "$FLEXSP" eval --checkpoint "$work/w.h5" --data "$work/data.h5" --max-seq-len 128 \
    $docs --json >"$work/e3.json"
  l1=$(json_field loss <"$work/e1.json"); l3=$(json_field loss <"$work/e3.json")
  p1=$(json_field predictions <"$work/e1.json"); p3=$(json_field predictions <"$work/e3.json")
  [[ "$p1" == "$p3" ]] || fail "predictions differ: 1 rank $p1, 3 ranks $p3"
  rel_close "$l1" "$l3" 1e-9 || fail "1 rank loss $l1 vs 3 ranks $l3"
  echo "ok: eval ${docs:-(all documents)}: 1 rank $l1, 3 ranks $l3, $p1 predictions"
done
[[ $(json_field documents <"$work/e1.json") -gt 30 ]] || fail "all documents: too few"

# The text output names loss and predictions.
"$FLEXSP" eval --checkpoint "$work/w.h5" --data "$work/data.h5" --max-seq-len 128 --max-docs 30 >"$work/e.txt"
grep -qE '^mean loss [0-9.]+ over [0-9]+ predictions' "$work/e.txt" || { cat "$work/e.txt"; fail "text output"; }

# The PyTorch reference on the same pieces (first 12 documents, pieces of <= 65 tokens).
"$FLEXSP" eval --checkpoint "$work/w.h5" --data "$work/data.h5" --max-seq-len 64 --max-docs 12 --json >"$work/e12.json"
$PY - "$work/data.h5" "$work/batch.h5" 12 64 <<'PYEOF'
import sys, h5py, numpy as np
data, out, ndocs, L = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with h5py.File(data, "r") as f:
    tokens, offsets = f["tokens"][...], f["offsets"][...]
pieces, doc_len, doc_id = [], [], []
for d in range(min(ndocs, len(offsets) - 1)):
    doc = tokens[offsets[d]:offsets[d + 1]].astype(np.int32)
    if len(doc) < 2:
        continue
    start = 0
    while True:  # pieces of at most L + 1 tokens overlapping by one; none dropped
        piece = doc[start:start + L + 1]
        pieces.append(piece)
        doc_len.append(len(doc))
        doc_id.append(d)
        if start + len(piece) >= len(doc):
            break
        start += L
assert sum(len(p) - 1 for p in pieces) == sum(max(int(offsets[d + 1] - offsets[d]) - 1, 0) for d in range(ndocs))
cu = np.concatenate([[0], np.cumsum([len(p) for p in pieces])]).astype(np.int64)
with h5py.File(out, "w") as f:
    f["tokens"] = np.concatenate(pieces).astype(np.int32)
    f["cu_seqlens"] = cu
    f["doc_len"] = np.array(doc_len, dtype=np.int64)  # each piece's document: --by-length
    f["doc"] = np.array(doc_id, dtype=np.int64)
print(f"reference batch: {len(pieces)} pieces, {cu[-1]} tokens")
PYEOF
OMP_NUM_THREADS=2 $PY "$REF/llama_ref.py" --weights "$work/w.h5" --batch "$work/batch.h5" --out "$work/ref.h5" \
  --per-seq-loss >/dev/null
read -r rl rp < <($PY -c 'import h5py,sys; f=h5py.File(sys.argv[1],"r"); print(repr(float(f["loss"][()])), int(f["num_predictions"][()]))' "$work/ref.h5")
l=$(json_field loss <"$work/e12.json"); p=$(json_field predictions <"$work/e12.json")
[[ "$p" == "$rp" ]] || fail "predictions: flexsp $p, reference $rp"
rel_close "$l" "$rl" 1e-5 || fail "loss: flexsp $l, reference $rl"
echo "ok: eval equals the PyTorch reference: $l vs $rl over $p predictions"

# --by-length: buckets <=500, 501-1000, >1000 tokens against the reference's per-piece losses.
for np_ in 1 3; do
  "$FLEXSP_MPIRUN" -np $np_ "$FLEXSP" eval --checkpoint "$work/w.h5" --data "$work/data.h5" --max-seq-len 64 \
    --max-docs 12 --by-length --length-buckets 500,1000 --json >"$work/bl$np_.json"
  $PY - "$work/bl$np_.json" "$work/batch.h5" "$work/ref.h5" <<'PYEOF' || fail "--by-length on $np_ ranks"
import json, sys, h5py, numpy as np
j = json.load(open(sys.argv[1]))
with h5py.File(sys.argv[2], "r") as b, h5py.File(sys.argv[3], "r") as r:
    doc_len, doc, cu, seq_loss = (b["doc_len"][...], b["doc"][...], b["cu_seqlens"][...],
                                  r["seq_loss"][...])
preds = np.diff(cu) - 1
edges = [500, 1000]
bucket = np.searchsorted(edges, doc_len, side="left")  # <= 500 -> 0, 501..1000 -> 1, > 1000 -> 2
rows = j["by_length"]
assert [x["bucket"] for x in rows] == ["<=500", "500-1000", ">1000"], rows
assert sum(x["predictions"] for x in rows) == j["predictions"]
total = sum(x["loss"] * x["predictions"] for x in rows if x["predictions"]) / j["predictions"]
assert abs(total - j["loss"]) <= 1e-12 * abs(j["loss"]), (total, j["loss"])
for k, x in enumerate(rows):
    m = bucket == k
    assert x["predictions"] == int(preds[m].sum()), (k, x, int(preds[m].sum()))
    assert x["documents"] == len(np.unique(doc[m])), (k, x)
    assert m.any(), f"bucket {k} is empty: pick other edges"
    want = seq_loss[m].sum() / preds[m].sum()
    assert abs(x["loss"] - want) <= 1e-5 * want, (k, x["loss"], want)
    print(f"{x['bucket']}: {x['documents']} documents, {x['predictions']} predictions, loss {x['loss']:.6f} (reference {want:.6f})")
PYEOF
done
"$FLEXSP" eval --checkpoint "$work/w.h5" --data "$work/data.h5" --max-seq-len 64 --by-length >"$work/bl.txt"
grep -qE '^  <=1K +[0-9]+ +[0-9]+ +[0-9.]+ ' "$work/bl.txt" && grep -qE '^  >64K +0 +0 +- +-$' "$work/bl.txt" ||
  { cat "$work/bl.txt"; fail "--by-length text table"; }
expect_error "--length-buckets: '400,100' is not increasing" "$FLEXSP" eval --checkpoint "$work/w.h5" \
  --data "$work/data.h5" --max-seq-len 64 --by-length --length-buckets 400,100
echo "ok: --by-length equals the reference per bucket, on 1 and 3 ranks"

# A file with the run config (root attribute `config`, as in checkpoints): its
# data.max_seq_len is used unless --max-seq-len is given.
cp "$work/w.h5" "$work/ck.h5"
$PY - "$work/ck.h5" <<'PYEOF'
import sys, h5py
with h5py.File(sys.argv[1], "a") as f:
    f.attrs["schema"] = "flexsp.checkpoint"
    f.attrs["config"] = "[data]\nmax_seq_len = 64\n"
PYEOF
"$FLEXSP_MPIRUN" -np 2 "$FLEXSP" eval --checkpoint "$work/ck.h5" --data "$work/data.h5" --max-docs 12 --json >"$work/eck.json"
rel_close "$(json_field loss <"$work/eck.json")" "$l" 1e-9 || fail "stored max_seq_len not used"
[[ $(json_field max_seq_len <"$work/eck.json") == 64 ]] || fail "max_seq_len not from the file"
"$FLEXSP" eval --checkpoint "$work/ck.h5" --data "$work/data.h5" --max-docs 12 --max-seq-len 128 --json >"$work/eck2.json"
[[ $(json_field max_seq_len <"$work/eck2.json") == 128 ]] || fail "--max-seq-len does not override"
echo "ok: data.max_seq_len from the stored run config; --max-seq-len overrides it"

# Errors: one line each, on 1 and on 3 ranks.
expect_error "$work/nope.h5" "$FLEXSP" eval --checkpoint "$work/nope.h5" --data "$work/data.h5" --max-seq-len 64
expect_error "--max-seq-len" "$FLEXSP" eval --checkpoint "$work/w.h5" --data "$work/data.h5"
expect_error "--max-seq-len" "$FLEXSP_MPIRUN" -np 3 "$FLEXSP" eval --checkpoint "$work/w.h5" --data "$work/data.h5"
$PY "$REF/make_case.py" --out "$work/small" --vocab 200 >/dev/null
expect_error "vocab" "$FLEXSP_MPIRUN" -np 3 "$FLEXSP" eval --checkpoint "$work/small/weights.h5" --data "$work/data.h5" --max-seq-len 64
expect_error "$work/missing.h5" "$FLEXSP" eval --checkpoint "$work/w.h5" --data "$work/missing.h5" --max-seq-len 64
expect_error "--max-docs" "$FLEXSP" eval --checkpoint "$work/w.h5" --data "$work/data.h5" --max-seq-len 64 --max-docs 0
expect_error "unrecognised" "$FLEXSP" eval --checkpoint "$work/w.h5" --bogus
echo "eval: all checks passed"
