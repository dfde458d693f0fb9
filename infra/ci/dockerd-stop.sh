#!/usr/bin/env bash
# Stop the daemon that dockerd-start.sh started (by its pid file; idempotent).
set -uo pipefail
ROOT="${KSWARM_DOCKERD_ROOT:-/var/lib/kswarm-dockerd}"
PIDFILE="$ROOT/dockerd.pid"
[ -f "$PIDFILE" ] || exit 0
PID="$(cat "$PIDFILE")"
if kill -0 "$PID" 2>/dev/null; then
  kill -TERM "$PID"
  for _ in $(seq 1 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$PID" 2>/dev/null && kill -KILL "$PID"
fi
rm -f "$PIDFILE"
