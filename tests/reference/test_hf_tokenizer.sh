# flexsp's byte-level BPE against Hugging Face `tokenizers`: every id equal, on a real
# corpus this test does not write -- the licenses and copyright files every Debian machine
# has, and the translated man pages where they are installed (Japanese, Korean, Russian,
# Chinese, German, French) -- plus a short text of its own with the cases a corpus may
# miss (contractions in capitals, digits of other scripts, emoji sequences, decomposed
# accents, U+180E, NBSP, CRLF, long runs, invalid UTF-8, special and added tokens in the
# text, JSON lines).
#
# No hub is reachable, so `tokenizers` itself trains the tokenizer.json files on that
# corpus, in the styles of four families: Llama 3 (its Split regex then ByteLevel,
# ignore_merges, <|begin_of_text|> by the post-processor's template, added tokens with
# single_word / lstrip / rstrip / normalized), GPT-2 (ByteLevel with GPT-2's regex), GPT-2
# with add_prefix_space, and Qwen (NFC, its regex). For each, `flexsp pack --hf-tokenizer`
# packs the corpus (--bos where the family has a BOS) and hf_tokenizer.py compares every
# document's ids with tokenizers' encode(text, add_special_tokens=False); the Llama 3 pack
# on 2 ranks must be the same file.
#
# tokenizers comes from PyPI (tests/reference/tokenizers_requirements.txt, pinned, no
# dependencies) into $FLEXSP_TOK_VENV (tests/reference/venv.sh); where it cannot be
# installed the test is skipped (exit 77) with the reason. KEEP_WORK=1 keeps the files.
set -euo pipefail
: "${FLEXSP_SOURCE_DIR:?}" "${FLEXSP:?FLEXSP must name the flexsp binary}"
: "${FLEXSP_TOK_VENV:?FLEXSP_TOK_VENV must name the virtual environment directory}"
REF="$FLEXSP_SOURCE_DIR/tests/reference"
work=$(mktemp -d "${PWD}/hf_tok.XXXXXX")
trap '[[ -n "${KEEP_WORK:-}" ]] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
/usr/bin/python3 -c 'import h5py, numpy' || fail "the comparison needs python3-h5py and python3-numpy"
source "$REF/venv.sh"
make_venv "$FLEXSP_TOK_VENV" "$REF/tokenizers_requirements.txt" --no-deps
PY="$FLEXSP_TOK_VENV/bin/python"
"$PY" -c 'import tokenizers; print("tokenizers", tokenizers.__version__)' ||
  fail "tokenizers was installed into $FLEXSP_TOK_VENV but does not import"

# ---- the corpus: up to ~3 MB ----------------------------------------------------------------
files=()
total=0
take() {  # FILE LIMIT: adds FILE while the corpus stays under LIMIT bytes
  local n
  n=$(stat -c %s "$1")
  ((n > 0 && total + n <= $2)) || return 0
  files+=("$1")
  total=$((total + n))
}
for f in /usr/share/common-licenses/*; do [[ -f $f && ! -L $f ]] && take "$f" 400000; done
for f in /usr/share/doc/*/copyright; do
  [[ -f $f ]] && (($(stat -c %s "$f") <= 200000)) && take "$f" 2200000
