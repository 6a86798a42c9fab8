# shellcheck shell=bash
# What the test clusters share (sourced by tests/e2e/slurm_cluster.sh, the one-node cluster
# on the machine itself, and tests/cluster/cluster.sh, nodes in network namespaces): the
# daemons' lifetime bound, munge, the slurm.conf lines both write, waiting, and stopping.
#
# Design: every daemon runs in the foreground of its own session (setsid) under `timeout
# LIFETIME` so that nothing outlives a test killed before it could stop it; its pid is
# recorded as DIR/NAME.daemon. Daemons and everything they fork (slurmstepd, the jobs)
# carry FLEXSP_SLURM_CLUSTER=DIR in their environment, which is how `sc_leftovers` finds
# them; nothing is ever killed by name. All state lives under DIR: no file under /etc or
# /run is read or written, so a cluster runs beside a system Slurm or munge.
# The caller sets sc_dir (absolute) and, before sc_daemon, sc_lifetime (seconds).

export PATH=$PATH:/usr/sbin:/sbin
sc_name=${sc_name:-cluster}

sc_die() { echo "$sc_name: $*" >&2; exit 1; }

# sc_require TOOL...: each is on PATH, or one line naming the package.
sc_require() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || sc_die "$tool is not installed (scripts/setup.sh --tests installs slurm-wlm, munge and iproute2)"
  done
}

# sc_daemon NAME CMD...: starts CMD in its own session under the lifetime bound, output to
# DIR/log/NAME.out; records its pid (that of `timeout`) in DIR/NAME.daemon.
sc_daemon() {
  local name=$1; shift
  FLEXSP_SLURM_CLUSTER=$sc_dir setsid timeout -k 5 "$sc_lifetime" "$@" >"$sc_dir/log/$name.out" 2>&1 </dev/null &
  echo $! >"$sc_dir/$name.daemon"
}

