# Bad datasets, tokenizer.json files (WordPiece, Unigram, malformed), mixtures (weights,
# a missing source, sources on other tokenizers), a model vocabulary smaller than the
# dataset's, and bad pack/inspect command lines (docs/errors.md): each ends with a
# non-zero exit and exactly one "flexsp: error:" line naming the file (or option/verb) and
# what is wrong, with no crash, as one process and under mpirun (rank 0 inspects, the others
# wait in agree()); no input file is modified. The broken files are made with h5py, an
# independent writer.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
cd "$work"

$PY - <<'EOF'
import h5py, numpy as np
def make(name, tokens=(1, 2, 3, 256, 4, 5, 256), offsets=(0, 4, 7), drop=(), **attrs):
    a = dict(schema="flexsp.tokens", schema_version=1, vocab_size=257, eos_id=256, tokenizer="bytes")
    a.update(attrs)
    with h5py.File(name, "w") as f:
        for k, v in a.items():
            if k not in drop:
                f.attrs[k] = v
        if "tokens" not in drop:
            f.create_dataset("tokens", data=np.array(tokens, dtype=np.uint16), maxshape=(None,), chunks=(4,))
        if "offsets" not in drop:
            f.create_dataset("offsets", data=np.array(offsets, dtype=np.int64))
