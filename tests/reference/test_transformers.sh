# flexsp's model against HuggingFace transformers' LlamaForCausalLM: same weights, same
# sequences -> loss, logits and every parameter's gradient agree to 1e-5 relative (flexsp
# in fp32 against transformers in float64), and the independent reference
# (llama_ref.py, float64) agrees with transformers to 1e-6, on the cases of
# tests/reference/cases.sh (RoPE scaling llama3 only where transformers has it: 4.43+;
# skipped, with a line, with the pinned 4.38). Each case's model, saved by transformers'
# save_pretrained, is imported by `flexsp import`: the same weights bit for bit, the same
# loss and logits (1e-5); and `flexsp export`'s folder, loaded by transformers'
# from_pretrained, is the same model to 1e-12.
#
# transformers comes from PyPI (tests/reference/hf_requirements.txt, pinned) into a
# virtual environment over Debian's python3 with its site packages (python3-torch):
# $FLEXSP_HF_VENV, in the build tree, made once and reused while the pins are unchanged
# (tests/reference/venv.sh); skipped -- exit 77, with the reason -- where it cannot be made.
# KEEP_WORK=1 keeps the cases and outputs (the work directory under $PWD).
set -euo pipefail
: "${FLEXSP_SOURCE_DIR:?}" "${FLEXSP:?FLEXSP must name the flexsp binary}"
: "${FLEXSP_MODEL_PROBE:?FLEXSP_MODEL_PROBE must name flexsp_model_probe}"
: "${FLEXSP_HF_VENV:?FLEXSP_HF_VENV must name the virtual environment directory}"
PY=/usr/bin/python3
REF="$FLEXSP_SOURCE_DIR/tests/reference"
PINS="$REF/hf_requirements.txt"
source "$REF/cases.sh"
source "$REF/venv.sh"
work=$(mktemp -d "${PWD}/hf_ref.XXXXXX")
trap '[[ -n "${KEEP_WORK:-}" ]] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
$PY -c 'import torch, h5py' || fail "the reference needs python3-torch and python3-h5py"

venv=$FLEXSP_HF_VENV
make_venv "$venv" "$PINS"
HF="$venv/bin/python"
"$HF" -c 'import transformers, torch; print("transformers", transformers.__version__, "on torch", torch.__version__)' ||
  fail "transformers was installed into $venv but does not import"

n=0
case_() {  # NAME "make_case args"
  local name=$1 args=$2 d="$work/$1"
  mkdir -p "$d"
  # shellcheck disable=SC2086
  $PY "$REF/make_case.py" --out "$d" $args >/dev/null
  local rc=0
  "$HF" "$REF/hf_llama.py" --weights "$d/weights.h5" --batch "$d/batch.h5" --out "$d/hf.h5" \
    --dtype float64 --save-pretrained "$d/hf_model" >"$d/hf.log" || rc=$?
  if [[ $rc -eq 3 ]]; then
    echo "skipped: $name: $(cat "$d/hf.log")"
    return
  fi
  [[ $rc -eq 0 ]] || { cat "$d/hf.log"; fail "$name: hf_llama.py failed"; }
  $PY "$REF/llama_ref.py" --weights "$d/weights.h5" --batch "$d/batch.h5" --out "$d/ref.h5" \
    --dtype float64 >/dev/null
  "$FLEXSP_MODEL_PROBE" --weights "$d/weights.h5" --batch "$d/batch.h5" --out "$d/ours.h5" >/dev/null
  local who rtol
  for who in ours ref; do
    rtol=1e-5
    [[ $who == ref ]] && rtol=1e-6
    if ! $PY "$REF/compare.py" "$d/$who.h5" "$d/hf.h5" --keys loss,logits,grad --rtol $rtol \
        >"$d/$who.cmp"; then
      grep -v '^ok' "$d/$who.cmp" >&2 || true
      fail "$name: $who differs from transformers beyond $rtol"
    fi
  done
  same_predictions "$d/ours.h5" "$d/hf.h5" || fail "$name: num_predictions differ"
  # The folder transformers saved, imported by flexsp: the very weights, the same logits.
  "$FLEXSP" import --hf "$d/hf_model" --out "$d/imported.h5" >/dev/null || fail "$name: import failed"
  $PY "$REF/compare.py" "$d/imported.h5" "$d/weights.h5" --keys model --rtol 0 >"$d/imp.cmp" ||
    { grep -v '^ok' "$d/imp.cmp" >&2; fail "$name: imported weights differ"; }
  "$FLEXSP_MODEL_PROBE" --weights "$d/imported.h5" --batch "$d/batch.h5" --out "$d/imp.h5" >/dev/null
  $PY "$REF/compare.py" "$d/imp.h5" "$d/hf.h5" --keys loss,logits --rtol 1e-5 >"$d/imp.cmp" ||
    { grep -v '^ok' "$d/imp.cmp" >&2; fail "$name: flexsp on the imported HF model differs"; }
  # And back: flexsp's export, loaded by transformers from its config.json (RoPE settings
  # included), is the same model.
  "$FLEXSP" export --checkpoint "$d/weights.h5" --out "$d/exported" --dtype fp32 >/dev/null
  "$HF" "$REF/hf_llama.py" --from-pretrained "$d/exported" --batch "$d/batch.h5" --out "$d/hf_exp.h5" \
    --dtype float64 >/dev/null || fail "$name: transformers cannot load flexsp's export"
  $PY "$REF/compare.py" "$d/hf_exp.h5" "$d/hf.h5" --keys loss,logits,grad --rtol 1e-12 >"$d/exp.cmp" ||
    { grep -v '^ok' "$d/exp.cmp" >&2; fail "$name: transformers on flexsp's export differs"; }
  echo "ok: $name: flexsp = transformers, also imported from its save_pretrained folder and exported to it ($(tail -1 "$d/ours.cmp"), worst rel" \
    "$(worst "$d/ours.cmp")); reference = transformers (worst rel $(worst "$d/ref.cmp"))"
  n=$((n + 1))
}
worst() { awk '$1 == "ok" { if ($NF > m) m = $NF } END { printf "%.1e", m }' "$1"; }

reference_cases
echo "transformers comparison: $n cases passed"
