# flexsp pack + inspect on a real corpus (the Linux UAPI headers, a few MB): the counts
# agree with the file system, h5py (an independent reader) sees exactly the bytes of every
# file followed by EOS in sorted path order, h5dump -H shows the layout, gzip and mpirun
# give the same tokens, and an existing output is not overwritten without --force.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
corpus=/usr/include/linux
# output_has PATTERN cmd...: runs cmd (which must succeed), then greps its whole stdout
# (a grep -q in a pipe could end cmd early with SIGPIPE under pipefail).
output_has() {
  local pat=$1; shift
  "$@" >"$work/o" || fail "failed: $*"
  grep -qE -- "$pat" "$work/o"
}

"$FLEXSP" pack --glob '*.h' --out "$work/data.h5" "$corpus" | tee "$work/pack.out"
grep -q "^wrote $work/data.h5" "$work/pack.out" || fail "pack did not report the output"

# What the file system says (find -L: the packer follows symlinks to files).
nfiles=$(find -L "$corpus" -type f -name '*.h' | wc -l)
ndocs=$(find -L "$corpus" -type f -name '*.h' -size +0c | wc -l)
nbytes=$(find -L "$corpus" -type f -name '*.h' -print0 | xargs -0 cat | wc -c)
grep -qE "^  files: +$nfiles\$" "$work/pack.out" || fail "pack files != $nfiles"
grep -qE "^  documents: +$ndocs\$" "$work/pack.out" || fail "pack documents != $ndocs"
grep -qE "^  skipped: +$((nfiles - ndocs)) " "$work/pack.out" || fail "pack skipped != $((nfiles - ndocs))"
echo "ok: pack counts ($nfiles files, $ndocs documents, $nbytes bytes)"

"$FLEXSP" inspect "$work/data.h5" | tee "$work/inspect.out"
grep -qE "^documents: +$ndocs\$" "$work/inspect.out" || fail "inspect documents"
grep -qE "^tokens: +$((nbytes + ndocs))\$" "$work/inspect.out" || fail "inspect tokens"
grep -qE "^dtype: +uint16\$" "$work/inspect.out" || fail "inspect dtype"
grep -qE "^valid: +yes\$" "$work/inspect.out" || fail "inspect valid"

"$FLEXSP" inspect --json "$work/data.h5" >"$work/inspect.json"
$PY - "$work/inspect.json" "$ndocs" "$nbytes" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1])); nd, nb = int(sys.argv[2]), int(sys.argv[3])
assert j["schema"] == "flexsp.tokens" and j["valid"] is True, j
assert j["documents"] == nd and j["tokens"] == nb + nd, j
assert (j["vocab_size"], j["eos_id"], j["tokenizer"]) == (257, 256, "bytes"), j
L = j["doc_length"]
assert L["min"] <= L["p50"] <= L["p90"] <= L["p99"] <= L["max"], L
assert abs(L["mean"] - (nb + nd) / nd) < 1e-6, L
print("ok: inspect --json")
EOF

# h5py: the bytes of every non-empty file, in sorted path order, each followed by EOS.
$PY - "$work/data.h5" "$corpus" <<'EOF'
import glob, os, sys
import h5py, numpy as np
path, corpus = sys.argv[1], sys.argv[2]
files = sorted(p for p in glob.glob(corpus + "/**/*.h", recursive=True) if os.path.isfile(p))
docs = [open(p, "rb").read() for p in files]
docs = [d for d in docs if d]
with h5py.File(path, "r") as f:
    a = f.attrs
    assert a["schema"] == "flexsp.tokens" and a["schema_version"] == 1, dict(a)
    assert a["vocab_size"] == 257 and a["eos_id"] == 256 and a["tokenizer"] == "bytes", dict(a)
    tok, off = f["tokens"], f["offsets"][:]
    assert tok.dtype == np.uint16 and off.dtype == np.int64, (tok.dtype, off.dtype)
    assert tok.chunks is not None, "tokens must be chunked"
    tok = tok[:]
assert len(off) == len(docs) + 1 and off[0] == 0 and off[-1] == len(tok)
assert np.all(np.diff(off) >= 0)
for i, d in enumerate(docs):
    got = tok[off[i]:off[i + 1]]
    want = np.frombuffer(d, dtype=np.uint8).astype(np.uint16)
    assert got[-1] == 256 and np.array_equal(got[:-1], want), f"document {i} ({files[i]})"
print(f"ok: h5py reads {len(docs)} documents, {len(tok)} tokens, all equal to the files")
EOF

h5dump -H "$work/data.h5" >"$work/h5dump.out"
for want in 'DATASET "tokens"' 'DATASET "offsets"' 'H5T_STD_U16LE' 'H5T_STD_I64LE' \
            'ATTRIBUTE "schema"' 'ATTRIBUTE "vocab_size"' 'ATTRIBUTE "eos_id"' 'ATTRIBUTE "tokenizer"'; do
  grep -qF "$want" "$work/h5dump.out" || fail "h5dump -H lacks $want"
