# Extending the context of a LLaMA from Hugging Face, as docs/model.md tells a user to:
# a bf16 HF folder with its sentencepiece tokenizer.model -> flexsp import ->
# pack with that tokenizer and --bos -> train a few steps on 2 ranks from the imported
# weights with a larger rope_theta and llama3 RoPE scaling, the [model] section taken from
# import's output -> eval --by-length -> export. The exported config.json carries the new
# RoPE settings, and the exported model imported again evaluates exactly like the trained
# weights. Skipped (77) without spm_train.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
REF="$FLEXSP_SOURCE_DIR/tests/reference"
command -v spm_train >/dev/null || { echo "SKIPPED: spm_train (sentencepiece-tools) is not installed"; exit 77; }
corpus=/usr/include/linux/netfilter

# The "pretrained" model: a random LLaMA of vocabulary 300 with a tokenizer of 300 pieces.
find "$corpus" -name '*.h' | sort | xargs cat >"$work/spm.txt"
spm_train --input="$work/spm.txt" --model_prefix="$work/tok" --vocab_size=300 --model_type=bpe \
  >"$work/spm.log" 2>&1 || { cat "$work/spm.log"; fail "spm_train"; }
$PY "$REF/make_case.py" --out "$work/pre" --vocab 300 --eps 1e-6 >/dev/null
$PY "$REF/write_hf.py" --weights "$work/pre/weights.h5" --out "$work/hf" --dtype BF16
cp "$work/tok.model" "$work/hf/tokenizer.model"

# 1. Import; the [model] section it prints becomes the run's.
"$FLEXSP" import --hf "$work/hf" --out "$work/base.h5" >"$work/import.log"
sed -n '/^\[model\]/,$p' "$work/import.log" >"$work/run.ini"
grep -q '^vocab = 300$' "$work/run.ini" || { cat "$work/import.log"; fail "no [model] section"; }
cat >>"$work/run.ini" <<EOF
rope_theta = 40000
rope_scaling = llama3
rope_scaling_factor = 4
rope_original_max_position = 256
[data]
max_seq_len = 512
[train]
steps = 3
global_batch_tokens = 2048
backend = cpu
EOF

# 2. Pack with the model's tokenizer; every document starts with its BOS.
"$FLEXSP" pack --sp-model "$work/hf/tokenizer.model" --bos --glob '*.h' --out "$work/data.h5" "$corpus" >"$work/pack.log"
grep -q 'bos_id 1 first' "$work/pack.log" || { cat "$work/pack.log"; fail "pack --bos"; }

# 3. Train on 2 ranks from the imported weights with the new RoPE.
"$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train --config "$work/run.ini" --data.path="$work/data.h5" \
  --load-weights "$work/base.h5" --dump-weights "$work/ext.h5" >"$work/train.log" 2>&1 ||
  { cat "$work/train.log"; fail "training failed"; }
grep -q "RoPE changes from the file's rope_theta 10000, no scaling to rope_theta 40000, llama3 (factor 4, low 1, high 4, original 256)" \
  "$work/train.log" || { cat "$work/train.log"; fail "the run does not report the RoPE change"; }
[[ $(grep -cE '^step [0-9]+/3' "$work/train.log") -eq 3 ]] || { cat "$work/train.log"; fail "not 3 steps"; }
echo "ok: 3 steps on 2 ranks from the imported weights with rope_theta 40000 and llama3 scaling"

# 4. Eval by length (the numbers a user looks at), and 5. export.
"$FLEXSP_MPIRUN" -np 2 "$FLEXSP" eval --checkpoint "$work/ext.h5" --data "$work/data.h5" --max-seq-len 512 \
  --by-length --length-buckets 256,1024 --json >"$work/eval.json"
"$FLEXSP" export --checkpoint "$work/ext.h5" --out "$work/out" --dtype fp32 --max-seq-len 512 >/dev/null
"$FLEXSP" import --hf "$work/out" --out "$work/again.h5" >/dev/null
"$FLEXSP_MPIRUN" -np 2 "$FLEXSP" eval --checkpoint "$work/again.h5" --data "$work/data.h5" --max-seq-len 512 \
  --by-length --length-buckets 256,1024 --json >"$work/again.json"
$PY - "$work/eval.json" "$work/again.json" "$work/out/config.json" <<'PYEOF' || fail "eval or config.json"
import json, sys
e, again, cfg = (json.load(open(p)) for p in sys.argv[1:4])
rows = e["by_length"]
assert [r["bucket"] for r in rows] == ["<=256", "256-1K", ">1K"], rows
assert all(r["documents"] > 0 and r["loss"] > 0 for r in rows), rows
assert sum(r["predictions"] for r in rows) == e["predictions"]
strip = lambda j: {k: v for k, v in j.items() if k != "checkpoint"}
assert strip(e) == strip(again), "the exported model, imported again, evaluates differently"
assert cfg["rope_theta"] == 40000, cfg["rope_theta"]
assert cfg["rope_scaling"] == {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 256}, cfg["rope_scaling"]
assert cfg["max_position_embeddings"] == 512 and cfg["vocab_size"] == 300
for r in rows:
    print(f"  {r['bucket']:>8}: {r['documents']} documents, loss {r['loss']:.4f}")
PYEOF
echo "ok: eval --by-length; the exported config.json carries rope_theta 40000 and the llama3 scaling"
echo "context extension: all checks passed"
