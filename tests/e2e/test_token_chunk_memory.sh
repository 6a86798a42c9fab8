#!/usr/bin/env bash
# Token chunks against the memory model (docs/token-chunks.md): one step of one 64K-token
# sequence (a small model: hidden 8, one head, 2 layers, activation checkpointing) on one
# CPU rank, without chunks and with train.token_chunk, each with a timing report. For both
# runs the CPU device pool's high-water mark (the report's measured peak) must be at most
# the memory model's prediction (fed by `flexsp profile` of the same shape) + 10%, and the
# chunked run's at least RATIO times below the unchunked one's; both runs see the same
# loss.
#
# Arguments: more train flags for the chunked run (for instance another memory saving,
# to be judged together with the chunks). Environment: FLEXSP_CHUNK_TOKENS (sequence
# length, 65536), FLEXSP_CHUNK (the chunk, 4096), FLEXSP_CHUNK_RATIO (3), FLEXSP_CHUNK_LAYERS
# (2; activation offload needs more layers than its ring of slots to move anything).
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
len=${FLEXSP_CHUNK_TOKENS:-65536} chunk=${FLEXSP_CHUNK:-4096} ratio=${FLEXSP_CHUNK_RATIO:-3}
layers=${FLEXSP_CHUNK_LAYERS:-2}

mkdir "$work/doc"
cat /usr/include/linux/*.h >"$work/headers"
head -c "$len" "$work/headers" >"$work/doc/long.h"  # bytes: len tokens and EOS
[[ $(stat -c %s "$work/doc/long.h") -eq $len ]] || fail "not enough header text for $len tokens"
"$FLEXSP" pack --glob '*.h' --out "$work/long.h5" "$work/doc" >/dev/null
"$FLEXSP" profile --model tiny --hidden 8 --heads 1 --kv-heads 1 --ffn 24 --layers "$layers" \
  --seq-lens 128,256,1024 --repeats 1 --out "$work/cm.ini" >"$work/profile.txt" ||
  { cat "$work/profile.txt"; fail "profile"; }
common=(--data.path="$work/long.h5" --model.preset=tiny --model.hidden=8 --model.heads=1
        --model.kv_heads=1 --model.ffn=24 --model.layers="$layers" --model.checkpoint_activations=true
        --data.max_seq_len="$len" --train.global_batch_tokens=$((len + 1)) --train.steps=1
        --train.backend=cpu --planner.cost_model="$work/cm.ini")
train_run whole 1 1 "${common[@]}" --report.dir="$work/whole"
train_run chunked 1 1 "${common[@]}" --report.dir="$work/chunked" --train.token_chunk="$chunk" "$@"
losses_close whole chunked 1e-5
for r in whole chunked; do "$FLEXSP" report "$work/$r" --json >"$work/$r.json"; done
$PY - "$work/whole.json" "$work/chunked.json" "$ratio" "$chunk" "$*" <<'PYEOF'
import json, sys
def peak(path):
    p = json.load(open(path))["runs"][0]["prediction"]
    return p["peak_mem_measured_gb"], p["peak_mem_predicted_gb"]
(wm, wp), (cm, cp) = peak(sys.argv[1]), peak(sys.argv[2])
ratio = float(sys.argv[3])
print("unchunked: measured %.4f GB, predicted %.4f GB (%+.1f%%)" % (wm, wp, 100 * (wm / wp - 1)))
print("token_chunk %s %s: measured %.4f GB, predicted %.4f GB (%+.1f%%); %.2fx below unchunked"
      % (sys.argv[4], sys.argv[5], cm, cp, 100 * (cm / cp - 1), wm / cm))
assert wm <= 1.10 * wp, "unchunked: the measured peak exceeds the prediction + 10%"
assert cm <= 1.10 * cp, "chunked: the measured peak exceeds the prediction + 10%"
assert wm >= ratio * cm, "chunked: the peak is not %gx below the unchunked one" % ratio
PYEOF
echo "ok: token chunks hold the memory model's prediction"
