# jobscripts/train.sbatch across the nodes of a real multi-node Slurm cluster that this test
# starts and stops itself (tests/cluster/cluster.sh: 4 nodes, each a network namespace with
# its own host name and address, joined by a bridge; docs/cluster.md):
#  - `sbatch -N 2` and `sbatch -N 4` (srun --mpi=pmix), and `-N 4` with FLEXSP_LAUNCHER=mpirun:
#    the job puts 2 ranks on every node of its allocation; flexsp's printed grid shows the
#    allocation's host names, node by node, with node groups from the host names (not
#    emulated with --ranks-per-node); every node of the job sent its share of the MPI traffic
#    over its link (the bridge, TCP: ranks on different nodes share no memory segment);
#  - each run trains like one process: per-step losses and gradient norms and the final
#    weights agree with `flexsp train` on one rank to 1e-5 (tests/e2e/lib.sh trains_like).
# Skipped (exit 77) where the cluster cannot be built (not root, no slurm-wlm, no network
# namespaces). The checks run under `timeout` (FLEXSP_CLUSTER_TEST_BOUND, default 480 s).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../e2e/lib.sh"
source "$here/jobs_lib.sh"
slurm_test_frame "$here/cluster.sh" "${FLEXSP_CLUSTER_TEST_BOUND:-480}" --nodes 4 -- "$@"

# ---- the checks (in $work; the cluster is up) ----------------------------------------------
cluster_job_env
pack_varied_corpus "$work/data.h5"
steps=6
common=(--data.path="$work/data.h5" --model.preset=tiny --model.heads=8 --model.kv_heads=2
        --data.max_seq_len=512 --train.global_batch_tokens=3000 --train.steps=$steps
        --optim.lr=1e-3 --optim.warmup_steps=2 --train.backend=cpu)
t0=$SECONDS
train_run single 1 $steps "${common[@]}"

# node_tx NODE: bytes NODE has sent on its link so far.
node_tx() { bash "$here/cluster.sh" links "$cluster" | awk -v n="$1" '$1 == n { print $2 }'; }

# across NAME NODES LAUNCHER: train.sbatch on NODES nodes x 2 ranks; checks as above.
across() {
  local name=$1 nodes=$2 launcher=$3 t1=$SECONDS jid node hosts=() tx0=() i
  for ((i = 1; i <= 4; ++i)); do tx0[i]=$(node_tx "node$i"); done
  jid=$(FLEXSP_LAUNCHER=$launcher sbatch --parsable --job-name="$name" --nodes="$nodes" --ntasks-per-node=2 \
          --gpus-per-node=2 "$FLEXSP_SOURCE_DIR/jobscripts/train.sbatch" "${common[@]}" \
          --dump-weights="$work/$name.h5")
  ended "$jid" COMPLETED 180
  local log=$work/runs/$name/logs/$jid.log
  mapfile -t hosts < <(scontrol show hostnames "$(job_field "$jid" NodeList)")
  ((${#hosts[@]} == nodes)) || fail "$name: allocated ${hosts[*]}, expected $nodes nodes"
  has_line "^process grid: $((2 * nodes)) ranks = $nodes node\(s\) x 2 ranks per node; " "$log" ||
    { cat "$log"; fail "$name: no grid of $nodes nodes x 2 ranks"; }
  ! has_line 'emulated' "$log" || fail "$name: nodes emulated with --ranks-per-node"
  # "  rank   R  node  N  local  L  ... host H ...": rank R on node R/2, the allocation's (R/2)th host.
  local rows
  rows=$(sed -nE 's/^  rank +([0-9]+) +node +([0-9]+) +local +([0-9]+) .* host ([^ ]+) .*/\1 \2 \3 \4/p' "$log")
  [[ $(wc -l <<<"$rows") -eq $((2 * nodes)) ]] || fail "$name: grid rows: $rows"
  while read -r r n l h; do
    [[ $n == $((r / 2)) && $l == $((r % 2)) && $h == "${hosts[r / 2]}" ]] ||
      fail "$name: rank $r is on node $n (local $l) host $h; expected node $((r / 2)), ${hosts[r / 2]}"
  done <<<"$rows"
  # Each node of the job sent at least 1 MB over its link (the gradient all-reduce alone is
  # 0.5 MB per step per rank); the others next to nothing.
  for ((i = 1; i <= 4; ++i)); do
    local sent=$(($(node_tx "node$i") - tx0[i]))
    if [[ " ${hosts[*]} " == *" node$i "* ]]; then
      ((sent > 1000000)) || fail "$name: node$i sent only $sent bytes over its link"
    else
      ((sent < 200000)) || fail "$name: node$i, not in the job, sent $sent bytes"
    fi
  done
  progress "$log" >"$work/$name.steps"
  [[ $(wc -l <"$work/$name.steps") -eq $steps ]] || { cat "$log"; fail "$name: expected $steps steps"; }
  trains_like single "$name" 1e-5 1e-5
  echo "ok: $name: $nodes nodes (${hosts[*]}) x 2 ranks, $launcher, trains like one process ($((SECONDS - t1)) s)"
}

across n2 2 srun
across n4 4 srun
across n4_mpirun 4 mpirun
echo "cluster jobs: all checks passed in $((SECONDS - t0)) s"
