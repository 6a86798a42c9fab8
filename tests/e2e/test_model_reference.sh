# flexsp's model against the independent PyTorch reference (tests/reference/): same weights,
# same packed batch -> loss, logits, every parameter's gradient and the weights after one
# AdamW step agree to 1e-5 relative (fp32). The cases are tests/reference/cases.sh, each
# with and without activation checkpointing. The RoPE frequency tables (RoPE scaling
# linear and llama3 in two cases, HF's definitions written independently in llama_ref.py)
# agree to 1e-6 relative, element by element.
# KEEP_WORK=1 keeps the cases and outputs (the work directory under $PWD).
set -euo pipefail
: "${FLEXSP_SOURCE_DIR:?}" "${FLEXSP_MODEL_PROBE:?FLEXSP_MODEL_PROBE must name flexsp_model_probe}"
PY=/usr/bin/python3
REF="$FLEXSP_SOURCE_DIR/tests/reference"
source "$REF/cases.sh"
work=$(mktemp -d "${PWD}/model_ref.XXXXXX")
trap '[[ -n "${KEEP_WORK:-}" ]] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
$PY -c 'import torch, h5py' || fail "the reference needs python3-torch and python3-h5py"

# AdamW's first step moves every weight by about lr * g / (|g| + eps): for gradients near
# eps it amplifies fp32 noise in g (~1e-7 of the largest gradient, i.e. ~1e-9 here) into
# visible differences of the update. eps = 1e-5 keeps the step well conditioned while
# still checking bias correction, decoupled decay and the no-decay rule for norms.
ADAMW=1e-3,0.9,0.95,1e-5,0.1
n=0
# case NAME "make_case args" [extra probe args...]
case_() {
  local name=$1 args=$2; shift 2
  local d="$work/$name"
  mkdir -p "$d"
  # shellcheck disable=SC2086
  $PY "$REF/make_case.py" --out "$d" $args >/dev/null
  $PY "$REF/llama_ref.py" --weights "$d/weights.h5" --batch "$d/batch.h5" --out "$d/ref.h5" \
    --adamw "$ADAMW" >/dev/null
  for ckpt in "" "--checkpoint-activations"; do
    "$FLEXSP_MODEL_PROBE" --weights "$d/weights.h5" --batch "$d/batch.h5" --out "$d/ours.h5" \
      --adamw "$ADAMW" $ckpt >/dev/null
    if ! $PY "$REF/compare.py" "$d/ours.h5" "$d/ref.h5" --rtol 1e-5 >"$d/cmp.txt"; then
      grep -v '^ok' "$d/cmp.txt" >&2 || true
      fail "$name ${ckpt:-(no checkpointing)}: differs from the reference"
    fi
    same_predictions "$d/ours.h5" "$d/ref.h5" || fail "$name: num_predictions differ"
    $PY - "$d/ours.h5" "$d/ref.h5" <<'PYEOF' || fail "$name: RoPE frequency tables differ"
import sys, h5py, numpy as np
a, b = (np.asarray(h5py.File(f, "r")["rope_inv_freq"][...]) for f in sys.argv[1:3])
err = np.max(np.abs(a - b) / np.abs(b))
print(f"rope_inv_freq: max relative error {err:.1e}")
sys.exit(0 if a.shape == b.shape and err <= 1e-6 else 1)
PYEOF
    echo "ok: $name ${ckpt:-(no checkpointing)}: $(tail -1 "$d/cmp.txt")"
    n=$((n + 1))
  done
}

reference_cases
echo "model reference: $n comparisons passed"
