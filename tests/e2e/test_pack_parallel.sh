# flexsp pack under mpirun: every rank tokenizes a share of the inputs and the dataset is
# the one-process pack's byte for byte -- on 2, 3 and 4 ranks, with a byte-level BPE
# tokenizer.json (--bos) and with bytes + gzip, on a corpus of text files (the licenses
# every Debian machine has), a 3 MB JSON lines file (cut into line-aligned ranges across
# the ranks; blank lines, pre-tokenized lines, empty texts), .npy arrays and an empty file.
# A bad line deep in the JSON lines file is named by its line number whichever rank reads
# it, the run fails on every rank, and nothing is left behind.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
mpi() { "$FLEXSP_MPIRUN" -np "$1" --oversubscribe "${@:2}"; }

mkdir -p "$work/tok" "$work/in"
$PY "$FLEXSP_SOURCE_DIR/tests/e2e/make_tokenizer.py" "$work/tok" 200 /usr/share/common-licenses/GPL-3 >/dev/null
cp -rL /usr/share/common-licenses "$work/in/licenses"
: >"$work/in/empty.txt"
$PY - "$work/in" <<'EOF'
import json, random, sys
import numpy as np
d = sys.argv[1]
random.seed(7)
words = open("/usr/share/common-licenses/GPL-3").read().split()
with open(f"{d}/big.jsonl", "w") as f:
    for i in range(16000):
        if i % 101 == 0:
            f.write("\n")
        elif i % 103 == 0:
            f.write(json.dumps({"tokens": [random.randrange(200) for _ in range(random.randrange(1, 40))]}) + "\n")
        elif i % 107 == 0:
            f.write('{"text": ""}\n')
        else:
            f.write(json.dumps({"text": " ".join(random.choices(words, k=random.randrange(1, 60)))}) + "\n")
np.save(f"{d}/a.npy", np.arange(300, dtype=np.uint16) % 200)
np.save(f"{d}/b.npy", np.array([5, 6, 7], dtype=np.int32))
EOF
(($(stat -c %s "$work/in/big.jsonl") > 3000000)) || fail "the JSON lines file is too small to be cut"

# pack_same NAME ARGS...: one process, then 2, 3 and 4 ranks; the files must be equal.
pack_same() {
  local name=$1; shift
  "$FLEXSP" pack "$@" --out "$work/$name.h5" "$work/in" >"$work/$name.out" || { cat "$work/$name.out"; fail "$name"; }
  for np in 2 3 4; do
    mpi $np "$FLEXSP" pack "$@" --out "$work/$name.$np.h5" "$work/in" >"$work/$name.$np.out" ||
      { cat "$work/$name.$np.out"; fail "$name on $np ranks"; }
    cmp -s "$work/$name.h5" "$work/$name.$np.h5" || fail "$name: $np ranks pack another file than one process"
    for k in files documents skipped tokens; do
      [[ $(grep "^  $k:" "$work/$name.$np.out") == $(grep "^  $k:" "$work/$name.out") ]] ||
        fail "$name: $np ranks count other $k"
    done
  done
  echo "ok: $name: 2, 3 and 4 ranks write the one-process file byte for byte" \
    "($(grep "^  documents:" "$work/$name.out" | sed "s/^ *//"), $(grep "^  tokens:" "$work/$name.out" | sed "s/^ *//"))"
}
pack_same hf --hf-tokenizer "$work/tok" --bos
pack_same bytes --compression 4

# Every document is there, in order (the one-process file against the inputs).
"$FLEXSP" inspect "$work/hf.h5" >"$work/inspect.out" || { cat "$work/inspect.out"; fail "inspect"; }
grep -qE '^valid: +yes$' "$work/inspect.out" || fail "inspect: not valid"

# A bad line deep in the JSON lines file: its number, from whichever rank reads it.
sed '15000s/.*/{"text": oops}/' "$work/in/big.jsonl" >"$work/bad.jsonl"
for np in 1 4; do
  expect_error "$work/bad.jsonl:15000: malformed JSON" mpi $np "$FLEXSP" pack --out "$work/bad.h5" "$work/bad.jsonl"
done
[[ ! -e $work/bad.h5 ]] || fail "a failed pack left its output"
[[ -z $(find "$work" -name '*.tmp.*') ]] || fail "a failed pack left parts or temporary files: $(find "$work" -name '*.tmp.*')"
echo "PASS"