done
mkdir -p "$work/man"
for lang in ja ko ru zh_CN de fr; do
  for gz in $(ls /usr/share/man/$lang/man1/*.gz 2>/dev/null | head -8); do
    out="$work/man/${lang}_$(basename "$gz" .gz).txt"
    gzip -dc "$gz" >"$out" 2>/dev/null || continue
    take "$out" 3000000
  done
done
((total > 500000)) || fail "the system corpus is too small ($total bytes): are /usr/share/common-licenses and /usr/share/doc there?"

/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
cases = [
    "Don't SHOUT: IT'S, WE'VE, THEY'LL, I'D, you're, she's, O'Neil's 'quoted' ſ's",
    "numbers 1234567 3.14159 -42 ２０２６ ١٢٣ १२३ ½ ² Ⅻ 0x1F600",
    "日本語のテキスト、中文文本。한국어 텍스트 Русский текст Ελληνικά עברית العربية नमस्ते ไทย",
    "emoji 👍🏽 🇩🇪 👨‍👩‍👧 ❤️ ☕",
    "decomposed cafe\u0301 A\u030a n\u0303 \u1e9b\u0323 ohm \u2126 angstrom \u212b",
    "spaces a\u00a0b x\u180ey z\u3000w u\u2028v p\u2009q tab\tend  double  ",
    # U+180E is white space to PCRE2's \s, not to Oniguruma's: repeated so that BPE learns
    # the merge across it that the other split would break.
    "mvs " + "x\u180e, " * 100,
    "crlf line\r\nnext\r\n\r\n   \n\t\tindented\n\n\n",
    " " * 300 + "=" * 200 + "9" * 50 + "\n" + "-" * 100 + " " + "ab" * 150,
    "specials <|begin_of_text|>hello<|end_of_text|> <|reserved_0|> <|eot_id|><|eot_id|>x<|end",
    "added use flexsp here, notflexsp, flexsp_x (flexsp) a  <tab>  b <tab>\tc Ünïcode U\u0308n\u0131\u0308code",
    "gpt2 <|endoftext|>tail <|im_start|>user<|im_end|>",
]
with open(f"{work}/edge.txt", "wb") as f:
    f.write("\n".join(cases).encode())
    f.write(b"\nbad bytes \xff\xfe \xc3( \xe0\x80 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf \xf0\x9f\x98 end\xe2\x82")
with open(f"{work}/edge.jsonl", "w", encoding="utf-8") as f:
    for c in cases:
        f.write(json.dumps({"text": c}, ensure_ascii=False) + "\n")
        f.write("\n   \n")
PY
files+=("$work/edge.txt" "$work/edge.jsonl")
echo "corpus: ${#files[@]} files, $((total / 1000)) KB from the system + the edge cases"

# ---- every family: train, pack, compare -----------------------------------------------------
run_family() {  # NAME TRAIN-ARGS...: bos/eos are read back from the dataset
  local name=$1 d="$work/$1"
  shift
  mkdir -p "$d"
  "$PY" "$REF/hf_tokenizer.py" train --out "$d" "$@" "${files[@]}" >"$d/train.log" ||
    { cat "$d/train.log"; fail "$name: tokenizers could not train"; }
  local bos=(--bos)
  [[ $name == qwen ]] && bos=()  # Qwen has no BOS
  "$FLEXSP" pack --hf-tokenizer "$d" "${bos[@]}" --out "$d/data.h5" "${files[@]}" >"$d/pack.log" ||
    { cat "$d/pack.log"; fail "$name: flexsp pack failed"; }
  local ids
  ids=$(/usr/bin/python3 -c 'import h5py, sys; f = h5py.File(sys.argv[1]); print(f.attrs.get("bos_id", -1), f.attrs["eos_id"])' "$d/data.h5")
  "$PY" "$REF/hf_tokenizer.py" compare --tokenizer "$d/tokenizer.json" --dataset "$d/data.h5" \
    --bos "${ids% *}" --eos "${ids#* }" "${files[@]}" >"$d/cmp.log" || { cat "$d/cmp.log"; fail "$name: ids differ"; }
  echo "$name: $(cat "$d/cmp.log")"
}
run_family llama3 --family llama3
# The same pack on 2 ranks (each tokenizes a share) is the same file.
"${FLEXSP_MPIRUN:-mpirun}" -np 2 --oversubscribe "$FLEXSP" pack --hf-tokenizer "$work/llama3" --bos \
  --out "$work/llama3/data2.h5" "${files[@]}" >/dev/null || fail "mpirun -np 2 pack failed"
cmp -s "$work/llama3/data.h5" "$work/llama3/data2.h5" || fail "the 2-rank pack differs from the one-process pack"
echo "ok: llama3 on 2 ranks: the same file"
run_family gpt2 --family gpt2
run_family gpt2_prefix --family gpt2 --prefix-space
run_family qwen --family qwen

# The dataset records the tokenizer file by name and SHA-256.
/usr/bin/python3 - "$work/llama3" <<'PY' || fail "the dataset does not record the tokenizer's file and hash"
import hashlib, h5py, sys
d = sys.argv[1]
a = h5py.File(f"{d}/data.h5").attrs
want = hashlib.sha256(open(f"{d}/tokenizer.json", "rb").read()).hexdigest()
assert a["tokenizer"] == f"hf:{d}/tokenizer.json", a["tokenizer"]
assert a["tokenizer_sha256"] == want, (a["tokenizer_sha256"], want)
assert a["bos_id"] == 0 and a["eos_id"] == 1, (a["bos_id"], a["eos_id"])
print("ok: tokenizer and tokenizer_sha256 recorded; BOS/EOS from tokenizer_config.json")
PY
echo "hf tokenizer comparison: 4 families, every id equal"
