#!/usr/bin/env bash
# A test bed of N "nodes" on one Linux machine, so that multi-node claims
# (tiers with replicas on other nodes, under mpirun) are tested on nodes that
# each have their own network, host name and memory, not on a map of ranks
# to node numbers inside one kernel. Needs root (network namespaces).
#
#   scripts/node-bed.sh BED up N [--shm-size SIZE] [--owner PID]
#   scripts/node-bed.sh BED down
#   scripts/node-bed.sh BED exec NODE CMD...      # NODE: 2 or node2
#   scripts/node-bed.sh BED mpirun MPIRUN_ARGS... # mpirun from node0
#   scripts/node-bed.sh BED pids NODE      # its processes' ids
#   scripts/node-bed.sh BED kill NODE      # every process in it; memory gone
#   scripts/node-bed.sh BED replace NODE   # kill, then an empty node
#   scripts/node-bed.sh BED reap           # every process but the holders
#   scripts/node-bed.sh BED reset          # reap, links up, killed nodes back
#   scripts/node-bed.sh BED partition NODE | heal NODE   # its link down/up
#   scripts/node-bed.sh BED slow NODE [PERCENT]  # its CPU capped (cgroup)
#   scripts/node-bed.sh BED unslow NODE          # the cap lifted
#   scripts/node-bed.sh prune              # beds whose owner has exited
#
# Node i is network namespace ckb-BED-n<i> with address 10.77.0.(i+1)/24 on
# a bridge in namespace ckb-BED-sw (each bed has its own bridge, so beds run
# side by side and nothing is added to the machine's own network), and a
# holder process (sleep) that keeps its UTS namespace (host name node<i>)
# and mount namespace (its own tmpfs on /dev/shm, an /etc/hosts naming the
# nodes) alive; `exec` enters all three with nsenter. Every other folder is
# the machine's, so a folder outside /dev/shm is shared by all nodes (the
# durable root). `mpirun` runs Open MPI in node0 with a hostfile of
# node0..node<N-1> (2 slots each) and an rsh agent that starts each node's
# daemon inside that node, over TCP on the bed's subnet only; the ranks
# yield the CPU while they wait, since the nodes share this machine's
# cores.
#
# `slow` puts a node's processes in a cpu cgroup of its own
# (ckpt-node-bed-BED-n<i>: cgroup v2's cpu.max, or v1's cpu controller)
# capped at PERCENT of one CPU (default 5) for all of them together;
# `exec` into a slow node joins it first, so whatever starts there later
# (a job's daemon, its ranks) is capped too. `unslow`, `reset`, `down` and
# `prune` move the processes back and remove the cgroup.
#
# State lives in /run/ckpt-node-bed/BED. `up` first removes beds whose owner
# process (--owner, default the caller) is gone, so a test killed before
# its `down` leaves nothing for long.
set -euo pipefail

self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
state_root=/run/ckpt-node-bed
subnet=10.77.0

die() {
  echo "node-bed: $*" >&2
  exit 1
}

[[ $# -ge 1 ]] || die "usage: node-bed.sh BED up|down|exec|mpirun|pids|kill|replace|reap|reset|partition|heal|slow|unslow ... (or: prune)"

# Whether process $1 runs (a zombie does not: it may wait long for a
# parent that reaps it).
alive() {
  local st
  st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n "$st" && "$st" != Z ]]
}

# Node $1's holder, if it runs: a process in a UTS namespace other than
# the host's (recorded by `up`). A pid file naming a host process (the
# holder gone and its id taken by another) names none: entering or killing
# "the node" would then reach every process on the machine. Without the
# record, no holder is trusted.
node_holder() {
  local holder uts host
  holder="$(cat "$state/node$1.pid" 2>/dev/null)" || return 1
  host="$(cat "$state/host-uts" 2>/dev/null)" || return 1
  [[ -n "$host" ]] || return 1
  alive "$holder" || return 1
  uts="$(readlink "/proc/$holder/ns/uts" 2>/dev/null)" || return 1
  [[ -n "$uts" && "$uts" != "$host" ]] || return 1
  echo "$holder"
}

