#!/usr/bin/env bash
# A throw-away Slurm cluster of several nodes on one machine: each node a Linux network
# namespace with its own host name (UTS namespace) and address, all joined by a bridge.
#
#   cluster.sh check                     exit 0 when this machine can build one; else a SKIP line, exit 77
#   cluster.sh start DIR [--nodes N] [--cpus C] [--gpus G] [--lifetime S] [--slurmd-timeout S]
#   cluster.sh stop DIR                  cancels every job, ends every process, removes the network
#   cluster.sh exec DIR NODE CMD...      runs CMD on NODE (node1..nodeN, or head) as its processes run
#   cluster.sh shape DIR RATE [DELAY]    shapes every node's link: RATE (tc: 200mbit) [, DELAY (2ms): netem]
#   cluster.sh shape DIR off             removes the shaping
#   cluster.sh kill DIR NODE             NODE dies: its link is cut, then every process on it is killed
#   cluster.sh links DIR                 bytes each node sent and received on its link, "NODE TX RX" lines
#
# Layout (docs/cluster.md): a "fabric" namespace holds the bridge br0; the head node (host
# name head, 198.18.X.1) runs slurmctld; node K (host name nodeK, 198.18.X.(10+K)) runs
# `slurmd -N nodeK`; each has a veth pair to br0. The machine itself gets one veth into the
# fabric, fxcX with 198.18.X.254/24, so that sbatch, squeue and scancel run here as on a
# login node. X is the first /24 of 198.18.0.0/15 (reserved for network tests, RFC 2544)
# that no interface of this machine uses; nothing else of the machine's network is read or
# changed. munged runs on the machine; the nodes reach it through its socket under DIR
# (network namespaces do not separate the file system), and so they share DIR, the
# checkout and the tests' files as nodes share a network file system. Per-node state
# (spool, TmpFS, where Slurm's PMIx server keeps its sockets) is DIR/nodes/nodeK.
# Defaults: 2 nodes, 4 CPUs and 2 GPUs per node (GPUs are a count only, Gres=gpu without
# devices, so that train.sbatch's --gpus-per-node runs; the ranks compute on CPUs),
# lifetime 900 s, SlurmdTimeout 10 s (a dead node is noticed in 10-20 s).
#
# Bounded lifetimes: the namespaces are unnamed, each held by a process (`sleep`) under
# `timeout LIFETIME`, and the daemons run under the same bound (slurm_common.sh); a reaper
# kills whatever still runs in the namespaces (job processes) 15 s after it. A namespace
# ends with its last process, and its veths with it, so a test killed before `stop` leaves
# nothing once the lifetime is over. `stop` does it at once.
set -euo pipefail
sc_name=cluster
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/cluster/slurm_common.sh
source "$here/slurm_common.sh"

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# ---- namespaces ---------------------------------------------------------------------------
# holder NAME [HOSTNAME]: a process in new network (and, with HOSTNAME, UTS) namespaces
# that sleeps for the lifetime; its pid in DIR/holders/NAME, its network namespace's
# inode in DIR/holders/NAME.net.
holder() {
  local name=$1 host=${2:-} flags=(--net) pidfile=$sc_dir/holders/$1
  [[ -z $host ]] || flags+=(--uts)
  FLEXSP_SLURM_CLUSTER=$sc_dir setsid timeout -k 5 "$sc_lifetime" unshare "${flags[@]}" \
    sh -c '[ -z "$2" ] || hostname "$2"; echo $$ >"$1.tmp"; mv "$1.tmp" "$1"; exec sleep infinity' \
    sh "$pidfile" "$host" </dev/null >/dev/null 2>&1 &
  echo $! >"$sc_dir/holder-$name.daemon"
  sc_wait_until 10 "namespace $name" test -s "$pidfile"
  readlink "/proc/$(cat "$pidfile")/ns/net" >"$pidfile.net"
}

holder_pid() {
  [[ -s $sc_dir/holders/$1 ]] || sc_die "no node '$1' in $sc_dir (nodes: $(cat "$sc_dir/node_names" 2>/dev/null))"
  cat "$sc_dir/holders/$1"
}