done
echo "ok: h5dump -H"

# gzip and mpirun (the ranks share the reading, rank 0 writes) give the same tokens.
"$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" pack --glob '*.h' --compression 6 \
  --out "$work/gz.h5" "$corpus" >"$work/gz.out"
grep -qE "^  documents: +$ndocs\$" "$work/gz.out" || fail "mpirun pack documents"
[[ $(grep -c '^wrote' "$work/gz.out") -eq 1 ]] || fail "more than one rank reported"
output_has '^compression: +shuffle \+ gzip 6$' "$FLEXSP" inspect "$work/gz.h5" || fail "no gzip"
output_has '^valid: +yes$' "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" inspect "$work/gz.h5" ||
  fail "mpirun inspect"
$PY - "$work/data.h5" "$work/gz.h5" <<'EOF'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
assert np.array_equal(a["tokens"][:], b["tokens"][:]) and np.array_equal(a["offsets"][:], b["offsets"][:])
assert b["tokens"].compression == "gzip" and b["tokens"].chunks == (65536,)
assert b.filename.endswith("gz.h5") and a.attrs["tokenizer"] == b.attrs["tokenizer"]
print("ok: gzip + mpirun pack equals the plain pack")
EOF

# An existing output stays as it is without --force; with --force it is replaced.
sum=$(md5sum <"$work/gz.h5")
expect_error "$work/gz.h5: already exists (use --force to overwrite)" \
  "$FLEXSP" pack --glob '*.h' --out "$work/gz.h5" "$corpus"
[[ $(md5sum <"$work/gz.h5") == "$sum" ]] || fail "output modified without --force"
"$FLEXSP" pack --force --out "$work/gz.h5" "$corpus/a.out.h" >/dev/null
output_has '^documents: +1$' "$FLEXSP" inspect "$work/gz.h5" || fail "--force did not replace"
[[ -z $(find "$work" -name '*.tmp.*') ]] || fail "temporary files left behind"
echo "ok: --force"

# JSON lines and a sentencepiece model trained here.
printf '{"text": "hello world"}\n\n{"tokens": [1, 2, 3]}\n{"text": ""}\n' >"$work/d.jsonl"
output_has '^  documents: +2$' "$FLEXSP" pack --out "$work/j.h5" "$work/d.jsonl" || fail "jsonl"
if command -v spm_train >/dev/null; then
  find -L "$corpus" -name '*.h' | sort >"$work/list"  # (no head in a pipe: SIGPIPE + pipefail)
  sed -n 1,50p "$work/list" | xargs cat >"$work/spm.txt"
  spm_train --input="$work/spm.txt" --model_prefix="$work/m" --vocab_size=500 \
    --model_type=bpe >"$work/spm.log" 2>&1
  "$FLEXSP" pack --sp-model "$work/m.model" --glob '*.h' --out "$work/sp.h5" "$corpus" >/dev/null
  "$FLEXSP" inspect "$work/sp.h5" >"$work/sp.out"
  grep -qE "^tokenizer: +sentencepiece:$work/m.model\$" "$work/sp.out" || fail "sp tokenizer"
  grep -qE '^vocab_size: +500$' "$work/sp.out" || fail "sp vocab"
  grep -qE "^documents: +$ndocs\$" "$work/sp.out" || fail "sp documents"
  grep -qE '^valid: +yes$' "$work/sp.out" || fail "sp valid"
  # --bos (LLaMA's): every document starts with the model's BOS id, the rest unchanged.
  "$FLEXSP" pack --sp-model "$work/m.model" --bos --glob '*.h' --out "$work/bos.h5" "$corpus" >"$work/bos.out"
  grep -qE 'bos_id 1 first' "$work/bos.out" || { cat "$work/bos.out"; fail "--bos not reported"; }
  /usr/bin/python3 - "$work/sp.h5" "$work/bos.h5" <<'PYEOF' || fail "--bos: wrong tokens"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    ta, oa, tb, ob = (np.asarray(f[k][...]) for f in (a, b) for k in ("tokens", "offsets"))
    assert int(b.attrs["bos_id"]) == 1 and "bos_id" not in a.attrs
    assert len(oa) == len(ob)
    for i in range(len(oa) - 1):
        assert tb[ob[i]] == 1 and np.array_equal(tb[ob[i] + 1:ob[i + 1]], ta[oa[i]:oa[i + 1]]), i
PYEOF
  expect_error "pack: --bos: tokenizer bytes has no BOS id" "$FLEXSP" pack --bos --out "$work/nobos.h5" "$corpus"
  echo "ok: sentencepiece, --bos"
fi
echo "PASS"