# Process ids whose UTS namespace is node $1's (the holder's).
node_pids() {
  local holder uts=""
  if holder="$(node_holder "$1")"; then
    uts="$(readlink "/proc/$holder/ns/uts" 2>/dev/null)" || uts=""
  fi
  if [[ -n "$uts" ]]; then
    # One find, not a readlink per process: `slow` must catch a running job.
    uts="${uts//[/\\[}"
    find /proc/[0-9]*/ns/uts -maxdepth 0 -lname "${uts//]/\\]}" 2>/dev/null |
      cut -d/ -f3 || true
  fi
  # Processes started in the network namespace alone (ip netns exec).
  ip netns pids "ckb-$bed-n$1" 2>/dev/null || true
}

# SIGKILLs node $1's processes (but the holder unless $2 is "all") until
# none is left.
kill_node() {
  local holder pids p
  holder="$(node_holder "$1" || echo none)"
  for _ in $(seq 200); do
    pids=()
    for p in $(node_pids "$1" | sort -u); do
      [[ "$p" == "$$" || "$p" == "$BASHPID" ]] && continue
      [[ "$2" != all && "$p" == "$holder" ]] && continue
      alive "$p" && pids+=("$p")
    done
    [[ ${#pids[@]} -eq 0 ]] && return 0
    kill -KILL "${pids[@]}" 2>/dev/null || true
    sleep 0.05
  done
  die "processes of node $1 outlived SIGKILL: ${pids[*]}"
}

# Starts node $1's holder: a new UTS and mount namespace inside its network
# namespace, with its host name and an empty tmpfs on /dev/shm.
start_holder() {
  local i="$1" pidfile="$state/node$1.pid"
  rm -f "$pidfile"
  # shellcheck disable=SC2016 # the inner shell expands its own arguments
  setsid ip netns exec "ckb-$bed-n$i" \
    unshare --uts --mount --propagation private \
    sh -c 'hostname "node$1" &&
           mount -t tmpfs -o "size=$2,mode=1777" "ckb-$3-shm$1" /dev/shm &&
           mount --bind "$4/hosts" /etc/hosts &&
           echo $$ > "$4/node$1.pid.new" && mv "$4/node$1.pid.new" "$4/node$1.pid" &&
           exec sleep infinity' \
    sh "$i" "$(cat "$state/shm-size")" "$bed" "$state" \
    </dev/null >"$state/node$i.holder.log" 2>&1 &
  local n
  for n in $(seq 200); do
    [[ -s "$pidfile" ]] && return 0
    sleep 0.02
  done
  die "node $i did not start: $(cat "$state/node$i.holder.log")"
}

# Node number from "2" or "node2".
node_num() {
  local n="${1#node}"
  [[ "$n" =~ ^[0-9]+$ && -f "$state/node$n.pid" ]] || die "no node $1 in bed $bed"
  echo "$n"
}

# Where cpu cgroups are made: cgroup v2 with the cpu controller, or v1's
# cpu hierarchy.
cgroup_root() {
  local v2=/sys/fs/cgroup v1=/sys/fs/cgroup/cpu
  if [[ -f "$v2/cgroup.controllers" ]]; then
    grep -qw cpu "$v2/cgroup.controllers" ||
      die "slow: no cpu cgroup to use: cgroup v2 at $v2 has no cpu controller"
    grep -qw cpu "$v2/cgroup.subtree_control" ||
      echo +cpu >"$v2/cgroup.subtree_control" ||
      die "slow: no cpu cgroup to use: cannot enable the cpu controller in $v2/cgroup.subtree_control"
    echo "$v2"
  elif [[ -f "$v1/cpu.cfs_quota_us" ]]; then
    echo "$v1"
  else
    die "slow: no cpu cgroup to use: neither cgroup v2 at $v2 nor v1's cpu at $v1"
  fi
}

# Node $1's processes capped at $2 percent of one CPU, all together: 1 ms
# of CPU a period (the least the kernel allows), the period as long as the
# percentage asks (20 ms for 5%, 200 ms for 0.5%).
slow_node() {
  local dir period quota=1000 p
  period="$(awk -v p="$2" 'BEGIN { if (p + 0 > 0) printf "%d", 100000 / p }')"
  [[ -n "$period" && "$period" -ge "$quota" && "$period" -le 1000000 ]] ||
    die "slow: PERCENT must be from 0.1 to 100, not $2"
  dir="$(cgroup_root)/ckpt-node-bed-$bed-n$1"
  [[ -d "$dir" ]] || mkdir "$dir" || die "slow: no cpu cgroup to use: cannot make $dir"
  echo "$dir" >"$state/node$1.cgroup"
  if [[ -f "$dir/cpu.max" ]]; then
    echo "$quota $period" >"$dir/cpu.max"
  else
    echo "$period" >"$dir/cpu.cfs_period_us"
    echo "$quota" >"$dir/cpu.cfs_quota_us"
  fi
  for p in $(node_pids "$1" | sort -u); do
    [[ "$p" == "$$" || "$p" == "$BASHPID" ]] && continue
    echo "$p" >"$dir/cgroup.procs" 2>/dev/null || ! alive "$p" ||
      die "slow: cannot move process $p into $dir"
  done
}

# Moves whatever cgroup $1 holds to its parent, then removes it.
remove_cgroup() {
  local p
  for _ in $(seq 100); do
    [[ -d "$1" ]] || return 0
    while read -r p; do
      echo "$p" >"$(dirname "$1")/cgroup.procs" 2>/dev/null || true
    done <"$1/cgroup.procs"
    rmdir "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "node-bed: cannot remove cgroup $1" >&2
  return 1
}

unslow_node() {
  [[ -f "$state/node$1.cgroup" ]] || return 0
  remove_cgroup "$(cat "$state/node$1.cgroup")" || exit 1
  rm -f "$state/node$1.cgroup"
}

# The cgroups of slow nodes, of every bed: ckpt-node-bed-BED-n<i>.
slow_cgroups() {
  local dir
  for dir in /sys/fs/cgroup/ckpt-node-bed-* /sys/fs/cgroup/cpu/ckpt-node-bed-*; do
    [[ -d "$dir" ]] && echo "$dir"
  done
  return 0
}

down() {
  local i dir
  if [[ -d "$state" ]]; then
    for i in $(seq 0 $(($(cat "$state/nodes" 2>/dev/null || echo 0) - 1))); do
      kill_node "$i" all
    done
  fi
  for dir in $(slow_cgroups); do
    if [[ "$dir" == */ckpt-node-bed-"$bed"-n* ]]; then
      remove_cgroup "$dir" || exit 1
    fi
  done
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^ckb-$bed-(n[0-9]+|sw)$" || true); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$state"
}

prune() {
  local dir owner b
  for dir in "$state_root"/*/; do
    [[ -d "$dir" ]] || continue
    b="$(basename "$dir")"
    # A bed being made may not have its owner written yet.
    [[ -f "$dir/owner" || -n "$(find "$dir" -maxdepth 0 -mmin +1)" ]] || continue
    owner="$(cat "$dir/owner" 2>/dev/null || echo 0)"
    if [[ "$owner" == 0 ]] || ! alive "$owner"; then
      "$self" "$b" down || true
    fi
  done
  # Namespaces of a bed whose state folder is gone.
  for ns in $(ip netns list | awk '{print $1}' | grep -E '^ckb-' || true); do
    b="${ns#ckb-}"
    b="${b%-*}"
    if [[ ! -d "$state_root/$b" ]]; then
      for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  # Cgroups of slow nodes of a bed whose state folder is gone.
  for dir in $(slow_cgroups); do
    b="${dir##*/ckpt-node-bed-}"
    b="${b%-*}"
    [[ -d "$state_root/$b" ]] || remove_cgroup "$dir" || true
  done
}

if [[ "$1" == prune ]]; then
  prune
  exit 0
fi

bed="$1"
shift
[[ "$bed" =~ ^[a-z0-9]{1,12}$ ]] || die "bed name '$bed': 1 to 12 lower-case letters or digits"
state="$state_root/$bed"
cmd="${1:-}"
shift || true

case "$cmd" in
  up)
    n="${1:?usage: node-bed.sh BED up N}"
    shift
    [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 200 ]] || die "up: N must be 1 to 200"
    shm_size=64m
    owner="$PPID"
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --shm-size) shm_size="$2"; shift 2 ;;
        --owner) owner="$2"; shift 2 ;;
        *) die "up: unknown option $1" ;;
      esac
    done
    [[ "$(id -u)" == 0 ]] || die "up: needs root (network namespaces)"
    prune
    [[ -e "$state" ]] && die "bed $bed is up already (node-bed.sh $bed down)"
    mkdir -p "$state"
    echo "$owner" >"$state/owner"
    # The host's UTS namespace, which no node's holder may share.
    readlink "/proc/$$/ns/uts" >"$state/host-uts" ||
      die "cannot read this process's UTS namespace"
    echo "$n" >"$state/nodes"
    echo "$shm_size" >"$state/shm-size"
    trap 'down' ERR
    sw="ckb-$bed-sw"
    ip netns add "$sw"
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    ip -n "$sw" link set lo up
    {
      echo "127.0.0.1 localhost"
      for i in $(seq 0 $((n - 1))); do echo "$subnet.$((i + 1)) node$i"; done
    } >"$state/hosts"
    : >"$state/hostfile"
    for i in $(seq 0 $((n - 1))); do
      ns="ckb-$bed-n$i"
      ip netns add "$ns"
      ip -n "$sw" link add "v$i" type veth peer name eth0 netns "$ns"
      ip -n "$sw" link set "v$i" master br0 up
      ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" link set lo up
      echo "node$i slots=2" >>"$state/hostfile"
      start_holder "$i"
    done
    # Open MPI's rsh agent: called as AGENT [options] HOST COMMAND..., like
    # ssh, which hands the words to the remote shell.
    cat >"$state/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host="\$1"; shift
