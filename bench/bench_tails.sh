#!/usr/bin/env bash
# The planner on tails it was not tuned on: per case, flexsp's plan over the box bound per
# step (lib/planner/analysis/box_bound.h), their median and worst, the micro-batch counts
# of the plan and of the bound's least count, the solve time (and its share of the
# predicted step it plans: planning runs during the previous step), and both in ms.
# Which side the gap is on, per step: plan / box bound = (plan / P) x (P / box bound), P the
# better of the plan and a plan of the same step without a time limit (--time-limit-ms
# 600000 --time-step-share 0): the first factor is the plan's for certain (a planner given
# the time finds it), the second is the plan's or the bound's, unless the bound closed
# (then it is 1: no plan beats P).
#
# The family is generated, seeded, never tuned on: lognormal (mu 8, sigma 1.2 / 1.6 / 2.0),
# Pareto (scale 1500, alpha 1.1 / 1.5 / 2.0), mixtures of many short documents (lognormal mu
# 6.5, sigma 1) with a few near max_seq_len (0.85-1.0 of it; 0.5% and 2% of documents), all
# 200000 documents clipped to [2, 1M]; and the shared Wikipedia lengths. Each is planned at
# 64, 256 and 1024 GPUs (8 sequences per GPU a step), 80 and 40 GB, cp_mode ulysses and auto:
# GPT-7B figures, 8 GPUs per node, max_seq_len 192K, the trainer's time limit (1000 ms).
# A case is named DIST/GPUS/GB/CP (e.g. pareto-1.5/64/80/ulysses). New distributions go at
# the end of `dists` with their own seed, so the old cases stay as they were.
#
# Usage: bench/bench_tails.sh BUILD_DIR [--cases REGEX] [--steps N] [--box-ms MS]
#          [--time-limit-ms MS] [--lengths WIKIPEDIA_LENGTHS] [--no-side] [--list]
#   --cases   an extended regex over the case names (default: all 9 x 3 x 2 x 2 = 108)
#   --steps   steps per case (default 3); --box-ms the box bound's limit per step (60000)
#   --no-side leave out the plan without a time limit (the gap's side column reads "-")
#   --list    print the case names and exit
# The full family at 60 s of box bound per step takes about 108 x 3 minutes of one core.
set -euo pipefail
build=${1:?usage: bench_tails.sh BUILD_DIR [--cases REGEX] [--steps N] [--box-ms MS] [--time-limit-ms MS] [--lengths FILE] [--list]}
shift
cases='.*' steps=3 box_ms=60000 limit_ms=1000 list=0 side=1
wiki=$(dirname "$0")/../../shared/data/wikipedia_lengths.txt
while (($#)); do
  case $1 in
    --cases) cases=${2:?--cases needs a regex}; shift 2 ;;
    --steps) steps=${2:?--steps needs a count}; shift 2 ;;
    --box-ms) box_ms=${2:?--box-ms needs milliseconds}; shift 2 ;;
    --time-limit-ms) limit_ms=${2:?--time-limit-ms needs milliseconds}; shift 2 ;;
    --lengths) wiki=${2:?--lengths needs a file}; shift 2 ;;
    --list) list=1; shift ;;
    --no-side) side=0; shift ;;
    *) echo "bench_tails: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "bench_tails: --steps must be a positive integer, got '$steps'" >&2; exit 2; }
[[ $box_ms =~ ^[1-9][0-9]*$ ]] || { echo "bench_tails: --box-ms must be a positive integer, got '$box_ms'" >&2; exit 2; }
[[ $limit_ms =~ ^[0-9]+$ ]] || { echo "bench_tails: --time-limit-ms must be an integer >= 0, got '$limit_ms'" >&2; exit 2; }

# name | python expression of one document's length, given r (random.Random(seed)) | seed
dists=(
  "lognormal-1.2|r.lognormvariate(8, 1.2)|11"
  "lognormal-1.6|r.lognormvariate(8, 1.6)|12"
  "lognormal-2.0|r.lognormvariate(8, 2.0)|13"
  "pareto-1.1|r.paretovariate(1.1) * 1500|21"
  "pareto-1.5|r.paretovariate(1.5) * 1500|22"
  "pareto-2.0|r.paretovariate(2.0) * 1500|23"
  "mix-0.5pct|(r.uniform(0.85, 1.0) * 196608 if r.random() < 0.005 else r.lognormvariate(6.5, 1.0))|31"
  "mix-2pct|(r.uniform(0.85, 1.0) * 196608 if r.random() < 0.02 else r.lognormvariate(6.5, 1.0))|32"
  "wikipedia|file|0"
)
names=()
for d in "${dists[@]}"; do
  for gpus in 64 256 1024; do
    for gb in 80 40; do
      for cp in ulysses auto; do
        n="${d%%|*}/$gpus/$gb/$cp"
        [[ $n =~ ^($cases)$ ]] && names+=("$n")
      done
    done
  done
