# The model cases both reference comparisons run (sourced by tests/e2e/test_model_reference.sh,
# against llama_ref.py, and tests/reference/test_transformers.sh, against transformers):
# GQA 2:1, kv = heads, kv = 1, tied embeddings, 1-token sequences, sequences longer than
# the attention tile (64), another shape and RoPE theta, RoPE scaling linear and llama3.
# The sourcing script defines
# case_ NAME "make_case.py arguments".
reference_cases() {
  local tiny="--hidden 64 --layers 2 --heads 4 --ffn 176 --vocab 300"
  case_ gqa2  "$tiny --kv-heads 2 --seqlens 5,17,1,33 --seed 1"
  case_ mha   "$tiny --kv-heads 4 --seqlens 1,64,65,130 --seed 2"
  case_ mqa   "$tiny --kv-heads 1 --seqlens 200,3 --seed 3"
  case_ tied  "$tiny --kv-heads 2 --seqlens 7,70,1 --tie --seed 4"
  case_ short "$tiny --kv-heads 2 --seqlens 1,2,1,1,3 --seed 5"
  case_ shape "--hidden 48 --layers 3 --heads 6 --kv-heads 3 --ffn 128 --vocab 257 --seqlens 9,129,2 --theta 500000 --eps 1e-6 --seed 6"
  # Wavelengths of head_dim 16 run from 6 tokens up: an original context of 64 with
  # factors 1 and 4 puts pairs in all three llama3 bands, and sequences of 300 tokens turn
  # every pair by more than its wavelength.
  case_ linear "$tiny --kv-heads 2 --seqlens 300,41,1 --rope-scaling linear,4 --seed 7"
  case_ llama3 "$tiny --kv-heads 2 --seqlens 300,41,1 --theta 50000 --rope-scaling llama3,8,1,4,64 --seed 8"
}

# same_predictions A.h5 B.h5: both results count the same next-token predictions.
same_predictions() {
  /usr/bin/python3 - "$1" "$2" <<'PYEOF'
import sys, h5py
a, b = (int(h5py.File(f, "r")["num_predictions"][()]) for f in sys.argv[1:3])
sys.exit(0 if a == b else 1)
PYEOF
}