exec "$self" "$bed" exec "\$host" sh -c "\$*"
EOF
    chmod +x "$state/agent"
    trap - ERR
    echo "$state"
    ;;
  down)
    down
    ;;
  exec)
    [[ $# -ge 2 ]] || die "usage: node-bed.sh BED exec NODE CMD..."
    i="$(node_num "$1")"
    shift
    if [[ -f "$state/node$i.cgroup" ]]; then
      # Inside a node (mpirun's agent runs in node0), /sys is the node's
      # own sysfs, without the cgroup mounts: the owner's view has them.
      procs="$(cat "$state/node$i.cgroup")/cgroup.procs"
      [[ -f "$procs" ]] || procs="/proc/$(cat "$state/owner")/root$procs"
      echo $$ >"$procs" || die "exec: cannot join slow node $i's cgroup"
    fi
    holder="$(node_holder "$i")" ||
      die "node $i is down (killed): replace or reset it first"
    exec nsenter -t "$holder" --net --uts --mount --wd="$PWD" -- "$@"
    ;;
  mpirun)
    mpirun="${CKPT_MPIRUN:-mpirun}"
    exec "$self" "$bed" exec 0 env OMPI_ALLOW_RUN_AS_ROOT=1 \
      OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$mpirun" \
      --hostfile "$state/hostfile" \
      --mca plm_rsh_agent "$state/agent" \
      --mca plm_rsh_no_tree_spawn 1 \
      --mca mpi_yield_when_idle 1 \
      --mca btl tcp,self \
      --mca btl_tcp_if_include "$subnet.0/24" \
      --mca oob_tcp_if_include "$subnet.0/24" \
      "$@"
    ;;
  pids)
    i="$(node_num "${1:?usage: node-bed.sh BED pids NODE}")"
    node_pids "$i" | sort -un
    ;;
  kill)
    i="$(node_num "${1:?usage: node-bed.sh BED kill NODE}")"
    kill_node "$i" all
    ;;
  replace)
    i="$(node_num "${1:?usage: node-bed.sh BED replace NODE}")"
    kill_node "$i" all
    start_holder "$i"
    ;;
  reap)
    for i in $(seq 0 $(($(cat "$state/nodes") - 1))); do kill_node "$i" holders; done
    ;;
  reset)
    # Every node as `up` left it: linked, not slowed, running nothing but
    # its holder (a node killed gets a new one; memory of live nodes is
    # kept).
    for i in $(seq 0 $(($(cat "$state/nodes") - 1))); do
      ip -n "ckb-$bed-sw" link set "v$i" up
      kill_node "$i" holders
      unslow_node "$i"
      node_holder "$i" >/dev/null || start_holder "$i"
    done
    ;;
  slow)
    i="$(node_num "${1:?usage: node-bed.sh BED slow NODE [PERCENT]}")"
    slow_node "$i" "${2:-5}"
    ;;
  unslow)
    i="$(node_num "${1:?usage: node-bed.sh BED unslow NODE}")"
    unslow_node "$i"
    ;;
  partition | heal)
    i="$(node_num "${1:?usage: node-bed.sh BED $cmd NODE}")"
    ip -n "ckb-$bed-sw" link set "v$i" "$([[ $cmd == partition ]] && echo down || echo up)"
    ;;
  *)
    die "unknown command '$cmd'"
    ;;
esac
