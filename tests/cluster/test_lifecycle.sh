# tests/cluster/cluster.sh itself (docs/cluster.md): a 3-node cluster starts with every node
# idle under its own host name and address; `stop` leaves nothing (no process of it, no
# namespace, no veth on the machine); a cluster whose starter is killed before it can stop
# it, with a job running, is gone by itself once its lifetime (20 s here) and the reaper's
# 15 s are over; where namespaces cannot be made (here: run as an unprivileged user) `check`
# prints one SKIP line and exits 77, and `start` fails with that reason.
# Skipped (exit 77) where the cluster cannot be built.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../e2e/lib.sh"
cluster_sh=$here/cluster.sh
out=$(bash "$cluster_sh" check) || { [[ $? == 77 ]] && { echo "$out"; exit 77; }; fail "cluster.sh check"; }
t0=$SECONDS

# gone DIR HOSTLINK INODES...: nothing of that cluster is left.
gone() {
  local dir=$1 link=$2 env_file pid; shift 2
  ! ip link show "$link" >/dev/null 2>&1 || { echo "the machine's veth $link is still there"; return 1; }
  for env_file in /proc/[0-9]*/environ; do
    pid=${env_file#/proc/}; pid=${pid%/environ}
    if tr '\0' '\n' 2>/dev/null <"$env_file" | grep -qxF -e "FLEXSP_SLURM_CLUSTER=$dir" -e "SLURM_CONF=$dir/slurm.conf"; then
      echo "process $pid ($(cat "/proc/$pid/comm" 2>/dev/null)) of $dir still runs"; return 1
    fi
    [[ " $* " != *" $(readlink "/proc/$pid/ns/net" 2>/dev/null) "* ]] || { echo "process $pid still in a node's namespace"; return 1; }
  done
}

# ---- start, look, stop ------------------------------------------------------------------------
dir=$(mktemp -d /tmp/flexsp-cluster.XXXXXX)
trap 'bash "$cluster_sh" stop "$dir" >/dev/null 2>&1 || true; rm -rf "$dir" "$work"' EXIT
bash "$cluster_sh" start "$dir" --nodes 3 --lifetime 120 >"$work/start.txt" || { cat "$work/start.txt"; fail "start"; }
source "$dir/env"
[[ $(sinfo -h -N -o '%N %t' | sort | tr '\n' ' ') == "node1 idle node2 idle node3 idle " ]] ||
  fail "nodes: $(sinfo -h -N -o '%N %t' | tr '\n' ' ')"
net=$(sed -nE 's/.* on (198\.18\.[0-9]+)\.0\/24.*/\1/p' "$work/start.txt")
for k in 1 2 3; do
  [[ $(bash "$cluster_sh" exec "$dir" "node$k" hostname) == "node$k" ]] || fail "node$k: host name"
  bash "$cluster_sh" exec "$dir" "node$k" ip -4 -o addr show dev eth0 | grep -qF " $net.$((10 + k))/24" ||
    fail "node$k: not at $net.$((10 + k))"
done
[[ $(bash "$cluster_sh" exec "$dir" head hostname) == head ]] || fail "head: host name"
[[ $(hostname) != node1 ]] || fail "the machine's host name changed"
link=$(cat "$dir/hostlink")
inodes=$(cat "$dir"/holders/*.net | tr '\n' ' ')
bash "$cluster_sh" stop "$dir" >/dev/null
unset SLURM_CONF  # gone looks for processes with it
why=$(gone "$dir" "$link" $inodes) || fail "after stop: $why"
echo "ok: 3 nodes idle as node1-3 at $net.11-13; stop left nothing ($((SECONDS - t0)) s)"

# ---- a starter killed: the lifetime bound and the reaper clean up ------------------------------
t1=$SECONDS
rm -rf "$dir" && mkdir "$dir"
bash "$cluster_sh" start "$dir" --nodes 2 --lifetime 20 >/dev/null
source "$dir/env"
sbatch --quiet -N 2 -o /dev/null --wrap 'srun sleep 600' && sleep 3
link=$(cat "$dir/hostlink")
inodes=$(cat "$dir"/holders/*.net | tr '\n' ' ')
rm -f "$dir"/*.daemon  # as if the starter had died: `stop` below would find nothing to stop
unset SLURM_CONF
for ((i = 0; i < 60; ++i)); do why=$(gone "$dir" "$link" $inodes) && break; sleep 1; done
[[ -z ${why:-} ]] || fail "60 s after a 20 s lifetime: $why"
echo "ok: a cluster nobody stopped, a job running, was gone $((SECONDS - t1)) s after its start"

# ---- no namespaces: a SKIP line ---------------------------------------------------------------
if command -v setpriv >/dev/null; then
  rc=0
  out=$(setpriv --reuid=65534 --regid=65534 --clear-groups bash "$cluster_sh" check) || rc=$?
  [[ $rc == 77 && $out == "SKIP: no test cluster: "* && $(wc -l <<<"$out") == 1 ]] ||
    fail "check as an unprivileged user: exit $rc, '$out'"
  mkdir -p "$work/c2" && chmod 777 "$work" "$work/c2"
  rc=0
  err=$(setpriv --reuid=65534 --regid=65534 --clear-groups bash "$cluster_sh" start "$work/c2" 2>&1) || rc=$?
  [[ $rc == 1 && $err == "cluster: no test cluster: the cluster's namespaces and daemons need root" ]] ||
    fail "start as an unprivileged user: exit $rc, '$err'"
  echo "ok: unprivileged: '$out' (exit 77); start: '$err'"
fi
echo "cluster lifecycle: all checks passed in $((SECONDS - t0)) s"