# on NAME CMD...: CMD in NAME's network (and UTS) namespaces.
on() {
  local pid flags=(-n)
  pid=$(holder_pid "$1"); shift
  [[ $(readlink "/proc/$pid/ns/uts") == "$(readlink /proc/self/ns/uts)" ]] || flags+=(-u)
  nsenter -t "$pid" "${flags[@]}" -- "$@"
}

# ns_pids INODE...: the processes whose network namespace is one of INODE ("net:[N]").
ns_pids() {
  local want=" $* " link pid
  for link in /proc/[0-9]*/ns/net; do
    pid=${link#/proc/}; pid=${pid%/ns/net}
    [[ $want == *" $(readlink "$link" 2>/dev/null) "* ]] && echo "$pid"
  done
  return 0
}

cluster_inodes() { cat "$sc_dir"/holders/*.net 2>/dev/null | tr '\n' ' '; }
sc_extra_leftovers() { local n; n=$(cluster_inodes); [[ -z $n ]] || ns_pids $n; }

# link NAME ADDR: a veth pair from NAME's namespace (eth0, ADDR/24) to the bridge (port NAME).
link() {
  local fabric pid
  fabric=$(holder_pid fabric)
  pid=$(holder_pid "$1")
  on fabric ip link add "$1" type veth peer name eth0 netns "$pid"
  on fabric ip link set "$1" master br0 up
  on "$1" ip link set lo up
  on "$1" ip addr add "$2/24" dev eth0
  on "$1" ip link set eth0 up
}

# pick_subnet: the first 198.18.X.0/24 no interface of this machine uses (X printed).
pick_subnet() {
  local used x
  used=$(ip -4 -o addr show 2>/dev/null | grep -oE ' 198\.1[89]\.[0-9]+\.' || true)
  for ((x = 0; x < 256; ++x)); do
    [[ $used == *" 198.18.$x."* ]] || { echo "$x"; return 0; }
  done
  sc_die "every 198.18.X.0/24 is in use"
}

# ---- verbs --------------------------------------------------------------------------------
check() {
  local why=""
  if [[ $(id -u) -ne 0 ]]; then
    why="the cluster's namespaces and daemons need root"
  else
    local tool
    for tool in ip unshare nsenter setsid timeout flock munged mungekey slurmctld slurmd sbatch; do
      command -v "$tool" >/dev/null || { why="$tool not found: install slurm-wlm, munge and iproute2 (scripts/setup.sh --tests)"; break; }
    done
  fi
  if [[ -z $why ]] && ! unshare --net --uts sh -c \
      'hostname n && ip link add vcheck0 type veth peer name vcheck1 && ip link add brcheck type bridge && ip link set vcheck0 master brcheck' \
      >/dev/null 2>&1; then
    why="this machine cannot make network namespaces with veth pairs and a bridge (a container without CAP_SYS_ADMIN / CAP_NET_ADMIN?)"
  fi
  if [[ -n $why ]]; then
    echo "SKIP: no test cluster: $why"
    exit 77
  fi
  echo "cluster: this machine can build a test cluster"
}

start() {
  local nodes=2 cpus=4 gpus=2 slurmd_timeout=10
  sc_lifetime=900
  while (($#)); do
    (($# >= 2)) || sc_die "$1 needs a value"
    case $1 in
      --nodes) nodes=$2 ;; --cpus) cpus=$2 ;; --gpus) gpus=$2 ;;
      --lifetime) sc_lifetime=$2 ;; --slurmd-timeout) slurmd_timeout=$2 ;;
      *) usage ;;
    esac
    [[ $2 =~ ^[0-9]+$ ]] || sc_die "$1 takes a number, got '$2'"
    shift 2
  done
  ((nodes >= 1 && nodes <= 64 && cpus >= 1)) || sc_die "--nodes must be 1-64 and --cpus at least 1"
  local why
  why=$(check) || sc_die "${why#SKIP: }"
  sc_prepare
  mkdir -p "$sc_dir/holders"
  echo "$sc_lifetime" >"$sc_dir/lifetime"

  holder fabric
  on fabric ip link add br0 type bridge
  on fabric ip link set br0 up
  on fabric ip link set lo up
  holder head head
  local k names=()
  for ((k = 1; k <= nodes; ++k)); do
    holder "node$k" "node$k"
    names+=("node$k")
  done
  echo "${names[*]}" >"$sc_dir/node_names"
  # The reaper: whatever still runs in the namespaces 15 s after the lifetime.
  setsid timeout -k 5 $((sc_lifetime + 30)) \
    bash "$here/cluster.sh" _reap $((sc_lifetime + 15)) $(cluster_inodes) </dev/null >/dev/null 2>&1 &
  echo $! >"$sc_dir/reaper.daemon"

  # The subnet and the machine's veth into the fabric, chosen and made under a lock so
  # that two clusters starting at once take different subnets.
  local x
  exec 9>/tmp/flexsp-cluster.lock
  flock 9
  x=$(pick_subnet)
  local net=198.18.$x
  ip link add "fxc$x" type veth peer name uplink netns "$(holder_pid fabric)"
  ip addr add "$net.254/24" dev "fxc$x"
  ip link set "fxc$x" up
  exec 9>&-
  echo "fxc$x" >"$sc_dir/hostlink"
  on fabric ip link set uplink master br0 up
  link head "$net.1"
  for ((k = 1; k <= nodes; ++k)); do
    link "node$k" "$net.$((10 + k))"
    mkdir -p "$sc_dir/nodes/node$k/spool" "$sc_dir/nodes/node$k/tmp"
  done

  {
    echo "# Generated by tests/cluster/cluster.sh: a $nodes-node test cluster under $sc_dir."
    sc_slurm_conf_common
    cat <<CONF
SlurmctldHost=head($net.1)
SlurmctldPort=6817
SlurmdPort=6818
SlurmdSpoolDir=$sc_dir/nodes/%n/spool
SlurmdPidFile=$sc_dir/nodes/%n/slurmd.pid
SlurmdLogFile=$sc_dir/log/slurmd-%n.log
TmpFS=$sc_dir/nodes/%n/tmp
SlurmdTimeout=$slurmd_timeout
GresTypes=gpu
CONF
    local gres=""
    ((gpus == 0)) || gres="Gres=gpu:$gpus"
    for ((k = 1; k <= nodes; ++k)); do
      echo "NodeName=node$k NodeAddr=$net.$((10 + k)) CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 $gres State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$sc_dir/slurm.conf"
  # Slurm wants a device file per GPU: character devices with /dev/null's numbers stand
  # for them (nothing opens them).
  mkdir -p "$sc_dir/gpus"
  for ((k = 0; k < gpus; ++k)); do mknod "$sc_dir/gpus/gpu$k" c 1 3; done
  ((gpus == 0)) || echo "NodeName=node[1-$nodes] Name=gpu File=$sc_dir/gpus/gpu[0-$((gpus - 1))]" >"$sc_dir/gres.conf"
  echo "export SLURM_CONF=$sc_dir/slurm.conf" >"$sc_dir/env"
  export SLURM_CONF=$sc_dir/slurm.conf

  sc_start_munged
  sc_daemon slurmctld nsenter -t "$(holder_pid head)" -n -u -- slurmctld -D -i -f "$sc_dir/slurm.conf"
  sc_wait_until 30 "slurmctld" scontrol ping
  for ((k = 1; k <= nodes; ++k)); do
    sc_daemon "slurmd-node$k" nsenter -t "$(holder_pid "node$k")" -n -u -- slurmd -D -N "node$k" -f "$sc_dir/slurm.conf"
  done
  sc_wait_until 60 "$nodes nodes to be idle" all_idle "$nodes"
  echo "cluster: up in $sc_dir: $nodes nodes (${names[*]}) on $net.0/24, slurmctld on head ($net.1); source $sc_dir/env"
}

all_idle() { [[ $(sinfo -h -N -o %t 2>/dev/null | grep -c '^idle$') -eq $1 ]]; }

stop() {
  [[ -d $sc_dir ]] || return 0
  sc_dir=$(cd "$sc_dir" && pwd)
  export SLURM_CONF=$sc_dir/slurm.conf
  [[ -f $sc_dir/lifetime ]] || return 0  # never started
  if [[ -f $sc_dir/reaper.daemon ]]; then kill -TERM "$(cat "$sc_dir/reaper.daemon")" 2>/dev/null || true; fi
  sc_cancel_jobs
  local names=() f
  for f in "$sc_dir"/*.daemon; do
    [[ -f $f ]] || continue
    f=${f##*/}; f=${f%.daemon}
    [[ $f == reaper ]] || names+=("$f")
  done
  sc_stop_daemons "${names[@]}"
  # The namespaces are gone with their processes, the veths with them; the machine's end
  # of its veth too, unless the kernel frees the fabric later than this.
  if [[ -f $sc_dir/hostlink ]] && ip link show "$(cat "$sc_dir/hostlink")" >/dev/null 2>&1; then
    ip link del "$(cat "$sc_dir/hostlink")" 2>/dev/null || true
  fi
  rm -f "$sc_dir"/*.daemon "$sc_dir"/holders/*
  echo "cluster: stopped ($sc_dir)"
}

# shape RATE [DELAY] | off: tc on each node's eth0 (what the node sends; traffic inside a
# node never crosses it). Rate: tbf; with a delay: netem (rate and delay together).
shape() {
  local rate=${1:?shape needs RATE or off} delay=${2:-} node
  for node in $(cat "$sc_dir/node_names"); do
    [[ -f $sc_dir/nodes/$node/dead ]] && continue
    on "$node" tc qdisc del dev eth0 root 2>/dev/null || true
    [[ $rate == off ]] && continue
    if [[ -n $delay ]]; then
      on "$node" tc qdisc add dev eth0 root netem delay "$delay" rate "$rate" ||
        sc_die "tc netem failed: shaping a delay needs netem in the kernel (CONFIG_NET_SCH_NETEM)"
    else
      on "$node" tc qdisc add dev eth0 root tbf rate "$rate" burst 64kb latency 200ms ||
        sc_die "tc tbf failed on $node (rate '$rate')"
    fi
  done
  [[ $rate == off ]] && echo "cluster: links unshaped" || echo "cluster: every node sends at most $rate${delay:+, $delay later}"
}

# kill NODE: cut NODE's link first (its peers then hear nothing more, as when a machine
# loses power: no connection is closed), then SIGKILL every process in its namespaces
# (slurmd, slurmstepd, the ranks) until none is left.
kill_node() {
  local node=$1 inode i left
  holder_pid "$node" >/dev/null
  [[ $node != head ]] || sc_die "kill: the head node runs slurmctld; kill a compute node"
  inode=$(cat "$sc_dir/holders/$node.net")
  on fabric ip link set "$node" down
  for ((i = 0; i < 50; ++i)); do
    mapfile -t left < <(ns_pids "$inode")
    ((${#left[@]})) || break
    kill -KILL "${left[@]}" 2>/dev/null || true
    sleep 0.1
  done
  ((${#left[@]} == 0)) || sc_die "kill: processes ${left[*]} on $node would not die"
  touch "$sc_dir/nodes/$node/dead"
  echo "cluster: $node is dead (link cut at $(date +%T.%N | cut -c1-12), every process on it killed)"
}

links() {
  local node
  for node in $(cat "$sc_dir/node_names"); do
    [[ -f $sc_dir/nodes/$node/dead ]] && continue
    # /proc/net/dev is the reading process's namespace's (/sys/class/net would be the machine's).
    on "$node" awk -v n="$node" '$1 == "eth0:" { print n, $10, $2 }' /proc/net/dev
  done
}

# _reap SECONDS INODE...: sleeps, then kills every process in those namespaces.
reap() {
  local secs=$1; shift
  sleep "$secs"
  local left
  mapfile -t left < <(ns_pids "$@")
  ((${#left[@]} == 0)) || kill -KILL "${left[@]}" 2>/dev/null || true
}

(($# >= 1)) || usage
verb=$1; shift
case $verb in
  check) check; exit 0 ;;
  _reap) reap "$@"; exit 0 ;;
esac
(($# >= 1)) || usage
sc_dir=$1; shift
[[ $verb == start || -f $sc_dir/lifetime || $verb == stop ]] || sc_die "$sc_dir holds no cluster (start one first)"
case $verb in
  start) start "$@" ;;
  stop) stop ;;
  exec) (($# >= 2)) || usage; node=$1; shift; on "$node" "$@" ;;
  shape) (($# >= 1 && $# <= 2)) || usage; shape "$@" ;;
  kill) (($# == 1)) || usage; kill_node "$1" ;;
  links) links ;;
  *) usage ;;
esac