done
if ((list)); then printf '%s\n' "${names[@]}"; exit 0; fi
((${#names[@]})) || { echo "bench_tails: no case matches '$cases' (--list shows them)" >&2; exit 2; }
[[ -x $build/flexsp ]] || { echo "bench_tails: no flexsp binary in '$build'" >&2; exit 2; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
lengths_of() {  # dist name -> a lengths file
  local name=$1 d
  for d in "${dists[@]}"; do
    IFS='|' read -r dn expr seed <<<"$d"
    [[ $dn == "$name" ]] || continue
    if [[ $expr == file ]]; then
      [[ -r $wiki ]] || { echo "bench_tails: cannot read the lengths file '$wiki'" >&2; exit 2; }
      echo "$wiki"
      return
    fi
    [[ -s $tmp/$dn.txt ]] || python3 -c "import random; r = random.Random($seed)
print('\n'.join(str(min(10**6, max(2, int($expr)))) for _ in range(200000)))" >"$tmp/$dn.txt"
    echo "$tmp/$dn.txt"
    return
  done
}

echo "| case | plan / box bound per step | median | worst | micro-batches: plan / bound's least count | bound closed | solve ms (median / max) | solve / predicted step (median / max) | plan ms / box bound ms per step | gap's side per step: plan / P x P / bound, open or closed |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for n in "${names[@]}"; do
  IFS=/ read -r dist gpus gb cp <<<"$n"
  lengths=$(lengths_of "$dist")
  shape=(--lengths "$lengths" --gpus "$gpus" --gpus-per-node 8 --mem-per-gpu-gb "$gb" --max-seq-len 196608
         --global-batch-seqs $((8 * gpus)) --steps "$steps" --cp-mode "$cp")
  "$build/flexsp" plan "${shape[@]}" --time-limit-ms "$limit_ms" --box-bound-ms "$box_ms" --json \
    >"$tmp/out.json" 2>"$tmp/err.txt" || {
    echo "| $n | failed: $(tail -n 1 "$tmp/err.txt") |||||||||"
    continue
  }
  echo '{"steps": []}' >"$tmp/free.json"
  if ((side)); then
    "$build/flexsp" plan "${shape[@]}" --time-limit-ms 600000 --time-step-share 0 --json >"$tmp/free.json" \
      2>"$tmp/err.txt" || echo '{"steps": []}' >"$tmp/free.json"
  fi
  python3 - "$tmp/out.json" "$n" "$tmp/free.json" <<'PY'
import json, statistics, sys
st = json.load(open(sys.argv[1]))["steps"]
free = json.load(open(sys.argv[3]))["steps"]
def side(i, s):
    if i >= len(free): return "-"
    p = min(s["flexsp_ms"], free[i]["flexsp_ms"])
    return "%.3f x %.3f %s" % (s["flexsp_ms"] / p, p / s["box_lower_bound_ms"],
                               "closed" if s["box_lower_bound_closed"] else "open")
r = [s["flexsp_over_box_lower_bound"] for s in st]
least = lambda s: min(s["box_lower_bound_counts"], key=lambda c: c["bound_ms"])["micro_batches"] if s["box_lower_bound_counts"] else s["micro_batches"]
share = [s["solve_ms"] / s["flexsp_ms"] for s in st]
solve = [s["solve_ms"] for s in st]
print("| %s | %s | %.4f | %.4f | %s | %d of %d | %.0f / %.0f | %.1f%% / %.1f%% | %s | %s |" % (
    sys.argv[2], " ".join("%.4f" % x for x in r), statistics.median(r), max(r),
    " ".join("%d/%d" % (s["micro_batches"], least(s)) for s in st),
    sum(s["box_lower_bound_closed"] for s in st), len(st),
    statistics.median(solve), max(solve), 100 * statistics.median(share), 100 * max(share),
    " ".join("%.0f/%.0f" % (s["flexsp_ms"], s["box_lower_bound_ms"]) for s in st),
    "; ".join(side(i, s) for i, s in enumerate(st))))
PY
done
echo
echo "steps $steps per case, box bound ${box_ms} ms per step, planner time limit ${limit_ms} ms (and the default" \
  "planner.time_step_share); P: the plan without a time limit; $(basename "$build")/flexsp"
