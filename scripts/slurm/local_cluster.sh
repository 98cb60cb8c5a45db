#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for testing run.sub (tests/test_slurm_cluster.py):
#
#   export SLURM_CONF="$(scripts/slurm/local_cluster.sh start)"   # prints the slurm.conf it made
#   sbatch -N1 --wait run.sub ...
#   scripts/slurm/local_cluster.sh stop
#
# start renders scripts/slurm/slurm.conf for this host (node `hostname -s`, the CPUs `slurmd -C` counts) into
# ${TMPDIR:-/tmp}/paddlebert-slurm/, then starts a private munged (its own key and socket there), slurmctld and
# slurmd, and waits until the node takes jobs. Every state folder, pid file and log is in that folder; start
# empties it first. stop ends the three daemons by their pid files and leaves the logs. It installs nothing:
# it needs Debian's slurm-wlm and munge (apt-get install slurm-wlm munge), and root, as slurmd starts each job
# as the user who submitted it.
set -euo pipefail

readonly state_dir="${TMPDIR:-/tmp}/paddlebert-slurm"
readonly conf="$state_dir/slurm.conf"
template="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/slurm.conf"
readonly template
readonly daemons=(slurmd slurmctld munged)  # in the order stop ends them

die() {
  echo "${0##*/}: $*" >&2
  exit 1
}

pid_file() {  # daemon
  case "$1" in
    munged) echo "$state_dir/munge/munged.pid" ;;
    *) echo "$state_dir/$1.pid" ;;
  esac
}

running_pid() {  # daemon: prints its pid when its pid file names a live process
  local file pid
  file="$(pid_file "$1")"
  [[ -s "$file" ]] || return 1
  pid="$(<"$file")"
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

show_log_and_die() {  # log message
  tail -n 20 "$1" >&2 2>/dev/null || true
  die "$2 (log: $1)"
}

start() {
  (( EUID == 0 )) || die "start must run as root: slurmd starts each job as the user who submitted it"
  local tool
  for tool in munged slurmctld slurmd sinfo scontrol; do
    command -v "$tool" >/dev/null || die "$tool not found: install Debian's slurm-wlm and munge"
  done
  local daemon
  for daemon in "${daemons[@]}"; do
    if running_pid "$daemon" >/dev/null; then
      die "$daemon is already running from $state_dir: run '$0 stop' first"
    fi
  done
  rm -rf "$state_dir"
  mkdir -p "$state_dir/slurmctld" "$state_dir/slurmd"
  # munged refuses a socket folder that others may write or cannot enter, and a key that others may read.
  install -d -m 0755 "$state_dir/munge"
  head -c 1024 /dev/urandom > "$state_dir/munge/munge.key"
  chmod 0400 "$state_dir/munge/munge.key"
  munged --socket="$state_dir/munge/munge.socket.2" --key-file="$state_dir/munge/munge.key" \
    --pid-file="$(pid_file munged)" --log-file="$state_dir/munge/munged.log" \
    --seed-file="$state_dir/munge/munged.seed" \
    || show_log_and_die "$state_dir/munge/munged.log" "munged did not start"

  local node cpus
  node="$(hostname -s)"
  cpus="$(slurmd -C | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' | head -n 1)"
  [[ -n "$cpus" ]] || die "slurmd -C printed no CPUs= count"
  sed -e "s|@NODE@|$node|g" -e "s|@CPUS@|$cpus|g" -e "s|@DIR@|$state_dir|g" "$template" > "$conf"
  export SLURM_CONF="$conf"
  slurmctld || show_log_and_die "$state_dir/slurmctld.log" "slurmctld did not start"
  slurmd || show_log_and_die "$state_dir/slurmd.log" "slurmd did not start"

  local waited state=""
  for (( waited = 0; waited < 300; waited++ )); do
    state="$(sinfo --noheader --nodes="$node" --format=%t 2>/dev/null || true)"
    [[ "$state" == idle ]] && break
    sleep 0.1
  done
  [[ "$state" == idle ]] || show_log_and_die "$state_dir/slurmd.log" \
    "node $node is '${state:-unknown}' after 30 s, not idle"
  echo "$conf"
}

stop() {
  local daemon pid waited
  for daemon in "${daemons[@]}"; do
    pid="$(running_pid "$daemon")" || continue
    kill "$pid"
    for (( waited = 0; waited < 100; waited++ )); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && die "$daemon (pid $pid) still runs 10 s after SIGTERM"
  done
  return 0
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) die "usage: $0 start|stop" ;;
esac
