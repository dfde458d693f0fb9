#!/usr/bin/env bash
# Stop the private Slurm started by start-slurm.sh: slurmd, slurmctld, munged, each by its pid file.
set -uo pipefail
DIR="${KSWARM_SLURM_DIR:-/var/lib/kswarm-slurm}"
stop() {
  local pidfile="$1"
  [ -f "$pidfile" ] || return 0
  local pid
  pid="$(cat "$pidfile")"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$pidfile"
}
stop "$DIR/slurmd.pid"
stop "$DIR/slurmctld.pid"
stop "$DIR/munge/munged.pid"
exit 0