make("good.h5")
make("no_tokens.h5", drop=("tokens",))
make("no_offsets.h5", drop=("offsets",))
make("offsets_decrease.h5", offsets=(0, 5, 3, 7))
make("offsets_end.h5", offsets=(0, 4, 6))
make("offsets_start.h5", offsets=(2, 4, 7))
make("token_high.h5", tokens=(1, 2, 3, 256, 4, 300, 256))
make("token_vocab.h5", vocab_size=200, eos_id=199, tokens=(1, 2, 3, 199, 4, 200, 199))
make("empty.h5", tokens=(), offsets=(0,))
make("no_schema.h5", drop=("schema",))
make("checkpoint.h5", schema="flexsp.checkpoint")
make("no_vocab.h5", drop=("vocab_size",))
make("eos_high.h5", eos_id=257)
EOF
# Hugging Face tokenizer.json files: a byte-level BPE, and what flexsp refuses.
mkdir -p hf wordpiece unigram broken nothing
$PY "$FLEXSP_SOURCE_DIR/tests/e2e/make_tokenizer.py" hf 50 /usr/share/common-licenses/GPL-3 >/dev/null
$PY "$FLEXSP_SOURCE_DIR/tests/e2e/make_tokenizer.py" wordpiece 5 /usr/share/common-licenses/GPL-3 --model-type WordPiece >/dev/null
$PY "$FLEXSP_SOURCE_DIR/tests/e2e/make_tokenizer.py" unigram 5 /usr/share/common-licenses/GPL-3 --model-type Unigram >/dev/null
head -c 300 hf/tokenizer.json >broken/tokenizer.json
echo "this is not HDF5" >notdata.h5
printf '{"text": "ok"}\n{"text": oops}\n' >bad.jsonl
echo "some text" >in.txt
cp good.h5 exists.h5
sums_before=$(md5sum ./*.h5 ./*.jsonl ./*.txt)

for launch in "" "$FLEXSP_MPIRUN -np 2 --oversubscribe"; do
  echo "-- launch: ${launch:-one process}"
  expect_error "$work/missing.h5: no such file" $launch "$FLEXSP" inspect "$work/missing.h5"
  expect_error "$work/notdata.h5: not an HDF5 file" $launch "$FLEXSP" inspect "$work/notdata.h5"
  expect_error "$work/no_tokens.h5: dataset '/tokens' is missing" \
    $launch "$FLEXSP" inspect "$work/no_tokens.h5"
  expect_error "$work/no_offsets.h5: dataset '/offsets' is missing" \
    $launch "$FLEXSP" inspect "$work/no_offsets.h5"
  expect_error "$work/offsets_decrease.h5: /offsets[2] = 3 < /offsets[1] = 5 (offsets must be nondecreasing)" \
    $launch "$FLEXSP" inspect "$work/offsets_decrease.h5"
  expect_error "$work/offsets_end.h5: /offsets[2] = 6 but /tokens has 7 tokens" \
    $launch "$FLEXSP" inspect "$work/offsets_end.h5"
  expect_error "$work/offsets_start.h5: /offsets[0] = 2 (must be 0)" \
    $launch "$FLEXSP" inspect "$work/offsets_start.h5"
  expect_error "$work/token_high.h5: /tokens[5] = 300 is outside [0, vocab_size = 257)" \
    $launch "$FLEXSP" inspect "$work/token_high.h5"
  expect_error "$work/token_vocab.h5: /tokens[5] = 200 is outside [0, vocab_size = 200)" \
    $launch "$FLEXSP" inspect "$work/token_vocab.h5"
  expect_error "$work/empty.h5: dataset has no documents" $launch "$FLEXSP" inspect "$work/empty.h5"
  expect_error "$work/no_schema.h5: not a flexsp file" $launch "$FLEXSP" inspect "$work/no_schema.h5"
  expect_error "$work/checkpoint.h5: no /model group (not a complete flexsp checkpoint)" \
    $launch "$FLEXSP" inspect "$work/checkpoint.h5"
  expect_error "$work/no_vocab.h5: attribute 'vocab_size' is missing" \
    $launch "$FLEXSP" inspect "$work/no_vocab.h5"
  expect_error "$work/eos_high.h5: eos_id = 257 is outside [0, vocab_size = 257)" \
    $launch "$FLEXSP" inspect "$work/eos_high.h5"
  expect_error "unknown verb 'frobnicate'" $launch "$FLEXSP" frobnicate
  expect_error "inspect: unrecognised option '--frob'" $launch "$FLEXSP" inspect --frob good.h5
  expect_error "pack: unrecognised option '--frobnicate'" \
    $launch "$FLEXSP" pack --frobnicate --out "$work/x.h5" in.txt
  expect_error "$work/bad.jsonl:2: malformed JSON" $launch "$FLEXSP" pack --out "$work/x.h5" "$work/bad.jsonl"
  for t in wordpiece unigram; do
    expect_error "$work/$t/tokenizer.json: model.type is '$( [[ $t == wordpiece ]] && echo WordPiece || echo Unigram)': flexsp reads byte-level BPE" \
      $launch "$FLEXSP" pack --hf-tokenizer "$work/$t" --out "$work/x.h5" in.txt
  done
  expect_error "$work/broken/tokenizer.json: malformed JSON" $launch "$FLEXSP" pack --hf-tokenizer "$work/broken" --out "$work/x.h5" in.txt
  # The good file passes, under the same launch.
  $launch "$FLEXSP" inspect "$work/good.h5" >good.out || fail "good.h5 failed"
  grep -qE '^valid: +yes$' good.out || fail "good.h5 not valid"
  [[ -z $launch ]] || continue  # the rest is the same code path on rank 0; keep CI short
  expect_error "--compression" $launch "$FLEXSP" pack --compression high --out "$work/x.h5" in.txt
  expect_error "pack: --out FILE is required" $launch "$FLEXSP" pack in.txt
  expect_error "$work/nothere.txt: no such file or directory" \
    $launch "$FLEXSP" pack --out "$work/x.h5" "$work/nothere.txt"
  expect_error "$work/exists.h5: already exists (use --force to overwrite)" \
    $launch "$FLEXSP" pack --out "$work/exists.h5" in.txt
  expect_error "$work/none.model: sentencepiece model not found" \
    $launch "$FLEXSP" pack --sp-model "$work/none.model" --out "$work/x.h5" in.txt
  expect_error "unknown tokenizer 'gpt2'" $launch "$FLEXSP" pack --tokenizer gpt2 --out "$work/x.h5" in.txt
  expect_error "$work/nothing/tokenizer.json: tokenizer.json not found" \
    $launch "$FLEXSP" pack --hf-tokenizer "$work/nothing" --out "$work/x.h5" in.txt
done
[[ ! -e x.h5 ]] || fail "a failed pack left x.h5"

# Mixtures and the model's vocabulary: nothing is written (no checkpoint or report dir).
mkdir -p mix
"$FLEXSP" pack --hf-tokenizer hf --out "$work/mix/hf.h5" in.txt >/dev/null
train=("$FLEXSP" train --model.preset=tiny --train.backend=cpu --train.steps=1 --train.global_batch_tokens=64
       --data.max_seq_len=16 --checkpoint.dir="$work/mix/ck" --report.dir="$work/mix/rep")
for w in 0 -1 abc 1e999 ""; do
  expect_error "data.path: weight '$w' of '$work/good.h5' is not a positive number" \
    "${train[@]}" --data.path="$work/good.h5:$w, $work/mix/hf.h5:1"
done
expect_error "data.path: '$work/mix/hf.h5' has no weight (in a mixture every source needs one: FILE:WEIGHT)" \
  "${train[@]}" --data.path="$work/good.h5:1, $work/mix/hf.h5"
expect_error "data.path: file '$work/none.h5' not found" "${train[@]}" --data.path="$work/good.h5:1, $work/none.h5:1"
expect_error "$work/mix/hf.h5: tokenizer 'hf:$work/hf/tokenizer.json' (sha256 " \
  "$FLEXSP_MPIRUN" -np 2 --oversubscribe "${train[@]}" --data.path="$work/good.h5:0.5, $work/mix/hf.h5:0.5"
grep -qF "differs from 'bytes' in $work/good.h5 (the files of a dataset, and the sources of a mixture, must agree)" "$work/err" ||
  fail "the tokenizer mismatch does not name both sources"
expect_error "$work/mix/hf.h5: tokenizer" "$FLEXSP" inspect "$work/good.h5:0.5, $work/mix/hf.h5:0.5"
vocab=$($PY -c 'import h5py, sys; print(h5py.File(sys.argv[1]).attrs["vocab_size"])' "$work/mix/hf.h5")
expect_error "model.vocab: $((vocab - 1)) is smaller than the dataset's vocabulary size $vocab" \
  "${train[@]}" --data.path="$work/mix/hf.h5" --model.vocab=$((vocab - 1))
[[ ! -e mix/ck && ! -e mix/rep ]] || fail "a refused run wrote its checkpoint or report directory"
# Weights of a model with a smaller vocabulary (257, bytes) for the tokenizer.json dataset.
"$FLEXSP" train --model.preset=tiny --train.backend=cpu --train.steps=1 --train.global_batch_tokens=64 \
  --data.max_seq_len=16 --data.path="$work/good.h5" --dump-weights="$work/mix/w257.h5" >/dev/null
expect_error "$work/mix/w257.h5: the model's vocabulary (257) is smaller than the dataset's vocab_size $vocab (hf:$work/hf/tokenizer.json)" \
  "$FLEXSP" train --model.preset=tiny --train.backend=cpu --train.steps=1 --train.global_batch_tokens=64 \
  --data.max_seq_len=16 --data.path="$work/mix/hf.h5" --load-weights="$work/mix/w257.h5"

[[ "$(md5sum ./*.h5 ./*.jsonl ./*.txt)" == "$sums_before" ]] || fail "an input file changed"
[[ -z $(find . -name '*.tmp.*') ]] || fail "temporary files left behind"
echo "ok: inputs untouched"
echo "PASS"