# sc_wait_until SECONDS WHAT CMD...: polls CMD every 0.2 s; on time-out names WHAT and shows the logs.
sc_wait_until() {
  local secs=$1 what=$2 i; shift 2
  for ((i = 0; i < secs * 5; ++i)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "$sc_name: timed out after ${secs}s waiting for $what; logs:" >&2
  tail -n 20 "$sc_dir"/log/* >&2 || true
  return 1
}

# sc_prepare: checks that DIR is an existing empty directory and lays it out: munge/ (key
# and socket; munged wants its socket's directories reachable by all and its key
# private), state/, log/.
sc_prepare() {
  [[ -d $sc_dir && -z $(ls -A "$sc_dir") ]] || sc_die "$sc_dir must be an existing empty directory"
  sc_dir=$(cd "$sc_dir" && pwd)
  ((${#sc_dir} <= 80)) || sc_die "$sc_dir: the path is too long for munge's socket (80 characters at most)"
  chmod 755 "$sc_dir"
  mkdir -p "$sc_dir"/{munge,state,log}
  chmod 755 "$sc_dir/munge"
  mungekey --create --keyfile="$sc_dir/munge/munge.key" >/dev/null
  chmod 600 "$sc_dir/munge/munge.key"
}

# sc_start_munged: munged on the machine itself; every node reaches it through its socket
# under DIR (a path: network namespaces do not separate it).
sc_start_munged() {
  sc_daemon munged munged -F --socket="$sc_dir/munge/munge.sock" --key-file="$sc_dir/munge/munge.key" \
    --pid-file="$sc_dir/munge/munged.pid" --log-file="$sc_dir/log/munged.log" --seed-file="$sc_dir/munge/munged.seed"
  sc_wait_until 20 "munged" test -S "$sc_dir/munge/munge.sock"
}

# sc_slurm_conf_common: the slurm.conf lines both clusters write (the caller adds the hosts,
# ports, per-node paths, nodes and partition). Plugins: proctrack/linuxproc, task/none,
# MpiDefault=pmix, select/cons_tres; SlurmUser=root; nodes declare their CPUs whatever the
# machine has (SlurmdParameters=config_overrides) so that multi-rank jobs fit on 2 cores.
sc_slurm_conf_common() {
  cat <<EOF
ClusterName=flexsptest
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sc_dir/munge/munge.sock
StateSaveLocation=$sc_dir/state
SlurmctldPidFile=$sc_dir/slurmctld.pid
SlurmctldLogFile=$sc_dir/log/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$sc_dir/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=10
MinJobAge=600
InactiveLimit=0
EOF
  : >"$sc_dir/plugstack.conf"
}

# sc_ancestors: this process and its ancestors, " pid pid ... ", never to be signalled.
sc_ancestors() {
  local mine=" $$ " p=$$ stat
  while [[ $p -gt 1 ]]; do
    stat=$(cat "/proc/$p/stat" 2>/dev/null) || break
    stat=${stat##*) }  # the fields after "pid (comm) ": state ppid ...
    read -r _ p _ <<<"$stat"
    mine+="$p "
  done
  echo "$mine"
}

# sc_leftovers: pids of processes this cluster started that still run: the daemons and what
# they fork (FLEXSP_SLURM_CLUSTER=DIR in their environment) and job processes
# (SLURM_CONF=DIR/slurm.conf with a SLURM_JOB_ID); with sc_extra_leftovers defined, also
# the pids it prints. Never this script or its callers.
sc_leftovers() {
  local mine env_file pid envs
  mine=$(sc_ancestors)
  for env_file in /proc/[0-9]*/environ; do
    pid=${env_file#/proc/}; pid=${pid%/environ}
    [[ $mine == *" $pid "* ]] && continue
    envs=$(tr '\0' '\n' 2>/dev/null <"$env_file") || continue
    if grep -qxF "FLEXSP_SLURM_CLUSTER=$sc_dir" <<<"$envs" ||
       { grep -qxF "SLURM_CONF=$sc_dir/slurm.conf" <<<"$envs" && grep -q '^SLURM_JOB_ID=' <<<"$envs"; }; then
      echo "$pid"
    fi
  done
  if declare -F sc_extra_leftovers >/dev/null; then
    local p
    for p in $(sc_extra_leftovers); do [[ $mine == *" $p "* ]] || echo "$p"; done
  fi
  return 0
}

# sc_cancel_jobs: cancels every job while slurmctld answers; waits up to 10 s for the queue to empty.
sc_cancel_jobs() {
  [[ -f $sc_dir/slurmctld.daemon ]] && scontrol ping >/dev/null 2>&1 || return 0
  local i jobs
  jobs=$(squeue -h -o %i 2>/dev/null || true)
  # shellcheck disable=SC2086  # job ids, one word each
  [[ -z $jobs ]] || scancel --quiet $jobs 2>/dev/null || true
  for ((i = 0; i < 50; ++i)); do
    [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
    sleep 0.2
  done
}

# sc_stop_daemons NAME...: SIGTERM to the recorded daemons, then waits for them and every
# leftover (6 s), SIGTERM to what remains, and at last SIGKILL.
sc_stop_daemons() {
  local name round left
  for name in "$@"; do
    if [[ -f $sc_dir/$name.daemon ]]; then kill -TERM "$(cat "$sc_dir/$name.daemon")" 2>/dev/null || true; fi
  done
  for round in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 kill; do
    mapfile -t left < <(sc_leftovers)
    ((${#left[@]} == 0)) && break
    if [[ $round == kill ]]; then
      echo "$sc_name: killing leftover processes ${left[*]}" >&2
      kill -KILL "${left[@]}" 2>/dev/null || true
    else
      if [[ $round == 8 ]]; then kill -TERM "${left[@]}" 2>/dev/null || true; fi
      sleep 0.4
    fi
  done
  rm -f "$sc_dir"/*.daemon
}
