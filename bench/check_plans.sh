#!/usr/bin/env bash
# Plans before and after, step by step: runs two flexsp binaries on the same planner cases
# and compares their JSON (every group, sequence, micro-batch, predicted time and counter),
# wall-clock fields left out. Per case it prints whether the plans are the same, and the
# predicted step (flexsp's, summed over the case's steps) and the planning time (solve_ms,
# summed) of both binaries. A change to the search may make plans differ but never slower:
# the exit status is 1 when a case's summed flexsp step is slower than the reference's, or
# any run fails (the layout search and simulate, which have no steps, are only said to
# differ). --exact: a change that only moves code, every case must be the same.
# Usage: bench/check_plans.sh [--exact] REFERENCE_FLEXSP CANDIDATE_FLEXSP [LENGTHS]
#
# The planner is deterministic except where its time limit stops a MILP or a pass
# (lib/planner/planner.h), so every case plans either greedily (--time-limit-ms 0) or under
# a limit no step reaches (600 s; the MILPs stop at their node limits; a binary that caps the
# limit at a share of the step, --time-step-share, is given 0 there). Cases: the
# Wikipedia lengths (LENGTHS) and two heavy tails (bench_planner.sh's long tail, lognormal
# mu 8 sigma 1.6, and Pareto alpha 1.1 scale 1500), at 64 and 1024 GPUs (1024: the sampled
# wide passes), memory-bound at 40 GB, a 1F1B and a Seq1F1B pipeline, cp_mode auto with
# rings open to any sequence and only where needed, tp 2 with grouped kv heads; static and
# batch_adaptive are in every step (their times and sizes); the exact slot MILP and the
# strong bound where CBC closes them; and the greedy layout search and simulate (the
# analysis code). Each case runs both binaries at once: under a minute
# on 2 idle cores, two or three on busy ones (planning times are then those of two runs
# sharing the cores).
set -euo pipefail
exact=0
[[ ${1:-} == --exact ]] && exact=1 && shift
ref=${1:?usage: check_plans.sh [--exact] REFERENCE_FLEXSP CANDIDATE_FLEXSP [LENGTHS]}
cand=${2:?usage: check_plans.sh [--exact] REFERENCE_FLEXSP CANDIDATE_FLEXSP [LENGTHS]}
wiki=${3:-$(dirname "$0")/../../shared/data/wikipedia_lengths.txt}
[[ -x $ref && -x $cand ]] || { echo "check_plans: $ref or $cand is not an executable" >&2; exit 2; }
[[ -r $wiki ]] || { echo "check_plans: cannot read the lengths file '$wiki'" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -c 'import random; random.seed(1); print("\n".join(str(min(10**6, max(2, int(random.lognormvariate(8, 1.6))))) for _ in range(200000)))' >"$tmp/longtail.txt"
python3 -c 'import random; random.seed(2); print("\n".join(str(min(10**6, max(2, int(random.paretovariate(1.1) * 1500)))) for _ in range(200000)))' >"$tmp/pareto.txt"
seq 2 3000 | awk '{print ($1 * 7919) % 20000 + 2}' >"$tmp/small.txt"

# --time-step-share 0 for a binary that has it: the limits below then stand as given.
unshared() {
  local help
  help=$("$1" plan --help 2>&1 || true)
  [[ $help == *--time-step-share* ]] && echo "--time-step-share 0" || true
}
read -ra ref_extra <<<"$(unshared "$ref")"
read -ra cand_extra <<<"$(unshared "$cand")"

failed=0
run_case() {  # name verb args...: both binaries, then the comparison
  local name=$1
  shift
  local t0=$SECONDS
  local re=() ce=()
  [[ $1 == plan ]] && re=("${ref_extra[@]}") ce=("${cand_extra[@]}")
  "$ref" "$@" "${re[@]}" --json >"$tmp/$name.ref" 2>"$tmp/$name.ref.err" &
  local pid=$!
  local cand_rc=0 ref_rc=0
  "$cand" "$@" "${ce[@]}" --json >"$tmp/$name.cand" 2>"$tmp/$name.cand.err" || cand_rc=$?
  wait "$pid" || ref_rc=$?
  if ((ref_rc != 0 || cand_rc != 0)); then
    echo "$name: exit $ref_rc (reference) / $cand_rc (candidate)"
    tail -n 2 "$tmp/$name.ref.err" "$tmp/$name.cand.err" || true
    failed=1
    return
  fi
  python3 - "$tmp/$name.ref" "$tmp/$name.cand" "$name" "$((SECONDS - t0))" "$exact" <<'PY' || failed=1
import json, sys
WALL = {"solve_ms", "search_s"}  # wall-clock fields: the only ones allowed to differ
def strip(x):
    if isinstance(x, dict): return {k: strip(v) for k, v in x.items() if k not in WALL}
    if isinstance(x, list): return [strip(v) for v in x]
    return x
added = set()  # keys only the candidate has (a new counter): listed, not a difference
def first_diff(a, b, path="$"):
    if type(a) != type(b): return path, a, b
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a and k in b:
                added.add(k)
                continue
            if k not in a or k not in b: return path + "." + k, a.get(k), b.get(k)
            d = first_diff(a[k], b[k], path + "." + k)
            if d: return d
        return None
    if isinstance(a, list):
        if len(a) != len(b): return path + ".len", len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_diff(x, y, "%s[%d]" % (path, i))
            if d: return d
        return None
    return None if a == b else (path, a, b)
ref, cand = (json.load(open(f)) for f in sys.argv[1:3])
name, secs, exact = sys.argv[3], sys.argv[4], sys.argv[5] == "1"
steps = ref.get("steps") if isinstance(ref, dict) else None
csteps = cand.get("steps") if isinstance(cand, dict) else None
what = "%d steps" % len(steps) if isinstance(steps, list) else "%s" % type(ref).__name__
d = first_diff(strip(ref), strip(cand))
times, slower = "", False
if isinstance(steps, list) and isinstance(csteps, list) and len(steps) == len(csteps):
    fr, fc = (sum(s["flexsp_ms"] for s in x) for x in (steps, csteps))
    sr, sc = (sum(s["solve_ms"] for s in x) for x in (steps, csteps))
    slower = fc > fr * (1 + 1e-9)
    times = "; flexsp %.1f -> %.1f ms (%+.2f%%), planning %.0f -> %.0f ms" % (fr, fc, 100 * (fc / fr - 1), sr, sc)
if added: times += "; keys the candidate adds: " + ", ".join(sorted(added))
if d is None:
    print("%-26s same (%s%s; %s s)" % (name, what, times, secs))
else:
    verdict = "SLOWER" if slower else "differs"
    print("%-26s %s (%s%s; %s s), first at %s: reference %s, candidate %s" % (
        name, verdict, what, times, secs, d[0], str(d[1])[:80], str(d[2])[:80]))
    if exact or slower: sys.exit(1)
PY
}

shape64=(--gpus 64 --gpus-per-node 8 --max-seq-len 196608)
shape1024=(--gpus 1024 --gpus-per-node 8 --max-seq-len 196608)
greedy=(--time-limit-ms 0)
unbounded=(--time-limit-ms 600000)  # no step comes near it: every MILP ends at its node limit
lt=$tmp/longtail.txt
pa=$tmp/pareto.txt

run_case wiki-64-greedy plan --lengths "$wiki" "${shape64[@]}" --global-batch-seqs 512 --steps 3 "${greedy[@]}"
run_case wiki-64-milp plan --lengths "$wiki" "${shape64[@]}" --global-batch-seqs 512 --steps 2 --seed 7 \
  "${unbounded[@]}"
run_case wiki-1024-greedy plan --lengths "$wiki" "${shape1024[@]}" --global-batch-seqs 8192 --steps 1 "${greedy[@]}"
run_case wiki-1024-milp plan --lengths "$wiki" "${shape1024[@]}" --global-batch-seqs 8192 --steps 1 --seed 3 \
  "${unbounded[@]}"
run_case longtail-64-greedy plan --lengths "$lt" "${shape64[@]}" --global-batch-seqs 512 --steps 1 "${greedy[@]}"
run_case longtail-64-milp plan --lengths "$lt" "${shape64[@]}" --global-batch-seqs 512 --steps 1 --seed 7 \
  "${unbounded[@]}"
run_case pareto-64-milp plan --lengths "$pa" "${shape64[@]}" --global-batch-seqs 512 --steps 1 "${unbounded[@]}"
run_case longtail-64-40gb plan --lengths "$lt" "${shape64[@]}" --global-batch-seqs 256 --mem-per-gpu-gb 40 \
  --steps 1 --seed 3 "${greedy[@]}"
run_case longtail-1024-greedy plan --lengths "$lt" "${shape1024[@]}" --global-batch-seqs 2048 --steps 1 "${greedy[@]}"
run_case longtail-1024-milp plan --lengths "$lt" "${shape1024[@]}" --global-batch-seqs 2048 --steps 1 --seed 3 \
  "${unbounded[@]}"
run_case pareto-1024-greedy plan --lengths "$pa" "${shape1024[@]}" --global-batch-seqs 4096 --steps 1 --seed 5 \
  "${greedy[@]}"
run_case wiki-64-pp4-1f1b plan --lengths "$wiki" "${shape64[@]}" --global-batch-seqs 512 --pp 4 --steps 2 \
  "${greedy[@]}"
run_case longtail-64-pp2-seq1f1b plan --lengths "$lt" "${shape64[@]}" --global-batch-seqs 128 --pp 2 \
  --pp-schedule seq1f1b --seq-chunks 2 --steps 1 "${greedy[@]}"
run_case longtail-64-cp-auto plan --lengths "$lt" "${shape64[@]}" --global-batch-seqs 256 --cp-mode auto \
  --steps 1 "${greedy[@]}"
run_case longtail-64-ring-needed plan --lengths "$lt" "${shape64[@]}" --global-batch-seqs 256 --cp-mode ring \
  --ring-groups needed --steps 1 --seed 9 "${greedy[@]}"
run_case pareto-64-tp2-kv8 plan --lengths "$pa" "${shape64[@]}" --global-batch-seqs 256 --tp 2 --kv-heads 8 \
  --steps 1 "${unbounded[@]}"
run_case exact-milp-8 plan --lengths "$tmp/small.txt" --gpus 8 --max-seq-len 32768 --global-batch-seqs 16 \
  --steps 3 --exact-milp "${unbounded[@]}"  # small enough for CBC to close every slot MILP
strong=(--lengths "$tmp/small.txt" --gpus 8 --max-seq-len 32768 --global-batch-seqs 16 --mem-per-gpu-gb 40 --steps 2
        --strong-bound-ms 600000 "${greedy[@]}")  # CBC proves each run's bound in about a second
run_case strong-bound-8 plan "${strong[@]}"
run_case strong-bound-8-extra plan "${strong[@]}" --strong-bound-extra 1
run_case search-tiny plan --lengths "$tmp/small.txt" --model tiny --gpus 2 --gpus-per-node 2 --max-seq-len 512 \
  --steps 2 --global-batch-seqs 8 --search
run_case search-7b-16 plan --lengths "$tmp/small.txt" --gpus 16 --max-seq-len 65536 --steps 1 --search \
  --search-tp 1,2 --search-zero 1,3
run_case simulate-greedy simulate --lengths "$tmp/small.txt" --max-seq-len 16384 --steps 2 "${greedy[@]}" \
  --nodes 1,2,4 --pp 2 --pp-schedule seq1f1b --seq-chunks 2 --cp-mode auto
run_case simulate-search simulate --lengths "$tmp/small.txt" --model tiny --gpus-per-node 2 --max-seq-len 512 \
  --steps 1 --nodes 1,2 --search --search-micro-batch-tokens 0 --search-pp 1,2
if ((failed)); then
  ((exact)) && echo "check_plans: plans differ" || echo "check_plans: a case is slower, or failed"
  exit 1
fi
((exact)) && echo "check_plans: every case the same" || echo "check_plans: no case slower"
