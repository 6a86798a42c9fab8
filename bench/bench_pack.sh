#!/usr/bin/env bash
# flexsp pack throughput with a real byte-level BPE: tokens/s on 1, 2 and 4 ranks
# (mpirun), against Hugging Face `tokenizers` in Python on the same text (encode_batch on
# one thread and on all the cores). The corpus is the system's own text as JSON lines
# (one document per copyright file and per translated man page; tens of MB on a Debian
# machine), the tokenizer a Llama-3-style tokenizer.json trained by `tokenizers` on a
# 4 MB sample with VOCAB tokens. Needs the venv tests/reference/test_hf_tokenizer.sh makes
# (BUILD_DIR/tokenizers-venv). Each figure is the best of REPEATS runs. Python's side
# times tokenizing only (the texts already in memory); flexsp's includes reading the JSON
# lines and writing the dataset.
#
#   bench/bench_pack.sh BUILD_DIR [WORK_DIR]
#   env: RANKS="1 2 4" VOCAB=32000 REPEATS=3
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: bench_pack.sh BUILD_DIR [WORK_DIR]}" && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work"
source "$here/../scripts/env.sh"
RANKS=${RANKS:-"1 2 4"} VOCAB=${VOCAB:-32000} REPEATS=${REPEATS:-3}
PY=$build/tokenizers-venv/bin/python
[[ -x $PY ]] || { echo "no $PY: run ctest -R reference_hf_tokenizer first" >&2; exit 1; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc --all) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ ! -f $work/corpus.jsonl ]]; then
  /usr/bin/python3 - "$work" <<'EOF'
import glob, gzip, json, sys
work = sys.argv[1]
paths = sorted(glob.glob("/usr/share/doc/*/copyright")) + sorted(glob.glob("/usr/share/man/??/man*/*.gz"))
with open(f"{work}/corpus.jsonl", "w", encoding="utf-8") as out, open(f"{work}/sample.txt", "w") as sample:
    n = 0
    for p in paths:
        raw = gzip.open(p).read() if p.endswith(".gz") else open(p, "rb").read()
        text = raw.decode("utf-8", errors="replace")
        out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        if n < 4_000_000:
            sample.write(text)
        n += len(text)
EOF
fi
mkdir -p "$work/tok"
[[ -f $work/tok/tokenizer.json ]] ||
  "$PY" "$here/../tests/reference/hf_tokenizer.py" train --family llama3 --vocab "$VOCAB" --out "$work/tok" "$work/sample.txt"
echo "corpus: $(du -m "$work/corpus.jsonl" | cut -f1) MB, $(wc -l <"$work/corpus.jsonl") documents; tokenizer: $VOCAB tokens (Llama 3 style)"

# pack reports each rank's CPU time reading and tokenizing and rank 0's joining the parts
# ("cpu:" line); the busiest rank's reading plus the join is what the ranks take on cores
# of their own, so tokens over it is the throughput there -- the figure that still means
# something on a shared machine, where the wall time depends on the other work.
echo "| packer | ranks / threads | tokens | wall s | M tokens/s (wall) | CPU s (all ranks) | CPU s (critical path) | M tokens/s (own cores) | vs 1 rank |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
one=""
for np in $RANKS; do
  best=""
  for _ in $(seq "$REPEATS"); do
    out=$(mpirun -np "$np" "$build/flexsp" pack --force --hf-tokenizer "$work/tok" --out "$work/out.h5" "$work/corpus.jsonl")
    tokens=$(sed -nE 's/^  tokens: +([0-9]+).*/\1/p' <<<"$out")
    row=$(sed -nE 's/^  time: +([0-9.]+) s.*/\1/p; s/^  cpu: +reading [0-9.]+-([0-9.]+) s per rank \(([0-9.]+) s on [0-9]+\), joining ([0-9.]+) s.*/\1 \2 \3/p' <<<"$out" |
      paste -sd' ' | awk -v t="$tokens" '{ crit = $2 + $4; printf "%.3f %.2f %.2f %.2f %.2f", t / crit / 1e6, $1, t / $1 / 1e6, $3 + $4, crit }')
    if [[ -z $best ]] || awk -v a="${row%% *}" -v b="${best%% *}" 'BEGIN { exit !(a > b) }'; then best=$row; fi
  done
  read -r rate secs wall all crit <<<"$best"
  [[ -n $one ]] || one=$rate
  echo "| flexsp pack | $np | $tokens | $secs | $wall | $all | $crit | $rate | $(awk -v a="$rate" -v b="$one" 'BEGIN { printf "%.2fx", a / b }') |"
done
"$PY" - "$work/corpus.jsonl" "$work/tok/tokenizer.json" "$REPEATS" "$one" <<'EOF'
import json, os, sys, time
import tokenizers
from tokenizers import Tokenizer
texts = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
tok = Tokenizer.from_file(sys.argv[2])
repeats, one = int(sys.argv[3]), float(sys.argv[4])
for batch in (False, True):  # encode, one document at a time; encode_batch: all the cores
    best = None
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        encs = tok.encode_batch(texts, add_special_tokens=False) if batch else \
            [tok.encode(x, add_special_tokens=False) for x in texts]
        n = sum(len(e.ids) + 1 for e in encs)  # + EOS, as pack counts
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        if best is None or wall < best[0]:
            best = (wall, cpu)
    wall, cpu = best
    threads = os.cpu_count() if batch else 1
    busiest = cpu / threads  # threads share the batch evenly
    print(f"| tokenizers {tokenizers.__version__} {'encode_batch' if batch else 'encode'} | {threads} | {n} | "
          f"{wall:.2f} | {n / wall / 1e6:.3f} | {cpu:.2f} | {busiest:.2f} | {n / busiest / 1e6:.3f} | "
          f"{n / busiest / 1e6 / one:.2f}x |")
EOF
